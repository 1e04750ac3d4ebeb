#!/usr/bin/env python3
"""One process of the mount's load test (test/mount/load.test.ts). Prints one JSON line when done.

    load_worker.py writer DIR ID WRITERS NAMES_PER_WRITER SECONDS
    load_worker.py reader DIR ID WRITERS NAMES_PER_WRITER SECONDS

Every file is self-checking: its first 32 bytes are the SHA-256 of the rest, so a reader detects a torn,
mixed or stale-and-new read without knowing what the writers did. Writers own disjoint names and
rewrite them whole (O_TRUNC in place, or a temporary file renamed over, a quarter of them fsynced);
readers read random names whole.
"""
import errno
import hashlib
import json
import os
import random
import sys
import time

SIZES = [256 * 1024, 1 << 20, 2 << 20, 2 << 20]


def main():
    role, d, ident, writers, per_writer, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
    rng = random.Random(ident * 7919 + (1 if role == "writer" else 2))
    os.makedirs(d, exist_ok=True)
    out = {"role": role, "id": ident, "ops": 0, "bytes": 0, "wrong": 0, "wrongSamples": [], "notYet": 0, "errors": {}, "maxOpMs": 0.0}
    end = time.monotonic() + seconds
    step = 0
    if role == "writer":
        # Every name is born whole (a renamed temporary): a file being created in place is legitimately
        # visible while it is written, which readers here could not tell from a torn read.
        for i in range(per_writer):
            body = os.urandom(rng.choice(SIZES) - 32)
            tmp = os.path.join(d, "tmp-%d-init-%d" % (ident, i))
            with open(tmp, "wb") as f:
                f.write(hashlib.sha256(body).digest() + body)
            os.rename(tmp, os.path.join(d, "w%02d-%03d" % (ident, i)))
    while time.monotonic() < end:
        step += 1
        t0 = time.monotonic()
        stage = "open"
        try:
            if role == "writer":
                name = "w%02d-%03d" % (ident, rng.randrange(per_writer))
                body = os.urandom(rng.choice(SIZES) - 32)
                data = hashlib.sha256(body).digest() + body
                target = os.path.join(d, name)
                if rng.random() < 0.5:
                    path = target
                else:
                    path = os.path.join(d, "tmp-%d-%d" % (ident, step))
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    stage = "write"
                    os.write(fd, data)
                    if rng.random() < 0.25:
                        stage = "fsync"
                        os.fsync(fd)
                finally:
                    stage = "close"
                    os.close(fd)
                if path != target:
                    stage = "rename"
                    os.rename(path, target)
                out["bytes"] += len(data)
            else:
                name = "w%02d-%03d" % (rng.randrange(writers), rng.randrange(per_writer))
                try:
                    with open(os.path.join(d, name), "rb") as f:
                        data = f.read()
                except FileNotFoundError:
                    out["notYet"] += 1  # its writer has not created it yet
                    continue
                out["bytes"] += len(data)
                if len(data) < 32 or hashlib.sha256(data[32:]).digest() != data[:32]:
                    out["wrong"] += 1
                    if len(out["wrongSamples"]) < 5:
                        out["wrongSamples"].append({"name": name, "len": len(data), "atMs": round((time.monotonic() - end + seconds) * 1e3)})
            out["ops"] += 1
        except OSError as e:
            key = "%s:%s" % (stage, errno.errorcode.get(e.errno, str(e.errno)))
            out["errors"][key] = out["errors"].get(key, 0) + 1
        finally:
            out["maxOpMs"] = max(out["maxOpMs"], (time.monotonic() - t0) * 1e3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

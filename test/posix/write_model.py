#!/usr/bin/env python3
"""Property check of write sessions against an in-memory model, with direct system calls.

Each sequence opens a write session on a file (a new name, or an existing one reopened with O_TRUNC
or O_CREAT|O_TRUNC, O_WRONLY or O_RDWR), then runs random steps: pwrite at any offset (holes,
extends, overwrites), ftruncate up and down, truncate(2) by path, pread during the session (O_RDWR),
lseek(SEEK_END); after every step fstat and stat by path must give the model's size. A reader opened
on the previous version before the session must keep reading it whole. After close, the file must
read back byte-exact, its size and user.cascade.sha256 must match the model.

    write_model.py --mount M [--seed S] [--sequences N] [--steps K]

Prints one JSON line: {"sequences", "steps", "bytes_written", "failures": [...]}; each failure names
the seed, sequence and the steps up to the divergence, enough to replay it.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import time

MAX_SIZE = 3 * 1024 * 1024 + 4099  # crosses the 128 KiB and 1 MiB request sizes, stays fast


class Divergence(Exception):
    pass


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def pread_all(fd, n):
    out = b""
    while len(out) < n:
        chunk = os.pread(fd, n - len(out), len(out))
        if not chunk:
            break
        out += chunk
    return out


def rand_len(rng):
    # Mostly small writes, some 128 KiB-scale and some that span several MiB-sized requests.
    r = rng.random()
    if r < 0.5:
        return rng.randint(1, 4096)
    if r < 0.85:
        return rng.randint(4097, 300_000)
    return rng.randint(300_001, 1_500_000)


def run_sequence(mount, rng, seq, steps, names, stats, log):
    d = os.path.join(mount, "kv", "model-check", f"s{os.getpid()}")
    os.makedirs(d, exist_ok=True)

    def expect(cond, what):
        if not cond:
            raise Divergence(what)

    # Choose the file and how the session opens it.
    existing = [n for n in names if names[n] is not None]
    reuse = existing and rng.random() < 0.6
    name = rng.choice(existing) if reuse else f"f{seq}"
    path = os.path.join(d, name)
    access = rng.choice([os.O_WRONLY, os.O_RDWR])
    if reuse:
        flags = access | os.O_TRUNC | (os.O_CREAT if rng.random() < 0.5 else 0)
    else:
        flags = access | os.O_CREAT | os.O_EXCL
    previous = names.get(name)
    reader = os.open(path, os.O_RDONLY) if previous is not None else None
    ino_before = os.stat(path).st_ino if previous is not None else None
    log.append(["open", name, "rdwr" if access == os.O_RDWR else "wronly", "reuse" if reuse else "new"])
    fd = os.open(path, flags, 0o644)
    model = bytearray()
    try:
        expect(os.fstat(fd).st_size == 0, f"fstat after open: {os.fstat(fd).st_size}")
        if ino_before is not None:
            expect(os.fstat(fd).st_ino == ino_before, "a rewrite keeps the inode number")
        for _ in range(rng.randint(1, steps)):
            r = rng.random()
            if r < 0.55:
                n = rand_len(rng)
                off = rng.randint(0, min(len(model) + 200_000, MAX_SIZE - n)) if rng.random() < 0.7 else len(model)
                off = max(0, min(off, MAX_SIZE - n))
                data = rng.randbytes(n)
                log.append(["pwrite", off, n])
                expect(os.pwrite(fd, data, off) == n, "short pwrite")
                if off > len(model):
                    model.extend(b"\0" * (off - len(model)))
                model[off:off + n] = data
                stats["bytes_written"] += n
            elif r < 0.70:
                size = rng.randint(0, min(max(2 * len(model), 10_000), MAX_SIZE))
                log.append(["ftruncate", size])
                os.ftruncate(fd, size)
                model[:] = model[:size] + b"\0" * max(0, size - len(model))
            elif r < 0.75:
                size = rng.randint(0, min(max(2 * len(model), 10_000), MAX_SIZE))
                log.append(["truncate-path", size])
                os.truncate(path, size)  # by path: the write session's file
                model[:] = model[:size] + b"\0" * max(0, size - len(model))
            elif r < 0.90 and access == os.O_RDWR:
                off = rng.randint(0, len(model) + 10)
                n = rng.randint(1, 400_000)
                log.append(["pread", off, n])
                got = os.pread(fd, n, off)
                expect(got == bytes(model[off:off + n]), f"pread({off}, {n}): {len(got)} bytes differ from the model's {len(model[off:off + n])}")
            elif r < 0.95:
                log.append(["seek-end"])
                expect(os.lseek(fd, 0, os.SEEK_END) == len(model), f"SEEK_END {os.lseek(fd, 0, os.SEEK_END)} != {len(model)}")
            elif reader is not None:
                log.append(["read-previous"])
                expect(pread_all(reader, len(previous) + 1) == previous, "a reader of the previous version saw other bytes")
            stats["steps"] += 1
            expect(os.fstat(fd).st_size == len(model), f"fstat size {os.fstat(fd).st_size} != model {len(model)}")
            expect(os.stat(path).st_size == len(model), f"stat size {os.stat(path).st_size} != model {len(model)}")
    finally:
        os.close(fd)
    log.append(["close"])
    expect(read_all(path) == bytes(model), f"content after close differs (size {os.stat(path).st_size}, model {len(model)})")
    expect(os.stat(path).st_size == len(model), "size after close")
    sha = os.getxattr(path, "user.cascade.sha256").decode()
    expect(sha == hashlib.sha256(model).hexdigest(), "user.cascade.sha256 is not the model's")
    if ino_before is not None:
        expect(os.stat(path).st_ino == ino_before, "the inode number after the commit")
    if reader is not None:
        expect(pread_all(reader, len(previous) + 1) == previous, "a reader of the previous version, after the commit")
        os.close(reader)
    names[name] = bytes(model)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mount", required=True)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--sequences", type=int, default=30)
    ap.add_argument("--steps", type=int, default=12, help="at most this many steps per session")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    names = {}
    stats = {"seed": a.seed, "sequences": 0, "steps": 0, "bytes_written": 0, "failures": []}
    for seq in range(a.sequences):
        log = []
        try:
            run_sequence(a.mount, rng, seq, a.steps, names, stats, log)
        except (Divergence, OSError) as e:
            what = str(e) if isinstance(e, Divergence) else f"OSError {e.errno} {e.strerror}: {e.filename}"
            # The steps up to the divergence; the same seed and sequence count replay them exactly.
            stats["failures"].append({"sequence": seq, "what": what, "steps": log[-40:],
                                      "replay": f"write_model.py --mount M --seed {a.seed} --sequences {seq + 1}"})
        stats["sequences"] += 1
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())

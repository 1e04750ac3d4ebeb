#!/usr/bin/env python3
"""Writer for the mount's kill -9 loop (test/mount/crash-loop.test.ts). Runs until the mount goes away.

Each step writes a whole file and says what it is about to make visible, then what fsync (or a rename
of an fsynced file) acknowledged, one line each on stdout, flushed before and after the call:
    W <name> <sha256>   about to write (or rename into) <name> with this content
    A <name> <sha256>   acknowledged: fsync returned (or the rename of an fsynced file returned)
Operations: create/overwrite with O_TRUNC + write + fsync; write a temporary file, fsync it and rename
it over a name. Sizes vary from empty to 1 MiB. Usage: crash_writer.py DIR SEED NAMES
"""
import hashlib
import os
import random
import sys


def content(seed, step, size):
    block = hashlib.sha256(b"%d-%d" % (seed, step)).digest()
    return (block * (size // 32 + 1))[:size]


def write_fsynced(path, data, flag):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flag, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    d, seed, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    step = 0
    try:
        while True:
            step += 1
            name = "f%03d" % rng.randrange(names)
            size = rng.choice([0, 1, 4095, 4096, 65537, 300000, 1 << 20])
            data = content(seed, step, size)
            sha = hashlib.sha256(data).hexdigest()
            if rng.random() < 0.6:
                say("W %s %s" % (name, sha))
                write_fsynced(os.path.join(d, name), data, os.O_TRUNC)
                say("A %s %s" % (name, sha))
            else:
                tmp = "tmp-%d-%d" % (seed, step)
                write_fsynced(os.path.join(d, tmp), data, os.O_EXCL)
                say("W %s %s" % (name, sha))
                os.rename(os.path.join(d, tmp), os.path.join(d, name))
                say("A %s %s" % (name, sha))
    except OSError:
        return  # the daemon was killed: the mount answers ENOTCONN


if __name__ == "__main__":
    main()

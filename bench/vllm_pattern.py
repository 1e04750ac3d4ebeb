#!/usr/bin/env python3
"""vLLM's file-tier pattern (vllm/v1/kv_offload/tiering/fs/io.py), for the cluster suite.

store DIR N SIZE THREADS: N blocks of SIZE bytes, each written by one of THREADS threads as vLLM does:
os.path.exists of the final name first, a temp file opened O_CREAT|O_EXCL|O_WRONLY (O_DIRECT where
the file system takes it), one write, close, os.replace over the final name. Prints the wall time.
exists DIR N: os.path.exists of every stored block, in order.
load DIR N SIZE THREADS: a fresh process reads every block (open, readinto, close) and checks its
bytes (each block is SIZE bytes of its index's repeated pattern) after the clock stops. Prints the
wall time. Both store and load use buffers made before the clock starts, as vLLM does.
Output: one JSON line {"ms": ...}.
"""
import json
import mmap
import os
import sys
import threading
import time

PAGE_BYTES = 4096


def pattern(i, size):
    unit = (b"%016d" % i) * 4096
    return (unit * (size // len(unit) + 1))[:size]


def run_threads(n, threads, work):
    """work(i) for i in range(n), spread over `threads` threads; the wall time in ms (the first error raised)."""
    errors = []

    def run(indices):
        try:
            for i in indices:
                work(i)
        except Exception as e:  # noqa: BLE001 - reported to the caller
            errors.append(repr(e))

    t0 = time.perf_counter()
    ts = [threading.Thread(target=run, args=(list(range(t, n, threads)),)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ms = (time.perf_counter() - t0) * 1000
    if errors:
        raise SystemExit(errors[0])
    return ms


def store(d, n, size, threads):
    os.makedirs(d, exist_ok=True)
    # The blocks' bytes in page-aligned buffers (O_DIRECT needs them), made and touched before the
    # clock starts, as vLLM writes from its own pinned buffers: a buffer mapped per write would time
    # its page faults (about 17 us per 4 KiB page on the VM this runs on) rather than the write.
    bufs = []
    for i in range(n):
        buf = mmap.mmap(-1, size)
        buf.write(pattern(i, size))
        bufs.append(buf)

    def one(i):
        final = f"{d}/{i:08x}.bin"
        if os.path.exists(final):
            return
        tmp = f"{final}.{threading.get_ident()}.tmp"
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
        try:
            fd = os.open(tmp, flags | getattr(os, "O_DIRECT", 0), 0o644)
        except OSError:
            fd = os.open(tmp, flags, 0o644)
        try:
            os.write(fd, bufs[i])
        finally:
            os.close(fd)
        os.replace(tmp, final)

    ms = run_threads(n, threads, one)
    for buf in bufs:
        buf.close()
    return ms


def exists(d, n):
    t0 = time.perf_counter()
    for i in range(n):
        if not os.path.exists(f"{d}/{i:08x}.bin"):
            raise SystemExit(f"block {i} missing")
    return (time.perf_counter() - t0) * 1000


def load(d, n, size, threads):
    # One buffer per block, allocated and touched before the clock starts (vLLM reads into its own
    # buffers); the bytes are checked after it stops, so the time is the opens and reads alone.
    bufs = [bytearray(size) for _ in range(n)]
    for buf in bufs:
        buf[::PAGE_BYTES] = b"\1" * len(range(0, size, PAGE_BYTES))
    got = [0] * n

    def one(i):
        fd = os.open(f"{d}/{i:08x}.bin", os.O_RDONLY)
        try:
            got[i] = os.readv(fd, [bufs[i]])
        finally:
            os.close(fd)

    ms = run_threads(n, threads, one)
    for i in range(n):
        if got[i] != size or bufs[i] != pattern(i, size):
            raise SystemExit(f"block {i}: wrong bytes")
    return ms


def main():
    op, d = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3])
    if op == "store":
        ms = store(d, n, int(sys.argv[4]), int(sys.argv[5]))
    elif op == "exists":
        ms = exists(d, n)
    elif op == "load":
        ms = load(d, n, int(sys.argv[4]), int(sys.argv[5]))
    else:
        raise SystemExit(f"unknown op {op}")
    print(json.dumps({"ms": ms}))


if __name__ == "__main__":
    main()

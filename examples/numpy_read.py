#!/usr/bin/env python3
"""Read a KV block from a Cascade mount with numpy, the two ways inference code does.

1. np.fromfile: a raw block file (what vLLM, LMCache and SGLang write) as an array of --dtype,
   reshaped to --shape if given. Its bytes are checked against the file's user.cascade.sha256, which
   Cascade computed when the block was committed.
2. np.load(mmap_mode='r'): with --npy PATH (a path under the mount), the array is first saved there
   with np.save (one whole-file write, committed as a new version at close), then mapped read-only:
   its pages come from the daemon as they are touched. Shared read-only mappings work on the native
   engine (the default, FUSE 7.39+) and with `--kernel-cache`; on the fuse-native engine under
   direct I/O they fail with ENODEV, and this falls back to a private copy-on-write mapping
   (mmap_mode='c'), which works everywhere.

Usage:
    python3 examples/numpy_read.py MNT/kv/llama-3-8b/req-0/block-000.bin \\
        [--dtype float16] [--shape 2,32,8,16,128] [--npy MNT/kv/llama-3-8b/req-0/block-000.npy]

Prints one line per read, e.g.
    fromfile bytes=4194304 dtype=float16 shape=(2, 4, 8, 256, 128) sha256=<hex> verified=user.cascade.sha256
    npy-mmap mode=r bytes=4194304 dtype=float16 shape=(2, 4, 8, 256, 128) sha256=<hex>
The SHA-256 is of the array's bytes, so both lines show the same one. Exit status 1 on any failure.
"""
import argparse
import errno
import hashlib
import os
import sys

import numpy as np

XATTR_SHA256 = "user.cascade.sha256"


def describe(arr):
    # Hash the array's memory in place (for the memmap: the mapped pages), no copy.
    digest = hashlib.sha256(memoryview(np.ascontiguousarray(arr)).cast("B")).hexdigest()
    return f"bytes={arr.nbytes} dtype={arr.dtype} shape={arr.shape} sha256={digest}", digest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("block", help="a KV block file under MOUNT/kv/")
    ap.add_argument("--dtype", default="uint8", help="element type of the block (default uint8)")
    ap.add_argument("--shape", help="comma-separated shape, e.g. 2,32,8,16,128 (default: flat)")
    ap.add_argument("--npy", help="also save the array as .npy at this path under the mount and map it back")
    args = ap.parse_args()

    arr = np.fromfile(args.block, dtype=np.dtype(args.dtype))
    if args.shape:
        arr = arr.reshape(tuple(int(n) for n in args.shape.split(",")))
    text, digest = describe(arr)
    try:
        stored = os.getxattr(args.block, XATTR_SHA256).decode()
    except OSError as e:
        # Not a Cascade mount (or an old one): nothing to check against.
        stored = None
        print(f"numpy_read: no {XATTR_SHA256} on {args.block}: {e.strerror}", file=sys.stderr)
    if stored is not None and stored != digest:
        print(f"numpy_read: {args.block}: read bytes hash to {digest}, Cascade stored {stored}", file=sys.stderr)
        return 1
    print(f"fromfile {text}" + (f" verified={XATTR_SHA256}" if stored else ""))

    if args.npy:
        if not args.npy.endswith(".npy"):
            print("numpy_read: --npy must end with .npy (np.save would add it)", file=sys.stderr)
            return 2
        np.save(args.npy, arr)  # open(O_TRUNC), writes, close: one new version
        mode = "r"
        try:
            mapped = np.load(args.npy, mmap_mode=mode)
        except OSError as e:
            if e.errno != errno.ENODEV:
                raise
            # fuse-native under direct I/O refuses shared mappings; a private one works.
            print("numpy_read: shared mmap refused (ENODEV: fuse-native engine?), mapping privately", file=sys.stderr)
            mode = "c"
            mapped = np.load(args.npy, mmap_mode=mode)
        text, mapped_digest = describe(mapped)
        del mapped  # unmaps
        print(f"npy-mmap mode={mode} {text}")
        if mapped_digest != digest:
            print(f"numpy_read: {args.npy} maps to other bytes than {args.block}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as e:
        # EIO from a read means the stored bytes failed their SHA-256 check: Cascade never returns wrong bytes.
        print(f"numpy_read: {e}", file=sys.stderr)
        sys.exit(1)

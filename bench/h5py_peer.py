#!/usr/bin/python3
"""The HDF5 peer of the side-by-side benchmark (bench/peers-systems.ts drives it).

One HDF5 file, one dataset (1-D uint8, contiguous) per block, through h5py. Commands arrive as JSON
lines on stdin and each gets one JSON line back on stdout. Every timed operation is timed here with
time.perf_counter, so the interpreter's start-up and the pipe to Node are never counted; checksums
(SHA-256 of what was read) are computed after the timed region.

  server:  python3 h5py_peer.py
  reader:  python3 h5py_peer.py reader FILE   (contention: waits for "go", reads, reports its own times)
"""
import hashlib
import json
import os
import sys
import time

import h5py
import numpy as np

state = {"f": None, "path": None, "staged": None, "target": None}


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def target_for(size):
    """A preallocated, touched buffer, reused for every read (page faults are never timed)."""
    t = state["target"]
    if t is None or t.shape[0] < size:
        t = np.zeros(size, dtype=np.uint8)
        state["target"] = t
    return t


def read_into(f, name, target):
    """Timed: look the dataset up and read it whole into target with read_direct. Returns (ms, bytes)."""
    t0 = time.perf_counter()
    ds = f[name]
    n = ds.shape[0]
    ds.read_direct(target, dest_sel=np.s_[0:n])
    return (time.perf_counter() - t0) * 1000.0, n


def op_open(cmd):
    state["path"] = cmd["path"]
    state["f"] = h5py.File(cmd["path"], cmd.get("mode", "a"))
    return {}


def op_close(cmd):
    if state["f"] is not None:
        state["f"].close()
        state["f"] = None
    return {}


def op_stage(cmd):
    """Untimed: load the next block's content from a file Node wrote."""
    state["staged"] = np.fromfile(cmd["src"], dtype=np.uint8)
    return {"bytes": int(state["staged"].shape[0])}


def op_write(cmd):
    """Timed: create the dataset, write the staged content with write_direct, flush the file."""
    f, data = state["f"], state["staged"]
    t0 = time.perf_counter()
    ds = f.create_dataset(cmd["name"], shape=data.shape, dtype=np.uint8)
    ds.write_direct(data)
    f.flush()
    return {"timeMs": (time.perf_counter() - t0) * 1000.0}


def op_read(cmd):
    target = target_for(cmd["sizeBytes"])
    ms, n = read_into(state["f"], cmd["name"], target)
    return {"timeMs": ms, "bytes": int(n), "sha256": hashlib.sha256(memoryview(target[:n])).hexdigest()}


def op_fsync(cmd):
    fd = os.open(state["path"], os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return {}


def op_open_close(cmd):
    """Timed: open a dataset by name and close it, `iterations` times over `names`."""
    f, names, iters = state["f"], cmd["names"], cmd["iterations"]
    t0 = time.perf_counter()
    for i in range(iters):
        ds = f[names[i % len(names)]]
        ds.id.close()
    return {"timeMs": (time.perf_counter() - t0) * 1000.0}


def op_stat(cmd):
    """Timed: the size of every named dataset (its shape, from the object header)."""
    f, names, size = state["f"], cmd["names"], cmd["sizeBytes"]
    ok = True
    t0 = time.perf_counter()
    for name in names:
        ok = f[name].shape[0] == size and ok
    return {"timeMs": (time.perf_counter() - t0) * 1000.0, "ok": ok}


def op_size(cmd):
    st = os.stat(state["path"])
    return {"sizeBytes": st.st_size, "allocatedBytes": st.st_blocks * 512}


def op_versions(cmd):
    return {"h5py": h5py.version.version, "hdf5": h5py.version.hdf5_version, "numpy": np.__version__, "python": sys.version.split()[0]}


OPS = {
    "open": op_open,
    "close": op_close,
    "stage": op_stage,
    "write": op_write,
    "read": op_read,
    "fsync": op_fsync,
    "openClose": op_open_close,
    "stat": op_stat,
    "size": op_size,
    "versions": op_versions,
}


def server():
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            out = OPS[cmd["op"]](cmd)
            out["ok"] = out.get("ok", True)
            reply(out)
        except Exception as e:  # reported to Node, which fails the trial with it
            reply({"error": "%s: %s" % (type(e).__name__, e)})
    op_close({})


def reader(path):
    """Contention: open read-only, say ready, wait for the job, read, report monotonic start/end (ns)."""
    f = h5py.File(path, "r")
    reply({"ready": True})
    job = json.loads(sys.stdin.readline())
    names, rounds, size = job["names"], job["rounds"], job["sizeBytes"]
    target = target_for(size)
    total = 0
    start = time.monotonic_ns()
    for _ in range(rounds):
        for name in names:
            _, n = read_into(f, name, target)
            total += n
    end = time.monotonic_ns()
    sha = hashlib.sha256(memoryview(target[:size])).hexdigest()
    f.close()
    reply({"startNs": start, "endNs": end, "bytes": total, "lastSha256": sha})


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "reader":
        reader(sys.argv[2])
    else:
        server()

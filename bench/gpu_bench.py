#!/usr/bin/env python3
"""GPU tier benchmark (needs a CUDA GPU, root and /dev/fuse; run on a GPU machine).

Rows, each trial in a fresh process:
  mount-read-gpu   read of a GPU-resident 64 MiB block through the mount (native engine; DRAM smaller
                   than the block, so the daemon copies D2H into each reply); page cache dropped first
                   (posix_fadvise DONTNEED), i.e. cold for the kernel, GPU-resident for Cascade
  d2h-pinned       cuMemcpyDtoH of the same size into pinned host memory: the hardware limit
  d2h-pageable     cuMemcpyDtoH into ordinary (pageable) host memory: what a plain host buffer gets
  ipc-dtod         a second process opens user.cascade.cuda_ipc and copies the block GPU->GPU into
                   its own buffer (examples/cuda_ipc_read.py)
  ipc-d2h          the same process copies the block from the IPC mapping to pinned host memory
  tmpfs-read       read of the same bytes from /dev/shm (a raw tmpfs read, hot): the host-memory peer

Usage: python3 bench/gpu_bench.py [--size-mib 64] [--trials 5] [--out PREFIX]
Writes PREFIX.json and PREFIX.md (default bench/results/gpu-<date>).
"""
import argparse
import ctypes
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLI = os.path.join(ROOT, "dist", "mount", "cli.js")
EXAMPLE = os.path.join(ROOT, "examples", "cuda_ipc_read.py")
sys.path.insert(0, os.path.join(ROOT, "examples"))

READER = r"""
import os, sys, time
path, size = sys.argv[1], int(sys.argv[2])
buf = bytearray(size); mv = memoryview(buf)
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
t = time.perf_counter(); got = 0
while got < size:
    n = os.readv(fd, [mv[got:got + (1 << 20)]])
    if n == 0: break
    got += n
dt = time.perf_counter() - t
assert got == size, got
print(dt)
"""

LIMIT = r"""
import sys, time, ctypes
sys.path.insert(0, sys.argv[2])
from cuda_ipc_read import Cuda
size = int(sys.argv[1])
c = Cuda(); dev = ctypes.c_int(); c.check(c.lib.cuDeviceGet(ctypes.byref(dev), 0), 'cuDeviceGet'); c.use(dev)
d = c.alloc(size); pinned = c.alloc_host(size); pageable = ctypes.create_string_buffer(size)
c.dtoh(pinned, d, size)
out = {}
for name, host in (('pinned', pinned), ('pageable', ctypes.addressof(pageable))):
    best = None
    for _ in range(5):
        t = time.perf_counter(); c.dtoh(host, d, size); dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    out[name] = best
print(out['pinned'], out['pageable'])
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def gbps(size, seconds):
    return size / seconds / 1e9


def start_daemon(mnt, data, dram_mib, gpu_mib):
    daemon = subprocess.Popen(
        ["node", CLI, "mount", mnt, "--data", data, "--engine", "native", "--dram", f"{dram_mib}M", "--gpu", f"{gpu_mib}M"],
        stderr=subprocess.PIPE, text=True)
    log = ""
    t0 = time.time()
    while "cascade: mounted" not in log:
        line = daemon.stderr.readline()
        if not line or time.time() - t0 > 30:
            daemon.kill()
            raise SystemExit(f"mount failed: {log}{line}")
        log += line
    print(log.strip(), file=sys.stderr)
    g = json.load(open(os.path.join(mnt, ".cascade", "stats.json")))["gpu"]
    if not g["available"]:
        stop_daemon(daemon, mnt)
        raise SystemExit(f"no GPU tier on this machine: {g.get('reason')}")
    return daemon


def stop_daemon(daemon, mnt):
    subprocess.run(["node", CLI, "unmount", mnt], capture_output=True)
    try:
        daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()


def promote_rows(size, trials, root):
    """
    The other way to serve a GPU-only block through the mount: DRAM has room, so the native engine's
    open copies the whole block GPU -> DRAM and its reads are then served from the arena in C++. Each
    trial writes a fresh block, loads it into the GPU tier (lease taken and released), pushes it out of
    DRAM with filler blocks, then reads it cold in a fresh process (the open's promotion included).
    """
    mnt, data = os.path.join(root, "mnt2"), os.path.join(root, "data2")
    mib = size >> 20
    daemon = start_daemon(mnt, data, 3 * mib + mib // 2, 16 * mib)
    seconds, promotions, tiers = [], [], []
    try:
        d = os.path.join(mnt, "kv", "promote")
        os.makedirs(d, exist_ok=True)
        for t in range(trials):
            f = os.path.join(d, f"block{t}")
            with open(f, "wb") as out:
                out.write(os.urandom(size))
            json.loads(os.getxattr(f, "user.cascade.cuda_ipc"))
            os.removexattr(f, "user.cascade.cuda_ipc")
            for k in range(4):  # 4 more blocks into a DRAM of 3.5: the least recent (this one) leaves
                with open(os.path.join(d, f"filler{t}-{k}"), "wb") as out:
                    out.write(os.urandom(size))
                    out.flush()
                    os.fsync(out.fileno())
            tiers.append(os.getxattr(f, "user.cascade.tier").decode())
            before = json.load(open(os.path.join(mnt, ".cascade", "stats.json")))
            seconds.append(float(run([sys.executable, "-c", READER, f, str(size)]).stdout))
            after = json.load(open(os.path.join(mnt, ".cascade", "stats.json")))
            promotions.append(after["promotions"] - before["promotions"])
    finally:
        stop_daemon(daemon, mnt)
    return seconds, {"dramMiB": 3 * mib + mib // 2, "tiersBeforeRead": tiers, "dramPromotionsPerRead": promotions}


def main():
    ap = argparse.ArgumentParser(description="GPU tier benchmark")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "results", f"gpu-{datetime.date.today().isoformat()}"))
    args = ap.parse_args()
    size = args.size_mib << 20
    root = tempfile.mkdtemp(prefix="cascade-gpu-bench-")
    mnt, data = os.path.join(root, "mnt"), os.path.join(root, "data")
    daemon = start_daemon(mnt, data, max(16, args.size_mib // 2), 4 * args.size_mib)
    try:
        os.makedirs(os.path.join(mnt, "kv", "bench"), exist_ok=True)
        f = os.path.join(mnt, "kv", "bench", "block")
        payload = os.urandom(size)
        with open(f, "wb") as out:
            out.write(payload)
        sha = hashlib.sha256(payload).hexdigest()
        # Hold a lease for the run: the block is loaded into the GPU tier now and stays there.
        lease = json.loads(os.getxattr(f, "user.cascade.cuda_ipc"))
        assert lease["sha256"] == sha and lease["size"] == size, lease
        tier = os.getxattr(f, "user.cascade.tier").decode()
        stats0 = json.load(open(os.path.join(mnt, ".cascade", "stats.json")))
        rows = {}
        rows["mount-read-gpu"] = [float(run([sys.executable, "-c", READER, f, str(size)]).stdout) for _ in range(args.trials)]
        stats1 = json.load(open(os.path.join(mnt, ".cascade", "stats.json")))
        gpu_hits = stats1["hits"]["gpu"] - stats0["hits"]["gpu"]
        pinned, pageable = [], []
        for _ in range(args.trials):
            a, b = run([sys.executable, "-c", LIMIT, str(size), os.path.join(ROOT, "examples")]).stdout.split()
            pinned.append(float(a))
            pageable.append(float(b))
        rows["d2h-pinned"], rows["d2h-pageable"] = pinned, pageable
        ipc_dtod, ipc_d2h = [], []
        for _ in range(args.trials):
            r = json.loads(run([sys.executable, EXAMPLE, f, "--json", "--repeat", "5", "--verify"]).stdout)
            assert r["sha256Ok"] is True, r
            ipc_dtod.append(r["ipcCopyBestMs"] / 1e3)
            ipc_d2h.append(r["d2hBestMs"] / 1e3)
        rows["ipc-dtod"], rows["ipc-d2h"] = ipc_dtod, ipc_d2h
        shm = os.path.join("/dev/shm", f"cascade-gpu-bench-{os.getpid()}")
        with open(shm, "wb") as out:
            out.write(payload)
        try:
            tm = []
            for _ in range(args.trials):
                tm.append(float(run([sys.executable, "-c", READER.replace("os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)", ""), shm, str(size)]).stdout))
            rows["tmpfs-read"] = tm
        finally:
            os.unlink(shm)
        stats2 = json.load(open(os.path.join(mnt, ".cascade", "stats.json")))
        os.removexattr(f, "user.cascade.cuda_ipc")
        stop_daemon(daemon, mnt)
        daemon = None
        rows["mount-read-gpu-promote"], promote_env = promote_rows(size, args.trials, root)
    finally:
        if daemon is not None:
            stop_daemon(daemon, mnt)
        shutil.rmtree(root, ignore_errors=True)

    gpu_name = stats2["gpu"]["device"]["name"] if stats2["gpu"].get("device") else "?"
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(), "gpu": gpu_name,
        "sizeBytes": size, "trials": args.trials, "tierBeforeReads": tier, "gpuHitsDuringMountReads": gpu_hits,
        "daemon": f"--engine native --dram {max(16, args.size_mib // 2)}M --gpu {4 * args.size_mib}M",
        "promote": promote_env,
    }
    result = {"env": env, "rows": {k: {"seconds": v, "bestGBps": round(gbps(size, min(v)), 2), "medianGBps": round(gbps(size, sorted(v)[len(v) // 2]), 2)} for k, v in rows.items()}}
    limit = result["rows"]["d2h-pinned"]["bestGBps"]
    lines = [
        f"# GPU tier: {args.size_mib} MiB block, {gpu_name}, {env['date']}",
        "",
        f"Host {env['host']} (kernel {env['kernel']}, {env['cpus']} CPUs). Daemon: `{env['daemon']}`; the block was in tier `{tier}` before the reads "
        f"(DRAM smaller than the block, so mount reads are served by D2H copies: {gpu_hits} GPU-tier hits during them). "
        f"{args.trials} trials per row, each in a fresh process; mount reads cold (page cache dropped with posix_fadvise DONTNEED).",
        "",
        f"`mount-read-gpu` serves each FUSE read request with a D2H copy (DRAM cannot hold the block). `mount-read-gpu-promote` is the other way: "
        f"DRAM of {promote_env['dramMiB']} MiB has room, so the native engine's open copies the block GPU -> DRAM (promotions per read: "
        f"{promote_env['dramPromotionsPerRead']}; tier before each read: {promote_env['tiersBeforeRead']}) and its reads are served from the arena in C++; the open's copy is in the time.",
        "",
        "| row | best GB/s | median GB/s | vs D2H pinned (best) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for k, v in result["rows"].items():
        lines.append(f"| {k} | {v['bestGBps']} | {v['medianGBps']} | {v['bestGBps'] / limit:.2f}x |")
    lines += ["", f"Rerun: `python3 bench/gpu_bench.py --size-mib {args.size_mib} --trials {args.trials}` (as root, after `npm run build`, on a GPU machine)."]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as out:
        json.dump(result, out, indent=2)
    with open(args.out + ".md", "w") as out:
        out.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Copy a Cascade file's KV block from the daemon's GPU memory into this process's own GPU buffer.

Zero-copy for a same-node GPU process: no byte crosses PCIe or the FUSE mount. Reading the xattr
user.cascade.cuda_ipc of a file under MOUNT/kv/ (native engine, mounted with --gpu SIZE) loads the
file's content into the GPU tier if it is not there and returns, as JSON:

    {"device": "GPU-<uuid>", "handle": "<128 hex digits>", "offset": N, "size": N, "sha256": "...", "version": N}

`handle` is the CUDA IPC memory handle of the daemon's whole GPU pool; the block lies at `offset` in it.
The lease rule: the block stays at that place (it is neither evicted nor overwritten, even if the file
is rewritten or deleted) until this process removes the xattr (os.removexattr) or exits. Read the
xattr again after a rewrite to get the new content's place (the lease moves).

Only ctypes and the CUDA driver (libcuda.so.1): no torch, no CUDA toolkit. Usage:

    python3 examples/cuda_ipc_read.py MOUNT/kv/model/block [--verify] [--repeat N] [--json]

--verify copies the block back to the host and checks its SHA-256 against the xattr's. The class Cuda
below is also what bench/gpu_bench.py measures with.
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys
import time

XATTR = "user.cascade.cuda_ipc"
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class CudaError(RuntimeError):
    pass


class IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class Cuda:
    """The few driver-API calls an IPC reader needs, checked."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        self.ctx = None

    def check(self, result, what):
        if result != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(result, ctypes.byref(msg))
            raise CudaError(f"{what}: {msg.value.decode() if msg.value else result}")

    def device_by_uuid(self, uuid):
        """The device whose UUID the daemon gave (ordinals differ under CUDA_VISIBLE_DEVICES)."""
        count = ctypes.c_int()
        self.check(self.lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        for i in range(count.value):
            dev = ctypes.c_int()
            self.check(self.lib.cuDeviceGet(ctypes.byref(dev), i), "cuDeviceGet")
            raw = (ctypes.c_ubyte * 16)()
            get_uuid = getattr(self.lib, "cuDeviceGetUuid_v2", None) or self.lib.cuDeviceGetUuid
            self.check(get_uuid(raw, dev), "cuDeviceGetUuid")
            h = bytes(raw).hex()
            text = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
            if text == uuid:
                return dev
        raise CudaError(f"no device {uuid} visible to this process (CUDA_VISIBLE_DEVICES?)")

    def use(self, dev):
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.ctx = ctx

    def open_ipc(self, handle_hex):
        handle = IpcMemHandle.from_buffer_copy(bytes.fromhex(handle_hex))
        ptr = ctypes.c_uint64()
        fn = getattr(self.lib, "cuIpcOpenMemHandle_v2", None) or self.lib.cuIpcOpenMemHandle
        # CUipcMemHandle is passed by value: a 64-byte struct (an array would decay to a pointer).
        fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), IpcMemHandle, ctypes.c_uint]
        self.check(fn(ctypes.byref(ptr), handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        return ptr.value

    def close_ipc(self, ptr):
        self.check(self.lib.cuIpcCloseMemHandle(ctypes.c_uint64(ptr)), "cuIpcCloseMemHandle")

    def alloc(self, size):
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc")
        return ptr.value

    def free(self, ptr):
        self.check(self.lib.cuMemFree_v2(ctypes.c_uint64(ptr)), "cuMemFree")

    def alloc_host(self, size):
        """Pinned host memory (what a D2H copy at full speed needs)."""
        ptr = ctypes.c_void_p()
        self.check(self.lib.cuMemAllocHost_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAllocHost")
        return ptr.value

    def free_host(self, ptr):
        self.check(self.lib.cuMemFreeHost(ctypes.c_void_p(ptr)), "cuMemFreeHost")

    def dtod(self, dst, src, size):
        self.check(self.lib.cuMemcpyDtoD_v2(ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(size)), "cuMemcpyDtoD")
        self.sync()

    def dtoh(self, host_ptr, src, size):
        self.check(self.lib.cuMemcpyDtoH_v2(ctypes.c_void_p(host_ptr), ctypes.c_uint64(src), ctypes.c_size_t(size)), "cuMemcpyDtoH")

    def htod(self, dst, host_ptr, size):
        self.check(self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(dst), ctypes.c_void_p(host_ptr), ctypes.c_size_t(size)), "cuMemcpyHtoD")

    def sync(self):
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


def lease(path):
    """Read the xattr (takes the lease) and parse it."""
    return json.loads(os.getxattr(path, XATTR))


def release(path):
    os.removexattr(path, XATTR)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="a file under MOUNT/kv/")
    ap.add_argument("--verify", action="store_true", help="copy the block back to the host and check its SHA-256")
    ap.add_argument("--repeat", type=int, default=1, help="copies to time (default 1)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()

    t0 = time.perf_counter()
    info = lease(args.path)
    lease_ms = (time.perf_counter() - t0) * 1e3
    cuda = Cuda()
    cuda.use(cuda.device_by_uuid(info["device"]))
    size = info["size"]
    pool = cuda.open_ipc(info["handle"])
    mine = cuda.alloc(max(size, 1))
    host = cuda.alloc_host(max(size, 1))
    try:
        dtod_s, dtoh_s = [], []
        for _ in range(max(1, args.repeat)):
            t = time.perf_counter()
            cuda.dtod(mine, pool + info["offset"], size)  # the block, now in this process's own buffer
            dtod_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            cuda.dtoh(host, pool + info["offset"], size)  # the same block to (pinned) host memory, for comparison
            dtoh_s.append(time.perf_counter() - t)
        ok = None
        if args.verify:
            cuda.dtoh(host, mine, size)
            ok = hashlib.sha256(ctypes.string_at(host, size)).hexdigest() == info["sha256"]
    finally:
        cuda.free_host(host)
        cuda.free(mine)
        cuda.close_ipc(pool)
        release(args.path)
    best = min(dtod_s)
    result = {
        "path": args.path,
        "sizeBytes": size,
        "version": info["version"],
        "leaseMs": round(lease_ms, 3),
        "ipcCopyBestMs": round(best * 1e3, 4),
        "ipcCopyGBps": round(size / best / 1e9, 2) if best > 0 else None,
        "d2hBestMs": round(min(dtoh_s) * 1e3, 4),
        "d2hGBps": round(size / min(dtoh_s) / 1e9, 2) if min(dtoh_s) > 0 else None,
        "sha256Ok": ok,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.path}: {size} bytes (version {info['version']}) copied GPU->GPU in {result['ipcCopyBestMs']} ms "
              f"({result['ipcCopyGBps']} GB/s); D2H of the same block {result['d2hBestMs']} ms; "
              f"lease {result['leaseMs']} ms" + ("" if ok is None else f"; sha256 {'ok' if ok else 'MISMATCH'}"))
    if ok is False:
        sys.exit(1)


if __name__ == "__main__":
    main()

// The GPU (HBM) tier's device side: one pool of device memory per daemon, and copies into and out of
// it through pinned host staging buffers. CUDA is never a build or run requirement: the driver API
// (libcuda.so.1) is opened with dlopen at run time and every entry point is looked up by name, with
// our own declarations of the few types it takes. Without a driver or a device, ProbeGpus() says why
// and GpuPool::Open fails with that reason; the rest of Cascade runs as before.
//
// Slots inside the pool are allocated by the TypeScript tier (store/tiers/gpu.ts): this layer only
// moves bytes at offsets, and checks every offset against the pool's size.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "status.h"

namespace cascade {

struct GpuDeviceInfo {
  int ordinal = 0;
  std::string name;
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and CUDA_VISIBLE_DEVICES spell it.
  std::string uuid;
  uint64_t totalBytes = 0;
};

struct GpuProbe {
  bool available = false;
  // Why not, when !available (no libcuda.so.1, cuInit failed, no device).
  std::string reason;
  std::vector<GpuDeviceInfo> devices;
};

// Loads the driver (once per process) and lists the devices. Never fails: the reason says why not.
GpuProbe ProbeGpus();

// CUipcMemHandle is 64 opaque bytes.
constexpr size_t kGpuIpcHandleBytes = 64;
// Staging bounds: each lane has two buffers of this size (double buffering).
constexpr uint64_t kGpuStagingMinBytes = 64 * 1024;
constexpr uint64_t kGpuStagingMaxBytes = 64 * 1024 * 1024;

struct GpuPoolConfig {
  int device = 0;
  uint64_t capacityBytes = 0;
  uint64_t stagingBytes = 8 * 1024 * 1024;
};

class GpuPool {
 public:
  static Status Open(const GpuPoolConfig& config, std::unique_ptr<GpuPool>* out, std::string* error);
  ~GpuPool();
  GpuPool(const GpuPool&) = delete;
  GpuPool& operator=(const GpuPool&) = delete;

  // Copy host bytes into the pool at offsetBytes (H2D), and pool bytes out (D2H). Each returns when the
  // bytes have arrived. One write and one read may run at once (each has its own stream and staging);
  // more of one kind wait for each other. ERANGE outside the pool, EIO when the driver fails.
  Status Write(uint64_t offsetBytes, const uint8_t* source, uint64_t lengthBytes, std::string* error);
  Status Read(uint64_t offsetBytes, uint8_t* target, uint64_t lengthBytes, std::string* error);

  // The pool's CUDA IPC handle (one for the whole pool; a block is an offset into it). False, with the
  // driver's reason, when the device cannot export one.
  bool IpcHandle(uint8_t out[kGpuIpcHandleBytes], std::string* error) const;
  const GpuDeviceInfo& device() const { return device_; }
  uint64_t capacityBytes() const { return capacityBytes_; }
  uint64_t stagingBytes() const { return stagingBytes_; }
  // Figures: bytes copied each way since open.
  uint64_t bytesToDevice() const;
  uint64_t bytesFromDevice() const;

 private:
  struct Lane;
  GpuPool();
  Status MakeCurrent(std::string* error) const;
  // Defined (and only instantiated) in gpu.cc.
  template <typename Loop>
  Status Copy(Lane& lane, uint64_t offsetBytes, uint64_t lengthBytes, const char* what, std::string* error, Loop loop);

  GpuDeviceInfo device_;
  uint64_t capacityBytes_ = 0;
  uint64_t stagingBytes_ = 0;
  void* context_ = nullptr;       // CUcontext (the device's primary context)
  uint64_t base_ = 0;             // CUdeviceptr of the pool
  std::unique_ptr<Lane> toDevice_;
  std::unique_ptr<Lane> fromDevice_;
  uint8_t ipc_[kGpuIpcHandleBytes] = {};
  bool ipcOk_ = false;
  std::string ipcError_;
};

}  // namespace cascade

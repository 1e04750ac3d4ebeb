#include "gpu.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"

namespace cascade {

namespace {

// The driver API's types, declared here so that no CUDA header is needed to build (cuda.h values).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
struct CUuuid {
  char bytes[16];
};
struct CUipcMemHandle {
  char reserved[kGpuIpcHandleBytes];
};
constexpr CUresult kCudaSuccess = 0;
constexpr unsigned kStreamNonBlocking = 0x1;       // CU_STREAM_NON_BLOCKING
constexpr unsigned kEventDisableTiming = 0x2;      // CU_EVENT_DISABLE_TIMING
constexpr int kPointerAttributeSyncMemops = 6;     // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS

// Every entry point we use, looked up once. A missing one makes the whole driver unavailable.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemAllocHost)(void**, size_t);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuPointerSetAttribute)(const void*, int, CUdeviceptr);
};

struct Loaded {
  bool ok = false;
  std::string reason;
  Driver d{};
};

template <typename F>
bool Find(void* lib, const char* const* names, F* out) {
  for (const char* const* n = names; *n != nullptr; n++) {
    if (void* p = dlsym(lib, *n)) {
      *out = reinterpret_cast<F>(p);
      return true;
    }
  }
  return false;
}

Loaded LoadDriver() {
  Loaded l;
  // CASCADE_LIBCUDA names another library file (tests point it at a missing one).
  const char* env = getenv("CASCADE_LIBCUDA");
  const char* file = env != nullptr && env[0] != '\0' ? env : "libcuda.so.1";
  void* lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    l.reason = std::string("no CUDA driver: cannot load ") + file + " (" + (why != nullptr ? why : "?") + ")";
    return l;
  }
  Driver& d = l.d;
  bool all = true;
  auto need = [&](auto* fn, std::initializer_list<const char*> names) {
    std::vector<const char*> v(names);
    v.push_back(nullptr);
    if (!Find(lib, v.data(), fn)) {
      all = false;
      if (l.reason.empty()) l.reason = std::string("the CUDA driver lacks ") + v[0];
    }
  };
  need(&d.cuInit, {"cuInit"});
  need(&d.cuGetErrorString, {"cuGetErrorString"});
  need(&d.cuDeviceGetCount, {"cuDeviceGetCount"});
  need(&d.cuDeviceGet, {"cuDeviceGet"});
  need(&d.cuDeviceGetName, {"cuDeviceGetName"});
  need(&d.cuDeviceGetUuid, {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"});
  need(&d.cuDeviceTotalMem, {"cuDeviceTotalMem_v2"});
  need(&d.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
  need(&d.cuDevicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"});
  need(&d.cuCtxSetCurrent, {"cuCtxSetCurrent"});
  need(&d.cuMemAlloc, {"cuMemAlloc_v2"});
  need(&d.cuMemFree, {"cuMemFree_v2"});
  need(&d.cuMemAllocHost, {"cuMemAllocHost_v2"});
  need(&d.cuMemFreeHost, {"cuMemFreeHost"});
  need(&d.cuStreamCreate, {"cuStreamCreate"});
  need(&d.cuStreamDestroy, {"cuStreamDestroy_v2"});
  need(&d.cuStreamSynchronize, {"cuStreamSynchronize"});
  need(&d.cuEventCreate, {"cuEventCreate"});
  need(&d.cuEventRecord, {"cuEventRecord"});
  need(&d.cuEventSynchronize, {"cuEventSynchronize"});
  need(&d.cuEventDestroy, {"cuEventDestroy_v2"});
  need(&d.cuMemcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"});
  need(&d.cuMemcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"});
  need(&d.cuIpcGetMemHandle, {"cuIpcGetMemHandle"});
  need(&d.cuPointerSetAttribute, {"cuPointerSetAttribute"});
  if (!all) return l;  // the library stays loaded: unloading a driver mid-process is not worth the risk
  const CUresult r = d.cuInit(0);
  if (r != kCudaSuccess) {
    const char* s = nullptr;
    d.cuGetErrorString(r, &s);
    l.reason = std::string("cuInit failed: ") + (s != nullptr ? s : "error " + std::to_string(r));
    return l;
  }
  l.ok = true;
  return l;
}

const Loaded& TheDriver() {
  static const Loaded loaded = LoadDriver();  // thread-safe once (C++11 statics)
  return loaded;
}

std::string Describe(const Driver& d, CUresult r, const char* what) {
  const char* s = nullptr;
  if (d.cuGetErrorString(r, &s) != kCudaSuccess || s == nullptr) s = "unknown CUDA error";
  return std::string(what) + ": " + s + " (" + std::to_string(r) + ")";
}

std::string UuidText(const CUuuid& u) {
  char out[64];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  snprintf(out, sizeof out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

bool DeviceInfo(const Driver& d, int ordinal, GpuDeviceInfo* info, std::string* error) {
  CUdevice dev = 0;
  CUresult r = d.cuDeviceGet(&dev, ordinal);
  if (r != kCudaSuccess) {
    *error = Describe(d, r, "cuDeviceGet");
    return false;
  }
  char name[256] = {};
  CUuuid uuid{};
  size_t total = 0;
  if ((r = d.cuDeviceGetName(name, sizeof name - 1, dev)) != kCudaSuccess ||
      (r = d.cuDeviceGetUuid(&uuid, dev)) != kCudaSuccess || (r = d.cuDeviceTotalMem(&total, dev)) != kCudaSuccess) {
    *error = Describe(d, r, "device query");
    return false;
  }
  info->ordinal = ordinal;
  info->name = name;
  info->uuid = UuidText(uuid);
  info->totalBytes = total;
  return true;
}

}  // namespace

GpuProbe ProbeGpus() {
  GpuProbe p;
  const Loaded& l = TheDriver();
  if (!l.ok) {
    p.reason = l.reason;
    return p;
  }
  int count = 0;
  const CUresult r = l.d.cuDeviceGetCount(&count);
  if (r != kCudaSuccess) {
    p.reason = Describe(l.d, r, "cuDeviceGetCount");
    return p;
  }
  for (int i = 0; i < count; i++) {
    GpuDeviceInfo info;
    std::string error;
    if (DeviceInfo(l.d, i, &info, &error)) p.devices.push_back(info);
  }
  if (p.devices.empty()) {
    p.reason = "the CUDA driver sees no device";
    return p;
  }
  p.available = true;
  return p;
}

// One direction of copies: a stream, two pinned staging buffers and their events. Its mutex makes the
// copies of one direction take turns (the staging buffers are shared by them).
struct GpuPool::Lane {
  std::mutex mu;
  CUstream stream = nullptr;
  void* staging[2] = {nullptr, nullptr};
  CUevent done[2] = {nullptr, nullptr};
  std::atomic<uint64_t> bytes{0};
};

GpuPool::GpuPool() : toDevice_(new Lane), fromDevice_(new Lane) {}

Status GpuPool::Open(const GpuPoolConfig& config, std::unique_ptr<GpuPool>* out, std::string* error) {
  const Loaded& l = TheDriver();
  if (!l.ok) {
    *error = l.reason;
    return Status::kIo;
  }
  const Driver& d = l.d;
  if (config.capacityBytes == 0) {
    *error = "GPU pool capacity must be positive";
    return Status::kInvalid;
  }
  if (config.stagingBytes < kGpuStagingMinBytes || config.stagingBytes > kGpuStagingMaxBytes) {
    *error = "GPU staging buffer size out of range";
    return Status::kInvalid;
  }
  int count = 0;
  CUresult r = d.cuDeviceGetCount(&count);
  if (r != kCudaSuccess || config.device < 0 || config.device >= count) {
    *error = "no GPU device " + std::to_string(config.device) + " (the driver sees " + std::to_string(count) + ")";
    return Status::kInvalid;
  }
  std::unique_ptr<GpuPool> pool(new GpuPool);
  pool->capacityBytes_ = config.capacityBytes;
  pool->stagingBytes_ = config.stagingBytes;
  if (!DeviceInfo(d, config.device, &pool->device_, error)) return Status::kIo;
  if (config.capacityBytes > pool->device_.totalBytes) {
    *error = "GPU pool of " + std::to_string(config.capacityBytes) + " bytes is larger than device " +
             std::to_string(config.device) + " (" + std::to_string(pool->device_.totalBytes) + " bytes)";
    return Status::kInvalid;
  }
  CUdevice dev = 0;
  d.cuDeviceGet(&dev, config.device);
  CUcontext ctx = nullptr;
  if ((r = d.cuDevicePrimaryCtxRetain(&ctx, dev)) != kCudaSuccess) {
    *error = Describe(d, r, "cuDevicePrimaryCtxRetain");
    return Status::kIo;
  }
  pool->context_ = ctx;  // released by the destructor from here on
  if (Status s = pool->MakeCurrent(error); s != Status::kOk) return s;
  CUdeviceptr base = 0;
  if ((r = d.cuMemAlloc(&base, config.capacityBytes)) != kCudaSuccess) {
    *error = Describe(d, r, "cuMemAlloc of the GPU pool");
    return r == 2 ? Status::kNoSpace : Status::kIo;  // 2: CUDA_ERROR_OUT_OF_MEMORY
  }
  pool->base_ = base;
  // A consumer process copies out of the pool through IPC: make its copies wait for ours.
  const int one = 1;
  d.cuPointerSetAttribute(&one, kPointerAttributeSyncMemops, base);
  for (Lane* lane : {pool->toDevice_.get(), pool->fromDevice_.get()}) {
    if ((r = d.cuStreamCreate(&lane->stream, kStreamNonBlocking)) != kCudaSuccess) {
      *error = Describe(d, r, "cuStreamCreate");
      return Status::kIo;
    }
    for (int i = 0; i < 2; i++) {
      if ((r = d.cuMemAllocHost(&lane->staging[i], config.stagingBytes)) != kCudaSuccess ||
          (r = d.cuEventCreate(&lane->done[i], kEventDisableTiming)) != kCudaSuccess) {
        *error = Describe(d, r, "pinned staging buffer");
        return Status::kIo;
      }
    }
  }
  CUipcMemHandle h{};
  if ((r = d.cuIpcGetMemHandle(&h, base)) == kCudaSuccess) {
    memcpy(pool->ipc_, h.reserved, kGpuIpcHandleBytes);
    pool->ipcOk_ = true;
  } else {
    pool->ipcError_ = Describe(d, r, "cuIpcGetMemHandle");
  }
  *out = std::move(pool);
  return Status::kOk;
}

GpuPool::~GpuPool() {
  const Loaded& l = TheDriver();
  if (!l.ok || context_ == nullptr) return;
  const Driver& d = l.d;
  d.cuCtxSetCurrent(context_);
  for (Lane* lane : {toDevice_.get(), fromDevice_.get()}) {
    std::lock_guard<std::mutex> g(lane->mu);  // a copy still running finishes first
    if (lane->stream != nullptr) d.cuStreamSynchronize(lane->stream);
    for (int i = 0; i < 2; i++) {
      if (lane->done[i] != nullptr) d.cuEventDestroy(lane->done[i]);
      if (lane->staging[i] != nullptr) d.cuMemFreeHost(lane->staging[i]);
    }
    if (lane->stream != nullptr) d.cuStreamDestroy(lane->stream);
  }
  if (base_ != 0) d.cuMemFree(base_);
  CUdevice dev = 0;
  d.cuDeviceGet(&dev, device_.ordinal);
  d.cuDevicePrimaryCtxRelease(dev);
}

Status GpuPool::MakeCurrent(std::string* error) const {
  // Copies run on whatever worker thread calls: bind the pool's context to it (cheap when already so).
  const Driver& d = TheDriver().d;
  const CUresult r = d.cuCtxSetCurrent(context_);
  if (r != kCudaSuccess) {
    *error = Describe(d, r, "cuCtxSetCurrent");
    return Status::kIo;
  }
  return Status::kOk;
}

// What Write and Read share: the range check, the lane's lock, the context, and after the copy loop
// (which returns the first failing call's result) the stream's sync and the accounting.
template <typename Loop>
Status GpuPool::Copy(Lane& lane, uint64_t offsetBytes, uint64_t lengthBytes, const char* what, std::string* error, Loop loop) {
  if (offsetBytes > capacityBytes_ || lengthBytes > capacityBytes_ - offsetBytes) {
    *error = std::string(what) + " lies outside the GPU pool";
    return Status::kRange;
  }
  if (lengthBytes == 0) return Status::kOk;
  const Driver& d = TheDriver().d;
  std::lock_guard<std::mutex> g(lane.mu);
  if (Status s = MakeCurrent(error); s != Status::kOk) return s;
  CUresult r = loop(d);
  const CUresult rs = d.cuStreamSynchronize(lane.stream);
  if (r == kCudaSuccess) r = rs;
  if (r != kCudaSuccess) {
    *error = Describe(d, r, what);
    return Status::kIo;
  }
  lane.bytes += lengthBytes;
  return Status::kOk;
}

Status GpuPool::Write(uint64_t offsetBytes, const uint8_t* source, uint64_t lengthBytes, std::string* error) {
  Lane& lane = *toDevice_;
  return Copy(lane, offsetBytes, lengthBytes, "copy to the GPU", error, [&](const Driver& d) {
    // Double buffering: while chunk i is copied host -> staging, chunk i-1 travels staging -> device.
    CUresult r = kCudaSuccess;
    uint64_t done = 0;
    bool used[2] = {false, false};
    for (uint64_t i = 0; done < lengthBytes; i++) {
      const int b = static_cast<int>(i & 1);
      const uint64_t n = std::min<uint64_t>(stagingBytes_, lengthBytes - done);
      if (used[b] && (r = d.cuEventSynchronize(lane.done[b])) != kCudaSuccess) break;  // buffer free again
      memcpy(lane.staging[b], source + done, n);
      if ((r = d.cuMemcpyHtoDAsync(base_ + offsetBytes + done, lane.staging[b], n, lane.stream)) != kCudaSuccess) break;
      if ((r = d.cuEventRecord(lane.done[b], lane.stream)) != kCudaSuccess) break;
      used[b] = true;
      done += n;
    }
    return r;
  });
}

Status GpuPool::Read(uint64_t offsetBytes, uint8_t* target, uint64_t lengthBytes, std::string* error) {
  Lane& lane = *fromDevice_;
  return Copy(lane, offsetBytes, lengthBytes, "copy from the GPU", error, [&](const Driver& d) {
    // Double buffering: while chunk i travels device -> staging, chunk i-1 is copied staging -> target.
    CUresult r = kCudaSuccess;
    uint64_t issued = 0;
    uint64_t pendingOffset = 0, pendingBytes = 0;
    int pendingBuffer = -1;
    for (uint64_t i = 0; issued < lengthBytes || pendingBuffer >= 0; i++) {
      int b = -1;
      uint64_t n = 0;
      if (issued < lengthBytes) {
        b = static_cast<int>(i & 1);
        n = std::min<uint64_t>(stagingBytes_, lengthBytes - issued);
        if ((r = d.cuMemcpyDtoHAsync(lane.staging[b], base_ + offsetBytes + issued, n, lane.stream)) != kCudaSuccess) break;
        if ((r = d.cuEventRecord(lane.done[b], lane.stream)) != kCudaSuccess) break;
      }
      if (pendingBuffer >= 0) {
        if ((r = d.cuEventSynchronize(lane.done[pendingBuffer])) != kCudaSuccess) break;
        memcpy(target + pendingOffset, lane.staging[pendingBuffer], pendingBytes);
      }
      pendingBuffer = b;
      pendingOffset = issued;
      pendingBytes = n;
      issued += n;
    }
    return r;
  });
}

bool GpuPool::IpcHandle(uint8_t out[kGpuIpcHandleBytes], std::string* error) const {
  if (!ipcOk_) {
    *error = ipcError_;
    return false;
  }
  memcpy(out, ipc_, kGpuIpcHandleBytes);
  return true;
}

uint64_t GpuPool::bytesToDevice() const { return toDevice_->bytes.load(); }
uint64_t GpuPool::bytesFromDevice() const { return fromDevice_->bytes.load(); }

}  // namespace cascade

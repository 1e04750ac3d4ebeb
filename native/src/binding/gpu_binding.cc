// JS class GpuPool and function gpuProbe over core/gpu.h. Copies run on libuv worker threads (a 64 MiB
// copy takes milliseconds); each keeps the pool and the buffer alive until it settles, so close() while
// a copy runs frees the pool only after it.
#include <memory>

#include "../core/gpu.h"
#include "common.h"
#include "init.h"

namespace cascade {

namespace {

Napi::Object DeviceObject(Napi::Env env, const GpuDeviceInfo& d) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("ordinal", Napi::Number::New(env, d.ordinal));
  o.Set("name", Napi::String::New(env, d.name));
  o.Set("uuid", Napi::String::New(env, d.uuid));
  o.Set("totalBytes", Napi::Number::New(env, static_cast<double>(d.totalBytes)));
  return o;
}

// gpuProbe(): {available, reason, devices}. Loads the driver on first call; never throws.
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const GpuProbe p = ProbeGpus();
  Napi::Object out = Napi::Object::New(env);
  out.Set("available", Napi::Boolean::New(env, p.available));
  out.Set("reason", Napi::String::New(env, p.reason));
  Napi::Array devices = Napi::Array::New(env, p.devices.size());
  for (size_t i = 0; i < p.devices.size(); i++) devices.Set(static_cast<uint32_t>(i), DeviceObject(env, p.devices[i]));
  out.Set("devices", devices);
  return out;
}

class GpuCopyWorker : public PromiseWorker {
 public:
  GpuCopyWorker(Napi::Env env, std::shared_ptr<GpuPool> pool, bool toDevice, uint64_t offsetBytes, uint8_t* data, uint64_t lengthBytes)
      : PromiseWorker(env, toDevice ? "cascade.gpu.write" : "cascade.gpu.read"),
        pool_(std::move(pool)),
        toDevice_(toDevice),
        offsetBytes_(offsetBytes),
        data_(data),
        lengthBytes_(lengthBytes) {}
  void Execute() override {
    status_ = toDevice_ ? pool_->Write(offsetBytes_, data_, lengthBytes_, &message_) : pool_->Read(offsetBytes_, data_, lengthBytes_, &message_);
  }

 private:
  std::shared_ptr<GpuPool> pool_;
  bool toDevice_;
  uint64_t offsetBytes_;
  uint8_t* data_;
  uint64_t lengthBytes_;
};

class GpuPoolWrap : public Napi::ObjectWrap<GpuPoolWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "GpuPool",
                       {InstanceMethod("write", &GpuPoolWrap::Write), InstanceMethod("read", &GpuPoolWrap::Read),
                        InstanceMethod("ipcHandle", &GpuPoolWrap::IpcHandle), InstanceMethod("info", &GpuPoolWrap::Info),
                        InstanceMethod("close", &GpuPoolWrap::Close)});
  }

  // new GpuPool(device, capacityBytes, stagingBytes)
  explicit GpuPoolWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<GpuPoolWrap>(info) {
    uint64_t device, capacity, staging;
    if (!ArgU64(info, 0, "device", &device) || !ArgU64(info, 1, "capacityBytes", &capacity) || !ArgU64(info, 2, "stagingBytes", &staging)) return;
    if (device > 1024) {
      ThrowCode(info.Env(), "EINVAL", "device ordinal out of range");
      return;
    }
    GpuPoolConfig c;
    c.device = static_cast<int>(device);
    c.capacityBytes = capacity;
    c.stagingBytes = staging;
    std::unique_ptr<GpuPool> pool;
    std::string error;
    Status s = GpuPool::Open(c, &pool, &error);
    if (s != Status::kOk) {
      ThrowStatus(info.Env(), s, error);
      return;
    }
    pool_ = std::shared_ptr<GpuPool>(std::move(pool));
  }

 private:
  std::shared_ptr<GpuPool> Open(const Napi::CallbackInfo& info) {
    if (!pool_) ThrowCode(info.Env(), "EBADF", "GPU pool is closed");
    return pool_;
  }

  Napi::Value Copy(const Napi::CallbackInfo& info, bool toDevice) {
    std::shared_ptr<GpuPool> pool = Open(info);
    uint64_t offset, length;
    uint8_t* data;
    if (!pool || !ArgU64(info, 0, "offsetBytes", &offset) || !ArgBytes(info, 1, toDevice ? "source" : "target", &data, &length)) {
      return info.Env().Undefined();
    }
    if (offset > pool->capacityBytes() || length > pool->capacityBytes() - offset) {
      ThrowCode(info.Env(), "ERANGE", "copy lies outside the GPU pool");
      return info.Env().Undefined();
    }
    auto* worker = new GpuCopyWorker(info.Env(), std::move(pool), toDevice, offset, data, length);
    worker->Keep(info[1]);  // the buffer outlives the copy
    worker->Queue();
    return worker->Promise();
  }
  // write(offsetBytes, source): Promise<void>; read(offsetBytes, target): Promise<void>.
  Napi::Value Write(const Napi::CallbackInfo& info) { return Copy(info, true); }
  Napi::Value Read(const Napi::CallbackInfo& info) { return Copy(info, false); }

  // ipcHandle(): Buffer of 64 bytes (CUipcMemHandle of the whole pool).
  Napi::Value IpcHandle(const Napi::CallbackInfo& info) {
    std::shared_ptr<GpuPool> pool = Open(info);
    if (!pool) return info.Env().Undefined();
    Napi::Buffer<uint8_t> out = Napi::Buffer<uint8_t>::New(info.Env(), kGpuIpcHandleBytes);
    std::string error;
    if (!pool->IpcHandle(out.Data(), &error)) {
      ThrowCode(info.Env(), "EIO", error);
      return info.Env().Undefined();
    }
    return out;
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    std::shared_ptr<GpuPool> pool = Open(info);
    if (!pool) return info.Env().Undefined();
    Napi::Env env = info.Env();
    Napi::Object o = DeviceObject(env, pool->device());
    o.Set("capacityBytes", Napi::Number::New(env, static_cast<double>(pool->capacityBytes())));
    o.Set("stagingBytes", Napi::Number::New(env, static_cast<double>(pool->stagingBytes())));
    o.Set("bytesToDevice", Napi::Number::New(env, static_cast<double>(pool->bytesToDevice())));
    o.Set("bytesFromDevice", Napi::Number::New(env, static_cast<double>(pool->bytesFromDevice())));
    return o;
  }

  // close(): the pool is freed once the copies in flight settle. Idempotent.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    pool_.reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<GpuPool> pool_;
};

}  // namespace

void InitGpu(Napi::Env env, Napi::Object exports) {
  exports.Set("GpuPool", GpuPoolWrap::Define(env));
  exports.Set("gpuProbe", Napi::Function::New(env, Probe, "gpuProbe"));
}

}  // namespace cascade

// JS class Fabric over core/fabric.h (built only with CASCADE_WITH_LIBFABRIC). Fetch completions come
// from the progress thread through one thread-safe function, which keeps the event loop alive only
// while fetches are in flight.
#include "init.h"

#ifdef CASCADE_WITH_LIBFABRIC

#include <memory>

#include "../core/fabric.h"
#include "../core/sha256.h"
#include "common.h"

namespace cascade {

namespace {

// A fabric address: non-empty hex, at most 512 bytes.
bool FromHex(const std::string& hex, std::string* raw) {
  return !hex.empty() && hex.size() <= 1024 && HexToBytes(hex, raw);
}

// What crosses from the progress thread to the JS thread for one finished fetch.
struct Settle {
  Napi::Promise::Deferred deferred;
  Status status = Status::kOk;
  std::string message;
};

// Shared by the wrapper and every pending completion: the wrapper may be collected first.
struct Shared {
  Napi::ThreadSafeFunction tsfn;
  uint32_t inFlight = 0;  // JS thread only
  bool released = false;
};

class FabricWrap : public Napi::ObjectWrap<FabricWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Fabric",
                       {InstanceMethod("address", &FabricWrap::Address), InstanceMethod("provider", &FabricWrap::Provider),
                        InstanceMethod("fetch", &FabricWrap::Fetch), InstanceMethod("stats", &FabricWrap::Stats),
                        InstanceMethod("close", &FabricWrap::Close)});
  }

  // new Fabric(arena, provider, node, fetchesPerPeerMax, holdsMax, holdTimeoutMs, fault?) where fault,
  // for tests only, is '', 'piece-crc' or 'block-bytes' (FabricConfig::fault)
  explicit FabricWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FabricWrap>(info) {
    Napi::Env env = info.Env();
    std::shared_ptr<Arena> arena = info.Length() > 0 ? ArenaOf(info[0]) : nullptr;
    if (!arena) {
      ThrowCode(env, "EINVAL", "arena must be an open Arena");
      return;
    }
    FabricConfig config;
    uint64_t perPeer, holds, holdTimeoutMs;
    if (!ArgString(info, 1, "provider", &config.provider) || !ArgString(info, 2, "node", &config.node) ||
        !ArgU64(info, 3, "fetchesPerPeerMax", &perPeer) || !ArgU64(info, 4, "holdsMax", &holds) ||
        !ArgU64(info, 5, "holdTimeoutMs", &holdTimeoutMs))
      return;
    if (perPeer == 0 || perPeer > 1024 || holds == 0 || holds > 1000000 || holdTimeoutMs == 0) {
      ThrowCode(env, "EINVAL", "fabric limits out of range");
      return;
    }
    config.fetchesPerPeerMax = static_cast<uint32_t>(perPeer);
    config.holdsMax = static_cast<uint32_t>(holds);
    config.holdTimeoutMs = holdTimeoutMs;
    if (info.Length() > 6 && !info[6].IsUndefined()) {
      std::string fault;
      if (!ArgString(info, 6, "fault", &fault)) return;
      if (fault == "piece-crc") config.fault = FabricConfig::kFaultPieceCrc;
      else if (fault == "block-bytes") config.fault = FabricConfig::kFaultBlockBytes;
      else if (!fault.empty()) {
        ThrowCode(env, "EINVAL", "fault must be '', 'piece-crc' or 'block-bytes'");
        return;
      }
    }
    std::string error;
    Fabric* fabric = nullptr;
    Status s = Fabric::Open(config, std::move(arena), &fabric, &error);
    if (s != Status::kOk) {
      ThrowStatus(env, s, error);
      return;
    }
    fabric_.reset(fabric);
    shared_ = std::make_shared<Shared>();
    shared_->tsfn = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}), "cascade.fabric", 0, 1);
    shared_->tsfn.Unref(env);
  }

  ~FabricWrap() { Shutdown(); }

 private:
  void Shutdown() {
    fabric_.reset();  // joins the progress thread; pending fetches were settled through the tsfn
    if (shared_ && !shared_->released) {
      shared_->released = true;
      shared_->tsfn.Release();
    }
  }

  Fabric* Open(const Napi::CallbackInfo& info) {
    if (!fabric_) ThrowCode(info.Env(), "EBADF", "fabric is closed");
    return fabric_.get();
  }

  Napi::Value Address(const Napi::CallbackInfo& info) {
    Fabric* f = Open(info);
    return f ? Napi::String::New(info.Env(), ToHex(reinterpret_cast<const uint8_t*>(f->address().data()), f->address().size())) : info.Env().Undefined();
  }

  Napi::Value Provider(const Napi::CallbackInfo& info) {
    Fabric* f = Open(info);
    return f ? Napi::String::New(info.Env(), f->providerName()) : info.Env().Undefined();
  }

  // fetch(peerAddressHex, sha256Hex, sizeBytes, localHandle, timeoutMs, stream?): Promise<string>, the
  // SHA-256 (hex) of the bytes that landed, hashed while they arrived and equal to the name. Rejects
  // with ESTALE when the peer no longer holds the block, EBUSY when too many fetches wait, ECORRUPT
  // when a piece failed its CRC-32C or the block its SHA-256, EIO otherwise. stream: Fabric::Fetch's.
  Napi::Value Fetch(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Fabric* f = Open(info);
    std::string peerHex, nameHex, peer;
    uint64_t size, handle, timeoutMs;
    uint8_t name[kContentNameBytes];
    if (f == nullptr || !ArgString(info, 0, "peer", &peerHex) || !ArgString(info, 1, "sha256", &nameHex) ||
        !ArgU64(info, 2, "sizeBytes", &size) || !ArgU64(info, 3, "handle", &handle) || !ArgU64(info, 4, "timeoutMs", &timeoutMs))
      return env.Undefined();
    if (!FromHex(peerHex, &peer)) {
      ThrowCode(env, "EINVAL", "peer must be a fabric address in hex");
      return env.Undefined();
    }
    if (!ParseHexName(nameHex, name)) {
      ThrowCode(env, "EINVAL", "sha256 must be 64 lowercase hex digits");
      return env.Undefined();
    }
    if (timeoutMs == 0 || timeoutMs > 3600000) {
      ThrowCode(env, "EINVAL", "timeoutMs must be in 1..3600000");
      return env.Undefined();
    }
    const bool stream = info.Length() > 5 && info[5].IsBoolean() && info[5].As<Napi::Boolean>().Value();
    auto* settle = new Settle{Napi::Promise::Deferred::New(env), Status::kOk, std::string()};
    Napi::Promise promise = settle->deferred.Promise();
    std::shared_ptr<Shared> shared = shared_;
    if (shared->inFlight++ == 0) shared->tsfn.Ref(env);
    f->Fetch(peer, name, size, handle, timeoutMs, [shared, settle](Status s, const std::string& message) {
      settle->status = s;
      settle->message = message;
      napi_status queued = shared->tsfn.NonBlockingCall(settle, [shared](Napi::Env env, Napi::Function, Settle* st) {
        if (st->status == Status::kOk) st->deferred.Resolve(Napi::String::New(env, st->message));  // the SHA-256
        else st->deferred.Reject(StatusError(env, st->status, st->message).Value());
        delete st;
        if (--shared->inFlight == 0 && !shared->released) shared->tsfn.Unref(env);
      });
      // Only fails once the function is released (the wrapper is gone): nothing is left to settle.
      if (queued != napi_ok) delete settle;
    }, stream);
    return promise;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Fabric* f = Open(info);
    if (f == nullptr) return info.Env().Undefined();
    const FabricStats s = f->Stats();
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    auto set = [&](const char* k, uint64_t v) { o.Set(k, Napi::Number::New(env, static_cast<double>(v))); };
    set("fetches", s.fetches);
    set("fetchedBytes", s.fetchedBytes);
    set("fetchFailures", s.fetchFailures);
    set("fetchesAbsent", s.fetchesAbsent);
    set("fetchesInFlight", s.fetchesInFlight);
    set("holdsGranted", s.holdsGranted);
    set("holdsRefused", s.holdsRefused);
    set("holdsExpired", s.holdsExpired);
    set("holdsActive", s.holdsActive);
    set("servedBytes", s.servedBytes);
    set("badMessages", s.badMessages);
    set("sendsDropped", s.sendsDropped);
    set("piecesCorrupt", s.piecesCorrupt);
    set("blocksCorrupt", s.blocksCorrupt);
    return o;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown();
    return info.Env().Undefined();
  }

  std::unique_ptr<Fabric> fabric_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace

void InitFabric(Napi::Env env, Napi::Object exports) { exports.Set("Fabric", FabricWrap::Define(env)); }

}  // namespace cascade

#else

namespace cascade {
void InitFabric(Napi::Env, Napi::Object) {}  // built without libfabric: no Fabric class (features.libfabric false)
}  // namespace cascade

#endif

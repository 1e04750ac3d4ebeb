// JS class FuseSession over engine/session.h: the native FUSE engine. Requests the engine does not
// answer itself reach JS through a thread-safe function (a bounded queue: a full queue makes the
// worker threads wait, so the kernel's queue is the backlog); JS answers with reply().
#include <sys/uio.h>

#include <sched.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../engine/session.h"
#include "common.h"
#include "init.h"

namespace cascade {

namespace {

using engine::Session;
using engine::SessionOptions;

// Requests waiting for the JS thread, at most (then the workers block, and the kernel queues).
constexpr size_t kRequestQueueMax = 4096;
// Requests at least this large are handed to JS without a copy (an external buffer).
constexpr size_t kExternalRequestMinBytes = 64 * 1024;

using Request = std::vector<uint8_t>;

// After JS answers its last request in progress it may wait briefly for the next one (takeNext):
// a forward that finds it waiting goes straight to it, without waking the event loop (uv_async:
// 46 us from a worker's forward to the JS callback, on average, in a stream of creates here; three
// such trips per create). FIFO holds: JS waits only while no request is in the thread-safe
// function's queue, and takes everything that came meanwhile, in order. The window: creates of
// 4 KiB files from one Python process here ran at 1,570/s with 100 us, 1,740/s with 250 us and
// 1,780/s with 500 us (the gap between a create's requests is the client's own time); 250 us keeps
// most of that and bounds the CPU spent after the last request of a burst.
constexpr int64_t kJsSpinNs = 250'000;
constexpr size_t kDirectMax = 256;  // requests handed over during one wait, at most

struct DirectQueue {
  std::mutex mutex;
  bool jsWaiting = false;
  std::vector<Request*> direct;
  std::atomic<size_t> directCount{0};
  uint64_t inTsfn = 0;         // posted to the thread-safe function, not delivered yet
  int64_t idleSinceNs = 0;     // when JS last went idle (takeNext), until the next forward
  bool streaming = true;       // the last forward came within kJsSpinNs of JS going idle
  std::atomic<uint64_t> handedOver{0}, waits{0};
  ~DirectQueue() {
    for (Request* r : direct) delete r;
  }
};

Napi::Buffer<uint8_t> RequestBuffer(Napi::Env env, std::unique_ptr<Request> owned) {
  if (owned->size() >= kExternalRequestMinBytes) {
    Request* raw = owned.release();
    return Napi::Buffer<uint8_t>::New(env, raw->data(), raw->size(), [](Napi::Env, uint8_t*, Request* r) { delete r; }, raw);
  }
  return Napi::Buffer<uint8_t>::Copy(env, owned->data(), owned->size());
}

void DeliverRequest(Napi::Env env, Napi::Function callback, DirectQueue* queue, Request* request) {
  std::unique_ptr<Request> owned(request);
  if (env == nullptr) return;  // the queue is being drained at shutdown
  {
    std::lock_guard<std::mutex> lock(queue->mutex);
    queue->inTsfn--;
  }
  callback.Call({RequestBuffer(env, std::move(owned))});
}

struct InitResult {
  bool ok;
  std::string why;
};

void DeliverInit(Napi::Env env, Napi::Function callback, std::nullptr_t*, InitResult* result) {
  std::unique_ptr<InitResult> owned(result);
  if (env == nullptr) return;
  callback.Call({Napi::Boolean::New(env, owned->ok), Napi::String::New(env, owned->why)});
}

using RequestFn = Napi::TypedThreadSafeFunction<DirectQueue, Request, DeliverRequest>;
using InitFn = Napi::TypedThreadSafeFunction<std::nullptr_t, InitResult, DeliverInit>;

bool OptU32(Napi::Env env, Napi::Object o, const char* name, uint32_t* out, bool required) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined() && !required) return true;
  if (!v.IsNumber()) {
    ThrowCode(env, "EINVAL", std::string("options.") + name + " must be a number");
    return false;
  }
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 4294967295.0 || d != static_cast<double>(static_cast<uint64_t>(d))) {
    ThrowCode(env, "EINVAL", std::string("options.") + name + " must be a 32-bit unsigned integer");
    return false;
  }
  *out = static_cast<uint32_t>(d);
  return true;
}

bool OptBool(Napi::Env env, Napi::Object o, const char* name, bool* out) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) return true;
  if (!v.IsBoolean()) {
    ThrowCode(env, "EINVAL", std::string("options.") + name + " must be a boolean");
    return false;
  }
  *out = v.As<Napi::Boolean>().Value();
  return true;
}

class FuseSessionWrap;

// Fills a passthrough backing file from the arena on a libuv worker. The worker holds a reference to
// the session, so the arena mapping it reads stays mapped even if unmount() runs meanwhile.
class ArenaFillWorker : public PromiseWorker {
 public:
  ArenaFillWorker(Napi::Env env, std::shared_ptr<Session> session, int fd, engine::ReadSource source)
      : PromiseWorker(env, "cascade-fuse-fill"), session_(std::move(session)), fd_(fd), source_(std::move(source)) {}
  void Execute() override { status_ = session_->WriteArenaTo(fd_, source_, &message_); }

 private:
  std::shared_ptr<Session> session_;
  int fd_;
  engine::ReadSource source_;
};

bool ReadSourceArg(const Napi::CallbackInfo& info, size_t sizeIndex, size_t extentsIndex, engine::ReadSource* src) {
  Napi::Env env = info.Env();
  uint64_t size;
  if (!ArgU64(info, sizeIndex, "sizeBytes", &size)) return false;
  if (info.Length() <= extentsIndex || !info[extentsIndex].IsArray()) {
    ThrowCode(env, "EINVAL", "extents must be an array of numbers");
    return false;
  }
  Napi::Array arr = info[extentsIndex].As<Napi::Array>();
  if (arr.Length() % 2 != 0 || arr.Length() / 2 > engine::kExtentsPerSourceMax) {
    ThrowCode(env, "EINVAL", "extents must be pairs [offset, length], at most 65536");
    return false;
  }
  src->sizeBytes = size;
  for (uint32_t i = 0; i < arr.Length(); i += 2) {
    Napi::Value a = arr.Get(i), b = arr.Get(i + 1);
    if (!a.IsNumber() || !b.IsNumber()) {
      ThrowCode(env, "EINVAL", "extents must be numbers");
      return false;
    }
    const double off = a.As<Napi::Number>().DoubleValue(), len = b.As<Napi::Number>().DoubleValue();
    if (!(off >= 0) || !(len >= 0) || off > kSafeIntegerMax || len > kSafeIntegerMax || off != static_cast<double>(static_cast<uint64_t>(off)) ||
        len != static_cast<double>(static_cast<uint64_t>(len))) {
      ThrowCode(env, "EINVAL", "extents must be non-negative safe integers");
      return false;
    }
    src->extents.emplace_back(static_cast<uint64_t>(off), static_cast<uint64_t>(len));
  }
  return true;
}

class FuseSessionWrap : public Napi::ObjectWrap<FuseSessionWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "FuseSession",
                       {
                           InstanceMethod<&FuseSessionWrap::Reply>("reply"),
                           InstanceMethod<&FuseSessionWrap::SetReadSource>("setReadSource"),
                           InstanceMethod<&FuseSessionWrap::ClearReadSource>("clearReadSource"),
                           InstanceMethod<&FuseSessionWrap::SetLoadingReadSource>("setLoadingReadSource"),
                           InstanceMethod<&FuseSessionWrap::WriteArenaTo>("writeArenaTo"),
                           InstanceMethod<&FuseSessionWrap::MarkReadOnly>("markReadOnly"),
                           InstanceMethod<&FuseSessionWrap::ReadOpenFlags>("readOpenFlags"),
                           InstanceMethod<&FuseSessionWrap::AttrValidMs>("attrValidMs"),
                           InstanceMethod<&FuseSessionWrap::NodeQuery<&Session::TryWriterOpen>>("tryWriterOpen"),
                           InstanceMethod<&FuseSessionWrap::NodeQuery<&Session::HasPageCacheOpens>>("hasPageCacheOpens"),
                           InstanceMethod<&FuseSessionWrap::WriterReleased>("writerReleased"),
                           InstanceMethod<&FuseSessionWrap::HoldOffPageCache>("holdOffPageCache"),
                           InstanceMethod<&FuseSessionWrap::SetStagedAttr>("setStagedAttr"),
                           InstanceMethod<&FuseSessionWrap::ClearStagedAttr>("clearStagedAttr"),
                           InstanceMethod<&FuseSessionWrap::OpenBacking>("openBacking"),
                           InstanceMethod<&FuseSessionWrap::CloseBacking>("closeBacking"),
                           InstanceMethod<&FuseSessionWrap::Negotiated>("negotiated"),
                           InstanceMethod<&FuseSessionWrap::Stats>("stats"),
                           InstanceMethod<&FuseSessionWrap::Unmount>("unmount"),
                           InstanceMethod<&FuseSessionWrap::DrainTouched>("drainTouched"),
                           InstanceMethod<&FuseSessionWrap::TakeNext>("takeNext"),
                           InstanceMethod<&FuseSessionWrap::StageCreate>("stageCreate"),
                           InstanceMethod<&FuseSessionWrap::StageAttach>("stageAttach"),
                           InstanceMethod<&FuseSessionWrap::StageInfo>("stageInfo"),
                           InstanceMethod<&FuseSessionWrap::StageFreeze>("stageFreeze"),
                           InstanceMethod<&FuseSessionWrap::StageRead>("stageRead"),
                           InstanceMethod<&FuseSessionWrap::StageSeal>("stageSeal"),
                           InstanceMethod<&FuseSessionWrap::StageTrySeal>("stageTrySeal"),
                           InstanceMethod<&FuseSessionWrap::StageDrop>("stageDrop"),
                       });
  }

  // new FuseSession(options, onRequest(buffer), onInit(ok, why)): mounts and starts the workers.
  explicit FuseSessionWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FuseSessionWrap>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 3 || !info[0].IsObject() || !info[1].IsFunction() || !info[2].IsFunction()) {
      ThrowCode(env, "EINVAL", "FuseSession(options, onRequest, onInit)");
      return;
    }
    Napi::Object o = info[0].As<Napi::Object>();
    SessionOptions opts;
    Napi::Value mnt = o.Get("mountpoint");
    if (!mnt.IsString()) {
      ThrowCode(env, "EINVAL", "options.mountpoint must be a string");
      return;
    }
    opts.mountpoint = mnt.As<Napi::String>().Utf8Value();
    uint32_t threads = opts.threads, maxPages = opts.maxPages, arenaFd = 0, uid = 0, gid = 0;
    bool hasArena = !o.Get("arenaFd").IsUndefined();
    if (!OptU32(env, o, "threads", &threads, false) || !OptU32(env, o, "maxPages", &maxPages, false) ||
        !OptU32(env, o, "uid", &uid, true) || !OptU32(env, o, "gid", &gid, true) ||
        (hasArena && !OptU32(env, o, "arenaFd", &arenaFd, true)) || !OptBool(env, o, "allowOther", &opts.allowOther) ||
        !OptBool(env, o, "passthrough", &opts.passthrough) || !OptBool(env, o, "uring", &opts.uring)) {
      return;
    }
    uint32_t uringDepth = opts.uringDepth;
    if (!OptU32(env, o, "uringDepth", &uringDepth, false)) return;
    if (uringDepth == 0 || uringDepth > engine::kUringDepthMax) {
      ThrowCode(env, "EINVAL", "options.uringDepth must be 1.." + std::to_string(engine::kUringDepthMax));
      return;
    }
    opts.uringDepth = uringDepth;
    opts.threads = threads;
    opts.maxPages = maxPages;
    opts.uid = uid;
    opts.gid = gid;
    opts.arenaFd = hasArena ? static_cast<int>(arenaFd) : -1;
    // Native writes: the arena itself (then reads are served from it too), the block limit, hashers.
    Napi::Value arena = o.Get("arena");
    if (!arena.IsUndefined()) {
      opts.arena = arena.IsObject() ? ArenaOf(arena) : nullptr;
      if (!opts.arena) {
        ThrowCode(env, "EINVAL", "options.arena must be an open Arena");
        return;
      }
      uint32_t hashThreads = opts.hashThreads;
      Napi::Value max = o.Get("maxBlockBytes");
      if (!max.IsNumber() || !(max.As<Napi::Number>().DoubleValue() >= 1) || max.As<Napi::Number>().DoubleValue() > kSafeIntegerMax) {
        ThrowCode(env, "EINVAL", "options.maxBlockBytes must be a positive safe integer with options.arena");
        return;
      }
      if (!OptU32(env, o, "hashThreads", &hashThreads, false)) return;
      opts.maxBlockBytes = static_cast<uint64_t>(max.As<Napi::Number>().DoubleValue());
      opts.hashThreads = hashThreads;
    }

    // Native metadata: the node table and attribute cache JS keeps (meta_binding.cc).
    Napi::Value meta = o.Get("meta");
    if (!meta.IsUndefined()) {
      opts.meta = MetaTableOf(meta);
      if (!opts.meta) {
        ThrowCode(env, "EINVAL", "options.meta must be a MetaTable");
        return;
      }
      uint32_t openFlags = opts.openFlags, entryValidMs = 1000, attrValidMs = 1000;
      if (!OptBool(env, o, "nativeOpens", &opts.nativeOpens) || !OptBool(env, o, "pageCache", &opts.pageCache) ||
          !OptBool(env, o, "trackReads", &opts.trackReads) ||
          !OptU32(env, o, "openFlags", &openFlags, false) ||
          !OptU32(env, o, "entryValidMs", &entryValidMs, false) || !OptU32(env, o, "attrValidMs", &attrValidMs, false)) {
        return;
      }
      if (opts.nativeOpens && !opts.arena) {
        ThrowCode(env, "EINVAL", "options.nativeOpens needs options.arena");
        return;
      }
      opts.openFlags = openFlags;
      opts.entryValidMs = entryValidMs;
      opts.attrValidMs = attrValidMs;
    }

    direct_ = std::make_shared<DirectQueue>();
    requests_ = RequestFn::New(env, info[1].As<Napi::Function>(), "cascade-fuse-request", kRequestQueueMax, 1, direct_.get());
    init_ = InitFn::New(env, info[2].As<Napi::Function>(), "cascade-fuse-init", 1, 1);
    RequestFn requests = requests_;
    InitFn init = init_;
    std::shared_ptr<DirectQueue> direct = direct_;
    auto forward = [requests, direct](Request&& request, const std::function<void()>& beforeWaiting) mutable {
      auto* r = new Request(std::move(request));
      {
        std::lock_guard<std::mutex> lock(direct->mutex);
        if (direct->idleSinceNs != 0) {
          direct->streaming = engine::SteadyNs() - direct->idleSinceNs <= kJsSpinNs;
          direct->idleSinceNs = 0;
        }
        if (direct->jsWaiting && direct->direct.size() < kDirectMax) {
          direct->direct.push_back(r);
          direct->directCount.fetch_add(1, std::memory_order_release);
          return true;
        }
        direct->inTsfn++;  // before the post: a takeNext from now on leaves it to the event loop
      }
      napi_status st = requests.NonBlockingCall(r);
      if (st == napi_queue_full) {
        beforeWaiting();  // JS is behind: another worker keeps serving what needs no JS meanwhile
        st = requests.BlockingCall(r);
      }
      if (st != napi_ok) {
        delete r;
        std::lock_guard<std::mutex> lock(direct->mutex);
        direct->inTsfn--;
        return false;
      }
      return true;
    };
    auto onInit = [init](bool ok, const std::string& why) mutable {
      auto* r = new InitResult{ok, why};
      if (init.NonBlockingCall(r) != napi_ok) delete r;
    };
    std::string error;
    std::unique_ptr<Session> session;
    const Status st = Session::Mount(opts, forward, onInit, &session, &error);
    session_ = std::move(session);
    if (st != Status::kOk) {
      requests_.Abort();
      init_.Abort();
      released_ = true;
      ThrowStatus(env, st, error);
      return;
    }
  }

  ~FuseSessionWrap() override { Stop(); }

 private:
  Session* Live(Napi::Env env) {
    if (!session_) {
      ThrowCode(env, "EBADF", "the FUSE session is unmounted");
      return nullptr;
    }
    return session_.get();
  }

  void Stop() {
    if (!released_) {
      released_ = true;
      // Wake workers blocked on a full queue first, or joining them below would wait forever.
      requests_.Abort();
      init_.Abort();
    }
    if (session_) {
      session_->Unmount();
      session_.reset();
    }
  }

  // reply(unique, errno, payload?: Buffer | Buffer[]): errno 0 sends the payload.
  Napi::Value Reply(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t unique, error;
    if (!ArgU64(info, 0, "unique", &unique) || !ArgU64(info, 1, "errno", &error)) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    if (error > 4095) {
      s->Reply(unique, EIO, nullptr, 0);  // the request still gets an answer (a ring entry waits for it)
      ThrowCode(env, "EINVAL", "errno must be 0..4095");
      return env.Undefined();
    }
    std::vector<struct iovec> iov;
    if (info.Length() > 2 && !info[2].IsUndefined()) {
      auto add = [&](Napi::Value v) {
        if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) return false;
        Napi::Uint8Array a = v.As<Napi::Uint8Array>();
        iov.push_back({a.Data(), a.ByteLength()});
        return true;
      };
      bool ok = true;
      if (info[2].IsArray()) {
        Napi::Array arr = info[2].As<Napi::Array>();
        if (arr.Length() >= static_cast<uint32_t>(engine::kReplyIovMax)) ok = false;
        for (uint32_t i = 0; ok && i < arr.Length(); i++) ok = add(arr.Get(i));
      } else {
        ok = add(info[2]);
      }
      if (!ok) {
        s->Reply(unique, EIO, nullptr, 0);  // the request still gets an answer (a ring entry waits for it)
        ThrowCode(env, "EINVAL", "payload must be a Buffer or an array of fewer than 1024 Buffers");
        return env.Undefined();
      }
    }
    const Status st = s->Reply(unique, static_cast<int32_t>(error), iov.data(), static_cast<int>(iov.size()));
    // kStale: the request was interrupted and is gone, which is not the caller's error.
    return Napi::Boolean::New(env, st == Status::kOk);
  }

  // setReadSource(fh, sizeBytes, extents: number[] flat [arenaOffsetBytes, lengthBytes, ...]).
  Napi::Value SetReadSource(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t fh;
    engine::ReadSource src;
    if (!ArgU64(info, 0, "fh", &fh) || !ReadSourceArg(info, 1, 2, &src)) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    const Status st = s->SetReadSource(fh, std::move(src));
    if (st != Status::kOk) ThrowStatus(env, st, "setReadSource: extents outside the arena, too many sources, or no arena");
    return env.Undefined();
  }

  // writeArenaTo(fd, sizeBytes, extents): Promise<void>, the bytes copied on a worker thread.
  Napi::Value WriteArenaTo(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t fd;
    engine::ReadSource src;
    if (!ArgU64(info, 0, "fd", &fd) || fd > 0x7fffffff || !ReadSourceArg(info, 1, 2, &src)) return env.Undefined();
    if (Live(env) == nullptr) return env.Undefined();
    auto* w = new ArenaFillWorker(env, session_, static_cast<int>(fd), std::move(src));
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
  }

  // setLoadingReadSource(fh, arenaHandle): reads of fh wait for the block's fill (see Session).
  Napi::Value SetLoadingReadSource(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t fh, handle;
    if (!ArgU64(info, 0, "fh", &fh) || !ArgU64(info, 1, "handle", &handle)) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    const Status st = s->SetLoadingReadSource(fh, handle);
    if (st != Status::kOk) ThrowStatus(env, st, "setLoadingReadSource: no arena, a stale block, or too many sources");
    return env.Undefined();
  }

  Napi::Value ClearReadSource(const Napi::CallbackInfo& info) {
    uint64_t fh;
    if (!ArgU64(info, 0, "fh", &fh)) return info.Env().Undefined();
    if (session_) session_->ClearReadSource(fh);
    return info.Env().Undefined();
  }

  Napi::Value MarkReadOnly(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t fh;
    if (!ArgU64(info, 0, "fh", &fh)) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    const Status st = s->MarkReadOnly(fh);
    if (st != Status::kOk) ThrowStatus(env, st, "markReadOnly: too many handles");
    return env.Undefined();
  }

  // readOpenFlags(nodeid, fh, contentKey, sizeBytes, cacheable) -> open_out flags (Session::ReadOpenFlags), or
  // null when another content is open on the node (nothing counted).
  Napi::Value ReadOpenFlags(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t nodeid, fh, key, size;
    if (!ArgU64(info, 0, "nodeid", &nodeid) || !ArgU64(info, 1, "fh", &fh) || !ArgU64(info, 2, "contentKey", &key) ||
        !ArgU64(info, 3, "sizeBytes", &size)) {
      return env.Undefined();
    }
    if (!info[4].IsBoolean()) {
      Napi::TypeError::New(env, "cacheable must be a boolean").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    const uint32_t flags = s->ReadOpenFlags(nodeid, fh, key, size, info[4].As<Napi::Boolean>().Value());
    if (flags == cascade::engine::kReadOpenConflict) return env.Null();
    return Napi::Number::New(env, flags);
  }

  // attrValidMs(nodeid, sizeBytes) -> the attributes' lifetime for a reply (Session::AttrValidMsFor).
  Napi::Value AttrValidMs(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t nodeid, size;
    if (!ArgU64(info, 0, "nodeid", &nodeid) || !ArgU64(info, 1, "sizeBytes", &size)) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    return Napi::Number::New(env, static_cast<double>(s->AttrValidMsFor(nodeid, size)));
  }

  // f(nodeid) -> bool for a Session method of that shape: tryWriterOpen (Session::TryWriterOpen;
  // writerReleased(nodeid) undoes it) and hasPageCacheOpens (Session::HasPageCacheOpens).
  template <bool (Session::*Method)(uint64_t)>
  Napi::Value NodeQuery(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t nodeid;
    if (!ArgU64(info, 0, "nodeid", &nodeid)) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    return Napi::Boolean::New(env, (s->*Method)(nodeid));
  }

  Napi::Value WriterReleased(const Napi::CallbackInfo& info) {
    uint64_t nodeid;
    if (!ArgU64(info, 0, "nodeid", &nodeid)) return info.Env().Undefined();
    if (session_) session_->WriterReleased(nodeid);
    return info.Env().Undefined();
  }

  // holdOffPageCache(path, holdMs) (Session::HoldOffPageCache).
  Napi::Value HoldOffPageCache(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t holdMs;
    if (info.Length() < 1 || !info[0].IsString()) {
      ThrowCode(env, "EINVAL", "path must be a string");
      return env.Undefined();
    }
    if (!ArgU64(info, 1, "holdMs", &holdMs)) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    s->HoldOffPageCache(info[0].As<Napi::String>().Utf8Value(), holdMs);
    return env.Undefined();
  }

  // setStagedAttr(fh, nodeid, attr: 88-byte struct fuse_attr): fstat of a staged writer in C++.
  Napi::Value SetStagedAttr(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t fh, nodeid, attrBytes;
    uint8_t* attr;
    if (!ArgU64(info, 0, "fh", &fh) || !ArgU64(info, 1, "nodeid", &nodeid) || !ArgBytes(info, 2, "attr", &attr, &attrBytes)) {
      return env.Undefined();
    }
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    const Status st = s->SetStagedAttr(fh, nodeid, attr, attrBytes);
    if (st == Status::kInvalid) ThrowCode(env, "EINVAL", "setStagedAttr: attr must be an 88-byte struct fuse_attr");
    else if (st != Status::kOk) ThrowStatus(env, st, "setStagedAttr: too many handles");
    return env.Undefined();
  }

  Napi::Value ClearStagedAttr(const Napi::CallbackInfo& info) {
    uint64_t fh;
    if (!ArgU64(info, 0, "fh", &fh)) return info.Env().Undefined();
    if (session_) session_->ClearStagedAttr(fh);
    return info.Env().Undefined();
  }

  Napi::Value OpenBacking(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t fd;
    if (!ArgU64(info, 0, "fd", &fd) || fd > 0x7fffffff) return env.Undefined();
    Session* s = Live(env);
    if (s == nullptr) return env.Undefined();
    int32_t id = -1;
    std::string error;
    const Status st = s->OpenBacking(static_cast<int>(fd), &id, &error);
    if (st != Status::kOk) {
      ThrowStatus(env, st, error);
      return env.Undefined();
    }
    return Napi::Number::New(env, id);
  }

  Napi::Value CloseBacking(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t id;
    if (!ArgU64(info, 0, "backingId", &id) || id > 0x7fffffff) return env.Undefined();
    if (session_) session_->CloseBacking(static_cast<int32_t>(id));
    return env.Undefined();
  }

  Napi::Value Negotiated(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    if (!session_) return o;
    const engine::Negotiated n = session_->negotiated();
    o.Set("done", n.done);
    o.Set("major", n.major);
    o.Set("minor", n.minor);
    o.Set("maxWriteBytes", n.maxWriteBytes);
    o.Set("maxPages", n.maxPages);
    o.Set("maxReadaheadBytes", n.maxReadaheadBytes);
    o.Set("passthrough", n.passthrough);
    o.Set("directIoMmap", n.directIoMmap);
    o.Set("uring", n.uring);
    if (!n.uringWhyNot.empty()) o.Set("uringWhyNot", n.uringWhyNot);
    o.Set("arena", session_->mapsArena());
    return o;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    if (!session_) return o;
    const engine::SessionStats s = session_->stats();
    o.Set("requests", static_cast<double>(s.requests));
    o.Set("forwarded", static_cast<double>(s.forwarded));
    o.Set("servedReads", static_cast<double>(s.servedReads));
    o.Set("servedReadBytes", static_cast<double>(s.servedReadBytes));
    o.Set("gatedReads", static_cast<double>(s.gatedReads));
    o.Set("gatedToJs", static_cast<double>(s.gatedToJs));
    o.Set("servedFlushes", static_cast<double>(s.servedFlushes));
    o.Set("servedWrites", static_cast<double>(s.servedWrites));
    o.Set("servedWriteBytes", static_cast<double>(s.servedWriteBytes));
    o.Set("stagedFiles", static_cast<double>(session_->stager() ? session_->stager()->stages() : 0));
    o.Set("replyErrors", static_cast<double>(s.replyErrors));
    o.Set("servedLookups", static_cast<double>(s.servedLookups));
    o.Set("servedAbsentLookups", static_cast<double>(s.servedAbsentLookups));
    o.Set("servedGetattrs", static_cast<double>(s.servedGetattrs));
    o.Set("servedForgets", static_cast<double>(s.servedForgets));
    o.Set("servedOpens", static_cast<double>(s.servedOpens));
    o.Set("servedReleases", static_cast<double>(s.servedReleases));
    o.Set("earlyReleases", static_cast<double>(s.earlyReleases));
    o.Set("pageCacheOpens", static_cast<double>(s.pageCacheOpens));
    o.Set("pageCacheDirect", static_cast<double>(s.pageCacheDirect));
    o.Set("pageCacheAttrNotices", static_cast<double>(s.pageCacheAttrNotices));
    o.Set("readOpenConflicts", static_cast<double>(s.readOpenConflicts));
    o.Set("servedOpendirs", static_cast<double>(s.servedOpendirs));
    o.Set("servedReaddirs", static_cast<double>(s.servedReaddirs));
    o.Set("spinHits", static_cast<double>(s.spinHits));
    o.Set("spinTimeouts", static_cast<double>(s.spinTimeouts));
    o.Set("nativeOpens", static_cast<double>(s.nativeOpensNow));
    o.Set("touchedDropped", static_cast<double>(s.touchedDropped));
    o.Set("uringQueues", s.uring.queues);
    o.Set("jsWaits", static_cast<double>(direct_ ? direct_->waits.load() : 0));
    o.Set("jsHandedOver", static_cast<double>(direct_ ? direct_->handedOver.load() : 0));
    o.Set("uringRequests", static_cast<double>(s.uring.requests));
    o.Set("uringCrossThreadReplies", static_cast<double>(s.uring.crossThreadReplies));
    o.Set("uringErrors", static_cast<double>(s.uring.errors));
    o.Set("uringRegisterErrors", static_cast<double>(s.uring.registerErrors));
    o.Set("uringWaitingForJs", static_cast<double>(s.uring.handedNow));
    return o;
  }

  // Arena handles of blocks opened natively since the last call.
  Napi::Value DrainTouched(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const std::vector<uint64_t> handles = session_ ? session_->DrainTouched() : std::vector<uint64_t>{};
    Napi::Array a = Napi::Array::New(env, handles.size());
    for (size_t i = 0; i < handles.size(); i++) a.Set(static_cast<uint32_t>(i), static_cast<double>(handles[i]));
    return a;
  }

  Napi::Value Unmount(const Napi::CallbackInfo& info) {
    Stop();
    return info.Env().Undefined();
  }

  engine::Stager* LiveStager(Napi::Env env) {
    Session* s = Live(env);
    if (s == nullptr) return nullptr;
    if (s->stager() == nullptr) ThrowCode(env, "EOPNOTSUPP", "the session was mounted without an arena: no native writes");
    return s->stager();
  }

  static Napi::Object InfoObject(Napi::Env env, const engine::StageInfo& i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("sizeBytes", static_cast<double>(i.sizeBytes));
    o.Set("mtimeMs", static_cast<double>(i.mtimeMs));
    o.Set("dirty", i.dirty);
    o.Set("forwarding", i.forwarding);
    return o;
  }

  // stageCreate(): number, a new empty stage.
  Napi::Value StageCreate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    engine::Stager* st = LiveStager(env);
    if (st == nullptr) return env.Undefined();
    uint64_t id;
    const Status s = st->Create(&id);
    if (s != Status::kOk) {
      ThrowStatus(env, s, "stageCreate: too many staged files, or the arena has no slot");
      return env.Undefined();
    }
    return Napi::Number::New(env, static_cast<double>(id));
  }

  // stageAttach(fh, id): WRITEs of fh land in the stage.
  Napi::Value StageAttach(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t fh, id;
    if (!ArgU64(info, 0, "fh", &fh) || !ArgU64(info, 1, "id", &id)) return env.Undefined();
    engine::Stager* st = LiveStager(env);
    if (st == nullptr) return env.Undefined();
    const Status s = st->Attach(fh, id);
    if (s != Status::kOk) ThrowStatus(env, s, "stageAttach: no such stage, or too many handles");
    return env.Undefined();
  }

  // stageInfo(id, takeDirty): {sizeBytes, mtimeMs, dirty, forwarding}.
  Napi::Value StageInfo(const Napi::CallbackInfo& info) { return StageReport(info, false); }

  // stageFreeze(id): info; the stage takes no more writes (they reach JS).
  Napi::Value StageFreeze(const Napi::CallbackInfo& info) { return StageReport(info, true); }

  Napi::Value StageReport(const Napi::CallbackInfo& info, bool freeze) {
    Napi::Env env = info.Env();
    uint64_t id;
    if (!ArgU64(info, 0, "id", &id)) return env.Undefined();
    engine::Stager* st = LiveStager(env);
    if (st == nullptr) return env.Undefined();
    engine::StageInfo i;
    const Status s = freeze ? st->Freeze(id, &i) : st->Info(id, info.Length() > 1 && info[1].ToBoolean().Value(), &i);
    if (s != Status::kOk) {
      ThrowStatus(env, s, freeze ? "stageFreeze: no such stage" : "stageInfo: no such stage");
      return env.Undefined();
    }
    return InfoObject(env, i);
  }

  static Napi::Object SealedObject(Napi::Env env, const engine::Sealed& sealed) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("handle", static_cast<double>(sealed.handle));
    o.Set("sizeBytes", static_cast<double>(sealed.sizeBytes));
    o.Set("sha256", sealed.sha256Hex);
    return o;
  }

  // stageRead(id, offsetBytes, target: Buffer): bytes copied.
  Napi::Value StageRead(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t id, offset, targetBytes;
    uint8_t* target;
    if (!ArgU64(info, 0, "id", &id) || !ArgU64(info, 1, "offsetBytes", &offset) || !ArgBytes(info, 2, "target", &target, &targetBytes)) {
      return env.Undefined();
    }
    engine::Stager* st = LiveStager(env);
    if (st == nullptr) return env.Undefined();
    uint64_t n = 0;
    const Status s = st->Read(id, offset, target, targetBytes, &n);
    if (s != Status::kOk) {
      ThrowStatus(env, s, "stageRead: no such stage, or its bytes were sealed away");
      return env.Undefined();
    }
    return Napi::Number::New(env, static_cast<double>(n));
  }

  // stageSeal(id): Promise<{handle, sizeBytes, sha256}>, hashed and settled on a worker thread.
  Napi::Value StageSeal(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t id;
    if (!ArgU64(info, 0, "id", &id)) return env.Undefined();
    if (LiveStager(env) == nullptr) return env.Undefined();
    class SealWorker : public PromiseWorker {
     public:
      SealWorker(Napi::Env env, std::shared_ptr<Session> session, uint64_t id)
          : PromiseWorker(env, "cascade-stage-seal"), session_(std::move(session)), id_(id) {}
      void Execute() override {
        status_ = session_->stager()->Seal(id_, &sealed_);
        if (status_ != Status::kOk) message_ = "stageSeal: the stage is gone or could not be hashed";
      }
      Napi::Value Result() override { return SealedObject(Env(), sealed_); }

     private:
      std::shared_ptr<Session> session_;  // keeps the stager alive while the worker runs
      uint64_t id_;
      engine::Sealed sealed_;
    };
    auto* w = new SealWorker(env, session_, id);
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
  }

  // stageTrySeal(id): {handle, sizeBytes, sha256} sealed now on this thread, or undefined when the
  // hashers are still at it (then stageSeal).
  Napi::Value StageTrySeal(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t id;
    if (!ArgU64(info, 0, "id", &id)) return env.Undefined();
    engine::Stager* st = LiveStager(env);
    if (st == nullptr) return env.Undefined();
    engine::Sealed sealed;
    bool done = false;
    const Status s = st->TrySeal(id, &sealed, &done);
    if (s != Status::kOk) {
      ThrowStatus(env, s, "stageTrySeal: the stage is gone or could not be hashed");
      return env.Undefined();
    }
    if (!done) return env.Undefined();
    return SealedObject(env, sealed);
  }

  // stageDrop(id): forget it; its block (if it still has one) is freed.
  Napi::Value StageDrop(const Napi::CallbackInfo& info) {
    uint64_t id;
    if (!ArgU64(info, 0, "id", &id)) return info.Env().Undefined();
    if (session_ && session_->stager()) session_->stager()->Drop(id);
    return info.Env().Undefined();
  }

  // takeNext(): requests that came while JS waited briefly for one (an array, in order; often empty).
  // Called by JS when it has no request in progress; waits only while requests come back to back.
  Napi::Value TakeNext(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Array out = Napi::Array::New(env);
    DirectQueue* q = direct_.get();
    if (q == nullptr || released_) return out;
    {
      std::lock_guard<std::mutex> lock(q->mutex);
      if (q->inTsfn > 0) return out;  // the event loop delivers those first
      q->idleSinceNs = engine::SteadyNs();
      if (!q->streaming) return out;
      q->jsWaiting = true;
    }
    q->waits.fetch_add(1, std::memory_order_relaxed);
    const int64_t startNs = engine::SteadyNs();
    while (q->directCount.load(std::memory_order_acquire) == 0 && engine::SteadyNs() - startNs <= kJsSpinNs) {
      sched_yield();  // the caller and the workers run at once where they share this CPU
    }
    std::vector<Request*> taken;
    {
      std::lock_guard<std::mutex> lock(q->mutex);
      q->jsWaiting = false;
      taken.swap(q->direct);
      q->directCount.store(0, std::memory_order_relaxed);
    }
    q->handedOver.fetch_add(taken.size(), std::memory_order_relaxed);
    for (size_t i = 0; i < taken.size(); i++) out.Set(static_cast<uint32_t>(i), RequestBuffer(env, std::unique_ptr<Request>(taken[i])));
    return out;
  }

  std::shared_ptr<DirectQueue> direct_;
  std::shared_ptr<Session> session_;
  RequestFn requests_;
  InitFn init_;
  bool released_ = false;
};

}  // namespace

void InitEngine(Napi::Env env, Napi::Object exports) { exports.Set("FuseSession", FuseSessionWrap::Define(env)); }

}  // namespace cascade

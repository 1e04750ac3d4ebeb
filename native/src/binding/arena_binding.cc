// JS class Arena over core/arena.h. Small copies run on the calling (JS) thread, where a memcpy is
// cheaper than a hop to a worker; readAsync/writeAsync move large copies off the JS thread.
#include "init.h"

#include <cstring>
#include <memory>
#include <vector>

#include "../core/arena.h"
#include "common.h"

namespace cascade {

namespace {

class ArenaWrap;

class ArenaCopyWorker : public PromiseWorker {
 public:
  ArenaCopyWorker(Napi::Env env, ArenaWrap* owner, Arena* arena, bool write, uint64_t handle, uint64_t offsetBytes, uint8_t* data,
                  uint64_t lengthBytes);
  void Execute() override {
    status_ = write_ ? arena_->Write(handle_, offsetBytes_, data_, lengthBytes_)
                     : arena_->Read(handle_, offsetBytes_, data_, lengthBytes_, &copiedBytes_);
    if (status_ != Status::kOk) message_ = write_ ? "arena write failed" : "arena read failed";
  }

 protected:
  Napi::Value Result() override {
    return write_ ? Env().Undefined() : Napi::Number::New(Env(), static_cast<double>(copiedBytes_));
  }
  void Settled() override;

 private:
  ArenaWrap* owner_;
  Arena* arena_;
  bool write_;
  uint64_t handle_, offsetBytes_;
  uint8_t* data_;
  uint64_t lengthBytes_, copiedBytes_ = 0;
};

class ArenaWrap : public Napi::ObjectWrap<ArenaWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Arena",
                       {InstanceMethod("allocate", &ArenaWrap::Allocate), InstanceMethod("free", &ArenaWrap::Free),
                        InstanceMethod("write", &ArenaWrap::Write), InstanceMethod("read", &ArenaWrap::Read),
                        InstanceMethod("writeAsync", &ArenaWrap::WriteAsync), InstanceMethod("readAsync", &ArenaWrap::ReadAsync),
                        InstanceMethod("describe", &ArenaWrap::Describe), InstanceMethod("stats", &ArenaWrap::Stats),
                        InstanceMethod("region", &ArenaWrap::Region), InstanceMethod("close", &ArenaWrap::Close),
                        InstanceMethod("name", &ArenaWrap::Name), InstanceMethod("sha256Async", &ArenaWrap::Sha256Async),
                        InstanceMethod("fits", &ArenaWrap::Fits), InstanceMethod("freeBytes", &ArenaWrap::FreeBytes), InstanceMethod("fillFromFileAsync", &ArenaWrap::FillFromFileAsync),
                        InstanceMethod("fillRecordAsync", &ArenaWrap::FillRecordAsync), InstanceMethod("setStrictVerify", &ArenaWrap::SetStrictVerify)});
  }

  // The arena for a Fabric to register; null when closed.
  std::shared_ptr<Arena> Shared() const { return closed_ ? nullptr : arena_; }

  // new Arena(fd, capacityBytes, pageBytes, prefault)
  explicit ArenaWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ArenaWrap>(info) {
    uint64_t fd, capacityBytes, pageBytes;
    bool prefault;
    if (!ArgU64(info, 0, "fd", &fd) || !ArgU64(info, 1, "capacityBytes", &capacityBytes) || !ArgU64(info, 2, "pageBytes", &pageBytes) ||
        !ArgBool(info, 3, "prefault", &prefault))
      return;
    ArenaConfig config;
    config.fd = fd > 0x7fffffff ? -1 : static_cast<int>(fd);
    config.capacityBytes = capacityBytes;
    config.pageBytes = pageBytes;
    config.prefault = prefault;
    std::string error;
    Arena* arena = nullptr;
    Status s = Arena::Open(config, &arena, &error);
    if (s != Status::kOk) {
      ThrowStatus(info.Env(), s, error);
      return;
    }
    arena_.reset(arena);
  }

  void CopyDone() {
    inFlight_--;
    if (closed_ && inFlight_ == 0) arena_.reset();
  }

 private:
  Arena* Open(const Napi::CallbackInfo& info) {
    if (!arena_ || closed_) {
      ThrowCode(info.Env(), "EBADF", "arena is closed");
      return nullptr;
    }
    return arena_.get();
  }

  Napi::Value Allocate(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    uint64_t size;
    if (a == nullptr || !ArgU64(info, 0, "sizeBytes", &size)) return info.Env().Undefined();
    uint64_t handle;
    Status s = a->Allocate(size, &handle);
    if (s != Status::kOk) {
      ThrowStatus(info.Env(), s, "arena: no room for " + std::to_string(size) + " bytes");
      return info.Env().Undefined();
    }
    return Napi::Number::New(info.Env(), static_cast<double>(handle));
  }

  Napi::Value Free(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    uint64_t handle;
    if (a == nullptr || !ArgU64(info, 0, "handle", &handle)) return info.Env().Undefined();
    Status s = a->Free(handle);
    if (s != Status::kOk) ThrowStatus(info.Env(), s, "arena: stale handle " + std::to_string(handle));
    return info.Env().Undefined();
  }

  bool CopyArgs(const Napi::CallbackInfo& info, uint64_t* handle, uint64_t* offset, uint8_t** data, uint64_t* length) {
    return ArgU64(info, 0, "handle", handle) && ArgU64(info, 1, "offsetBytes", offset) && ArgBytes(info, 2, "buffer", data, length);
  }

  Napi::Value Write(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    uint64_t handle, offset, length;
    uint8_t* data;
    if (a == nullptr || !CopyArgs(info, &handle, &offset, &data, &length)) return info.Env().Undefined();
    Status s = a->Write(handle, offset, data, length);
    if (s != Status::kOk) ThrowStatus(info.Env(), s, "arena write failed");
    return info.Env().Undefined();
  }

  Napi::Value Read(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    uint64_t handle, offset, length, copied = 0;
    uint8_t* data;
    if (a == nullptr || !CopyArgs(info, &handle, &offset, &data, &length)) return info.Env().Undefined();
    Status s = a->Read(handle, offset, data, length, &copied);
    if (s != Status::kOk) {
      ThrowStatus(info.Env(), s, "arena read failed");
      return info.Env().Undefined();
    }
    return Napi::Number::New(info.Env(), static_cast<double>(copied));
  }

  Napi::Value CopyAsync(const Napi::CallbackInfo& info, bool write) {
    Arena* a = Open(info);
    uint64_t handle, offset, length;
    uint8_t* data;
    if (a == nullptr || !CopyArgs(info, &handle, &offset, &data, &length)) return info.Env().Undefined();
    auto* worker = new ArenaCopyWorker(info.Env(), this, a, write, handle, offset, data, length);
    worker->Keep(info[2]);  // the buffer outlives the copy
    return QueueWork(info, worker);
  }
  Napi::Value WriteAsync(const Napi::CallbackInfo& info) { return CopyAsync(info, true); }
  Napi::Value ReadAsync(const Napi::CallbackInfo& info) { return CopyAsync(info, false); }

  // name(handle, sha256Hex): the block's content name, by which remote peers hold it (fabric.h).
  Napi::Value Name(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    uint64_t handle;
    std::string hex;
    uint8_t raw[kContentNameBytes];
    if (a == nullptr || !ArgU64(info, 0, "handle", &handle) || !ArgString(info, 1, "sha256", &hex)) return info.Env().Undefined();
    if (!ParseHexName(hex, raw)) {
      ThrowCode(info.Env(), "EINVAL", "sha256 must be 64 lowercase hex digits");
      return info.Env().Undefined();
    }
    Status s = a->Name(handle, raw);
    if (s != Status::kOk) ThrowStatus(info.Env(), s, "arena: stale handle " + std::to_string(handle));
    return info.Env().Undefined();
  }

  // setStrictVerify(strict): readers of a block being filled wait for its whole SHA-256 (Arena::SetStrictVerify).
  Napi::Value SetStrictVerify(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    if (a == nullptr) return info.Env().Undefined();
    if (info.Length() < 1 || !info[0].IsBoolean()) {
      ThrowCode(info.Env(), "EINVAL", "strict must be a boolean");
      return info.Env().Undefined();
    }
    a->SetStrictVerify(info[0].As<Napi::Boolean>().Value());
    return info.Env().Undefined();
  }

  Napi::Value Fits(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    uint64_t size;
    if (a == nullptr || !ArgU64(info, 0, "sizeBytes", &size)) return info.Env().Undefined();
    return Napi::Boolean::New(info.Env(), a->Fits(size));
  }

  // freeBytes(): stats().freeBytes without building the whole stats object (the store asks per write).
  Napi::Value FreeBytes(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    if (a == nullptr) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), static_cast<double>(a->Stats().freeBytes));
  }

  // sha256Async(handle): the block's SHA-256 (hex), hashed on a worker thread.
  Napi::Value Sha256Async(const Napi::CallbackInfo& info);
  // fillFromFileAsync(handle, fd, fileOffsetBytes, aheadBytes): read the block's bytes from the file into it on a
  // worker thread, hashing them as they land; resolves to the SHA-256 (hex) of what was read.
  Napi::Value FillFromFileAsync(const Napi::CallbackInfo& info);
  Napi::Value FillRecordAsync(const Napi::CallbackInfo& info);
  Napi::Value QueueWork(const Napi::CallbackInfo& info, PromiseWorker* worker);

  Napi::Value Describe(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    uint64_t handle;
    if (a == nullptr || !ArgU64(info, 0, "handle", &handle)) return info.Env().Undefined();
    uint64_t size;
    std::vector<Extent> extents;
    Status s = a->Describe(handle, &size, &extents);
    if (s != Status::kOk) {
      ThrowStatus(info.Env(), s, "arena: stale handle " + std::to_string(handle));
      return info.Env().Undefined();
    }
    Napi::Env env = info.Env();
    Napi::Object out = Napi::Object::New(env);
    out.Set("sizeBytes", Napi::Number::New(env, static_cast<double>(size)));
    Napi::Array list = Napi::Array::New(env, extents.size() * 2);
    for (size_t i = 0; i < extents.size(); i++) {
      list.Set(static_cast<uint32_t>(2 * i), Napi::Number::New(env, static_cast<double>(extents[i].arenaOffsetBytes)));
      list.Set(static_cast<uint32_t>(2 * i + 1), Napi::Number::New(env, static_cast<double>(extents[i].lengthBytes)));
    }
    out.Set("extents", list);
    return out;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    if (a == nullptr) return info.Env().Undefined();
    const ArenaStats s = a->Stats();
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    auto set = [&](const char* k, uint64_t v) { o.Set(k, Napi::Number::New(env, static_cast<double>(v))); };
    set("capacityBytes", s.capacityBytes);
    set("pageBytes", s.pageBytes);
    set("usedBytes", s.usedBytes);
    set("freeBytes", s.freeBytes);
    set("largestFreeBytes", s.largestFreeBytes);
    set("freeExtents", s.freeExtents);
    set("liveBlocks", s.liveBlocks);
    set("allocations", s.allocations);
    set("frees", s.frees);
    set("staleRejects", s.staleRejects);
    set("noSpaceFailures", s.noSpaceFailures);
    set("deferredFrees", s.deferredFrees);
    set("badPieceTables", s.badPieceTables);
    set("prefaultedBytes", s.prefaultedBytes);
    set("copiesInFlight", s.copiesInFlight);
    set("namedBlocks", s.namedBlocks);
    set("holdsActive", s.holdsActive);
    set("blockBytes", s.blockBytes);
    set("slotBytes", s.slotBytes);
    set("slabPages", s.slabPages);
    return o;
  }

  // The mapping, for RDMA registration (address as a BigInt) and for same-node clients (the fd).
  Napi::Value Region(const Napi::CallbackInfo& info) {
    Arena* a = Open(info);
    if (a == nullptr) return info.Env().Undefined();
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("address", Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(a->base()))));
    o.Set("lengthBytes", Napi::Number::New(env, static_cast<double>(a->capacityBytes())));
    o.Set("fd", Napi::Number::New(env, a->fd()));
    return o;
  }

  // Closing with copies in flight defers the unmap to the last one; new calls fail with EBADF at once.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    closed_ = true;
    if (inFlight_ == 0) arena_.reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<Arena> arena_;  // shared with a Fabric that registered it
  bool closed_ = false;
  uint32_t inFlight_ = 0;  // touched on the JS thread only
};

ArenaCopyWorker::ArenaCopyWorker(Napi::Env env, ArenaWrap* owner, Arena* arena, bool write, uint64_t handle, uint64_t offsetBytes,
                                 uint8_t* data, uint64_t lengthBytes)
    : PromiseWorker(env, write ? "cascade.arena.write" : "cascade.arena.read"),
      owner_(owner),
      arena_(arena),
      write_(write),
      handle_(handle),
      offsetBytes_(offsetBytes),
      data_(data),
      lengthBytes_(lengthBytes) {}

void ArenaCopyWorker::Settled() { owner_->CopyDone(); }

// A worker that resolves to the SHA-256 (hex) of a block it works on; Work() does the work.
class ArenaHexWorker : public PromiseWorker {
 public:
  ArenaHexWorker(Napi::Env env, const char* name, ArenaWrap* owner, Arena* arena, uint64_t handle)
      : PromiseWorker(env, name), owner_(owner), arena_(arena), handle_(handle) {}

 protected:
  Napi::Value Result() override { return Napi::String::New(Env(), hex_); }
  void Settled() override { owner_->CopyDone(); }

  ArenaWrap* owner_;
  Arena* arena_;
  uint64_t handle_;
  std::string hex_;
};

class ArenaHashWorker : public ArenaHexWorker {
 public:
  ArenaHashWorker(Napi::Env env, ArenaWrap* owner, Arena* arena, uint64_t handle)
      : ArenaHexWorker(env, "cascade.arena.sha256", owner, arena, handle) {}
  void Execute() override {
    status_ = arena_->Hash(handle_, &hex_);
    if (status_ != Status::kOk) message_ = "arena: cannot hash block " + std::to_string(handle_);
  }
};

Napi::Value ArenaWrap::Sha256Async(const Napi::CallbackInfo& info) {
  Arena* a = Open(info);
  uint64_t handle;
  if (a == nullptr || !ArgU64(info, 0, "handle", &handle)) return info.Env().Undefined();
  return QueueWork(info, new ArenaHashWorker(info.Env(), this, a, handle));
}

// Queue a worker that uses the arena: it keeps this object alive, and close() waits for it (CopyDone).
Napi::Value ArenaWrap::QueueWork(const Napi::CallbackInfo& info, PromiseWorker* worker) {
  worker->Keep(info.This());
  inFlight_++;
  worker->Queue();
  return worker->Promise();
}

// FillFromFile, or with recordSha256 (raw) FillRecord: fileOffsetBytes is then the record's start.
class ArenaFillWorker : public ArenaHexWorker {
 public:
  ArenaFillWorker(Napi::Env env, ArenaWrap* owner, Arena* arena, uint64_t handle, int fd, uint64_t fileOffsetBytes, uint64_t aheadBytes,
                  const uint8_t* recordSha256 = nullptr)
      : ArenaHexWorker(env, recordSha256 != nullptr ? "cascade.arena.fillRecord" : "cascade.arena.fillFromFile", owner, arena, handle), fd_(fd),
        fileOffsetBytes_(fileOffsetBytes), aheadBytes_(aheadBytes), record_(recordSha256 != nullptr) {
    if (record_) memcpy(sha256_, recordSha256, sizeof sha256_);
  }
  void Execute() override {
    std::string why;
    status_ = record_ ? arena_->FillRecord(handle_, fd_, fileOffsetBytes_, sha256_, aheadBytes_, &hex_, &why)
                      : arena_->FillFromFile(handle_, fd_, fileOffsetBytes_, aheadBytes_, &hex_, &why);
    if (status_ != Status::kOk) message_ = "arena: cannot fill block " + std::to_string(handle_) + (why.empty() ? "" : ": " + why);
  }

 private:
  int fd_;
  uint64_t fileOffsetBytes_;
  uint64_t aheadBytes_;
  bool record_;
  uint8_t sha256_[kContentNameBytes];
};

Napi::Value ArenaWrap::FillFromFileAsync(const Napi::CallbackInfo& info) {
  Arena* a = Open(info);
  uint64_t handle, fd, offset, ahead;
  if (a == nullptr || !ArgU64(info, 0, "handle", &handle) || !ArgU64(info, 1, "fd", &fd) || !ArgU64(info, 2, "fileOffsetBytes", &offset) ||
      !ArgU64(info, 3, "aheadBytes", &ahead)) {
    return info.Env().Undefined();
  }
  if (fd > 0x7fffffff) {
    ThrowCode(info.Env(), "EINVAL", "fd must be an open file descriptor");
    return info.Env().Undefined();
  }
  if (ahead > kFillAheadMaxBytes) {
    ThrowCode(info.Env(), "EINVAL", "aheadBytes is over " + std::to_string(kFillAheadMaxBytes));
    return info.Env().Undefined();
  }
  return QueueWork(info, new ArenaFillWorker(info.Env(), this, a, handle, static_cast<int>(fd), offset, ahead));
}

// fillRecordAsync(handle, fd, recordOffsetBytes, sha256Hex, aheadBytes): Promise<string>.
Napi::Value ArenaWrap::FillRecordAsync(const Napi::CallbackInfo& info) {
  Arena* a = Open(info);
  uint64_t handle, fd, offset, ahead;
  std::string hex;
  if (a == nullptr || !ArgU64(info, 0, "handle", &handle) || !ArgU64(info, 1, "fd", &fd) || !ArgU64(info, 2, "recordOffsetBytes", &offset) ||
      !ArgString(info, 3, "sha256", &hex) || !ArgU64(info, 4, "aheadBytes", &ahead)) {
    return info.Env().Undefined();
  }
  uint8_t sha[kContentNameBytes];
  if (fd > 0x7fffffff || ahead > kFillAheadMaxBytes || !ParseHexName(hex, sha)) {
    ThrowCode(info.Env(), "EINVAL", "fillRecordAsync: an open fd, a 64-digit lowercase sha256 and aheadBytes up to " + std::to_string(kFillAheadMaxBytes));
    return info.Env().Undefined();
  }
  // Readers gated on the block wait from now on, not only once the worker thread starts.
  const Status marked = a->MarkFilling(handle);
  if (marked != Status::kOk) {
    ThrowStatus(info.Env(), marked, "fillRecordAsync: block " + std::to_string(handle) + " is not live");
    return info.Env().Undefined();
  }
  return QueueWork(info, new ArenaFillWorker(info.Env(), this, a, handle, static_cast<int>(fd), offset, ahead, sha));
}

Napi::FunctionReference* arenaConstructor = nullptr;

}  // namespace

void InitArena(Napi::Env env, Napi::Object exports) {
  Napi::Function ctor = ArenaWrap::Define(env);
  if (arenaConstructor == nullptr) arenaConstructor = new Napi::FunctionReference(Napi::Persistent(ctor));  // one per process
  exports.Set("Arena", ctor);
}

std::shared_ptr<Arena> ArenaOf(Napi::Value value) {
  if (arenaConstructor == nullptr || !value.IsObject() || !value.As<Napi::Object>().InstanceOf(arenaConstructor->Value())) return nullptr;
  return ArenaWrap::Unwrap(value.As<Napi::Object>())->Shared();
}

bool HexToBytes(const std::string& hex, std::string* raw) {
  if (hex.size() % 2 != 0) return false;
  auto digit = [](char c) -> int { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  raw->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    raw->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

bool ParseHexName(const std::string& hex, uint8_t* out) {
  std::string raw;
  if (hex.size() != 2 * kContentNameBytes || !HexToBytes(hex, &raw)) return false;
  memcpy(out, raw.data(), kContentNameBytes);
  return true;
}

}  // namespace cascade

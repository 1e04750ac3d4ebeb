// JS functions for hashing and file I/O off the JS thread: a streaming Hasher, one-shot sha256, an
// off-thread copy, and pread/pwrite/fdatasync/fadvise with an O_DIRECT option.
#include <string.h>

#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../core/crc32c.h"
#include "../core/io.h"
#include "../core/record.h"
#include "../core/sha256.h"
#include "common.h"
#include "init.h"

namespace cascade {

namespace {

std::string SysMessage(const char* what, int err) { return std::string(what) + ": " + strerror(err); }

class HasherWrap;

class HashUpdateWorker : public PromiseWorker {
 public:
  HashUpdateWorker(Napi::Env env, HasherWrap* owner, Sha256* hash, const uint8_t* data, uint64_t lengthBytes)
      : PromiseWorker(env, "cascade.sha256.update"), owner_(owner), hash_(hash), data_(data), lengthBytes_(lengthBytes) {}
  void Execute() override {
    status_ = hash_->Update(data_, lengthBytes_);
    if (status_ != Status::kOk) message_ = "sha256 update failed";
  }

 protected:
  void Settled() override;

 private:
  HasherWrap* owner_;
  Sha256* hash_;
  const uint8_t* data_;
  uint64_t lengthBytes_;
};

// One update at a time: a second update (or a digest) while one runs is EBUSY, never interleaved bytes.
class HasherWrap : public Napi::ObjectWrap<HasherWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Hasher",
                       {InstanceMethod("update", &HasherWrap::Update), InstanceMethod("updateSync", &HasherWrap::UpdateSync),
                        InstanceMethod("digest", &HasherWrap::Digest), InstanceMethod("reset", &HasherWrap::Reset),
                        InstanceAccessor("bytesHashed", &HasherWrap::BytesHashed, nullptr),
                        InstanceAccessor("busy", &HasherWrap::Busy, nullptr)});
  }
  explicit HasherWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<HasherWrap>(info), hash_(new Sha256()) {
    if (!hash_->ok()) ThrowCode(info.Env(), "EIO", "sha256: OpenSSL could not create a digest context");
  }
  void UpdateDone() { busy_ = false; }

 private:
  bool Idle(const Napi::CallbackInfo& info) {
    if (busy_) ThrowCode(info.Env(), "EBUSY", "sha256: an update is in flight; await it first");
    return !busy_;
  }
  Napi::Value Update(const Napi::CallbackInfo& info) {
    uint8_t* data;
    uint64_t length;
    if (!Idle(info) || !ArgBytes(info, 0, "data", &data, &length)) return info.Env().Undefined();
    auto* worker = new HashUpdateWorker(info.Env(), this, hash_.get(), data, length);
    worker->Keep(info.This());
    worker->Keep(info[0]);
    busy_ = true;
    worker->Queue();
    return worker->Promise();
  }
  Napi::Value UpdateSync(const Napi::CallbackInfo& info) {
    uint8_t* data;
    uint64_t length;
    if (!Idle(info) || !ArgBytes(info, 0, "data", &data, &length)) return info.Env().Undefined();
    Status s = hash_->Update(data, length);
    if (s != Status::kOk) ThrowStatus(info.Env(), s, "sha256 update failed");
    return info.Env().Undefined();
  }
  Napi::Value Digest(const Napi::CallbackInfo& info) {
    if (!Idle(info)) return info.Env().Undefined();
    std::string hex;
    Status s = hash_->HexDigest(&hex);
    if (s != Status::kOk) {
      ThrowStatus(info.Env(), s, "sha256 digest failed");
      return info.Env().Undefined();
    }
    return Napi::String::New(info.Env(), hex);
  }
  Napi::Value Reset(const Napi::CallbackInfo& info) {
    if (Idle(info)) hash_->Reset();
    return info.Env().Undefined();
  }
  Napi::Value BytesHashed(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(hash_->bytesHashed())); }
  Napi::Value Busy(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), busy_); }

  std::unique_ptr<Sha256> hash_;
  bool busy_ = false;
};

void HashUpdateWorker::Settled() { owner_->UpdateDone(); }

class Sha256Worker : public PromiseWorker {
 public:
  Sha256Worker(Napi::Env env, const uint8_t* data, uint64_t lengthBytes)
      : PromiseWorker(env, "cascade.sha256"), data_(data), lengthBytes_(lengthBytes) {}
  void Execute() override {
    status_ = Sha256Hex(data_, lengthBytes_, &hex_);
    if (status_ != Status::kOk) message_ = "sha256 failed";
  }

 protected:
  Napi::Value Result() override { return Napi::String::New(Env(), hex_); }

 private:
  const uint8_t* data_;
  uint64_t lengthBytes_;
  std::string hex_;
};

Napi::Value Sha256Async(const Napi::CallbackInfo& info) {
  uint8_t* data;
  uint64_t length;
  if (!ArgBytes(info, 0, "data", &data, &length)) return info.Env().Undefined();
  auto* worker = new Sha256Worker(info.Env(), data, length);
  worker->Keep(info[0]);
  worker->Queue();
  return worker->Promise();
}

// The CRC-32C of each 2^pieceShift-byte piece of data (the last may be shorter): a disk record's
// piece table (core/record.h).
void PieceCrcs(const uint8_t* data, uint64_t lengthBytes, uint32_t pieceShift, std::vector<uint32_t>* out) {
  const uint64_t piece = uint64_t{1} << pieceShift;
  out->clear();
  for (uint64_t at = 0; at < lengthBytes; at += piece) out->push_back(Crc32c(0, data + at, static_cast<size_t>(std::min(piece, lengthBytes - at))));
}

Napi::Value CrcArray(Napi::Env env, const std::vector<uint32_t>& crcs) {
  Napi::Uint32Array a = Napi::Uint32Array::New(env, crcs.size());
  if (!crcs.empty()) memcpy(a.Data(), crcs.data(), crcs.size() * 4);
  return a;
}

bool PieceArgs(const Napi::CallbackInfo& info, uint8_t** data, uint64_t* length, uint32_t* shift) {
  uint64_t s;
  if (!ArgBytes(info, 0, "data", data, length) || !ArgU64(info, 1, "pieceShift", &s)) return false;
  if (s < kPieceShiftMin || s > kPieceShiftMax) {
    ThrowCode(info.Env(), "EINVAL", "pieceShift must be in [" + std::to_string(kPieceShiftMin) + ", " + std::to_string(kPieceShiftMax) + "]");
    return false;
  }
  *shift = static_cast<uint32_t>(s);
  return true;
}

class PieceCrcWorker : public PromiseWorker {
 public:
  PieceCrcWorker(Napi::Env env, const uint8_t* data, uint64_t lengthBytes, uint32_t shift)
      : PromiseWorker(env, "cascade.crc32cPieces"), data_(data), lengthBytes_(lengthBytes), shift_(shift) {}
  void Execute() override { PieceCrcs(data_, lengthBytes_, shift_, &crcs_); }

 protected:
  Napi::Value Result() override { return CrcArray(Env(), crcs_); }

 private:
  const uint8_t* data_;
  uint64_t lengthBytes_;
  uint32_t shift_;
  std::vector<uint32_t> crcs_;
};

// crc32cPieces(data, pieceShift): Uint32Array, on the calling thread.
Napi::Value Crc32cPiecesSync(const Napi::CallbackInfo& info) {
  uint8_t* data;
  uint64_t length;
  uint32_t shift;
  if (!PieceArgs(info, &data, &length, &shift)) return info.Env().Undefined();
  std::vector<uint32_t> crcs;
  PieceCrcs(data, length, shift, &crcs);
  return CrcArray(info.Env(), crcs);
}

// crc32cPiecesAsync(data, pieceShift): Promise<Uint32Array>, on a worker thread (data must not change).
Napi::Value Crc32cPiecesAsync(const Napi::CallbackInfo& info) {
  uint8_t* data;
  uint64_t length;
  uint32_t shift;
  if (!PieceArgs(info, &data, &length, &shift)) return info.Env().Undefined();
  auto* worker = new PieceCrcWorker(info.Env(), data, length, shift);
  worker->Keep(info[0]);
  worker->Queue();
  return worker->Promise();
}

// recordPieceShift(sizeBytes): the piece size (log2) of a record's table; 0 for none.
Napi::Value RecordPieceShift(const Napi::CallbackInfo& info) {
  uint64_t size;
  if (!ArgU64(info, 0, "sizeBytes", &size)) return info.Env().Undefined();
  return Napi::Number::New(info.Env(), PieceShiftFor(size));
}

Napi::Value Sha256Sync(const Napi::CallbackInfo& info) {
  uint8_t* data;
  uint64_t length;
  if (!ArgBytes(info, 0, "data", &data, &length)) return info.Env().Undefined();
  std::string hex;
  Status s = Sha256Hex(data, length, &hex);
  if (s != Status::kOk) {
    ThrowStatus(info.Env(), s, "sha256 failed");
    return info.Env().Undefined();
  }
  return Napi::String::New(info.Env(), hex);
}

// copyAsync(target, targetOffsetBytes, source): memcpy on a worker (e.g. growing a large staging buffer).
class CopyWorker : public PromiseWorker {
 public:
  CopyWorker(Napi::Env env, uint8_t* target, const uint8_t* source, uint64_t lengthBytes)
      : PromiseWorker(env, "cascade.copy"), target_(target), source_(source), lengthBytes_(lengthBytes) {}
  void Execute() override { memmove(target_, source_, lengthBytes_); }

 private:
  uint8_t* target_;
  const uint8_t* source_;
  uint64_t lengthBytes_;
};

Napi::Value CopyAsync(const Napi::CallbackInfo& info) {
  uint8_t *target, *source;
  uint64_t targetLength, offset, sourceLength;
  if (!ArgBytes(info, 0, "target", &target, &targetLength) || !ArgU64(info, 1, "targetOffsetBytes", &offset) ||
      !ArgBytes(info, 2, "source", &source, &sourceLength))
    return info.Env().Undefined();
  if (offset > targetLength || sourceLength > targetLength - offset) {
    ThrowCode(info.Env(), "ERANGE", "copyAsync: source does not fit in target at that offset");
    return info.Env().Undefined();
  }
  auto* worker = new CopyWorker(info.Env(), target + offset, source, sourceLength);
  worker->Keep(info[0]);
  worker->Keep(info[2]);
  worker->Queue();
  return worker->Promise();
}

class FileWorker : public PromiseWorker {
 public:
  enum class Op { kPread, kPwrite, kFdatasync };
  FileWorker(Napi::Env env, Op op, int fd, uint8_t* data, uint64_t lengthBytes, uint64_t offsetBytes)
      : PromiseWorker(env, "cascade.file"), op_(op), fd_(fd), data_(data), lengthBytes_(lengthBytes), offsetBytes_(offsetBytes) {}
  void Execute() override {
    int err = 0;
    switch (op_) {
      case Op::kPread: status_ = PreadFully(fd_, data_, lengthBytes_, offsetBytes_, &doneBytes_, &err); break;
      case Op::kPwrite: status_ = PwriteFully(fd_, data_, lengthBytes_, offsetBytes_, &err); break;
      case Op::kFdatasync: status_ = Fdatasync(fd_, &err); break;
    }
    if (status_ != Status::kOk) message_ = SysMessage(op_ == Op::kPread ? "pread" : op_ == Op::kPwrite ? "pwrite" : "fdatasync", err);
  }

 protected:
  Napi::Value Result() override { return op_ == Op::kPread ? Napi::Number::New(Env(), static_cast<double>(doneBytes_)) : Env().Undefined(); }

 private:
  Op op_;
  int fd_;
  uint8_t* data_;
  uint64_t lengthBytes_, offsetBytes_, doneBytes_ = 0;
};

bool ArgFd(const Napi::CallbackInfo& info, size_t i, int* fd) {
  uint64_t v;
  if (!ArgU64(info, i, "fd", &v)) return false;
  if (v > 0x7fffffff) {
    ThrowCode(info.Env(), "EINVAL", "fd out of range");
    return false;
  }
  *fd = static_cast<int>(v);
  return true;
}

Napi::Value FileIo(const Napi::CallbackInfo& info, FileWorker::Op op) {
  int fd;
  uint8_t* data = nullptr;
  uint64_t length = 0, offset = 0;
  if (!ArgFd(info, 0, &fd)) return info.Env().Undefined();
  if (op != FileWorker::Op::kFdatasync && (!ArgBytes(info, 1, "buffer", &data, &length) || !ArgU64(info, 2, "offsetBytes", &offset)))
    return info.Env().Undefined();
  auto* worker = new FileWorker(info.Env(), op, fd, data, length, offset);
  if (op != FileWorker::Op::kFdatasync) worker->Keep(info[1]);
  worker->Queue();
  return worker->Promise();
}
Napi::Value Pread(const Napi::CallbackInfo& info) { return FileIo(info, FileWorker::Op::kPread); }
Napi::Value Pwrite(const Napi::CallbackInfo& info) { return FileIo(info, FileWorker::Op::kPwrite); }
Napi::Value FdatasyncAsync(const Napi::CallbackInfo& info) { return FileIo(info, FileWorker::Op::kFdatasync); }

Napi::Value FadviseSync(const Napi::CallbackInfo& info) {
  int fd;
  uint64_t offset, length;
  std::string advice;
  if (!ArgFd(info, 0, &fd) || !ArgU64(info, 1, "offsetBytes", &offset) || !ArgU64(info, 2, "lengthBytes", &length) ||
      !ArgString(info, 3, "advice", &advice))
    return info.Env().Undefined();
  int err = 0;
  Status s = Fadvise(fd, offset, length, advice, &err);
  if (s != Status::kOk) ThrowStatus(info.Env(), s, err ? SysMessage("posix_fadvise", err) : "posix_fadvise: unknown advice " + advice);
  return info.Env().Undefined();
}

// openFile(path, write, create, direct) -> fd. Closing is fs.closeSync's job.
Napi::Value OpenFileSync(const Napi::CallbackInfo& info) {
  std::string path;
  bool write, create, direct;
  if (!ArgString(info, 0, "path", &path) || !ArgBool(info, 1, "write", &write) || !ArgBool(info, 2, "create", &create) ||
      !ArgBool(info, 3, "direct", &direct))
    return info.Env().Undefined();
  int err = 0;
  const int fd = OpenFile(path, write, create, direct, &err);
  if (fd < 0) {
    ThrowCode(info.Env(), err == ENOENT ? "ENOENT" : err == EINVAL ? "EINVAL" : "EIO", SysMessage(("open " + path).c_str(), err));
    return info.Env().Undefined();
  }
  return Napi::Number::New(info.Env(), fd);
}

// pageBytes(): the kernel's page size (sysconf), which O_DIRECT appends next to buffered reads must not
// exceed the record alignment (a page straddling the end of file would be both cached and written).
Napi::Value PageBytes(const Napi::CallbackInfo& info) {
  const long n = sysconf(_SC_PAGESIZE);
  return Napi::Number::New(info.Env(), n > 0 ? static_cast<double>(n) : 0);
}

// alignedBuffer(lengthBytes): a Buffer whose memory is 4 KiB aligned, as O_DIRECT needs.
Napi::Value AlignedBuffer(const Napi::CallbackInfo& info) {
  uint64_t length;
  if (!ArgU64(info, 0, "lengthBytes", &length)) return info.Env().Undefined();
  void* p = nullptr;
  if (posix_memalign(&p, kDirectAlignBytes, length == 0 ? kDirectAlignBytes : length) != 0) {
    ThrowCode(info.Env(), "ENOMEM", "alignedBuffer: out of memory");
    return info.Env().Undefined();
  }
  return Napi::Buffer<uint8_t>::New(info.Env(), static_cast<uint8_t*>(p), length, [](Napi::Env, uint8_t* data) { free(data); });
}

// Unmapping hundreds of MiB of touched memory takes milliseconds (every page is freed). A Buffer's
// finalizer runs on the JS thread during GC, so large buffers from allocBuffer() are unmapped here, on
// a thread of their own, instead. Past kReclaimQueueMax waiting regions the finalizer unmaps inline.
class Reclaimer {
 public:
  static Reclaimer& Get() {
    static Reclaimer* r = new Reclaimer();  // never destroyed: the thread may outlive static teardown
    return *r;
  }
  void Unmap(void* p, size_t length) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.size() < kReclaimQueueMax) {
        queue_.push_back({p, length});
        cv_.notify_one();
        return;
      }
    }
    munmap(p, length);
  }

 private:
  static constexpr size_t kReclaimQueueMax = 1024;
  Reclaimer() {
    std::thread([this] {
      for (;;) {
        std::pair<void*, size_t> job;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [this] { return !queue_.empty(); });
          job = queue_.front();
          queue_.pop_front();
        }
        munmap(job.first, job.second);
      }
    }).detach();
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<void*, size_t>> queue_;
};

// allocBuffer(lengthBytes): an anonymous mapping as a Buffer, unmapped off the JS thread when collected.
Napi::Value AllocBuffer(const Napi::CallbackInfo& info) {
  uint64_t length;
  if (!ArgU64(info, 0, "lengthBytes", &length)) return info.Env().Undefined();
  const size_t mapped = length == 0 ? 4096 : static_cast<size_t>(length);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    ThrowCode(info.Env(), "ENOMEM", "allocBuffer: out of memory");
    return info.Env().Undefined();
  }
  auto* size = new size_t(mapped);
  Napi::Buffer<uint8_t> buffer = Napi::Buffer<uint8_t>::New(
      info.Env(), static_cast<uint8_t*>(p), length,
      [](Napi::Env, uint8_t* data, size_t* hint) {
        Reclaimer::Get().Unmap(data, *hint);
        delete hint;
      },
      size);
  if (buffer.IsEmpty()) {  // longer than a Buffer may be: the exception is pending, the finalizer never runs
    munmap(p, mapped);
    delete size;
    return info.Env().Undefined();
  }
  return buffer;
}

}  // namespace

void InitHashIo(Napi::Env env, Napi::Object exports) {
  exports.Set("Hasher", HasherWrap::Define(env));
  exports.Set("sha256", Napi::Function::New(env, Sha256Async, "sha256"));
  exports.Set("sha256Sync", Napi::Function::New(env, Sha256Sync, "sha256Sync"));
  exports.Set("copyAsync", Napi::Function::New(env, CopyAsync, "copyAsync"));
  exports.Set("pread", Napi::Function::New(env, Pread, "pread"));
  exports.Set("pwrite", Napi::Function::New(env, Pwrite, "pwrite"));
  exports.Set("fdatasync", Napi::Function::New(env, FdatasyncAsync, "fdatasync"));
  exports.Set("fadvise", Napi::Function::New(env, FadviseSync, "fadvise"));
  exports.Set("crc32cPieces", Napi::Function::New(env, Crc32cPiecesSync, "crc32cPieces"));
  exports.Set("crc32cPiecesAsync", Napi::Function::New(env, Crc32cPiecesAsync, "crc32cPiecesAsync"));
  exports.Set("recordPieceShift", Napi::Function::New(env, RecordPieceShift, "recordPieceShift"));
  exports.Set("openFile", Napi::Function::New(env, OpenFileSync, "openFile"));
  exports.Set("alignedBuffer", Napi::Function::New(env, AlignedBuffer, "alignedBuffer"));
  exports.Set("pageBytes", Napi::Function::New(env, PageBytes, "pageBytes"));
  exports.Set("allocBuffer", Napi::Function::New(env, AllocBuffer, "allocBuffer"));
}

}  // namespace cascade

// Module entry: the classes and functions of the binding, and the build's features. native/types.ts
// declares this exact shape; native/index.ts loads it and checks it.
#include <napi.h>
#include <openssl/opensslv.h>

#include <sys/mount.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "../core/mapping.h"
#include "common.h"
#include "init.h"

namespace cascade {

namespace {

// A read-only mapping; view() hands out Buffers over it. Each view keeps the mapping alive (shared
// ownership), so close() followed by the use of an old view never touches unmapped memory.
class MappingWrap : public Napi::ObjectWrap<MappingWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Mapping",
                       {InstanceMethod("view", &MappingWrap::View), InstanceMethod("close", &MappingWrap::Close),
                        InstanceAccessor("lengthBytes", &MappingWrap::Length, nullptr)});
  }
  // new Mapping(path)
  explicit MappingWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MappingWrap>(info) {
    std::string path;
    if (!ArgString(info, 0, "path", &path)) return;
    Mapping* m = nullptr;
    std::string error;
    Status s = Mapping::Open(path, &m, &error);
    if (s != Status::kOk) {
      ThrowStatus(info.Env(), s, error);
      return;
    }
    mapping_.reset(m);
  }

 private:
  Napi::Value View(const Napi::CallbackInfo& info) {
    uint64_t offset, length;
    if (!mapping_) {
      ThrowCode(info.Env(), "EBADF", "mapping is closed");
      return info.Env().Undefined();
    }
    if (!ArgU64(info, 0, "offsetBytes", &offset) || !ArgU64(info, 1, "lengthBytes", &length)) return info.Env().Undefined();
    if (offset > mapping_->lengthBytes() || length > mapping_->lengthBytes() - offset) {
      ThrowCode(info.Env(), "ERANGE", "view lies outside the mapping");
      return info.Env().Undefined();
    }
    auto* keep = new std::shared_ptr<Mapping>(mapping_);
    // Read-only memory: a JS write through the view faults. Callers get it as a Buffer to read.
    return Napi::Buffer<uint8_t>::New(
        info.Env(), const_cast<uint8_t*>(mapping_->base() + offset), length,
        [](Napi::Env, uint8_t*, std::shared_ptr<Mapping>* hint) { delete hint; }, keep);
  }
  Napi::Value Close(const Napi::CallbackInfo& info) {
    mapping_.reset();
    return info.Env().Undefined();
  }
  Napi::Value Length(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), mapping_ ? static_cast<double>(mapping_->lengthBytes()) : 0);
  }
  std::shared_ptr<Mapping> mapping_;
};

Napi::Object Features(Napi::Env env) {
  Napi::Object f = Napi::Object::New(env);
  // The GPU tier's driver loader is always built in; gpuProbe() says whether a device can be used.
  f.Set("gpu", true);
#ifdef CASCADE_WITH_LIBFABRIC
  f.Set("libfabric", true);
#else
  f.Set("libfabric", false);
#endif
#ifdef CASCADE_WITH_URING
  f.Set("uring", true);
#else
  f.Set("uring", false);
#endif
#ifdef CASCADE_ASAN
  f.Set("asan", true);
#else
  f.Set("asan", false);
#endif
  f.Set("openssl", OPENSSL_VERSION_TEXT);
  return f;
}

// peerCredentials(fd): who is at the other end of a connected Unix socket, as the kernel recorded it
// when the peer connected (SO_PEERCRED), so the daemon checks a same-node client's rights without
// trusting anything the client says.
Napi::Value PeerCredentials(const Napi::CallbackInfo& info) {
  uint64_t fd;
  if (!ArgU64(info, 0, "fd", &fd)) return info.Env().Undefined();
  if (fd > INT32_MAX) {
    ThrowCode(info.Env(), "EINVAL", "fd out of range");
    return info.Env().Undefined();
  }
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) {
    int e = errno;
    ThrowCode(info.Env(), e == EBADF ? "EBADF" : e == ENOTSOCK ? "ENOTSOCK" : "EINVAL", std::string("SO_PEERCRED: ") + std::strerror(e));
    return info.Env().Undefined();
  }
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("pid", Napi::Number::New(info.Env(), cred.pid));
  out.Set("uid", Napi::Number::New(info.Env(), cred.uid));
  out.Set("gid", Napi::Number::New(info.Env(), cred.gid));
  return out;
}

// detachMount(path): umount2(MNT_DETACH), as `fusermount -uz` does for root, without a child process.
// fuse-native's libfuse workers leave signals unblocked and are cancelled as the mount goes: a SIGCHLD
// from fusermount landing on one of them then can hang in libuv's handler, and the daemon never sees
// fusermount exit (the worker waits in uv__signal_lock).
Napi::Value DetachMount(const Napi::CallbackInfo& info) {
  std::string path;
  if (!ArgString(info, 0, "path", &path)) return info.Env().Undefined();
  if (path.empty() || path.size() >= 4096 || path[0] != '/') {
    ThrowCode(info.Env(), "EINVAL", "detachMount: an absolute path under 4096 bytes");
    return info.Env().Undefined();
  }
  if (umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
    int e = errno;
    ThrowCode(info.Env(), e == EPERM ? "EPERM" : e == ENOENT ? "ENOENT" : e == EINVAL ? "EINVAL" : "EIO", std::string("umount2 ") + path + ": " + std::strerror(e));
  }
  return info.Env().Undefined();
}

}  // namespace

void InitMapping(Napi::Env env, Napi::Object exports) {
  exports.Set("Mapping", MappingWrap::Define(env));
  exports.Set("peerCredentials", Napi::Function::New(env, PeerCredentials, "peerCredentials"));
  exports.Set("detachMount", Napi::Function::New(env, DetachMount, "detachMount"));
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, 11));  // 11: record piece tables, fillRecordAsync, setLoadingReadSource
  exports.Set("features", Features(env));
  InitArena(env, exports);
  InitHashIo(env, exports);
  InitMapping(env, exports);
  InitMeta(env, exports);
  InitEngine(env, exports);
  InitFabric(env, exports);
  InitGpu(env, exports);
  InitXattr(env, exports);
  return exports;
}

}  // namespace cascade

static Napi::Object InitCascadeNative(Napi::Env env, Napi::Object exports) { return cascade::Init(env, exports); }

NODE_API_MODULE(cascade_native, InitCascadeNative)

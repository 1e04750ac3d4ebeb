// getxattr, setxattr and listxattr by path, for the CLI: Node has no xattr API, and spawning getfattr
// costs ~0.2 s per command. Synchronous (the CLI is a one-shot process). Errors carry the errno's name
// as `code` (ENODATA, ENOENT, ENOTCONN, EDQUOT...), which the caller maps to its own codes.
#include <sys/xattr.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"
#include "init.h"

namespace cascade {

namespace {

// XATTR_SIZE_MAX on Linux: no value or name list is longer.
constexpr size_t kXattrMaxBytes = 64 * 1024;

void ThrowErrno(Napi::Env env, int e, const std::string& what) {
  const char* name = strerrorname_np(e);
  ThrowCode(env, name != nullptr ? name : "EIO", what + ": " + std::strerror(e));
}

// getxattr(path, name): Buffer.
Napi::Value GetXattr(const Napi::CallbackInfo& info) {
  std::string path, name;
  if (!ArgString(info, 0, "path", &path) || !ArgString(info, 1, "name", &name)) return info.Env().Undefined();
  std::vector<char> buf(256);
  for (int attempt = 0; attempt < 4; attempt++) {
    const ssize_t n = getxattr(path.c_str(), name.c_str(), buf.data(), buf.size());
    if (n >= 0) return Napi::Buffer<char>::Copy(info.Env(), buf.data(), static_cast<size_t>(n));
    if (errno != ERANGE || buf.size() >= kXattrMaxBytes) break;
    buf.resize(kXattrMaxBytes);  // the value grew, or is longer than the first guess
  }
  ThrowErrno(info.Env(), errno, "getxattr " + path + " " + name);
  return info.Env().Undefined();
}

// setxattr(path, name, value: Buffer).
Napi::Value SetXattr(const Napi::CallbackInfo& info) {
  std::string path, name;
  uint8_t* data;
  uint64_t length;
  if (!ArgString(info, 0, "path", &path) || !ArgString(info, 1, "name", &name) || !ArgBytes(info, 2, "value", &data, &length)) {
    return info.Env().Undefined();
  }
  if (length > kXattrMaxBytes) {
    ThrowCode(info.Env(), "E2BIG", "xattr value over 64 KiB");
    return info.Env().Undefined();
  }
  if (setxattr(path.c_str(), name.c_str(), data, length, 0) != 0) ThrowErrno(info.Env(), errno, "setxattr " + path + " " + name);
  return info.Env().Undefined();
}

// listxattr(path): string[].
Napi::Value ListXattr(const Napi::CallbackInfo& info) {
  std::string path;
  if (!ArgString(info, 0, "path", &path)) return info.Env().Undefined();
  std::vector<char> buf(kXattrMaxBytes);
  const ssize_t n = listxattr(path.c_str(), buf.data(), buf.size());
  if (n < 0) {
    ThrowErrno(info.Env(), errno, "listxattr " + path);
    return info.Env().Undefined();
  }
  Napi::Array out = Napi::Array::New(info.Env());
  uint32_t i = 0;
  for (ssize_t at = 0; at < n;) {
    const size_t len = strnlen(buf.data() + at, static_cast<size_t>(n - at));
    out.Set(i++, Napi::String::New(info.Env(), buf.data() + at, len));
    at += static_cast<ssize_t>(len) + 1;
  }
  return out;
}

}  // namespace

void InitXattr(Napi::Env env, Napi::Object exports) {
  exports.Set("getxattr", Napi::Function::New(env, GetXattr, "getxattr"));
  exports.Set("setxattr", Napi::Function::New(env, SetXattr, "setxattr"));
  exports.Set("listxattr", Napi::Function::New(env, ListXattr, "listxattr"));
}

}  // namespace cascade

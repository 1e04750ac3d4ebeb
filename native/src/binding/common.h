// Shared by the binding files: argument validation (the second check; native/index.ts does the first)
// and status -> JS error translation. Built with NAPI_DISABLE_CPP_EXCEPTIONS: nothing throws across the
// boundary; a bad argument becomes a pending JS exception and the function returns at once.
#pragma once

#include <napi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/status.h"

namespace cascade {

// 2^53: the largest integer a JS number holds exactly.
constexpr double kSafeIntegerMax = 9007199254740991.0;

inline void ThrowCode(Napi::Env env, const char* code, const std::string& message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, code));
  error.ThrowAsJavaScriptException();
}

inline void ThrowStatus(Napi::Env env, Status s, const std::string& message) { ThrowCode(env, StatusCode(s), message); }

inline Napi::Error StatusError(Napi::Env env, Status s, const std::string& message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, StatusCode(s)));
  return error;
}

// A non-negative safe integer argument, or a TypeError (code EINVAL) and false.
inline bool ArgU64(const Napi::CallbackInfo& info, size_t i, const char* name, uint64_t* out) {
  if (info.Length() <= i || !info[i].IsNumber()) {
    ThrowCode(info.Env(), "EINVAL", std::string(name) + " must be a number");
    return false;
  }
  const double v = info[i].As<Napi::Number>().DoubleValue();
  if (!(v >= 0) || v > kSafeIntegerMax || std::floor(v) != v) {
    ThrowCode(info.Env(), "EINVAL", std::string(name) + " must be a non-negative safe integer");
    return false;
  }
  *out = static_cast<uint64_t>(v);
  return true;
}

// A Uint8Array (Buffer included) argument: its bytes and length.
inline bool ArgBytes(const Napi::CallbackInfo& info, size_t i, const char* name, uint8_t** data, uint64_t* lengthBytes) {
  if (info.Length() <= i || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    ThrowCode(info.Env(), "EINVAL", std::string(name) + " must be a Uint8Array or Buffer");
    return false;
  }
  Napi::Uint8Array a = info[i].As<Napi::Uint8Array>();
  *data = a.Data();
  *lengthBytes = a.ByteLength();
  return true;
}

inline bool ArgString(const Napi::CallbackInfo& info, size_t i, const char* name, std::string* out) {
  if (info.Length() <= i || !info[i].IsString()) {
    ThrowCode(info.Env(), "EINVAL", std::string(name) + " must be a string");
    return false;
  }
  *out = info[i].As<Napi::String>().Utf8Value();
  return true;
}

inline bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name, bool* out) {
  if (info.Length() <= i || !info[i].IsBoolean()) {
    ThrowCode(info.Env(), "EINVAL", std::string(name) + " must be a boolean");
    return false;
  }
  *out = info[i].As<Napi::Boolean>().Value();
  return true;
}

// Runs work() on a libuv worker thread and settles a promise with done() on the JS thread. Holds
// references to the JS objects (buffers, owners) the work touches, so none is collected mid-flight.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  PromiseWorker(Napi::Env env, const char* name)
      : Napi::AsyncWorker(env, name), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Keep(Napi::Value v) { refs_.push_back(Napi::Persistent(v)); }

 protected:
  // Set by Execute on failure.
  Status status_ = Status::kOk;
  std::string message_;
  virtual Napi::Value Result() { return Env().Undefined(); }
  void OnOK() override {
    if (status_ == Status::kOk) deferred_.Resolve(Result());
    else deferred_.Reject(StatusError(Env(), status_, message_).Value());
    Settled();
  }
  void OnError(const Napi::Error& e) override {
    deferred_.Reject(e.Value());
    Settled();
  }
  virtual void Settled() {}

 private:
  Napi::Promise::Deferred deferred_;
  std::vector<Napi::Reference<Napi::Value>> refs_;
};

}  // namespace cascade

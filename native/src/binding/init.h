#pragma once
#include <napi.h>
namespace cascade {
void InitArena(Napi::Env env, Napi::Object exports);
void InitHashIo(Napi::Env env, Napi::Object exports);
void InitMapping(Napi::Env env, Napi::Object exports);
void InitEngine(Napi::Env env, Napi::Object exports);
}  // namespace cascade

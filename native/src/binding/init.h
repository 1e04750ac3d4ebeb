#pragma once
#include <napi.h>

#include <cstdint>
#include <memory>
#include <string>

namespace cascade {
class Arena;
namespace engine {
class MetaTable;
}
// The core table behind a JS MetaTable object (null when it is not one).
std::shared_ptr<engine::MetaTable> MetaTableOf(Napi::Value value);
void InitMeta(Napi::Env env, Napi::Object exports);
// The core arena behind a JS Arena object (null when it is not one, or is closed).
std::shared_ptr<Arena> ArenaOf(Napi::Value value);
// Lowercase hex -> bytes (false on an odd length or another character).
bool HexToBytes(const std::string& hex, std::string* raw);
// 64 lowercase hex digits -> 32 raw bytes.
bool ParseHexName(const std::string& hex, uint8_t* out);
void InitFabric(Napi::Env env, Napi::Object exports);
void InitArena(Napi::Env env, Napi::Object exports);
void InitHashIo(Napi::Env env, Napi::Object exports);
void InitMapping(Napi::Env env, Napi::Object exports);
void InitEngine(Napi::Env env, Napi::Object exports);
void InitGpu(Napi::Env env, Napi::Object exports);
void InitXattr(Napi::Env env, Napi::Object exports);
}  // namespace cascade

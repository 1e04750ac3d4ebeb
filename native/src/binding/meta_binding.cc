// JS class MetaTable over engine/meta.h: the native engine's node table and attribute cache. JS
// (mount/native-engine.ts) names nodes and publishes/invalidates attributes through it; the engine's
// workers answer LOOKUP, GETATTR, FORGET and read-only opens from it.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../engine/meta.h"
#include "common.h"
#include "init.h"

namespace cascade {

namespace {

using engine::CachedAttr;
using engine::MetaTable;

// Bounds a caller may ask for (the node table holds what the kernel holds; attributes are a cache).
constexpr double kNodesMaxLimit = 1 << 26;
constexpr double kAttrsMaxLimit = 1 << 24;
constexpr double kListedNamesMaxLimit = 1 << 24;

class MetaTableWrap : public Napi::ObjectWrap<MetaTableWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "MetaTable",
                       {
                           InstanceMethod<&MetaTableWrap::Remember>("remember"),
                           InstanceMethod<&MetaTableWrap::Forget>("forget"),
                           InstanceMethod<&MetaTableWrap::PathOf>("pathOf"),
                           InstanceMethod<&MetaTableWrap::IsDetached>("isDetached"),
                           InstanceMethod<&MetaTableWrap::IdOf>("idOf"),
                           InstanceMethod<&MetaTableWrap::Removed>("removed"),
                           InstanceMethod<&MetaTableWrap::Renamed>("renamed"),
                           InstanceMethod<&MetaTableWrap::Size>("size"),
                           InstanceMethod<&MetaTableWrap::Generation>("generation"),
                           InstanceMethod<&MetaTableWrap::Publish>("publish"),
                           InstanceMethod<&MetaTableWrap::Invalidate>("invalidate"),
                           InstanceMethod<&MetaTableWrap::InvalidateAll>("invalidateAll"),
                           InstanceMethod<&MetaTableWrap::List>("list"),
                           InstanceMethod<&MetaTableWrap::ListAdd>("listAdd"),
                           InstanceMethod<&MetaTableWrap::ListRemove>("listRemove"),
                           InstanceMethod<&MetaTableWrap::Unlist>("unlist"),
                           InstanceMethod<&MetaTableWrap::Stats>("stats"),
                       });
  }

  // new MetaTable(nodesMax, attrsMax, listedNamesMax = 0)
  explicit MetaTableWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MetaTableWrap>(info) {
    uint64_t nodesMax, attrsMax, listedNamesMax = 0;
    if (!ArgU64(info, 0, "nodesMax", &nodesMax) || !ArgU64(info, 1, "attrsMax", &attrsMax)) return;
    if (info.Length() > 2 && !info[2].IsUndefined() && !ArgU64(info, 2, "listedNamesMax", &listedNamesMax)) return;
    if (nodesMax < 2 || nodesMax > kNodesMaxLimit || attrsMax < 1 || attrsMax > kAttrsMaxLimit || listedNamesMax > kListedNamesMaxLimit) {
      ThrowCode(info.Env(), "EINVAL", "nodesMax must be 2..2^26, attrsMax 1..2^24 and listedNamesMax 0..2^24");
      return;
    }
    table_ = std::make_shared<MetaTable>(nodesMax, attrsMax, listedNamesMax);
  }

  std::shared_ptr<MetaTable> Shared() const { return table_; }

 private:
  Napi::Value Remember(const Napi::CallbackInfo& info) {
    std::string path;
    if (!ArgPath(info, 0, &path)) return info.Env().Undefined();
    uint64_t id;
    const Status s = table_->Remember(path, &id);
    if (s != Status::kOk) {
      ThrowCode(info.Env(), "ENFILE", "the kernel holds " + std::to_string(table_->nodeCount()) + " nodes, the limit");
      return info.Env().Undefined();
    }
    return Napi::Number::New(info.Env(), static_cast<double>(id));
  }

  Napi::Value Forget(const Napi::CallbackInfo& info) {
    uint64_t id, count;
    if (ArgU64(info, 0, "id", &id) && ArgU64(info, 1, "count", &count)) table_->Forget(id, count);
    return info.Env().Undefined();
  }

  Napi::Value PathOf(const Napi::CallbackInfo& info) {
    uint64_t id;
    if (!ArgU64(info, 0, "id", &id)) return info.Env().Undefined();
    std::string path;
    bool detached;
    if (table_->PathOf(id, &path, &detached) != Status::kOk) {
      // A node the kernel forgot cannot be named again: a kernel bug, or a stale handle after remount.
      ThrowCode(info.Env(), "ESTALE", "unknown node " + std::to_string(id));
      return info.Env().Undefined();
    }
    return Napi::String::New(info.Env(), path);
  }

  Napi::Value IsDetached(const Napi::CallbackInfo& info) {
    uint64_t id;
    if (!ArgU64(info, 0, "id", &id)) return info.Env().Undefined();
    return Napi::Boolean::New(info.Env(), table_->IsDetached(id));
  }

  Napi::Value IdOf(const Napi::CallbackInfo& info) {
    std::string path;
    if (!ArgPath(info, 0, &path)) return info.Env().Undefined();
    uint64_t id;
    if (!table_->IdOf(path, &id)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), static_cast<double>(id));
  }

  Napi::Value Removed(const Napi::CallbackInfo& info) {
    std::string path;
    if (ArgPath(info, 0, &path)) table_->Removed(path);
    return info.Env().Undefined();
  }

  Napi::Value Renamed(const Napi::CallbackInfo& info) {
    std::string from, to;
    if (ArgPath(info, 0, &from) && ArgPath(info, 1, &to)) table_->Renamed(from, to);
    return info.Env().Undefined();
  }

  Napi::Value Size(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(table_->nodeCount())); }

  Napi::Value Generation(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(table_->Generation()));
  }

  // publish(path, attr: 88-byte fuse_attr, isFile, sizeBytes, blockHandle, generation) -> stored?
  Napi::Value Publish(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::string path;
    uint8_t* bytes;
    uint64_t length, sizeBytes, blockHandle, generation;
    bool isFile;
    if (!ArgPath(info, 0, &path) || !ArgBytes(info, 1, "attr", &bytes, &length) || !ArgBool(info, 2, "isFile", &isFile) ||
        !ArgU64(info, 3, "sizeBytes", &sizeBytes) || !ArgU64(info, 4, "blockHandle", &blockHandle) ||
        !ArgU64(info, 5, "generation", &generation)) {
      return env.Undefined();
    }
    if (length != engine::kFuseAttrBytes) {
      ThrowCode(env, "EINVAL", "attr must be a " + std::to_string(engine::kFuseAttrBytes) + "-byte struct fuse_attr");
      return env.Undefined();
    }
    CachedAttr a;
    memcpy(a.attr, bytes, engine::kFuseAttrBytes);
    a.isFile = isFile;
    a.sizeBytes = sizeBytes;
    a.blockHandle = isFile ? blockHandle : 0;
    return Napi::Boolean::New(env, table_->Publish(path, a, generation));
  }

  Napi::Value Invalidate(const Napi::CallbackInfo& info) {
    std::string path;
    bool subtree;
    if (ArgPath(info, 0, &path) && ArgBool(info, 1, "subtree", &subtree)) table_->Invalidate(path, subtree);
    return info.Env().Undefined();
  }

  // list(dir, names: string[], types: Uint8Array) -> kept? (false past listedNamesMax)
  Napi::Value List(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::string dir;
    if (!ArgPath(info, 0, &dir)) return env.Undefined();
    uint8_t* types;
    uint64_t typesLength;
    if (info.Length() < 2 || !info[1].IsArray() || !ArgBytes(info, 2, "types", &types, &typesLength)) {
      if (!env.IsExceptionPending()) ThrowCode(env, "EINVAL", "names must be an array of strings");
      return env.Undefined();
    }
    Napi::Array arr = info[1].As<Napi::Array>();
    if (typesLength != arr.Length()) {
      ThrowCode(env, "EINVAL", "types must have one entry per name");
      return env.Undefined();
    }
    const std::vector<uint8_t> kinds(types, types + typesLength);  // copied before any call into JS
    std::vector<std::pair<std::string, uint8_t>> entries;
    entries.reserve(arr.Length());
    for (uint32_t i = 0; i < arr.Length(); i++) {
      Napi::Value v = arr.Get(i);
      if (!v.IsString()) {
        ThrowCode(env, "EINVAL", "names must be an array of strings");
        return env.Undefined();
      }
      std::string name = v.As<Napi::String>().Utf8Value();
      if (!ValidName(name)) {
        ThrowCode(env, "EINVAL", "a listed name must be 1..255 bytes without '/' or NUL");
        return env.Undefined();
      }
      if (!ValidType(kinds[i])) {
        ThrowCode(env, "EINVAL", "a listed type must be 8 (file), 4 (directory) or 0 (hidden)");
        return env.Undefined();
      }
      entries.emplace_back(std::move(name), kinds[i]);
    }
    return Napi::Boolean::New(env, table_->List(dir, entries));
  }

  // listAdd(dir, name, type)
  Napi::Value ListAdd(const Napi::CallbackInfo& info) {
    std::string dir, name;
    uint64_t type;
    if (!ArgPath(info, 0, &dir) || !ArgName(info, 1, &name) || !ArgU64(info, 2, "type", &type)) return info.Env().Undefined();
    if (type > 255 || !ValidType(static_cast<uint8_t>(type))) {
      ThrowCode(info.Env(), "EINVAL", "a listed type must be 8 (file), 4 (directory) or 0 (hidden)");
      return info.Env().Undefined();
    }
    return Napi::Boolean::New(info.Env(), table_->ListAdd(dir, name, static_cast<uint8_t>(type)));
  }

  Napi::Value ListRemove(const Napi::CallbackInfo& info) {
    std::string dir, name;
    if (ArgPath(info, 0, &dir) && ArgName(info, 1, &name)) table_->ListRemove(dir, name);
    return info.Env().Undefined();
  }

  Napi::Value Unlist(const Napi::CallbackInfo& info) {
    std::string dir;
    bool subtree;
    if (ArgPath(info, 0, &dir) && ArgBool(info, 1, "subtree", &subtree)) table_->Unlist(dir, subtree);
    return info.Env().Undefined();
  }

  Napi::Value InvalidateAll(const Napi::CallbackInfo& info) {
    table_->InvalidateAll();
    return info.Env().Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const MetaTable::Stats s = table_->stats();
    Napi::Object o = Napi::Object::New(env);
    o.Set("nodes", static_cast<double>(table_->nodeCount()));
    o.Set("attrs", static_cast<double>(table_->attrCount()));
    o.Set("lookupHits", static_cast<double>(s.lookupHits));
    o.Set("lookupMisses", static_cast<double>(s.lookupMisses));
    o.Set("lookupAbsent", static_cast<double>(s.lookupAbsent));
    o.Set("listedDirs", static_cast<double>(table_->listedDirCount()));
    o.Set("listedNames", static_cast<double>(table_->listedNameCount()));
    o.Set("attrHits", static_cast<double>(s.attrHits));
    o.Set("attrMisses", static_cast<double>(s.attrMisses));
    o.Set("publishes", static_cast<double>(s.publishes));
    o.Set("refusedPublishes", static_cast<double>(s.refusedPublishes));
    o.Set("invalidations", static_cast<double>(s.invalidations));
    return o;
  }

  // An absolute path: what the table keys by (the JS side builds them; checked again here).
  static bool ArgPath(const Napi::CallbackInfo& info, size_t i, std::string* out) {
    if (!ArgString(info, i, "path", out)) return false;
    if (out->empty() || (*out)[0] != '/' || out->find('\0') != std::string::npos) {
      ThrowCode(info.Env(), "EINVAL", "path must be absolute");
      return false;
    }
    return true;
  }

  static bool ValidType(uint8_t type) { return type == engine::kListFile || type == engine::kListDir || type == engine::kListHidden; }

  static bool ValidName(const std::string& name) {
    return !name.empty() && name.size() <= engine::kNameMaxBytes && name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
  }

  // One entry name of a directory (what LOOKUP carries).
  static bool ArgName(const Napi::CallbackInfo& info, size_t i, std::string* out) {
    if (!ArgString(info, i, "name", out)) return false;
    if (!ValidName(*out)) {
      ThrowCode(info.Env(), "EINVAL", "a listed name must be 1..255 bytes without '/' or NUL");
      return false;
    }
    return true;
  }

  std::shared_ptr<MetaTable> table_;
};

Napi::FunctionReference* metaConstructor = nullptr;

}  // namespace

std::shared_ptr<engine::MetaTable> MetaTableOf(Napi::Value value) {
  if (metaConstructor == nullptr || !value.IsObject() || !value.As<Napi::Object>().InstanceOf(metaConstructor->Value())) return nullptr;
  return MetaTableWrap::Unwrap(value.As<Napi::Object>())->Shared();
}

void InitMeta(Napi::Env env, Napi::Object exports) {
  Napi::Function ctor = MetaTableWrap::Define(env);
  if (metaConstructor == nullptr) metaConstructor = new Napi::FunctionReference(Napi::Persistent(ctor));  // one per process
  exports.Set("MetaTable", ctor);
}

}  // namespace cascade

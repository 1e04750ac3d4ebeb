#include "meta.h"

#include <cstring>
#include <utility>
#include <vector>


namespace cascade::engine {

namespace {

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// JS decodes names as UTF-8, replacing bad bytes, so two byte strings can be one name there: only an
// ASCII name is judged absent here (others go to JS, which finds what its decoding finds).
bool Ascii(const char* name, size_t nameBytes) {
  for (size_t i = 0; i < nameBytes; i++) {
    if (static_cast<unsigned char>(name[i]) >= 0x80) return false;
  }
  return true;
}

// Erases every key of `m` (an ordered map by path) strictly under directory `dir`, calling onErase
// with each entry first: the attribute cache and the listings drop subtrees alike.
template <class Map, class OnErase>
void EraseUnder(Map& m, const std::string& dir, OnErase onErase) {
  const std::string prefix = dir == "/" ? "/" : dir + "/";
  for (auto it = m.lower_bound(prefix); it != m.end() && StartsWith(it->first, prefix);) {
    onErase(*it);
    it = m.erase(it);
  }
}

}  // namespace

MetaTable::MetaTable(uint64_t nodesMax, uint64_t attrsMax, uint64_t listedNamesMax)
    : nodesMax_(nodesMax), attrsMax_(attrsMax), listedNamesMax_(listedNamesMax) {
  byId_[kRootNodeId] = Node{"/", 1, false};
  byPath_["/"] = kRootNodeId;
}

Status MetaTable::Remember(const std::string& path, uint64_t* id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return RememberLocked(path, id);
}

Status MetaTable::RememberLocked(const std::string& path, uint64_t* id) {
  auto known = byPath_.find(path);
  if (known != byPath_.end()) {
    byId_[known->second].lookups++;
    *id = known->second;
    return Status::kOk;
  }
  if (byId_.size() >= nodesMax_ || nextId_ > kNodeIdMax) return Status::kNoSpace;
  const uint64_t n = nextId_++;
  byId_[n] = Node{path, 1, false};
  byPath_[path] = n;
  *id = n;
  return Status::kOk;
}

void MetaTable::Forget(uint64_t id, uint64_t count) {
  if (id == kRootNodeId) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byId_.find(id);
  if (it == byId_.end()) return;
  Node& n = it->second;
  n.lookups = count >= n.lookups ? 0 : n.lookups - count;
  if (n.lookups > 0) return;
  auto p = byPath_.find(n.path);
  if (p != byPath_.end() && p->second == id) byPath_.erase(p);
  byId_.erase(it);
}

Status MetaTable::PathOf(uint64_t id, std::string* path, bool* detached) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byId_.find(id);
  if (it == byId_.end()) return Status::kStale;
  *path = it->second.path;
  *detached = it->second.detached;
  return Status::kOk;
}

bool MetaTable::IdOf(const std::string& path, uint64_t* id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byPath_.find(path);
  if (it == byPath_.end()) return false;
  *id = it->second;
  return true;
}

bool MetaTable::IsDetached(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byId_.find(id);
  return it != byId_.end() && it->second.detached;
}

void MetaTable::Removed(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  DetachLocked(path);
}

void MetaTable::DetachLocked(const std::string& path) {
  auto it = byPath_.find(path);
  if (it == byPath_.end()) return;
  const uint64_t id = it->second;
  byPath_.erase(it);
  if (id != kRootNodeId) byId_[id].detached = true;
}

void MetaTable::Renamed(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mutex_);
  DetachLocked(to);
  std::vector<std::pair<uint64_t, std::string>> moves;
  const std::string prefix = from + "/";
  for (const auto& [p, id] : byPath_) {
    if (p == from) moves.emplace_back(id, to);
    else if (StartsWith(p, prefix)) moves.emplace_back(id, to + p.substr(from.size()));
  }
  const std::string targetPrefix = to + "/";
  for (auto it = byPath_.begin(); it != byPath_.end();) {
    if (StartsWith(it->first, targetPrefix)) it = byPath_.erase(it);
    else ++it;
  }
  for (const auto& move : moves) byPath_.erase(byId_[move.first].path);
  for (auto& [id, p] : moves) {
    byId_[id].path = p;
    byPath_[p] = id;
  }
}

uint64_t MetaTable::nodeCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  return byId_.size();
}

uint64_t MetaTable::Generation() {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

bool MetaTable::Publish(const std::string& path, const CachedAttr& attr, uint64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation != generation_) {
    stats_.refusedPublishes++;
    return false;
  }
  // Full: start over rather than track recency on every hit (a miss costs one trip through JS).
  if (attrs_.size() >= attrsMax_ && attrs_.count(path) == 0) attrs_.clear();
  attrs_[path] = attr;
  stats_.publishes++;
  return true;
}

void MetaTable::Invalidate(const std::string& path, bool subtree) {
  std::lock_guard<std::mutex> lock(mutex_);
  InvalidateLocked(path, subtree);
}

void MetaTable::InvalidateLocked(const std::string& path, bool subtree) {
  generation_++;
  stats_.invalidations++;
  attrs_.erase(path);
  if (subtree) EraseUnder(attrs_, path, [](const auto&) {});
}

void MetaTable::InvalidateAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  generation_++;
  stats_.invalidations++;
  attrs_.clear();
}

uint64_t MetaTable::attrCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  return attrs_.size();
}

bool MetaTable::List(const std::string& dir, const std::vector<std::pair<std::string, uint8_t>>& entries) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto old = listed_.find(dir);
  const uint64_t kept = listedNames_ - (old == listed_.end() ? 0 : old->second.size());
  if (kept + entries.size() > listedNamesMax_) return false;
  std::unordered_map<std::string, uint8_t> map(entries.begin(), entries.end());
  listedNames_ = kept + map.size();
  listed_[dir] = std::move(map);
  return true;
}

bool MetaTable::ListingOf(uint64_t id, std::vector<std::pair<std::string, uint8_t>>* entries) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto n = byId_.find(id);
  if (n == byId_.end() || n->second.detached) return false;
  auto l = listed_.find(n->second.path);
  if (l == listed_.end()) return false;
  entries->reserve(entries->size() + l->second.size());
  for (const auto& [name, type] : l->second) {
    if (type != kListHidden) entries->emplace_back(name, type);
  }
  return true;
}

bool MetaTable::ListAdd(const std::string& dir, const std::string& name, uint8_t type) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = listed_.find(dir);
  if (it == listed_.end()) return true;
  auto entry = it->second.find(name);
  if (entry != it->second.end()) {
    entry->second = type;  // a hidden name that is a file again, or a name of another kind
    return true;
  }
  if (listedNames_ >= listedNamesMax_) {  // full: this directory's lookups go to JS again
    listedNames_ -= it->second.size();
    listed_.erase(it);
    return false;
  }
  it->second.emplace(name, type);
  listedNames_++;
  return true;
}

void MetaTable::ListRemove(const std::string& dir, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = listed_.find(dir);
  if (it != listed_.end() && it->second.erase(name) > 0) listedNames_--;
}

void MetaTable::Unlist(const std::string& dir, bool subtree) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = listed_.find(dir);
  if (it != listed_.end()) {
    listedNames_ -= it->second.size();
    listed_.erase(it);
  }
  if (subtree) EraseUnder(listed_, dir, [this](const auto& entry) { listedNames_ -= entry.second.size(); });
}

uint64_t MetaTable::listedDirCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  return listed_.size();
}

uint64_t MetaTable::listedNameCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  return listedNames_;
}

MetaTable::Lookup MetaTable::LookupCached(uint64_t parent, const char* name, size_t nameBytes, uint64_t* id, CachedAttr* attr) {
  // Over 255 bytes: JS refuses it (ENAMETOOLONG), as a local filesystem does.
  if (nameBytes == 0 || nameBytes > kNameMaxBytes || memchr(name, '/', nameBytes) != nullptr || (nameBytes == 1 && name[0] == '.') ||
      (nameBytes == 2 && name[0] == '.' && name[1] == '.')) {
    return Lookup::kMiss;  // JS answers (and refuses) these
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto p = byId_.find(parent);
  if (p == byId_.end() || p->second.detached) {
    stats_.lookupMisses++;
    return Lookup::kMiss;
  }
  std::string child = p->second.path == "/" ? "/" : p->second.path + "/";
  child.append(name, nameBytes);
  auto a = attrs_.find(child);
  if (a == attrs_.end()) {
    auto l = listed_.find(p->second.path);
    if (l != listed_.end() && Ascii(name, nameBytes) && l->second.count(std::string(name, nameBytes)) == 0) {
      stats_.lookupAbsent++;
      return Lookup::kAbsent;
    }
  }
  if (a == attrs_.end() || RememberLocked(child, id) != Status::kOk) {
    stats_.lookupMisses++;
    return Lookup::kMiss;
  }
  *attr = a->second;
  stats_.lookupHits++;
  return Lookup::kHit;
}

bool MetaTable::AttrOf(uint64_t id, CachedAttr* attr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto n = byId_.find(id);
  if (n == byId_.end() || n->second.detached) {
    stats_.attrMisses++;
    return false;
  }
  auto a = attrs_.find(n->second.path);
  if (a == attrs_.end()) {
    stats_.attrMisses++;
    return false;
  }
  *attr = a->second;
  stats_.attrHits++;
  return true;
}

MetaTable::Stats MetaTable::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace cascade::engine

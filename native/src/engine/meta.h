// The native engine's metadata table: node ids <-> paths (what the kernel names files by), and a cache
// of attributes of committed files and directories that JS publishes and invalidates. With it the
// workers answer LOOKUP, GETATTR, FORGET and read-only OPEN/RELEASE of DRAM-resident files without a
// trip through JS (about 100 us each). JS stays the control plane: it alone decides what is cached
// (committed content, no write session) and invalidates every path a request changes before it
// answers that request, so close-to-open consistency holds as when every request went through JS.
//
// A publish carries the generation JS read before it started resolving the path; any invalidation
// since then (of any path) refuses it, so an answer computed before a change never lands after it.
//
// Thread safety: every method may be called from any thread; one mutex guards both tables.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../core/status.h"

namespace cascade::engine {

constexpr uint64_t kRootNodeId = 1;
constexpr size_t kFuseAttrBytes = 88;  // struct fuse_attr
// Node ids at or past this are refused (JS holds them as numbers, exactly).
constexpr uint64_t kNodeIdMax = (uint64_t{1} << 53) - 1;
// A name component's limit (NAME_MAX); JS refuses longer ones with ENAMETOOLONG.
constexpr size_t kNameMaxBytes = 255;
// Readdir types of listed names (dirent.h's DT_REG, DT_DIR), and a name LOOKUP finds but READDIR skips.
constexpr uint8_t kListFile = 8;
constexpr uint8_t kListDir = 4;
constexpr uint8_t kListHidden = 0;

// One cached path: its struct fuse_attr as JS encoded it (ino included: the filesystem's own inode
// number, not the node id), and for a file whose committed block is in the DRAM arena, that block's
// arena handle (0: not resident; opens then go to JS).
struct CachedAttr {
  uint8_t attr[kFuseAttrBytes] = {};
  bool isFile = false;
  uint64_t sizeBytes = 0;
  uint64_t blockHandle = 0;
};

class MetaTable {
 public:
  MetaTable(uint64_t nodesMax, uint64_t attrsMax, uint64_t listedNamesMax = 0);
  MetaTable(const MetaTable&) = delete;
  MetaTable& operator=(const MetaTable&) = delete;

  // ---- nodes (the kernel's lookup counts) ----
  // A lookup that succeeded: the node for path, its lookup count raised by one (kNoSpace at nodesMax).
  Status Remember(const std::string& path, uint64_t* id);
  void Forget(uint64_t id, uint64_t count);
  // kStale for an id the kernel forgot (or never had).
  Status PathOf(uint64_t id, std::string* path, bool* detached);
  bool IdOf(const std::string& path, uint64_t* id);
  // After unlink/rmdir: the name no longer leads to its node (which keeps its path until forgotten).
  void Removed(const std::string& path);
  // After a rename: from and everything under it now live under to; a node that was at to is detached.
  void Renamed(const std::string& from, const std::string& to);
  uint64_t nodeCount();

  // ---- attribute cache ----
  uint64_t Generation();
  // Store path's attributes if nothing was invalidated since generation; false if refused.
  bool Publish(const std::string& path, const CachedAttr& attr, uint64_t generation);
  // Forget path's attributes (and, with subtree, everything under it).
  void Invalidate(const std::string& path, bool subtree);
  // Drop every cached attribute (a change JS cannot name by path).
  void InvalidateAll();
  uint64_t attrCount();

  // ---- directory listings: LOOKUP of a name that is not there, answered here ----
  // A directory's every entry name, where JS alone changes the directory (one node, no shared
  // namespace). JS tells every entry added or removed before it answers the request that made the
  // change, so the listing is exact whenever a worker reads it; the kernel holds a directory's lock
  // over a create, unlink or rename in it, so a LOOKUP never races the change it would see.
  // Each name has its readdir type: kListFile, kListDir, or kListHidden (found by LOOKUP, not listed
  // by READDIR: a name libfuse hid). List: false (nothing kept) past listedNamesMax names in all.
  bool List(const std::string& dir, const std::vector<std::pair<std::string, uint8_t>>& entries);
  // No-ops for a directory not listed. An add past listedNamesMax drops that directory's listing
  // (ListAdd returns false then).
  bool ListAdd(const std::string& dir, const std::string& name, uint8_t type);
  void ListRemove(const std::string& dir, const std::string& name);
  // Forget the listing of dir (and, with subtree, of every directory under it): moved or removed.
  void Unlist(const std::string& dir, bool subtree);
  uint64_t listedDirCount();
  uint64_t listedNameCount();
  // OPENDIR of node id: the entries READDIR lists (hidden names left out), if its directory is listed.
  bool ListingOf(uint64_t id, std::vector<std::pair<std::string, uint8_t>>* entries);

  // ---- the workers' fast paths ----
  enum class Lookup { kMiss, kHit, kAbsent };
  // LOOKUP of name in directory parent. kHit: cached; remembers the child (as Remember) and fills id
  // and attr. kAbsent: the parent is listed and the name is not in it (ENOENT). kMiss: not known (or a
  // name JS must judge), so the request goes to JS.
  Lookup LookupCached(uint64_t parent, const char* name, size_t nameBytes, uint64_t* id, CachedAttr* attr);
  // GETATTR/OPEN of node id: its cached attributes, unless it is detached or not cached.
  bool AttrOf(uint64_t id, CachedAttr* attr);
  bool IsDetached(uint64_t id);

  struct Stats {
    uint64_t lookupHits = 0, lookupMisses = 0, lookupAbsent = 0, attrHits = 0, attrMisses = 0, publishes = 0, refusedPublishes = 0,
             invalidations = 0;
  };
  Stats stats();

 private:
  struct Node {
    std::string path;
    uint64_t lookups = 0;
    bool detached = false;
  };
  Status RememberLocked(const std::string& path, uint64_t* id);
  void DetachLocked(const std::string& path);
  void InvalidateLocked(const std::string& path, bool subtree);

  const uint64_t nodesMax_;
  const uint64_t attrsMax_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, Node> byId_;
  std::unordered_map<std::string, uint64_t> byPath_;
  uint64_t nextId_ = kRootNodeId + 1;
  // Ordered, so a directory's subtree is one range ("/a/" .. "/a0": '0' follows '/').
  std::map<std::string, CachedAttr> attrs_;
  // Ordered by directory, so a subtree is one range, as attrs_.
  const uint64_t listedNamesMax_;
  std::map<std::string, std::unordered_map<std::string, uint8_t>> listed_;
  uint64_t listedNames_ = 0;
  uint64_t generation_ = 1;
  Stats stats_;
};

}  // namespace cascade::engine

// The page-cache rules of the native engine: which read opens of an inode may read through the
// kernel's page cache, whether they keep the pages cached, and when the kernel's attributes of the
// inode must be made stale. docs/ARCHITECTURE.md ("The page-cache rules") is this class as a table,
// event by event. It does no I/O: the clock, the path of a node and the one notice it sends are given.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "../core/status.h"

namespace cascade::engine {

constexpr size_t kCachedNodesMax = 1 << 20;    // nodes whose page-cache content is tracked (then direct I/O)
constexpr uint64_t kHeldOffMaxMs = 60'000;      // the longest hold HoldOff takes
constexpr size_t kHeldOffPathsMax = 4096;      // paths held off the page cache at once (HoldOff)
// ReadOpen: another content is open on the node (no open_out flags are all ones).
constexpr uint32_t kReadOpenConflict = 0xFFFFFFFFu;

struct PageCacheOptions {
  bool pageCache = false;   // read opens may use the page cache
  bool trackReads = false;  // the content each read open reads is tracked (implied by pageCache)
  uint32_t openFlags = 0;   // open_out flags of an open that does not use the page cache (direct I/O)
  uint64_t attrValidMs = 0;
  size_t handlesMax = 1 << 20;  // tracked read opens at once (more: untracked, direct I/O)
};

struct PageCacheFigures {
  uint64_t opens = 0;        // page-cache opens answered
  uint64_t direct = 0;       // tracked opens answered with direct I/O (pageCache on)
  uint64_t attrNotices = 0;  // opens that made the kernel's attributes of the node stale
  uint64_t conflicts = 0;    // opens refused: another content is open on the node
};

class PageCacheRules {
 public:
  using Clock = std::function<int64_t()>;  // steady nanoseconds
  // The node's path; Status::kStale once the kernel forgot the node.
  using PathOf = std::function<Status(uint64_t nodeid, std::string* path)>;
  // FUSE_NOTIFY_INVAL_INODE of the node's attributes (no page touched).
  using NotifyAttrsStale = std::function<void(uint64_t nodeid)>;

  PageCacheRules(const PageCacheOptions& options, Clock clock, PathOf pathOf, NotifyAttrsStale notify);

  // A read-only open, handle fh, of nodeid's committed content contentKey (sizeBytes long): its
  // open_out flags, or kReadOpenConflict when another content is open on the node (the caller gives
  // the name a new node). cacheable: false where the name has a write session open elsewhere.
  uint32_t ReadOpen(uint64_t nodeid, uint64_t fh, uint64_t contentKey, uint64_t sizeBytes, bool cacheable = true);
  // The handle's RELEASE.
  void Released(uint64_t fh);
  // A READ of a page-cache open arrived: its open() returned, so the pages it dropped are gone.
  void PagesRead(uint64_t fh);
  // A writer is about to be answered: true (and no page-cache open of the node until WriterReleased)
  // when no page-cache open of the node is open now; false otherwise.
  bool TryWriterOpen(uint64_t nodeid);
  void WriterReleased(uint64_t nodeid);
  bool HasPageCacheOpens(uint64_t nodeid);
  // The node at path takes no page-cache open for holdMs (a writer was sent to look it up again).
  void HoldOff(const std::string& path, uint64_t holdMs);
  // A WRITE of the node was answered: the kernel dropped the size it held.
  void ForgetToldSize(uint64_t nodeid);
  // The attributes' lifetime for a reply that gives the node sizeBytes: 0 when a page-cache open of
  // it reads more than that; else attrValidMs, remembering the smallest size told until it expires.
  uint64_t AttrValidMsFor(uint64_t nodeid, uint64_t sizeBytes);
  // A FORGET of the node: once the kernel no longer has it, nothing of it is cached.
  void NodeForgotten(uint64_t nodeid);

  PageCacheFigures figures() const;

 private:
  struct Node {
    uint64_t contentKey = 0;  // what the node's tracked read opens read (all one content)
    uint64_t sizeBytes = 0;
    uint64_t readers = 0;     // tracked read opens, cached or direct
    uint64_t opens = 0;       // of those, page-cache opens
    uint64_t pagesKey = 0;    // the content whose pages the kernel may cache for the node (0: unknown)
    // Whether a page-cache open of pagesKey has read since pagesKey was set by an open that drops the
    // pages (no FOPEN_KEEP_CACHE): the kernel drops them in the opener's open(), after the reply, so
    // until one such opener reads, another content's pages may still be there (PagesRead).
    bool pagesDropped = false;
    // The smallest size an attribute reply gave the kernel for the node, valid until toldUntilNs.
    uint64_t toldMinSizeBytes = 0;
    int64_t toldUntilNs = 0;
  };
  struct Handle {
    uint64_t nodeid = 0;
    bool cached = false;  // a page-cache open (else direct I/O)
  };
  bool HeldOffLocked(uint64_t nodeid);  // a writer is open or expected

  const PageCacheOptions options_;
  const Clock clock_;
  const PathOf pathOf_;
  const NotifyAttrsStale notify_;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Node> nodes_;
  std::unordered_map<uint64_t, Handle> handles_;
  std::unordered_map<uint64_t, uint64_t> writers_;    // nodeid -> writers open
  std::unordered_map<std::string, int64_t> heldOff_;  // path -> until (clock)
  int64_t heldOffAllUntilNs_ = 0;                     // every path held off until then (heldOff_ overflowed)
  std::atomic<uint64_t> opens_{0}, direct_{0}, attrNotices_{0}, conflicts_{0};
};

}  // namespace cascade::engine

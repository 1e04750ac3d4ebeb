#include "page_cache.h"

#include <algorithm>
#include <iterator>

#include "../core/check.h"
#include "fuse_kernel.h"

namespace cascade::engine {

PageCacheRules::PageCacheRules(const PageCacheOptions& options, Clock clock, PathOf pathOf, NotifyAttrsStale notify)
    : options_(options), clock_(std::move(clock)), pathOf_(std::move(pathOf)), notify_(std::move(notify)) {}

uint32_t PageCacheRules::ReadOpen(uint64_t nodeid, uint64_t fh, uint64_t contentKey, uint64_t sizeBytes, bool cacheable) {
  if (!(options_.pageCache || options_.trackReads) || contentKey == 0) return options_.openFlags;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = nodes_.find(nodeid);
  if (it == nodes_.end()) {
    if (nodes_.size() >= kCachedNodesMax || handles_.size() >= options_.handlesMax) return options_.openFlags;
    it = nodes_.emplace(nodeid, Node{}).first;
  }
  Node& node = it->second;
  // Every open of an inode may fill its one page cache (read() through it, or mmap: the kernel maps a
  // direct-I/O file through the page cache too), so the opens of a node read one content at a time.
  if (node.readers > 0 && node.contentKey != contentKey) {
    conflicts_.fetch_add(1, std::memory_order_relaxed);
    return kReadOpenConflict;
  }
  const bool cached = options_.pageCache && cacheable && !HeldOffLocked(nodeid);
  if (handles_.size() >= options_.handlesMax || !handles_.emplace(fh, Handle{nodeid, cached}).second) {
    return options_.openFlags;
  }
  node.contentKey = contentKey;
  node.sizeBytes = sizeBytes;
  node.readers++;
  if (!cached) {
    // Direct I/O; an mmap of it drops the cached pages and maps this content's. Pages of another
    // content may stay cached meanwhile (no mmap), so the next cached open drops them.
    if (node.pagesKey != contentKey) node.pagesKey = 0;
    if (options_.pageCache) direct_.fetch_add(1, std::memory_order_relaxed);
    return options_.openFlags;
  }
  // Only once the pages of another content are known gone: two opens answered back to back, the first
  // dropping the pages and the second keeping them, would let the second read the old content's pages
  // before the first's open() drops them.
  const bool switching = node.pagesKey != contentKey;
  const bool keep = !switching && node.pagesDropped;
  if (!keep) node.pagesDropped = false;  // until one of these opens reads (PagesRead)
  node.pagesKey = contentKey;
  node.opens++;
  opens_.fetch_add(1, std::memory_order_relaxed);
  // The kernel may hold a smaller size for the inode, still valid: one told before this open counted
  // (AttrValidMsFor keeps the smallest), or one the kernel set itself, which no reply told: a short
  // read of the other content last read through these pages shrinks it, as do a writer's O_TRUNC and
  // writes (WriterReleased forgets the pages' content). Cached reads stop at it without asking, so
  // make it stale before the open returns; a reply about the node already on its way is dropped too
  // (the notice raises the inode's attribute version). Not again for opens of the same content that only wait for a read (!keep, !switching):
  // the first one's notice made the size stale, and since then only replies (the told size) can shrink
  // it; a notice at each such open would make each next open ask GETATTR (open+close of files nobody
  // reads: three requests each, at about half the rate).
  if (switching || (node.toldUntilNs > clock_() && node.toldMinSizeBytes < sizeBytes)) {
    attrNotices_.fetch_add(1, std::memory_order_relaxed);
    notify_(nodeid);
    node.toldUntilNs = 0;  // every reply told before the notice is stale now (or dropped on arrival)
  }
  // The pages cached are of this content (kept), or maybe of another (the open drops them). A read-only
  // open's FLUSH stays off where the embedder turned it off.
  return (keep ? FOPEN_KEEP_CACHE : 0) | (options_.openFlags & FOPEN_NOFLUSH);
}

bool PageCacheRules::HeldOffLocked(uint64_t nodeid) {
  auto w = writers_.find(nodeid);
  if (w != writers_.end() && w->second > 0) return true;
  if (heldOffAllUntilNs_ > clock_()) return true;  // the table overflowed: every path is held off
  if (heldOff_.empty() || !pathOf_) return false;
  std::string path;
  if (pathOf_(nodeid, &path) != Status::kOk) return false;
  auto h = heldOff_.find(path);
  if (h == heldOff_.end()) return false;
  if (h->second > clock_()) return true;
  heldOff_.erase(h);
  return false;
}

bool PageCacheRules::TryWriterOpen(uint64_t nodeid) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = nodes_.find(nodeid);
  if (it != nodes_.end() && it->second.opens > 0) return false;
  writers_[nodeid]++;
  return true;
}

void PageCacheRules::PagesRead(uint64_t fh) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto h = handles_.find(fh);
  if (h == handles_.end() || !h->second.cached) return;
  auto node = nodes_.find(h->second.nodeid);
  if (node != nodes_.end()) node->second.pagesDropped = true;
}

bool PageCacheRules::HasPageCacheOpens(uint64_t nodeid) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = nodes_.find(nodeid);
  return it != nodes_.end() && it->second.opens > 0;
}

void PageCacheRules::WriterReleased(uint64_t nodeid) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = writers_.find(nodeid);
  Check(it != writers_.end() && it->second > 0, "a released writer was counted");
  if (--it->second == 0) writers_.erase(it);
  // The writer moved the inode's size and pages (O_TRUNC, writes): the next page-cache open keeps none.
  auto node = nodes_.find(nodeid);
  if (node != nodes_.end()) node->second.pagesKey = 0;
}

void PageCacheRules::HoldOff(const std::string& path, uint64_t holdMs) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t now = clock_();
  if (heldOff_.size() >= kHeldOffPathsMax) {
    for (auto it = heldOff_.begin(); it != heldOff_.end();) it = it->second <= now ? heldOff_.erase(it) : std::next(it);
  }
  if (heldOff_.size() >= kHeldOffPathsMax) {
    // All live: the paths are forgotten, and every path is held off for as long as any could have been
    // (its reads direct, exact), rather than let a forgotten one take the page cache at once.
    for (const auto& [heldPath, untilNs] : heldOff_) heldOffAllUntilNs_ = std::max(heldOffAllUntilNs_, untilNs);
    heldOff_.clear();
  }
  heldOff_[path] = now + static_cast<int64_t>(std::min<uint64_t>(holdMs, kHeldOffMaxMs)) * 1'000'000;
}

void PageCacheRules::ForgetToldSize(uint64_t nodeid) {
  if (!options_.pageCache) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = nodes_.find(nodeid);
  if (it != nodes_.end()) it->second.toldUntilNs = 0;
}

uint64_t PageCacheRules::AttrValidMsFor(uint64_t nodeid, uint64_t sizeBytes) {
  if (!options_.pageCache) return options_.attrValidMs;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = nodes_.find(nodeid);
  if (it != nodes_.end() && it->second.opens > 0 && it->second.sizeBytes > sizeBytes) return 0;
  if (it == nodes_.end()) {
    // Full: the node takes no page-cache open (ReadOpenFlags), so what the kernel keeps of it is moot.
    if (nodes_.size() >= kCachedNodesMax) return options_.attrValidMs;
    it = nodes_.emplace(nodeid, Node{}).first;
  }
  // The smallest size the kernel may hold for the node, until that reply expires. A later reply
  // replaces it in the kernel, but may be dropped there for a concurrent change, so a smaller size
  // is remembered until its own expiry (never extended by larger ones: a stream of replies must not
  // keep it alive), or until a notice makes every earlier reply stale (ReadOpenFlags).
  Node& node = it->second;
  const int64_t now = clock_();
  if (node.toldUntilNs <= now || sizeBytes <= node.toldMinSizeBytes) {
    node.toldMinSizeBytes = sizeBytes;
    node.toldUntilNs = now + static_cast<int64_t>(options_.attrValidMs) * 1'000'000;
  }
  return options_.attrValidMs;
}

void PageCacheRules::Released(uint64_t fh) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto h = handles_.find(fh);
  if (h == handles_.end()) return;
  auto it = nodes_.find(h->second.nodeid);
  Check(it != nodes_.end() && it->second.readers > 0, "a tracked read open counts on its node");
  it->second.readers--;
  if (h->second.cached) {
    Check(it->second.opens > 0, "a page-cache open counts on its node");
    it->second.opens--;  // the content stays: its pages may still be cached (the next open keeps them)
  }
  handles_.erase(h);
}

void PageCacheRules::NodeForgotten(uint64_t nodeid) {
  std::string path;
  if (!pathOf_ || pathOf_(nodeid, &path) != Status::kStale) return;  // the kernel still has it
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = nodes_.find(nodeid);
  // Gone from the kernel: its inode and page cache went with it.
  if (it != nodes_.end() && it->second.readers == 0) nodes_.erase(it);
}


PageCacheFigures PageCacheRules::figures() const {
  return {opens_.load(), direct_.load(), attrNotices_.load(), conflicts_.load()};
}

}  // namespace cascade::engine

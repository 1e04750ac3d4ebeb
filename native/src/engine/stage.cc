#include "stage.h"

#include <string.h>
#include <time.h>

#include <algorithm>

#include "../core/check.h"
#include "../core/sha256.h"

namespace cascade::engine {

namespace {

// Calls fn(bytes, length) for each piece of block bytes [from, to), in order, until it returns false;
// runs are the block's pages in block order and offsets[i] the block offset of runs[i]'s first byte.
// Returns whether every piece was visited.
template <typename Fn>
bool ForEachPiece(uint8_t* base, const std::vector<Extent>& runs, const std::vector<uint64_t>& offsets, uint64_t from, uint64_t to, Fn fn) {
  if (from >= to) return true;
  auto it = std::upper_bound(offsets.begin(), offsets.end(), from);
  for (size_t i = static_cast<size_t>(it - offsets.begin()) - 1; from < to; i++) {
    Check(i < runs.size(), "runs cover the bytes walked");
    const uint64_t within = from - offsets[i];
    const uint64_t n = std::min(runs[i].lengthBytes - within, to - from);
    if (!fn(base + runs[i].arenaOffsetBytes + within, n)) return false;
    from += n;
  }
  return true;
}

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

struct Stager::Stage {
  std::mutex mutex;
  std::condition_variable idle;  // the hasher let go of it (queued went false)
  uint64_t id = 0;
  uint64_t handle = 0;  // the arena block; 0 once sealed away or dropped
  uint64_t capacityBytes = 0;
  std::vector<Extent> runs;  // the block's pages in block order, covering capacityBytes
  std::vector<uint64_t> runOffsets;
  uint64_t sizeBytes = 0;
  int64_t mtimeMs = 0;
  bool dirty = false;
  bool forwarding = false;
  bool dropped = false;
  // The incremental hash covers [0, hashedBytes) while hashValid (writes so far came in order).
  Sha256 sha;
  uint64_t hashedBytes = 0;
  bool hashValid = true;
  bool queued = false;  // waiting for or held by a hasher
  std::vector<uint64_t> fhs;  // FUSE handles routed here (under Stager::mutex_)
};

Stager::Stager(std::shared_ptr<Arena> arena, uint64_t maxBlockBytes, unsigned hashThreads)
    : arena_(std::move(arena)), maxBlockBytes_(maxBlockBytes) {
  Check(arena_ != nullptr, "a stager stages into an arena");
  const unsigned n = std::max(1u, std::min(hashThreads, kHashThreadsMax));
  for (unsigned i = 0; i < n; i++) hashers_.emplace_back([this] { HashWorker(); });
}

Stager::~Stager() {
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    stopping_ = true;
  }
  queueReady_.notify_all();
  for (auto& t : hashers_) t.join();
  // Stages dropped while still queued wait for a hasher to free their block; no hasher runs now.
  for (auto& stage : queue_) {
    std::lock_guard<std::mutex> l(stage->mutex);
    if (stage->dropped && stage->handle != 0) {
      arena_->Free(stage->handle);
      stage->handle = 0;
    }
    stage->queued = false;
    stage->idle.notify_all();
  }
  queue_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, stage] : stages_) {
    std::lock_guard<std::mutex> l(stage->mutex);
    if (stage->handle != 0) arena_->Free(stage->handle);
    stage->handle = 0;
    stage->queued = false;  // left in the queue: a Seal waiting on it ends (kStale)
    stage->idle.notify_all();
  }
}

size_t Stager::stages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stages_.size();
}

std::shared_ptr<Stager::Stage> Stager::Find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = stages_.find(id);
  return it == stages_.end() ? nullptr : it->second;
}

Status Stager::Create(uint64_t* id) {
  auto stage = std::make_shared<Stage>();
  if (!stage->sha.ok()) return Status::kIo;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stages_.size() >= kStagesMax) return Status::kNoSpace;
  Status s = arena_->Allocate(0, &stage->handle);
  if (s != Status::kOk) return s;
  stage->id = nextId_++;
  stage->mtimeMs = NowMs();
  stages_[stage->id] = stage;
  *id = stage->id;
  return Status::kOk;
}

Status Stager::Attach(uint64_t fh, uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = stages_.find(id);
  if (it == stages_.end()) return Status::kStale;
  if (byHandle_.size() >= kStageHandlesMax && byHandle_.count(fh) == 0) return Status::kNoSpace;
  byHandle_[fh] = it->second;
  it->second->fhs.push_back(fh);
  return Status::kOk;
}

void Stager::DetachHandle(uint64_t fh) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = byHandle_.find(fh);
  if (it == byHandle_.end()) return;
  auto& fhs = it->second->fhs;
  fhs.erase(std::remove(fhs.begin(), fhs.end(), fh), fhs.end());
  byHandle_.erase(it);
}

Status Stager::Write(uint64_t fh, uint64_t offsetBytes, const uint8_t* data, uint64_t lengthBytes) {
  std::shared_ptr<Stage> stage;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = byHandle_.find(fh);
    if (it == byHandle_.end()) return Status::kStale;
    stage = it->second;
  }
  std::unique_lock<std::mutex> lock(stage->mutex);
  if (stage->forwarding || stage->handle == 0) return Status::kBusy;
  if (offsetBytes > maxBlockBytes_ || lengthBytes > maxBlockBytes_ - offsetBytes) {
    stage->forwarding = true;  // JS answers EFBIG, as it would for its own staging
    return Status::kRange;
  }
  const uint64_t end = offsetBytes + lengthBytes;
  if (end > stage->capacityBytes) {
    // Doubling: a file written in 128 KiB pieces grows O(log n) times; Seal gives the surplus back.
    const uint64_t doubled = std::max(end, stage->capacityBytes * 2);
    Status s = arena_->Grow(stage->handle, std::min(doubled, maxBlockBytes_));
    if (s != Status::kOk) s = arena_->Grow(stage->handle, end);
    uint64_t size = 0;
    std::vector<Extent> runs;
    if (s == Status::kOk) s = arena_->Describe(stage->handle, &size, &runs);
    if (s != Status::kOk) {
      stage->forwarding = true;  // no pages for it: JS stages it in its own memory from here
      return Status::kNoSpace;
    }
    stage->capacityBytes = size;
    stage->runs = std::move(runs);
    stage->runOffsets.clear();
    uint64_t at = 0;
    for (const Extent& e : stage->runs) {
      stage->runOffsets.push_back(at);
      at += e.lengthBytes;
    }
    Check(at == size, "a stage's runs cover its capacity");
  }
  uint8_t* base = arena_->base();
  if (offsetBytes > stage->sizeBytes) {  // a hole reads as zeros
    ForEachPiece(base, stage->runs, stage->runOffsets, stage->sizeBytes, offsetBytes, [](uint8_t* p, uint64_t n) {
      memset(p, 0, n);
      return true;
    });
  }
  const uint8_t* src = data;
  ForEachPiece(base, stage->runs, stage->runOffsets, offsetBytes, end, [&](uint8_t* p, uint64_t n) {
    memcpy(p, src, n);
    src += n;
    return true;
  });
  // A rewrite of bytes already written: the incremental hash no longer matches; Seal hashes it all.
  if (offsetBytes < stage->sizeBytes) stage->hashValid = false;
  stage->sizeBytes = std::max(stage->sizeBytes, end);
  stage->dirty = true;
  stage->mtimeMs = NowMs();
  writes_.fetch_add(1, std::memory_order_relaxed);
  writeBytes_.fetch_add(lengthBytes, std::memory_order_relaxed);
  if (stage->hashValid && !stage->queued && stage->hashedBytes < stage->sizeBytes) Enqueue(stage);
  return Status::kOk;
}

void Stager::Enqueue(const std::shared_ptr<Stage>& stage) {
  stage->queued = true;
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    queue_.push_back(stage);
  }
  queueReady_.notify_one();
}

void Stager::HashWorker() {
  for (;;) {
    std::shared_ptr<Stage> stage;
    {
      std::unique_lock<std::mutex> lock(queueMutex_);
      queueReady_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      stage = std::move(queue_.front());
      queue_.pop_front();
    }
    std::unique_lock<std::mutex> lock(stage->mutex);
    while (!stage->dropped && stage->hashValid && stage->handle != 0 && stage->hashedBytes < stage->sizeBytes) {
      const uint64_t from = stage->hashedBytes, to = stage->sizeBytes;
      // Copies: Grow may replace the vectors meanwhile. Only the hasher holding the stage (queued)
      // updates its Sha256; bytes below sizeBytes written in order never change while hashValid holds.
      const std::vector<Extent> runs = stage->runs;
      const std::vector<uint64_t> offsets = stage->runOffsets;
      lock.unlock();
      const bool ok = ForEachPiece(arena_->base(), runs, offsets, from, to, [&](uint8_t* p, uint64_t n) {
        return stage->sha.Update(p, n) == Status::kOk;
      });
      lock.lock();
      if (!ok) stage->hashValid = false;  // Seal hashes it all instead
      if (stage->hashValid) stage->hashedBytes = to;
    }
    if (stage->dropped && stage->handle != 0) {
      arena_->Free(stage->handle);  // dropped while hashed: freed here, after the last read of it
      stage->handle = 0;
    }
    stage->queued = false;
    stage->idle.notify_all();
  }
}

Status Stager::Info(uint64_t id, bool takeDirty, StageInfo* info) {
  return Report(id, takeDirty, false, info);
}

Status Stager::Freeze(uint64_t id, StageInfo* info) { return Report(id, false, true, info); }

Status Stager::InfoOfHandle(uint64_t fh, StageInfo* info) {
  std::shared_ptr<Stage> stage;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = byHandle_.find(fh);
    if (it == byHandle_.end()) return Status::kStale;
    stage = it->second;
  }
  std::lock_guard<std::mutex> lock(stage->mutex);
  info->sizeBytes = stage->sizeBytes;
  info->mtimeMs = stage->mtimeMs;
  info->dirty = stage->dirty;
  info->forwarding = stage->forwarding;
  return Status::kOk;
}

Status Stager::Report(uint64_t id, bool takeDirty, bool freeze, StageInfo* info) {
  auto stage = Find(id);
  if (!stage) return Status::kStale;
  std::lock_guard<std::mutex> lock(stage->mutex);
  if (freeze) stage->forwarding = true;
  info->sizeBytes = stage->sizeBytes;
  info->mtimeMs = stage->mtimeMs;
  info->dirty = stage->dirty;
  info->forwarding = stage->forwarding;
  if (takeDirty) stage->dirty = false;
  return Status::kOk;
}

Status Stager::Read(uint64_t id, uint64_t offsetBytes, uint8_t* target, uint64_t lengthBytes, uint64_t* copiedBytes) {
  *copiedBytes = 0;
  auto stage = Find(id);
  if (!stage) return Status::kStale;
  std::lock_guard<std::mutex> lock(stage->mutex);
  if (stage->handle == 0) return Status::kStale;
  if (offsetBytes >= stage->sizeBytes) return Status::kOk;
  const uint64_t want = std::min(lengthBytes, stage->sizeBytes - offsetBytes);
  uint8_t* to = target;
  ForEachPiece(arena_->base(), stage->runs, stage->runOffsets, offsetBytes, offsetBytes + want, [&](uint8_t* p, uint64_t n) {
    memcpy(to, p, n);
    to += n;
    return true;
  });
  *copiedBytes = want;
  return Status::kOk;
}

Status Stager::Seal(uint64_t id, Sealed* sealed) {
  auto stage = Find(id);
  if (!stage) return Status::kStale;
  std::unique_lock<std::mutex> lock(stage->mutex);
  if (stage->handle == 0) return Status::kStale;
  stage->forwarding = true;  // from now on the content is fixed
  stage->idle.wait(lock, [&] { return !stage->queued; });
  return SealLocked(stage.get(), sealed);
}

Status Stager::TrySeal(uint64_t id, Sealed* sealed, bool* done) {
  *done = false;
  auto stage = Find(id);
  if (!stage) return Status::kStale;
  std::unique_lock<std::mutex> lock(stage->mutex);
  if (stage->handle == 0) return Status::kStale;
  const bool hashed = !stage->queued && stage->hashValid && stage->hashedBytes == stage->sizeBytes;
  if (!hashed && (stage->queued || stage->sizeBytes > kSealInlineMaxBytes)) return Status::kOk;  // Seal() it
  stage->forwarding = true;
  *done = true;
  return SealLocked(stage.get(), sealed);
}

Status Stager::SealLocked(Stage* stage, Sealed* sealed) {
  if (stage->handle == 0) return Status::kStale;
  std::string hex;
  if (stage->hashValid && stage->hashedBytes == stage->sizeBytes) {
    if (stage->sha.HexDigest(&hex) != Status::kOk) return Status::kIo;
  } else {
    // Out of order: hash it all now (under the lock: nothing else may touch the bytes).
    Sha256 whole;
    const bool ok = whole.ok() && ForEachPiece(arena_->base(), stage->runs, stage->runOffsets, 0, stage->sizeBytes,
                                               [&](uint8_t* p, uint64_t n) { return whole.Update(p, n) == Status::kOk; });
    if (!ok || whole.HexDigest(&hex) != Status::kOk) return Status::kIo;
  }
  // The block leaves at capacityBytes; settle it at the file's size.
  Status s = arena_->Settle(stage->handle, stage->sizeBytes);
  if (s != Status::kOk) return s;
  sealed->handle = stage->handle;
  sealed->sizeBytes = stage->sizeBytes;
  sealed->sha256Hex = std::move(hex);
  stage->handle = 0;
  stage->runs.clear();
  stage->runOffsets.clear();
  stage->capacityBytes = 0;
  return Status::kOk;
}

void Stager::Drop(uint64_t id) {
  std::shared_ptr<Stage> stage;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = stages_.find(id);
    if (it == stages_.end()) return;
    stage = it->second;
    stages_.erase(it);
    for (uint64_t fh : stage->fhs) {
      auto h = byHandle_.find(fh);
      if (h != byHandle_.end() && h->second == stage) byHandle_.erase(h);
    }
    stage->fhs.clear();
  }
  std::lock_guard<std::mutex> lock(stage->mutex);
  stage->dropped = true;
  stage->forwarding = true;
  if (!stage->queued && stage->handle != 0) {
    arena_->Free(stage->handle);
    stage->handle = 0;
  }  // else the hasher frees it when it lets go
}

}  // namespace cascade::engine

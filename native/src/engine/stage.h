// Files being written, staged natively: a FUSE WRITE lands straight in the DRAM arena (one
// copy, from the request buffer into the block's own pages) and is hashed (SHA-256) on hasher threads
// as it arrives in order, so JavaScript sees no write at all; the commit at close is one small call
// (Seal) that hands the finished, hashed arena block to the store, which names it: no second copy.
//
// The stager only takes the common case. Anything else makes the stage "forward" (sticky): its later
// writes go to the embedder (JS), which takes the bytes out (Freeze + Read) and carries on as before.
// That happens when the arena has no pages for the file, when the stage was sealed (a write after a
// commit), or when JS asked (a truncate, a read of a write handle).
//
// Out-of-order writes and holes are taken too (holes read as zeros); the hash is then computed over
// the whole content at Seal. Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../core/arena.h"
#include "../core/status.h"

namespace cascade::engine {

constexpr size_t kStagesMax = 1 << 16;         // files staged natively at once (then JS stages)
constexpr size_t kStageHandlesMax = 1 << 20;   // open write handles on them
constexpr unsigned kHashThreadsMax = 8;
// TrySeal hashes a file written out of order on the calling (JS) thread up to this size (~40 us).
constexpr uint64_t kSealInlineMaxBytes = 64 * 1024;

struct StageInfo {
  uint64_t sizeBytes = 0;
  int64_t mtimeMs = 0;
  bool dirty = false;       // written since the dirty flag was last taken
  bool forwarding = false;  // its writes go to the embedder now
};

// A sealed stage's content, as an arena block of exactly sizeBytes (settled: no surplus pages, small
// blocks in slab slots) with its SHA-256.
struct Sealed {
  uint64_t handle = 0;
  uint64_t sizeBytes = 0;
  std::string sha256Hex;
};

class Stager {
 public:
  Stager(std::shared_ptr<Arena> arena, uint64_t maxBlockBytes, unsigned hashThreads);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // A new, empty stage (an empty arena block); kNoSpace when kStagesMax are staged.
  Status Create(uint64_t* id);
  // Route WRITEs of FUSE handle fh to stage id (until DetachHandle or Drop).
  Status Attach(uint64_t fh, uint64_t id);
  void DetachHandle(uint64_t fh);
  // A FUSE WRITE. kOk: taken (reply with its size). Anything else: forward it to the embedder.
  Status Write(uint64_t fh, uint64_t offsetBytes, const uint8_t* data, uint64_t lengthBytes);

  Status Info(uint64_t id, bool takeDirty, StageInfo* info);
  // The figures of the stage handle fh writes to (its dirty flag left as it is); kStale: none.
  Status InfoOfHandle(uint64_t fh, StageInfo* info);
  // Stop taking writes (they forward from now on) and report the final size.
  Status Freeze(uint64_t id, StageInfo* info);
  // Copy bytes out (clipped at the stage's size).
  Status Read(uint64_t id, uint64_t offsetBytes, uint8_t* target, uint64_t lengthBytes, uint64_t* copiedBytes);
  // Blocks until the content is hashed, then hands it over: the stage forwards writes from now on and
  // no longer owns the block (the caller frees or names it). Runs on a worker thread.
  Status Seal(uint64_t id, Sealed* sealed);
  // Seal on the calling thread when that costs no wait: the hashers are done (or the file is small
  // enough to hash here). *done false: nothing changed; call Seal on a worker.
  Status TrySeal(uint64_t id, Sealed* sealed, bool* done);
  // Forget the stage and free its block (if it still owns one).
  void Drop(uint64_t id);

  size_t stages() const;
  uint64_t writes() const { return writes_.load(); }
  uint64_t writeBytes() const { return writeBytes_.load(); }

 private:
  struct Stage;
  std::shared_ptr<Stage> Find(uint64_t id) const;
  void Enqueue(const std::shared_ptr<Stage>& stage);  // under stage->mutex
  void HashWorker();
  Status SealLocked(Stage* stage, Sealed* sealed);  // under stage->mutex, hashers idle
  // Info and Freeze: the stage's figures, its dirty flag taken and/or its writes stopped.
  Status Report(uint64_t id, bool takeDirty, bool freeze, StageInfo* info);

  const std::shared_ptr<Arena> arena_;
  const uint64_t maxBlockBytes_;

  mutable std::mutex mutex_;  // the tables
  std::unordered_map<uint64_t, std::shared_ptr<Stage>> stages_;
  std::unordered_map<uint64_t, std::shared_ptr<Stage>> byHandle_;
  uint64_t nextId_ = 1;

  std::mutex queueMutex_;
  std::condition_variable queueReady_;
  std::deque<std::shared_ptr<Stage>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> hashers_;

  std::atomic<uint64_t> writes_{0}, writeBytes_{0};
};

}  // namespace cascade::engine

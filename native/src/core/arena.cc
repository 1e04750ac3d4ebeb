#include "arena.h"

#include "check.h"
#include "crc32c.h"
#include "io.h"
#include "record.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <system_error>
#include <thread>
#include <cassert>
#include <cstdlib>
#include <cstdio>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace cascade {

namespace {

std::string Errno(const char* what) {
  return std::string(what) + ": " + strerror(errno);
}

// FillFromFile reads and hashes in pieces of this size: small enough to stay in cache between the
// read and the hash, and that the hash of the last piece (what is left once the device is done) is
// short; large enough that a syscall per piece costs nothing. (1 MiB left ~0.6 ms of hashing after
// the last byte arrived.)
constexpr uint64_t kFillChunkBytes = 256 * 1024;
// Blocks at least this large are copied on a thread of their own while this one hashes (a thread costs
// tens of microseconds to start; below this size the device, not the hash, set the time here).
constexpr uint64_t kParallelFillMinBytes = 32 << 20;
// ... and from this size when the record has a piece table: readers are served as the copy checks
// pieces, so the hash must not hold the copy back (cold 2 MiB loads read 5-10% sooner so, here).
constexpr uint64_t kStreamedParallelFillMinBytes = 1 << 20;
// How much is kept requested from the device ahead of the piece being read, in requests of what size.
// Under 32 MiB: 1 MiB in 256 KiB requests. From 32 MiB: 8 MiB in 1 MiB requests, to keep up with a
// device faster than the hash. (Measured on 64 MiB cold blocks: 62 ms
// median with 8 MiB ahead, 78 ms for one thread with 1 MiB ahead; 4 MiB blocks read 10% faster with
// the small window.)
constexpr uint64_t kFillAheadBytes = 1 << 20;
constexpr uint64_t kFillAdviseBytes = 256 * 1024;
constexpr uint64_t kParallelFillAheadBytes = 8 << 20;
constexpr uint64_t kParallelFillAdviseBytes = 1 << 20;
static_assert(kFillAdviseBytes >= kFillChunkBytes && kFillAheadBytes >= kFillAdviseBytes, "a window holds its requests");
static_assert(kParallelFillAdviseBytes >= kFillChunkBytes && kParallelFillAheadBytes >= kParallelFillAdviseBytes, "a window holds its requests");

// Copies a block's bytes from a file into its runs in the arena, piece by piece, keeping a window
// requested from the device ahead of the piece it reads. The hash follows either on the same thread
// (RunHashing) or on another (Run here, HashBehind there).
class FillCopier {
 public:
  // windowBytes kept requested ahead, in requests of adviseBytes; aheadBytes past the block's end.
  // With a piece table (pieceShift != 0), every piece is checked against its CRC-32C as it lands and
  // published (checked: the block's first bytes up to there) before the next is read.
  FillCopier(uint8_t* base, const std::vector<Extent>& runs, uint64_t sizeBytes, int fd, uint64_t fileOffsetBytes, uint64_t aheadBytes,
             uint64_t windowBytes, uint64_t adviseBytes, const PieceTable* table, std::function<void(uint64_t)> checked)
      : base_(base), runs_(runs), sizeBytes_(sizeBytes), fd_(fd), offsetBytes_(fileOffsetBytes), aheadBytes_(aheadBytes),
        endBytes_(fileOffsetBytes + sizeBytes), windowBytes_(windowBytes), adviseBytes_(adviseBytes), advisedBytes_(fileOffsetBytes),
        table_(table != nullptr && table->pieceShift != 0 ? table : nullptr), checked_(std::move(checked)) {}

  // Copies everything, publishing how far it got after each piece; stops at the first error, or once
  // the hasher has given up.
  void Run() {
    Copy([this](const uint8_t*, uint64_t n) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        copiedBytes_ += n;
      }
      cv_.notify_one();
      return !stop_.load(std::memory_order_relaxed);
    });
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_one();
  }

  // Hashes what Run copies, as it is copied: kOk once all of it is hashed, kIo when Run failed (its
  // error) or the hash did.
  Status HashBehind(Sha256* hasher) {
    uint64_t hashed = 0, runStart = 0, inRun = 0;
    size_t run = 0;
    for (;;) {
      uint64_t copied;
      bool done;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return copiedBytes_ > hashed || done_; });
        copied = copiedBytes_;
        done = done_;
      }
      while (hashed < copied) {
        Check(run < runs_.size(), "a fill copies no more than its runs hold");
        const uint64_t runBytes = std::min(runs_[run].lengthBytes, sizeBytes_ - runStart);
        const uint64_t take = std::min(copied - hashed, runBytes - inRun);
        if (hasher->Update(base_ + runs_[run].arenaOffsetBytes + inRun, take) != Status::kOk) {
          stop_.store(true, std::memory_order_relaxed);
          return Status::kIo;
        }
        hashed += take;
        inRun += take;
        if (inRun == runBytes) {
          runStart += runBytes;
          inRun = 0;
          run++;
        }
      }
      if (done && hashed == copied) return hashed == sizeBytes_ ? Status::kOk : status_ != Status::kOk ? status_ : Status::kIo;
    }
  }

  // Run and hash on this thread, each piece right after it is copied.
  Status RunHashing(Sha256* hasher) {
    bool hashed = true;
    Copy([&](const uint8_t* at, uint64_t n) { return hashed = hasher->Update(at, n) == Status::kOk; });
    return status_ != Status::kOk ? status_ : !hashed ? Status::kIo : Status::kOk;
  }

  const std::string& error() const { return error_; }

 private:
  // Request [advised, to) from the device (never a length of 0, which means "to the end of the file");
  // once the block's own bytes are all requested, aheadBytes after them, behind them in the queue.
  void AdviseTo(uint64_t to) {
    if (to <= advisedBytes_) return;
    (void)posix_fadvise(fd_, static_cast<off_t>(advisedBytes_), static_cast<off_t>(to - advisedBytes_), POSIX_FADV_WILLNEED);
    advisedBytes_ = to;
    if (advisedBytes_ == endBytes_ && aheadBytes_ > 0) {
      (void)posix_fadvise(fd_, static_cast<off_t>(endBytes_), static_cast<off_t>(aheadBytes_), POSIX_FADV_WILLNEED);
    }
  }

  // onPiece(at, n) after each piece lands; false stops the copy.
  template <class OnPiece>
  void Copy(OnPiece onPiece) {
    AdviseTo(std::min(endBytes_, offsetBytes_ + std::min<uint64_t>(windowBytes_, 1 << 20)));
    uint64_t left = sizeBytes_, pos = offsetBytes_;
    for (size_t i = 0; left > 0 && i < runs_.size(); i++) {
      uint8_t* at = base_ + runs_[i].arenaOffsetBytes;
      uint64_t runLeft = std::min(runs_[i].lengthBytes, left);
      while (runLeft > 0) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(runLeft, kFillChunkBytes));
        const ssize_t n = pread(fd_, at, want, static_cast<off_t>(pos));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          error_ = n < 0 ? std::string("pread: ") + strerror(errno) : "pread: the file ends before the block";
          status_ = Status::kIo;
          return;
        }
        while (advisedBytes_ < endBytes_ && advisedBytes_ < pos + windowBytes_) AdviseTo(std::min(endBytes_, advisedBytes_ + adviseBytes_));
        if (table_ != nullptr) CheckPieces(at, pos - offsetBytes_, static_cast<uint64_t>(n));
        if (!onPiece(at, static_cast<uint64_t>(n))) return;
        at += n;
        pos += static_cast<uint64_t>(n);
        runLeft -= static_cast<uint64_t>(n);
        left -= static_cast<uint64_t>(n);
      }
    }
    if (left > 0) {
      error_ = "the block's runs hold less than its size";
      status_ = Status::kIo;
    }
  }

  // Feeds [blockOffset, +n) to the pieces' CRC-32C and publishes each piece that passes. At the first
  // that fails it publishes no more (badPiece() says which): the SHA-256 at the end decides whether the
  // bytes or the table were wrong.
  void CheckPieces(const uint8_t* at, uint64_t blockOffset, uint64_t n) {
    if (!badPiece_.empty()) return;
    const uint32_t shift = table_->pieceShift;
    while (n > 0) {
      const uint64_t piece = blockOffset >> shift;
      const uint64_t pieceEnd = std::min(sizeBytes_, (piece + 1) << shift);
      const uint64_t take = std::min(n, pieceEnd - blockOffset);
      pieceCrc_ = Crc32c(pieceCrc_, at, static_cast<size_t>(take));
      at += take;
      blockOffset += take;
      n -= take;
      if (blockOffset < pieceEnd) continue;
      Check(piece < table_->crcs.size(), "a record's table has a CRC for each piece");
      if (pieceCrc_ != table_->crcs[piece]) {
        badPiece_ = "piece " + std::to_string(piece) + " (bytes " + std::to_string(piece << shift) + "-" + std::to_string(pieceEnd) + ") fails its CRC-32C";
        return;
      }
      pieceCrc_ = 0;
      checked_(pieceEnd);
    }
  }

 public:
  // The first piece that failed its CRC-32C (empty: none did); read once the copy is done.
  const std::string& badPiece() const { return badPiece_; }

 private:
  uint8_t* const base_;
  const std::vector<Extent>& runs_;
  const uint64_t sizeBytes_;
  const int fd_;
  const uint64_t offsetBytes_, aheadBytes_, endBytes_, windowBytes_, adviseBytes_;
  uint64_t advisedBytes_;  // the copier's own
  const PieceTable* const table_;
  const std::function<void(uint64_t)> checked_;
  uint32_t pieceCrc_ = 0;  // of the piece being read, so far
  std::string badPiece_;
  Status status_ = Status::kOk;  // the copier's; read after it is done (joined)
  std::string error_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t copiedBytes_ = 0;  // under mutex_
  bool done_ = false;         // under mutex_
};

// Reserve every page of the arena now, so a tmpfs too small fails here (never SIGBUS on a later
// write). The reservation is fallocate: 0.7 s for 2 GiB on this project's VM, against 2.6-5.1 s for
// MADV_POPULATE_WRITE, which also fills the page tables; that part runs on a background thread once
// the arena is open (StartPrefault). Where fallocate is not offered, populate now (*populated).
Status ReserveMemory(int fd, uint8_t* base, uint64_t bytes, bool* populated, std::string* error) {
  if (fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return Status::kOk;
  const int e = errno;
  if (e == ENOSPC) {
    *error = Errno("arena: reserving its memory (is the tmpfs big enough?)");
    return Status::kNoSpace;
  }
  if (e != EOPNOTSUPP && e != ENOSYS) {
    *error = Errno("arena: fallocate");
    return Status::kIo;
  }
  *populated = true;
  if (madvise(base, bytes, MADV_POPULATE_WRITE) == 0) return Status::kOk;
  if (errno != EINVAL) {
    *error = Errno("arena: prefault (is the tmpfs big enough?)");
    return Status::kNoSpace;
  }
  // Before 5.14: touch one byte per OS page (nothing else uses the arena yet).
  auto* p = reinterpret_cast<volatile uint8_t*>(base);
  for (uint64_t off = 0; off < bytes; off += kOsPageBytes) p[off] = 0;
  return Status::kOk;
}

}  // namespace

uint64_t Arena::MakeHandle(uint32_t generation, uint32_t slotIndex) {
  return (uint64_t{generation} << kHandleSlotBits) | (uint64_t{slotIndex} + 1);
}

Status Arena::Open(const ArenaConfig& config, Arena** out, std::string* error) {
  *out = nullptr;
  if (config.fd < 0) {
    *error = "arena: fd must be an open file descriptor";
    return Status::kInvalid;
  }
  if (config.pageBytes == 0 || config.pageBytes % kOsPageBytes != 0) {
    *error = "arena: pageBytes must be a positive multiple of 4096";
    return Status::kInvalid;
  }
  const uint64_t pages = config.capacityBytes / config.pageBytes;
  const uint64_t bytes = pages * config.pageBytes;
  if (pages == 0) {
    *error = "arena: capacityBytes must hold at least one page";
    return Status::kInvalid;
  }
  const int fd = fcntl(config.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    *error = Errno("arena: dup");
    return Status::kIo;
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = Errno("arena: ftruncate");
    close(fd);
    return errno == ENOSPC || errno == EFBIG ? Status::kNoSpace : Status::kIo;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *error = Errno("arena: mmap");
    close(fd);
    return Status::kIo;
  }
  bool populated = false;
  if (config.prefault) {
    const Status reserved = ReserveMemory(fd, static_cast<uint8_t*>(base), bytes, &populated, error);
    if (reserved != Status::kOk) {
      munmap(base, bytes);
      close(fd);
      return reserved;
    }
  }
  *out = new Arena(fd, static_cast<uint8_t*>(base), bytes, config.pageBytes);
  if (populated) {
    (*out)->prefaultedBytes_.store(bytes, std::memory_order_relaxed);
  } else if (config.prefault) {
    (*out)->StartPrefault();
  }
  return Status::kOk;
}

void Arena::StartPrefault() {
  prefaultThread_ = std::thread([this] {
    // In steps, so the destructor need not wait for the whole arena. Filling page tables changes no
    // byte, so it runs beside writes into the same pages. Pages already mapped cost little.
    // Small steps: each holds the process's mmap lock for its whole range, and every mmap/munmap of
    // V8's heap waits behind it (stalling JS's page faults meanwhile). With 64 MiB steps a 6 GiB
    // mount took 11.7-15.8 s, its GC 42% of the time; with 2 MiB steps 2.4-3.1 s.
    constexpr uint64_t kStepBytes = 2ull << 20;
    for (uint64_t off = 0; off < capacityBytes_ && !stopPrefault_.load(std::memory_order_relaxed); off += kStepBytes) {
      const uint64_t n = std::min(kStepBytes, capacityBytes_ - off);
      if (madvise(base_ + off, n, MADV_POPULATE_WRITE) != 0) return;  // before 5.14: faults on first touch instead
      prefaultedBytes_.fetch_add(n, std::memory_order_relaxed);
    }
  });
}

Arena::Arena(int fd, uint8_t* base, uint64_t capacityBytes, uint64_t pageBytes)
    : fd_(fd), base_(base), capacityBytes_(capacityBytes), pageBytes_(pageBytes), totalPages_(capacityBytes / pageBytes) {
  freeByStart_[0] = totalPages_;
  freeBySize_.insert({totalPages_, 0});
  freePages_ = totalPages_;
  uint32_t classes = 0;
  while (SlabSlotBytes(classes + 1) * 2 <= pageBytes_) classes++;
  slabsWithRoom_.resize(classes);
}

bool Arena::Fits(uint64_t sizeBytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (freeSlots_.empty() && slots_.size() >= kArenaSlotsMax) return false;
  const uint32_t c = SlabClassFor(sizeBytes);
  if (c != 0 && !slabsWithRoom_[c - 1].empty()) return true;
  const uint64_t pages = c != 0 ? 1 : (sizeBytes + pageBytes_ - 1) / pageBytes_;
  return pages <= freePages_;
}

uint32_t Arena::SlabClassFor(uint64_t sizeBytes) const {
  if (sizeBytes == 0) return 0;
  for (uint32_t c = 1; c <= slabsWithRoom_.size(); c++) {
    if (sizeBytes <= SlabSlotBytes(c)) return c;
  }
  return 0;
}

bool Arena::TakeSlabSlot(uint32_t slabClass, Extent* run) {
  std::set<uint64_t>& room = slabsWithRoom_[slabClass - 1];
  const uint64_t slotBytes = SlabSlotBytes(slabClass);
  if (room.empty()) {
    std::vector<Extent> page;
    if (!TakePages(1, &page)) return false;
    const uint64_t index = page[0].arenaOffsetBytes / pageBytes_;
    Slab slab{slabClass, 0, {}};
    const uint32_t count = static_cast<uint32_t>(pageBytes_ / slotBytes);
    for (uint32_t i = count; i > 0; i--) slab.freeSlots.push_back(i - 1);
    slabs_.emplace(index, std::move(slab));
    room.insert(index);
  }
  const uint64_t index = *room.begin();
  Slab& slab = slabs_.at(index);
  Check(slab.slabClass == slabClass && !slab.freeSlots.empty(), "a slab with room has a free slot of its class");
  const uint32_t slot = slab.freeSlots.back();
  slab.freeSlots.pop_back();
  slab.used++;
  if (slab.freeSlots.empty()) room.erase(index);
  *run = {index * pageBytes_ + slot * slotBytes, slotBytes};
  return true;
}

void Arena::ReturnSlabSlot(const Extent& run) {
  const uint64_t index = run.arenaOffsetBytes / pageBytes_;
  auto it = slabs_.find(index);
  Check(it != slabs_.end(), "a slab slot lies in a slab page");
  Slab& slab = it->second;
  const uint64_t slotBytes = SlabSlotBytes(slab.slabClass);
  Check(run.lengthBytes == slotBytes && slab.used > 0, "a freed slot matches its slab");
  const uint32_t slot = static_cast<uint32_t>((run.arenaOffsetBytes - index * pageBytes_) / slotBytes);
  slab.freeSlots.push_back(slot);
  slab.used--;
  std::set<uint64_t>& room = slabsWithRoom_[slab.slabClass - 1];
  if (slab.used == 0) {
    room.erase(index);
    slabs_.erase(it);
    ReturnRun(index, 1);  // an empty slab page goes back to the free pages
  } else {
    room.insert(index);
  }
}

Arena::~Arena() {
  stopPrefault_.store(true, std::memory_order_relaxed);
  if (prefaultThread_.joinable()) prefaultThread_.join();
  // The binding only destroys an arena with no copies in flight (it waits for its workers).
  munmap(base_, capacityBytes_);
  close(fd_);
}

bool Arena::TakePages(uint64_t pageCount, std::vector<Extent>* runs) {
  if (pageCount == 0) return true;
  if (pageCount > freePages_) return false;
  // Best fit in one run when possible: keeps large runs for large blocks.
  auto fit = freeBySize_.lower_bound({pageCount, 0});
  if (fit != freeBySize_.end()) {
    const uint64_t length = fit->first, start = fit->second;
    freeBySize_.erase(fit);
    freeByStart_.erase(start);
    if (length > pageCount) {
      freeByStart_[start + pageCount] = length - pageCount;
      freeBySize_.insert({length - pageCount, start + pageCount});
    }
    freePages_ -= pageCount;
    runs->push_back({start * pageBytes_, pageCount * pageBytes_});
    return true;
  }
  // Otherwise the largest runs first, so the block has as few pieces as possible.
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // (start, length) in pages
  uint64_t remaining = pageCount;
  for (auto it = freeBySize_.rbegin(); it != freeBySize_.rend() && remaining > 0; ++it) {
    if (taken.size() >= kExtentsPerBlockMax) return false;
    const uint64_t n = std::min(it->first, remaining);
    taken.push_back({it->second, n});
    remaining -= n;
  }
  Check(remaining == 0, "free page count covers the request");
  for (const auto& [start, n] : taken) {
    const uint64_t length = freeByStart_.at(start);
    freeBySize_.erase({length, start});
    freeByStart_.erase(start);
    if (length > n) {
      freeByStart_[start + n] = length - n;
      freeBySize_.insert({length - n, start + n});
    }
  }
  freePages_ -= pageCount;
  // Arena order makes a whole-block read walk memory forwards.
  std::sort(taken.begin(), taken.end());
  for (const auto& [start, n] : taken) runs->push_back({start * pageBytes_, n * pageBytes_});
  return true;
}

void Arena::ReturnRun(uint64_t startPage, uint64_t pageCount) {
  if (pageCount == 0) return;
  Check(startPage + pageCount <= totalPages_, "freed run lies in the arena");
  auto next = freeByStart_.lower_bound(startPage);
  Check(next == freeByStart_.end() || startPage + pageCount <= next->first, "freed run overlaps free space (double free)");
  uint64_t start = startPage, length = pageCount;
  if (next != freeByStart_.begin()) {
    auto prev = std::prev(next);
    Check(prev->first + prev->second <= startPage, "freed run overlaps free space (double free)");
    if (prev->first + prev->second == startPage) {
      start = prev->first;
      length += prev->second;
      freeBySize_.erase({prev->second, prev->first});
      freeByStart_.erase(prev);
    }
  }
  if (next != freeByStart_.end() && next->first == startPage + pageCount) {
    length += next->second;
    freeBySize_.erase({next->second, next->first});
    freeByStart_.erase(next);
  }
  freeByStart_[start] = length;
  freeBySize_.insert({length, start});
  freePages_ += pageCount;
}

Status Arena::Allocate(uint64_t sizeBytes, uint64_t* handle) {
  if (sizeBytes > capacityBytes_) {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.noSpaceFailures++;
    return Status::kNoSpace;
  }
  const uint32_t slabClass = SlabClassFor(sizeBytes);
  const uint64_t pageCount = slabClass != 0 ? 0 : (sizeBytes + pageBytes_ - 1) / pageBytes_;
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  if (!freeSlots_.empty()) {
    index = freeSlots_.back();
  } else {
    if (slots_.size() >= kArenaSlotsMax) {
      counters_.noSpaceFailures++;
      return Status::kNoSpace;
    }
    index = static_cast<uint32_t>(slots_.size());
  }
  std::vector<Extent> runs;
  if (slabClass != 0) {
    Extent run;
    if (!TakeSlabSlot(slabClass, &run)) {
      counters_.noSpaceFailures++;
      return Status::kNoSpace;
    }
    runs.push_back(run);
  } else if (!TakePages(pageCount, &runs)) {
    counters_.noSpaceFailures++;
    return Status::kNoSpace;
  }
  if (index == slots_.size()) {
    slots_.emplace_back();
  } else {
    freeSlots_.pop_back();
  }
  Slot& slot = slots_[index];
  Check(!slot.live && slot.copiesInFlight == 0 && !slot.releasePending, "a free slot is idle");
  slot.live = true;
  slot.fill = kFillNone;
  slot.verifiedBytes = 0;
  DropOffered(slot);
  slot.sizeBytes = sizeBytes;
  slot.runs = std::move(runs);
  slot.blockOffsets.clear();
  uint64_t at = 0;
  for (const Extent& e : slot.runs) {
    slot.blockOffsets.push_back(at);
    at += e.lengthBytes;
  }
  Check(slabClass != 0 ? at == SlabSlotBytes(slabClass) : at == pageCount * pageBytes_, "runs cover the block's pages");
  slot.slabClass = slabClass;
  blockBytes_ += sizeBytes;
  slotBytes_ += at;
  counters_.allocations++;
  *handle = MakeHandle(slot.generation, index);
  return Status::kOk;
}

Status Arena::Lookup(uint64_t handle, uint32_t* slotIndex) {
  const uint64_t slotField = handle & ((uint64_t{1} << kHandleSlotBits) - 1);
  const uint64_t generation = handle >> kHandleSlotBits;
  if (slotField == 0 || slotField > slots_.size() || generation > kGenerationMax) {
    counters_.staleRejects++;
    return Status::kStale;
  }
  const Slot& slot = slots_[slotField - 1];
  if (!slot.live || slot.generation != generation) {
    counters_.staleRejects++;
    return Status::kStale;
  }
  *slotIndex = static_cast<uint32_t>(slotField - 1);
  return Status::kOk;
}

void Arena::ReleasePages(uint32_t slotIndex) {
  Slot& slot = slots_[slotIndex];
  uint64_t footprint = 0;
  for (const Extent& e : slot.runs) {
    footprint += e.lengthBytes;
    if (slot.slabClass != 0) ReturnSlabSlot(e);
    else ReturnRun(e.arenaOffsetBytes / pageBytes_, e.lengthBytes / pageBytes_);
  }
  Check(blockBytes_ >= slot.sizeBytes && slotBytes_ >= footprint, "byte counts balance");
  blockBytes_ -= slot.sizeBytes;
  slotBytes_ -= footprint;
  slot.slabClass = 0;
  slot.runs.clear();
  slot.blockOffsets.clear();
  slot.sizeBytes = 0;
  slot.releasePending = false;
  freeSlots_.push_back(slotIndex);
}

Status Arena::Free(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  Slot& slot = slots_[index];
  DropName(index);
  DropOffered(slot);
  slot.live = false;
  // A new generation now: the freed handle is stale at once, even while its pages are still read.
  slot.generation = slot.generation == kGenerationMax ? 1 : slot.generation + 1;
  counters_.frees++;
  fillCv_.notify_all();  // readers waiting on its fill see it gone (a lost wakeup costs only their timeout)
  if (slot.copiesInFlight > 0) {
    slot.releasePending = true;
    counters_.deferredFrees++;
  } else {
    ReleasePages(index);
  }
  return Status::kOk;
}

Status Arena::Grow(uint64_t handle, uint64_t sizeBytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  Slot& slot = slots_[index];
  if (slot.slabClass != 0 || slot.copiesInFlight != 0) return Status::kInvalid;
  if (sizeBytes <= slot.sizeBytes) return Status::kOk;
  if (sizeBytes > capacityBytes_) {
    counters_.noSpaceFailures++;
    return Status::kNoSpace;
  }
  uint64_t held = 0;
  for (const Extent& e : slot.runs) held += e.lengthBytes;
  const uint64_t need = (sizeBytes + pageBytes_ - 1) / pageBytes_ * pageBytes_;
  if (need > held) {
    std::vector<Extent> more;
    if (slot.runs.size() >= kExtentsPerBlockMax || !TakePages((need - held) / pageBytes_, &more)) {
      counters_.noSpaceFailures++;
      return Status::kNoSpace;
    }
    uint64_t at = held;
    for (const Extent& e : more) {
      slot.runs.push_back(e);
      slot.blockOffsets.push_back(at);
      at += e.lengthBytes;
    }
    slotBytes_ += need - held;
  }
  blockBytes_ += sizeBytes - slot.sizeBytes;
  slot.sizeBytes = sizeBytes;
  DropOffered(slot);
  return Status::kOk;
}

Status Arena::Settle(uint64_t handle, uint64_t sizeBytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  Slot& slot = slots_[index];
  if (slot.slabClass != 0 || slot.copiesInFlight != 0 || sizeBytes > slot.sizeBytes) return Status::kInvalid;
  uint64_t held = 0;
  for (const Extent& e : slot.runs) held += e.lengthBytes;
  const uint32_t slabClass = SlabClassFor(sizeBytes);
  Extent small;
  if (slabClass != 0 && TakeSlabSlot(slabClass, &small)) {
    // Small: into a slab slot (a copy of under half a page), the pages go back.
    memcpy(base_ + small.arenaOffsetBytes, base_ + slot.runs[0].arenaOffsetBytes, sizeBytes);
    for (const Extent& e : slot.runs) ReturnRun(e.arenaOffsetBytes / pageBytes_, e.lengthBytes / pageBytes_);
    slot.runs.assign(1, small);
    slot.blockOffsets.assign(1, 0);
    slot.slabClass = slabClass;
    slotBytes_ = slotBytes_ - held + small.lengthBytes;
  } else {
    // Whole pages: the tail pages past the last byte go back (a 0-byte block keeps none).
    const uint64_t keep = (sizeBytes + pageBytes_ - 1) / pageBytes_ * pageBytes_;
    uint64_t at = 0;
    size_t i = 0;
    for (; i < slot.runs.size() && at < keep; i++) {
      Extent& e = slot.runs[i];
      if (at + e.lengthBytes > keep) {
        const uint64_t cut = at + e.lengthBytes - keep;
        ReturnRun((e.arenaOffsetBytes + e.lengthBytes - cut) / pageBytes_, cut / pageBytes_);
        e.lengthBytes -= cut;
      }
      at += e.lengthBytes;
    }
    for (size_t j = i; j < slot.runs.size(); j++) ReturnRun(slot.runs[j].arenaOffsetBytes / pageBytes_, slot.runs[j].lengthBytes / pageBytes_);
    slot.runs.resize(i);
    slot.blockOffsets.resize(i);
    slotBytes_ = slotBytes_ - held + keep;
  }
  blockBytes_ = blockBytes_ - slot.sizeBytes + sizeBytes;
  slot.sizeBytes = sizeBytes;
  DropOffered(slot);
  return Status::kOk;
}

Status Arena::BeginCopy(uint64_t handle, Slot** out) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  Slot& slot = slots_[index];
  slot.copiesInFlight++;
  counters_.copiesInFlight++;
  *out = &slot;
  return Status::kOk;
}

void Arena::EndCopy(Slot* slot, uint32_t slotIndex) {
  std::lock_guard<std::mutex> lock(mutex_);
  Check(slot->copiesInFlight > 0 && counters_.copiesInFlight > 0, "copy counts balance");
  slot->copiesInFlight--;
  counters_.copiesInFlight--;
  if (slot->copiesInFlight == 0 && slot->releasePending) ReleasePages(slotIndex);
}

Status Arena::Write(uint64_t handle, uint64_t offsetBytes, const uint8_t* source, uint64_t lengthBytes) {
  Slot* slot;
  Status s = BeginCopy(handle, &slot);
  if (s != Status::kOk) return s;
  const uint32_t index = static_cast<uint32_t>((handle & ((uint64_t{1} << kHandleSlotBits) - 1)) - 1);
  // The runs of a slot with a copy in flight never change (Free defers), so they are read unlocked.
  if (offsetBytes > slot->sizeBytes || lengthBytes > slot->sizeBytes - offsetBytes) {
    EndCopy(slot, index);
    return Status::kRange;
  }
  uint64_t done = 0;
  auto it = std::upper_bound(slot->blockOffsets.begin(), slot->blockOffsets.end(), offsetBytes);
  for (size_t i = static_cast<size_t>(it - slot->blockOffsets.begin()) - 1; done < lengthBytes; i++) {
    Check(i < slot->runs.size(), "runs cover the write");
    const uint64_t within = offsetBytes + done - slot->blockOffsets[i];
    const uint64_t n = std::min(slot->runs[i].lengthBytes - within, lengthBytes - done);
    memcpy(base_ + slot->runs[i].arenaOffsetBytes + within, source + done, n);
    done += n;
  }
  EndCopy(slot, index);
  return Status::kOk;
}

Status Arena::Read(uint64_t handle, uint64_t offsetBytes, uint8_t* target, uint64_t lengthBytes, uint64_t* copiedBytes) {
  *copiedBytes = 0;
  Slot* slot;
  Status s = BeginCopy(handle, &slot);
  if (s != Status::kOk) return s;
  const uint32_t index = static_cast<uint32_t>((handle & ((uint64_t{1} << kHandleSlotBits) - 1)) - 1);
  if (offsetBytes >= slot->sizeBytes) {
    EndCopy(slot, index);
    return Status::kOk;
  }
  const uint64_t want = std::min(lengthBytes, slot->sizeBytes - offsetBytes);
  uint64_t done = 0;
  auto it = std::upper_bound(slot->blockOffsets.begin(), slot->blockOffsets.end(), offsetBytes);
  for (size_t i = static_cast<size_t>(it - slot->blockOffsets.begin()) - 1; done < want; i++) {
    Check(i < slot->runs.size(), "runs cover the read");
    const uint64_t within = offsetBytes + done - slot->blockOffsets[i];
    const uint64_t n = std::min(slot->runs[i].lengthBytes - within, want - done);
    memcpy(target + done, base_ + slot->runs[i].arenaOffsetBytes + within, n);
    done += n;
  }
  EndCopy(slot, index);
  *copiedBytes = want;
  return Status::kOk;
}

Status Arena::Describe(uint64_t handle, uint64_t* sizeBytes, std::vector<Extent>* extents) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  *sizeBytes = slots_[index].sizeBytes;
  TrimmedExtents(slots_[index], extents);
  return Status::kOk;
}

void Arena::TrimmedExtents(const Slot& slot, std::vector<Extent>* extents) {
  extents->clear();
  uint64_t left = slot.sizeBytes;
  for (const Extent& e : slot.runs) {
    if (left == 0) break;
    const uint64_t n = std::min(e.lengthBytes, left);  // the last run's tail pages hold no block bytes
    extents->push_back({e.arenaOffsetBytes, n});
    left -= n;
  }
}

std::vector<uint32_t> PieceCrcs(const uint8_t* base, const std::vector<Extent>& extents, uint64_t sizeBytes, uint32_t pieceShift) {
  std::vector<uint32_t> crcs;
  if (pieceShift == 0) return crcs;
  const uint64_t pieceBytes = uint64_t{1} << pieceShift;
  crcs.reserve((sizeBytes + pieceBytes - 1) >> pieceShift);
  uint32_t crc = 0;
  uint64_t inPiece = 0, total = 0;
  for (const Extent& e : extents) {
    for (uint64_t at = 0; at < e.lengthBytes && total < sizeBytes;) {
      const uint64_t n = std::min({e.lengthBytes - at, pieceBytes - inPiece, sizeBytes - total});
      crc = Crc32c(crc, base + e.arenaOffsetBytes + at, n);
      at += n;
      inPiece += n;
      total += n;
      if (inPiece == pieceBytes) {
        crcs.push_back(crc);
        crc = 0;
        inPiece = 0;
      }
    }
  }
  if (inPiece > 0) crcs.push_back(crc);
  return crcs;
}

void Arena::DropName(uint32_t slotIndex) {
  Slot& slot = slots_[slotIndex];
  slot.pieceShift = 0;
  slot.pieceCrcs.clear();
  if (slot.name.empty()) return;
  auto it = names_.find(slot.name);
  if (it != names_.end() && it->second == slotIndex) names_.erase(it);
  slot.name.clear();
}

Status Arena::Name(uint64_t handle, const uint8_t* name) {
  ArenaHold hold;
  uint32_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t index;
    Status s = Lookup(handle, &index);
    if (s != Status::kOk) return s;
    std::string key(reinterpret_cast<const char*>(name), kContentNameBytes);
    auto it = names_.find(key);
    if (it != names_.end() && it->second != index) slots_[it->second].name.clear();
    DropName(index);
    slots_[index].name = key;
    names_[key] = index;
    Slot& named = slots_[index];
    const uint32_t offeredShift = named.offeredShift;
    std::vector<uint32_t> offered = std::move(named.offeredCrcs);
    DropOffered(named);
    const uint32_t shift = PieceShiftFor(named.sizeBytes);
    if (!pieceTables_.load(std::memory_order_relaxed) || shift == 0) return Status::kOk;
    if (offeredShift == shift && offered.size() == ((named.sizeBytes + (uint64_t{1} << shift) - 1) >> shift)) {
      named.pieceShift = shift;
      named.pieceCrcs = std::move(offered);
      return Status::kOk;
    }
    generation = named.generation;
    TakeHold(index, &hold);  // the pages stay while the table is taken outside the lock
  }
  const uint32_t shift = PieceShiftFor(hold.sizeBytes);
  std::vector<uint32_t> crcs = PieceCrcs(base_, hold.extents, hold.sizeBytes, shift);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& slot = slots_[hold.slotIndex];
    if (slot.live && slot.generation == generation && !slot.name.empty()) {
      slot.pieceShift = shift;
      slot.pieceCrcs = std::move(crcs);
    }
  }
  Unhold(hold);
  return Status::kOk;
}

Status Arena::OfferPieceTable(uint64_t handle, uint32_t pieceShift, std::vector<uint32_t> crcs) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  OfferLocked(slots_[index], pieceShift, std::move(crcs));
  return Status::kOk;
}

void Arena::OfferLocked(Slot& slot, uint32_t pieceShift, std::vector<uint32_t> crcs) {
  slot.offeredShift = pieceShift;
  slot.offeredCrcs = std::move(crcs);
}

void Arena::DropOffered(Slot& slot) {
  slot.offeredShift = 0;
  slot.offeredCrcs.clear();
}

Status Arena::HoldNamed(const uint8_t* name, uint64_t sizeBytes, ArenaHold* hold) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = names_.find(std::string(reinterpret_cast<const char*>(name), kContentNameBytes));
  if (it == names_.end()) return Status::kStale;
  Check(slots_[it->second].live, "a named slot is live");
  if (slots_[it->second].sizeBytes != sizeBytes) return Status::kStale;
  TakeHold(it->second, hold);
  return Status::kOk;
}

void Arena::TakeHold(uint32_t index, ArenaHold* hold) {
  Slot& slot = slots_[index];
  slot.copiesInFlight++;
  counters_.copiesInFlight++;
  counters_.holdsActive++;
  hold->slotIndex = index;
  hold->sizeBytes = slot.sizeBytes;
  TrimmedExtents(slot, &hold->extents);
  hold->pieceShift = slot.pieceShift;
  hold->pieceCrcs = slot.pieceCrcs;
}

Status Arena::Keep(uint64_t handle, ArenaHold* hold) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  TakeHold(index, hold);
  return Status::kOk;
}

void Arena::Unhold(const ArenaHold& hold) {
  std::lock_guard<std::mutex> lock(mutex_);
  Check(hold.slotIndex < slots_.size() && counters_.holdsActive > 0, "an unhold matches a hold");
  Slot& slot = slots_[hold.slotIndex];
  Check(slot.copiesInFlight > 0 && counters_.copiesInFlight > 0, "copy counts balance");
  slot.copiesInFlight--;
  counters_.copiesInFlight--;
  counters_.holdsActive--;
  if (slot.copiesInFlight == 0 && slot.releasePending) ReleasePages(hold.slotIndex);
}

Status Arena::Hash(uint64_t handle, std::string* hex) {
  Slot* slot;
  Status s = BeginCopy(handle, &slot);
  if (s != Status::kOk) return s;
  const uint32_t index = static_cast<uint32_t>((handle & ((uint64_t{1} << kHandleSlotBits) - 1)) - 1);
  Sha256 hasher;
  uint64_t left = slot->sizeBytes;
  for (size_t i = 0; s == Status::kOk && left > 0 && i < slot->runs.size(); i++) {
    const uint64_t n = std::min(slot->runs[i].lengthBytes, left);
    s = hasher.Update(base_ + slot->runs[i].arenaOffsetBytes, n);
    left -= n;
  }
  if (s == Status::kOk) s = hasher.ok() ? hasher.HexDigest(hex) : Status::kIo;
  EndCopy(slot, index);
  return s;
}

Status Arena::FillFromFile(uint64_t handle, int fd, uint64_t fileOffsetBytes, uint64_t aheadBytes, std::string* hex, std::string* error) {
  if (aheadBytes > kFillAheadMaxBytes) return Status::kInvalid;
  Slot* slot;
  Status s = BeginCopy(handle, &slot);
  if (s != Status::kOk) return s;
  const uint32_t index = static_cast<uint32_t>((handle & ((uint64_t{1} << kHandleSlotBits) - 1)) - 1);
  const uint32_t generation = static_cast<uint32_t>(handle >> kHandleSlotBits);
  SetFillState(index, generation, kFilling, 0);
  s = Fill(slot, index, generation, fd, fileOffsetBytes, aheadBytes, nullptr, nullptr, hex, error);
  EndCopy(slot, index);
  return s;
}

Status Arena::FillRecord(uint64_t handle, int fd, uint64_t recordOffsetBytes, const uint8_t* sha256, uint64_t aheadBytes, std::string* hex,
                         std::string* error) {
  if (aheadBytes > kFillAheadMaxBytes || recordOffsetBytes > UINT64_MAX - kRecordPageBytes) return Status::kInvalid;
  Slot* slot;
  Status s = BeginCopy(handle, &slot);
  if (s != Status::kOk) return s;
  const uint32_t index = static_cast<uint32_t>((handle & ((uint64_t{1} << kHandleSlotBits) - 1)) - 1);
  const uint32_t generation = static_cast<uint32_t>(handle >> kHandleSlotBits);
  SetFillState(index, generation, kFilling, 0);
  // The header page and the payload's first bytes in one request: the header is not a trip of its own.
  (void)posix_fadvise(fd, static_cast<off_t>(recordOffsetBytes), static_cast<off_t>(kRecordPageBytes + std::min<uint64_t>(slot->sizeBytes, 1 << 20)),
                      POSIX_FADV_WILLNEED);
  std::vector<uint8_t> page(kRecordPageBytes);
  uint64_t got = 0;
  PieceTable table;
  int err = 0;
  s = PreadFully(fd, page.data(), page.size(), recordOffsetBytes, &got, &err);
  if (s != Status::kOk) {
    *error = std::string("pread: ") + strerror(err);
  } else {
    std::string note;
    s = ParseRecordPage(page.data(), static_cast<size_t>(got), sha256, slot->sizeBytes, &table, &note);
    if (s != Status::kOk) *error = note;
    else if (!note.empty()) CountBadPieceTable();  // loads whole; the SHA-256 decides
  }
  if (s == Status::kOk) s = Fill(slot, index, generation, fd, recordOffsetBytes + kRecordPageBytes, aheadBytes, &table, sha256, hex, error);
  else SetFillState(index, generation, kFillFailed, 0);
  EndCopy(slot, index);
  return s;
}

Status Arena::Fill(Slot* slot, uint32_t index, uint32_t generation, int fd, uint64_t payloadOffsetBytes, uint64_t aheadBytes, const PieceTable* table,
                   const uint8_t* expectSha256, std::string* hex, std::string* error) {
  Sha256 hasher;
  Status s = Status::kIo;
  if (hasher.ok()) {
    const bool big = slot->sizeBytes >= kParallelFillMinBytes;
    const bool streamed = table != nullptr && table->pieceShift != 0;
    bool parallel = big || (streamed && slot->sizeBytes >= kStreamedParallelFillMinBytes);
    FillCopier copier(base_, slot->runs, slot->sizeBytes, fd, payloadOffsetBytes, aheadBytes, big ? kParallelFillAheadBytes : kFillAheadBytes,
                      big ? kParallelFillAdviseBytes : kFillAdviseBytes, table,
                      [this, index, generation](uint64_t checkedBytes) { SetFillState(index, generation, kFilling, checkedBytes); });
    if (parallel) {
      // Copy on a thread of its own and hash behind it here: a cold block then takes about the longer
      // of the two (device + copy, or hash) instead of their sum, which is what one thread gave, stalled
      // in pread whenever it had caught up with the device.
      try {
        std::thread reader([&copier] { copier.Run(); });
        s = copier.HashBehind(&hasher);
        reader.join();
      } catch (const std::system_error&) {
        parallel = false;  // no thread to be had: both on this one
      }
    }
    if (!parallel) s = copier.RunHashing(&hasher);
    if (s != Status::kOk) *error = copier.error().empty() ? "the hash failed" : copier.error();
    if (s == Status::kOk) s = hasher.HexDigest(hex);
    if (s == Status::kOk && expectSha256 != nullptr && *hex != ToHex(expectSha256, kContentNameBytes)) {
      *error = copier.badPiece().empty() ? "the payload fails its SHA-256" : copier.badPiece() + ", and the payload its SHA-256";
      hex->clear();
      s = Status::kCorrupt;
    } else if (s == Status::kOk && !copier.badPiece().empty()) {
      CountBadPieceTable();  // the bytes are right (their SHA-256): the table was wrong
    } else if (s == Status::kOk && streamed) {
      // Every piece passed the record's table as it landed: the Name that follows takes it.
      std::lock_guard<std::mutex> lock(mutex_);
      if (slots_[index].generation == generation) OfferLocked(slots_[index], table->pieceShift, table->crcs);
    }
  }
  // Done: with an expected SHA-256 every byte may now be read (with a table, each piece read before
  // had passed its CRC-32C). Without one (FillFromFile) the caller checks the hash: not for readers
  // gated on the fill.
  SetFillState(index, generation, s == Status::kOk ? kFillNone : kFillFailed, 0);
  return s;
}

void Arena::CountBadPieceTable() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.badPieceTables++;
}

void Arena::SetFillState(uint32_t slotIndex, uint32_t generation, uint8_t fill, uint64_t verifiedBytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& slot = slots_[slotIndex];
    if (slot.generation != generation) return;  // freed meanwhile: nobody waits on this slot any more
    slot.fill = fill;
    slot.verifiedBytes = verifiedBytes;
  }
  fillCv_.notify_all();
}

Status Arena::MarkFilling(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t index;
  Status s = Lookup(handle, &index);
  if (s != Status::kOk) return s;
  slots_[index].fill = kFilling;
  slots_[index].verifiedBytes = 0;
  return Status::kOk;
}

Status Arena::UpdateFill(uint64_t handle, const std::function<void(Slot&)>& update) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t index;
    Status s = Lookup(handle, &index);
    if (s != Status::kOk) return s;
    Slot& slot = slots_[index];
    if (slot.fill != kFilling) return Status::kInvalid;
    update(slot);
  }
  fillCv_.notify_all();
  return Status::kOk;
}

Status Arena::PublishVerified(uint64_t handle, uint64_t verifiedBytes) {
  return UpdateFill(handle, [&](Slot& slot) { slot.verifiedBytes = std::max(slot.verifiedBytes, std::min(verifiedBytes, slot.sizeBytes)); });
}

Status Arena::EndFill(uint64_t handle, bool ok) {
  return UpdateFill(handle, [&](Slot& slot) {
    slot.fill = ok ? kFillNone : kFillFailed;
    slot.verifiedBytes = ok ? slot.sizeBytes : 0;
  });
}

Status Arena::WaitFilled(uint64_t handle, uint64_t endBytes, uint64_t timeoutMs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    uint32_t index;
    Status s = Lookup(handle, &index);
    if (s != Status::kOk) return s;
    const Slot& slot = slots_[index];
    // Bytes are served once their pieces pass their CRC-32C; the whole SHA-256 gates only what is
    // kept (the caller's check at the fill's end). Strict: every read waits for that SHA-256.
    const bool crcOk = !strictVerify_.load(std::memory_order_relaxed) && slot.verifiedBytes >= endBytes;
    if (slot.fill == kFillNone || (slot.fill == kFilling && crcOk)) return Status::kOk;
    if (slot.fill == kFillFailed) return Status::kIo;
    if (fillCv_.wait_until(lock, deadline) == std::cv_status::timeout) return Status::kBusy;
  }
}

ArenaStats Arena::Stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  ArenaStats s = counters_;
  s.capacityBytes = capacityBytes_;
  s.pageBytes = pageBytes_;
  s.freeBytes = freePages_ * pageBytes_;
  s.usedBytes = capacityBytes_ - s.freeBytes;
  s.largestFreeBytes = freeBySize_.empty() ? 0 : freeBySize_.rbegin()->first * pageBytes_;
  s.freeExtents = freeByStart_.size();
  s.liveBlocks = counters_.allocations - counters_.frees;
  s.namedBlocks = names_.size();
  s.blockBytes = blockBytes_;
  s.slotBytes = slotBytes_;
  s.slabPages = slabs_.size();
  s.prefaultedBytes = prefaultedBytes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace cascade

// The DRAM tier's shared-memory arena: one file in tmpfs (/dev/shm or a private huge-page tmpfs),
// mapped MAP_SHARED, carved into fixed-size pages. A block is a list of page runs (extents), so a large
// block never needs a contiguous region and free space never needs compacting.
//
// Blocks are named by handles that carry a generation: freeing a block bumps its slot's generation,
// so a stale handle is rejected (kStale), never served another block's bytes. A free that races a copy
// in progress defers returning the pages until the copy is done, so a reader never sees reused memory.
//
// Thread safety: every method may be called from any thread. One mutex guards the tables; copies run
// outside it.
#pragma once

#include <cstddef>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "status.h"

namespace cascade {

// FillFromFile's read-ahead past the block is at most this much (the page cache is the kernel's, but
// a caller's mistake must not ask it to read a whole disk).
constexpr uint64_t kFillAheadMaxBytes = uint64_t{64} << 20;

// A handle packs (generation, slot + 1) into 53 bits so JavaScript holds it exactly as a number.
constexpr uint64_t kHandleSlotBits = 22;
constexpr uint64_t kHandleGenerationBits = 31;
constexpr uint64_t kArenaSlotsMax = (uint64_t{1} << kHandleSlotBits) - 1;  // slot + 1 fits the field
constexpr uint64_t kGenerationMax = (uint64_t{1} << kHandleGenerationBits) - 1;
static_assert(kHandleSlotBits + kHandleGenerationBits <= 53, "handles stay exact in a JS number");

// A large block in a fragmented arena may take many runs; past this an allocation fails (kNoSpace)
// rather than let one block's extent list grow without bound.
constexpr uint64_t kExtentsPerBlockMax = 65536;
constexpr uint64_t kOsPageBytes = 4096;
// Blocks up to half a page share pages: a page becomes a slab of equal slots of one size class (a
// power of two from kSlabSlotMinBytes), so a 4 KiB block takes 4 KiB, not a whole page, and no block
// takes more than twice its size (a block over half a page takes whole pages: under 2x as well).
constexpr uint64_t kSlabSlotMinBytes = 4096;

struct ArenaConfig {
  int fd = -1;                 // a tmpfs file to map; the arena dups it and owns the dup
  uint64_t capacityBytes = 0;  // rounded down to whole pages; the file is sized to it
  uint64_t pageBytes = 64 * 1024;
  bool prefault = true;        // fault every page in at open, so first touches stay off the put path
};

struct Extent {
  uint64_t arenaOffsetBytes;
  uint64_t lengthBytes;
};

struct ArenaStats {
  uint64_t capacityBytes;
  uint64_t pageBytes;
  uint64_t usedBytes;     // pages held by live blocks and by freed blocks still being read
  uint64_t freeBytes;
  uint64_t largestFreeBytes;
  uint64_t freeExtents;
  uint64_t liveBlocks;
  uint64_t allocations;
  uint64_t frees;
  uint64_t staleRejects;
  uint64_t noSpaceFailures;
  uint64_t deferredFrees;  // frees that waited for a copy in progress
  uint64_t copiesInFlight;
  uint64_t namedBlocks;    // blocks with a content name (what remote peers can hold)
  uint64_t holdsActive;    // remote holds not yet released
  uint64_t blockBytes;     // bytes of live blocks (what callers asked for)
  uint64_t slotBytes;      // bytes their slots and pages take (>= blockBytes; the rest is padding)
  uint64_t slabPages;      // pages carved into slots for small blocks
  uint64_t badPieceTables;  // record fills whose piece table was damaged or wrong while the SHA-256 held (loaded whole)
  uint64_t prefaultedBytes;  // with prefault: bytes whose page tables are filled (in the background; all at open where fallocate is not offered)
};

// A block held for a remote reader (fabric.cc): its pages are not reused until Unhold, even if the
// block is freed meanwhile (a hold counts as a copy in flight).
struct ArenaHold {
  uint32_t slotIndex = 0;
  uint64_t sizeBytes = 0;
  std::vector<Extent> extents;  // block order, trimmed to the block's bytes
  // The block's piece table (record.h's PieceShiftFor pieces) taken when it was named, where the
  // arena keeps them (SetPieceTables); empty otherwise.
  uint32_t pieceShift = 0;
  std::vector<uint32_t> pieceCrcs;
};

// CRC-32C of each (1 << pieceShift)-byte piece of a block laid out in `extents` (block order) from base.
std::vector<uint32_t> PieceCrcs(const uint8_t* base, const std::vector<Extent>& extents, uint64_t sizeBytes, uint32_t pieceShift);

constexpr uint64_t kContentNameBytes = 32;  // a raw SHA-256

class Arena {
 public:
  // Maps the file and sizes it; on failure returns a status and sets *error.
  static Status Open(const ArenaConfig& config, Arena** out, std::string* error);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Reserve room for a block of sizeBytes (0 is allowed: an empty block holds no pages).
  Status Allocate(uint64_t sizeBytes, uint64_t* handle);
  // Release a block. Later use of the handle is kStale.
  Status Free(uint64_t handle);
  // A block being written (engine/stage.h) grows in whole pages to sizeBytes (never shrinks here);
  // kNoSpace leaves it as it was. Only for whole-page blocks with no copy in flight: the caller owns
  // the block exclusively until it is named.
  Status Grow(uint64_t handle, uint64_t sizeBytes);
  // Settle a written block at its final sizeBytes (<= its size): surplus pages go back, and a block
  // small enough for a slab slot moves into one (its bytes copied), so a 4 KiB file takes 4 KiB.
  Status Settle(uint64_t handle, uint64_t sizeBytes);
  // Copy into / out of a block at offsetBytes. Write must stay inside the block (kRange otherwise);
  // Read is clipped at the block's end and reports the bytes copied.
  Status Write(uint64_t handle, uint64_t offsetBytes, const uint8_t* source, uint64_t lengthBytes);
  Status Read(uint64_t handle, uint64_t offsetBytes, uint8_t* target, uint64_t lengthBytes, uint64_t* copiedBytes);
  // The block's size and its extents in block order (byte 0 of the block is the first extent's first byte).
  Status Describe(uint64_t handle, uint64_t* sizeBytes, std::vector<Extent>* extents);

  // Give a live block its content name (raw SHA-256, kContentNameBytes), so a remote peer can hold it
  // by name. A name held by another block moves to this one. Free drops the name. With piece tables
  // on, the block's piece CRCs are taken now (its bytes were just hashed to that name) and go with
  // every hold of it, so a peer's reader checks the bytes against what they were when named.
  Status Name(uint64_t handle, const uint8_t* name);
  // The piece table every piece of this block passed as it landed (a streamed fetch or fill whose
  // pieces were checked one by one): the Name that follows takes it, and spends no pass over the bytes
  // on the thread that names it (a JS thread: about 1 ms per 8 MiB). Ignored unless its shift and
  // piece count are what Name would compute.
  Status OfferPieceTable(uint64_t handle, uint32_t pieceShift, std::vector<uint32_t> crcs);
  // Keep piece tables for named blocks (the remote tier serves them with each hold).
  void SetPieceTables(bool on) { pieceTables_.store(on, std::memory_order_relaxed); }
  // Hold the live block with this name and size for a remote read (kStale when absent or resized).
  Status HoldNamed(const uint8_t* name, uint64_t sizeBytes, ArenaHold* hold);
  // End a hold: the slot's pages return to the free list if the block was freed meanwhile.
  void Unhold(const ArenaHold& hold);
  // Count a copy in flight on a block (a remote read landing in it) so a Free defers its pages.
  Status Keep(uint64_t handle, ArenaHold* hold);
  // SHA-256 (lowercase hex) of a live block's bytes.
  Status Hash(uint64_t handle, std::string* hex);
  // Fill a live block with its size in bytes read from fd at fileOffsetBytes (a record's payload in a
  // segment file), hashing as the bytes land: one copy (page cache -> arena) instead of a buffer, a
  // copy and a hash on the JS thread. kIo on a read error or a short file (errno in *error).
  // aheadBytes (at most kFillAheadMaxBytes): once the block's own bytes are all requested, the kernel is
  // asked to read this much after them too (the next records of a segment read in order).
  Status FillFromFile(uint64_t handle, int fd, uint64_t fileOffsetBytes, uint64_t aheadBytes, std::string* hex, std::string* error);
  // As FillFromFile, for a whole disk record at recordOffsetBytes (record.h): its header page is read
  // and checked against the block (sha256: raw 32 bytes, and the slot's size) first. When the record
  // has a piece table, each piece is checked against its CRC-32C as it lands and published at once
  // (WaitFilled), before the whole SHA-256 is known; that SHA-256 is still computed and returned.
  Status FillRecord(uint64_t handle, int fd, uint64_t recordOffsetBytes, const uint8_t* sha256, uint64_t aheadBytes, std::string* hex,
                    std::string* error);
  // For readers of a block being filled: waits up to timeoutMs until its first endBytes are checked
  // (piece CRCs) or the fill is done (with SetStrictVerify, only the fill's end: the whole SHA-256).
  // kOk: those bytes may be read; kIo: the fill failed; kStale: the handle is not live (freed: a
  // failed fill's slot goes); kBusy: still not there after timeoutMs. A block not being filled is kOk
  // at once.
  Status WaitFilled(uint64_t handle, uint64_t endBytes, uint64_t timeoutMs);
  // Marks a live block as being filled (WaitFilled waits) before its fill is queued to run, so a
  // reader that comes first never sees it as complete.
  Status MarkFilling(uint64_t handle);
  // For a fill done elsewhere (a remote fetch): its first verifiedBytes passed their piece CRCs
  // (readers of them go on), and its end (ok: every byte landed and was hashed; else failed).
  Status PublishVerified(uint64_t handle, uint64_t verifiedBytes);
  Status EndFill(uint64_t handle, bool ok);
  // Strict verification: readers of a block being filled wait for its whole SHA-256 (the fill's end),
  // not for their pieces' CRCs.
  void SetStrictVerify(bool strict) { strictVerify_.store(strict, std::memory_order_relaxed); }

  // Whether Allocate(sizeBytes) would find room now.
  bool Fits(uint64_t sizeBytes);

  ArenaStats Stats();
  // The whole mapping: what RDMA registration and same-node clients need.
  uint8_t* base() const { return base_; }
  uint64_t capacityBytes() const { return capacityBytes_; }
  uint64_t pageBytes() const { return pageBytes_; }
  int fd() const { return fd_; }

 private:
  struct Slot {
    uint32_t generation = 1;
    bool live = false;          // allocated and not freed
    bool releasePending = false;  // freed while copies were in flight
    uint32_t copiesInFlight = 0;
    uint64_t sizeBytes = 0;
    // Runs in block order; blockOffsets[i] is the block offset of runs[i]'s first byte.
    std::vector<Extent> runs;
    std::vector<uint64_t> blockOffsets;
    std::string name;  // raw content name, empty when unnamed
    uint32_t slabClass = 0;  // 0: whole pages; else the size class (1-based) of its slab slot
    uint32_t pieceShift = 0;           // the piece table taken at Name (SetPieceTables), else empty
    std::vector<uint32_t> pieceCrcs;
    // A piece table its bytes passed as they landed (OfferPieceTable): Name takes it instead of
    // computing one. Dropped when the block is freed or resized.
    uint32_t offeredShift = 0;
    std::vector<uint32_t> offeredCrcs;
    uint8_t fill = kFillNone;     // a FillFromFile/FillRecord in progress, or one that failed
    uint64_t verifiedBytes = 0;   // while filling: the first bytes checked (piece CRCs)
  };
  static constexpr uint8_t kFillNone = 0, kFilling = 1, kFillFailed = 2;

  // A page carved into slots of one size class.
  struct Slab {
    uint32_t slabClass;
    uint32_t used = 0;
    std::vector<uint32_t> freeSlots;
  };

  Arena(int fd, uint8_t* base, uint64_t capacityBytes, uint64_t pageBytes);
  // With prefault: fills the page tables of the (already reserved) mapping on a thread of its own,
  // so the first write to each page takes no fault; stopped and joined by the destructor.
  void StartPrefault();

  // Under mutex_: find the live slot for a handle and count a copy in flight.
  Status BeginCopy(uint64_t handle, Slot** slot);
  void EndCopy(Slot* slot, uint32_t slotIndex);
  // The fill of a block, shared by FillFromFile and FillRecord, which mark it filling first (table:
  // null or empty for none). expectSha256 (raw, or null): a digest that differs fails the fill
  // (kCorrupt) before it is published done.
  Status Fill(Slot* slot, uint32_t slotIndex, uint32_t generation, int fd, uint64_t payloadOffsetBytes, uint64_t aheadBytes, const struct PieceTable* table,
              const uint8_t* expectSha256, std::string* hex, std::string* error);
  void SetFillState(uint32_t slotIndex, uint32_t generation, uint8_t fill, uint64_t verifiedBytes);
  void OfferLocked(Slot& slot, uint32_t pieceShift, std::vector<uint32_t> crcs);
  static void DropOffered(Slot& slot);
  // A live block being filled, changed under mutex_ (kInvalid when it is not filling); readers woken.
  Status UpdateFill(uint64_t handle, const std::function<void(Slot&)>& update);
  void CountBadPieceTable();
  Status Lookup(uint64_t handle, uint32_t* slotIndex);
  void ReleasePages(uint32_t slotIndex);
  void TrimmedExtents(const Slot& slot, std::vector<Extent>* extents);
  void DropName(uint32_t slotIndex);
  void TakeHold(uint32_t slotIndex, ArenaHold* hold);  // under mutex_
  // Size class (1-based) for a block of sizeBytes, or 0 when it takes whole pages.
  uint32_t SlabClassFor(uint64_t sizeBytes) const;
  uint64_t SlabSlotBytes(uint32_t slabClass) const { return kSlabSlotMinBytes << (slabClass - 1); }
  bool TakeSlabSlot(uint32_t slabClass, Extent* run);  // under mutex_
  void ReturnSlabSlot(const Extent& run);               // under mutex_
  bool TakePages(uint64_t pageCount, std::vector<Extent>* runs);
  void ReturnRun(uint64_t startPage, uint64_t pageCount);
  static uint64_t MakeHandle(uint32_t generation, uint32_t slotIndex);

  int fd_;
  uint8_t* base_;
  uint64_t capacityBytes_;
  uint64_t pageBytes_;
  uint64_t totalPages_;

  std::mutex mutex_;
  std::condition_variable fillCv_;  // a fill published progress, ended, or a slot was freed
  std::deque<Slot> slots_;  // a deque: growing it never moves a slot a copy is using
  std::vector<uint32_t> freeSlots_;
  // Free pages: by start (to merge neighbours) and by (length, start) (for best fit).
  std::map<uint64_t, uint64_t> freeByStart_;
  std::set<std::pair<uint64_t, uint64_t>> freeBySize_;
  uint64_t freePages_;
  std::unordered_map<std::string, uint32_t> names_;  // content name -> slot index
  std::unordered_map<uint64_t, Slab> slabs_;          // by page index
  std::vector<std::set<uint64_t>> slabsWithRoom_;     // by class - 1: pages with a free slot
  uint64_t blockBytes_ = 0, slotBytes_ = 0;
  ArenaStats counters_{};
  std::thread prefaultThread_;
  std::atomic<bool> stopPrefault_{false};
  std::atomic<bool> strictVerify_{false};
  std::atomic<bool> pieceTables_{false};
  std::atomic<uint64_t> prefaultedBytes_{0};
};

}  // namespace cascade

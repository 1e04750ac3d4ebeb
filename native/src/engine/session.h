// The native FUSE engine's core: one FUSE connection on /dev/fuse, mounted with mount(2), served by
// worker threads. It answers INIT itself (1 MiB requests: max_pages 256; passthrough where asked and
// offered), serves READs of handles whose bytes lie in the shared-memory arena straight from it with
// writev (no copy in user space, no JS), and hands every other request to the embedder (the binding
// forwards it to the TypeScript adapter, which answers with Reply()). Never includes napi.h.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../core/arena.h"
#include "../core/mapping.h"
#include "../core/status.h"
#include "fuse_kernel.h"
#include "meta.h"
#include "page_cache.h"
#include "stage.h"
#include "uring.h"

namespace cascade::engine {

// Bounds (TIGER_STYLE: everything has a limit).
constexpr unsigned kThreadsMax = 64;
// Requests of up to 16 MiB: kernels since 6.13 cap them at fs.fuse.max_pages_limit (default 256 =
// 1 MiB), which root may raise; the embedder asks for what the kernel will grant (a larger ask is
// capped by the kernel anyway, but every worker's buffer is sized from it).
constexpr unsigned kMaxPagesLimit = 4096;
constexpr unsigned kMaxPagesDefault = 256;
constexpr size_t kReadSourcesMax = 1 << 20;       // handles served natively at once
constexpr size_t kExtentsPerSourceMax = 1 << 16;  // extents of one served block
constexpr int kReplyIovMax = 1024;                // IOV_MAX
// File handles the workers hand out for opens they answer themselves start here: JS's own handles
// stay far below (fs/ numbers them from 1), so a handle names its owner.
constexpr uint64_t kNativeHandleBase = uint64_t{1} << 40;
constexpr size_t kNativeOpensMax = 1 << 20;       // opens answered natively at once
constexpr size_t kNativeDirsMax = 4096;           // directories opened natively at once (each a snapshot)
constexpr size_t kTouchedMax = 1 << 16;           // arena blocks opened natively, not yet told to JS
// Stopping interrupts the workers' blocking reads with SIGRTMIN + this (a no-op handler, no SA_RESTART;
// glibc keeps the first real-time signals below SIGRTMIN, and Node and libuv use none of these).
constexpr int kWakeSignalOffset = 7;
// A READ or WRITE of this many bytes or more takes long enough (a copy of tens of microseconds) that a
// parked worker is woken to read the next request meanwhile; smaller requests are answered by the
// worker that read them before it reads again.
constexpr uint32_t kHandOffBytes = 128 * 1024;
// Workers park after small requests only when no long request came for this long (Worker).
constexpr int64_t kQuietNs = 50'000'000;

// After answering a request of a back-to-back stream of small ones, the one reading worker polls for
// the next request this long before it blocks (Worker): a blocked worker's wakeup costs more than the
// caller's turnaround, and a VM's idle vCPU more still.
constexpr int64_t kSpinNs = 40'000;
// After handing a small request to JS, that worker polls this long before it blocks. Blocked, it left
// its vCPU idle while JS worked, and JS's answer then woke the caller there: 60-130 us between JS's
// reply and the caller's return here (perf trace), on each of a create's two trips through JS. With
// the spin, creates of 4 KiB files (one process, C): 425-532 us each against 455-588 us, interleaved
// runs; 500 us did better than 250 us, 1 ms and 2 ms in the same runs, within their noise.
constexpr int64_t kForwardSpinNs = 500'000;
// After answering an OPEN, the worker polls this long: the opener's close (RELEASE) follows once it
// read the file, from the page cache without a request (a hot 2 MiB block: 100-160 us). Blocked, the
// worker was woken for the RELEASE and the next OPEN across vCPUs.
constexpr int64_t kOpenSpinNs = 500'000;

// The steady clock in nanoseconds (the spin windows here and in the binding's JS hand-over).
inline int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct SessionOptions {
  std::string mountpoint;
  std::string fsname = "cascade";
  std::string subtype = "cascade";
  unsigned threads = 4;
  unsigned maxPages = kMaxPagesDefault;
  bool allowOther = true;
  bool passthrough = false;  // ask the kernel for FUSE passthrough (needs 7.40 and CAP_SYS_ADMIN)
  uint32_t uid = 0;
  uint32_t gid = 0;
  int arenaFd = -1;  // the DRAM arena, mapped read-only for served reads; -1: none
  // The DRAM arena itself: reads are served from its mapping (arenaFd is then unused), and writes of
  // handles the embedder attaches to a stage land in it (stage.h). Null: no native writes.
  std::shared_ptr<Arena> arena;
  uint64_t maxBlockBytes = 0;  // a staged file grows to at most this
  unsigned hashThreads = 2;
  // Native metadata (meta.h): LOOKUP, GETATTR and FORGET answered from it; null: all go to JS.
  std::shared_ptr<MetaTable> meta;
  // With meta and arena: read-only opens of cached files whose block is in the arena answered here.
  bool nativeOpens = false;
  uint32_t openFlags = FOPEN_DIRECT_IO;  // open_out flags of those opens (as JS gives its own)
  // Read-only opens of committed content read through the kernel's page cache where that is safe
  // (ReadOpenFlags); writers and everything else keep direct I/O (openFlags).
  bool pageCache = false;
  // The content each read open of a node reads is tracked (ReadOpenFlags), so that opens of one inode
  // read one content (mmap fills the page cache even under direct I/O). Implied by pageCache.
  bool trackReads = false;
  uint64_t entryValidMs = 1000;          // the kernel's cache lifetimes, as JS tells them
  uint64_t attrValidMs = 1000;
  // FUSE over io_uring (uring.h) when the kernel offers it (fuse.enable_uring); else /dev/fuse alone.
  bool uring = false;
  unsigned uringDepth = kUringDepthDefault;
};

// What INIT settled.
struct Negotiated {
  bool done = false;
  uint32_t major = 0;
  uint32_t minor = 0;
  uint32_t maxWriteBytes = 0;
  uint32_t maxPages = 0;
  uint32_t maxReadaheadBytes = 0;
  bool passthrough = false;
  bool directIoMmap = false;  // FUSE_DIRECT_IO_ALLOW_MMAP: shared mmap under direct I/O
  bool uring = false;         // requests come through io_uring queues
  std::string uringWhyNot;    // when asked for and not in use: why
};

struct SessionStats {
  uint64_t requests = 0;
  uint64_t forwarded = 0;
  uint64_t servedReads = 0;
  uint64_t servedReadBytes = 0;
  uint64_t gatedReads = 0;  // reads of a block still loading, served once their bytes were checked
  uint64_t gatedToJs = 0;   // ... and those JS answered (the load failed, or stalled past kGateWaitMs)
  uint64_t servedFlushes = 0;
  uint64_t servedWrites = 0;
  uint64_t servedWriteBytes = 0;
  uint64_t replyErrors = 0;
  uint64_t servedLookups = 0;
  // Of those, names not in a listed directory (ENOENT).
  uint64_t servedAbsentLookups = 0;
  uint64_t servedGetattrs = 0;
  uint64_t servedForgets = 0;
  uint64_t servedOpens = 0;
  uint64_t servedReleases = 0;
  // RELEASEs of JS's handles answered here before JS serves them (no answer is waited for).
  uint64_t earlyReleases = 0;
  // Read-only opens answered with the page cache (kept, or dropped first), and those given direct I/O
  // because another content of the node was open cached.
  uint64_t pageCacheOpens = 0;
  uint64_t pageCacheDirect = 0;
  uint64_t pageCacheAttrNotices = 0;  // page-cache opens that made the kernel's smaller size stale
  uint64_t readOpenConflicts = 0;     // read opens of a content other than the one open on the node
  // Directories opened, and READDIRs answered, from listings in the metadata table.
  uint64_t servedOpendirs = 0;
  uint64_t servedReaddirs = 0;
  // Spins after an answer (Worker) that found the next request, and that gave up and blocked.
  uint64_t spinHits = 0;
  uint64_t spinTimeouts = 0;
  uint64_t nativeOpensNow = 0;
  uint64_t touchedDropped = 0;  // native opens the store's recency never heard of (the list was full)
  UringStats uring;
};

// A block the arena holds for an open handle: bytes [0, sizeBytes) are the extents, in block order,
// each [arenaOffsetBytes, lengthBytes). The embedder keeps them allocated until it clears the source.
// A loading source (SetLoadingReadSource) is a block still being filled from disk: a read waits for
// its bytes (Arena::WaitFilled) and goes to the embedder if they do not come.
struct ReadSource {
  uint64_t sizeBytes = 0;
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  uint64_t gateHandle = 0;              // the arena block being filled; 0: none (all bytes are there)
  std::shared_ptr<const void> gateHold;  // keeps its pages reserved (Arena::Keep) until the source goes
};

// How long a read of a loading block waits for its bytes before JS answers it instead (a fill stalled
// on a slow device: JS then waits for the whole load, as without streaming). A worker that waits lets
// another read /dev/fuse meanwhile; an io_uring queue thread, which serves every request from its CPU,
// waits only kGateRingWaitMs.
constexpr uint64_t kGateWaitMs = 10'000;
constexpr uint64_t kGateRingWaitMs = 5;

class Session {
 public:
  // A request the engine does not answer itself: the whole message (fuse_in_header first). Returns
  // false if the embedder is shutting down (the engine then answers EIO where an answer is due).
  // Hands a request to JS; calls beforeWaiting first where it must wait for room in JS's queue.
  using Forward = std::function<bool(std::vector<uint8_t>&& request, const std::function<void()>& beforeWaiting)>;
  // Called once, on a worker, when INIT is answered (ok) or failed (not ok, with why).
  using OnInit = std::function<void(bool ok, const std::string& why)>;

  static Status Mount(const SessionOptions& options, Forward forward, OnInit onInit, std::unique_ptr<Session>* out,
                      std::string* error);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Answers request `unique`: error 0 with the payload, or a positive errno (payload ignored).
  Status Reply(uint64_t unique, int32_t error, const struct iovec* payload, int payloadCount);
  Status SetReadSource(uint64_t fh, ReadSource source);
  // Serve reads of fh from arena block `handle` while it is filled (Arena::FillRecord): each read waits
  // for its bytes to be checked. The block's pages stay reserved until the source is cleared or replaced.
  Status SetLoadingReadSource(uint64_t fh, uint64_t handle);
  void ClearReadSource(uint64_t fh);
  // A handle opened read-only: its FLUSH (sent at every close) is a no-op, answered here without JS.
  Status MarkReadOnly(uint64_t fh);
  // A JS write handle of node nodeid whose WRITEs go to a stage: GETATTRs of the node (stat and fstat:
  // the kernel drops a created or O_TRUNC file's cached size) are answered here from attr (JS's answer
  // for it) with the stage's size and time, while the stage takes its writes and the node is not
  // detached. Until its release or the clear (JS clears it where the name's attributes change).
  Status SetStagedAttr(uint64_t fh, uint64_t nodeid, const uint8_t* attr, size_t attrBytes);
  void ClearStagedAttr(uint64_t fh);
  // The open_out flags of a read-only open, by handle fh, of node nodeid's committed content: the arena
  // block contentKey (its handle names one content while live: generations), sizeBytes long.
  // The kernel keeps one page cache per inode, filled by every open that reads through it and by
  // every mmap (a direct-I/O file is mapped through it too). So the tracked read opens of a node read
  // one content at a time: the first sets it, later opens of the same content share it, and an open
  // of another content meanwhile gets kReadOpenConflict (not counted): the caller gives the name a
  // new node. A page-cache open (cacheable, no writer open) keeps the pages cached if they are of its content,
  // else drops them (no FOPEN_KEEP_CACHE); the others get options.openFlags (direct I/O). Without
  // pageCache or trackReads: options.openFlags, nothing tracked. Released with the handle's RELEASE (ReleaseCachedOpen).
  uint32_t ReadOpenFlags(uint64_t nodeid, uint64_t fh, uint64_t contentKey, uint64_t sizeBytes, bool cacheable = true);
  // The attributes' lifetime for a reply about nodeid that gives it sizeBytes: none (0) when a page-
  // cache open of the node reads more than that. The kernel cuts cached reads at the inode's size
  // while the attributes are valid; an expired size is asked again with the reader's handle
  // (FUSE_GETATTR_FH), which answers its own content's size.
  uint64_t AttrValidMsFor(uint64_t nodeid, uint64_t sizeBytes);
  // A writer (any open that may change the file) is about to be answered for nodeid: true, and the
  // node takes no page-cache open until WriterReleased, if no page-cache open of it is open now;
  // false otherwise. The kernel keeps one size per inode and its writers move it, so a page-cache
  // reader beside a writer would have its reads cut at the writer's size.
  bool TryWriterOpen(uint64_t nodeid);
  void WriterReleased(uint64_t nodeid);
  // Whether any open of the node reads through the page cache now (their content is the node's).
  bool HasPageCacheOpens(uint64_t nodeid);
  // A READ of a page-cache open arrived: its open() returned, so the pages it dropped are gone.
  void PagesRead(uint64_t fh);
  // The node at path (whatever its id will be) takes no page-cache open for holdMs: a writer was
  // turned away (ESTALE) to look the path up again and open the new node it finds.
  void HoldOffPageCache(const std::string& path, uint64_t holdMs);
  // FUSE_DEV_IOC_BACKING_OPEN/CLOSE: register a file the kernel reads directly (passthrough).
  Status OpenBacking(int fd, int32_t* backingId, std::string* error);
  Status CloseBacking(int32_t backingId);
  // Detaches the mount (lazily), stops and joins the workers, closes /dev/fuse. Idempotent.
  void Unmount();

  Negotiated negotiated() const;
  SessionStats stats() const;
  bool mapsArena() const { return arenaBase_ != nullptr; }
  // Native writes (null without options.arena).
  Stager* stager() const { return stager_.get(); }
  // Arena handles of blocks opened natively since the last call (the store counts them as DRAM hits
  // and as recent uses, so its eviction sees them).
  std::vector<uint64_t> DrainTouched();
  // Copies block bytes from the arena (extents as in ReadSource) into fd from offset 0: the backing
  // file of a passthrough open. Blocking; the binding runs it on a worker thread.
  Status WriteArenaTo(int fd, const ReadSource& source, std::string* error) const;

 private:
  Session(const SessionOptions& options, Forward forward, OnInit onInit);
  void Worker();
  // A READ or WRITE of kHandOffBytes or more (Worker).
  static bool LongRequest(const uint8_t* message, size_t lengthBytes);
  // A worker about to spend long on one request lets a parked worker take over reading /dev/fuse.
  void HandOffReading();
  // Polls /dev/fuse up to limitNs (kSpinNs, kForwardSpinNs); true if a request (or an error to read) is there.
  bool SpinUntilReadable(int64_t limitNs);
  static int WakeSignal();
  static void InstallWakeHandler();
  void Handle(uint8_t* message, size_t lengthBytes);
  void HandleInit(const uint8_t* message, size_t lengthBytes);
  bool ServeRead(const uint8_t* message, size_t lengthBytes);
  bool ServeWrite(const uint8_t* message, size_t lengthBytes);
  bool ServeLookup(const uint8_t* message, size_t lengthBytes);
  bool ServeGetattr(const uint8_t* message, size_t lengthBytes);
  void ServeForget(const uint8_t* message, size_t lengthBytes);
  bool ServeOpen(const uint8_t* message, size_t lengthBytes);
  bool ServeNativeRelease(uint64_t unique, uint64_t fh);
  bool ServeOpendir(const uint8_t* message, size_t lengthBytes);
  void ServeReaddir(uint64_t unique, uint64_t fh, uint64_t offset, uint32_t sizeBytes);
  void FillAttrOut(const CachedAttr& a, bool detached, struct fuse_attr* out) const;
  bool StagedAttrOf(uint64_t fh, uint64_t nodeid, CachedAttr* out);
  bool StagedAttrOfNode(uint64_t nodeid, CachedAttr* out);
  void ReplyError(uint64_t unique, int32_t error);
  void ReleaseCachedOpen(uint64_t fh);
  // A WRITE of the node is answered: the kernel drops the size it held (ReadOpenFlags needs no notice).
  void ForgetToldSize(uint64_t nodeid);
  // FUSE_NOTIFY_INVAL_INODE for the node's attributes only.
  void NotifyAttrsStale(uint64_t nodeid);
  void ForgetCachedNode(uint64_t nodeid);
  void StartUring(uint32_t payloadBytes);

  const SessionOptions options_;
  const Forward forward_;
  const OnInit onInit_;
  int fd_ = -1;
  bool mounted_ = false;
  std::unique_ptr<Mapping> arenaMapping_;  // arenaFd's mapping, when the arena itself was not given
  const uint8_t* arenaBase_ = nullptr;
  uint64_t arenaLength_ = 0;
  std::unique_ptr<Stager> stager_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> exitedWorkers_{0};  // workers that left their loop (Unmount signals until all did)
  // At most one worker waits in read(); the others park here until it takes a long request (see
  // Worker). readers_: workers in (or about to enter) read().
  std::mutex poolMutex_;
  std::condition_variable poolCv_;
  unsigned readers_ = 0;
  std::atomic<unsigned> busy_{0};  // workers handling a request
  std::atomic<int64_t> lastLongNs_{0};  // steady clock of the last long request (Worker)
  std::atomic<bool> unmounted_{false};
  size_t bufferBytes_ = 0;
  // Set once, after INIT, by the worker that answered it; read by every replier.
  std::unique_ptr<Uring> uringOwner_;
  std::atomic<Uring*> uring_{nullptr};
  std::string uringFatal_;  // io_uring agreed, not started, not turned off: the mount must fail

  mutable std::shared_mutex sourcesMutex_;
  std::unordered_map<uint64_t, std::shared_ptr<const ReadSource>> sources_;
  std::unordered_set<uint64_t> readOnly_;

  // Opens answered natively: each keeps its block's arena pages (ArenaHold) until its release.
  struct NativeOpen {
    ArenaHold hold;
    CachedAttr attr;
    uint64_t nodeid = 0;
  };
  mutable std::mutex nativeMutex_;
  std::unordered_map<uint64_t, NativeOpen> nativeOpens_;
  // Directories opened natively: the listing at OPENDIR, "." and ".." first (READDIR offsets index it).
  std::unordered_map<uint64_t, std::vector<std::pair<std::string, uint8_t>>> nativeDirs_;
  uint64_t nextNativeFh_ = kNativeHandleBase;
  std::vector<uint64_t> touched_;
  uint64_t touchedDropped_ = 0;

  struct StagedAttr {
    uint64_t nodeid = 0;
    CachedAttr attr;
  };
  mutable std::mutex stagedMutex_;
  std::unordered_map<uint64_t, StagedAttr> stagedAttrs_;
  std::unordered_map<uint64_t, uint64_t> stagedByNode_;  // node -> the handle whose attributes stand for it

  // The page-cache rules (page_cache.h): which read opens use the kernel's page cache.
  PageCacheRules pageCache_;

  mutable std::shared_mutex negotiatedMutex_;
  Negotiated negotiated_;

  std::atomic<uint64_t> requests_{0}, forwarded_{0}, servedReads_{0}, servedReadBytes_{0}, servedFlushes_{0}, servedWrites_{0}, servedWriteBytes_{0}, replyErrors_{0},
      servedLookups_{0}, servedAbsentLookups_{0}, servedGetattrs_{0}, servedForgets_{0}, servedOpens_{0}, servedReleases_{0}, earlyReleases_{0},
      servedOpendirs_{0}, servedReaddirs_{0}, spinHits_{0}, spinTimeouts_{0}, gatedReads_{0}, gatedToJs_{0};
};

}  // namespace cascade::engine

#include "session.h"

#include <chrono>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <mutex>

#include "../core/check.h"
#include "fuse_kernel.h"

namespace cascade::engine {

namespace {

// The kernel counts max_pages in its own pages: 4 KiB on x86-64, 16 or 64 KiB on some arm64 kernels.
size_t PageBytes() {
  static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

std::string Errno(const char* what) { return std::string(what) + ": " + strerror(errno); }

extern "C" char** environ;

// For a user who is not root: the setuid `fusermount` mounts and hands back the /dev/fuse descriptor
// over a socket (_FUSE_COMMFD, SCM_RIGHTS), as libfuse does.
Status FusermountFd(const SessionOptions& options, int* fd, std::string* error) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    *error = Errno("socketpair");
    return Status::kIo;
  }
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);  // ours; sv[1] is inherited by fusermount
  std::string opts = "rw,nosuid,nodev,fsname=" + options.fsname + ",subtype=" + options.subtype + ",default_permissions";
  if (options.allowOther) opts += ",allow_other";
  const std::string commfd = "_FUSE_COMMFD=" + std::to_string(sv[1]);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; e++) {
    if (strncmp(*e, "_FUSE_COMMFD=", 13) != 0) env.push_back(*e);
  }
  env.push_back(const_cast<char*>(commfd.c_str()));
  env.push_back(nullptr);
  const char* argv[] = {"fusermount", "-o", opts.c_str(), "--", options.mountpoint.c_str(), nullptr};
  pid_t pid;
  const int rc = posix_spawnp(&pid, "fusermount", nullptr, nullptr, const_cast<char* const*>(argv), env.data());
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    errno = rc;
    *error = Errno("cannot run fusermount (Debian: apt-get install fuse)");
    return Status::kIo;
  }
  char byte;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sv[0], &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  close(sv[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  struct cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int))) {
    *error = "fusermount did not mount " + options.mountpoint + " (exit status " +
             std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "; its message is on stderr)";
    return Status::kIo;
  }
  memcpy(fd, CMSG_DATA(c), sizeof(int));
  return Status::kOk;
}

}  // namespace

static PageCacheOptions PageCacheOptionsOf(const SessionOptions& o) {
  PageCacheOptions p;
  p.pageCache = o.pageCache;
  p.trackReads = o.trackReads;
  p.openFlags = o.openFlags;
  p.attrValidMs = o.attrValidMs;
  p.handlesMax = kNativeOpensMax;
  return p;
}

Session::Session(const SessionOptions& options, Forward forward, OnInit onInit)
    : options_(options),
      forward_(std::move(forward)),
      onInit_(std::move(onInit)),
      pageCache_(
          PageCacheOptionsOf(options), [] { return SteadyNs(); },
          [meta = options.meta](uint64_t nodeid, std::string* path) {
            bool detached;
            return meta ? meta->PathOf(nodeid, path, &detached) : Status::kInvalid;
          },
          [this](uint64_t nodeid) { NotifyAttrsStale(nodeid); }) {}

Status Session::Mount(const SessionOptions& options, Forward forward, OnInit onInit, std::unique_ptr<Session>* out,
                      std::string* error) {
  if (options.threads == 0 || options.threads > kThreadsMax) {
    *error = "threads must be 1.." + std::to_string(kThreadsMax);
    return Status::kInvalid;
  }
  if (options.maxPages == 0 || options.maxPages > kMaxPagesLimit) {
    *error = "maxPages must be 1.." + std::to_string(kMaxPagesLimit);
    return Status::kInvalid;
  }
  if (options.mountpoint.empty() || options.mountpoint[0] != '/') {
    *error = "the mountpoint must be an absolute path";
    return Status::kInvalid;
  }
  std::unique_ptr<Session> s(new Session(options, std::move(forward), std::move(onInit)));
  if (options.arena) {
    s->arenaBase_ = options.arena->base();
    s->arenaLength_ = options.arena->capacityBytes();
    if (options.maxBlockBytes == 0) {
      *error = "maxBlockBytes must be set with an arena";
      return Status::kInvalid;
    }
    s->stager_.reset(new Stager(options.arena, options.maxBlockBytes, options.hashThreads));
  } else if (options.arenaFd >= 0) {
    Mapping* m = nullptr;
    std::string why;
    if (Mapping::Open("/proc/self/fd/" + std::to_string(options.arenaFd), &m, &why) != Status::kOk) {
      *error = "cannot map the DRAM arena: " + why;
      return Status::kIo;
    }
    s->arenaMapping_.reset(m);
    s->arenaBase_ = m->base();
    s->arenaLength_ = m->lengthBytes();
  }
  if (geteuid() != 0) {
    // Not root: fusermount mounts; the session unmounts with fusermount -u too (the JS side does).
    Status st = FusermountFd(options, &s->fd_, error);
    if (st != Status::kOk) return st;
    s->mounted_ = false;  // umount2 would fail (EPERM): the engine calls fusermount -u
  } else {
    s->fd_ = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (s->fd_ < 0) {
      *error = Errno("open /dev/fuse");
      return Status::kIo;
    }
  }
  // Blocking reads, no poll(): a reader blocked in read() waits exclusively, so the kernel wakes one
  // worker per request (poll() would wake every worker for each one: on 2 cores that cost a third of
  // the lookup rate). Stopping interrupts the reads with kWakeSignal (Unmount).
  InstallWakeHandler();
  if (geteuid() != 0) {
    s->bufferBytes_ = std::max<size_t>(FUSE_MIN_READ_BUFFER, options.maxPages * PageBytes() + PageBytes());
    for (unsigned i = 0; i < options.threads; i++) s->workers_.emplace_back([p = s.get()] { p->Worker(); });
    *out = std::move(s);
    return Status::kOk;
  }
  // What fusermount would pass; default_permissions: the kernel checks access from st_mode/uid/gid.
  std::string data = "fd=" + std::to_string(s->fd_) + ",rootmode=40000,user_id=" + std::to_string(options.uid) +
                     ",group_id=" + std::to_string(options.gid) + ",default_permissions";
  if (options.allowOther) data += ",allow_other";
  const std::string type = "fuse." + options.subtype;
  if (mount(options.fsname.c_str(), options.mountpoint.c_str(), type.c_str(), MS_NOSUID | MS_NODEV, data.c_str()) != 0) {
    const int e = errno;
    *error = Errno(("mount " + options.mountpoint).c_str());
    if (e == EPERM) *error += " (mounting /dev/fuse directly needs root)";
    return Status::kIo;
  }
  s->mounted_ = true;
  // A read must take the largest request: a max_pages write plus its headers.
  s->bufferBytes_ = std::max<size_t>(FUSE_MIN_READ_BUFFER, options.maxPages * PageBytes() + PageBytes());
  for (unsigned i = 0; i < options.threads; i++) s->workers_.emplace_back([p = s.get()] { p->Worker(); });
  *out = std::move(s);
  return Status::kOk;
}

namespace {
void WakeHandler(int) {}  // only interrupts a blocked read(): no SA_RESTART
}  // namespace

int Session::WakeSignal() { return SIGRTMIN + kWakeSignalOffset; }

void Session::InstallWakeHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = WakeHandler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(WakeSignal(), &sa, nullptr);
  });
}

Session::~Session() { Unmount(); }

void Session::Unmount() {
  if (unmounted_.exchange(true)) return;
  stopping_.store(true);
  if (mounted_) umount2(options_.mountpoint.c_str(), MNT_DETACH);  // fails harmlessly if already gone
  // A worker blocked in read() returns EINTR on the signal and sees stopping_. One may be between its
  // check and its read when a signal comes, so signal until every worker has left its loop.
  while (exitedWorkers_.load() < workers_.size()) {
    {
      std::lock_guard<std::mutex> lock(poolMutex_);  // a parked worker sees stopping_ once woken
    }
    poolCv_.notify_all();
    for (auto& t : workers_) pthread_kill(t.native_handle(), WakeSignal());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
  // The queue threads too; the rings go before the connection (their commands name its buffers).
  if (uringOwner_) uringOwner_->Stop();
  // The last close of the connection's fd aborts it: requests of files still open fail with ENOTCONN.
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  // No worker runs now: native opens give their arena pages back.
  std::lock_guard<std::mutex> lock(nativeMutex_);
  for (auto& [fh, open] : nativeOpens_) options_.arena->Unhold(open.hold);
  nativeOpens_.clear();
}

namespace {
thread_local bool tlsOnRing = false;  // this thread is an io_uring queue thread (StartUring)
}  // namespace

void Session::Worker() {
  // The thread inherits the JS thread's mask, which a launcher may have set: the stop signal must get
  // through, or Unmount would signal forever.
  sigset_t wake;
  sigemptyset(&wake);
  sigaddset(&wake, WakeSignal());
  pthread_sigmask(SIG_UNBLOCK, &wake, nullptr);
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[bufferBytes_]);
  // A quiet stream of small requests, one reader: a worker that answered a small request while no
  // other worker was busy reads the next one itself unless another worker is already reading, so a
  // serial stream (stat, lookups, creates of one process) is served by one thread on one CPU. With
  // every worker blocked in read(), the kernel woke them in turn (its queue is first in, first out),
  // each on the CPU it last ran on: on 2 cores 5,000 migrations and as many cross-CPU wakeups per
  // 12,000 uncached stats, 25 us each instead of 16 us. Otherwise (a long request, or others busy:
  // concurrent clients, or any long request in the last kQuietNs: readers of big blocks) a worker reads
  // again at once, as every worker did before: parked workers cost readers of big blocks in parallel
  // up to half their rate here (each long request then woke one).
  //
  // Spinning: the one reader of such a stream polls /dev/fuse for up to kSpinNs after its answer before
  // it blocks in read(). The caller's next request (a stat loop, open+close) usually comes within a
  // few microseconds; a blocked worker's wakeup costs more than that. A stream that pauses longer turns
  // spinning off until requests come back to back again (doneNs: when this worker answered last).
  bool park = true;
  bool spin = false;
  int64_t spinNs = kSpinNs;
  int64_t doneNs = 0;
  while (!stopping_.load()) {
    {
      std::unique_lock<std::mutex> lock(poolMutex_);
      if (park) poolCv_.wait(lock, [this] { return stopping_.load() || readers_ == 0; });
      if (stopping_.load()) break;
      readers_++;
    }
    const bool spunHit = spin && SpinUntilReadable(spinNs);
    const ssize_t n = read(fd_, buffer.get(), bufferBytes_);
    {
      std::lock_guard<std::mutex> lock(poolMutex_);
      readers_--;
    }
    park = true;
    if (n < 0) {
      // EINTR: the stop signal (or another); ENOENT: interrupted before we read it; ENODEV: unmounted.
      if (errno == EINTR || errno == EAGAIN || errno == ENOENT) continue;
      break;
    }
    if (static_cast<size_t>(n) < sizeof(fuse_in_header)) continue;
    requests_.fetch_add(1, std::memory_order_relaxed);
    const int64_t nowNs = SteadyNs();
    const bool longRequest = LongRequest(buffer.get(), static_cast<size_t>(n));
    if (longRequest) {
      lastLongNs_.store(nowNs, std::memory_order_relaxed);
      HandOffReading();  // someone reads the next request while this one is copied
    }
    // The next request of a back-to-back stream came within kSpinNs of the last answer (the spin, or
    // a read that blocked only briefly, saw it): spin again after this one.
    const bool streaming = spunHit || (!spin && doneNs != 0 && nowNs - doneNs <= kSpinNs);
    const bool openRequest = reinterpret_cast<const fuse_in_header*>(buffer.get())->opcode == FUSE_OPEN;
    const unsigned othersBusy = busy_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t forwardedBefore = forwarded_.load(std::memory_order_relaxed);
    Handle(buffer.get(), static_cast<size_t>(n));
    busy_.fetch_sub(1, std::memory_order_relaxed);
    park = !longRequest && othersBusy == 0 && nowNs - lastLongNs_.load(std::memory_order_relaxed) > kQuietNs;
    // Spin in one-reader mode: after a request answered here while the stream keeps coming back
    // within the spin (or at its start), and after one handed to JS, for the length of a typical JS
    // answer (kForwardSpinNs): the caller then wakes on a CPU that is running, not on an idle vCPU;
    // and after an OPEN answered here, until the opener's RELEASE (kOpenSpinNs).
    const bool answeredHere = forwarded_.load(std::memory_order_relaxed) == forwardedBefore;
    spin = park && (!answeredHere || streaming || doneNs == 0 || openRequest);
    spinNs = !answeredHere ? kForwardSpinNs : openRequest ? kOpenSpinNs : kSpinNs;
    doneNs = park && answeredHere ? SteadyNs() : 0;
  }
  exitedWorkers_.fetch_add(1);
  // A worker that leaves (unmounted: ENODEV) lets the next one find out too.
  poolCv_.notify_one();
}

bool Session::SpinUntilReadable(int64_t limitNs) {
  const int64_t startNs = SteadyNs();
  struct pollfd p = {fd_, POLLIN, 0};
  for (;;) {
    p.revents = 0;
    const int rc = poll(&p, 1, 0);
    // Readable, or an error the read() that follows reports (ENODEV after unmount).
    if (rc > 0) {
      spinHits_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (rc < 0 || stopping_.load(std::memory_order_relaxed)) return false;  // the stop signal
    if (SteadyNs() - startNs > limitNs) {
      spinTimeouts_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    // Polite spinning: a thread that can run on this CPU (the caller, JS) runs at once.
    sched_yield();
  }
}

bool Session::LongRequest(const uint8_t* message, size_t lengthBytes) {
  const uint32_t opcode = reinterpret_cast<const fuse_in_header*>(message)->opcode;
  if (opcode == FUSE_READ) {
    return lengthBytes >= sizeof(fuse_in_header) + sizeof(fuse_read_in) &&
           reinterpret_cast<const fuse_read_in*>(message + sizeof(fuse_in_header))->size >= kHandOffBytes;
  }
  return opcode == FUSE_WRITE && lengthBytes >= sizeof(fuse_in_header) + sizeof(fuse_write_in) + kHandOffBytes;
}

void Session::HandOffReading() {
  {
    std::lock_guard<std::mutex> lock(poolMutex_);
    if (readers_ > 0) return;  // someone reads already (or this is an io_uring queue thread)
  }
  poolCv_.notify_one();
}

void Session::Handle(uint8_t* message, size_t lengthBytes) {
  const auto* in = reinterpret_cast<const fuse_in_header*>(message);
  if (in->len != lengthBytes) {  // the kernel's own framing: never expected to differ
    ReplyError(in->unique, EIO);
    return;
  }
  switch (in->opcode) {
    case FUSE_INIT:
      HandleInit(message, lengthBytes);
      return;
    case FUSE_LOOKUP:
      if (ServeLookup(message, lengthBytes)) return;
      break;
    case FUSE_GETATTR:
      if (ServeGetattr(message, lengthBytes)) return;
      break;
    case FUSE_FORGET:
    case FUSE_BATCH_FORGET:
      if (options_.meta) {
        ServeForget(message, lengthBytes);  // no answer is due
        return;
      }
      break;
    case FUSE_OPEN:
      if (ServeOpen(message, lengthBytes)) return;
      break;
    case FUSE_READ:
      if (ServeRead(message, lengthBytes)) return;
      if (lengthBytes >= sizeof(fuse_in_header) + sizeof(fuse_read_in) &&
          reinterpret_cast<const fuse_read_in*>(message + sizeof(fuse_in_header))->fh >= kNativeHandleBase) {
        ReplyError(in->unique, EIO);  // never: a native open always has its source (JS has no such handle)
        return;
      }
      break;
    case FUSE_WRITE:
      if (ServeWrite(message, lengthBytes)) return;
      break;
    case FUSE_OPENDIR:
      if (ServeOpendir(message, lengthBytes)) return;
      break;
    case FUSE_READDIR:
      if (lengthBytes >= sizeof(fuse_in_header) + sizeof(fuse_read_in)) {
        const auto* in = reinterpret_cast<const fuse_read_in*>(message + sizeof(fuse_in_header));
        if (in->fh >= kNativeHandleBase) {
          ServeReaddir(reinterpret_cast<const fuse_in_header*>(message)->unique, in->fh, in->offset, in->size);
          return;
        }
      }
      break;
    case FUSE_RELEASEDIR:
      if (lengthBytes >= sizeof(fuse_in_header) + sizeof(fuse_release_in)) {
        const uint64_t fh = reinterpret_cast<const fuse_release_in*>(message + sizeof(fuse_in_header))->fh;
        if (fh >= kNativeHandleBase) {
          {
            std::lock_guard<std::mutex> lock(nativeMutex_);
            nativeDirs_.erase(fh);
          }
          Reply(reinterpret_cast<const fuse_in_header*>(message)->unique, 0, nullptr, 0);
          return;
        }
      }
      break;
    case FUSE_GETXATTR:
      // The kernel asks for security.capability before each truncate of an existing file (an O_TRUNC
      // rewrite): none is kept here, so answer as JS does (EOPNOTSUPP) without a trip through JS.
      if (lengthBytes > sizeof(fuse_in_header) + sizeof(fuse_getxattr_in)) {
        static constexpr char kCapability[] = "security.capability";
        const char* name = reinterpret_cast<const char*>(message + sizeof(fuse_in_header) + sizeof(fuse_getxattr_in));
        const size_t room = lengthBytes - sizeof(fuse_in_header) - sizeof(fuse_getxattr_in);
        if (room >= sizeof kCapability && memcmp(name, kCapability, sizeof kCapability) == 0) {
          ReplyError(in->unique, EOPNOTSUPP);
          return;
        }
      }
      break;
    case FUSE_IOCTL:
      // No ioctl is implemented: answer as a plain file does, here. Python's open() asks isatty()
      // (TCGETS) of every file it opens, so this was one JS trip per file created.
      ReplyError(in->unique, ENOTTY);
      return;
    case FUSE_FLUSH: {
      if (lengthBytes >= sizeof(fuse_in_header) + sizeof(fuse_flush_in)) {
        const uint64_t fh = reinterpret_cast<const fuse_flush_in*>(message + sizeof(fuse_in_header))->fh;
        bool quiet;
        {
          std::shared_lock<std::shared_mutex> lock(sourcesMutex_);
          quiet = readOnly_.count(fh) != 0;
        }
        if (quiet) {
          servedFlushes_.fetch_add(1, std::memory_order_relaxed);
          Reply(in->unique, 0, nullptr, 0);
          return;
        }
      }
      break;
    }
    case FUSE_RELEASE: {
      if (lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_release_in)) {
        ReplyError(in->unique, EINVAL);  // malformed; every RELEASE is answered here, JS answers none
        return;
      }
      // Drop the source before the embedder can reuse the handle number (it serves the release).
      const uint64_t fh = reinterpret_cast<const fuse_release_in*>(message + sizeof(fuse_in_header))->fh;
      ReleaseCachedOpen(fh);
      if (fh >= kNativeHandleBase && ServeNativeRelease(in->unique, fh)) return;
      ClearReadSource(fh);
      ClearStagedAttr(fh);
      if (stager_) stager_->DetachHandle(fh);
      // Answered here, before JS sees it: the kernel sends RELEASE in the background (close(2)
      // returned already) and ignores the answer's error, so nothing waits on what JS does with it,
      // and JS is spared a reply (a writev of about 40 us on its thread, on the path of the next
      // request it serves). The copy comes first: an io_uring entry's buffer is reused once answered.
      forwarded_.fetch_add(1, std::memory_order_relaxed);
      earlyReleases_.fetch_add(1, std::memory_order_relaxed);
      std::vector<uint8_t> copy(message, message + lengthBytes);
      Reply(in->unique, 0, nullptr, 0);
      forward_(std::move(copy), [this] { HandOffReading(); });  // no answer is due from JS
      return;
    }
    default:
      break;
  }
  forwarded_.fetch_add(1, std::memory_order_relaxed);
  const uint32_t opcode = in->opcode;
  const uint64_t unique = in->unique;
  // JS answers it, on its own thread: the ring entry waits for that answer (before JS can see it).
  // (Not a request that gets no answer: the ring commits those as soon as they are handed on.)
  if (opcode != FUSE_FORGET && opcode != FUSE_BATCH_FORGET && opcode != FUSE_INTERRUPT) {
    if (Uring* u = uring_.load(std::memory_order_acquire)) u->HandOff(unique);
  }
  if (!forward_(std::vector<uint8_t>(message, message + lengthBytes), [this] { HandOffReading(); })) {
    if (opcode != FUSE_FORGET && opcode != FUSE_BATCH_FORGET && opcode != FUSE_INTERRUPT) ReplyError(unique, EIO);
  }
}

void Session::HandleInit(const uint8_t* message, size_t lengthBytes) {
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  // The 7.36+ init_in is 64 bytes; older kernels send 16.
  fuse_init_in in{};
  memcpy(&in, message + sizeof(fuse_in_header), std::min(sizeof in, lengthBytes - sizeof(fuse_in_header)));
  if (in.major != 7 || in.minor < kProtocolMinorMin) {
    ReplyError(hdr->unique, EPROTO);
    onInit_(false, "the kernel speaks FUSE " + std::to_string(in.major) + "." + std::to_string(in.minor) +
                       "; this engine needs 7." + std::to_string(kProtocolMinorMin) + " or later");
    return;
  }
  uint64_t offered = in.flags;
  if ((in.flags & FUSE_INIT_EXT) != 0) offered |= static_cast<uint64_t>(in.flags2) << 32;
  // async_read: several reads of one file at once; atomic_o_trunc: O_TRUNC arrives with open (a
  // whole-file overwrite is known there); big_writes + max_pages: 1 MiB requests.
  uint64_t want = FUSE_ASYNC_READ | FUSE_ATOMIC_O_TRUNC | FUSE_BIG_WRITES | FUSE_MAX_PAGES | FUSE_INIT_EXT;
  const uint32_t minor = std::min(in.minor, kProtocolMinor);
  if (options_.passthrough && minor >= 40) want |= kFusePassthrough;
  std::string uringWhyNot;
  if (options_.uring) {
    // Asked for only when it can run: once agreed, the kernel holds every request until the queues
    // are registered.
    if ((offered & kFuseOverIoUring) == 0) {
      uringWhyNot = "the kernel does not offer it (Linux 6.14+ with fuse.enable_uring=Y: echo Y > /sys/module/fuse/parameters/enable_uring)";
    } else if (Uring::Available(&uringWhyNot)) {
      want |= kFuseOverIoUring;
    }
  }
  // Shared read-only mmap (numpy/torch/safetensors) on the default direct-I/O mount.
  if (minor >= 39) want |= kFuseDirectIoAllowMmap;
  const uint64_t flags = want & offered;
  InitOut out{};
  out.major = 7;
  out.minor = minor;
  out.max_readahead = in.max_readahead;
  out.flags = static_cast<uint32_t>(flags);
  out.flags2 = static_cast<uint32_t>(flags >> 32);
  out.max_background = 64;
  out.congestion_threshold = 48;
  out.max_write = static_cast<uint32_t>(options_.maxPages * PageBytes());
  out.time_gran = 1;
  out.max_pages = (flags & FUSE_MAX_PAGES) != 0 ? options_.maxPages : 0;
  // Passthrough files must not be FUSE files themselves (stack depth 1: backing files are plain).
  out.max_stack_depth = (flags & kFusePassthrough) != 0 ? 1 : 0;
  struct iovec iov = {&out, sizeof out};
  const Status st = Reply(hdr->unique, 0, &iov, 1);
  {
    std::unique_lock<std::shared_mutex> lock(negotiatedMutex_);
    negotiated_.done = st == Status::kOk;
    negotiated_.major = 7;
    negotiated_.minor = minor;
    negotiated_.maxWriteBytes = out.max_write;
    negotiated_.maxPages = out.max_pages;
    negotiated_.maxReadaheadBytes = out.max_readahead;
    negotiated_.passthrough = (flags & kFusePassthrough) != 0;
    negotiated_.directIoMmap = (flags & kFuseDirectIoAllowMmap) != 0;
    negotiated_.uringWhyNot = uringWhyNot;
  }
  if (st == Status::kOk && (flags & kFuseOverIoUring) != 0) {
    StartUring(std::max<uint32_t>({FUSE_MIN_READ_BUFFER, out.max_write, static_cast<uint32_t>(out.max_pages * PageBytes())}));
  }
  if (!uringFatal_.empty()) {
    onInit_(false, uringFatal_);  // the embedder unmounts: a connection that holds every request is no mount
    return;
  }
  onInit_(st == Status::kOk, st == Status::kOk ? "" : "the INIT reply failed");
}

void Session::StartUring(uint32_t payloadBytes) {
  std::unique_ptr<Uring> u;
  std::string why;
  // Each request a queue thread takes is handled as one read from /dev/fuse would be.
  Status st = Uring::Create(fd_, options_.uringDepth, payloadBytes, [this](uint8_t* message, size_t lengthBytes) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    tlsOnRing = true;
    Handle(message, lengthBytes);
  }, &u, &why);
  if (st == Status::kOk) {
    // Published before any queue registers: the requests the kernel held until then arrive at once,
    // and every answer must find its ring.
    uringOwner_ = std::move(u);
    uring_.store(uringOwner_.get(), std::memory_order_release);
    st = uringOwner_->Launch(&why);
    if (st != Status::kOk) uring_.store(nullptr, std::memory_order_release);
  }
  std::unique_lock<std::shared_mutex> lock(negotiatedMutex_);
  if (st != Status::kOk) {
    // Nothing serves the rings: turn io_uring off for the connection, or every request would wait.
    if (!Uring::Refuse(fd_)) {
      uringFatal_ = "FUSE over io_uring was agreed but could not start (" + why + ") nor be turned off";
    }
    negotiated_.uringWhyNot = why;
    return;
  }
  negotiated_.uring = true;
}

bool Session::ServeWrite(const uint8_t* message, size_t lengthBytes) {
  if (!stager_ || lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_write_in)) return false;
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  const auto* in = reinterpret_cast<const fuse_write_in*>(message + sizeof(fuse_in_header));
  const size_t header = sizeof(fuse_in_header) + sizeof(fuse_write_in);
  if (in->size > lengthBytes - header) return false;  // malformed: JS answers it
  if (stager_->Write(in->fh, in->offset, message + header, in->size) != Status::kOk) return false;
  servedWrites_.fetch_add(1, std::memory_order_relaxed);
  servedWriteBytes_.fetch_add(in->size, std::memory_order_relaxed);
  // Once this answer lands, the kernel takes the node's size as stale (a write invalidates it), so the
  // smaller sizes replies told before need no notice at the next page-cache open; a reply told after
  // this line is remembered again.
  ForgetToldSize(hdr->nodeid);
  fuse_write_out out{};
  out.size = in->size;
  struct iovec iov = {&out, sizeof out};
  Reply(hdr->unique, 0, &iov, 1);
  return true;
}

bool Session::ServeRead(const uint8_t* message, size_t lengthBytes) {
  if (arenaBase_ == nullptr || lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_read_in)) return false;
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  const auto* in = reinterpret_cast<const fuse_read_in*>(message + sizeof(fuse_in_header));
  std::shared_ptr<const ReadSource> src;
  {
    std::shared_lock<std::shared_mutex> lock(sourcesMutex_);
    auto it = sources_.find(in->fh);
    if (it == sources_.end()) return false;
    src = it->second;
  }
  const uint64_t end = std::min<uint64_t>(src->sizeBytes, in->offset + static_cast<uint64_t>(in->size));
  // A block still loading: wait until these bytes are checked; a failed or stalled load goes to JS,
  // which reads through the store (and waits for, or retries, the whole load).
  if (src->gateHandle != 0) {
    Status w = options_.arena == nullptr ? Status::kClosed : options_.arena->WaitFilled(src->gateHandle, end, 0);
    if (w == Status::kBusy) {
      if (tlsOnRing) {
        // A ring's queue thread serves every request from its CPU: it waits only briefly.
        w = options_.arena->WaitFilled(src->gateHandle, end, kGateRingWaitMs);
      } else {
        HandOffReading();  // another worker reads /dev/fuse while this one waits
        w = options_.arena->WaitFilled(src->gateHandle, end, kGateWaitMs);
      }
    }
    if (w != Status::kOk) {
      gatedToJs_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  struct iovec iov[kReplyIovMax];
  int count = 0;
  uint64_t pos = 0;  // block offset of the current extent
  uint64_t want = in->offset;
  for (const auto& [arenaOffset, length] : src->extents) {
    if (want >= end) break;
    if (want < pos + length) {
      if (count == kReplyIovMax - 1) return false;  // too fragmented to answer in one writev: JS copies
      const uint64_t within = want - pos;
      const uint64_t n = std::min(length - within, end - want);
      iov[count++] = {const_cast<uint8_t*>(arenaBase_) + arenaOffset + within, static_cast<size_t>(n)};
      want += n;
    }
    pos += length;
  }
  if (options_.pageCache) PagesRead(in->fh);
  servedReads_.fetch_add(1, std::memory_order_relaxed);
  if (src->gateHandle != 0) gatedReads_.fetch_add(1, std::memory_order_relaxed);
  servedReadBytes_.fetch_add(want > in->offset ? want - in->offset : 0, std::memory_order_relaxed);
  Reply(hdr->unique, 0, iov, count);
  return true;
}

void Session::FillAttrOut(const CachedAttr& a, bool detached, struct fuse_attr* out) const {
  static_assert(sizeof(fuse_attr) == kFuseAttrBytes, "struct fuse_attr");
  memcpy(out, a.attr, sizeof *out);
  if (detached) out->nlink = 0;  // unlinked or replaced while open, as on a local filesystem
}

namespace {

void SplitMs(uint64_t ms, uint64_t* sec, uint32_t* nsec) {
  *sec = ms / 1000;
  *nsec = static_cast<uint32_t>((ms % 1000) * 1000000);
}

}  // namespace

bool Session::ServeLookup(const uint8_t* message, size_t lengthBytes) {
  if (!options_.meta || lengthBytes <= sizeof(fuse_in_header)) return false;
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  const char* name = reinterpret_cast<const char*>(message + sizeof(fuse_in_header));
  const size_t room = lengthBytes - sizeof(fuse_in_header);
  const void* nul = memchr(name, 0, room);
  if (nul == nullptr) return false;  // malformed: JS answers it
  const size_t nameBytes = static_cast<const char*>(nul) - name;
  uint64_t id;
  CachedAttr a;
  switch (options_.meta->LookupCached(hdr->nodeid, name, nameBytes, &id, &a)) {
    case MetaTable::Lookup::kMiss:
      return false;
    case MetaTable::Lookup::kAbsent:
      // As JS answers it: an error, no negative entry kept by the kernel (the next create asks again).
      ReplyError(hdr->unique, ENOENT);
      servedLookups_.fetch_add(1, std::memory_order_relaxed);
      servedAbsentLookups_.fetch_add(1, std::memory_order_relaxed);
      return true;
    case MetaTable::Lookup::kHit:
      break;
  }
  fuse_entry_out out{};
  out.nodeid = id;
  out.generation = 0;  // node ids are never reused while mounted
  SplitMs(options_.entryValidMs, &out.entry_valid, &out.entry_valid_nsec);
  FillAttrOut(a, false, &out.attr);
  SplitMs(AttrValidMsFor(id, out.attr.size), &out.attr_valid, &out.attr_valid_nsec);
  struct iovec iov = {&out, sizeof out};
  if (Reply(hdr->unique, 0, &iov, 1) == Status::kStale) {
    // Interrupted: the kernel never learnt of this lookup, so it will never forget it.
    options_.meta->Forget(id, 1);
  }
  servedLookups_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Session::ServeGetattr(const uint8_t* message, size_t lengthBytes) {
  if (!options_.meta || lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_getattr_in)) return false;
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  const auto* in = reinterpret_cast<const fuse_getattr_in*>(message + sizeof(fuse_in_header));
  CachedAttr a;
  bool detached = false;
  if ((in->getattr_flags & FUSE_GETATTR_FH) != 0 && in->fh >= kNativeHandleBase) {
    // fstat of a native open: the version it opened, whatever the name holds now.
    std::lock_guard<std::mutex> lock(nativeMutex_);
    auto it = nativeOpens_.find(in->fh);
    if (it == nativeOpens_.end()) {
      ReplyError(hdr->unique, EBADF);
      return true;
    }
    a = it->second.attr;
    detached = options_.meta->IsDetached(it->second.nodeid);
  } else if ((in->getattr_flags & FUSE_GETATTR_FH) != 0) {
    // A JS handle: a staged writer's size is the stage's; any other (the version it holds) is JS's.
    if (!StagedAttrOf(in->fh, hdr->nodeid, &a)) return false;
  } else if (!options_.meta->AttrOf(hdr->nodeid, &a) && !StagedAttrOfNode(hdr->nodeid, &a)) {
    // fstat of a file unlinked or replaced while open arrives without a handle (the kernel's getattr
    // has none), as does a path walk's through a dentry cached before: a native open of the node has
    // its version (with reads tracked, the default, every open of a node reads its one content;
    // untracked modes give up that isolation by choice); nlink 0, as on a local filesystem. It answers
    // before JS's opens do: the kernel applies the size to the inode, and JS may hold only a reader of
    // another content there (a conflicting open's retry, direct), whose smaller size would cut a native
    // page-cache reader's read at it. Without a native open, JS's opens answer it: each of its handles
    // knows its version.
    if (!options_.meta->IsDetached(hdr->nodeid)) return false;
    std::lock_guard<std::mutex> lock(nativeMutex_);
    auto it = std::find_if(nativeOpens_.begin(), nativeOpens_.end(), [&](const auto& o) { return o.second.nodeid == hdr->nodeid; });
    if (it == nativeOpens_.end()) return false;
    a = it->second.attr;
    detached = true;
  }
  fuse_attr_out out{};
  FillAttrOut(a, detached, &out.attr);
  SplitMs(AttrValidMsFor(hdr->nodeid, out.attr.size), &out.attr_valid, &out.attr_valid_nsec);
  struct iovec iov = {&out, sizeof out};
  Reply(hdr->unique, 0, &iov, 1);
  servedGetattrs_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Session::StagedAttrOfNode(uint64_t nodeid, CachedAttr* out) {
  uint64_t fh;
  {
    std::lock_guard<std::mutex> lock(stagedMutex_);
    auto it = stagedByNode_.find(nodeid);
    if (it == stagedByNode_.end()) return false;
    fh = it->second;
  }
  return StagedAttrOf(fh, nodeid, out);
}

bool Session::StagedAttrOf(uint64_t fh, uint64_t nodeid, CachedAttr* out) {
  if (!stager_) return false;
  {
    std::lock_guard<std::mutex> lock(stagedMutex_);
    auto it = stagedAttrs_.find(fh);
    if (it == stagedAttrs_.end() || it->second.nodeid != nodeid) return false;
    *out = it->second.attr;
  }
  // Unlinked or replaced while open (nlink 0), or its bytes moved to JS: JS answers.
  if (options_.meta && options_.meta->IsDetached(nodeid)) return false;
  StageInfo info;
  if (stager_->InfoOfHandle(fh, &info) != Status::kOk || info.forwarding) return false;
  fuse_attr attr;
  static_assert(sizeof attr == sizeof out->attr, "struct fuse_attr");
  memcpy(&attr, out->attr, sizeof attr);
  attr.size = info.sizeBytes;
  attr.blocks = (info.sizeBytes + 511) / 512;
  const uint64_t ms = info.mtimeMs > 0 ? static_cast<uint64_t>(info.mtimeMs) : 0;
  attr.atime = attr.mtime = attr.ctime = ms / 1000;  // as JS gives a writer's times: all its mtime
  attr.atimensec = attr.mtimensec = attr.ctimensec = static_cast<uint32_t>((ms % 1000) * 1000000);
  memcpy(out->attr, &attr, sizeof attr);
  out->sizeBytes = info.sizeBytes;
  return true;
}

Status Session::SetStagedAttr(uint64_t fh, uint64_t nodeid, const uint8_t* attr, size_t attrBytes) {
  if (attrBytes != kFuseAttrBytes) return Status::kInvalid;
  std::lock_guard<std::mutex> lock(stagedMutex_);
  if (stagedAttrs_.size() >= kStageHandlesMax && stagedAttrs_.count(fh) == 0) return Status::kNoSpace;
  StagedAttr& s = stagedAttrs_[fh];
  s.nodeid = nodeid;
  memcpy(s.attr.attr, attr, kFuseAttrBytes);
  s.attr.isFile = true;
  stagedByNode_[nodeid] = fh;
  return Status::kOk;
}

void Session::ClearStagedAttr(uint64_t fh) {
  std::lock_guard<std::mutex> lock(stagedMutex_);
  auto it = stagedAttrs_.find(fh);
  if (it == stagedAttrs_.end()) return;
  auto byNode = stagedByNode_.find(it->second.nodeid);
  if (byNode != stagedByNode_.end() && byNode->second == fh) stagedByNode_.erase(byNode);
  stagedAttrs_.erase(it);
}

void Session::ServeForget(const uint8_t* message, size_t lengthBytes) {
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  servedForgets_.fetch_add(1, std::memory_order_relaxed);
  if (hdr->opcode == FUSE_FORGET) {
    if (lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_forget_in)) return;
    options_.meta->Forget(hdr->nodeid, reinterpret_cast<const fuse_forget_in*>(message + sizeof(fuse_in_header))->nlookup);
    ForgetCachedNode(hdr->nodeid);
    return;
  }
  if (lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_batch_forget_in)) return;
  const auto* batch = reinterpret_cast<const fuse_batch_forget_in*>(message + sizeof(fuse_in_header));
  const size_t room = (lengthBytes - sizeof(fuse_in_header) - sizeof(fuse_batch_forget_in)) / sizeof(fuse_forget_one);
  const auto* one = reinterpret_cast<const fuse_forget_one*>(message + sizeof(fuse_in_header) + sizeof(fuse_batch_forget_in));
  for (size_t i = 0; i < std::min<size_t>(batch->count, room); i++) {
    options_.meta->Forget(one[i].nodeid, one[i].nlookup);
    ForgetCachedNode(one[i].nodeid);
  }
}

uint32_t Session::ReadOpenFlags(uint64_t nodeid, uint64_t fh, uint64_t contentKey, uint64_t sizeBytes, bool cacheable) {
  return pageCache_.ReadOpen(nodeid, fh, contentKey, sizeBytes, cacheable);
}

bool Session::TryWriterOpen(uint64_t nodeid) { return pageCache_.TryWriterOpen(nodeid); }

void Session::PagesRead(uint64_t fh) { pageCache_.PagesRead(fh); }

bool Session::HasPageCacheOpens(uint64_t nodeid) { return pageCache_.HasPageCacheOpens(nodeid); }

void Session::WriterReleased(uint64_t nodeid) { pageCache_.WriterReleased(nodeid); }

void Session::HoldOffPageCache(const std::string& path, uint64_t holdMs) { pageCache_.HoldOff(path, holdMs); }

void Session::ForgetToldSize(uint64_t nodeid) { pageCache_.ForgetToldSize(nodeid); }

void Session::NotifyAttrsStale(uint64_t nodeid) {
  if (fd_ < 0) return;
  fuse_out_header out{};
  fuse_notify_inval_inode_out body{};
  body.ino = nodeid;
  body.off = -1;  // attributes only: no page is touched (no lock a READ in flight could hold)
  body.len = 0;
  out.unique = 0;  // a notice, not a reply
  out.error = FUSE_NOTIFY_INVAL_INODE;
  out.len = sizeof out + sizeof body;
  struct iovec iov[2] = {{&out, sizeof out}, {&body, sizeof body}};
  ssize_t n;
  do {
    n = writev(fd_, iov, 2);
  } while (n < 0 && errno == EINTR);
  // ENOENT: the kernel holds no such inode now (nothing cached to make stale).
  if (n < 0 && errno != ENOENT) replyErrors_.fetch_add(1, std::memory_order_relaxed);
}

uint64_t Session::AttrValidMsFor(uint64_t nodeid, uint64_t sizeBytes) { return pageCache_.AttrValidMsFor(nodeid, sizeBytes); }

void Session::ReleaseCachedOpen(uint64_t fh) { pageCache_.Released(fh); }

void Session::ForgetCachedNode(uint64_t nodeid) { pageCache_.NodeForgotten(nodeid); }

bool Session::ServeOpen(const uint8_t* message, size_t lengthBytes) {
  if (!options_.meta || !options_.nativeOpens || !options_.arena || lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_open_in)) {
    return false;
  }
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  const auto* in = reinterpret_cast<const fuse_open_in*>(message + sizeof(fuse_in_header));
  // Only plain reads: a writer, O_TRUNC or O_APPEND is JS's (write sessions, EPERM).
  if ((in->flags & O_ACCMODE) != O_RDONLY || (in->flags & (O_TRUNC | O_APPEND)) != 0) return false;
  CachedAttr a;
  if (!options_.meta->AttrOf(hdr->nodeid, &a) || !a.isFile || a.blockHandle == 0) return false;
  NativeOpen open;
  open.attr = a;
  open.nodeid = hdr->nodeid;
  // Keep: the block's pages stay until Unhold, even if the store evicts or deletes it meanwhile; a
  // handle whose block already went is stale (the generation check), and JS opens it instead.
  if (a.sizeBytes == 0 || options_.arena->Keep(a.blockHandle, &open.hold) != Status::kOk) return false;
  ReadSource source;
  source.sizeBytes = a.sizeBytes;
  uint64_t total = 0;
  for (const Extent& e : open.hold.extents) {
    source.extents.emplace_back(e.arenaOffsetBytes, e.lengthBytes);
    total += e.lengthBytes;
  }
  // A block of another size (never: content is immutable) or too fragmented for one writev per read.
  if (open.hold.sizeBytes != a.sizeBytes || total < a.sizeBytes || source.extents.size() >= static_cast<size_t>(kReplyIovMax - 1)) {
    options_.arena->Unhold(open.hold);
    return false;
  }
  uint64_t fh;
  {
    std::lock_guard<std::mutex> lock(nativeMutex_);
    if (nativeOpens_.size() >= kNativeOpensMax) {
      options_.arena->Unhold(open.hold);
      return false;
    }
    fh = nextNativeFh_++;
    if (touched_.size() < kTouchedMax) touched_.push_back(a.blockHandle);
    else touchedDropped_++;
    nativeOpens_.emplace(fh, std::move(open));
  }
  if (SetReadSource(fh, std::move(source)) != Status::kOk || MarkReadOnly(fh) != Status::kOk) {
    ServeNativeRelease(0, fh);  // undo: no source, no hold
    return false;
  }
  OpenOut out{};
  out.fh = fh;
  out.open_flags = ReadOpenFlags(hdr->nodeid, fh, a.blockHandle, a.sizeBytes);
  if (out.open_flags == kReadOpenConflict) {
    ServeNativeRelease(0, fh);  // another content is open on the node: JS gives the name a new one
    return false;
  }
  struct iovec iov = {&out, sizeof out};
  if (Reply(hdr->unique, 0, &iov, 1) == Status::kStale) {
    ReleaseCachedOpen(fh);
    ServeNativeRelease(0, fh);  // interrupted: no release will come for it
    return true;
  }
  servedOpens_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Session::ServeOpendir(const uint8_t* message, size_t lengthBytes) {
  if (!options_.meta || lengthBytes < sizeof(fuse_in_header) + sizeof(fuse_open_in)) return false;
  const auto* hdr = reinterpret_cast<const fuse_in_header*>(message);
  std::vector<std::pair<std::string, uint8_t>> entries{{".", kListDir}, {"..", kListDir}};
  if (!options_.meta->ListingOf(hdr->nodeid, &entries)) return false;  // not listed: JS lists it
  uint64_t fh;
  {
    std::lock_guard<std::mutex> lock(nativeMutex_);
    if (nativeDirs_.size() >= kNativeDirsMax) return false;  // JS has its own bound (EMFILE)
    fh = nextNativeFh_++;
    nativeDirs_.emplace(fh, std::move(entries));
  }
  OpenOut out{};
  out.fh = fh;
  struct iovec iov = {&out, sizeof out};
  if (Reply(hdr->unique, 0, &iov, 1) == Status::kStale) {
    std::lock_guard<std::mutex> lock(nativeMutex_);  // interrupted: no RELEASEDIR will come for it
    nativeDirs_.erase(fh);
    return true;
  }
  servedOpendirs_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Session::ServeReaddir(uint64_t unique, uint64_t fh, uint64_t offset, uint32_t sizeBytes) {
  // struct fuse_dirent: ino, off (of the next entry), namelen, type, then the name, padded to 8 bytes.
  constexpr size_t kDirentHeaderBytes = 24;
  constexpr uint64_t kUnknownIno = 0xffffffff;  // as JS: the kernel asks with LOOKUP (ino in the attr)
  std::vector<uint8_t> out;
  {
    std::lock_guard<std::mutex> lock(nativeMutex_);
    auto it = nativeDirs_.find(fh);
    if (it == nativeDirs_.end()) {
      ReplyError(unique, EBADF);
      return;
    }
    const auto& entries = it->second;
    out.reserve(std::min<size_t>(sizeBytes, 64 * 1024));
    for (uint64_t i = offset; i < entries.size(); i++) {
      const std::string& name = entries[i].first;
      const size_t record = (kDirentHeaderBytes + name.size() + 7) & ~size_t{7};
      if (out.size() + record > sizeBytes) break;
      const size_t at = out.size();
      out.resize(at + record, 0);
      const uint64_t next = i + 1;
      const uint32_t nameBytes = static_cast<uint32_t>(name.size());
      const uint32_t type = entries[i].second;
      memcpy(&out[at], &kUnknownIno, 8);
      memcpy(&out[at + 8], &next, 8);
      memcpy(&out[at + 16], &nameBytes, 4);
      memcpy(&out[at + 20], &type, 4);
      memcpy(&out[at + kDirentHeaderBytes], name.data(), name.size());
    }
  }
  struct iovec iov = {out.data(), out.size()};
  Reply(unique, 0, &iov, out.empty() ? 0 : 1);
  servedReaddirs_.fetch_add(1, std::memory_order_relaxed);
}

// Ends a native open; unique 0: no request to answer (an open whose reply never arrived).
bool Session::ServeNativeRelease(uint64_t unique, uint64_t fh) {
  ClearReadSource(fh);
  ArenaHold hold;
  {
    std::lock_guard<std::mutex> lock(nativeMutex_);
    auto it = nativeOpens_.find(fh);
    if (it == nativeOpens_.end()) return false;
    hold = std::move(it->second.hold);
    nativeOpens_.erase(it);
  }
  options_.arena->Unhold(hold);
  if (unique != 0) {
    Reply(unique, 0, nullptr, 0);
    servedReleases_.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

std::vector<uint64_t> Session::DrainTouched() {
  std::vector<uint64_t> out;
  std::lock_guard<std::mutex> lock(nativeMutex_);
  out.swap(touched_);
  return out;
}

Status Session::Reply(uint64_t unique, int32_t error, const struct iovec* payload, int payloadCount) {
  if (fd_ < 0) return Status::kClosed;
  if (error < 0 || payloadCount < 0 || payloadCount >= kReplyIovMax) return Status::kInvalid;
  if (Uring* u = uring_.load(std::memory_order_acquire)) {
    Status st;
    if (u->Reply(unique, error, payload, payloadCount, &st)) return st;
  }
  struct iovec iov[kReplyIovMax];
  fuse_out_header out{};
  out.unique = unique;
  out.error = -error;
  size_t total = sizeof out;
  iov[0] = {&out, sizeof out};
  int count = 1;
  if (error == 0) {
    for (int i = 0; i < payloadCount; i++) {
      if (payload[i].iov_len == 0) continue;
      iov[count++] = payload[i];
      total += payload[i].iov_len;
    }
  }
  out.len = static_cast<uint32_t>(total);
  ssize_t n;
  do {
    n = writev(fd_, iov, count);  // a reply is one write: the stop signal must not drop it
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    // ENOENT: the request was interrupted and is gone; anything else is counted.
    if (errno != ENOENT) replyErrors_.fetch_add(1, std::memory_order_relaxed);
    return errno == ENOENT ? Status::kStale : Status::kIo;
  }
  return Status::kOk;
}

void Session::ReplyError(uint64_t unique, int32_t error) { Reply(unique, error, nullptr, 0); }

Status Session::SetReadSource(uint64_t fh, ReadSource source) {
  if (arenaBase_ == nullptr) return Status::kClosed;
  if (source.extents.size() > kExtentsPerSourceMax) return Status::kInvalid;
  uint64_t total = 0;
  for (const auto& [offset, length] : source.extents) {
    if (offset > arenaLength_ || length > arenaLength_ - offset) return Status::kRange;
    total += length;
  }
  if (total < source.sizeBytes) return Status::kRange;
  std::unique_lock<std::shared_mutex> lock(sourcesMutex_);
  if (sources_.size() >= kReadSourcesMax && sources_.count(fh) == 0) return Status::kNoSpace;
  sources_[fh] = std::make_shared<const ReadSource>(std::move(source));
  return Status::kOk;
}

Status Session::SetLoadingReadSource(uint64_t fh, uint64_t handle) {
  if (arenaBase_ == nullptr || options_.arena == nullptr || handle == 0) return Status::kClosed;
  auto hold = std::make_shared<ArenaHold>();
  Status s = options_.arena->Keep(handle, hold.get());
  if (s != Status::kOk) return s;
  std::shared_ptr<Arena> arena = options_.arena;
  ReadSource source;
  source.sizeBytes = hold->sizeBytes;
  for (const Extent& e : hold->extents) source.extents.emplace_back(e.arenaOffsetBytes, e.lengthBytes);
  source.gateHandle = handle;
  // The last reference (a read in flight may hold one after the source is cleared) gives the pages back.
  source.gateHold = std::shared_ptr<const void>(hold.get(), [hold, arena](const void*) { arena->Unhold(*hold); });
  return SetReadSource(fh, std::move(source));
}

void Session::ClearReadSource(uint64_t fh) {
  std::unique_lock<std::shared_mutex> lock(sourcesMutex_);
  sources_.erase(fh);
  readOnly_.erase(fh);
}

Status Session::MarkReadOnly(uint64_t fh) {
  std::unique_lock<std::shared_mutex> lock(sourcesMutex_);
  if (readOnly_.size() >= kReadSourcesMax && readOnly_.count(fh) == 0) return Status::kNoSpace;
  readOnly_.insert(fh);
  return Status::kOk;
}

Status Session::OpenBacking(int fd, int32_t* backingId, std::string* error) {
  BackingMap map{};
  map.fd = fd;
  const int id = ioctl(fd_, kIocBackingOpen, &map);
  if (id < 0) {
    *error = Errno("FUSE_DEV_IOC_BACKING_OPEN");
    return Status::kIo;
  }
  *backingId = id;
  return Status::kOk;
}

Status Session::CloseBacking(int32_t backingId) {
  uint32_t id = static_cast<uint32_t>(backingId);
  return ioctl(fd_, kIocBackingClose, &id) == 0 ? Status::kOk : Status::kIo;
}

Status Session::WriteArenaTo(int fd, const ReadSource& source, std::string* error) const {
  if (arenaBase_ == nullptr) return Status::kClosed;
  uint64_t at = 0;
  for (const auto& [offset, length] : source.extents) {
    if (at >= source.sizeBytes) break;
    if (offset > arenaLength_ || length > arenaLength_ - offset) return Status::kRange;
    const uint8_t* p = arenaBase_ + offset;
    uint64_t left = std::min(length, source.sizeBytes - at);
    while (left > 0) {
      const ssize_t n = pwrite(fd, p, static_cast<size_t>(left), static_cast<off_t>(at));
      if (n < 0) {
        if (errno == EINTR) continue;
        *error = Errno("pwrite to the backing file");
        return Status::kIo;
      }
      p += n;
      at += static_cast<uint64_t>(n);
      left -= static_cast<uint64_t>(n);
    }
  }
  if (at < source.sizeBytes) return Status::kRange;
  return Status::kOk;
}

Negotiated Session::negotiated() const {
  Negotiated n;
  {
    std::shared_lock<std::shared_mutex> lock(negotiatedMutex_);
    n = negotiated_;
  }
  // A registration the kernel refused (it arrives after the start) leaves the connection on /dev/fuse.
  const Uring* u = uring_.load(std::memory_order_acquire);
  if (n.uring && (u == nullptr || !u->stats().active)) {
    n.uring = false;
    if (n.uringWhyNot.empty()) n.uringWhyNot = "the kernel refused a queue's registration; requests go through /dev/fuse";
  }
  return n;
}

SessionStats Session::stats() const {
  SessionStats s;
  s.requests = requests_.load();
  s.forwarded = forwarded_.load();
  s.servedReads = servedReads_.load();
  s.servedReadBytes = servedReadBytes_.load();
  s.gatedReads = gatedReads_.load();
  s.gatedToJs = gatedToJs_.load();
  s.servedFlushes = servedFlushes_.load();
  s.servedWrites = servedWrites_.load();
  s.servedWriteBytes = servedWriteBytes_.load();
  s.replyErrors = replyErrors_.load();
  s.servedLookups = servedLookups_.load();
  s.servedAbsentLookups = servedAbsentLookups_.load();
  s.servedGetattrs = servedGetattrs_.load();
  s.servedForgets = servedForgets_.load();
  s.servedOpens = servedOpens_.load();
  s.servedReleases = servedReleases_.load();
  s.earlyReleases = earlyReleases_.load();
  const PageCacheFigures pc = pageCache_.figures();
  s.pageCacheOpens = pc.opens;
  s.pageCacheDirect = pc.direct;
  s.pageCacheAttrNotices = pc.attrNotices;
  s.readOpenConflicts = pc.conflicts;
  s.servedOpendirs = servedOpendirs_.load();
  s.servedReaddirs = servedReaddirs_.load();
  s.spinHits = spinHits_.load();
  s.spinTimeouts = spinTimeouts_.load();
  if (const Uring* u = uring_.load(std::memory_order_acquire)) s.uring = u->stats();
  {
    std::lock_guard<std::mutex> lock(nativeMutex_);
    s.nativeOpensNow = nativeOpens_.size();
    s.touchedDropped = touchedDropped_;
  }
  return s;
}

}  // namespace cascade::engine

#include "uring.h"

#include <errno.h>
#include <string.h>

#if CASCADE_WITH_URING
#include <liburing.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <system_error>
#include <fstream>
#endif

#include "../core/check.h"

namespace cascade::engine {

#if CASCADE_WITH_URING

namespace {

// The kernel's layouts (include/uapi/linux/fuse.h, 7.42); Debian's header predates them.
constexpr size_t kInOutHeaderBytes = 128;
constexpr size_t kOpInBytes = 128;
struct EntInOut {
  uint64_t flags;
  uint64_t commitId;
  uint32_t payloadBytes;
  uint32_t padding;
  uint64_t reserved;
};
struct ReqHeader {
  uint8_t inOut[kInOutHeaderBytes];  // fuse_in_header from the kernel, fuse_out_header back
  uint8_t opIn[kOpInBytes];          // the op's fixed argument struct (fuse_read_in, ...)
  EntInOut ent;
};
static_assert(sizeof(ReqHeader) == 288, "struct fuse_uring_req_header");
struct CmdReq {
  uint64_t flags;
  uint64_t commitId;
  uint16_t qid;
  uint8_t padding[6];
};
static_assert(sizeof(CmdReq) == 24, "struct fuse_uring_cmd_req");
constexpr uint32_t kCmdRegister = 1;
constexpr uint32_t kCmdCommitAndFetch = 2;

// One page before each payload buffer holds the entry's header (at its start) and, at its end, the
// request's fuse_in_header and op struct copied in front of the payload, so the handler gets the
// /dev/fuse layout without copying the payload (a 1 MiB write stays where the kernel put it).
constexpr size_t kLeadBytes = 4096;
static_assert(sizeof(ReqHeader) + sizeof(fuse_in_header) + kOpInBytes <= kLeadBytes, "lead page layout");

constexpr uint64_t kEventTag = 0;  // user_data of the eventfd poll (entries are pointers, never 0)

thread_local Uring::Entry* tlsCurrent = nullptr;  // the ring request this thread is handling

unsigned PossibleCpus() {
  // The kernel makes num_possible_cpus() queues: count the ranges of /sys/.../possible ("0-3,8-11").
  std::ifstream f("/sys/devices/system/cpu/possible");
  std::string text;
  unsigned count = 0;
  if (f && std::getline(f, text)) {
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find(',', at);
      if (end == std::string::npos) end = text.size();
      const std::string part = text.substr(at, end - at);
      const size_t dash = part.find('-');
      try {
        if (dash == std::string::npos) count += 1;
        else count += static_cast<unsigned>(std::stoul(part.substr(dash + 1)) - std::stoul(part.substr(0, dash)) + 1);
      } catch (...) {
        return static_cast<unsigned>(sysconf(_SC_NPROCESSORS_CONF));
      }
      at = end + 1;
    }
  }
  return count > 0 ? count : static_cast<unsigned>(sysconf(_SC_NPROCESSORS_CONF));
}

}  // namespace

struct Uring::Entry {
  Queue* queue = nullptr;
  uint8_t* base = nullptr;  // kLeadBytes + payload, one mapping
  ReqHeader* header = nullptr;
  uint8_t* payload = nullptr;
  struct iovec iov[2];
  uint64_t commitId = 0;  // the request it holds (0: none yet, registering)
};

struct Uring::Queue {
  unsigned qid = 0;
  struct io_uring ring {};
  bool ringUp = false;
  int eventFd = -1;
  std::vector<Entry> entries;
  std::thread thread;
  // Answers given on other threads, for this thread to commit.
  std::mutex readyMutex;
  std::vector<Entry*> ready;
  std::vector<Entry*> readySwap;
};

bool Uring::Available(std::string* why) {
  struct io_uring ring;
  struct io_uring_params p {};
  p.flags = IORING_SETUP_SQE128;
  const int rc = io_uring_queue_init_params(2, &ring, &p);
  if (rc < 0) {
    *why = std::string("cannot create an io_uring with 128-byte entries: ") + strerror(-rc);
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

namespace {

void PrepCmd(struct io_uring_sqe* sqe, int fd, uint32_t op, Uring::Entry* e, uint16_t qid, uint64_t commitId) {
  memset(sqe, 0, 128);  // SQE128: the command area is the second half
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = op;
  sqe->user_data = reinterpret_cast<uint64_t>(e);
  auto* cmd = reinterpret_cast<CmdReq*>(sqe->cmd);
  cmd->qid = qid;
  cmd->commitId = commitId;
}

// Hands entry e's two buffers to the kernel and waits for its first request.
void PrepRegister(struct io_uring_sqe* sqe, int fd, Uring::Entry* e) {
  PrepCmd(sqe, fd, kCmdRegister, e, static_cast<uint16_t>(e->queue->qid), 0);
  sqe->addr = reinterpret_cast<uint64_t>(e->iov);
  sqe->len = 2;
}

// Commits the answer written into entry e and waits for its next request.
void PrepCommit(struct io_uring_sqe* sqe, int fd, Uring::Entry* e) {
  PrepCmd(sqe, fd, kCmdCommitAndFetch, e, static_cast<uint16_t>(e->queue->qid), e->commitId);
}

}  // namespace

Status Uring::Create(int fuseFd, unsigned depth, size_t payloadBytes, Handler handler, std::unique_ptr<Uring>* out,
                     std::string* error) {
  if (depth == 0 || depth > kUringDepthMax) {
    *error = "io_uring depth must be 1.." + std::to_string(kUringDepthMax);
    return Status::kInvalid;
  }
  const unsigned queues = PossibleCpus();
  if (queues == 0 || queues > kUringQueuesMax) {
    *error = "io_uring: " + std::to_string(queues) + " possible CPUs (at most " + std::to_string(kUringQueuesMax) + ")";
    return Status::kInvalid;
  }
  std::unique_ptr<Uring> u(new Uring());
  u->fuseFd_ = fuseFd;
  u->depth_ = depth;
  u->payloadBytes_ = payloadBytes;
  u->handler_ = std::move(handler);
  // Set up every ring and buffer here, so a failure leaves the kernel with no registration at all.
  for (unsigned qid = 0; qid < queues; qid++) {
    auto q = std::make_unique<Queue>();
    q->qid = qid;
    struct io_uring_params p {};
    p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
    p.cq_entries = 2 * (depth + 1);
    int rc = io_uring_queue_init_params(depth + 1, &q->ring, &p);
    if (rc < 0) {
      *error = std::string("io_uring_queue_init: ") + strerror(-rc);
      u->queues_.push_back(std::move(q));
      u->Stop();
      return Status::kIo;
    }
    q->ringUp = true;
    q->eventFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (q->eventFd < 0) {
      *error = std::string("eventfd: ") + strerror(errno);
      u->queues_.push_back(std::move(q));
      u->Stop();
      return Status::kIo;
    }
    q->entries.resize(depth);
    for (Entry& e : q->entries) {
      void* m = mmap(nullptr, kLeadBytes + payloadBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) {
        *error = std::string("mmap of io_uring buffers: ") + strerror(errno);
        u->queues_.push_back(std::move(q));
        u->Stop();
        return Status::kNoSpace;
      }
      e.queue = q.get();
      e.base = static_cast<uint8_t*>(m);
      e.header = reinterpret_cast<ReqHeader*>(e.base);
      e.payload = e.base + kLeadBytes;
      e.iov[0] = {e.header, sizeof(ReqHeader)};
      e.iov[1] = {e.payload, payloadBytes};
    }
    u->queues_.push_back(std::move(q));
  }
  *out = std::move(u);
  return Status::kOk;
}

Status Uring::Launch(std::string* error) {
  // Register: each queue's entries, from its own thread (the kernel copies requests in the context of
  // the task that submitted the fetch). A registration completes asynchronously; a refused one comes
  // back as a completion, which the thread counts (the kernel then goes on with /dev/fuse).
  unsigned launched = 0;
  for (auto& qp : queues_) {
    Queue* q = qp.get();
    try {
      q->thread = std::thread([this, q] {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(q->qid, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: a cpuset may exclude it
        struct io_uring_sqe* sqe = io_uring_get_sqe(&q->ring);
        Check(sqe != nullptr, "io_uring: room for the eventfd poll");
        io_uring_prep_poll_multishot(sqe, q->eventFd, POLLIN);
        sqe->user_data = kEventTag;
        for (Entry& e : q->entries) {
          sqe = io_uring_get_sqe(&q->ring);
          Check(sqe != nullptr, "io_uring: one submission slot per entry");
          PrepRegister(sqe, fuseFd_, &e);
        }
        io_uring_submit(&q->ring);
        {
          // Notified under the lock: Launch may return (and a later Stop run) as soon as it sees the count.
          std::lock_guard<std::mutex> lock(startMutex_);
          startedCount_++;
          started_.notify_all();
        }
        Run(q);
      });
    } catch (const std::system_error& e) {
      // No thread (a pids limit): the queues started so far stop; the caller turns io_uring off.
      *error = std::string("cannot start io_uring queue thread ") + std::to_string(q->qid) + ": " + e.what();
      {
        std::unique_lock<std::mutex> lock(startMutex_);
        started_.wait(lock, [&] { return startedCount_ == launched; });
      }
      Stop();
      return Status::kIo;
    }
    launched++;
  }
  std::unique_lock<std::mutex> lock(startMutex_);
  started_.wait(lock, [&] { return startedCount_ == queues_.size(); });
  return Status::kOk;
}

bool Uring::Refuse(int fuseFd) {
  struct io_uring ring;
  struct io_uring_params p {};
  p.flags = IORING_SETUP_SQE128;
  if (io_uring_queue_init_params(2, &ring, &p) < 0) return false;
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  bool refused = false;
  if (sqe != nullptr) {
    // A registration without its two buffers: the kernel answers EINVAL and stops waiting for rings.
    PrepCmd(sqe, fuseFd, kCmdRegister, reinterpret_cast<Uring::Entry*>(1), 0, 0);
    sqe->len = 0;
    struct io_uring_cqe* cqe = nullptr;
    if (io_uring_submit_and_wait(&ring, 1) >= 0 && io_uring_peek_cqe(&ring, &cqe) == 0 && cqe != nullptr) {
      refused = cqe->res < 0;
      io_uring_cqe_seen(&ring, cqe);
    }
  }
  io_uring_queue_exit(&ring);
  return refused;
}

void Uring::Run(Queue* q) {
  while (!stopping_.load(std::memory_order_acquire)) {
    const int rc = io_uring_submit_and_wait(&q->ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    unsigned head;
    unsigned seen = 0;
    struct io_uring_cqe* cqe;
    bool rearmPoll = false;
    bool drain = false;
    io_uring_for_each_cqe(&q->ring, head, cqe) {
      seen++;
      if (cqe->user_data == kEventTag) {
        drain = true;
        if ((cqe->flags & IORING_CQE_F_MORE) == 0) rearmPoll = true;
        continue;
      }
      Entry* e = reinterpret_cast<Entry*>(cqe->user_data);
      if (cqe->res < 0) {
        // EINTR/EAGAIN: try the command again; ENOTCONN/ECANCELED: the connection or ring is going.
        if (cqe->res == -EINTR || cqe->res == -EAGAIN) {
          struct io_uring_sqe* sqe = io_uring_get_sqe(&q->ring);
          Check(sqe != nullptr, "io_uring: retry slot");
          if (e->commitId == 0) PrepRegister(sqe, fuseFd_, e);
          else PrepCommit(sqe, fuseFd_, e);
          continue;
        }
        // The kernel is done with the entry: it is not submitted again.
        if (e->commitId == 0) registerErrors_.fetch_add(1, std::memory_order_relaxed);
        else if (cqe->res != -ENOTCONN && cqe->res != -ECANCELED && cqe->res != -ENODEV) errors_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      // A request: the kernel filled the header and the payload.
      const auto* in = reinterpret_cast<const fuse_in_header*>(e->header->inOut);
      const uint32_t payloadBytes = e->header->ent.payloadBytes;
      e->commitId = e->header->ent.commitId;
      Check(e->commitId == in->unique, "io_uring: commit id is the request's unique");
      const size_t fixed = in->len >= sizeof(fuse_in_header) + payloadBytes ? in->len - sizeof(fuse_in_header) - payloadBytes : SIZE_MAX;
      requests_.fetch_add(1, std::memory_order_relaxed);
      tlsCurrent = e;
      if (fixed > kOpInBytes || payloadBytes > payloadBytes_) {
        // Not the framing the kernel promises: answer, never guess.
        Status st;
        FillReply(e, in->unique, EIO, nullptr, 0, &st);
      } else {
        uint8_t* message = e->payload - fixed - sizeof(fuse_in_header);
        memcpy(message, in, sizeof(fuse_in_header));
        memcpy(message + sizeof(fuse_in_header), e->header->opIn, fixed);
        handler_(message, sizeof(fuse_in_header) + fixed + payloadBytes);
        if (tlsCurrent != nullptr) {
          // Every path answers or hands off; a request left unanswered would hold its entry forever.
          Status st;
          FillReply(e, e->commitId, EIO, nullptr, 0, &st);
        }
      }
      tlsCurrent = nullptr;
    }
    io_uring_cq_advance(&q->ring, seen);
    if (drain) {
      uint64_t count;
      while (read(q->eventFd, &count, sizeof count) == sizeof count) {
      }
      {
        std::lock_guard<std::mutex> lock(q->readyMutex);
        q->readySwap.swap(q->ready);
      }
      for (Entry* e : q->readySwap) {
        struct io_uring_sqe* sqe = io_uring_get_sqe(&q->ring);
        Check(sqe != nullptr, "io_uring: one submission slot per entry");
        PrepCommit(sqe, fuseFd_, e);
      }
      q->readySwap.clear();
    }
    if (rearmPoll && !stopping_.load(std::memory_order_acquire)) {
      struct io_uring_sqe* sqe = io_uring_get_sqe(&q->ring);
      Check(sqe != nullptr, "io_uring: room for the eventfd poll");
      io_uring_prep_poll_multishot(sqe, q->eventFd, POLLIN);
      sqe->user_data = kEventTag;
    }
  }
}

void Uring::FillReply(Entry* e, uint64_t unique, int32_t error, const struct iovec* payload, int payloadCount,
                      Status* status) {
  size_t total = 0;
  if (error == 0) {
    for (int i = 0; i < payloadCount; i++) total += payload[i].iov_len;
  }
  bool oversize = false;
  if (total > payloadBytes_) {  // never for a request the kernel framed: its answer fits its buffer
    error = EIO;
    total = 0;
    oversize = true;
  }
  size_t at = 0;
  if (error == 0) {
    for (int i = 0; i < payloadCount; i++) {
      if (payload[i].iov_len == 0) continue;
      memcpy(e->payload + at, payload[i].iov_base, payload[i].iov_len);
      at += payload[i].iov_len;
    }
  }
  fuse_out_header out{};
  out.unique = unique;
  out.error = -error;
  out.len = static_cast<uint32_t>(sizeof out + total);
  memcpy(e->header->inOut, &out, sizeof out);
  e->header->ent.payloadBytes = static_cast<uint32_t>(total);
  *status = oversize ? Status::kInvalid : Status::kOk;
  if (tlsCurrent == e) {
    // On the entry's own queue thread: commit with the next submit (this thread's loop).
    tlsCurrent = nullptr;
    struct io_uring_sqe* sqe = io_uring_get_sqe(&e->queue->ring);
    Check(sqe != nullptr, "io_uring: one submission slot per entry");
    PrepCommit(sqe, fuseFd_, e);
    return;
  }
  crossThreadReplies_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(e->queue->readyMutex);
    e->queue->ready.push_back(e);
  }
  const uint64_t one = 1;
  if (write(e->queue->eventFd, &one, sizeof one) != sizeof one) errors_.fetch_add(1, std::memory_order_relaxed);
}

bool Uring::Reply(uint64_t unique, int32_t error, const struct iovec* payload, int payloadCount, Status* status) {
  Entry* e = tlsCurrent;
  if (e != nullptr && e->commitId == unique) {
    FillReply(e, unique, error, payload, payloadCount, status);
    return true;
  }
  // Handed off: held under the lock while filling, so Stop cannot free the entry meanwhile.
  std::lock_guard<std::mutex> lock(handedMutex_);
  auto it = handed_.find(unique);
  if (it == handed_.end()) return false;
  e = it->second;
  handed_.erase(it);
  if (stopped_.load()) {
    *status = Status::kClosed;
    return true;
  }
  FillReply(e, unique, error, payload, payloadCount, status);
  return true;
}

void Uring::HandOff(uint64_t unique) {
  Entry* e = tlsCurrent;
  if (e == nullptr || e->commitId != unique) return;  // not a ring request (it came on /dev/fuse)
  tlsCurrent = nullptr;
  std::lock_guard<std::mutex> lock(handedMutex_);
  handed_[unique] = e;
}

void Uring::Stop() {
  if (stopped_.load()) return;
  stopping_.store(true, std::memory_order_release);
  for (auto& q : queues_) {
    if (q->eventFd >= 0) {
      const uint64_t one = 1;
      (void)!write(q->eventFd, &one, sizeof one);
    }
  }
  for (auto& q : queues_) {
    if (q->thread.joinable()) q->thread.join();
  }
  std::lock_guard<std::mutex> lock(handedMutex_);
  stopped_.store(true);
  handed_.clear();
  // Exiting a ring cancels its commands in the kernel before the buffers they name are unmapped.
  for (auto& q : queues_) {
    if (q->ringUp) io_uring_queue_exit(&q->ring);
    q->ringUp = false;
    if (q->eventFd >= 0) close(q->eventFd);
    q->eventFd = -1;
    for (Entry& e : q->entries) {
      if (e.base != nullptr) munmap(e.base, kLeadBytes + payloadBytes_);
      e.base = nullptr;
    }
  }
}

Uring::~Uring() { Stop(); }

UringStats Uring::stats() const {
  UringStats s;
  s.queues = static_cast<unsigned>(queues_.size());
  s.depth = depth_;
  s.registerErrors = registerErrors_.load();
  s.active = !stopped_.load() && !queues_.empty() && s.registerErrors == 0;
  s.requests = requests_.load();
  s.crossThreadReplies = crossThreadReplies_.load();
  s.errors = errors_.load();
  {
    std::lock_guard<std::mutex> lock(handedMutex_);
    s.handedNow = handed_.size();
  }
  return s;
}

#else  // !CASCADE_WITH_URING

struct Uring::Entry {};
struct Uring::Queue {};

bool Uring::Available(std::string* why) {
  *why = "this build has no io_uring support (liburing-dev was missing when it was built)";
  return false;
}

Status Uring::Create(int, unsigned, size_t, Handler, std::unique_ptr<Uring>*, std::string* error) {
  Available(error);
  return Status::kInvalid;
}
Status Uring::Launch(std::string*) { return Status::kInvalid; }

Uring::~Uring() = default;
bool Uring::Refuse(int) { return false; }
bool Uring::Reply(uint64_t, int32_t, const struct iovec*, int, Status*) { return false; }
void Uring::HandOff(uint64_t) {}
void Uring::Stop() {}
void Uring::Run(Queue*) {}
void Uring::FillReply(Entry*, uint64_t, int32_t, const struct iovec*, int, Status*) {}
UringStats Uring::stats() const { return {}; }

#endif

}  // namespace cascade::engine

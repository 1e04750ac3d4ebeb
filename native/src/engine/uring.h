// FUSE over io_uring (Linux 6.14+, module parameter fuse.enable_uring): after INIT the kernel hands
// requests to one queue per possible CPU, each a ring of entries (a header buffer and a payload
// buffer the kernel fills), and takes the answer with the next fetch in one io_uring command
// (COMMIT_AND_FETCH) instead of a read() and a writev() on /dev/fuse. A request goes to the queue of
// the CPU its caller runs on, so each queue's thread is pinned to that CPU.
//
// Threads: each queue's thread is the only one that submits to its ring. An answer given on another
// thread (the JS thread) is written into its entry there and handed over through a list and an
// eventfd, so the kernel's copy of the next request runs in the queue thread's context.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../core/status.h"

namespace cascade::engine {

// 7.42: the INIT flag (in flags2) by which server and kernel agree on io_uring.
constexpr uint64_t kFuseOverIoUring = 1ULL << 41;

constexpr unsigned kUringDepthMax = 256;      // entries per queue
constexpr unsigned kUringDepthDefault = 16;   // requests one CPU may have in flight (JS ones included)
constexpr unsigned kUringQueuesMax = 1024;    // one per possible CPU

struct UringStats {
  bool active = false;  // every queue registered: requests come through the rings
  unsigned queues = 0;
  unsigned depth = 0;
  uint64_t requests = 0;
  uint64_t crossThreadReplies = 0;  // answers handed to a queue thread (JS's)
  uint64_t errors = 0;              // completions with an error other than the ones of a stop
  uint64_t registerErrors = 0;      // registrations the kernel refused (it then uses /dev/fuse)
  uint64_t handedNow = 0;           // requests waiting for JS's answer now (each holds an entry)
};

class Uring {
 public:
  // Handles one request: the whole message, fuse_in_header first, laid out as /dev/fuse gives it.
  using Handler = std::function<void(uint8_t* message, size_t lengthBytes)>;

  // Whether this build and this process can run it (liburing built in, SQE128 rings allowed); why not.
  static bool Available(std::string* why);

  // Sets up one queue per possible CPU on the connection `fuseFd` (INIT already answered with
  // kFuseOverIoUring), each a ring with `depth` entries of `payloadBytes` (the kernel's largest request
  // or answer). No thread yet: the caller publishes the object (Reply must find it) before Launch.
  static Status Create(int fuseFd, unsigned depth, size_t payloadBytes, Handler handler, std::unique_ptr<Uring>* out,
                       std::string* error);
  // Starts the queue threads, which register their entries and serve; returns once every one has
  // submitted its registration. A refused registration arrives later and turns io_uring off for the
  // connection (the kernel goes on with /dev/fuse; stats count it). Not ok: no thread could start; the
  // started ones are stopped, and the caller must Refuse.
  Status Launch(std::string* error);
  // Turns io_uring off for a connection whose INIT agreed to it but whose queues could not start (a
  // registration the kernel refuses does that), so requests flow through /dev/fuse instead of waiting.
  // False when even that failed: the connection then holds every request, and must be aborted.
  static bool Refuse(int fuseFd);
  ~Uring();
  Uring(const Uring&) = delete;
  Uring& operator=(const Uring&) = delete;

  // Answers `unique` when it came through a ring (true; *status says how); false: not a ring request.
  bool Reply(uint64_t unique, int32_t error, const struct iovec* payload, int payloadCount, Status* status);
  // The request being handled on this thread will be answered on another thread (it goes to JS).
  void HandOff(uint64_t unique);
  // Wakes and joins the queue threads, then frees the rings and buffers. Idempotent.
  void Stop();

  UringStats stats() const;

  struct Entry;
  struct Queue;

 private:
  Uring() = default;
  void Run(Queue* q);
  void FillReply(Entry* e, uint64_t unique, int32_t error, const struct iovec* payload, int payloadCount, Status* status);

  int fuseFd_ = -1;
  unsigned depth_ = 0;
  size_t payloadBytes_ = 0;
  Handler handler_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::atomic<bool> stopping_{false};
  std::mutex startMutex_;
  std::condition_variable started_;
  size_t startedCount_ = 0;
  std::atomic<bool> stopped_{false};

  // Requests handed off to another thread, by unique, until answered.
  mutable std::mutex handedMutex_;
  std::unordered_map<uint64_t, Entry*> handed_;

  std::atomic<uint64_t> requests_{0}, crossThreadReplies_{0}, errors_{0}, registerErrors_{0};
};

}  // namespace cascade::engine

#include "fabric.h"

#include "check.h"
#include "crc32c.h"
#include "record.h"
#include "sha256.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cascade {

namespace {

using Clock = std::chrono::steady_clock;


// Wire format: a fixed header, then a body per type; both ends are the same build (x86-64, little
// endian), fields are copied with memcpy (no alignment assumptions). Every received length is checked.
constexpr uint32_t kMagic = 0x46435343;  // "CSCF"
constexpr uint16_t kWireVersion = 2;
enum : uint16_t { kMsgHold = 1, kMsgHeld = 2, kMsgRelease = 3 };
enum : uint16_t { kHeldOk = 0, kHeldAbsent = 1, kHeldBusy = 2, kHeldFragmented = 3 };

constexpr size_t kMsgBytes = 16384;  // one message buffer: a HELD reply with up to ~1,000 extents
constexpr uint32_t kRecvBuffers = 64;
constexpr uint32_t kSendBuffers = 128;
constexpr size_t kAddressBytesMax = 256;
constexpr uint32_t kPeersMax = 4096;
constexpr size_t kCqEntries = 8192;
constexpr size_t kEndedMax = 4096;
constexpr int kSendGiveUpMs = 10000;
constexpr int kWaitMs = 2;  // longest sleep of an idle progress thread between timeout checks
static_assert(kRecvBuffers + kSendBuffers < kCqEntries, "the CQ holds every message completion");

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint64_t reqId;
};
struct HoldBody {
  uint8_t name[kContentNameBytes];
  uint64_t sizeBytes;
  uint32_t addressBytes;  // the reader's address follows
  uint32_t reserved;
};
constexpr uint16_t kHeldHasCrcs = 1;  // HeldBody.flags: the block's piece CRCs follow the extents

struct HeldBody {
  uint16_t status;
  uint16_t flags;
  uint32_t extentCount;  // (remote offset, length) pairs of u64 follow
  uint64_t holdId;
  uint64_t key;
  uint64_t base;  // remote address of arena byte 0 (0 without FI_MR_VIRT_ADDR)
  uint64_t sizeBytes;
};
struct ReleaseBody {
  uint64_t holdId;
};
constexpr size_t kHeldExtentsMax = (kMsgBytes - sizeof(Header) - sizeof(HeldBody)) / 16;

enum class OpKind : uint8_t { kRecv, kSend, kRead };

// The context of one posted operation. fi_context2 first: providers that need FI_CONTEXT(2) use it.
struct Op {
  fi_context2 ctx;
  OpKind kind;
  uint32_t index = 0;     // recv / send buffer
  uint64_t fetchId = 0;   // read
  uint64_t bytes = 0;     // read
};

struct Piece {
  uint64_t localOffsetBytes;  // in the arena
  uint64_t remoteAddress;
  uint64_t lengthBytes;
};

struct FetchState {
  uint64_t id;
  std::string peerAddress;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint8_t name[kContentNameBytes];
  uint64_t sizeBytes;
  ArenaHold local;
  Fabric::Done done;
  bool doneCalled = false;
  Clock::time_point deadline;     // now: the hold's reply deadline while it is awaited
  Clock::time_point fullDeadline;  // the whole fetch's (the caller's timeout)
  enum Phase { kWaiting, kHoldSent, kReading } phase = kWaiting;
  bool held = false;
  uint64_t holdId = 0;
  uint64_t key = 0;
  std::vector<Piece> pieces;
  size_t nextPiece = 0;
  std::vector<std::unique_ptr<Op>> ops;  // one per posted read; stable addresses
  uint32_t outstanding = 0;
  bool failed = false;
  std::string message;
  // The SHA-256 of the local block, computed on the hasher thread piece by piece as the pieces land
  // in block order, so checking the bytes overlaps the transfer instead of following it.
  Sha256 hasher;
  std::vector<bool> pieceDone;
  size_t hashQueued = 0;        // pieces handed to the hasher, in order
  uint32_t hashOutstanding = 0; // of those, not yet hashed
  std::string digest;           // hex, once the last piece is hashed
  // Streaming (Fabric::Fetch's stream): the local block is marked filling; with the peer's piece
  // CRCs, each CRC piece is published to readers as it passes.
  uint64_t localHandle = 0;
  bool marked = false;
  bool streaming = false;
  bool corrupt = false;
  uint32_t pieceShift = 0;
  std::vector<uint32_t> crcs;
  // The progress thread's: the CRC of the CRC piece being checked and the bytes checked so far.
  uint32_t crcRunning = 0;
  uint64_t crcHashedBytes = 0;
};

struct HashJob {
  uint64_t fetchId;
  FetchState* fetch;  // stays until its hashOutstanding is 0
  const uint8_t* data;
  uint64_t lengthBytes;
  bool last;
};

struct HashResult {
  uint64_t fetchId;
  bool ok;
  std::string digest;  // for the last piece
};

struct PeerState {
  fi_addr_t addr;
  uint32_t active = 0;
  std::deque<uint64_t> waiting;
};

struct HoldState {
  ArenaHold hold;
  Clock::time_point deadline;
};

struct PendingSend {
  fi_addr_t dest;
  std::string bytes;
  Clock::time_point since;
};

struct Command {
  std::string peerAddress;
  uint8_t name[kContentNameBytes];
  uint64_t sizeBytes;
  uint64_t localHandle;
  uint64_t timeoutMs;
  Fabric::Done done;
  bool stream = false;
};

// libfabric is opened at run time, not linked: Debian's libfabric1 needs libpsm_infinipath, whose
// constructor installs SIGINT/SIGTERM/... handlers that call exit(1), so a daemon that merely loaded
// the addon would die on SIGTERM without unmounting or persisting anything. dlopen lets us keep the
// process's signal dispositions around the load (and around fi_getinfo, which starts providers).
// Only these few functions are exported by libfabric; the rest of its API is inline calls through
// the objects' ops tables, which need no symbols.
struct Libfabric {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**) = nullptr;
  void (*freeinfo)(fi_info*) = nullptr;
  fi_info* (*dupinfo)(const fi_info*) = nullptr;
  int (*fabric)(fi_fabric_attr*, fid_fabric**, void*) = nullptr;
  const char* (*strerror)(int) = nullptr;
  std::string error;
};

// Runs `body` with every catchable signal's disposition restored afterwards.
template <typename F>
auto KeepingSignals(F body) -> decltype(body()) {
  struct sigaction saved[NSIG];
  for (int sig = 1; sig < NSIG; sig++) sigaction(sig, nullptr, &saved[sig]);
  auto result = body();
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction now;
    if (sigaction(sig, nullptr, &now) == 0 && now.sa_handler != saved[sig].sa_handler) sigaction(sig, &saved[sig], nullptr);
  }
  return result;
}

const Libfabric& Lib() {
  static const Libfabric lib = [] {
    Libfabric l;
    void* h = KeepingSignals([] { return dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL); });
    if (h == nullptr) {
      const char* why = dlerror();
      l.error = std::string("cannot load libfabric.so.1 (Debian: apt-get install libfabric1): ") + (why ? why : "unknown");
      return l;
    }
    l.getinfo = reinterpret_cast<decltype(l.getinfo)>(dlsym(h, "fi_getinfo"));
    l.freeinfo = reinterpret_cast<decltype(l.freeinfo)>(dlsym(h, "fi_freeinfo"));
    l.dupinfo = reinterpret_cast<decltype(l.dupinfo)>(dlsym(h, "fi_dupinfo"));
    l.fabric = reinterpret_cast<decltype(l.fabric)>(dlsym(h, "fi_fabric"));
    l.strerror = reinterpret_cast<decltype(l.strerror)>(dlsym(h, "fi_strerror"));
    if (!l.getinfo || !l.freeinfo || !l.dupinfo || !l.fabric || !l.strerror) l.error = "libfabric.so.1 lacks fi_getinfo/fi_freeinfo/fi_dupinfo/fi_fabric/fi_strerror";
    return l;
  }();
  return lib;
}

std::string FiError(const char* what, int rc) {
  const char* text = Lib().strerror ? Lib().strerror(-rc) : "?";
  return std::string(what) + ": " + text + " (" + std::to_string(rc) + ")";
}

}  // namespace

struct Fabric::Impl {
  FabricConfig config;
  std::shared_ptr<Arena> arena;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* arenaMr = nullptr;
  fid_mr* msgMr = nullptr;
  void* arenaDesc = nullptr;
  void* msgDesc = nullptr;
  bool virtAddr = false;
  bool canWait = false;
  std::string address;
  std::string providerName;

  std::vector<uint8_t> msgRegion;  // kRecvBuffers then kSendBuffers messages
  Op recvOps[kRecvBuffers];
  Op sendOps[kSendBuffers];
  std::vector<uint32_t> freeSends;
  std::deque<PendingSend> pendingSends;

  std::unordered_map<std::string, PeerState> peers;  // by raw address
  std::map<uint64_t, std::unique_ptr<FetchState>> fetches;
  std::map<uint64_t, HoldState> holds;
  // Fetches that ended before their HELD came (timed out): a late grant is released at once.
  std::map<uint64_t, fi_addr_t> ended;
  std::deque<uint64_t> endedOrder;
  uint64_t nextFetchId = 1, nextHoldId = 1;

  std::mutex mutex;  // commands, stats, queued count
  std::deque<Command> commands;
  uint32_t queued = 0;  // commands + fetches not finished
  FabricStats stats;
  std::atomic<bool> stop{false};
  std::thread thread;
  // The hasher thread: jobs in, results out (to the progress thread, which is woken to take them).
  std::mutex hashMutex;
  std::condition_variable hashCv;
  std::deque<HashJob> hashJobs;
  std::deque<HashResult> hashResults;
  std::thread hashThread;
  void HashLoop();
  void TakeHashResults();
  void QueueHashes(FetchState& f);
  bool CheckPieces(FetchState& f, const uint8_t* data, uint64_t lengthBytes);

  uint8_t* recvBuffer(uint32_t i) { return msgRegion.data() + size_t{i} * kMsgBytes; }
  uint8_t* sendBuffer(uint32_t i) { return msgRegion.data() + size_t{kRecvBuffers + i} * kMsgBytes; }

  Status Setup(std::string* error);
  void Teardown();
  void Run();
  bool Progress();
  void TakeCommands();
  void StartWaiting(PeerState& peer);
  bool Lookup(const std::string& address, fi_addr_t* out);
  PeerState* Peer(const std::string& address);
  void PostRecv(uint32_t i);
  void Send(fi_addr_t dest, std::string bytes);
  void FlushSends();
  void OnRecv(const uint8_t* data, size_t length);
  void OnHold(const Header& h, const uint8_t* body, size_t length);
  void OnHeld(const Header& h, const uint8_t* body, size_t length);
  void OnRelease(const uint8_t* body, size_t length);
  void PostReads(FetchState& f);
  void Fail(FetchState& f, const std::string& message);
  void MaybeFinish(uint64_t fetchId);
  void Finish(FetchState& f);
  void SendRelease(fi_addr_t dest, uint64_t reqId, uint64_t holdId);
  void CheckTimeouts();
  void Complete(void* context, bool ok, size_t length);
  void Stat(const std::function<void(FabricStats&)>& f) {
    std::lock_guard<std::mutex> lock(mutex);
    f(stats);
  }
};

Status Fabric::Impl::Setup(std::string* error) {
  const Libfabric& lib = Lib();
  if (!lib.error.empty()) {
    *error = "fabric: " + lib.error;
    return Status::kIo;
  }
  fi_info* hints = lib.dupinfo(nullptr);  // fi_allocinfo()
  if (hints == nullptr) {
    *error = "fabric: out of memory";
    return Status::kIo;
  }
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(config.provider.c_str());
  const char* node = config.node.empty() ? nullptr : config.node.c_str();
  int rc = KeepingSignals([&] { return lib.getinfo(FI_VERSION(1, 9), node, nullptr, node ? FI_SOURCE : 0, hints, &info); });
  lib.freeinfo(hints);
  if (rc != 0 || info == nullptr) {
    *error = FiError(("fabric: no provider \"" + config.provider + "\"" + (node ? std::string(" on ") + node : "")).c_str(), rc);
    info = nullptr;
    return Status::kIo;
  }
  providerName = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : config.provider;
  const uint64_t mrMode = info->domain_attr->mr_mode;
  virtAddr = (mrMode & FI_MR_VIRT_ADDR) != 0;
  auto fail = [&](const char* what, int code) {
    *error = FiError(what, code);
    return Status::kIo;
  };
  if ((rc = KeepingSignals([&] { return lib.fabric(info->fabric_attr, &fabric, nullptr); })) != 0) return fail("fabric: fi_fabric", rc);
  if ((rc = fi_domain(fabric, info, &domain, nullptr)) != 0) return fail("fabric: fi_domain", rc);
  fi_cq_attr cqAttr{};
  cqAttr.format = FI_CQ_FORMAT_MSG;
  cqAttr.size = kCqEntries;
  cqAttr.wait_obj = FI_WAIT_UNSPEC;
  canWait = true;
  if (fi_cq_open(domain, &cqAttr, &cq, nullptr) != 0) {
    cqAttr.wait_obj = FI_WAIT_NONE;  // a provider without wait objects: poll with short sleeps
    canWait = false;
    if ((rc = fi_cq_open(domain, &cqAttr, &cq, nullptr)) != 0) return fail("fabric: fi_cq_open", rc);
  }
  fi_av_attr avAttr{};
  avAttr.type = FI_AV_UNSPEC;
  if ((rc = fi_av_open(domain, &avAttr, &av, nullptr)) != 0) return fail("fabric: fi_av_open", rc);
  if ((rc = fi_endpoint(domain, info, &ep, nullptr)) != 0) return fail("fabric: fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) != 0) return fail("fabric: bind cq", rc);
  if ((rc = fi_ep_bind(ep, &av->fid, 0)) != 0) return fail("fabric: bind av", rc);
  if ((rc = fi_enable(ep)) != 0) return fail("fabric: fi_enable", rc);

  auto reg = [&](void* base, size_t length, uint64_t access, uint64_t key, fid_mr** mr) -> int {
    int r = fi_mr_reg(domain, base, length, access, 0, key, 0, mr, nullptr);
    if (r != 0) return r;
    if (mrMode & FI_MR_ENDPOINT) {
      if ((r = fi_mr_bind(*mr, &ep->fid, 0)) != 0) return r;
      if ((r = fi_mr_enable(*mr)) != 0) return r;
    }
    return 0;
  };
  if ((rc = reg(arena->base(), arena->capacityBytes(), FI_READ | FI_REMOTE_READ, 1, &arenaMr)) != 0) {
    return fail("fabric: registering the DRAM arena", rc);
  }
  arenaDesc = fi_mr_desc(arenaMr);
  msgRegion.assign(size_t{kRecvBuffers + kSendBuffers} * kMsgBytes, 0);
  if ((rc = reg(msgRegion.data(), msgRegion.size(), FI_SEND | FI_RECV, 2, &msgMr)) != 0) return fail("fabric: registering buffers", rc);
  msgDesc = fi_mr_desc(msgMr);

  char name[kAddressBytesMax];
  size_t nameBytes = sizeof(name);
  if ((rc = fi_getname(&ep->fid, name, &nameBytes)) != 0) return fail("fabric: fi_getname", rc);
  address.assign(name, nameBytes);

  for (uint32_t i = 0; i < kSendBuffers; i++) {
    sendOps[i].kind = OpKind::kSend;
    sendOps[i].index = i;
    freeSends.push_back(kSendBuffers - 1 - i);
  }
  for (uint32_t i = 0; i < kRecvBuffers; i++) {
    recvOps[i].kind = OpKind::kRecv;
    recvOps[i].index = i;
    PostRecv(i);
  }
  return Status::kOk;
}

void Fabric::Impl::Teardown() {
  // The endpoint first: after it closes no read can land in a local block, so keeps may end.
  if (ep) fi_close(&ep->fid);
  ep = nullptr;
  for (auto& [id, f] : fetches) {
    if (!f->doneCalled && f->done) f->done(Status::kClosed, "fabric closed");
    arena->Unhold(f->local);
  }
  fetches.clear();
  for (auto& [id, h] : holds) arena->Unhold(h.hold);
  holds.clear();
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (Command& c : commands) c.done(Status::kClosed, "fabric closed");
    commands.clear();
  }
  if (arenaMr) fi_close(&arenaMr->fid);
  if (msgMr) fi_close(&msgMr->fid);
  if (av) fi_close(&av->fid);
  if (cq) fi_close(&cq->fid);
  if (domain) fi_close(&domain->fid);
  if (fabric) fi_close(&fabric->fid);
  if (info) Lib().freeinfo(info);
  arenaMr = msgMr = nullptr;
  av = nullptr;
  cq = nullptr;
  domain = nullptr;
  fabric = nullptr;
  info = nullptr;
}

void Fabric::Impl::PostRecv(uint32_t i) {
  // -FI_EAGAIN only while the provider is short of room: progress and try again.
  for (int tries = 0; tries < 1000; tries++) {
    ssize_t rc = fi_recv(ep, recvBuffer(i), kMsgBytes, msgDesc, FI_ADDR_UNSPEC, &recvOps[i].ctx);
    if (rc == 0) return;
    if (rc != -FI_EAGAIN) break;
    fi_cq_read(cq, nullptr, 0);
  }
  fprintf(stderr, "cascade fabric: cannot post a receive buffer; this node serves fewer peers\n");
}

bool Fabric::Impl::Lookup(const std::string& addr, fi_addr_t* out) {
  PeerState* p = Peer(addr);
  if (p == nullptr) return false;
  *out = p->addr;
  return true;
}

PeerState* Fabric::Impl::Peer(const std::string& addr) {
  auto it = peers.find(addr);
  if (it != peers.end()) return &it->second;
  if (peers.size() >= kPeersMax || addr.empty() || addr.size() > kAddressBytesMax) return nullptr;
  fi_addr_t fa = FI_ADDR_UNSPEC;
  if (fi_av_insert(av, addr.data(), 1, &fa, 0, nullptr) != 1) return nullptr;
  PeerState& p = peers[addr];
  p.addr = fa;
  return &p;
}

void Fabric::Impl::Send(fi_addr_t dest, std::string bytes) {
  pendingSends.push_back({dest, std::move(bytes), Clock::now()});
  FlushSends();
}

// Messages to a peer that cannot take them yet (connecting, or gone) wait without holding up the
// messages to other peers, and are dropped after kSendGiveUpMs (the fetch they belong to times out).
void Fabric::Impl::FlushSends() {
  const auto now = Clock::now();
  for (size_t k = pendingSends.size(); k > 0 && !freeSends.empty(); k--) {
    PendingSend p = std::move(pendingSends.front());
    pendingSends.pop_front();
    const uint32_t i = freeSends.back();
    memcpy(sendBuffer(i), p.bytes.data(), p.bytes.size());
    ssize_t rc = fi_send(ep, sendBuffer(i), p.bytes.size(), msgDesc, p.dest, &sendOps[i].ctx);
    if (rc == 0) {
      freeSends.pop_back();
      continue;
    }
    if (rc == -FI_EAGAIN && now - p.since < std::chrono::milliseconds(kSendGiveUpMs)) {
      pendingSends.push_back(std::move(p));
      continue;
    }
    Stat([](FabricStats& s) { s.sendsDropped++; });
  }
}

void Fabric::Impl::TakeCommands() {
  std::deque<Command> taken;
  {
    std::lock_guard<std::mutex> lock(mutex);
    taken.swap(commands);
  }
  for (Command& c : taken) {
    auto f = std::make_unique<FetchState>();
    f->id = nextFetchId++;
    f->peerAddress = c.peerAddress;
    memcpy(f->name, c.name, kContentNameBytes);
    f->sizeBytes = c.sizeBytes;
    f->done = std::move(c.done);
    f->localHandle = c.localHandle;
    f->marked = c.stream;
    f->fullDeadline = Clock::now() + std::chrono::milliseconds(c.timeoutMs);
    f->deadline = f->fullDeadline;
    Status s = arena->Keep(c.localHandle, &f->local);
    if (s != Status::kOk || f->local.sizeBytes != c.sizeBytes) {
      if (s == Status::kOk) arena->Unhold(f->local);
      f->done(s == Status::kOk ? Status::kInvalid : s, "fabric: the local block is gone or has another size");
      std::lock_guard<std::mutex> lock(mutex);
      queued--;
      stats.fetchFailures++;
      continue;
    }
    PeerState* peer = Peer(c.peerAddress);
    if (peer == nullptr) {
      arena->Unhold(f->local);
      f->done(Status::kIo, "fabric: cannot add the peer's address");
      std::lock_guard<std::mutex> lock(mutex);
      queued--;
      stats.fetchFailures++;
      continue;
    }
    f->peer = peer->addr;
    peer->waiting.push_back(f->id);
    fetches[f->id] = std::move(f);
    StartWaiting(*peer);
  }
}

void Fabric::Impl::StartWaiting(PeerState& peer) {
  while (peer.active < config.fetchesPerPeerMax && !peer.waiting.empty()) {
    const uint64_t id = peer.waiting.front();
    peer.waiting.pop_front();
    auto it = fetches.find(id);
    if (it == fetches.end()) continue;  // timed out while waiting
    FetchState& f = *it->second;
    peer.active++;
    f.phase = FetchState::kHoldSent;
    // A dead or silent peer costs at most the reply bound, not the whole transfer's timeout.
    f.deadline = std::min(f.fullDeadline, Clock::now() + std::chrono::milliseconds(config.replyTimeoutMs));
    std::string msg(sizeof(Header) + sizeof(HoldBody) + address.size(), '\0');
    Header h{kMagic, kWireVersion, kMsgHold, f.id};
    HoldBody b{};
    memcpy(b.name, f.name, kContentNameBytes);
    b.sizeBytes = f.sizeBytes;
    b.addressBytes = static_cast<uint32_t>(address.size());
    memcpy(&msg[0], &h, sizeof h);
    memcpy(&msg[sizeof h], &b, sizeof b);
    memcpy(&msg[sizeof h + sizeof b], address.data(), address.size());
    Send(f.peer, std::move(msg));
  }
}

void Fabric::Impl::OnRecv(const uint8_t* data, size_t length) {
  Header h;
  if (length < sizeof h) {
    Stat([](FabricStats& s) { s.badMessages++; });
    return;
  }
  memcpy(&h, data, sizeof h);
  if (h.magic != kMagic || h.version != kWireVersion) {
    Stat([](FabricStats& s) { s.badMessages++; });
    return;
  }
  const uint8_t* body = data + sizeof h;
  const size_t bodyBytes = length - sizeof h;
  switch (h.type) {
    case kMsgHold: return OnHold(h, body, bodyBytes);
    case kMsgHeld: return OnHeld(h, body, bodyBytes);
    case kMsgRelease: return OnRelease(body, bodyBytes);
    default: Stat([](FabricStats& s) { s.badMessages++; });
  }
}

void Fabric::Impl::OnHold(const Header& h, const uint8_t* body, size_t length) {
  HoldBody b;
  if (length < sizeof b) return Stat([](FabricStats& s) { s.badMessages++; });
  memcpy(&b, body, sizeof b);
  if (b.addressBytes == 0 || b.addressBytes > kAddressBytesMax || length != sizeof b + b.addressBytes) {
    return Stat([](FabricStats& s) { s.badMessages++; });
  }
  fi_addr_t reader;
  if (!Lookup(std::string(reinterpret_cast<const char*>(body + sizeof b), b.addressBytes), &reader)) {
    return Stat([](FabricStats& s) { s.badMessages++; });
  }
  HeldBody r{};
  std::vector<Extent> extents;
  std::vector<uint32_t> crcs;
  r.status = kHeldOk;
  ArenaHold hold;
  if (holds.size() >= config.holdsMax) {
    r.status = kHeldBusy;
  } else if (arena->HoldNamed(b.name, b.sizeBytes, &hold) != Status::kOk) {
    r.status = kHeldAbsent;
  } else if (hold.extents.size() > kHeldExtentsMax) {
    arena->Unhold(hold);
    r.status = kHeldFragmented;
  } else {
    r.holdId = nextHoldId++;
    r.key = fi_mr_key(arenaMr);
    r.base = virtAddr ? reinterpret_cast<uintptr_t>(arena->base()) : 0;
    r.sizeBytes = hold.sizeBytes;
    r.extentCount = static_cast<uint32_t>(hold.extents.size());
    extents = hold.extents;
    // The block's piece CRCs, as a disk record's table (PieceShiftFor), where they fit the message:
    // the reader serves each piece once it passes, before the whole SHA-256 is known.
    // The block's piece table, taken when it was named (Arena::Name): the reader serves each piece
    // once it passes, before the whole SHA-256 is known. Without one, it is taken now.
    const uint32_t shift = PieceShiftFor(hold.sizeBytes);
    const uint64_t count = shift == 0 ? 0 : (hold.sizeBytes + (uint64_t{1} << shift) - 1) >> shift;
    if (count > 0 && sizeof(Header) + sizeof r + extents.size() * 16 + count * 4 <= kMsgBytes) {
      r.flags = kHeldHasCrcs;
      if (config.fault == FabricConfig::kFaultBlockBytes) arena->base()[extents[0].arenaOffsetBytes] ^= 0x5a;  // before the table
      const bool kept = hold.pieceShift == shift && hold.pieceCrcs.size() == count && config.fault != FabricConfig::kFaultBlockBytes;
      crcs = kept ? hold.pieceCrcs : PieceCrcs(arena->base(), extents, hold.sizeBytes, shift);
      if (config.fault == FabricConfig::kFaultPieceCrc) crcs[0] ^= 1;
    }
    holds[r.holdId] = {std::move(hold), Clock::now() + std::chrono::milliseconds(config.holdTimeoutMs)};
  }
  const bool ok = r.status == kHeldOk;
  Stat([&](FabricStats& s) {
    if (ok) {
      s.holdsGranted++;
      s.servedBytes += r.sizeBytes;
    } else {
      s.holdsRefused++;
    }
    s.holdsActive = holds.size();
  });
  Header out{kMagic, kWireVersion, kMsgHeld, h.reqId};
  std::string msg(sizeof out + sizeof r + extents.size() * 16 + crcs.size() * 4, '\0');
  memcpy(&msg[0], &out, sizeof out);
  memcpy(&msg[sizeof out], &r, sizeof r);
  size_t at = sizeof out + sizeof r;
  for (const Extent& e : extents) {
    memcpy(&msg[at], &e.arenaOffsetBytes, 8);
    memcpy(&msg[at + 8], &e.lengthBytes, 8);
    at += 16;
  }
  if (!crcs.empty()) memcpy(&msg[at], crcs.data(), crcs.size() * 4);
  Send(reader, std::move(msg));
}

void Fabric::Impl::OnHeld(const Header& h, const uint8_t* body, size_t length) {
  HeldBody r;
  if (length < sizeof r) return Stat([](FabricStats& s) { s.badMessages++; });
  memcpy(&r, body, sizeof r);
  auto it = fetches.find(h.reqId);
  const bool granted = r.status == kHeldOk;
  if (it == fetches.end() || it->second->phase != FetchState::kHoldSent) {
    // A reply to a fetch that timed out: give the hold back at once rather than after its timeout.
    auto gone = ended.find(h.reqId);
    if (granted && gone != ended.end()) SendRelease(gone->second, h.reqId, r.holdId);
    return;
  }
  FetchState& f = *it->second;
  f.deadline = f.fullDeadline;  // the peer answered: the transfer has the caller's whole timeout
  if (granted) {
    f.held = true;
    f.holdId = r.holdId;
    f.key = r.key;
  }
  if (!granted) {
    if (r.status == kHeldAbsent) Stat([](FabricStats& s) { s.fetchesAbsent++; });
    Fail(f, r.status == kHeldAbsent ? "absent" : r.status == kHeldBusy ? "peer busy" : "block too fragmented at the peer");
    return MaybeFinish(f.id);
  }
  const uint32_t shift = PieceShiftFor(r.sizeBytes);
  const uint64_t crcCount = (r.flags & kHeldHasCrcs) == 0 || shift == 0 ? 0 : (r.sizeBytes + (uint64_t{1} << shift) - 1) >> shift;
  if ((r.flags & kHeldHasCrcs) != 0 && crcCount == 0) {
    Stat([](FabricStats& s) { s.badMessages++; });
    Fail(f, "malformed reply");
    return MaybeFinish(f.id);
  }
  if (r.sizeBytes != f.sizeBytes || r.extentCount > kHeldExtentsMax || length != sizeof r + size_t{r.extentCount} * 16 + crcCount * 4) {
    Stat([](FabricStats& s) { s.badMessages++; });
    Fail(f, "malformed reply");
    return MaybeFinish(f.id);
  }
  // Pieces: the intersection of the remote and the local extent lists, both in block order.
  std::vector<Extent> remote(r.extentCount);
  uint64_t total = 0;
  for (uint32_t i = 0; i < r.extentCount; i++) {
    memcpy(&remote[i].arenaOffsetBytes, body + sizeof r + i * 16, 8);
    memcpy(&remote[i].lengthBytes, body + sizeof r + i * 16 + 8, 8);
    if (remote[i].lengthBytes == 0 || remote[i].lengthBytes > f.sizeBytes - total) {
      Fail(f, "malformed extents");
      return MaybeFinish(f.id);
    }
    total += remote[i].lengthBytes;
  }
  if (total != f.sizeBytes) {
    Fail(f, "extents do not cover the block");
    return MaybeFinish(f.id);
  }
  size_t ri = 0, li = 0;
  uint64_t rUsed = 0, lUsed = 0;
  const std::vector<Extent>& local = f.local.extents;
  while (ri < remote.size() && li < local.size()) {
    const uint64_t n = std::min({remote[ri].lengthBytes - rUsed, local[li].lengthBytes - lUsed, config.pieceBytes});
    f.pieces.push_back({local[li].arenaOffsetBytes + lUsed, r.base + remote[ri].arenaOffsetBytes + rUsed, n});
    rUsed += n;
    lUsed += n;
    if (rUsed == remote[ri].lengthBytes) ri++, rUsed = 0;
    if (lUsed == local[li].lengthBytes) li++, lUsed = 0;
  }
  f.phase = FetchState::kReading;
  f.pieceDone.assign(f.pieces.size(), false);
  if (f.pieces.empty()) {
    Sha256Hex(nullptr, 0, &f.digest);  // an empty block
  }
  if (f.marked && crcCount > 0) {
    f.pieceShift = shift;
    f.crcs.resize(crcCount);
    memcpy(f.crcs.data(), body + sizeof r + size_t{r.extentCount} * 16, crcCount * 4);
    f.streaming = true;  // readers, waiting since the fetch began, get each piece as it passes
  }
  PostReads(f);
  MaybeFinish(f.id);
}

// Hand the pieces that landed, in block order, to the hasher (nothing for a failed fetch). A streamed
// block's pieces are checked against their CRCs here first, on the progress thread (~10 GB/s): readers
// get them at once, not after the slower SHA-256 of what came before.
void Fabric::Impl::QueueHashes(FetchState& f) {
  if (f.failed) return;
  std::lock_guard<std::mutex> lock(hashMutex);
  bool queued = false;
  while (f.hashQueued < f.pieces.size() && f.pieceDone[f.hashQueued]) {
    const Piece& p = f.pieces[f.hashQueued];
    if (f.streaming && !CheckPieces(f, arena->base() + p.localOffsetBytes, p.lengthBytes)) {
      Stat([](FabricStats& s) { s.piecesCorrupt++; });
      f.corrupt = true;
      Fail(f, "a piece failed its CRC-32C");
      break;  // nothing from here on is checked, published or hashed
    }
    f.hashQueued++;
    hashJobs.push_back({f.id, &f, arena->base() + p.localOffsetBytes, p.lengthBytes, f.hashQueued == f.pieces.size()});
    f.hashOutstanding++;
    queued = true;
  }
  if (queued) hashCv.notify_one();
}

// The hasher thread's nice value (its own, Linux per-thread): see HashLoop.
static constexpr int kHasherNice = 10;

void Fabric::Impl::HashLoop() {
  // Below the threads that move and serve bytes: readers get each piece once its CRC-32C passes, and
  // the SHA-256 gates only what is kept, so where cores are few it takes what they leave (a nice of
  // 10 still gets about a tenth of a busy core, well within a fetch's deadline).
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kHasherNice);
  for (;;) {
    HashJob job;
    {
      std::unique_lock<std::mutex> lock(hashMutex);
      hashCv.wait(lock, [&] { return stop || !hashJobs.empty(); });
      if (hashJobs.empty()) return;  // stopping, nothing left
      job = hashJobs.front();
      hashJobs.pop_front();
    }
    // The FetchState (and its hasher) stays until its hashOutstanding is 0; the local block's pages
    // are kept (Arena::Keep) until the fetch finishes.
    FetchState& f = *job.fetch;
    HashResult r{job.fetchId, f.hasher.Update(job.data, job.lengthBytes) == Status::kOk, ""};
    if (r.ok && job.last) r.ok = f.hasher.HexDigest(&r.digest) == Status::kOk;
    {
      std::lock_guard<std::mutex> lock(hashMutex);
      hashResults.push_back(std::move(r));
    }
    if (cq) fi_cq_signal(cq);
  }
}

static std::string HexName(const uint8_t* name) {
  static const char* digits = "0123456789abcdef";
  std::string hex(kContentNameBytes * 2, '0');
  for (uint64_t i = 0; i < kContentNameBytes; i++) {
    hex[2 * i] = digits[name[i] >> 4];
    hex[2 * i + 1] = digits[name[i] & 15];
  }
  return hex;
}

// For bytes that landed in block order: each CRC piece they complete is checked
// and, when it passes, published to the block's readers. false: a piece failed (nothing of it is).
bool Fabric::Impl::CheckPieces(FetchState& f, const uint8_t* data, uint64_t lengthBytes) {
  const uint64_t pieceBytes = uint64_t{1} << f.pieceShift;
  while (lengthBytes > 0) {
    const uint64_t index = f.crcHashedBytes >> f.pieceShift;
    const uint64_t pieceEnd = std::min(f.sizeBytes, (index + 1) * pieceBytes);
    const uint64_t n = std::min(lengthBytes, pieceEnd - f.crcHashedBytes);
    f.crcRunning = Crc32c(f.crcRunning, data, n);
    data += n;
    lengthBytes -= n;
    f.crcHashedBytes += n;
    if (f.crcHashedBytes == pieceEnd) {
      if (index >= f.crcs.size() || f.crcRunning != f.crcs[index]) return false;
      f.crcRunning = 0;
      arena->PublishVerified(f.localHandle, pieceEnd);
    }
  }
  return true;
}

void Fabric::Impl::TakeHashResults() {
  std::deque<HashResult> taken;
  {
    std::lock_guard<std::mutex> lock(hashMutex);
    taken.swap(hashResults);
  }
  for (HashResult& r : taken) {
    auto it = fetches.find(r.fetchId);
    Check(it != fetches.end(), "a fetch outlives its hash jobs");
    FetchState& f = *it->second;
    Check(f.hashOutstanding > 0, "hash results match jobs");
    f.hashOutstanding--;
    if (!r.ok) Fail(f, "hashing failed");
    if (!r.digest.empty()) f.digest = std::move(r.digest);
    MaybeFinish(f.id);
  }
}

void Fabric::Impl::OnRelease(const uint8_t* body, size_t length) {
  ReleaseBody b;
  if (length != sizeof b) return Stat([](FabricStats& s) { s.badMessages++; });
  memcpy(&b, body, sizeof b);
  auto it = holds.find(b.holdId);
  if (it == holds.end()) return;  // expired already
  arena->Unhold(it->second.hold);
  holds.erase(it);
  Stat([&](FabricStats& s) { s.holdsActive = holds.size(); });
}

void Fabric::Impl::PostReads(FetchState& f) {
  while (!f.failed && !f.doneCalled && f.nextPiece < f.pieces.size() && f.outstanding < config.readsPerFetchMax) {
    const Piece& p = f.pieces[f.nextPiece];
    auto op = std::make_unique<Op>();
    op->kind = OpKind::kRead;
    op->fetchId = f.id;
    op->bytes = p.lengthBytes;
    op->index = static_cast<uint32_t>(f.nextPiece);
    ssize_t rc = fi_read(ep, arena->base() + p.localOffsetBytes, p.lengthBytes, arenaDesc, f.peer, p.remoteAddress, f.key, &op->ctx);
    if (rc == -FI_EAGAIN) return;  // retried by the progress loop
    if (rc != 0) {
      Fail(f, FiError("fi_read", static_cast<int>(rc)));
      return;
    }
    f.ops.push_back(std::move(op));
    f.outstanding++;
    f.nextPiece++;
  }
}

void Fabric::Impl::Fail(FetchState& f, const std::string& message) {
  if (!f.failed) f.message = message;
  f.failed = true;
}

// A fetch ends once it failed or read every piece, and no read into its local block is outstanding.
void Fabric::Impl::MaybeFinish(uint64_t fetchId) {
  auto it = fetches.find(fetchId);
  if (it == fetches.end()) return;
  FetchState& f = *it->second;
  if (f.outstanding > 0 || f.hashOutstanding > 0) return;
  const bool complete = f.phase == FetchState::kReading && f.nextPiece == f.pieces.size() && !f.digest.empty();
  if (!f.failed && !complete) return;
  Finish(f);
}

void Fabric::Impl::SendRelease(fi_addr_t dest, uint64_t reqId, uint64_t holdId) {
  Header h{kMagic, kWireVersion, kMsgRelease, reqId};
  ReleaseBody b{holdId};
  std::string msg(sizeof h + sizeof b, '\0');
  memcpy(&msg[0], &h, sizeof h);
  memcpy(&msg[sizeof h], &b, sizeof b);
  Send(dest, std::move(msg));
}

void Fabric::Impl::Finish(FetchState& f) {
  if (f.held) SendRelease(f.peer, f.id, f.holdId);
  if (f.phase == FetchState::kHoldSent) {
    ended[f.id] = f.peer;
    endedOrder.push_back(f.id);
    if (endedOrder.size() > kEndedMax) {
      ended.erase(endedOrder.front());
      endedOrder.pop_front();
    }
  }
  // The whole SHA-256 against the name: a block whose pieces passed but whose hash differs (its
  // table was taken over wrong bytes) is not the block. Strict readers never get it; it is not kept.
  if (!f.failed && f.digest != HexName(f.name)) {
    Stat([](FabricStats& s) { s.blocksCorrupt++; });
    f.corrupt = true;
    Fail(f, "the block's SHA-256 differs from its name");
  }
  // Every piece of a streamed block passed the peer's table on the progress thread: naming the copy
  // takes that table instead of another pass over the bytes.
  if (!f.failed && f.streaming && f.pieceShift != 0) arena->OfferPieceTable(f.localHandle, f.pieceShift, f.crcs);
  // Readers of a streamed block go on (every byte landed, its SHA-256 matches) or fail with it.
  if (f.marked) arena->EndFill(f.localHandle, !f.failed);
  arena->Unhold(f.local);
  auto peer = peers.find(f.peerAddress);
  if (peer != peers.end() && f.phase != FetchState::kWaiting && peer->second.active > 0) peer->second.active--;
  const bool ok = !f.failed;
  {
    std::lock_guard<std::mutex> lock(mutex);
    queued--;
    if (ok) {
      stats.fetches++;
      stats.fetchedBytes += f.sizeBytes;
    } else {
      stats.fetchFailures++;
    }
  }
  if (!f.doneCalled) {
    f.doneCalled = true;
    f.done(ok ? Status::kOk : f.corrupt ? Status::kCorrupt : (f.message == "absent" ? Status::kStale : Status::kIo), ok ? f.digest : "fabric fetch: " + f.message);
  }
  const uint64_t id = f.id;
  fetches.erase(id);  // f is gone from here on
  if (peer != peers.end()) StartWaiting(peer->second);
}

void Fabric::Impl::CheckTimeouts() {
  const auto now = Clock::now();
  std::vector<uint64_t> late;
  for (auto& [id, f] : fetches) {
    if (now < f->deadline || f->doneCalled) continue;
    // The caller hears now; the state stays until no read can land in its local block any more.
    f->doneCalled = true;
    f->done(Status::kIo, "fabric fetch: timed out");
    Fail(*f, "timed out");
    late.push_back(id);
  }
  for (uint64_t id : late) MaybeFinish(id);
  bool expired = false;
  for (auto it = holds.begin(); it != holds.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    arena->Unhold(it->second.hold);
    it = holds.erase(it);
    expired = true;
    Stat([](FabricStats& s) { s.holdsExpired++; });
  }
  if (expired) Stat([&](FabricStats& s) { s.holdsActive = holds.size(); });
}

void Fabric::Impl::Complete(void* context, bool ok, size_t length) {
  Op* op = static_cast<Op*>(context);
  if (op == nullptr) return;
  switch (op->kind) {
    case OpKind::kRecv:
      if (ok) OnRecv(recvBuffer(op->index), std::min(length, kMsgBytes));
      if (!stop) PostRecv(op->index);
      return;
    case OpKind::kSend:
      freeSends.push_back(op->index);
      FlushSends();
      return;
    case OpKind::kRead: {
      auto it = fetches.find(op->fetchId);
      if (it == fetches.end()) return;
      FetchState& f = *it->second;
      f.outstanding--;
      if (!ok) Fail(f, "a remote read failed (peer gone?)");
      if (ok && op->index < f.pieceDone.size()) f.pieceDone[op->index] = true;
      QueueHashes(f);
      PostReads(f);
      MaybeFinish(f.id);
      return;
    }
  }
}

bool Fabric::Impl::Progress() {
  fi_cq_msg_entry entries[32];
  bool any = false;
  for (;;) {
    ssize_t n = fi_cq_read(cq, entries, 32);
    if (n > 0) {
      any = true;
      for (ssize_t i = 0; i < n; i++) Complete(entries[i].op_context, true, entries[i].len);
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq, &err, 0) > 0) Complete(err.op_context, false, 0);
      any = true;
      continue;
    }
    break;  // -FI_EAGAIN: nothing more now
  }
  return any;
}

void Fabric::Impl::Run() {
  auto lastCheck = Clock::now();
  while (!stop) {
    TakeCommands();
    TakeHashResults();
    bool busy = Progress();
    FlushSends();
    for (auto& [id, f] : fetches) {
      if (f->phase == FetchState::kReading && f->nextPiece < f->pieces.size()) PostReads(*f);
    }
    const auto now = Clock::now();
    if (now - lastCheck >= std::chrono::milliseconds(kWaitMs)) {
      CheckTimeouts();
      lastCheck = now;
    }
    if (busy) continue;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!commands.empty()) continue;
    }
    if (canWait) {
      fi_cq_msg_entry e;
      ssize_t n = fi_cq_sread(cq, &e, 1, nullptr, kWaitMs);
      if (n > 0) Complete(e.op_context, true, e.len);
      else if (n == -FI_EAVAIL) Progress();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

Fabric::Fabric(Impl* impl) : impl_(impl) {}

Status Fabric::Open(const FabricConfig& config, std::shared_ptr<Arena> arena, Fabric** out, std::string* error) {
  if (!arena || arena->capacityBytes() == 0) {
    *error = "fabric: needs a DRAM arena to register";
    return Status::kInvalid;
  }
  if (config.pieceBytes == 0 || config.fetchesPerPeerMax == 0 || config.readsPerFetchMax == 0 || config.holdsMax == 0 ||
      config.queuedFetchesMax == 0) {
    *error = "fabric: limits must be positive";
    return Status::kInvalid;
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->arena = std::move(arena);
  Status s = impl->Setup(error);
  if (s != Status::kOk) {
    impl->Teardown();
    return s;
  }
  // Named blocks keep their piece tables from now on: holds serve them (blocks named earlier get one
  // at their first hold).
  impl->arena->SetPieceTables(true);
  Impl* raw = impl.get();
  impl->hashThread = std::thread([raw] { raw->HashLoop(); });
  impl->thread = std::thread([raw] { raw->Run(); });
  *out = new Fabric(impl.release());
  return Status::kOk;
}

Fabric::~Fabric() {
  impl_->stop = true;
  if (impl_->cq) fi_cq_signal(impl_->cq);
  if (impl_->thread.joinable()) impl_->thread.join();
  {
    std::lock_guard<std::mutex> lock(impl_->hashMutex);
    impl_->hashCv.notify_all();
  }
  if (impl_->hashThread.joinable()) impl_->hashThread.join();  // it drains its queue first
  impl_->Teardown();
}

const std::string& Fabric::address() const { return impl_->address; }
const std::string& Fabric::providerName() const { return impl_->providerName; }

void Fabric::Fetch(const std::string& peerAddress, const uint8_t* name, uint64_t sizeBytes, uint64_t localHandle, uint64_t timeoutMs,
                   Done done, bool stream) {
  // Before anyone can be told of the block: a reader that comes first waits for its pieces.
  if (stream && impl_->arena->MarkFilling(localHandle) != Status::kOk) stream = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stop || impl_->queued >= impl_->config.queuedFetchesMax) {
      if (stream) impl_->arena->EndFill(localHandle, false);
      if (impl_->stop) return done(Status::kClosed, "fabric closed");
      impl_->stats.fetchFailures++;
      return done(Status::kBusy, "fabric: too many fetches in flight");
    }
    impl_->queued++;
    Command c;
    c.peerAddress = peerAddress;
    memcpy(c.name, name, kContentNameBytes);
    c.sizeBytes = sizeBytes;
    c.localHandle = localHandle;
    c.timeoutMs = timeoutMs;
    c.done = std::move(done);
    c.stream = stream;
    impl_->commands.push_back(std::move(c));
  }
  fi_cq_signal(impl_->cq);
}

FabricStats Fabric::Stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  FabricStats s = impl_->stats;
  s.fetchesInFlight = impl_->queued;
  return s;
}

}  // namespace cascade

// fi_read_bench: the transport limit for Cascade's remote-DRAM tier, measured with libfabric directly
// (no Node, no project code). Two processes: `serve` registers a buffer for remote reads and drives
// progress; `read` pulls whole blocks from it with fi_read and reports the rate.
//
//   fi_read_bench serve --addr 127.0.0.1 --bytes N [--progress spin|sread] [--verbose]
//     -> {"address":"<hex of fi_getname>","key":K,"base":B,"bytes":N}   then serves until stdin
//        reaches EOF or SIGTERM/SIGINT, and exits 0.
//   fi_read_bench read --peer HEX --key K --base B --bytes N --block-bytes S --seconds T
//                      [--addr 127.0.0.1] [--inflight 16] [--piece-bytes 1048576] [--verbose]
//     -> {"blockBytes":S,"blocks":n,"bytes":total,"seconds":s,"GBps":x,"meanBlockMs":m}
//
// FI_EP_RDM, provider from $FI_PROVIDER (default "tcp;ofi_rxm"), caps FI_MSG|FI_RMA|FI_READ|
// FI_REMOTE_READ, mode FI_CONTEXT, and whichever of FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED,
// FI_MR_PROV_KEY and FI_MR_ENDPOINT the provider asks for. Blocks are read one at a time (a block is
// what a cache load moves), each as pieces of --piece-bytes with at most --inflight reads outstanding,
// from rotating offsets of the peer's buffer into one local registered buffer. One untimed warm-up
// block first (it sets up the connection); it and the first timed block are checked against the
// pattern the server filled in. `seconds` is the sum of the timed blocks' own times.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* g_step = "start";  // what was being done, for error messages
bool g_verbose = false;
volatile sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

[[noreturn]] void Die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fi_read_bench: %s: %s\n", what, detail.c_str());
  std::exit(1);
}

[[noreturn]] void DieFi(const char* call, long rc) {
  Die(call, std::string(fi_strerror(static_cast<int>(rc < 0 ? -rc : rc))) + " (" + std::to_string(rc) + ") while " + g_step);
}

void Check(const char* call, long rc) {
  if (rc < 0) DieFi(call, rc);
}

void Info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Info(const char* fmt, ...) {
  if (!g_verbose) return;
  va_list ap;
  va_start(ap, fmt);
  std::fputs("fi_read_bench: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the pattern: byte i of the served buffer is byte (i % 8) of Mix(i / 8) ------------------------

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint8_t PatternByte(uint64_t offset) {
  uint64_t w = Mix(offset / 8);
  uint8_t b[8];
  std::memcpy(b, &w, 8);
  return b[offset % 8];
}

void FillPattern(uint8_t* p, uint64_t n) {
  uint64_t words = n / 8;
  for (uint64_t i = 0; i < words; i++) {
    uint64_t w = Mix(i);
    std::memcpy(p + i * 8, &w, 8);
  }
  for (uint64_t i = words * 8; i < n; i++) p[i] = PatternByte(i);
}

// First offset (relative to `remoteOffset`) where `p` differs from the pattern, or -1.
int64_t FirstMismatch(const uint8_t* p, uint64_t remoteOffset, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    uint64_t off = remoteOffset + i;
    if (off % 8 == 0 && i + 8 <= n) {
      uint64_t w = Mix(off / 8);
      if (std::memcmp(p + i, &w, 8) == 0) {
        i += 7;
        continue;
      }
    }
    if (p[i] != PatternByte(off)) return static_cast<int64_t>(i);
  }
  return -1;
}

// ---- command line -----------------------------------------------------------------------------------

struct Args {
  std::string cmd;
  std::string addr = "127.0.0.1";
  std::string peer;
  std::string progress = "spin";
  uint64_t key = 0;
  uint64_t base = 0;
  uint64_t bytes = 0;
  uint64_t blockBytes = 0;
  uint64_t pieceBytes = 1048576;
  uint64_t inflight = 16;
  double seconds = 0;
  bool haveKey = false, haveBase = false;
};

[[noreturn]] void Usage() {
  std::fputs(
      "usage: fi_read_bench serve --addr A --bytes N [--progress spin|sread] [--verbose]\n"
      "       fi_read_bench read --peer HEX --key K --base B --bytes N --block-bytes S --seconds T\n"
      "                          [--addr A] [--inflight 16] [--piece-bytes 1048576] [--verbose]\n"
      "  (the provider is $FI_PROVIDER, default tcp;ofi_rxm; serve exits on stdin EOF or SIGTERM)\n",
      stderr);
  std::exit(2);
}

uint64_t ParseU64(const char* flag, const char* s) {
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-') Die("bad number", std::string(flag) + " " + s);
  return v;
}

Args ParseArgs(int argc, char** argv) {
  if (argc < 2) Usage();
  Args a;
  a.cmd = argv[1];
  if (a.cmd != "serve" && a.cmd != "read") Usage();
  for (int i = 2; i < argc; i++) {
    std::string f = argv[i];
    if (f == "--verbose") {
      g_verbose = true;
      continue;
    }
    if (i + 1 >= argc) Usage();
    const char* v = argv[++i];
    if (f == "--addr") a.addr = v;
    else if (f == "--peer") a.peer = v;
    else if (f == "--progress") a.progress = v;
    else if (f == "--key") a.key = ParseU64("--key", v), a.haveKey = true;
    else if (f == "--base") a.base = ParseU64("--base", v), a.haveBase = true;
    else if (f == "--bytes") a.bytes = ParseU64("--bytes", v);
    else if (f == "--block-bytes") a.blockBytes = ParseU64("--block-bytes", v);
    else if (f == "--piece-bytes") a.pieceBytes = ParseU64("--piece-bytes", v);
    else if (f == "--inflight") a.inflight = ParseU64("--inflight", v);
    else if (f == "--seconds") {
      char* end = nullptr;
      a.seconds = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(a.seconds > 0)) Die("bad number", std::string("--seconds ") + v);
    } else Usage();
  }
  if (a.bytes == 0) Die("missing argument", "--bytes N (N > 0)");
  if (a.progress != "spin" && a.progress != "sread") Die("bad argument", "--progress spin|sread");
  if (a.cmd == "read") {
    if (a.peer.empty() || !a.haveKey || !a.haveBase) Die("missing argument", "read needs --peer, --key and --base");
    if (a.blockBytes == 0 || a.blockBytes > a.bytes) Die("bad argument", "--block-bytes must be in 1..--bytes");
    if (a.seconds <= 0) Die("missing argument", "--seconds T (T > 0)");
    if (a.pieceBytes == 0 || a.inflight == 0) Die("bad argument", "--piece-bytes and --inflight must be > 0");
  }
  return a;
}

std::string ToHex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; i++) s += digits[p[i] >> 4], s += digits[p[i] & 15];
  return s;
}

std::vector<uint8_t> FromHex(const std::string& s) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    Die("bad argument", "--peer is not hex: " + s);
  };
  if (s.size() % 2 != 0) Die("bad argument", "--peer has an odd number of hex digits");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); i++) out[i] = static_cast<uint8_t>(nibble(s[2 * i]) << 4 | nibble(s[2 * i + 1]));
  return out;
}

// ---- libfabric resources ----------------------------------------------------------------------------

const double kStallSeconds = 10;  // read gives up when no read completes for this long

const uint64_t kMrModesHandled = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

struct Fabric {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  uint64_t mrMode = 0;

  ~Fabric() {
    // Reverse order of creation; errors on close only matter as a message.
    if (ep) fi_close(&ep->fid);
    if (cq) fi_close(&cq->fid);
    if (av) fi_close(&av->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) fi_freeinfo(info);
  }
};

std::string MrModeString(uint64_t m) {
  std::string s;
  auto add = [&](uint64_t bit, const char* name) {
    if (m & bit) s += (s.empty() ? "" : "|") + std::string(name);
  };
  add(FI_MR_LOCAL, "FI_MR_LOCAL");
  add(FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR");
  add(FI_MR_ALLOCATED, "FI_MR_ALLOCATED");
  add(FI_MR_PROV_KEY, "FI_MR_PROV_KEY");
  add(FI_MR_ENDPOINT, "FI_MR_ENDPOINT");
  add(FI_MR_RAW, "FI_MR_RAW");
  add(FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY");
  add(FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT");
  add(FI_MR_HMEM, "FI_MR_HMEM");
  return s.empty() ? "0" : s;
}

// fi_getinfo for `addr` as the source, then fabric, domain, AV, CQ, endpoint (bound and enabled).
void OpenFabric(Fabric& f, const std::string& addr, bool waitableCq) {
  const char* env = std::getenv("FI_PROVIDER");
  std::string provider = env && *env ? env : "tcp;ofi_rxm";
  fi_info* hints = fi_allocinfo();
  if (!hints) Die("fi_allocinfo", "out of memory");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_REMOTE_READ;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = static_cast<int>(kMrModesHandled);
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // fi_freeinfo frees it
  if (!hints->fabric_attr->prov_name) Die("strdup", "out of memory");
  g_step = "fi_getinfo";
  int rc = fi_getinfo(FI_VERSION(1, 17), addr.c_str(), nullptr, FI_SOURCE, hints, &f.info);
  fi_freeinfo(hints);
  if (rc != 0) Die("fi_getinfo", std::string(fi_strerror(-rc)) + " (" + std::to_string(rc) + ") for provider " + provider + " on " + addr + " (FI_EP_RDM, FI_MSG|FI_RMA|FI_READ|FI_REMOTE_READ)");
  f.mrMode = static_cast<uint64_t>(f.info->domain_attr->mr_mode);
  if (f.mrMode & ~kMrModesHandled) Die("fi_getinfo", "provider needs unhandled mr_mode bits: " + MrModeString(f.mrMode & ~kMrModesHandled));
  Info("provider %s, fabric %s, domain %s, mr_mode %s, mode 0x%" PRIx64 ", max_msg_size %zu, tx size %zu, rx size %zu, data_progress %d, threading %d",
       f.info->fabric_attr->prov_name, f.info->fabric_attr->name, f.info->domain_attr->name, MrModeString(f.mrMode).c_str(),
       static_cast<uint64_t>(f.info->mode), f.info->ep_attr->max_msg_size, f.info->tx_attr->size, f.info->rx_attr->size,
       static_cast<int>(f.info->domain_attr->data_progress), static_cast<int>(f.info->domain_attr->threading));

  g_step = "opening the fabric";
  Check("fi_fabric", fi_fabric(f.info->fabric_attr, &f.fabric, nullptr));
  g_step = "opening the domain";
  Check("fi_domain", fi_domain(f.fabric, f.info, &f.domain, nullptr));

  fi_av_attr avAttr;
  std::memset(&avAttr, 0, sizeof avAttr);
  avAttr.type = FI_AV_TABLE;
  avAttr.count = 4;
  g_step = "opening the address vector";
  Check("fi_av_open", fi_av_open(f.domain, &avAttr, &f.av, nullptr));

  fi_cq_attr cqAttr;
  std::memset(&cqAttr, 0, sizeof cqAttr);
  cqAttr.format = FI_CQ_FORMAT_CONTEXT;
  cqAttr.size = 1024;
  cqAttr.wait_obj = waitableCq ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
  g_step = "opening the completion queue";
  Check("fi_cq_open", fi_cq_open(f.domain, &cqAttr, &f.cq, nullptr));

  g_step = "opening the endpoint";
  Check("fi_endpoint", fi_endpoint(f.domain, f.info, &f.ep, nullptr));
  Check("fi_ep_bind(av)", fi_ep_bind(f.ep, &f.av->fid, 0));
  Check("fi_ep_bind(cq)", fi_ep_bind(f.ep, &f.cq->fid, FI_TRANSMIT | FI_RECV));
  Check("fi_enable", fi_enable(f.ep));
}

// Allocates (page-aligned, touched: FI_MR_ALLOCATED wants backed memory) and registers `bytes`.
struct Region {
  uint8_t* buf = nullptr;
  uint64_t bytes = 0;
  fid_mr* mr = nullptr;
  ~Region() {
    if (mr) fi_close(&mr->fid);
    std::free(buf);
  }
};

void RegisterRegion(Fabric& f, Region& r, uint64_t bytes, uint64_t access, bool fillPattern) {
  const uint64_t align = 4096;
  r.bytes = bytes;
  r.buf = static_cast<uint8_t*>(std::aligned_alloc(align, (bytes + align - 1) / align * align));
  if (!r.buf) Die("aligned_alloc", "cannot allocate " + std::to_string(bytes) + " bytes");
  if (fillPattern) FillPattern(r.buf, bytes);
  else std::memset(r.buf, 0, bytes);
  const uint64_t requestedKey = 0xCA5CADE;  // used unless FI_MR_PROV_KEY
  g_step = "registering memory";
  Check("fi_mr_reg", fi_mr_reg(f.domain, r.buf, bytes, access, 0, requestedKey, 0, &r.mr, nullptr));
  if (f.mrMode & FI_MR_ENDPOINT) {
    Check("fi_mr_bind", fi_mr_bind(r.mr, &f.ep->fid, 0));
    Check("fi_mr_enable", fi_mr_enable(r.mr));
  }
}

// Reads what the CQ has (this also drives the provider's progress). Returns completions, exits on error.
size_t PollCq(fid_cq* cq, fi_cq_entry* entries, size_t n) {
  ssize_t got = fi_cq_read(cq, entries, n);
  if (got > 0) return static_cast<size_t>(got);
  if (got == -FI_EAGAIN) return 0;
  if (got == -FI_EAVAIL) {
    fi_cq_err_entry err;
    std::memset(&err, 0, sizeof err);
    ssize_t e = fi_cq_readerr(cq, &err, 0);
    if (e < 0) DieFi("fi_cq_readerr", e);
    char buf[256];
    const char* prov = fi_cq_strerror(cq, err.prov_errno, err.err_data, buf, sizeof buf);
    Die("completion error", std::string(fi_strerror(err.err)) + " (provider: " + (prov ? prov : "?") + ", prov_errno " +
                                std::to_string(err.prov_errno) + ") while " + g_step);
  }
  DieFi("fi_cq_read", got);
}

// Whether stdin has reached EOF (anything read from it is discarded).
bool StdinAtEof() {
  pollfd p{0, POLLIN, 0};
  int rc = poll(&p, 1, 0);
  if (rc <= 0) return false;
  if (p.revents & (POLLIN | POLLHUP)) {
    char buf[256];
    ssize_t n = read(0, buf, sizeof buf);
    return n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
  }
  return (p.revents & (POLLERR | POLLNVAL)) != 0;
}

// ---- serve ------------------------------------------------------------------------------------------

int Serve(const Args& a) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const bool sread = a.progress == "sread";
  Fabric f;
  OpenFabric(f, a.addr, sread);
  Region r;
  RegisterRegion(f, r, a.bytes, FI_REMOTE_READ, true);

  uint8_t name[256];
  size_t nameLen = sizeof name;
  g_step = "fi_getname";
  Check("fi_getname", fi_getname(&f.ep->fid, name, &nameLen));
  char str[128];
  size_t strLen = sizeof str;
  Info("serving %" PRIu64 " bytes at %s, progress %s", a.bytes, fi_av_straddr(f.av, name, str, &strLen), a.progress.c_str());
  uint64_t key = fi_mr_key(r.mr);
  if (key == FI_KEY_NOTAVAIL) Die("fi_mr_key", "no key available for the registered buffer");
  uint64_t base = (f.mrMode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uintptr_t>(r.buf) : 0;
  std::printf("{\"address\":\"%s\",\"key\":%" PRIu64 ",\"base\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n", ToHex(name, nameLen).c_str(), key, base, a.bytes);
  if (std::fflush(stdout) != 0) Die("stdout", std::strerror(errno));

  // The target never sees completions for remote reads, but the tcp provider (manual progress) only
  // accepts connections and answers read requests while someone reads its CQ.
  g_step = "serving";
  fi_cq_entry entries[16];
  uint64_t spins = 0;
  double lastCheck = NowSeconds();
  while (!g_stop) {
    if (sread) {
      ssize_t got = fi_cq_sread(f.cq, entries, 16, nullptr, 100);
      if (got < 0 && got != -FI_EAGAIN && got != -FI_EINTR) {
        if (got == -FI_EAVAIL) PollCq(f.cq, entries, 16);  // reports the error and exits
        DieFi("fi_cq_sread", got);
      }
      if (StdinAtEof()) break;
    } else {
      PollCq(f.cq, entries, 16);
      if (++spins % 1024 == 0) {
        double now = NowSeconds();
        if (now - lastCheck > 0.02) {
          lastCheck = now;
          if (StdinAtEof()) break;
        }
      }
    }
  }
  Info("stopping (%s)", g_stop ? "signal" : "stdin EOF");
  return 0;
}

// ---- read -------------------------------------------------------------------------------------------

int Read(const Args& a) {
  signal(SIGPIPE, SIG_IGN);
  Fabric f;
  OpenFabric(f, a.addr, false);

  uint64_t piece = a.pieceBytes;
  if (piece > f.info->ep_attr->max_msg_size) {
    Info("--piece-bytes %" PRIu64 " is over max_msg_size %zu: using max_msg_size", piece, f.info->ep_attr->max_msg_size);
    piece = f.info->ep_attr->max_msg_size;
  }
  Region r;
  RegisterRegion(f, r, a.blockBytes, FI_READ, false);
  void* desc = fi_mr_desc(r.mr);

  std::vector<uint8_t> peer = FromHex(a.peer);
  fi_addr_t peerAddr = FI_ADDR_UNSPEC;
  g_step = "inserting the peer's address";
  int n = fi_av_insert(f.av, peer.data(), 1, &peerAddr, 0, nullptr);
  if (n != 1) DieFi("fi_av_insert", n < 0 ? n : -FI_EINVAL);

  const uint64_t slots = a.bytes / a.blockBytes;  // block-sized slots in the peer's buffer
  const uint64_t piecesPerBlock = (a.blockBytes + piece - 1) / piece;
  std::vector<fi_context> contexts(a.inflight);
  std::vector<uint64_t> freeSlots;
  for (uint64_t i = 0; i < a.inflight; i++) freeSlots.push_back(i);
  fi_cq_entry entries[64];

  // One block, all pieces, at most --inflight reads outstanding. Returns its time in seconds.
  auto readBlock = [&](uint64_t remoteOffset) -> double {
    const double b0 = NowSeconds();
    double lastProgress = b0;
    uint64_t issued = 0, done = 0, idlePolls = 0;
    while (done < piecesPerBlock) {
      // Issue as many pieces as the window allows; EAGAIN means "progress first".
      while (issued < piecesPerBlock && !freeSlots.empty()) {
        const uint64_t off = issued * piece;
        const uint64_t len = std::min(piece, a.blockBytes - off);
        fi_context* ctx = &contexts[freeSlots.back()];
        ssize_t rc = fi_read(f.ep, r.buf + off, len, desc, peerAddr, a.base + remoteOffset + off, a.key, ctx);
        if (rc == -FI_EAGAIN) break;
        if (rc != 0) DieFi("fi_read", rc);
        freeSlots.pop_back();
        issued++;
      }
      size_t got = PollCq(f.cq, entries, 64);
      if (got == 0) {
        // No completion: give up when nothing has completed for a while (peer gone, wrong address:
        // rxm keeps retrying a connection that is refused rather than failing the read).
        if (++idlePolls % 4096 == 0 && NowSeconds() - lastProgress > kStallSeconds)
          Die("no progress", "no read completed for " + std::to_string(static_cast<int>(kStallSeconds)) + " s while " + g_step +
                                 " (is the server up at that address, and driving progress?)");
        continue;
      }
      lastProgress = NowSeconds();
      for (size_t i = 0; i < got; i++) {
        auto* ctx = static_cast<fi_context*>(entries[i].op_context);
        if (ctx < contexts.data() || ctx >= contexts.data() + contexts.size()) Die("completion", "unknown context");
        freeSlots.push_back(static_cast<uint64_t>(ctx - contexts.data()));
        done++;
      }
    }
    return NowSeconds() - b0;
  };
  auto verify = [&](const char* which, uint64_t remoteOffset) {
    int64_t bad = FirstMismatch(r.buf, remoteOffset, a.blockBytes);
    if (bad >= 0)
      Die("verify", std::string(which) + " block differs from the pattern at byte " + std::to_string(bad) + " (got " + std::to_string(r.buf[bad]) +
                        ", want " + std::to_string(PatternByte(remoteOffset + static_cast<uint64_t>(bad))) + ")");
  };

  // Untimed warm-up: the first read connects (rxm sets up its connection on first use).
  g_step = "reading the warm-up block (connecting)";
  double warmup = readBlock(0);
  verify("the warm-up", 0);
  Info("warm-up block verified in %.3f ms (includes connection setup); max_msg_size %zu, piece %" PRIu64 ", inflight %" PRIu64, warmup * 1e3,
       f.info->ep_attr->max_msg_size, piece, a.inflight);
  std::memset(r.buf, 0, a.blockBytes);

  g_step = "reading blocks";
  uint64_t blocks = 0;
  double sumBlockSeconds = 0;
  const double t0 = NowSeconds();
  double elapsed = 0;
  while (blocks < 3 || elapsed < a.seconds) {
    const uint64_t remoteOffset = ((blocks + 1) % slots) * a.blockBytes;
    sumBlockSeconds += readBlock(remoteOffset);
    if (blocks == 0) verify("the first timed", remoteOffset);  // outside the block's time
    blocks++;
    elapsed = NowSeconds() - t0;
  }
  const double seconds = sumBlockSeconds;  // the blocks' own time (the check of the first one excluded)
  const uint64_t total = blocks * a.blockBytes;
  std::printf("{\"blockBytes\":%" PRIu64 ",\"blocks\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"GBps\":%.6f,\"meanBlockMs\":%.6f}\n", a.blockBytes, blocks,
              total, seconds, static_cast<double>(total) / seconds / 1e9, sumBlockSeconds / static_cast<double>(blocks) * 1e3);
  if (std::fflush(stdout) != 0) Die("stdout", std::strerror(errno));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = ParseArgs(argc, argv);
  return a.cmd == "serve" ? Serve(a) : Read(a);
}

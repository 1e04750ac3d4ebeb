// The remote DRAM tier's data plane: one libfabric RDM endpoint per daemon, with the whole DRAM arena
// registered for remote reads. A peer fetches a block it lacks by content name:
//
//   reader                                   holder
//   HOLD {name, size, reader address}  -->   arena.HoldNamed: the pages stay put until RELEASE
//                                      <--   HELD {mr key, base, extents}   (or ABSENT / BUSY)
//   fi_read each piece into a local block
//   RELEASE {hold id}                  -->   arena.Unhold
//
// The holder's side runs entirely on this class's progress thread (no JS). The reader verifies the
// bytes against the SHA-256 afterwards (the binding does, with Arena::Hash); a hold that expired or a
// copy that vanished therefore never yields wrong bytes, only a failed fetch.
//
// Threading: after Open, every libfabric call happens on the progress thread. Fetch() queues a request
// and wakes it; completion callbacks run on the progress thread and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "arena.h"
#include "status.h"

namespace cascade {

struct FabricConfig {
  std::string provider = "tcp;ofi_rxm";  // FI_PROVIDER syntax
  std::string node;                       // address to bind (empty: the provider's first interface)
  uint32_t fetchesPerPeerMax = 4;         // concurrent fetches to one peer; more wait in line
  uint32_t queuedFetchesMax = 256;        // fetches waiting or running, all peers; past it: kBusy
  uint32_t holdsMax = 1024;               // holds this node grants at once; past it peers get BUSY
  uint64_t holdTimeoutMs = 30000;         // a hold a peer never released ends after this
  uint64_t replyTimeoutMs = 500;          // a peer that does not answer a hold within this is given up
  // Tests only: what this node, as a holder, does wrong on purpose. kFaultPieceCrc: the first piece's
  // CRC-32C it sends is wrong (a piece corrupted in transit); kFaultBlockBytes: one byte of the held
  // block is flipped in its memory before its CRCs are taken (CRCs right, SHA-256 wrong).
  enum Fault : uint8_t { kFaultNone = 0, kFaultPieceCrc = 1, kFaultBlockBytes = 2 } fault = kFaultNone;
  uint64_t pieceBytes = 512 << 10;        // largest single fi_read: small enough that hashing overlaps the transfer
  uint32_t readsPerFetchMax = 16;         // fi_reads outstanding per fetch
};

struct FabricStats {
  uint64_t fetches = 0;          // completed byte-for-byte (before the caller's hash check)
  uint64_t fetchedBytes = 0;
  uint64_t fetchFailures = 0;    // absent at the peer, timed out, transport errors
  uint64_t fetchesAbsent = 0;    // the peer no longer held the block
  uint64_t holdsGranted = 0;
  uint64_t holdsRefused = 0;     // absent or busy
  uint64_t holdsExpired = 0;
  uint64_t holdsActive = 0;
  uint64_t servedBytes = 0;      // bytes of the blocks held for peers
  uint64_t badMessages = 0;      // dropped: malformed or unknown
  uint64_t sendsDropped = 0;     // messages a peer never took (gone): their fetches time out
  uint64_t piecesCorrupt = 0;    // fetched pieces that failed their CRC-32C (each failed its fetch)
  uint64_t blocksCorrupt = 0;    // fetched blocks whose pieces passed but whose SHA-256 differs
  uint64_t fetchesInFlight = 0;
};

class Fabric {
 public:
  // done(status, text) is called exactly once, on the progress thread: on success text is the SHA-256
  // (hex) of the bytes that landed (hashed while they arrived), else the reason.
  using Done = std::function<void(Status, const std::string&)>;

  static Status Open(const FabricConfig& config, std::shared_ptr<Arena> arena, Fabric** out, std::string* error);
  ~Fabric();  // stops the progress thread; pending fetches finish with kClosed; holds end
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // This endpoint's address (raw bytes of fi_getname), for peers to reach it.
  const std::string& address() const;
  const std::string& providerName() const;

  // Fill the local block `localHandle` (allocated by the caller with sizeBytes) with the block named
  // `name` (kContentNameBytes raw SHA-256) from the peer at `peerAddress`. The local block's pages are
  // kept (Arena::Keep) until every read into them has ended, even when the fetch timed out.
  // stream: the local block is marked filling (Arena::MarkFilling) before this returns, so readers
  // may wait on it (Arena::WaitFilled) at once; when the peer's reply carries the block's piece CRCs,
  // each piece is published to them as it passes its CRC-32C, while the whole SHA-256 is computed
  // beside it and checked against the name before `done`. A piece that fails its CRC, or a block whose
  // SHA-256 differs, fails the fetch (kCorrupt) and the fill: its readers go elsewhere. Without CRCs
  // (a block too fragmented for them to fit the reply), readers wait for the whole block.
  void Fetch(const std::string& peerAddress, const uint8_t* name, uint64_t sizeBytes, uint64_t localHandle, uint64_t timeoutMs,
             Done done, bool stream = false);

  FabricStats Stats();

  struct Impl;

 private:
  explicit Fabric(Impl* impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cascade

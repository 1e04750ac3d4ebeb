// Status codes returned by the core. The core never throws and never includes napi.h; the binding
// turns a non-ok status into a JS error whose `code` is the name below (the same symbolic codes the
// TypeScript store uses), so errors keep their meaning across the boundary.
#pragma once

namespace cascade {

enum class Status : int {
  kOk = 0,
  kInvalid,   // EINVAL: bad argument (size, offset, alignment)
  kNoSpace,   // ENOSPC: the arena (or a table) is full
  kStale,     // ESTALE: a handle whose slot was freed (or never existed)
  kRange,     // ERANGE: an offset/length outside the block or the arena
  kIo,        // EIO: a system call failed
  kBusy,      // EBUSY: the object is in use (a hasher with an update in flight)
  kClosed,    // EBADF: the object was closed
  kCorrupt,   // ECORRUPT: stored bytes fail their check (a record header, a piece CRC, a SHA-256)
};

inline const char* StatusCode(Status s) {
  switch (s) {
    case Status::kOk: return "OK";
    case Status::kInvalid: return "EINVAL";
    case Status::kNoSpace: return "ENOSPC";
    case Status::kStale: return "ESTALE";
    case Status::kRange: return "ERANGE";
    case Status::kIo: return "EIO";
    case Status::kBusy: return "EBUSY";
    case Status::kClosed: return "EBADF";
    case Status::kCorrupt: return "ECORRUPT";
  }
  return "EIO";
}

}  // namespace cascade

// A read-only shared mapping of a whole file: what a same-node client uses to see the daemon's arena
// (opened through /proc/<daemon pid>/fd/<arena fd>) without copying.
#pragma once

#include <cstdint>
#include <string>

#include "status.h"

namespace cascade {

class Mapping {
 public:
  static Status Open(const std::string& path, Mapping** out, std::string* error);
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* base() const { return base_; }
  uint64_t lengthBytes() const { return lengthBytes_; }

 private:
  Mapping(const uint8_t* base, uint64_t lengthBytes) : base_(base), lengthBytes_(lengthBytes) {}
  const uint8_t* base_;
  uint64_t lengthBytes_;
};

}  // namespace cascade

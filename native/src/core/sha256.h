// Streaming SHA-256 over OpenSSL's EVP interface (SHA-NI where the CPU has it). One Sha256 is fed by one
// thread at a time; the binding serializes updates.
#pragma once

#include <cstdint>
#include <string>

#include "status.h"

namespace cascade {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  bool ok() const { return ctx_ != nullptr; }
  Status Update(const uint8_t* data, uint64_t lengthBytes);
  // Lowercase hex of the digest of everything fed so far; the hasher stays usable (a copy is finalized).
  Status HexDigest(std::string* hex);
  void Reset();
  uint64_t bytesHashed() const { return bytes_; }

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so callers need no OpenSSL headers
  uint64_t bytes_ = 0;
};

// Lowercase hex of raw bytes (a digest, a content name).
std::string ToHex(const uint8_t* bytes, size_t lengthBytes);

// One-shot helper.
Status Sha256Hex(const uint8_t* data, uint64_t lengthBytes, std::string* hex);

}  // namespace cascade

#include "sha256.h"

#include <openssl/evp.h>

#include <algorithm>

namespace cascade {

namespace {
// EVP_DigestUpdate takes a size_t; feed very large inputs in bounded pieces anyway.
constexpr uint64_t kUpdateChunkBytes = uint64_t{1} << 30;
}  // namespace

std::string ToHex(const uint8_t* bytes, size_t lengthBytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex(lengthBytes * 2, '0');
  for (size_t i = 0; i < lengthBytes; i++) {
    hex[2 * i] = kDigits[bytes[i] >> 4];
    hex[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return hex;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ != nullptr && EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
    ctx_ = nullptr;
  }
}

Sha256::~Sha256() {
  if (ctx_ != nullptr) EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void Sha256::Reset() {
  if (ctx_ != nullptr) EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
  bytes_ = 0;
}

Status Sha256::Update(const uint8_t* data, uint64_t lengthBytes) {
  if (ctx_ == nullptr) return Status::kIo;
  for (uint64_t done = 0; done < lengthBytes;) {
    const uint64_t n = std::min(kUpdateChunkBytes, lengthBytes - done);
    if (EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data + done, n) != 1) return Status::kIo;
    done += n;
  }
  bytes_ += lengthBytes;
  return Status::kOk;
}

Status Sha256::HexDigest(std::string* hex) {
  if (ctx_ == nullptr) return Status::kIo;
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  if (copy == nullptr) return Status::kIo;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  const bool ok = EVP_MD_CTX_copy_ex(copy, static_cast<EVP_MD_CTX*>(ctx_)) == 1 && EVP_DigestFinal_ex(copy, digest, &n) == 1;
  EVP_MD_CTX_free(copy);
  if (!ok) return Status::kIo;
  *hex = ToHex(digest, n);
  return Status::kOk;
}

Status Sha256Hex(const uint8_t* data, uint64_t lengthBytes, std::string* hex) {
  Sha256 h;
  Status s = h.Update(data, lengthBytes);
  if (s != Status::kOk) return s;
  return h.HexDigest(hex);
}

}  // namespace cascade

#include "crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace cascade {

namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78;  // reflected

struct Table {
  uint32_t entries[256];
  Table() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
      entries[i] = c;
    }
  }
};

uint32_t Crc32cTable(uint32_t crc, const uint8_t* data, size_t n) {
  static const Table table;
  for (size_t i = 0; i < n; i++) crc = table.entries[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(uint32_t crc, const uint8_t* data, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    memcpy(&word, data, 8);
    c = _mm_crc32_u64(c, word);
    data += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *data++);
    n--;
  }
  return c32;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32c(uint32_t crc, const uint8_t* data, size_t lengthBytes) {
  crc = ~crc;
#if defined(__x86_64__)
  if (HasSse42()) return ~Crc32cSse42(crc, data, lengthBytes);
#endif
  return ~Crc32cTable(crc, data, lengthBytes);
}

uint32_t Crc32Ieee(const uint8_t* data, size_t lengthBytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < lengthBytes; i++) {
    c ^= data[i];
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

}  // namespace cascade

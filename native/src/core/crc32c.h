// CRC-32C (Castagnoli), the checksum of a disk record's pieces: SSE4.2's crc32 instruction where the
// CPU has it (~10 GB/s here), else a table. Also CRC-32 (IEEE, zlib's), the record header's own check.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cascade {

// CRC-32C of data, continuing from crc (0 to start): Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, const uint8_t* data, size_t lengthBytes);

// CRC-32 as zlib computes it (polynomial 0xEDB88320, reflected), from 0. Bitwise: for short headers.
uint32_t Crc32Ieee(const uint8_t* data, size_t lengthBytes);

}  // namespace cascade

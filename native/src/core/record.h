// A disk record's header page, as store/tiers/disk.ts writes it (the format is documented there):
// the C++ fill checks it itself, and takes the piece table that lets a cold load publish its bytes
// piece by piece, each checked against its CRC-32C, before the whole SHA-256 is known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "status.h"

namespace cascade {

constexpr uint64_t kRecordPageBytes = 4096;   // the header's aligned unit; the payload follows it
constexpr uint64_t kRecordHeaderBytes = 64;
constexpr uint32_t kRecordMagic = 0x31435343;  // 'CSC1' little-endian
constexpr uint32_t kPieceTableMax = (kRecordPageBytes - kRecordHeaderBytes) / 4;  // 1008 CRCs fit the page
constexpr uint32_t kPieceShiftMin = 18;  // 256 KiB pieces ...
constexpr uint32_t kPieceShiftMax = 23;  // ... up to 8 MiB (a divisor of the writer's staging chunk)

// The piece size (log2) a record of sizeBytes gets a table for; 0: none (empty, or over 1008 pieces
// of 8 MiB).
uint32_t PieceShiftFor(uint64_t sizeBytes);

struct PieceTable {
  uint32_t pieceShift = 0;       // 0: the record has no table
  std::vector<uint32_t> crcs;    // CRC-32C of each piece, in order
};

// Checks a record's header page (at least kRecordHeaderBytes, the table's bytes too when it has one)
// against the block it must hold: magic, header CRC-32, format, kind, length, SHA-256 (raw 32 bytes):
// kCorrupt and why when one differs. Then the table against its own CRC-32C: kOk with the table, or
// kOk with none (and why, when it had one that did not check out: the block then loads whole).
Status ParseRecordPage(const uint8_t* page, size_t pageBytes, const uint8_t* sha256, uint64_t sizeBytes, PieceTable* table, std::string* why);

}  // namespace cascade

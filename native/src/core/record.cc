#include "record.h"

#include <cstring>

#include "crc32c.h"

namespace cascade {

namespace {

uint32_t U32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;  // little-endian hosts only (x86-64, aarch64), as the rest of the core
}

uint64_t U64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

}  // namespace

uint32_t PieceShiftFor(uint64_t sizeBytes) {
  if (sizeBytes == 0) return 0;
  for (uint32_t shift = kPieceShiftMin; shift <= kPieceShiftMax; shift++) {
    if (((sizeBytes + (uint64_t{1} << shift) - 1) >> shift) <= kPieceTableMax) return shift;
  }
  return 0;
}

Status ParseRecordPage(const uint8_t* page, size_t pageBytes, const uint8_t* sha256, uint64_t sizeBytes, PieceTable* table, std::string* why) {
  table->pieceShift = 0;
  table->crcs.clear();
  if (pageBytes < kRecordHeaderBytes) {
    *why = "short header";
    return Status::kCorrupt;
  }
  if (U32(page) != kRecordMagic) {
    *why = "bad magic";
    return Status::kCorrupt;
  }
  if (U32(page + kRecordHeaderBytes - 4) != Crc32Ieee(page, kRecordHeaderBytes - 4)) {
    *why = "bad header checksum";
    return Status::kCorrupt;
  }
  if (page[4] != 1 || page[5] != 1) {
    *why = "unknown record format";
    return Status::kCorrupt;
  }
  if (U64(page + 8) != sizeBytes || memcmp(page + 16, sha256, 32) != 0) {
    *why = "the record holds another block";
    return Status::kCorrupt;
  }
  // The table only lets a load publish pieces early; the SHA-256 decides. A table that does not
  // check out is set aside (why says so) and the block loads whole.
  const uint32_t shift = page[6];
  if (shift == 0) return Status::kOk;  // written before piece tables (or by a writer without the addon)
  if (shift != PieceShiftFor(sizeBytes)) {
    *why = "bad piece size";
    return Status::kOk;
  }
  const uint64_t pieces = (sizeBytes + (uint64_t{1} << shift) - 1) >> shift;
  if (kRecordHeaderBytes + pieces * 4 > pageBytes) {
    *why = "short piece table";
    return Status::kOk;
  }
  const uint8_t* at = page + kRecordHeaderBytes;
  if (U32(page + 48) != Crc32c(0, at, pieces * 4)) {
    *why = "bad piece table checksum";
    return Status::kOk;
  }
  table->pieceShift = shift;
  table->crcs.resize(pieces);
  for (uint64_t i = 0; i < pieces; i++) table->crcs[i] = U32(at + i * 4);
  return Status::kOk;
}

}  // namespace cascade

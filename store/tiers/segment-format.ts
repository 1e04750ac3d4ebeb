/**
 * The segment file format: records, their piece tables, index files, and the reads of them that
 * other processes make (another cluster node, fsck). The disk tier (disk.ts) writes and recovers them.
 *
 *   [header, padded to RECORD_ALIGN_BYTES][payload, padded to RECORD_ALIGN_BYTES]
 *   header = magic u32 | format u8 | kind u8 | piece shift u8 | reserved u8 | payload length u64 |
 *            sha256 [32] | table crc32c u32 | reserved [8] | crc32 of the preceding 60 bytes u32
 *   piece table (right after the header, when piece shift != 0) = crc32c u32 of each 2^shift-byte
 *            piece of the payload, the last one shorter
 *   index file seg-N.idx = magic u32 | count u32 | covered bytes u64 | entries [48 each] | crc32 u32
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { RECORD_ALIGN_BYTES, RECORD_HEADER_BYTES } from '../constants';
import { fsyncPath, readFully } from './disk-io';
import { assert, CascadeError } from '../errors';
import { sha256Hex } from '../hash';
import { nativeBinding } from '../../native';

const RECORD_MAGIC = 0x31435343; // 'CSC1' little-endian
const RECORD_FORMAT = 1;
const RECORD_KIND_BLOCK = 1;
export const INDEX_MAGIC = 0x31495343; // 'CSI1'
export const INDEX_ENTRY_BYTES = 48; // sha256 [32] | record offset u64 | payload length u64
/** Where a block's record lies: its segment file, the record's start, the payload's length. */
export interface RecordLocation {
  file: string;
  offsetBytes: number;
  sizeBytes: number;
}

export function recordBytes(sizeBytes: number): number {
  return RECORD_ALIGN_BYTES + alignUp(sizeBytes);
}

export function alignUp(n: number): number {
  return Math.ceil(n / RECORD_ALIGN_BYTES) * RECORD_ALIGN_BYTES;
}

/** A record's piece table: CRC-32C of each 2^shift-byte piece of its payload. */
export interface PieceTable {
  shift: number;
  crcs: Uint32Array;
}

/** Payloads at least this large get their piece CRCs on a worker thread (~10 GB/s: 0.1 ms per MiB). */
const PIECE_CRC_ASYNC_MIN_BYTES = 1024 * 1024;
/** The largest piece shift (8 MiB), a divisor of the staging buffer: large records get their table chunk by chunk. */
export const PIECE_SHIFT_MAX = 23;

/** The piece shift a record of sizeBytes gets a table with; 0: none (no addon, empty, or too large). */
export function pieceShiftFor(sizeBytes: number): number {
  return nativeBinding()?.recordPieceShift(sizeBytes) ?? 0;
}

/** The CRC-32C of each 2^shift-byte piece of `bytes` (the addon's; callers checked pieceShiftFor). */
export async function pieceCrcs(bytes: Uint8Array, shift: number): Promise<Uint32Array> {
  const b = nativeBinding();
  assert(b !== undefined && shift > 0, 'piece CRCs need the addon and a piece size');
  return bytes.length >= PIECE_CRC_ASYNC_MIN_BYTES ? b.crc32cPiecesAsync(bytes, shift) : b.crc32cPieces(bytes, shift);
}

/** The table of a whole payload, or undefined where it gets none. */
export async function pieceTableOf(payload: Uint8Array): Promise<PieceTable | undefined> {
  const shift = pieceShiftFor(payload.length);
  return shift === 0 ? undefined : { shift, crcs: await pieceCrcs(payload, shift) };
}

export function concatCrcs(parts: Uint32Array[]): Uint32Array {
  const all = new Uint32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return all;
}

export function encodeHeader(sha256: string, sizeBytes: number, table?: PieceTable): Buffer {
  const h = Buffer.alloc(RECORD_ALIGN_BYTES);
  h.writeUInt32LE(RECORD_MAGIC, 0);
  h.writeUInt8(RECORD_FORMAT, 4);
  h.writeUInt8(RECORD_KIND_BLOCK, 5);
  h.writeBigUInt64LE(BigInt(sizeBytes), 8);
  h.write(sha256, 16, 32, 'hex');
  if (table !== undefined) {
    const n = table.crcs.length;
    assert(n === Math.ceil(sizeBytes / 2 ** table.shift) && RECORD_HEADER_BYTES + 4 * n <= RECORD_ALIGN_BYTES, 'a piece table covers its payload and fits the header page');
    h.writeUInt8(table.shift, 6);
    for (let i = 0; i < n; i++) h.writeUInt32LE(table.crcs[i], RECORD_HEADER_BYTES + 4 * i);
    const tableBytes = h.subarray(RECORD_HEADER_BYTES, RECORD_HEADER_BYTES + 4 * n);
    h.writeUInt32LE(nativeBinding()!.crc32cPieces(tableBytes, PIECE_SHIFT_MAX)[0], 48); // one piece: the table's CRC-32C
  }
  h.writeUInt32LE(crc32(h.subarray(0, RECORD_HEADER_BYTES - 4)), RECORD_HEADER_BYTES - 4);
  return h;
}

/** The header's key and length, or a reason it is not a valid header. */
export function decodeHeader(h: Buffer): { sha256: string; sizeBytes: number } | string {
  if (h.length < RECORD_HEADER_BYTES) return 'short header';
  if (h.readUInt32LE(0) !== RECORD_MAGIC) return 'bad magic';
  if (h.readUInt32LE(RECORD_HEADER_BYTES - 4) !== crc32(h.subarray(0, RECORD_HEADER_BYTES - 4))) return 'bad header checksum';
  if (h.readUInt8(4) !== RECORD_FORMAT || h.readUInt8(5) !== RECORD_KIND_BLOCK) return 'unknown record format';
  const size = h.readBigUInt64LE(8);
  if (size > BigInt(Number.MAX_SAFE_INTEGER)) return 'bad length';
  return { sha256: h.toString('hex', 16, 48), sizeBytes: Number(size) };
}

export const SEGMENT_RE = /^seg-(\d{8})\.log$/;
export const segName = (id: number) => `seg-${String(id).padStart(8, '0')}`;

/**
 * Read and check one block's record from a segment file that another process appends to (a cluster
 * node's segments on the shared tier). ESTALE when the record is not there (moved by compaction, the
 * file gone): the caller looks the block up again. ECORRUPT when the payload fails its SHA-256.
 */
export async function readRecordAt(location: RecordLocation, sha256: string): Promise<Buffer> {
  const { file, offsetBytes, sizeBytes } = location;
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    throw new CascadeError('ESTALE', `segment ${file} is gone`, { cause: e });
  }
  try {
    const header = Buffer.alloc(RECORD_HEADER_BYTES);
    if ((await readFully(fd, header, offsetBytes)) !== RECORD_HEADER_BYTES) throw new CascadeError('ESTALE', `no record at ${file}:${offsetBytes}`);
    const h = decodeHeader(header);
    if (typeof h === 'string' || h.sha256 !== sha256 || h.sizeBytes !== sizeBytes) {
      throw new CascadeError('ESTALE', `the record at ${file}:${offsetBytes} is not ${sha256} (${typeof h === 'string' ? h : 'another block'})`);
    }
    const data = Buffer.allocUnsafe(sizeBytes);
    const n = await readFully(fd, data, offsetBytes + RECORD_ALIGN_BYTES);
    if (n !== sizeBytes) throw new CascadeError('ESTALE', `short record at ${file}:${offsetBytes}`);
    if ((await sha256Hex(data)) !== sha256) throw new CascadeError('ECORRUPT', `block ${sha256} at ${file}:${offsetBytes} fails its SHA-256`);
    return data;
  } finally {
    fs.closeSync(fd);
  }
}

/** One record (or damaged stretch) of a segment file, as fsck sees it. */
export interface ScannedRecord {
  offsetBytes: number;
  /** Bytes this record or stretch covers in the file. */
  lengthBytes: number;
  /** From a valid header (also when only the payload is bad). */
  sha256?: string;
  sizeBytes?: number;
  /** Absent: header and payload check out. */
  problem?: string;
  /** The damage runs to the end of the file (a torn tail after a crash: the store truncates it at open). */
  tail?: boolean;
}

/**
 * Walk every record of a segment file read-only (fsck; the tier's own recovery truncates and
 * re-indexes, this changes nothing): each record with its payload's SHA-256 checked, and each damaged
 * stretch with its reason. After damage it resynchronises at the next 4 KiB boundary with a valid
 * header. `onBytes` gets the bytes read as it goes.
 */
export async function scanSegmentFile(file: string, onRecord: (r: ScannedRecord) => void, onBytes?: (n: number) => void): Promise<void> {
  const fd = fs.openSync(file, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    const header = Buffer.alloc(RECORD_HEADER_BYTES);
    const chunk = Buffer.allocUnsafe(8 * 1024 * 1024);
    const headerAt = async (pos: number) => {
      if ((await readFully(fd, header, pos)) < RECORD_HEADER_BYTES) return 'short header';
      const h = decodeHeader(header);
      if (typeof h !== 'string' && pos + recordBytes(h.sizeBytes) > size) return 'record runs past the end of the segment';
      return h;
    };
    let pos = 0;
    while (pos < size) {
      const h = await headerAt(pos);
      if (typeof h !== 'string') {
        const hash = crypto.createHash('sha256');
        let problem: string | undefined;
        for (let done = 0; done < h.sizeBytes; ) {
          const want = Math.min(chunk.length, h.sizeBytes - done);
          const n = await readFully(fd, chunk.subarray(0, want), pos + RECORD_ALIGN_BYTES + done);
          if (n < want) {
            problem = 'short payload';
            break;
          }
          hash.update(chunk.subarray(0, n));
          done += n;
          onBytes?.(n);
        }
        if (problem === undefined && hash.digest('hex') !== h.sha256) problem = 'payload SHA-256 mismatch';
        const lengthBytes = recordBytes(h.sizeBytes);
        onRecord({ offsetBytes: pos, lengthBytes, sha256: h.sha256, sizeBytes: h.sizeBytes, ...(problem ? { problem } : {}) });
        onBytes?.(lengthBytes - h.sizeBytes);
        pos += lengthBytes;
        continue;
      }
      let next = pos + RECORD_ALIGN_BYTES;
      while (next + RECORD_HEADER_BYTES <= size && typeof (await headerAt(next)) === 'string') next += RECORD_ALIGN_BYTES;
      const tail = next + RECORD_HEADER_BYTES > size;
      const end = tail ? size : next;
      onRecord({ offsetBytes: pos, lengthBytes: end - pos, problem: h, ...(tail ? { tail: true } : {}) });
      onBytes?.(end - pos);
      pos = end;
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** Segment files of a disk tier directory, oldest first. */
export function listSegmentFiles(dir: string): string[] {
  const segDir = path.join(dir, 'segments');
  let names: string[];
  try {
    names = fs.readdirSync(segDir);
  } catch {
    return [];
  }
  return names.filter((n) => SEGMENT_RE.test(n)).sort().map((n) => path.join(segDir, n));
}

export interface SegmentIndex {
  coveredBytes: number;
  entries: { key: string; offsetBytes: number; sizeBytes: number }[];
}

/**
 * A segment's index file (`seg-N.idx`): the live records up to `coveredBytes` when it was written, or
 * undefined when missing or damaged. A record before coveredBytes that it does not list is dead
 * (deleted before the index was written), and the tier will not read it.
 */
export function readSegmentIndex(file: string): SegmentIndex | undefined {
  let buf: Buffer;
  try {
    buf = fs.readFileSync(file);
  } catch {
    return undefined;
  }
  if (buf.length < 20 || buf.readUInt32LE(0) !== INDEX_MAGIC) return undefined;
  const count = buf.readUInt32LE(4);
  const end = 16 + count * INDEX_ENTRY_BYTES;
  if (buf.length !== end + 4 || buf.readUInt32LE(end) !== crc32(buf.subarray(0, end))) return undefined;
  const entries = [];
  for (let o = 16; o < end; o += INDEX_ENTRY_BYTES) {
    entries.push({ key: buf.toString('hex', o, o + 32), offsetBytes: Number(buf.readBigUInt64LE(o + 32)), sizeBytes: Number(buf.readBigUInt64LE(o + 40)) });
  }
  return { coveredBytes: Number(buf.readBigUInt64LE(8)), entries };
}

/** Write a segment's index file atomically (a temporary file, fdatasynced, renamed, the directory synced). */
export function writeSegmentIndex(file: string, index: SegmentIndex): void {
  const buf = Buffer.alloc(16 + index.entries.length * INDEX_ENTRY_BYTES + 4);
  buf.writeUInt32LE(INDEX_MAGIC, 0);
  buf.writeUInt32LE(index.entries.length, 4);
  buf.writeBigUInt64LE(BigInt(index.coveredBytes), 8);
  let o = 16;
  for (const e of index.entries) {
    buf.write(e.key, o, 32, 'hex');
    buf.writeBigUInt64LE(BigInt(e.offsetBytes), o + 32);
    buf.writeBigUInt64LE(BigInt(e.sizeBytes), o + 40);
    o += INDEX_ENTRY_BYTES;
  }
  buf.writeUInt32LE(crc32(buf.subarray(0, o)), o);
  const tmp = `${file}.tmp`;
  const fd = fs.openSync(tmp, 'w', 0o600);
  try {
    fs.writeSync(fd, buf);
    fs.fdatasyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  fsyncPath(path.dirname(file));
}

/**
 * The record at `pos` of a segment `endBytes` long, header and payload checked (its SHA-256), or the
 * reason it is not a valid record. `header` is a scratch buffer of RECORD_HEADER_BYTES.
 */
export async function checkRecordAt(fd: number, pos: number, endBytes: number, header: Buffer): Promise<{ sha256: string; sizeBytes: number } | string> {
  if ((await readFully(fd, header, pos)) < RECORD_HEADER_BYTES) return 'short header';
  const h = decodeHeader(header);
  if (typeof h === 'string') return h;
  if (pos + recordBytes(h.sizeBytes) > endBytes) return 'record runs past the end of the segment';
  const hash = crypto.createHash('sha256');
  const chunk = Buffer.allocUnsafe(Math.min(h.sizeBytes, 8 * 1024 * 1024));
  for (let done = 0; done < h.sizeBytes; ) {
    const want = Math.min(chunk.length, h.sizeBytes - done);
    const n = await readFully(fd, chunk.subarray(0, want), pos + RECORD_ALIGN_BYTES + done);
    if (n < want) return 'short payload';
    hash.update(chunk.subarray(0, n));
    done += n;
  }
  return hash.digest('hex') === h.sha256 ? h : 'payload SHA-256 mismatch';
}

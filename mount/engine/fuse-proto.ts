/**
 * The FUSE kernel protocol's messages, as the native engine's TypeScript adapter reads and writes
 * them: request decoding and reply encoding only, no I/O. Layouts are the kernel's
 * (include/uapi/linux/fuse.h, protocol 7.40, little-endian x86-64/arm64). Every decoder checks the
 * message is long enough and throws ProtoError otherwise (the adapter answers EIO, never crashes).
 */
import type { DirEntry, FileAttr, FsStatfs } from '../../fs/types';

export const Op = {
  LOOKUP: 1,
  FORGET: 2,
  GETATTR: 3,
  SETATTR: 4,
  READLINK: 5,
  SYMLINK: 6,
  MKNOD: 8,
  MKDIR: 9,
  UNLINK: 10,
  RMDIR: 11,
  RENAME: 12,
  LINK: 13,
  OPEN: 14,
  READ: 15,
  WRITE: 16,
  STATFS: 17,
  RELEASE: 18,
  FSYNC: 20,
  SETXATTR: 21,
  GETXATTR: 22,
  LISTXATTR: 23,
  REMOVEXATTR: 24,
  FLUSH: 25,
  INIT: 26,
  OPENDIR: 27,
  READDIR: 28,
  RELEASEDIR: 29,
  FSYNCDIR: 30,
  ACCESS: 34,
  CREATE: 35,
  INTERRUPT: 36,
  DESTROY: 38,
  BATCH_FORGET: 42,
  FALLOCATE: 43,
  RENAME2: 45,
} as const;

export const IN_HEADER_BYTES = 40;
const ATTR_BYTES = 88;
export const ENTRY_OUT_BYTES = 40 + ATTR_BYTES;
export const ATTR_OUT_BYTES = 16 + ATTR_BYTES;
export const OPEN_OUT_BYTES = 16;

export const FATTR = { MODE: 1, UID: 2, GID: 4, SIZE: 8, ATIME: 16, MTIME: 32, FH: 64, ATIME_NOW: 128, MTIME_NOW: 256, CTIME: 1024 } as const;
export const FOPEN = { DIRECT_IO: 1, KEEP_CACHE: 2, NOFLUSH: 1 << 5, PASSTHROUGH: 1 << 7 } as const;
export const GETATTR_FH = 1;
export const RENAME_NOREPLACE = 1;
export const RENAME_EXCHANGE = 2;
/** What a directory entry's inode number reads as when we do not know it (FUSE_UNKNOWN_INO). */
const UNKNOWN_INO = 0xffffffff;

export class ProtoError extends Error {}

export interface InHeader {
  len: number;
  opcode: number;
  unique: number;
  nodeid: number;
  uid: number;
  gid: number;
  pid: number;
}

/** A little-endian cursor over one request; every read is bounds-checked. */
export class Reader {
  private pos: number;
  constructor(
    private readonly buf: Buffer,
    start = IN_HEADER_BYTES,
  ) {
    this.pos = start;
  }
  private need(n: number): void {
    if (this.pos + n > this.buf.length) throw new ProtoError(`request too short: needs ${this.pos + n} bytes, has ${this.buf.length}`);
  }
  u32(): number {
    this.need(4);
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }
  u64(): number {
    this.need(8);
    const v = this.buf.readBigUInt64LE(this.pos);
    this.pos += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new ProtoError(`a 64-bit field (${v}) exceeds 2^53`);
    return Number(v);
  }
  /** A 64-bit field as the kernel sent it, for fields that may hold any value (times, lock owners). */
  u64Big(): bigint {
    this.need(8);
    const v = this.buf.readBigUInt64LE(this.pos);
    this.pos += 8;
    return v;
  }
  /** A signed 64-bit field (seconds of a time, which may be before 1970). */
  i64Big(): bigint {
    this.need(8);
    const v = this.buf.readBigInt64LE(this.pos);
    this.pos += 8;
    return v;
  }
  skip(n: number): void {
    this.need(n);
    this.pos += n;
  }
  /** A NUL-terminated name (the kernel always terminates them). */
  name(): string {
    const end = this.buf.indexOf(0, this.pos);
    if (end < 0) throw new ProtoError('name without its terminating NUL');
    const s = this.buf.toString('utf8', this.pos, end);
    this.pos = end + 1;
    return s;
  }
  /** The rest of the message (a view, not a copy). */
  rest(n?: number): Buffer {
    const len = n ?? this.buf.length - this.pos;
    this.need(len);
    const v = this.buf.subarray(this.pos, this.pos + len);
    this.pos += len;
    return v;
  }
}

/** A 64-bit value as a JS number, or undefined when it is past 2^53 (the caller decides the errno). */
export function safeNumber(v: bigint): number | undefined {
  return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : undefined;
}

export function readHeader(buf: Buffer): InHeader {
  if (buf.length < IN_HEADER_BYTES) throw new ProtoError(`message of ${buf.length} bytes has no header`);
  const unique = buf.readBigUInt64LE(8);
  const nodeid = buf.readBigUInt64LE(16);
  if (unique > BigInt(Number.MAX_SAFE_INTEGER) || nodeid > BigInt(Number.MAX_SAFE_INTEGER)) throw new ProtoError('unique or nodeid exceeds 2^53');
  return {
    len: buf.readUInt32LE(0),
    opcode: buf.readUInt32LE(4),
    unique: Number(unique),
    nodeid: Number(nodeid),
    uid: buf.readUInt32LE(24),
    gid: buf.readUInt32LE(28),
    pid: buf.readUInt32LE(32),
  };
}

// ---- replies ----

class Writer {
  readonly buf: Buffer;
  private pos = 0;
  constructor(n: number) {
    this.buf = Buffer.alloc(n);
  }
  u32(v: number): this {
    this.buf.writeUInt32LE(v >>> 0, this.pos);
    this.pos += 4;
    return this;
  }
  i32(v: number): this {
    this.buf.writeInt32LE(v, this.pos);
    this.pos += 4;
    return this;
  }
  u64(v: number): this {
    this.buf.writeBigUInt64LE(BigInt(Math.max(0, Math.floor(v))), this.pos);
    this.pos += 8;
    return this;
  }
  attr(a: FileAttr): this {
    const sec = (ms: number) => Math.floor(Math.max(0, ms) / 1000);
    const nsec = (ms: number) => Math.floor((Math.max(0, ms) % 1000) * 1e6);
    this.u64(a.ino)
      .u64(a.sizeBytes)
      .u64(Math.ceil(a.sizeBytes / 512))
      .u64(sec(a.atimeMs))
      .u64(sec(a.mtimeMs))
      .u64(sec(a.ctimeMs))
      .u32(nsec(a.atimeMs))
      .u32(nsec(a.mtimeMs))
      .u32(nsec(a.ctimeMs))
      .u32(a.mode)
      .u32(a.nlink) // 0 for a file unlinked while open
      .u32(a.uid)
      .u32(a.gid)
      .u32(0) // rdev
      .u32(4096) // blksize: the preferred I/O size
      .u32(0); // flags
    return this;
  }
}

/** Cache lifetimes the kernel is told (libfuse's defaults: 1 s). */
export interface Validity {
  entryMs: number;
  attrMs: number;
}

const validSec = (ms: number) => Math.floor(ms / 1000);
const validNsec = (ms: number) => Math.floor((ms % 1000) * 1e6);

export function entryOut(nodeid: number, attr: FileAttr, v: Validity): Buffer {
  const w = new Writer(ENTRY_OUT_BYTES)
    .u64(nodeid)
    .u64(0) // generation: node ids are never reused while mounted
    .u64(validSec(v.entryMs))
    .u64(validSec(v.attrMs))
    .u32(validNsec(v.entryMs))
    .u32(validNsec(v.attrMs))
    .attr(attr);
  return w.buf;
}

/** struct fuse_attr alone (what the native engine's attribute cache keeps; ino is the file's own). */
export const FUSE_ATTR_BYTES = 88;

export function fuseAttr(attr: FileAttr): Buffer {
  return new Writer(FUSE_ATTR_BYTES).attr(attr).buf;
}

export function attrOut(attr: FileAttr, v: Validity): Buffer {
  return new Writer(ATTR_OUT_BYTES).u64(validSec(v.attrMs)).u32(validNsec(v.attrMs)).u32(0).attr(attr).buf;
}

export function openOut(fh: number, openFlags: number, backingId = 0): Buffer {
  return new Writer(OPEN_OUT_BYTES).u64(fh).u32(openFlags).i32(backingId).buf;
}

export function writeOut(sizeBytes: number): Buffer {
  return new Writer(8).u32(sizeBytes).u32(0).buf;
}

export function xattrSizeOut(sizeBytes: number): Buffer {
  return new Writer(8).u32(sizeBytes).u32(0).buf;
}

export function statfsOut(s: FsStatfs): Buffer {
  const w = new Writer(80)
    .u64(s.totalBlocks)
    .u64(s.freeBlocks)
    .u64(s.availBlocks)
    .u64(s.totalFiles)
    .u64(s.freeFiles)
    .u32(s.blockBytes)
    .u32(s.nameMaxBytes)
    .u32(s.blockBytes); // frsize; padding and spare stay 0
  return w.buf;
}

/** d_type values (dirent.h): with them `scandir(...).is_file()` needs no stat per entry. */
export const DT = { DIR: 4, REG: 8 } as const;

/**
 * Directory entries from index `offset` on that fit in `maxBytes`: each is fuse_dirent (ino, off of
 * the next entry, namelen, type) plus the name, padded to 8 bytes. Returns the packed bytes.
 */
export function packDirents(entries: DirEntry[], offset: number, maxBytes: number): Buffer {
  // One zeroed buffer, written in place: a listing of 5,000 names is 50 of these calls, and a buffer
  // per entry (plus BigInt offsets) cost 4 ms of the JS thread for them.
  const out = Buffer.alloc(Math.max(0, maxBytes));
  let used = 0;
  for (let i = offset; i < entries.length; i++) {
    const name = entries[i].name;
    const nameBytes = Buffer.byteLength(name);
    const size = (24 + nameBytes + 7) & ~7;
    if (used + size > maxBytes) break;
    out.writeUInt32LE(UNKNOWN_INO % 2 ** 32, used);
    out.writeUInt32LE(Math.floor(UNKNOWN_INO / 2 ** 32), used + 4);
    // The offset of the next entry (i + 1 < 2^32: listings are far smaller).
    out.writeUInt32LE(i + 1, used + 8);
    out.writeUInt32LE(nameBytes, used + 16);
    out.writeUInt32LE(entries[i].kind === 'dir' ? DT.DIR : DT.REG, used + 20);
    out.write(name, used + 24, nameBytes, 'utf8');
    used += size;
  }
  return out.subarray(0, used);
}

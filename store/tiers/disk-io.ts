/**
 * Segment file I/O: the calls of the live read and write paths (replaceable, so tests inject faults),
 * full reads and writes in Node's largest chunks, fsync by path, whether O_DIRECT appends suit a
 * directory, and the errors a failed read or fdatasync becomes.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GiB, RECORD_ALIGN_BYTES } from '../constants';
import { CascadeError } from '../errors';
import { pageBytes } from '../copy';

/** Node's fs calls take at most 2 GiB - 1 bytes at once. */
const IO_CHUNK_BYTES = 1 * GiB;
/**
 * The segment file operations of the live read and write paths, which can fail in ways tests must reach
 * (fault injection: store/faults.ts). Recovery at open reads with the plain calls.
 */
export interface DiskIo {
  /** pread: bytes read (0 at end of file). */
  read(fd: number, buf: Uint8Array, offset: number, length: number, position: number): Promise<number>;
  /** pwrite: bytes written. */
  write(fd: number, buf: Uint8Array, offset: number, length: number, position: number): Promise<number>;
  fdatasync(fd: number): Promise<void>;
}

export const realDiskIo: DiskIo = {
  read: (fd, buf, offset, length, position) =>
    new Promise((resolve, reject) => fs.read(fd, buf, offset, length, position, (e, n) => (e ? reject(e) : resolve(n)))),
  write: (fd, buf, offset, length, position) =>
    new Promise((resolve, reject) => fs.write(fd, buf, offset, length, position, (e, n) => (e ? reject(e) : resolve(n)))),
  fdatasync: (fd) => new Promise((resolve, reject) => fs.fdatasync(fd, (e) => (e ? reject(e) : resolve()))),
};

export async function readFully(fd: number, buf: Uint8Array, position: number, io: DiskIo = realDiskIo): Promise<number> {
  let done = 0;
  while (done < buf.length) {
    const n = await io.read(fd, buf, done, Math.min(buf.length - done, IO_CHUNK_BYTES), position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

export async function writeFully(fd: number, parts: Uint8Array[], position: number, io: DiskIo): Promise<void> {
  let pos = position;
  for (const part of parts) {
    let done = 0;
    while (done < part.length) {
      const n = await io.write(fd, part, done, Math.min(part.length - done, IO_CHUNK_BYTES), pos);
      done += n;
      pos += n;
    }
  }
}


/** fsync a file or a directory (its entries) by path. */
export function fsyncPath(p: string): void {
  const fd = fs.openSync(p, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Durability of these keys could not be confirmed: they were dropped from the disk tier. */
export class DiskSyncError extends CascadeError {
  constructor(readonly lostKeys: string[], cause: unknown) {
    super('EIO', `fdatasync failed; ${lostKeys.length} block(s) must be written again`, { cause });
  }
}

/** tmpfs (statfs f_type): its O_DIRECT (Linux 6.6+) still goes through its page cache, which is its storage. */
const TMPFS_MAGIC = 0x01021994;

/**
 * Whether O_DIRECT appends suit this machine and directory: pages no larger than a record's alignment
 * (a larger page straddling the end of file could be read into the cache while an append writes it),
 * and not tmpfs (nothing to bypass). The directory may not exist yet: then its parent decides.
 */
export function directWritesFit(dir: string): boolean {
  const page = pageBytes();
  if (page === undefined || page > RECORD_ALIGN_BYTES) return false;
  for (let d = dir; ; d = path.dirname(d)) {
    try {
      return fs.statfsSync(d).type !== TMPFS_MAGIC;
    } catch {
      if (path.dirname(d) === d) return false;
    }
  }
}

/** A failed read of a segment: EIO to the reader (the record may be fine; a later read may succeed). */
export function readFailed(file: string, e: unknown): CascadeError {
  return new CascadeError('EIO', `read of ${file} failed: ${(e as Error).message}`, { cause: e });
}


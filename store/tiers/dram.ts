/**
 * The DRAM tier in shared memory, without a native addon: one arena file on tmpfs (/dev/shm), addressed
 * with pread/pwrite, carved into fixed-size pages by an extent allocator. A block is a list of extents,
 * so it need not be contiguous and free space never has to be compacted.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DRAM_PAGE_BYTES_DEFAULT, GiB, MiB } from '../constants';
import { assert, CascadeError } from '../errors';
import { validateSha256 } from '../names';
import type { Tier, TierEntry, TierStats } from '../tier';

/** A run of whole arena pages. */
export interface Extent {
  startPage: number;
  pageCount: number;
}

export interface ShmArenaOptions {
  /** Arena size; rounded down to whole pages. */
  capacityBytes: number;
  /** Allocation unit; a positive multiple of 4096. */
  pageBytes?: number;
  /** Directory for the arena file; os.tmpdir() is used only when this does not exist. */
  dir?: string;
  /** Touch the whole arena at open so that first-touch page faults stay off the write path. */
  prefault?: boolean;
  /**
   * Back the arena with 2 MiB pages: a private tmpfs mounted with huge=always (needs CAP_SYS_ADMIN).
   * A 64 MiB pread from it runs ~2x faster than from /dev/shm's 4 KiB pages (fewer per-page steps in
   * the kernel). 'auto' tries and falls back to `dir`; true fails if it cannot; false never tries.
   */
  hugePages?: boolean | 'auto';
}

/**
 * Mount a private huge-page tmpfs, create the arena file in it, unlink it, and detach the mount lazily:
 * the filesystem then lives exactly as long as the returned fd, so nothing is left mounted or leaked,
 * even after SIGKILL. Throws when mounting is not permitted.
 */
function openHugeArenaFile(arenaBytes: number): { fd: number; dir: string } {
  const mountDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-arena-'));
  const sizeBytes = Math.max(HUGE_PAGE_BYTES, Math.ceil(arenaBytes / HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeBytes},huge=always,mode=0700`, 'cascade-arena', mountDir], {
      stdio: 'pipe',
    });
  } catch (e) {
    fs.rmdirSync(mountDir);
    throw e;
  }
  try {
    const file = path.join(mountDir, 'arena');
    const fd = fs.openSync(file, 'wx+', 0o600);
    fs.unlinkSync(file);
    return { fd, dir: mountDir };
  } finally {
    execFileSync('umount', ['-l', mountDir], { stdio: 'pipe' });
    fs.rmdirSync(mountDir);
  }
}

/**
 * An unlinked arena file (only its fd remains): on a private huge-page tmpfs when `hugePages` allows
 * and mounting works, else in `dir` (/dev/shm; os.tmpdir() when `dir` does not exist). Shared by the
 * TypeScript tier and the native one.
 */
export function openArenaFile(arenaBytes: number, dir: string, hugePages: boolean | 'auto'): { fd: number; dir: string; huge: boolean } {
  if (hugePages !== false && arenaBytes > 0) {
    try {
      return { ...openHugeArenaFile(arenaBytes), huge: true };
    } catch (e) {
      if (hugePages === true) throw ioError('dram tier: cannot mount a huge-page tmpfs (needs CAP_SYS_ADMIN)', e);
    }
  }
  const arenaDir = fs.existsSync(dir) ? dir : os.tmpdir();
  const file = path.join(arenaDir, `cascade-dram-${process.pid}-${randomBytes(8).toString('hex')}.arena`);
  let fd: number;
  try {
    fd = fs.openSync(file, 'wx+', 0o600);
  } catch (e) {
    throw ioError(`dram tier: cannot create arena in ${arenaDir}`, e);
  }
  // Unlink at once and keep only the fd: the memory lives as long as the fd does, so a daemon that
  // is SIGKILLed leaks no shared memory (the kernel frees it when the fd is closed at exit).
  // Unlinking before sizing leaves no window in which a sized file sits in the directory.
  fs.unlinkSync(file);
  return { fd, dir: arenaDir, huge: false };
}

/** Options with defaults filled in and checked, and the arena size (whole pages). */
export function arenaOptions(options: ShmArenaOptions): Required<ShmArenaOptions> & { arenaBytes: number } {
  const { capacityBytes, pageBytes = DRAM_PAGE_BYTES_DEFAULT, dir = '/dev/shm', prefault = true, hugePages = false } = options;
  if (!Number.isSafeInteger(capacityBytes) || capacityBytes < 0) {
    throw new CascadeError('EINVAL', `dram tier: capacityBytes must be a non-negative integer, got ${capacityBytes}`);
  }
  if (!Number.isSafeInteger(pageBytes) || pageBytes <= 0 || pageBytes % OS_PAGE_BYTES !== 0) {
    throw new CascadeError('EINVAL', `dram tier: pageBytes must be a positive multiple of ${OS_PAGE_BYTES}, got ${pageBytes}`);
  }
  const arenaBytes = Math.floor(capacityBytes / pageBytes) * pageBytes;
  return { capacityBytes, pageBytes, dir, prefault, hugePages, arenaBytes };
}

/** Prefault writes zeros in chunks of this size (bounded scratch buffer). */
const PREFAULT_CHUNK_BYTES = 8 * MiB;
/** One pread/pwrite moves at most this much (Linux caps a single call just under 2 GiB anyway). */
const IO_CHUNK_MAX_BYTES = 1 * GiB;
const OS_PAGE_BYTES = 4096;
const HUGE_PAGE_BYTES = 2 * MiB;

/**
 * Page allocator over [0, totalPages). Free space is a list of extents sorted by startPage, coalesced
 * on free, so adjacent free extents never exist. O(free extents) per call; fine while free lists stay
 * short, which 64 KiB pages and MiB-sized blocks ensure.
 */
export class ExtentAllocator {
  readonly totalPages: number;
  private free: Extent[];
  private freePageCount: number;

  constructor(totalPages: number) {
    assert(Number.isSafeInteger(totalPages) && totalPages >= 0, 'page count is a non-negative integer');
    this.totalPages = totalPages;
    this.free = totalPages > 0 ? [{ startPage: 0, pageCount: totalPages }] : [];
    this.freePageCount = totalPages;
  }

  get freePages(): number {
    return this.freePageCount;
  }

  /** A copy of the free list, sorted by startPage. */
  freeExtents(): Extent[] {
    return this.free.map((e) => ({ ...e }));
  }

  /**
   * Extents covering exactly `pageCount` pages, or undefined (and nothing taken) when too few are free.
   * Best fit when one extent is big enough (keeps large runs for large blocks); otherwise the largest
   * extents, so the block has as few pieces as possible.
   */
  allocate(pageCount: number): Extent[] | undefined {
    assert(Number.isSafeInteger(pageCount) && pageCount >= 0, 'page count is a non-negative integer');
    if (pageCount === 0) return [];
    if (pageCount > this.freePageCount) return undefined;
    const one = this.allocateContiguous(pageCount);
    if (one) return [one];

    const largestFirst = [...this.free].sort((a, b) => b.pageCount - a.pageCount || a.startPage - b.startPage);
    const taken: Extent[] = [];
    let remaining = pageCount;
    for (const extent of largestFirst) {
      const count = Math.min(extent.pageCount, remaining);
      taken.push({ startPage: extent.startPage, pageCount: count });
      extent.startPage += count; // same objects as in this.free: shrinks them in place
      extent.pageCount -= count;
      remaining -= count;
      if (remaining === 0) break;
    }
    assert(remaining === 0, 'free page count covers the request');
    this.free = this.free.filter((e) => e.pageCount > 0);
    this.freePageCount -= pageCount;
    // Arena order makes a whole-block read walk memory forwards.
    return taken.sort((a, b) => a.startPage - b.startPage);
  }

  /**
   * One extent of exactly `pageCount` pages (best fit), or undefined when no free run is that long.
   * For memory that must be one range (the GPU pool: a block is one offset and size to an IPC reader).
   */
  allocateContiguous(pageCount: number): Extent | undefined {
    assert(Number.isSafeInteger(pageCount) && pageCount >= 1, 'page count is a positive integer');
    // Best fit: keeps large runs for large blocks.
    let best = -1;
    for (let i = 0; i < this.free.length; i++) {
      const count = this.free[i].pageCount;
      if (count >= pageCount && (best < 0 || count < this.free[best].pageCount)) {
        best = i;
        if (count === pageCount) break;
      }
    }
    if (best < 0) return undefined;
    const extent = this.free[best];
    const taken = { startPage: extent.startPage, pageCount };
    extent.startPage += pageCount;
    extent.pageCount -= pageCount;
    if (extent.pageCount === 0) this.free.splice(best, 1);
    this.freePageCount -= pageCount;
    return taken;
  }

  /** Pages in the longest free run. */
  largestFreePages(): number {
    let most = 0;
    for (const e of this.free) most = Math.max(most, e.pageCount);
    return most;
  }

  /** Return extents to the free list, merging with free neighbours. */
  release(extents: readonly Extent[]): void {
    for (const extent of extents) this.releaseOne(extent);
  }

  private releaseOne(extent: Extent): void {
    const { startPage, pageCount } = extent;
    if (pageCount === 0) return;
    assert(Number.isSafeInteger(startPage) && startPage >= 0, 'extent start is a page index');
    assert(Number.isSafeInteger(pageCount) && startPage + pageCount <= this.totalPages, 'extent lies in the arena');
    // First free extent starting after this one.
    let lo = 0;
    let hi = this.free.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.free[mid].startPage < startPage) lo = mid + 1;
      else hi = mid;
    }
    const prev = lo > 0 ? this.free[lo - 1] : undefined;
    const next = lo < this.free.length ? this.free[lo] : undefined;
    assert(prev === undefined || prev.startPage + prev.pageCount <= startPage, 'freed extent overlaps free space (double free)');
    assert(next === undefined || startPage + pageCount <= next.startPage, 'freed extent overlaps free space (double free)');
    const joinsPrev = prev !== undefined && prev.startPage + prev.pageCount === startPage;
    const joinsNext = next !== undefined && startPage + pageCount === next.startPage;
    if (joinsPrev && joinsNext) {
      prev.pageCount += pageCount + next.pageCount;
      this.free.splice(lo, 1);
    } else if (joinsPrev) {
      prev.pageCount += pageCount;
    } else if (joinsNext) {
      next.startPage = startPage;
      next.pageCount += pageCount;
    } else {
      this.free.splice(lo, 0, { startPage, pageCount });
    }
    this.freePageCount += pageCount;
  }
}

interface ArenaBlock {
  sizeBytes: number;
  /** In block order: byte 0 of the block is the first byte of extents[0]. */
  extents: Extent[];
}

/**
 * Every method runs to completion without yielding (sync pread/pwrite), so no call ever observes
 * another half done: a delete cannot free pages under a read in progress.
 */
export class ShmArenaTier implements Tier {
  readonly name = 'dram' as const;
  readonly persistent = false;
  readonly reclaimsOnDelete = true;
  /** The arena size: the requested capacity rounded down to whole pages. */
  readonly capacityBytes: number;
  readonly pageBytes: number;
  /** Where the (already unlinked) arena file was created. */
  readonly arenaDir: string;

  private fd: number | undefined;
  private readonly allocator: ExtentAllocator;
  private readonly blocks = new Map<string, ArenaBlock>();

  private constructor(fd: number, arenaDir: string, arenaPages: number, pageBytes: number, readonly hugePages: boolean) {
    this.fd = fd;
    this.arenaDir = arenaDir;
    this.pageBytes = pageBytes;
    this.capacityBytes = arenaPages * pageBytes;
    this.allocator = new ExtentAllocator(arenaPages);
  }

  static async open(options: ShmArenaOptions): Promise<ShmArenaTier> {
    const { pageBytes, dir, prefault, hugePages, arenaBytes } = arenaOptions(options);
    const arenaPages = arenaBytes / pageBytes;
    const { fd, dir: arenaDir, huge } = openArenaFile(arenaBytes, dir, hugePages);
    try {
      fs.ftruncateSync(fd, arenaBytes);
      if (prefault && arenaBytes > 0) {
        // tmpfs allocates a page on its first write, and that first touch is slow (~1.1 GB/s). Paying it
        // once here keeps it off the put path; it also fails early if the tmpfs cannot hold the arena.
        const zeros = Buffer.alloc(Math.min(PREFAULT_CHUNK_BYTES, arenaBytes));
        for (let positionBytes = 0; positionBytes < arenaBytes; positionBytes += zeros.length) {
          writeFully(fd, zeros, 0, Math.min(zeros.length, arenaBytes - positionBytes), positionBytes);
        }
      }
    } catch (e) {
      fs.closeSync(fd);
      throw ioError(`dram tier: cannot set up a ${arenaBytes}-byte arena in ${arenaDir}`, e);
    }
    return new ShmArenaTier(fd, arenaDir, arenaPages, pageBytes, huge);
  }

  has(key: string): boolean {
    this.openFd();
    return this.blocks.has(key);
  }

  sizeOf(key: string): number | undefined {
    this.openFd();
    return this.blocks.get(key)?.sizeBytes;
  }

  footprintBytes(sizeBytes: number): number {
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes < 0) {
      throw new CascadeError('EINVAL', `size must be a non-negative integer, got ${sizeBytes}`);
    }
    return this.pagesFor(sizeBytes) * this.pageBytes;
  }

  freeBytes(): number {
    this.openFd();
    return this.allocator.freePages * this.pageBytes;
  }

  async write(key: string, data: Uint8Array): Promise<void> {
    const fd = this.openFd();
    validateSha256(key);
    if (this.blocks.has(key)) return; // content addressing: same key, same bytes
    const sizeBytes = data.byteLength;
    const extents = this.allocator.allocate(this.pagesFor(sizeBytes));
    if (extents === undefined) {
      throw new CascadeError('ENOSPC', `dram tier: ${this.footprintBytes(sizeBytes)} bytes needed, ${this.freeBytes()} free`);
    }
    try {
      let doneBytes = 0;
      for (const extent of extents) {
        const countBytes = Math.min(extent.pageCount * this.pageBytes, sizeBytes - doneBytes);
        writeFully(fd, data, doneBytes, countBytes, extent.startPage * this.pageBytes);
        doneBytes += countBytes;
      }
      assert(doneBytes === sizeBytes, 'extents cover the block');
    } catch (e) {
      this.allocator.release(extents); // nothing half-written stays allocated or visible
      throw ioError(`dram tier: write of ${key} failed`, e);
    }
    // Visible only once every byte is in place.
    this.blocks.set(key, { sizeBytes, extents });
  }

  async read(key: string, offsetBytes: number, target: Uint8Array): Promise<number> {
    const fd = this.openFd();
    if (!Number.isSafeInteger(offsetBytes) || offsetBytes < 0) {
      throw new CascadeError('EINVAL', `offset must be a non-negative integer, got ${offsetBytes}`);
    }
    const block = this.blocks.get(key);
    if (block === undefined) throw new CascadeError('ENOENT', `dram tier: no block ${key}`);
    if (offsetBytes >= block.sizeBytes) return 0;
    const wantBytes = Math.min(target.byteLength, block.sizeBytes - offsetBytes);
    let filledBytes = 0;
    let extentStartBytes = 0; // offset in the block of the current extent's first byte
    for (const extent of block.extents) {
      if (filledBytes === wantBytes) break;
      const extentBytes = extent.pageCount * this.pageBytes;
      const cursorBytes = offsetBytes + filledBytes;
      if (cursorBytes < extentStartBytes + extentBytes) {
        const withinBytes = cursorBytes - extentStartBytes;
        const countBytes = Math.min(extentBytes - withinBytes, wantBytes - filledBytes);
        try {
          readFully(fd, target, filledBytes, countBytes, extent.startPage * this.pageBytes + withinBytes);
        } catch (e) {
          throw ioError(`dram tier: read of ${key} failed`, e);
        }
        filledBytes += countBytes;
      }
      extentStartBytes += extentBytes;
    }
    assert(filledBytes === wantBytes, 'extents cover the block');
    return wantBytes;
  }

  async delete(key: string): Promise<void> {
    this.openFd();
    const block = this.blocks.get(key);
    if (block === undefined) return;
    this.blocks.delete(key);
    this.allocator.release(block.extents);
  }

  scan(): TierEntry[] {
    this.openFd();
    return Array.from(this.blocks, ([key, block]) => ({ key, sizeBytes: block.sizeBytes }));
  }

  async sync(): Promise<void> {
    this.openFd(); // nothing to make durable: this tier forgets everything on restart
  }

  stats(): TierStats {
    this.openFd();
    const usedPages = this.allocator.totalPages - this.allocator.freePages;
    return { name: this.name, capacityBytes: this.capacityBytes, usedBytes: usedPages * this.pageBytes, blocks: this.blocks.size };
  }

  async close(): Promise<void> {
    if (this.fd === undefined) return;
    const fd = this.fd;
    this.fd = undefined;
    this.blocks.clear();
    fs.closeSync(fd); // the last reference to the unlinked file: tmpfs frees the arena here
  }

  /** The extents of a block, in block order (diagnostics and tests). */
  extentsOf(key: string): Extent[] | undefined {
    this.openFd();
    return this.blocks.get(key)?.extents.map((e) => ({ ...e }));
  }

  /** The free list, sorted by startPage (diagnostics and tests). */
  freeExtents(): Extent[] {
    this.openFd();
    return this.allocator.freeExtents();
  }

  private pagesFor(sizeBytes: number): number {
    return Math.ceil(sizeBytes / this.pageBytes);
  }

  private openFd(): number {
    if (this.fd === undefined) throw new CascadeError('EBUSY', 'dram tier is closed');
    return this.fd;
  }
}

// tmpfs is memory: a sync pread/pwrite is one kernel memcpy, cheaper than a hop to the libuv threadpool
// and back. Both loop because the kernel may move fewer bytes than asked.

function writeFully(fd: number, source: Uint8Array, sourceOffsetBytes: number, countBytes: number, positionBytes: number): void {
  let doneBytes = 0;
  while (doneBytes < countBytes) {
    const chunkBytes = Math.min(countBytes - doneBytes, IO_CHUNK_MAX_BYTES);
    const n = fs.writeSync(fd, source, sourceOffsetBytes + doneBytes, chunkBytes, positionBytes + doneBytes);
    assert(n > 0, 'pwrite makes progress');
    doneBytes += n;
  }
}

function readFully(fd: number, target: Uint8Array, targetOffsetBytes: number, countBytes: number, positionBytes: number): void {
  let doneBytes = 0;
  while (doneBytes < countBytes) {
    const chunkBytes = Math.min(countBytes - doneBytes, IO_CHUNK_MAX_BYTES);
    const n = fs.readSync(fd, target, targetOffsetBytes + doneBytes, chunkBytes, positionBytes + doneBytes);
    // The arena is sized at open, so reading inside it never hits end of file.
    if (n === 0) throw new CascadeError('EIO', `unexpected end of arena at ${positionBytes + doneBytes}`);
    doneBytes += n;
  }
}

/** A failed system call becomes a CascadeError; anything else (a broken invariant) passes through. */
function ioError(message: string, cause: unknown): Error {
  if (cause instanceof CascadeError) return cause;
  if (!(cause instanceof Error)) return new Error(String(cause));
  const systemError = cause as NodeJS.ErrnoException;
  if (systemError.syscall === undefined) return cause;
  return new CascadeError(systemError.code === 'ENOSPC' ? 'ENOSPC' : 'EIO', `${message}: ${cause.message}`, { cause });
}

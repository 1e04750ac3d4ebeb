/**
 * The disk tier: blocks appended to large segment files, never one file per block (a parallel
 * filesystem's metadata server suffers from millions of small files). The record format is in
 * segment-format.ts.
 *
 * The piece table lets a cold load check and publish a block piece by piece (the native fill,
 * native/src/core/record.h, which checks the header itself too), so readers get its first bytes
 * before the whole SHA-256 is known. The shift is the smallest from 18 (256 KiB) to 23 (8 MiB) whose
 * table fits the header page (1,008 pieces); larger blocks, and records written without the native
 * addon, have none (shift 0: readers ignore the byte).
 *
 * Records start on 4 KiB boundaries, so a scan can resynchronise after damage and payloads suit O_DIRECT.
 * Sealed segments are read-only and carry an index file (`seg-N.idx`) so that open does not read them.
 * On open, records past the last indexed one are scanned and re-indexed if their SHA-256 matches; a torn
 * tail is truncated; a damaged record in the middle is quarantined (logged, never served). Every read
 * checks the record header and the payload's SHA-256. After an fdatasync error a segment is sealed and
 * never synced again: the keys whose durability it could not confirm are dropped from the index and
 * reported, so the caller can write them elsewhere.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  COMPACT_DEAD_FRACTION_DEFAULT,
  RECORD_ALIGN_BYTES,
  RECORD_HEADER_BYTES,
  SEGMENT_TARGET_BYTES_DEFAULT,
} from '../constants';
import { assert, CascadeError } from '../errors';
import type { Tier, TierEntry, TierEvents, TierStats } from '../tier';
import { allocAligned } from '../copy';
import { sha256Hex } from '../hash';
import { mkdirAll } from '../mkdir';
import {
  PIECE_SHIFT_MAX,
  SEGMENT_RE,
  alignUp,
  concatCrcs,
  decodeHeader,
  encodeHeader,
  pieceCrcs,
  pieceShiftFor,
  pieceTableOf,
  checkRecordAt,
  readSegmentIndex,
  writeSegmentIndex,
  recordBytes,
  segName,
  type RecordLocation,
  type SegmentIndex,
} from './segment-format';
import {
  fsyncPath,
  readFully,
  realDiskIo,
  writeFully,
  type DiskIo,
  DiskSyncError,
  directWritesFit,
  readFailed,
} from './disk-io';

/**
 * writeMany's largest single append: records are laid out in one staging buffer of at most this many
 * bytes and written with one pwrite (a record larger than this goes alone, in a buffer of its own).
 */
export { recordBytes, type RecordLocation } from './segment-format';
export { DiskSyncError, realDiskIo, type DiskIo } from './disk-io';

export const APPEND_BATCH_BYTES_MAX = 8 * 1024 * 1024;
/**
 * A load that follows the previous one in its segment (forward, within this distance: blocks written
 * in order, read in order; resident ones skipped) asks the kernel to read this much past it, so the
 * next loads find their bytes in the page cache instead of waiting for the device.
 */
export const READ_AHEAD_BYTES = 8 * 1024 * 1024;
/** close() waits this long for reads in flight before it closes the segment files anyway. */
const CLOSE_READERS_WAIT_MS = 10_000;
/** Subscribers to a disk tier's background events: its store, and a handful more (tests). */
const LISTENERS_MAX = 8;

export interface DiskTierOptions {
  dir: string;
  capacityBytes?: number;
  segmentTargetBytes?: number;
  compactDeadFraction?: number;
  io?: DiskIo;
  /**
   * Append grouped records with O_DIRECT where the filesystem takes it (default true): no copy into the
   * page cache. Reads stay buffered.
   */
  directWrites?: boolean;
  /** Called for every record skipped at open (damaged or torn); the tier also appends it to quarantine.log. */
  onQuarantine?: (event: QuarantineEvent) => void;
  /**
   * Called when compaction has moved records (their copies are durable; the old file goes right after).
   * A cluster node republishes their locations (locate()) so other nodes find them.
   */
  onMoved?: (keys: string[]) => void;
  /**
   * Called when a background compaction's fdatasync failed and took blocks it did not move with it
   * (other appends of the same segments): no caller hears that error, so the owner writes them again.
   */
  onLost?: (keys: string[]) => void;
}

export interface QuarantineEvent {
  segment: string;
  offsetBytes: number;
  lengthBytes: number;
  reason: string;
}

export interface DiskRecoveryReport {
  segments: number;
  indexedRecords: number;
  scannedRecords: number;
  truncatedBytes: number;
  quarantined: number;
}

interface Location {
  segment: Segment;
  offsetBytes: number; // record start
  sizeBytes: number; // payload length
}

interface Segment {
  id: number;
  file: string;
  fd: number;
  /**
   * The same file opened with O_DIRECT, for appends from the page-aligned staging buffer: the bytes go
   * from memory to the device without a copy into the page cache (which would also hold a second copy
   * of blocks the DRAM tier already holds). Undefined where O_DIRECT does not apply (directWritesFit,
   * a filesystem that refuses it), for a sealed or retired segment, and with fault-injected I/O.
   */
  directFd?: number;
  endBytes: number; // next append position (file length)
  sealed: boolean;
  deadBytes: number;
  /** Keys appended since the last successful fdatasync. */
  unsynced: string[];
  readers: number;
  compacting: boolean;
  /** Where the record last loaded with readWith ends (read-ahead follows loads in record order). */
  lastLoadEndBytes?: number;
}


/** A large record's fill failed midway: its error, told apart from a failed write (appendBytes). */
class FillFailed extends Error {
  constructor(override readonly cause: unknown) {
    super('fill failed');
  }
}

export class DiskSegmentTier implements Tier {
  readonly name = 'disk' as const;
  readonly persistent = true;
  readonly reclaimsOnDelete = false;
  readonly capacityBytes: number;
  readonly recovery: DiskRecoveryReport = { segments: 0, indexedRecords: 0, scannedRecords: 0, truncatedBytes: 0, quarantined: 0 };

  private readonly index = new Map<string, Location>();
  private readonly segments = new Map<number, Segment>();
  private active: Segment | undefined;
  private nextId = 1;
  private fileBytes = 0; // sum of segment file lengths, dead records included
  private liveBytes = 0; // sum of record sizes of indexed records
  /** Appends, seals and compactions run one at a time, in order. */
  private tail: Promise<unknown> = Promise.resolve();
  private compactions = 0;
  private closed = false;
  private staging: Buffer | undefined;
  private stagingAligned = false;
  private directBytes = 0;
  private bufferedBytes = 0;
  /** false once the filesystem refused O_DIRECT (or when directWrites is off). */
  private directOk: boolean;
  private readonly segDir: string;
  private readonly segmentTargetBytes: number;
  private readonly compactDeadFraction: number;
  private readonly io: DiskIo;
  private readonly onQuarantine?: (event: QuarantineEvent) => void;

  /** Who hears background moves and losses: the options' handlers, then each subscriber (the Store). */
  private readonly listeners: TierEvents[] = [];

  private constructor(private readonly options: DiskTierOptions) {
    this.listeners.push({ moved: options.onMoved, lost: options.onLost });
    this.capacityBytes = options.capacityBytes ?? Infinity;
    this.segmentTargetBytes = options.segmentTargetBytes ?? SEGMENT_TARGET_BYTES_DEFAULT;
    this.compactDeadFraction = options.compactDeadFraction ?? COMPACT_DEAD_FRACTION_DEFAULT;
    this.io = options.io ?? realDiskIo;
    this.onQuarantine = options.onQuarantine;
    this.segDir = path.join(options.dir, 'segments');
    this.directOk = (options.directWrites ?? true) && this.io === realDiskIo && directWritesFit(options.dir);
    if (!(this.capacityBytes >= 0)) throw new CascadeError('EINVAL', 'disk capacityBytes must be >= 0');
    if (!Number.isInteger(this.segmentTargetBytes) || this.segmentTargetBytes < RECORD_ALIGN_BYTES) {
      throw new CascadeError('EINVAL', `segmentTargetBytes must be an integer >= ${RECORD_ALIGN_BYTES}`);
    }
    if (!(this.compactDeadFraction > 0 && this.compactDeadFraction <= 1)) {
      throw new CascadeError('EINVAL', 'compactDeadFraction must be in (0, 1]');
    }
  }

  static async open(options: DiskTierOptions): Promise<DiskSegmentTier> {
    const tier = new DiskSegmentTier(options);
    await tier.recover();
    return tier;
  }

  // ---- Tier ---------------------------------------------------------------------------------------

  has(key: string): boolean {
    return this.index.has(key);
  }

  /** The record of a block, for readers in other processes (readRecordAt); undefined when absent. */
  locate(key: string): RecordLocation | undefined {
    const loc = this.index.get(key);
    return loc === undefined ? undefined : { file: loc.segment.file, offsetBytes: loc.offsetBytes, sizeBytes: loc.sizeBytes };
  }

  sizeOf(key: string): number | undefined {
    return this.index.get(key)?.sizeBytes;
  }

  footprintBytes(sizeBytes: number): number {
    return recordBytes(sizeBytes);
  }

  freeBytes(): number {
    return Math.max(0, this.capacityBytes - this.fileBytes);
  }

  write(key: string, data: Uint8Array): Promise<void> {
    this.checkOpen();
    return this.serial(async () => {
      if (this.index.has(key)) return;
      const need = recordBytes(data.length);
      if (need > this.freeBytes()) await this.reclaimFor(need);
      if (need > this.freeBytes()) {
        throw new CascadeError('ENOSPC', `disk tier full: need ${need} bytes, ${this.freeBytes()} free`);
      }
      const seg = await this.appendRecord(key, data);
      this.liveBytes += need;
      if (seg.endBytes >= this.segmentTargetBytes) await this.seal(seg);
    });
  }

  writeMany(blocks: ReadonlyArray<{ key: string; sizeBytes: number }>, fill: (key: string, target: Uint8Array, offsetBytes: number) => Promise<void>): Promise<void> {
    this.checkOpen();
    return this.serial(async () => {
      const seen = new Set<string>();
      const todo = blocks.filter((b) => !this.index.has(b.key) && !seen.has(b.key) && seen.add(b.key));
      let i = 0;
      while (i < todo.length) {
        const first = recordBytes(todo[i].sizeBytes);
        if (first > this.freeBytes()) await this.reclaimFor(first);
        if (first > this.freeBytes()) throw new CascadeError('ENOSPC', `disk tier full: need ${first} bytes, ${this.freeBytes()} free`);
        const seg = await this.activeFor(first);
        // One run: records that fit this segment, the free space and one staging buffer.
        const run: Array<{ key: string; sizeBytes: number }> = [];
        let runBytes = 0;
        while (i < todo.length) {
          const need = recordBytes(todo[i].sizeBytes);
          const over = seg.endBytes + runBytes + need > this.segmentTargetBytes || runBytes + need > this.freeBytes() || runBytes + need > APPEND_BATCH_BYTES_MAX;
          if (run.length > 0 && over) break;
          run.push(todo[i]);
          runBytes += need;
          i++;
        }
        await this.appendRun(seg, run, runBytes, fill);
        this.liveBytes += runBytes;
        if (seg.endBytes >= this.segmentTargetBytes) await this.seal(seg);
      }
    });
  }

  /**
   * Lay out a run of records in the staging buffer and append it with one write; indexes them
   * (unsynced). A record larger than the staging buffer goes alone, through it in pieces.
   */
  private async appendRun(
    seg: Segment,
    run: ReadonlyArray<{ key: string; sizeBytes: number }>,
    runBytes: number,
    fill: (key: string, target: Uint8Array, offsetBytes: number) => Promise<void>,
  ): Promise<void> {
    const buf = this.stagingBuffer();
    // O_DIRECT needs the buffer, offset and length 4 KiB-aligned: records are, and so is the buffer.
    const put = async (part: Buffer, position: number): Promise<void> => {
      // (directFd goes once a write is refused: then this piece and the rest are buffered.)
      if (this.stagingAligned && seg.directFd !== undefined) {
        try {
          await writeFully(seg.directFd, [part], position, this.io);
          this.directBytes += part.length;
          return;
        } catch (e) {
          // A filesystem that opens with O_DIRECT but wants another alignment: buffered from now on.
          if ((e as { code?: unknown }).code !== 'EINVAL') throw e;
          this.directOk = false;
          for (const s of this.segments.values()) this.closeDirect(s);
        }
      }
      await writeFully(seg.fd, [part], position, this.io);
      this.bufferedBytes += part.length;
    };
    let offset: number;
    if (runBytes <= buf.length) {
      let at = 0;
      for (const r of run) {
        const payloadAt = at + RECORD_ALIGN_BYTES;
        const payload = buf.subarray(payloadAt, payloadAt + r.sizeBytes);
        await fill(r.key, payload, 0);
        encodeHeader(r.key, r.sizeBytes, await pieceTableOf(payload)).copy(buf, at);
        at += recordBytes(r.sizeBytes);
        buf.fill(0, payloadAt + r.sizeBytes, at); // padding: the staging buffer holds old bytes
      }
      assert(at === runBytes, 'a run is laid out to its computed length');
      offset = await this.appendBytes(seg, runBytes, (start) => put(buf.subarray(0, runBytes), start));
    } else {
      assert(run.length === 1, 'a record over the staging size goes alone');
      const r = run[0];
      // The payload first, in buffer-sized chunks (whole pieces each: pieces divide the buffer), its
      // piece CRCs taken chunk by chunk; the header page with the table last, at the record's start.
      const shift = pieceShiftFor(r.sizeBytes);
      assert(buf.length % 2 ** PIECE_SHIFT_MAX === 0, 'the staging buffer holds whole pieces');
      offset = await this.appendBytes(seg, runBytes, async (start) => {
        let done = 0; // payload bytes written
        let pos = start + RECORD_ALIGN_BYTES;
        const crcs: Uint32Array[] = [];
        while (done < r.sizeBytes) {
          const n = Math.min(r.sizeBytes - done, buf.length);
          await fill(r.key, buf.subarray(0, n), done).catch((e: unknown) => Promise.reject(new FillFailed(e)));
          if (shift > 0) crcs.push(await pieceCrcs(buf.subarray(0, n), shift));
          done += n;
          const padded = alignUp(n);
          buf.fill(0, n, padded);
          await put(buf.subarray(0, padded), pos);
          pos += padded;
        }
        assert(done === r.sizeBytes && pos === start + runBytes, 'a large record is written to its computed length');
        const table = shift > 0 ? { shift, crcs: concatCrcs(crcs) } : undefined;
        encodeHeader(r.key, r.sizeBytes, table).copy(buf, 0);
        await put(buf.subarray(0, RECORD_ALIGN_BYTES), start);
      });
    }
    let at = offset;
    for (const r of run) {
      this.index.set(r.key, { segment: seg, offsetBytes: at, sizeBytes: r.sizeBytes });
      seg.unsynced.push(r.key);
      at += recordBytes(r.sizeBytes);
    }
  }

  /**
   * Append `parts` (lengthBytes in all) at the segment's end; returns where they start. The room is
   * reserved before the write, so a failed write leaves a hole that recovery skips, never a visible key;
   * after a failure the file's state is unknown, so it takes no more appends (what was synced stays).
   */
  private async appendBytes(seg: Segment, lengthBytes: number, write: (offsetBytes: number) => Promise<void>): Promise<number> {
    const offset = seg.endBytes;
    seg.endBytes += lengthBytes;
    this.fileBytes += lengthBytes;
    try {
      await write(offset);
    } catch (e) {
      seg.deadBytes += lengthBytes;
      if (e instanceof FillFailed) {
        // The bytes to write could not be had (not the file's fault): the reserved room is dead (a
        // header already written is quarantined by recovery), the segment goes on taking appends.
        throw e.cause;
      }
      seg.sealed = true;
      this.closeDirect(seg);
      if (this.active === seg) this.active = undefined;
      const full = (e as { code?: unknown }).code === 'ENOSPC';
      throw new CascadeError(full ? 'ENOSPC' : 'EIO', `write to ${seg.file} failed: ${(e as Error).message}`, { cause: e });
    }
    return offset;
  }

  /**
   * One staging buffer for grouped appends (they run one at a time, under serial()), 4 KiB-aligned as
   * O_DIRECT needs where the addon is there.
   */
  private stagingBuffer(): Buffer {
    if (this.staging === undefined) {
      this.staging = allocAligned(APPEND_BATCH_BYTES_MAX);
      this.stagingAligned = this.staging !== undefined;
      this.staging ??= Buffer.allocUnsafe(APPEND_BATCH_BYTES_MAX);
    }
    return this.staging;
  }

  /**
   * Append a record to the active segment and index it (unsynced). Runs inside serial(). The caller
   * accounts the live bytes and seals the segment when it is full.
   */
  private async appendRecord(key: string, data: Uint8Array): Promise<Segment> {
    const need = recordBytes(data.length);
    const seg = await this.activeFor(need);
    const pad = alignUp(data.length) - data.length;
    const header = encodeHeader(key, data.length, await pieceTableOf(data));
    const parts = pad > 0 ? [header, data, Buffer.alloc(pad)] : [header, data];
    const offset = await this.appendBytes(seg, need, async (start) => {
      await writeFully(seg.fd, parts, start, this.io);
      this.bufferedBytes += need;
    });
    this.index.set(key, { segment: seg, offsetBytes: offset, sizeBytes: data.length });
    seg.unsynced.push(key);
    return seg;
  }

  async read(key: string, offsetBytes: number, target: Uint8Array): Promise<number> {
    this.checkOpen();
    if (!Number.isSafeInteger(offsetBytes) || offsetBytes < 0) throw new CascadeError('EINVAL', 'offset must be a non-negative integer');
    const loc = this.index.get(key);
    if (!loc) throw new CascadeError('ENOENT', `block ${key} is not on disk`);
    const { segment: seg, sizeBytes } = loc;
    if (offsetBytes >= sizeBytes || target.length === 0) return 0;
    seg.readers++;
    try {
      await this.checkHeader(key, loc);
      // The payload's SHA-256 is its checksum, so a check needs the whole payload: read it all, into the
      // caller's buffer when it covers the block (the store reads whole blocks), else into a scratch one.
      const count = Math.min(target.length, sizeBytes - offsetBytes);
      const whole = offsetBytes === 0 && count === sizeBytes ? target.subarray(0, sizeBytes) : Buffer.allocUnsafe(sizeBytes);
      const n = await readFully(seg.fd, whole, loc.offsetBytes + RECORD_ALIGN_BYTES, this.io).catch((e: unknown) => Promise.reject(readFailed(seg.file, e)));
      if (n !== sizeBytes) throw this.corrupt(key, loc, `short payload (${n} of ${sizeBytes} bytes)`);
      if ((await sha256Hex(whole)) !== key) throw this.corrupt(key, loc, 'payload SHA-256 mismatch');
      if (whole !== target.subarray(0, sizeBytes)) target.set(whole.subarray(offsetBytes, offsetBytes + count));
      return count;
    } finally {
      seg.readers--;
    }
  }

  /**
   * Whether readWith() may be used: only with the real I/O, since fault injection (store/faults.ts)
   * must see every read.
   */
  readsWith(): boolean {
    return this.io === realDiskIo;
  }

  /**
   * Read a whole block by handing its record's place to `fill`: the DRAM tier's native reader
   * (Arena.fillRecordAsync), which checks the record's header against the block, lands the bytes in
   * their final memory, checks them on the way (piece CRCs, SHA-256) and returns their SHA-256: no
   * buffer, no second copy. A record the fill finds damaged (ECORRUPT), or a hash other than the key,
   * is quarantined (ECORRUPT), as read() does.
   */
  async readWith(key: string, fill: (fd: number, recordOffsetBytes: number, aheadBytes: number) => Promise<string>): Promise<void> {
    this.checkOpen();
    assert(this.readsWith(), 'readWith only with the real disk I/O');
    const loc = this.index.get(key);
    if (!loc) throw new CascadeError('ENOENT', `block ${key} is not on disk`);
    const seg = loc.segment;
    const end = loc.offsetBytes + recordBytes(loc.sizeBytes);
    const last = seg.lastLoadEndBytes;
    const inOrder = last !== undefined && loc.offsetBytes >= last && loc.offsetBytes <= last + READ_AHEAD_BYTES;
    const aheadBytes = inOrder ? Math.max(0, Math.min(READ_AHEAD_BYTES, seg.endBytes - end)) : 0;
    seg.lastLoadEndBytes = end;
    seg.readers++;
    try {
      let hash: string;
      try {
        hash = await fill(seg.fd, loc.offsetBytes, aheadBytes);
      } catch (e) {
        throw (e as { code?: unknown }).code === 'ECORRUPT' ? this.corrupt(key, loc, (e as Error).message) : readFailed(seg.file, e);
      }
      if (hash !== key) throw this.corrupt(key, loc, 'payload SHA-256 mismatch');
    } finally {
      seg.readers--;
    }
  }

  /** Read a record's header and check it against the index (ECORRUPT, quarantined, when it differs). */
  private async checkHeader(key: string, loc: Location): Promise<void> {
    const seg = loc.segment;
    const header = Buffer.alloc(RECORD_HEADER_BYTES);
    await readFully(seg.fd, header, loc.offsetBytes, this.io).catch((e: unknown) => Promise.reject(readFailed(seg.file, e)));
    const h = decodeHeader(header);
    if (typeof h === 'string' || h.sha256 !== key || h.sizeBytes !== loc.sizeBytes) {
      throw this.corrupt(key, loc, typeof h === 'string' ? h : 'header does not match the index');
    }
  }

  delete(key: string): Promise<void> {
    this.checkOpen();
    const loc = this.index.get(key);
    if (!loc) return Promise.resolve();
    this.index.delete(key);
    const bytes = recordBytes(loc.sizeBytes);
    this.liveBytes -= bytes;
    loc.segment.deadBytes += bytes;
    const seg = loc.segment;
    // A segment with nothing live left goes at once (no copying); a mostly dead sealed one is compacted.
    const empty = seg.deadBytes >= seg.endBytes;
    if (!seg.compacting && (empty || (seg.sealed && seg.deadBytes >= this.compactDeadFraction * seg.endBytes))) {
      seg.compacting = true;
      // Compaction runs in the background, in the append order; its failure leaves the segment as it was.
      void this.serial(() => this.compact(seg)).catch((e: unknown) => {
        seg.compacting = false;
        if (e instanceof DiskSyncError) {
          const lost = e.lostKeys.filter((k) => !this.index.has(k)); // moved copies went back to their originals
          if (lost.length > 0) for (const l of this.listeners) l.lost?.(lost);
        }
      });
    }
    return Promise.resolve();
  }

  subscribe(events: TierEvents): void {
    assert(this.listeners.length < LISTENERS_MAX, 'a disk tier has few subscribers (its store)');
    this.listeners.push(events);
  }

  scan(): TierEntry[] {
    return [...this.index].map(([key, loc]) => ({ key, sizeBytes: loc.sizeBytes }));
  }

  /**
   * fdatasync every segment with unsynced appends. On failure the segment is sealed for good (its page
   * cache state is unknown after a failed fsync, so a retry could lie), the keys it could not confirm
   * leave the index, and DiskSyncError names them.
   */
  sync(): Promise<void> {
    this.checkOpen();
    return this.serial(async () => {
      const lost: string[] = [];
      let firstError: unknown;
      for (const seg of this.segments.values()) {
        const failed = await this.syncSegment(seg);
        if (failed) {
          firstError ??= failed.cause;
          lost.push(...failed.lostKeys);
        }
      }
      if (firstError !== undefined) throw new DiskSyncError(lost, firstError);
    });
  }

  stats(): TierStats {
    return { name: this.name, capacityBytes: this.capacityBytes, usedBytes: this.liveBytes, blocks: this.index.size };
  }

  /** Bytes in segment files that belong to no live record (compaction reclaims them). */
  deadBytes(): number {
    return this.fileBytes - this.liveBytes;
  }

  /** Bytes of segment files on disk, dead records included. */
  segmentFileBytes(): number {
    return this.fileBytes;
  }

  /** Bytes appended with O_DIRECT and through the page cache since open. */
  appendedBytes(): { directBytes: number; bufferedBytes: number } {
    return { directBytes: this.directBytes, bufferedBytes: this.bufferedBytes };
  }

  compactionCount(): number {
    return this.compactions;
  }

  segmentCount(): number {
    return this.segments.size;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.tail.catch(() => undefined);
    this.closed = true;
    // Reads in flight (a worker thread may be preading a segment) end before their fds close.
    const deadline = Date.now() + CLOSE_READERS_WAIT_MS;
    while ([...this.segments.values()].some((seg) => seg.readers > 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1));
    // A clean close indexes the active segment too, so the next open reads no record twice.
    for (const seg of this.segments.values()) {
      if (!seg.sealed && seg.unsynced.length === 0) this.writeIndex(seg);
      this.closeDirect(seg);
      fs.closeSync(seg.fd);
    }
    this.segments.clear();
    this.index.clear();
  }

  // ---- internals ----------------------------------------------------------------------------------

  private checkOpen(): void {
    if (this.closed) throw new CascadeError('EBUSY', 'disk tier is closed');
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.tail.then(fn, fn);
    this.tail = run.catch(() => undefined);
    return run;
  }

  private corrupt(key: string, loc: Location, reason: string): CascadeError {
    this.quarantine({ segment: loc.segment.file, offsetBytes: loc.offsetBytes, lengthBytes: recordBytes(loc.sizeBytes), reason });
    // Never serve it again; the store may still hold the block elsewhere.
    if (this.index.get(key) === loc) {
      this.index.delete(key);
      this.liveBytes -= recordBytes(loc.sizeBytes);
      loc.segment.deadBytes += recordBytes(loc.sizeBytes);
    }
    return new CascadeError('ECORRUPT', `block ${key} in ${path.basename(loc.segment.file)}@${loc.offsetBytes}: ${reason}`);
  }

  private quarantine(event: QuarantineEvent): void {
    this.recovery.quarantined++;
    try {
      fs.appendFileSync(path.join(this.options.dir, 'quarantine.log'), JSON.stringify({ timeMs: Date.now(), ...event }) + '\n');
    } catch {
      // The log is advisory; the record is already out of the index.
    }
    this.onQuarantine?.(event);
  }

  private async activeFor(need: number): Promise<Segment> {
    const a = this.active;
    // A record larger than a segment gets a fresh segment of its own rather than a huge mixed one.
    if (a && !a.sealed && (a.endBytes === 0 || a.endBytes + need <= this.segmentTargetBytes)) return a;
    if (a && !a.sealed) await this.seal(a);
    return this.newSegment();
  }

  private newSegment(): Segment {
    const id = this.nextId++;
    const file = path.join(this.segDir, `${segName(id)}.log`);
    const fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
    fsyncPath(this.segDir);
    const directFd = this.openDirect(file);
    const seg: Segment = { id, file, fd, directFd, endBytes: 0, sealed: false, deadBytes: 0, unsynced: [], readers: 0, compacting: false };
    this.segments.set(id, seg);
    this.active = seg;
    return seg;
  }

  /** The segment file opened again with O_DIRECT for appends, or undefined where that is refused. */
  private openDirect(file: string): number | undefined {
    if (!this.directOk || fs.constants.O_DIRECT === undefined) return undefined;
    try {
      return fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_DIRECT);
    } catch (e) {
      // EINVAL: the filesystem has no O_DIRECT (some FUSE filesystems): buffered from now on. Anything
      // else (EMFILE, ENOMEM) only for this segment: buffered appends work all the same.
      if ((e as { code?: unknown }).code === 'EINVAL') this.directOk = false;
      return undefined;
    }
  }

  /** No more appends to seg: its O_DIRECT descriptor goes. */
  private closeDirect(seg: Segment): void {
    if (seg.directFd === undefined) return;
    fs.closeSync(seg.directFd);
    seg.directFd = undefined;
  }

  /**
   * fdatasync a segment with unsynced appends. On failure the segment is sealed for good, without an
   * index (the next open rescans and verifies it): after a failed fsync the page cache state is unknown
   * and a retry could falsely succeed. The keys it could not confirm leave the index and are returned.
   */
  private async syncSegment(seg: Segment): Promise<DiskSyncError | undefined> {
    if (seg.unsynced.length === 0) return undefined;
    const keys = seg.unsynced;
    seg.unsynced = [];
    try {
      await this.io.fdatasync(seg.fd);
      return undefined;
    } catch (e) {
      const lost: string[] = [];
      for (const key of keys) {
        const loc = this.index.get(key);
        if (loc?.segment !== seg) continue;
        this.index.delete(key);
        const bytes = recordBytes(loc.sizeBytes);
        this.liveBytes -= bytes;
        seg.deadBytes += bytes;
        lost.push(key);
      }
      seg.sealed = true;
      this.closeDirect(seg);
      if (this.active === seg) this.active = undefined;
      return new DiskSyncError(lost, e);
    }
  }

  /** Make the segment read-only: sync it and write its index. Throws DiskSyncError if the sync fails. */
  private async seal(seg: Segment): Promise<void> {
    if (seg.sealed) return;
    const failed = await this.syncSegment(seg);
    if (failed) throw failed;
    seg.sealed = true;
    if (this.active === seg) this.active = undefined;
    this.closeDirect(seg);
    this.writeIndex(seg);
  }

  private writeIndex(seg: Segment): void {
    const entries = [...this.index].filter(([, loc]) => loc.segment === seg).map(([key, loc]) => ({ key, offsetBytes: loc.offsetBytes, sizeBytes: loc.sizeBytes }));
    writeSegmentIndex(path.join(this.segDir, `${segName(seg.id)}.idx`), { coveredBytes: seg.endBytes, entries });
  }

  /** Entries of a valid index file and the segment length it covers, or undefined. */
  private readIndex(id: number): SegmentIndex | undefined {
    return readSegmentIndex(path.join(this.segDir, `${segName(id)}.idx`));
  }

  private async recover(): Promise<void> {
    mkdirAll(this.segDir);
    const ids = fs
      .readdirSync(this.segDir)
      .map((f) => SEGMENT_RE.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    for (const f of fs.readdirSync(this.segDir)) if (f.endsWith('.tmp')) fs.rmSync(path.join(this.segDir, f));
    for (const id of ids) {
      const file = path.join(this.segDir, `${segName(id)}.log`);
      const fd = fs.openSync(file, fs.constants.O_RDWR);
      const seg: Segment = { id, file, fd, endBytes: fs.fstatSync(fd).size, sealed: true, deadBytes: 0, unsynced: [], readers: 0, compacting: false };
      this.segments.set(id, seg);
      this.nextId = Math.max(this.nextId, id + 1);
      const idx = this.readIndex(id);
      let from = 0;
      if (idx && idx.coveredBytes <= seg.endBytes) {
        for (const e of idx.entries) this.adopt(e.key, seg, e.offsetBytes, e.sizeBytes);
        this.recovery.indexedRecords += idx.entries.length;
        from = idx.coveredBytes;
      }
      const complete = await this.scanSegment(seg, from);
      // Account for everything in the file; adopt() counted live records, the rest is dead.
      this.fileBytes += seg.endBytes;
      seg.deadBytes = seg.endBytes - this.liveBytesOf(seg);
      if (!complete || !idx || idx.coveredBytes !== seg.endBytes) {
        seg.sealed = false; // appended past its index (or never indexed): the last one stays active
      }
      this.recovery.segments++;
    }
    // Only the newest segment accepts appends; older unindexed ones are sealed (and indexed) now.
    const newest = ids.length > 0 ? this.segments.get(ids[ids.length - 1]) : undefined;
    for (const seg of this.segments.values()) {
      if (seg === newest && seg.endBytes < this.segmentTargetBytes) {
        seg.sealed = false;
        this.active = seg;
        if (seg.endBytes % RECORD_ALIGN_BYTES === 0) seg.directFd = this.openDirect(seg.file);
      } else if (!seg.sealed) {
        seg.sealed = true;
        this.writeIndex(seg);
      }
    }
  }

  private liveBytesOf(seg: Segment): number {
    let n = 0;
    for (const loc of this.index.values()) if (loc.segment === seg) n += recordBytes(loc.sizeBytes);
    return n;
  }

  private adopt(key: string, seg: Segment, offsetBytes: number, sizeBytes: number): void {
    if (this.index.has(key)) return; // a copy left by an interrupted compaction: the first suffices
    this.index.set(key, { segment: seg, offsetBytes, sizeBytes });
    this.liveBytes += recordBytes(sizeBytes);
  }

  /**
   * Re-index records from `fromBytes` to the end of the segment. A record is adopted only if its header
   * and payload check out. Damage followed by a valid record is quarantined; damage with nothing valid
   * after it is a torn tail and is truncated. Returns false if it truncated.
   */
  private async scanSegment(seg: Segment, fromBytes: number): Promise<boolean> {
    let pos = fromBytes;
    const header = Buffer.alloc(RECORD_HEADER_BYTES);
    while (pos < seg.endBytes) {
      const bad = await checkRecordAt(seg.fd, pos, seg.endBytes, header);
      if (typeof bad !== 'string') {
        this.adopt(bad.sha256, seg, pos, bad.sizeBytes);
        this.recovery.scannedRecords++;
        pos += recordBytes(bad.sizeBytes);
        continue;
      }
      const next = await this.nextValidRecord(seg, pos + RECORD_ALIGN_BYTES, header);
      if (next === undefined) {
        this.recovery.truncatedBytes += seg.endBytes - pos;
        fs.ftruncateSync(seg.fd, pos);
        fs.fdatasyncSync(seg.fd);
        seg.endBytes = pos;
        return false;
      }
      this.quarantine({ segment: seg.file, offsetBytes: pos, lengthBytes: next - pos, reason: bad });
      pos = next;
    }
    return true;
  }

  private async nextValidRecord(seg: Segment, fromBytes: number, header: Buffer): Promise<number | undefined> {
    for (let pos = fromBytes; pos + RECORD_HEADER_BYTES <= seg.endBytes; pos += RECORD_ALIGN_BYTES) {
      if (typeof (await checkRecordAt(seg.fd, pos, seg.endBytes, header)) !== 'string') return pos;
    }
    return undefined;
  }

  /**
   * Out of room: compact the segments with the most dead bytes first, while their live records fit in
   * what is free, until `needBytes` are free or nothing more can be reclaimed. Runs inside serial().
   */
  private async reclaimFor(needBytes: number): Promise<void> {
    const candidates = [...this.segments.values()]
      .filter((s) => s.deadBytes > 0 && !s.compacting)
      .sort((a, b) => b.deadBytes - a.deadBytes);
    for (const seg of candidates) {
      if (this.freeBytes() >= needBytes) return;
      if (seg.endBytes - seg.deadBytes > this.freeBytes()) continue; // its live records would not fit
      seg.compacting = true;
      try {
        await this.compact(seg);
      } finally {
        seg.compacting = false;
      }
    }
  }

  /**
   * A compaction that failed before its copies were confirmed: every moved block points back at its
   * original, which is still good (a copy a failed fdatasync dropped, in `lost`, or a live unconfirmed
   * one, which becomes dead bytes). A block deleted meanwhile stays deleted.
   */
  private unmove(seg: Segment, moved: Map<string, Location>, lost: Set<string>): void {
    for (const [key, orig] of moved) {
      const copy = this.index.get(key);
      const bytes = recordBytes(orig.sizeBytes);
      if (copy !== undefined && copy.segment !== seg) {
        copy.segment.deadBytes += bytes;
      } else if (copy === undefined && lost.has(key)) {
        this.liveBytes += bytes;
      } else {
        continue;
      }
      this.index.set(key, orig);
      seg.deadBytes -= bytes;
    }
  }

  /** Copy a segment's live records to the active segment, then remove the old file. Runs inside serial(). */
  private async compact(seg: Segment): Promise<void> {
    if (this.closed || !this.segments.has(seg.id)) return;
    // Retire it from appends first (copies must land elsewhere); its live records get synced elsewhere.
    if (this.active === seg) this.active = undefined;
    seg.sealed = true;
    this.closeDirect(seg);
    const live = [...this.index].filter(([, loc]) => loc.segment === seg);
    const moved = new Map<string, Location>();
    try {
      for (const [key, loc] of live) {
        const data = Buffer.allocUnsafe(loc.sizeBytes);
        try {
          await this.read(key, 0, data);
        } catch (e) {
          // Deleted meanwhile, or damaged (read() quarantined and dropped it): nothing to move.
          if (e instanceof CascadeError && (e.code === 'ENOENT' || e.code === 'ECORRUPT')) continue;
          throw e; // a failed read: the record may be fine, so the segment stays
        }
        if (this.index.get(key) !== loc) continue; // deleted meanwhile
        const dest = await this.appendRecord(key, data);
        moved.set(key, loc);
        seg.deadBytes += recordBytes(loc.sizeBytes); // the record moved: live bytes are unchanged
        if (dest.endBytes >= this.segmentTargetBytes) await this.seal(dest);
      }
      // The copies must be durable before the originals go.
      for (const s of this.segments.values()) {
        if (s === seg) continue;
        const failed = await this.syncSegment(s);
        if (failed) throw failed;
      }
    } catch (e) {
      this.unmove(seg, moved, e instanceof DiskSyncError ? new Set(e.lostKeys) : new Set());
      throw e;
    }
    if (moved.size > 0) for (const l of this.listeners) l.moved?.([...moved.keys()]);
    while (seg.readers > 0) await new Promise((r) => setTimeout(r, 1));
    assert(![...this.index.values()].some((loc) => loc.segment === seg), 'compacted segment has no live record');
    this.segments.delete(seg.id);
    this.closeDirect(seg);
    fs.closeSync(seg.fd);
    fs.rmSync(path.join(this.segDir, `${segName(seg.id)}.idx`), { force: true });
    fs.rmSync(seg.file);
    fsyncPath(this.segDir);
    this.fileBytes -= seg.endBytes;
    this.compactions++;
  }
}


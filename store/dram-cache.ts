/**
 * This node's DRAM copies: reads through DRAM, loads into it (from this node's disk, a peer, the
 * shared tier), admission and eviction (on demand, and ahead of need at the watermarks), promotions.
 */
import type { StoreCore } from './core';
import { assert, CascadeError, isCascadeError } from './errors';
import type { GpuCache } from './gpu-cache';
import { SingleFlight } from './singleflight';
import { DiskSegmentTier } from './tiers/disk';
import { NativeArenaTier } from './tiers/native-dram';
import type { WriteBack } from './writeback';

/** Free DRAM kept ahead of need by default (fractions of capacity). */
const DRAM_WATERMARKS_DEFAULT = { low: 0.05, high: 0.1 };
/** Background eviction: bytes asked for per batch, and per pass (times the high watermark). */
const EVICT_AHEAD_BATCH_BYTES = 64 * 1024 * 1024;
const EVICT_AHEAD_PASS_FACTOR = 4;
/** Eviction rounds one write may run before it writes through to disk instead. */
export const MAKE_ROOM_ROUNDS_MAX = 8;

/** What DRAM placement asks of a cluster node (store/cluster/): peers' DRAM and the shared tier. */
export interface ClusterCopies {
  /** Whether the remote DRAM tier runs (reads of content this node lacks try peers first). */
  readonly remoteOn: boolean;
  /** Fetch a block from a peer's DRAM into DRAM here; false when no peer could (or no room). Under the block's lock. */
  fetch(sha: string, sizeBytes: number, reading: boolean, onLoading?: (handle: number) => void): Promise<boolean>;
  /** A read of a DRAM copy without a hold: a borrowed copy stays while such reads keep coming. */
  readWithoutHold(sha: string): void;
  /** A copy is kept from now on (a pin, a warmup): no longer borrowed. */
  keep(sha: string): void;
  /** A copy joined DRAM to stay: peers may fetch it. */
  advertise(sha: string): void;
  /** A copy left DRAM. */
  evicted(sha: string): void;
  /** A native loader of another node's record on the shared tier, or undefined (see SharedTierReads). */
  nativeSharedLoad(sha: string, sizeBytes: number, onLoading?: (handle: number) => void): (() => Promise<void>) | undefined;
  /** The block read from another node's segments, checked against its SHA-256. */
  loadFromShared(sha: string, sizeBytes: number): Promise<Buffer>;
}

export class DramCache {
  private readonly loads = new SingleFlight<Buffer>();
  /**
   * Loads into DRAM in progress, by content: each settles (never rejects) when its load ends. A read
   * that finds its block loading waits for it rather than reading the whole block from disk beside it
   * (a native fill does not go through `loads`).
   */
  private readonly dramLoading = new Map<string, Promise<void>>();
  /** Free DRAM bytes kept ahead of need (see StoreConfig.dramWatermarks), and the pass running now. */
  private readonly lowWatermarkBytes: number;
  private readonly highWatermarkBytes: number;
  evictingAhead: Promise<void> | undefined;
  /** Set by the Store once the parts exist: the GPU tier's cache, the cluster node's copies. */
  gpuCache: GpuCache | undefined;
  cluster: ClusterCopies | undefined;

  constructor(
    private readonly core: StoreCore,
    private readonly writeBack: WriteBack,
  ) {
    const marks = core.config.dramWatermarks ?? DRAM_WATERMARKS_DEFAULT;
    this.lowWatermarkBytes = Math.floor(core.dram.capacityBytes * marks.low);
    this.highWatermarkBytes = Math.floor(core.dram.capacityBytes * marks.high);
  }

  async readBlock(sha: string, sizeBytes: number, offsetBytes: number, target: Uint8Array): Promise<number> {
    if (offsetBytes >= sizeBytes || target.length === 0) return 0;
    // A read into host memory takes the DRAM copy when there is one (a memcpy beats a copy over PCIe);
    // the GPU tier serves blocks it holds alone, and same-node GPU processes through IPC.
    const fromDram = await this.readFromDram(sha, sizeBytes, offsetBytes, target);
    if (fromDram !== undefined) return fromDram;
    const g = this.core.gpu;
    if (g?.has(sha)) {
      try {
        const n = await g.read(sha, offsetBytes, target);
        this.core.counters.hits.gpu++;
        if (offsetBytes === 0) {
          this.core.gpuEviction?.accessed(sha);
          // Serving a whole block request by request over PCIe is 4x slower than copying it to DRAM
          // once and reading there (the GPU suite, bench/results/README.md): promote it like a disk read.
          if (this.core.promotion.onSlowRead(sha)) this.gpuCache!.offerPromotion(sha, sizeBytes);
        }
        return n;
      } catch (e) {
        if (!isCascadeError(e, 'ENOENT')) throw e; // evicted meanwhile: read from disk
      }
    }
    const loading = this.dramLoading.get(sha);
    if (loading !== undefined) {
      // Being loaded into DRAM (a reader's hold, a promotion): read it there once it lands.
      await loading;
      const loaded = await this.readFromDram(sha, sizeBytes, offsetBytes, target);
      if (loaded !== undefined) return loaded;
    }
    const local = this.core.disk.has(sha);
    if (!local && this.cluster?.remoteOn) {
      // A peer may hold it in DRAM: fetch it into DRAM here (single flight per block), read from there.
      const n = await this.core.locks.with(sha, async () => {
        if (this.core.dram.has(sha)) {
          this.core.counters.hits.dram++;
        } else if (!(await this.cluster!.fetch(sha, sizeBytes, true))) {
          // No peer holds it in memory: load it from the shared tier into DRAM here, at once (not
          // through the mover), so this read's next request and the other nodes find it in memory.
          await this.ensureInDram(sha, sizeBytes, false, false);
          this.core.counters.hits.shared++;
        }
        const got = await this.core.dram.read(sha, offsetBytes, target);
        // Reads without a hold come one request at a time: the copy stays while they keep coming.
        this.cluster!.readWithoutHold(sha);
        return got;
      }).catch((e: unknown) => (isCascadeError(e, 'ENOENT') || isCascadeError(e, 'ENOSPC') ? undefined : Promise.reject(e)));
      if (n !== undefined) return n;
    }
    if (!local && !this.core.config.cluster) {
      this.core.counters.misses++;
      throw new CascadeError('EIO', `content ${sha} is in no tier (lost after a failed fsync or a crash)`);
    }
    const whole = await this.loadFromDisk(sha, sizeBytes);
    this.core.counters.hits[local ? 'disk' : 'shared']++;
    const count = Math.min(target.length, sizeBytes - offsetBytes);
    target.set(whole.subarray(offsetBytes, offsetBytes + count));
    if (this.core.promotion.onSlowRead(sha)) this.offerPromotion(sha, whole);
    this.gpuCache?.noteRead(sha, sizeBytes, offsetBytes);
    return count;
  }

  /** The DRAM copy's bytes, counted as a DRAM hit; undefined when DRAM has none (or it left meanwhile). */
  async readFromDram(sha: string, sizeBytes: number, offsetBytes: number, target: Uint8Array): Promise<number | undefined> {
    if (!this.core.dram.has(sha)) return undefined;
    try {
      const n = await this.core.dram.read(sha, offsetBytes, target);
      this.core.counters.hits.dram++;
      this.core.eviction.accessed(sha);
      this.gpuCache?.noteRead(sha, sizeBytes, offsetBytes);
      return n;
    } catch (e) {
      if (!isCascadeError(e, 'ENOENT')) throw e; // evicted meanwhile: read from elsewhere
      return undefined;
    }
  }

  /**
   * Bring a block into DRAM: from this node's disk, a peer's DRAM (cluster, remote tier on), or the
   * shared tier. `reading`: for a reader (a remote copy is counted and may stay borrowed); else for a
   * pin or a warmup, which keep the copy.
   */
  async ensureInDram(sha: string, sizeBytes: number, reading = false, tryRemote = true, onLoading?: (handle: number) => void): Promise<void> {
    if (this.core.dram.has(sha)) {
      if (reading) this.core.counters.hits.dram++;
      if (!reading) this.cluster?.keep(sha); // a borrowed copy is kept from now on
      return;
    }
    if (tryRemote && this.cluster !== undefined && (await this.cluster.fetch(sha, sizeBytes, reading, onLoading))) return;
    let ended!: () => void;
    const loading = new Promise<void>((resolve) => (ended = resolve));
    const first = !this.dramLoading.has(sha);
    if (first) this.dramLoading.set(sha, loading);
    try {
      await this.loadIntoDram(sha, sizeBytes, reading, onLoading);
    } finally {
      if (first) this.dramLoading.delete(sha);
      ended();
    }
  }

  private async loadIntoDram(sha: string, sizeBytes: number, reading: boolean, onLoading?: (handle: number) => void): Promise<void> {
    const native = this.nativeDiskLoad(sha, sizeBytes, onLoading) ?? this.cluster?.nativeSharedLoad(sha, sizeBytes, onLoading);
    const fromGpu = native ? undefined : this.core.gpu?.has(sha) ? await this.gpuCache!.copyOut(sha, sizeBytes) : undefined;
    // A reader's hit where the block came from (reads through a hold are counted once, at the hold).
    const source = fromGpu ? 'gpu' : this.core.disk.has(sha) ? 'disk' : 'shared';
    const data = native ? undefined : (fromGpu ?? (await this.loadFromDisk(sha, sizeBytes)));
    for (let attempt = 0; ; attempt++) {
      if (!(await this.makeRoom(sizeBytes))) {
        // Room may be held by blocks waiting for the flusher: let it finish, then try once more. Its
        // failure (a disk error, Redis away while a cluster node records places) is not this read's:
        // the read fails only if no room was made.
        await this.writeBack
          .makeDurable([...this.writeBack.dirty.keys(), ...this.writeBack.unsynced])
          .catch((e: unknown) => this.core.warn(`making room in DRAM for a load of ${sha}: ${String(e)}`));
        if (!(await this.makeRoom(sizeBytes))) {
          throw new CascadeError('ENOSPC', `no room in DRAM for ${sizeBytes} bytes (pinned: ${this.core.pinnedBytes})`);
        }
      }
      if (await this.dramWriteRaced(sha, data ?? native!)) break;
      if (attempt >= MAKE_ROOM_ROUNDS_MAX) throw new CascadeError('ENOSPC', `no room in DRAM for ${sizeBytes} bytes: concurrent writes keep taking it`);
    }
    if (!this.core.disk.has(sha)) this.core.sharedClean.add(sha);
    this.core.admit(sha);
    this.cluster?.advertise(sha);
    this.core.counters.promotions++;
    if (reading) this.core.counters.hits[source]++;
  }

  /**
   * For a block on this node's disk (and not in the GPU tier): a loader that reads it from its segment
   * straight into its DRAM slot, hashing on a worker thread (NativeArenaTier + DiskSegmentTier with the
   * real I/O); undefined where the block must come through a buffer (loadFromDisk).
   */
  private nativeDiskLoad(sha: string, sizeBytes: number, onLoading?: (handle: number) => void): (() => Promise<void>) | undefined {
    const dram = this.core.dram;
    const disk = this.core.disk;
    const arena = dram instanceof NativeArenaTier ? dram.arenaBinding() : undefined;
    if (arena === undefined || !(disk instanceof DiskSegmentTier) || !disk.readsWith() || !disk.has(sha) || this.core.gpu?.has(sha)) return undefined;
    return () =>
      (dram as NativeArenaTier).adopt(sha, sizeBytes, async (handle) => {
        // The fill checks the record's header and hash (and its piece CRCs, publishing each piece).
        let queued = false; // the fill marks the block as filling when queued: only then may readers wait on it
        const filling = disk.readWith(sha, (fd, recordOffsetBytes, aheadBytes) => {
          const p = arena.fillRecordAsync(handle, fd, recordOffsetBytes, sha, aheadBytes);
          queued = true;
          return p;
        });
        if (queued) onLoading?.(handle);
        await filling;
        return sha; // readWith checked the bytes' SHA-256
      });
  }

  /**
   * One verified whole-block disk read, shared by all concurrent readers of the block: from this node's
   * disk tier, or in a cluster from another node's segments on the shared tier.
   */
  loadFromDisk(sha: string, sizeBytes: number): Promise<Buffer> {
    return this.loads.do(sha, async () => {
      if (!this.core.disk.has(sha) && this.cluster) return this.cluster.loadFromShared(sha, sizeBytes);
      const buf = Buffer.allocUnsafe(sizeBytes);
      const n = await this.core.disk.read(sha, 0, buf);
      if (n !== sizeBytes) throw new CascadeError('ECORRUPT', `block ${sha}: ${n} of ${sizeBytes} bytes on disk`);
      return buf;
    });
  }

  /**
   * Evict clean, unpinned blocks until DRAM can take a block of `sizeBytes`; false if it cannot. A tier
   * that packs small blocks (fits()) may have room in a slot of the block's size class without free
   * pages; evicting frees slots and pages, so it asks again after each round (a bounded number).
   */
  async makeRoom(sizeBytes: number): Promise<boolean> {
    const needBytes = this.core.dram.footprintBytes(sizeBytes);
    if (needBytes > this.core.dram.capacityBytes) return false;
    const fits = () => (this.core.dram.fits ? this.core.dram.fits(sizeBytes) : this.core.dram.freeBytes() >= needBytes);
    for (let round = 0; round < MAKE_ROOM_ROUNDS_MAX; round++) {
      if (fits()) return true;
      const victims = this.victims(Math.max(1, needBytes - this.core.dram.freeBytes()));
      if (victims.length === 0) return false;
      for (const key of victims) await this.evict(key);
    }
    return fits();
  }

  /** DRAM blocks the eviction policy names to free `needBytes`, evictable ones only. */
  victims(needBytes: number): string[] {
    return this.core.eviction.victims(
      needBytes,
      (k) => this.core.dram.footprintBytes(this.core.dram.sizeOf(k) ?? 0),
      (k) => this.core.dram.has(k) && this.evictable(k),
    );
  }

  evictable(key: string): boolean {
    const durableElsewhere = this.core.disk.has(key) || this.core.sharedClean.has(key);
    return !this.core.pinned.has(key) && !this.core.dramHolds.has(key) && !this.writeBack.dirty.has(key) && !this.writeBack.unsynced.has(key) && durableElsewhere;
  }

  async evict(key: string): Promise<void> {
    assert(this.evictable(key), `evicting ${key} loses no data`);
    await this.core.dram.delete(key);
    this.core.eviction.removed(key);
    this.core.sharedClean.delete(key);
    this.cluster?.evicted(key);
    this.core.counters.evictions++;
  }

  /**
   * Keep free DRAM at the watermarks: below `low`, evict clean blocks (least recent first) in the
   * background until `high` is free. Each pass evicts a bounded number of bytes (small blocks free
   * slots before they free pages) and yields between batches; blocks not yet flushed are left to the
   * flusher, which calls again when it made blocks clean.
   */
  evictAhead(): void {
    if (this.evictingAhead || this.core.closing || this.highWatermarkBytes === 0 || this.core.dram.freeBytes() >= this.lowWatermarkBytes) return;
    this.evictingAhead = (async () => {
      let budget = EVICT_AHEAD_PASS_FACTOR * this.highWatermarkBytes;
      while (!this.core.closing && budget > 0 && this.core.dram.freeBytes() < this.highWatermarkBytes) {
        const victims = this.victims(Math.min(this.highWatermarkBytes - this.core.dram.freeBytes(), EVICT_AHEAD_BATCH_BYTES));
        if (victims.length === 0) break;
        for (const key of victims) {
          if (!this.core.dram.has(key) || !this.evictable(key)) continue; // changed while we yielded
          budget -= this.core.dram.footprintBytes(this.core.dram.sizeOf(key) ?? 0);
          await this.evict(key);
          this.core.counters.evictionsAhead++;
        }
        await new Promise<void>((r) => setImmediate(r)); // let requests in between batches
      }
    })()
      .catch((e: unknown) => this.core.warn(`evicting ahead of need: ${String(e)}`))
      .finally(() => (this.evictingAhead = undefined));
  }

  /**
   * dram.write right after makeRoom said yes: false when a concurrent write took the room in between
   * (ENOSPC), so the caller writes through to disk instead of failing the put (seen under 8 writers).
   */
  async dramWriteRaced(sha: string, data: Uint8Array | (() => Promise<void>)): Promise<boolean> {
    try {
      if (typeof data === 'function') await data();
      else await this.core.dram.write(sha, data);
      return true;
    } catch (e) {
      if (!isCascadeError(e, 'ENOSPC')) throw e;
      this.core.counters.dramRaces++;
      return false;
    }
  }

  offerPromotion(sha: string, data: Buffer): boolean {
    return this.core.mover.offer({
      key: sha,
      sizeBytes: data.length,
      run: () => this.promoteNow(sha, data),
    });
  }

  /** Copy a block's bytes into DRAM as a promotion, if it is still stored and DRAM can make room. */
  promoteNow(sha: string, data: Buffer): Promise<void> {
    return this.core.locks.with(sha, async () => {
      // Still stored durably: on this node's disk, or (a cluster) on another node's.
      if (this.core.closed || this.core.dram.has(sha) || (!this.core.disk.has(sha) && !this.core.config.cluster)) return;
      const shared = !this.core.disk.has(sha);
      if (shared && (await this.core.meta.block(sha)) === undefined) return; // released meanwhile
      if (!(await this.makeRoom(data.length)) || !(await this.dramWriteRaced(sha, data))) return; // an optimisation: skipped
      if (shared) this.core.sharedClean.add(sha);
      this.core.admit(sha);
      this.cluster?.advertise(sha);
      this.core.counters.promotions++;
    });
  }
}

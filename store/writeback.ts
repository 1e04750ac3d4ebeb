/**
 * Write-back: which DRAM blocks are not yet on disk (dirty) or not yet fdatasynced, the flusher that
 * writes them in arrival order and groups their fdatasyncs, and the recovery of what a failed
 * fdatasync lost. A block is evictable from DRAM only once its disk copy is durable.
 */
import type { StoreCore } from './core';
import { assert, CascadeError } from './errors';
import { SingleFlight } from './singleflight';
import { APPEND_BATCH_BYTES_MAX, DiskSyncError } from './tiers/disk';

/** A grouped flush writes at most this many blocks, or bytes, per group (blocks above go alone). */
const FLUSH_GROUP_BLOCKS_MAX = 1024;
const FLUSH_GROUP_BYTES_MAX = APPEND_BATCH_BYTES_MAX / 2;
/** Pause before the flusher retries after a disk error. */
const FLUSH_RETRY_MS = 1000;

export class WriteBack {
  /** In DRAM, not yet written to disk, in the order they arrived (key -> size). */
  readonly dirty = new Map<string, number>();
  /** Disk bytes the dirty blocks will take (admission keeps this within the disk's free space). */
  private dirtyDiskBytes = 0;
  /** Written to disk, not yet fdatasynced. */
  readonly unsynced = new Set<string>();
  /** Blocks being written through to disk (no DRAM copy), with their writers' count: each writes again what a failed fdatasync lost. */
  private readonly writingThrough = new Map<string, number>();
  private readonly flushes = new SingleFlight<void>();
  /**
   * Dirty blocks whose content lock the flusher holds while it writes them to disk. Such a block is
   * whole in DRAM and stays there: a flush only reads it, and nothing can reclaim it while the lock is held.
   */
  private readonly flushingLocked = new Set<string>();
  /** The flusher's run, while one runs. */
  flusher: Promise<void> | undefined;
  private flushRetry: NodeJS.Timeout | undefined;
  /**
   * Told of blocks just fdatasynced, before they count as durable (a cluster node records where they
   * lie, so its DRAM copy is not evicted before other nodes can read them from the segments).
   */
  synced: ((keys: string[]) => Promise<void>) | undefined;

  /** `madeClean`: blocks just became durable (they may be evicted now). */
  constructor(
    private readonly core: StoreCore,
    private readonly madeClean: () => void,
  ) {}

  /**
   * Whether the content lock of `key` is held by a flush of it (see flushingLocked): a reader may then
   * take the DRAM copy without waiting for the disk write.
   */
  lockedForFlush(key: string): boolean {
    return this.flushingLocked.has(key);
  }

  /** Whether a block still waits for the flusher or for its fdatasync. */
  pending(key: string): boolean {
    return this.dirty.has(key) || this.unsynced.has(key);
  }

  /** Every block not yet durable. */
  allPending(): string[] {
    return [...this.dirty.keys(), ...this.unsynced];
  }

  /** Accept only what can reach disk: the disk must hold this block on top of everything still dirty. */
  checkDiskRoom(sizeBytes: number): void {
    const disk = this.core.disk;
    const diskNeed = disk.footprintBytes(sizeBytes) + this.dirtyDiskBytes;
    if (diskNeed > disk.freeBytes()) {
      throw new CascadeError('ENOSPC', `disk tier has ${disk.freeBytes()} bytes free, ${diskNeed} needed`);
    }
  }

  /**
   * Write a block to disk now, with no fdatasync (the flusher's, or an fsync's, comes after): a
   * cluster's blocks are read by other nodes from the segments as soon as they are committed.
   */
  async writeNow(sha: string, data: Uint8Array): Promise<void> {
    await this.core.disk.write(sha, data).catch((e: unknown) => Promise.reject(this.requeueLost(e)));
    this.unsynced.add(sha);
    this.kickFlusher();
  }

  /** A block reclaimed: nothing more to write of it. */
  forget(key: string): void {
    this.clearDirty(key);
    this.unsynced.delete(key);
  }

  /** Stop retrying (the store closes; makeDurable still works). */
  stop(): void {
    clearTimeout(this.flushRetry);
  }

  /**
   * Make a block that has no DRAM copy durable before the put returns. A failed fdatasync drops the
   * blocks it could not confirm, and with no DRAM copy to write again from, a put that returned would
   * be lost for good (every later fsync of its name EIO). So the block is written and synced now, and
   * written once more (to a new segment) from the caller's buffer after a failed fdatasync; a second
   * failure fails the put, and the name keeps its previous content. The slow path only: DRAM full of
   * pinned or not-yet-durable blocks.
   */
  async durableFromBuffer(sha: string, data: Uint8Array): Promise<void> {
    this.writingThrough.set(sha, (this.writingThrough.get(sha) ?? 0) + 1);
    try {
      for (let attempt = 0; ; attempt++) {
        let failed: unknown;
        try {
          if (!this.core.disk.has(sha)) {
            await this.core.disk.write(sha, data).catch((e: unknown) => Promise.reject(this.requeueLost(e)));
            this.unsynced.add(sha);
          }
          // Still unsynced after another segment's failed fdatasync: the next sync confirms it at once.
          if (this.unsynced.has(sha)) await this.syncDisk();
        } catch (e) {
          if (!(e instanceof DiskSyncError)) throw e;
          failed = e;
        }
        // Checked after every sync, failed or not: a concurrent one (the flusher's) may have lost it.
        if (this.core.disk.has(sha) && !this.unsynced.has(sha)) return;
        if (attempt >= 1) throw failed ?? new CascadeError('EIO', `fdatasync failed; block ${sha} was not made durable`);
      }
    } finally {
      const n = this.writingThrough.get(sha)! - 1;
      if (n === 0) this.writingThrough.delete(sha);
      else this.writingThrough.set(sha, n);
    }
  }

  markDirty(key: string, sizeBytes: number): void {
    if (this.dirty.has(key)) return;
    this.dirty.set(key, sizeBytes);
    this.dirtyDiskBytes += this.core.disk.footprintBytes(sizeBytes);
  }

  private clearDirty(key: string): void {
    const size = this.dirty.get(key);
    if (size === undefined) return;
    this.dirty.delete(key);
    this.dirtyDiskBytes -= this.core.disk.footprintBytes(size);
  }

  kickFlusher(): void {
    if (this.core.closed || this.flusher) return;
    clearTimeout(this.flushRetry);
    this.flushRetry = undefined;
    this.flusher = this.flushLoop()
      .catch((e) => {
        // A failing disk is retried after a pause, not in a hot loop; put and sync kick it sooner.
        this.core.warn(`flush failed: ${String(e)}`);
        this.flushRetry = setTimeout(() => this.kickFlusher(), FLUSH_RETRY_MS).unref();
      })
      .finally(() => {
        this.flusher = undefined;
      });
  }

  /** Write dirty blocks to disk in arrival order, then fdatasync, until nothing is left. */
  private async flushLoop(): Promise<void> {
    await new Promise<void>((r) => setImmediate(r)); // let the put that queued work return first
    while (!this.core.closed && (this.dirty.size > 0 || this.unsynced.size > 0)) {
      await this.flushKeys([...this.dirty.keys()]);
      await this.syncDisk();
    }
  }

  /**
   * Write these dirty blocks to disk, grouped: many records per append where the disk tier can (one
   * pwrite per run instead of two or three per block, no buffer per block), then one fdatasync by the
   * caller. A block whose lock is taken (a put, a reclaim, a flush of it) is written after the rest,
   * on its turn, as flushOne does; the group only takes free locks, so it never waits holding some.
   */
  async flushKeys(keys: Iterable<string>): Promise<void> {
    const writeMany = this.core.disk.writeMany?.bind(this.core.disk);
    if (writeMany === undefined) {
      for (const key of keys) if (this.dirty.has(key)) await this.flushOne(key);
      return;
    }
    let group: Array<{ key: string; sizeBytes: number; release: () => void }> = [];
    let groupBytes = 0;
    const busy: string[] = [];
    const writeGroup = async () => {
      const blocks = group;
      group = [];
      groupBytes = 0;
      if (blocks.length === 0) return;
      try {
        await writeMany(blocks, (key, target, offsetBytes) => this.fillFromDram(key, target, offsetBytes)).catch((e: unknown) =>
          Promise.reject(this.requeueLost(e)),
        );
        for (const b of blocks) {
          this.clearDirty(b.key);
          this.unsynced.add(b.key);
          this.core.counters.flushedBlocks++;
        }
      } finally {
        for (const b of blocks) {
          this.flushingLocked.delete(b.key);
          b.release();
        }
      }
    };
    for (const key of keys) {
      if (!this.dirty.has(key)) continue;
      const release = this.core.locks.tryAcquire(key);
      if (release === undefined) {
        busy.push(key);
        continue;
      }
      const sizeBytes = this.dirty.get(key);
      if (sizeBytes === undefined) {
        release(); // flushed or reclaimed meanwhile
      } else if (sizeBytes > FLUSH_GROUP_BYTES_MAX) {
        release();
        await writeGroup(); // hold no locks while waiting for this one's
        await this.flushOne(key);
      } else {
        this.flushingLocked.add(key);
        group.push({ key, sizeBytes, release });
        groupBytes += sizeBytes;
        if (group.length >= FLUSH_GROUP_BLOCKS_MAX || groupBytes >= FLUSH_GROUP_BYTES_MAX) await writeGroup();
      }
    }
    await writeGroup();
    for (const key of busy) if (this.dirty.has(key)) await this.flushOne(key);
  }

  /** The disk tier's fill for a flush: bytes of a dirty block, which is whole in DRAM. */
  private async fillFromDram(key: string, target: Uint8Array, offsetBytes: number): Promise<void> {
    const n = await this.core.dram.read(key, offsetBytes, target);
    assert(n === target.length, 'a dirty block is whole in DRAM');
  }

  /**
   * Write one dirty block to disk (merged with a concurrent flush of the same block), under the content
   * lock so that reclamation of the block cannot interleave and leave an orphan on disk.
   */
  private flushOne(key: string): Promise<void> {
    return this.flushes.do(key, () =>
      this.core.locks.with(key, async () => {
        this.flushingLocked.add(key);
        try {
          await this.flushLocked(key);
        } finally {
          this.flushingLocked.delete(key);
        }
      }),
    );
  }

  /** flushOne's work, for a caller that holds the content's lock. */
  async flushLocked(key: string): Promise<void> {
    const size = this.dirty.get(key);
    if (size === undefined) return; // reclaimed or flushed meanwhile
    const writeMany = this.core.disk.writeMany?.bind(this.core.disk);
    let written: Promise<void>;
    if (writeMany !== undefined) {
      // In pieces through the disk tier's staging buffer: no buffer of the block's size.
      written = writeMany([{ key, sizeBytes: size }], (k, target, offsetBytes) => this.fillFromDram(k, target, offsetBytes));
    } else {
      const buf = Buffer.allocUnsafe(size);
      const n = await this.core.dram.read(key, 0, buf);
      assert(n === size, 'a dirty block is whole in DRAM');
      written = this.core.disk.write(key, buf);
    }
    await written.catch((e: unknown) => Promise.reject(this.requeueLost(e)));
    this.clearDirty(key);
    this.unsynced.add(key);
    this.core.counters.flushedBlocks++;
  }

  /** fdatasync the disk tier; blocks whose durability a failed sync could not confirm go back to dirty. */
  async syncDisk(): Promise<void> {
    const covered = [...this.unsynced];
    try {
      await this.core.disk.sync();
    } catch (e) {
      throw this.requeueLost(e);
    }
    if (this.synced !== undefined && covered.length > 0) await this.synced(covered);
    for (const key of covered) this.unsynced.delete(key);
    this.madeClean(); // blocks just made durable can go now
  }

  /**
   * After a failed fdatasync (from sync, or from the seal of a full segment inside a write): the blocks
   * it could not confirm are written again from DRAM, to a new segment, or reported when DRAM lost
   * them. Returns the error to rethrow.
   */
  requeueLost(e: unknown): unknown {
    if (!(e instanceof DiskSyncError)) return e;
    this.core.counters.diskSyncFailures++;
    this.kickFlusher();
    for (const key of e.lostKeys) {
      this.unsynced.delete(key);
      const size = this.core.dram.sizeOf(key);
      if (size !== undefined) this.markDirty(key, size);
      else if (!this.writingThrough.has(key)) this.core.warn(`block ${key} was lost by a failed fdatasync and is not in memory`);
    }
    return e;
  }

  /** Make these blocks durable on disk now, retrying once after a failed fsync (which moves them). */
  async makeDurable(keys: string[]): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.flushKeys(keys);
        if (keys.some((k) => this.unsynced.has(k))) await this.syncDisk();
        const notDurable = keys.filter((k) => this.dirty.has(k) || this.unsynced.has(k));
        if (notDurable.length > 0 && attempt === 0) continue;
        if (notDurable.length > 0) throw new CascadeError('EIO', `${notDurable.length} block(s) could not be made durable`);
        return;
      } catch (e) {
        if (attempt > 0 || !(e instanceof DiskSyncError)) throw e;
      }
    }
  }
}

/**
 * The GPU tier's cache: which blocks enter it (reads from the first byte, pins), eviction from it
 * (copied down to DRAM first when hot), and holds for same-node GPU processes over CUDA IPC.
 */
import type { StoreConfig } from './config';
import type { StoreCore } from './core';
import type { DramCache } from './dram-cache';
import { MAKE_ROOM_ROUNDS_MAX } from './dram-cache';
import { assert, CascadeError, isCascadeError } from './errors';
import type { VersionRecord } from './meta';
import { CudaGpuDevice, GpuTier, probeGpu } from './tiers/gpu';
import type { GpuFigures, GpuHold } from './types';

/** Loads into a tier a hold tries when the block is evicted again before it could be held. */
export const HOLD_ATTEMPTS_MAX = 3;

/** The GPU tier the config asks for, or why there is none (the store then runs without it). */
export function openGpu(config: StoreConfig): GpuTier | string {
  const g = config.gpu;
  if (!g) return 'off (mount with --gpu SIZE to use it)';
  if (g.testDevice) return new GpuTier(g.testDevice, { slotBytes: g.slotBytes });
  const probe = probeGpu();
  if (!probe.available) return probe.reason;
  try {
    return new GpuTier(CudaGpuDevice.open(g.device ?? 0, g.capacityBytes), { slotBytes: g.slotBytes });
  } catch (e) {
    return (e as Error).message;
  }
}

/** Why the GPU tier is off, when it is (StoreStats.gpu). */
export function gpuOffFigures(reason: string | undefined): GpuFigures {
  return { available: false, reason, capacityBytes: 0, usedBytes: 0, blocks: 0, leases: 0, promotions: 0, evictions: 0, demotions: 0 };
}

export class GpuCache {
  /** Blocks held in the GPU tier for IPC readers (count per block): not evicted meanwhile. */
  private readonly holds = new Map<string, number>();

  constructor(
    private readonly core: StoreCore,
    private readonly gpu: GpuTier,
    private readonly dramCache: DramCache,
    /** Keep a version's content while a reader holds it (Store.lease). */
    private readonly lease: (v: VersionRecord) => () => void,
  ) {}

  /** Whether the tier holds a block now. */
  has(sha: string): boolean {
    return this.gpu.has(sha);
  }

  /** The whole block from the GPU tier, or undefined when it left meanwhile. */
  async copyOut(sha: string, sizeBytes: number): Promise<Buffer | undefined> {
    const buf = Buffer.allocUnsafe(sizeBytes);
    try {
      return (await this.gpu.read(sha, 0, buf)) === sizeBytes ? buf : undefined;
    } catch (e) {
      if (isCascadeError(e, 'ENOENT')) return undefined;
      throw e;
    }
  }

  figures(): GpuFigures {
    const g = this.gpu;
    const t = g.stats();
    return {
      available: true,
      device: g.device.describe(),
      capacityBytes: t.capacityBytes,
      usedBytes: t.usedBytes,
      blocks: t.blocks,
      leases: [...this.holds.values()].reduce((a, b) => a + b, 0),
      promotions: this.core.counters.gpuPromotions,
      evictions: this.core.counters.gpuEvictions,
      demotions: this.core.counters.gpuDemotions,
    };
  }

  /** As offerPromotion, for a block in the GPU tier: copied out of it when the job runs. */
  offerPromotion(sha: string, sizeBytes: number): void {
    if (this.core.dram.footprintBytes(sizeBytes) > this.core.dram.capacityBytes) return;
    this.core.mover.offer({
      key: sha,
      sizeBytes: 0, // holds no bytes while queued
      run: async () => {
        if (this.core.closed || this.core.dram.has(sha)) return;
        const data = await this.copyOut(sha, sizeBytes);
        if (data) await this.dramCache.promoteNow(sha, data);
      },
    });
  }

  /**
   * A read of a block from its first byte (one per whole-file read, however many requests it takes):
   * after GPU promoteAfterReads of them the block is copied into the GPU tier in the background.
   */
  noteRead(sha: string, sizeBytes: number, offsetBytes: number): void {
    if (offsetBytes !== 0 || this.core.closing) return;
    if (this.gpu.has(sha)) {
      this.core.gpuEviction?.accessed(sha);
      return;
    }
    if (this.core.gpuPromotion?.onSlowRead(sha)) this.offer(sha, sizeBytes);
  }

  /** Queue a copy into the GPU tier (skipped when the queue is full: an optimisation, never owed). */
  offer(sha: string, sizeBytes: number): void {
    const g = this.gpu;
    if (g.has(sha) || g.footprintBytes(sizeBytes) > g.capacityBytes) return;
    this.core.mover.offer({
      key: `gpu:${sha}`,
      sizeBytes: 0, // the job reads the block when it runs: it holds no bytes while queued
      run: () => this.core.locks.with(sha, async () => void (await this.load(sha, sizeBytes, false))),
    });
  }

  /**
   * Copy a block into the GPU tier from this node's DRAM or disk (verified), making room first. Under
   * the block's lock. `required` (an IPC hold): ENOSPC when no room can be made; else false.
   */
  private async load(sha: string, sizeBytes: number, required: boolean): Promise<boolean> {
    const g = this.gpu;
    if (this.core.closed || this.core.closing) return false;
    if (g.has(sha)) return true;
    // The GPU tier only ever holds copies: the block must be stored elsewhere (or it was released).
    if (this.core.residentSize(sha) === undefined && !(this.core.config.cluster && (await this.core.meta.block(sha)) !== undefined)) {
      if (required) throw new CascadeError('ENOENT', `content ${sha} is no longer stored`);
      return false;
    }
    const noRoom = () => new CascadeError('ENOSPC', `no room in the GPU tier for ${sizeBytes} bytes (the rest is pinned or leased)`);
    if (!(await this.makeRoom(sizeBytes))) {
      if (required) throw noRoom();
      return false;
    }
    const data = await this.localCopy(sha, sizeBytes);
    // Room may have gone to another load while the block was read: make it again, then copy.
    if (!(await this.makeRoom(sizeBytes)) || g.has(sha)) {
      if (g.has(sha)) return true;
      if (required) throw noRoom();
      return false;
    }
    await g.write(sha, data);
    if (!this.core.pinned.has(sha)) this.core.gpuEviction?.admitted(sha);
    this.core.counters.gpuPromotions++;
    return true;
  }

  /** The whole block from this node's DRAM, or else its disk (or the shared tier), verified there. */
  private async localCopy(sha: string, sizeBytes: number): Promise<Buffer> {
    if (this.core.dram.has(sha)) {
      const buf = Buffer.allocUnsafe(sizeBytes);
      try {
        if ((await this.core.dram.read(sha, 0, buf)) === sizeBytes) return buf;
      } catch (e) {
        if (!isCascadeError(e, 'ENOENT')) throw e; // evicted meanwhile
      }
    }
    return this.dramCache.loadFromDisk(sha, sizeBytes);
  }

  /** Evict from the GPU tier (least recent first; never pinned or leased blocks) until a block fits. */
  private async makeRoom(sizeBytes: number): Promise<boolean> {
    const g = this.gpu;
    const needBytes = g.footprintBytes(sizeBytes);
    if (needBytes > g.capacityBytes) return false;
    for (let round = 0; round < MAKE_ROOM_ROUNDS_MAX; round++) {
      if (g.fits(sizeBytes)) return true;
      const victims = this.core.gpuEviction!.victims(
        Math.max(1, needBytes - g.freeBytes()),
        (k) => g.footprintBytes(g.sizeOf(k) ?? 0),
        (k) => g.has(k) && this.evictable(k),
      );
      if (victims.length === 0) return false;
      for (const key of victims) await this.evict(key);
    }
    return g.fits(sizeBytes);
  }

  private evictable(key: string): boolean {
    return !this.core.pinned.has(key) && !this.holds.has(key);
  }

  /**
   * Drop a block from the GPU tier. When DRAM lacks it, it is first copied down and offered to DRAM as
   * a promotion (a block hot enough for the GPU is likely hotter than DRAM's coldest).
   */
  private async evict(key: string): Promise<void> {
    const g = this.gpu;
    const size = g.sizeOf(key);
    if (size === undefined) return;
    let down: Buffer | undefined;
    if (!this.core.dram.has(key) && this.core.dram.footprintBytes(size) <= this.core.dram.capacityBytes) {
      down = Buffer.allocUnsafe(size);
      await g.read(key, 0, down).catch(() => (down = undefined));
    }
    // Checked again after the copy down (a hold may have come meanwhile); from here on nothing yields.
    if (!g.has(key) || !this.evictable(key)) return;
    void g.delete(key);
    this.core.gpuEviction!.removed(key);
    this.core.counters.gpuEvictions++;
    if (down && this.dramCache.offerPromotion(key, down)) this.core.counters.gpuDemotions++;
  }

  /**
   * Hold a version's content in the GPU tier for a same-node GPU process (user.cascade.cuda_ipc):
   * loaded there now if needed, never evicted nor reclaimed until release(). EOPNOTSUPP without a GPU
   * tier (or a device that cannot export IPC handles), ENOSPC when the tier is full of pinned or held
   * blocks.
   */
  async hold(v: VersionRecord): Promise<GpuHold> {
    this.core.checkOpen();
    const g = this.gpu;
    const ipcHandle = g.device.ipcHandle();
    if (!ipcHandle) throw new CascadeError('EOPNOTSUPP', `GPU device ${g.device.describe().name} cannot export CUDA IPC handles`);
    const sha = v.sha256;
    const releaseLease = this.lease(v);
    try {
      const where = await this.core.locks.with(sha, async () => {
        for (let attempt = 0; ; attempt++) {
          await this.load(sha, v.sizeBytes, true);
          const w = g.locate(sha); // nothing awaited between the check and the hold
          if (w !== undefined) {
            this.holds.set(sha, (this.holds.get(sha) ?? 0) + 1);
            return w;
          }
          if (attempt >= HOLD_ATTEMPTS_MAX) throw new CascadeError('EIO', `content ${sha} keeps leaving the GPU tier before it can be held`);
        }
      });
      assert(where.sizeBytes === v.sizeBytes, 'held content is in the GPU tier with its size');
      let released = false;
      return {
        version: v,
        offsetBytes: where.offsetBytes,
        sizeBytes: where.sizeBytes,
        ipcHandle,
        deviceUuid: g.device.describe().uuid,
        release: () => {
          if (released) return;
          released = true;
          const n = (this.holds.get(sha) ?? 1) - 1;
          if (n > 0) this.holds.set(sha, n);
          else this.holds.delete(sha);
          releaseLease();
        },
      };
    } catch (e) {
      releaseLease();
      throw e;
    }
  }
}

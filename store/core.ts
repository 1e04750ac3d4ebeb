/**
 * What every part of the store shares: the tiers, the block index (pins, readers' leases and holds,
 * copies durable only elsewhere), the per-content locks, the policies, the counters and the log.
 */
import type { StoreConfig } from './config';
import {
  BLOCK_MAX_BYTES_DEFAULT,
  GPU_PROMOTE_AFTER_READS_DEFAULT,
  KEEP_VERSIONS_DEFAULT,
  MOVER_QUEUE_MAX_BYTES,
  MOVER_QUEUE_MAX_JOBS,
  PIN_QUOTA_FRACTION_DEFAULT,
  PROMOTE_AFTER_READS_DEFAULT,
} from './constants';
import { assert, CascadeError } from './errors';
import type { MetaEngine } from './meta';
import { Mover } from './mover';
import { LruEviction } from './policy/lru';
import type { EvictionPolicy, PromotionPolicy } from './policy/policy';
import { ThresholdPromotion } from './policy/promotion';
import { KeyedLock } from './singleflight';
import type { Tier, TierName } from './tier';
import type { GpuTier } from './tiers/gpu';

/** Bounds of the DRAM recency order (see LruEviction). */
const LRU_MAX_ENTRIES = 1 << 20;
const LRU_MIN_BLOCK_BYTES = 4096;

export class StoreCore {
  readonly keepVersions: number;
  readonly maxBlockBytes: number;
  readonly pinQuotaBytes: number;
  readonly locks = new KeyedLock();
  readonly eviction: EvictionPolicy;
  readonly promotion: PromotionPolicy;
  readonly mover: Mover;
  readonly gpuEviction: EvictionPolicy | undefined;
  readonly gpuPromotion: PromotionPolicy | undefined;

  /** Pinned content (sha -> size): never evicted from DRAM, the GPU tier's first choice. */
  readonly pinned = new Map<string, number>();
  pinnedBytes = 0;
  /** Content held by open readers (sha -> count): reclamation waits until the last lease goes. */
  readonly leases = new Map<string, number>();
  /** Content whose reclamation was deferred by a lease. */
  readonly deferredReclaim = new Set<string>();
  /** Content held in DRAM for same-node clients that read the arena directly: never evicted while held. */
  readonly dramHolds = new Map<string, number>();
  /** Cluster mode: blocks in DRAM whose durable copy is another node's on the shared tier. */
  readonly sharedClean = new Set<string>();
  closing = false;
  closed = false;

  readonly counters = {
    hits: { gpu: 0, dram: 0, remote: 0, disk: 0, shared: 0 } as Record<string, number>,
    gpuPromotions: 0,
    /** Writes that found the room makeRoom had made taken by a concurrent write (written through). */
    dramRaces: 0,
    gpuEvictions: 0,
    gpuDemotions: 0,
    misses: 0,
    evictions: 0,
    promotions: 0,
    demotions: 0,
    flushedBlocks: 0,
    dedupHits: 0,
    dedupSavedBytes: 0,
    lostVersions: 0,
    orphanBlocksRemoved: 0,
    diskSyncFailures: 0,
    /** Cluster mode: whole blocks loaded from other nodes' segments, and their bytes. */
    sharedLoads: 0,
    sharedLoadBytes: 0,
    /** Cluster mode: opens served from the last-known version while Redis could not be reached. */
    offlineResolves: 0,
    /** Blocks evicted in the background to keep the free-DRAM watermark (part of evictions). */
    evictionsAhead: 0,
    /** Metadata snapshots taken, and how long the last one took. */
    metaSnapshots: 0,
    metaSnapshotMs: 0,
  };

  constructor(
    readonly dram: Tier,
    readonly disk: Tier,
    readonly meta: MetaEngine,
    readonly config: StoreConfig,
    readonly gpu: GpuTier | undefined,
  ) {
    this.keepVersions = config.keepVersions ?? KEEP_VERSIONS_DEFAULT;
    this.maxBlockBytes = config.maxBlockBytes ?? BLOCK_MAX_BYTES_DEFAULT;
    this.pinQuotaBytes = config.pinQuotaBytes ?? Math.floor(dram.capacityBytes * PIN_QUOTA_FRACTION_DEFAULT);
    // As many recency entries as blocks fit in DRAM (a block takes at least one allocation unit).
    const minFootprintBytes = Math.max(dram.footprintBytes(1), LRU_MIN_BLOCK_BYTES);
    this.eviction = new LruEviction(Math.max(1024, Math.min(LRU_MAX_ENTRIES, Math.ceil(dram.capacityBytes / minFootprintBytes))));
    this.promotion = new ThresholdPromotion(config.promoteAfterReads ?? PROMOTE_AFTER_READS_DEFAULT);
    if (gpu) {
      this.gpuEviction = new LruEviction(Math.max(1024, Math.min(LRU_MAX_ENTRIES, Math.ceil(gpu.capacityBytes / gpu.slotBytes))));
      this.gpuPromotion = new ThresholdPromotion(config.gpu?.promoteAfterReads ?? GPU_PROMOTE_AFTER_READS_DEFAULT);
    }
    this.mover = new Mover(MOVER_QUEUE_MAX_JOBS, MOVER_QUEUE_MAX_BYTES, (e, job) => this.warn(`promotion of ${job.key} failed: ${String(e)}`));
  }

  /** A block enters the DRAM recency order, unless pinned: pins are never victims, so never scanned. */
  admit(sha: string): void {
    if (!this.pinned.has(sha)) this.eviction.admitted(sha);
  }

  pinLocally(sha: string, sizeBytes: number): void {
    assert(!this.pinned.has(sha), 'a pin is counted once');
    this.pinned.set(sha, sizeBytes);
    this.pinnedBytes += sizeBytes;
    this.eviction.removed(sha);
    this.gpuEviction?.removed(sha); // a pinned block is never a GPU victim either
  }

  unpinLocally(sha: string): void {
    const size = this.pinned.get(sha);
    if (size === undefined) return;
    this.pinned.delete(sha);
    this.pinnedBytes -= size;
    if (this.dram.has(sha)) this.eviction.admitted(sha);
    if (this.gpu?.has(sha)) this.gpuEviction?.admitted(sha);
  }

  residentSize(sha: string): number | undefined {
    return this.dram.sizeOf(sha) ?? this.disk.sizeOf(sha);
  }

  tierOf(sha: string): TierName | 'none' {
    if (this.gpu?.has(sha)) return 'gpu';
    if (this.dram.has(sha)) return this.dram.name;
    if (this.disk.has(sha)) return this.disk.name;
    // A committed block of a cluster is on the shared tier (its writer wrote it through).
    if (this.config.cluster) return this.disk.name;
    return 'none';
  }

  now(): number {
    return this.config.nowMs ? this.config.nowMs() : Date.now();
  }

  checkOpen(): void {
    if (this.closed || this.closing) throw new CascadeError('EBUSY', 'store is closed');
  }

  warn(message: string): void {
    (this.config.log ?? ((m: string) => process.stderr.write(`cascade: ${m}\n`)))(message);
  }
}

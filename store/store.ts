/**
 * The Store: content-addressed, versioned, tiered. It owns the block index (which content is dirty,
 * pinned, where it lives), the policies, the flusher that writes DRAM blocks back to disk, the mover
 * that promotes blocks read from disk, and reclamation of content no retained version references.
 *
 * Write path: put -> SHA-256 -> (new content) DRAM, marked dirty and queued for the flusher; if DRAM has
 * no room even after evicting clean blocks, straight to disk (a demotion) -> metadata commit.
 * Read path: DRAM, else disk (single-flight, verified) and a promotion offered to the mover.
 * Durability: the flusher writes dirty blocks and fdatasyncs; a block is evictable from DRAM only once
 * its disk copy is durable, so a failed fsync loses nothing that DRAM still holds.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  BLOCK_MAX_BYTES_DEFAULT,
  DRAM_PAGE_BYTES_DEFAULT,
  GPU_PROMOTE_AFTER_READS_DEFAULT,
  KEEP_VERSIONS_DEFAULT,
  KEEP_VERSIONS_MAX,
  LIST_PAGE_MAX,
  MOVER_QUEUE_MAX_BYTES,
  MOVER_QUEUE_MAX_JOBS,
  PIN_QUOTA_FRACTION_DEFAULT,
  PROMOTE_AFTER_READS_DEFAULT,
} from './constants';
import { assert, CascadeError, isCascadeError } from './errors';
import type { BlockPlacement, ChangeListener, ClusterDirectory, MetaEngine, NameChange, VersionRecord } from './meta';
import { MemoryMeta } from './meta/memory';
import { SqliteMeta } from './meta/sqlite';
import { JOURNAL_DIR_NAME, listJournalFiles } from './meta/journal';
import { listSnapshots, META_FILE, SNAPSHOT_FILE, takeSnapshot } from './meta/snapshot';
import { Mover } from './mover';
import { validateDirName, validateName, validateSha256 } from './names';
import { LruEviction } from './policy/lru';
import type { EvictionPolicy, PromotionPolicy } from './policy/policy';
import { ThresholdPromotion } from './policy/promotion';
import { KeyedLock, SingleFlight } from './singleflight';
import { isMappedTier, type Tier, type TierName, type TierStats } from './tier';
import { APPEND_BATCH_BYTES_MAX, DiskSegmentTier, DiskSyncError, readRecordAt, realDiskIo } from './tiers/disk';
import { mkdirAll } from './mkdir';
import { failpointsFromEnv, type FaultyDiskIo } from './faults';
import { ShmArenaTier } from './tiers/dram';
import { MemoryTier } from './tiers/memory';
import { NativeArenaTier } from './tiers/native-dram';
import { CudaGpuDevice, GpuTier, probeGpu, type GpuDevice, type GpuDeviceFigures } from './tiers/gpu';
import { sha256Hex } from './hash';
import { nativeBinding } from '../native';
import type { NativeArenaBinding } from '../native/types';
import { allocLarge } from './copy';
import { LRUCache } from 'lru-cache';
import { RemoteDram, type RemoteDramFigures, type RemoteDramOptions } from './remote';

export interface StoreConfig {
  /** Directory for the disk tier's segments and the metadata database. */
  dataDir: string;
  /** DRAM tier capacity. */
  dramCapacityBytes: number;
  /** Disk tier capacity (default: unbounded; the filesystem's own limit applies). */
  diskCapacityBytes?: number;
  /**
   * Write the disk tier through the kernel page cache (default false: O_DIRECT appends where the
   * filesystem takes them, so blocks are not copied into, and cached twice in, memory).
   */
  diskPageCache?: boolean;
  /**
   * When a block loading into DRAM (from disk, the shared tier or a peer) may be read: 'crc32c'
   * (default) as each piece passes its CRC-32C, its whole SHA-256 checked beside and gating only what
   * is kept; 'sha256' only once the whole SHA-256 matches (the strict mode).
   */
  verify?: 'crc32c' | 'sha256';
  /** Sum of pinned block sizes allowed (default: half of DRAM). */
  pinQuotaBytes?: number;
  keepVersions?: number;
  /**
   * SqliteMeta group commit window (SqliteMetaOptions.groupCommitMs; the store's metadata has a journal,
   * so the default is GROUP_COMMIT_DELAY_MS): closes within it share one SQLite commit; a kill -9 loses
   * none of them (the journal has each, applied again at the next open). 0: each commits on its own.
   */
  metaGroupCommitMs?: number;
  maxBlockBytes?: number;
  /** Disk reads of a block before it is promoted to DRAM. */
  promoteAfterReads?: number;
  /**
   * Free DRAM kept ahead of need, as fractions of its capacity: when free space falls below `low`
   * after a write, clean blocks are evicted in the background until `high` is free, so a write rarely
   * waits for an eviction (default 0.05 and 0.10; 0 and 0 turn it off).
   */
  dramWatermarks?: { low: number; high: number };
  /**
   * 'native': shared-memory arena mapped by the native addon (default when the addon loads);
   * 'shm': the same arena through pread/pwrite in TypeScript (default without the addon);
   * 'memory': plain heap (tests, hosts without /dev/shm).
   */
  dram?: 'native' | 'shm' | 'memory';
  shmDir?: string;
  dramPageBytes?: number;
  /** Pre-fault the shared-memory arena at open (default true). */
  prefault?: boolean;
  /**
   * Load pinned blocks into DRAM at open (default true). Short-lived tools that open a data directory
   * for one operation pass false: pins stay recorded, and a later mount loads them.
   */
  loadPins?: boolean;
  /** Back the DRAM arena with huge pages: 'auto' (default) tries and falls back to shmDir. */
  dramHugePages?: boolean | 'auto';
  /** 'sqlite' (default, durable) or 'memory' (tests). */
  meta?: 'sqlite' | 'memory';
  segmentTargetBytes?: number;
  /**
   * Snapshots of the SQLite metadata (store/meta/snapshot.ts) for `cascade fsck --repair`: one when this
   * long has passed since the last and something changed (default 10 min; 0: only the other triggers),
   * one early when the journal passes META_JOURNAL_SNAPSHOT_BYTES, and one at close unless
   * metaSnapshotOnClose is false (one-shot CLI commands: a close per command would copy the database
   * each time).
   */
  metaSnapshotIntervalMs?: number;
  metaSnapshotOnClose?: boolean;
  /** Injection points for tests: replace a tier, the metadata engine or the clock. */
  tiers?: { dram?: Tier; disk?: Tier };
  metaEngine?: MetaEngine;
  /**
   * Cluster mode: this node is one of several sharing `metaEngine` (which must also be the cluster
   * directory, e.g. RedisMeta). Its disk tier lives in `<sharedDir>/nodes/<node>/`, every block is
   * written through to it before its commit, and blocks this node lacks are read from other nodes'
   * segments on the shared tier (verified). `dataDir` is not used for data then.
   */
  cluster?: {
    node: string;
    sharedDir: string;
    directory: ClusterDirectory;
    /**
     * The remote DRAM tier (store/remote.ts): read blocks other nodes hold in DRAM over libfabric, and
     * serve this node's. Default on when the addon has libfabric and DRAM is the native arena; false: off.
     */
    remote?: RemoteDramOptions | false;
  };
  /**
   * The GPU tier (store/tiers/gpu.ts): a pool of `capacityBytes` on device `device` (default 0). Blocks
   * enter it after `promoteAfterReads` reads (default 2) and at pin time; pinned blocks are never
   * evicted from it. Without a usable device (no libcuda.so.1, no GPU) the store opens without it and
   * stats say why. `testDevice` replaces the CUDA device (tests).
   */
  gpu?: { capacityBytes: number; device?: number; promoteAfterReads?: number; slotBytes?: number; testDevice?: GpuDevice };
  nowMs?: () => number;
  /** Where warnings go (default: stderr). */
  log?: (message: string) => void;
}

/** Which version of a name to read: the current one, a number, or the one current at a time. */
export interface VersionSelector {
  version?: number;
  atMs?: number;
}

/** The GPU tier as stats show it: whether it runs, why not, and its figures. */
export interface GpuFigures {
  available: boolean;
  /** Why the tier is off (not asked for, no driver, no device, pool allocation failed). */
  reason?: string;
  device?: GpuDeviceFigures;
  capacityBytes: number;
  usedBytes: number;
  blocks: number;
  /** Blocks a same-node GPU process holds through user.cascade.cuda_ipc (never evicted meanwhile). */
  leases: number;
  promotions: number;
  evictions: number;
  /** Evicted blocks copied down into DRAM (which had room) instead of dropped. */
  demotions: number;
}

/** A block held in the GPU tier for an IPC reader: where it lies, until release(). */
export interface GpuHold {
  version: VersionRecord;
  offsetBytes: number;
  sizeBytes: number;
  /** The pool's CUDA IPC memory handle (64 bytes) and the device's UUID. */
  ipcHandle: Buffer;
  deviceUuid: string;
  release(): void;
}

export interface BlockInfo extends VersionRecord {
  tier: TierName | 'none';
  pinned: boolean;
}

export interface StoreStats {
  tiers: TierStats[];
  hits: Record<string, number>;
  misses: number;
  evictions: number;
  /** Of the evictions, those made in the background to keep free DRAM at the watermarks. */
  evictionsAhead: number;
  promotions: number;
  promotionsRefused: number;
  demotions: number;
  flushedBlocks: number;
  dirtyBlocks: number;
  dedup: { hits: number; savedBytes: number; uniqueBytes: number; logicalBytes: number };
  pinned: { blocks: number; bytes: number; quotaBytes: number };
  names: number;
  versions: number;
  /** journalReplayed: metadata changes a crash kept from committing, applied again from the journal at open. */
  recovery: { lostVersions: number; orphanBlocksRemoved: number; quarantined: number; journalReplayed: number };
  diskSyncFailures: number;
  /** Bytes the disk tier appended with O_DIRECT (no page-cache copy) and through the page cache. */
  diskAppends: { directBytes: number; bufferedBytes: number };
  gpu: GpuFigures;
  /** Faults injected under the disk tier by CASCADE_FAILPOINTS (tests only), by point. */
  faultsInjected?: Record<string, number>;
  /**
   * Cluster mode: this node; blocks it loaded whole from other nodes' segments (each load once, however
   * many reads it then serves); every node of the namespace with its last published figures.
   */
  cluster?: {
    node: string;
    sharedLoads: number;
    sharedLoadBytes: number;
    /** Opens served from this node's last-known version while Redis could not be reached. */
    offlineResolves: number;
    /** The remote DRAM tier: this node's endpoint, its fetches from peers and what it served them. */
    remote?: RemoteDramFigures;
    nodes: Array<{ node: string; live: boolean; stats: unknown }>;
  };
}

/** What a cluster node publishes about itself with each heartbeat (`cascade cluster status`). */
export interface NodeFigures {
  atMs: number;
  host: string;
  pid: number;
  tiers: TierStats[];
  hits: Record<string, number>;
  misses: number;
  promotions: number;
  dedupHits: number;
  pinnedBytes: number;
  sharedLoads: number;
  sharedLoadBytes: number;
  /** The remote DRAM tier's figures, with the endpoint address peers fetch from. */
  remote?: RemoteDramFigures;
}

/** Bounds of the DRAM recency order (see LruEviction): 1 Mi entries cost ~60 ms at open. */
const LRU_MAX_ENTRIES = 1 << 20;
const LRU_MIN_BLOCK_BYTES = 4096;
/** A grouped flush writes at most this many blocks, or bytes, per group (blocks above go alone). */
const FLUSH_GROUP_BLOCKS_MAX = 1024;
const FLUSH_GROUP_BYTES_MAX = APPEND_BATCH_BYTES_MAX / 2;
/** Pause before the flusher retries after a disk error. */
const FLUSH_RETRY_MS = 1000;
/** A cluster node's lease in the directory: renewed every NODE_HEARTBEAT_MS, lost NODE_LEASE_MS after. */
const NODE_LEASE_MS = 15_000;
const NODE_HEARTBEAT_MS = 5_000;
/** Placements republished at once when a node opens (each one round trip). */
const PLACE_CONCURRENCY = 64;
/** Released blocks a node drops per heartbeat (a release elsewhere names this node's copies). */
const RECLAIM_BATCH = 4096;
/** Free DRAM kept ahead of need by default (fractions of capacity). */
const DRAM_WATERMARKS_DEFAULT = { low: 0.05, high: 0.1 };
/** Background eviction: bytes asked for per batch, and per pass (times the high watermark). */
const EVICT_AHEAD_BATCH_BYTES = 64 * 1024 * 1024;
const EVICT_AHEAD_PASS_FACTOR = 4;
/** Loads into DRAM a hold tries when the block is evicted again before it could be held. */
const HOLD_ATTEMPTS_MAX = 3;
/** Eviction rounds one write may run before it writes through to disk instead. */
const MAKE_ROOM_ROUNDS_MAX = 8;
/** Names whose current version a cluster node remembers for opens while Redis is away. */
const LAST_KNOWN_NAMES = 65_536;
/** A borrowed copy read request by request (no hold) stays this long after its last read. */
const BORROWED_GRACE_MS = 1_000;
/** Replica requests a node takes per heartbeat. */
const REPLICA_BATCH = 64;
/** Blocks whose places on the shared tier a node remembers (reads still check every byte). */
const PLACEMENT_CACHE_ENTRIES = 65_536;
/** Metadata snapshots: default interval, how often the triggers are looked at, early snapshot past this much journal. */
const META_SNAPSHOT_INTERVAL_MS_DEFAULT = 10 * 60_000;
const META_SNAPSHOT_CHECK_MS = 5_000;
const META_JOURNAL_SNAPSHOT_BYTES = 64 * 1024 * 1024;
/** Journal files (one per open) past which an open takes a snapshot, which prunes them. */
const META_JOURNAL_FILES_MAX = 32;
/** What a refused open says to do about its metadata. */
const FSCK_HINT = 'run `cascade fsck --repair --data DIR` to restore it from its snapshot, journal and segments';
/** A node name is a directory name on the shared tier and a key part in the directory. */
const NODE_NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;
/** Names pinnedNames() reads per page (then lets other requests in). */
const PINNED_NAMES_PAGE = 10_000;

/** A name whose current content is pinned (pinnedNames()). */
export interface PinnedName {
  name: string;
  sha256: string;
  sizeBytes: number;
}

/** A version's content held in DRAM: where its bytes lie in the arena, until release(). */
export interface DramHold {
  version: VersionRecord;
  /** [arenaOffsetBytes, lengthBytes] pairs in block order. */
  extents: Array<[number, number]>;
  /**
   * The native arena handle of the held block (undefined without a native arena). It names this
   * content while held; the engine keys the kernel's page cache of an inode by it.
   */
  arenaHandle?: number;
  release(): void;
}

/** The DRAM tier the config asks for (see StoreConfig.dram). */
async function openDram(config: StoreConfig): Promise<Tier> {
  const kind = config.dram ?? (nativeBinding() ? 'native' : 'shm');
  if (kind === 'memory') return new MemoryTier({ name: 'dram', capacityBytes: config.dramCapacityBytes });
  const options = {
    capacityBytes: config.dramCapacityBytes,
    pageBytes: config.dramPageBytes ?? DRAM_PAGE_BYTES_DEFAULT,
    dir: config.shmDir,
    prefault: config.prefault ?? true,
    hugePages: config.dramHugePages ?? 'auto',
  };
  return kind === 'native' ? NativeArenaTier.open(options) : ShmArenaTier.open(options);
}

/** The GPU tier the config asks for, or why there is none (the store then runs without it). */
function openGpu(config: StoreConfig): GpuTier | string {
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

export class Store {
  readonly keepVersions: number;
  readonly maxBlockBytes: number;
  readonly pinQuotaBytes: number;

  private readonly eviction: EvictionPolicy;
  private readonly promotion: PromotionPolicy;
  private readonly loads = new SingleFlight<Buffer>();
  /**
   * Loads into DRAM in progress, by content: each settles (never rejects) when its load ends. A read
   * that finds its block loading waits for it rather than reading the whole block from disk beside it
   * (a native fill does not go through `loads`).
   */
  private readonly dramLoading = new Map<string, Promise<void>>();
  private readonly flushes = new SingleFlight<void>();
  private readonly locks = new KeyedLock();
  private readonly mover: Mover;

  /** In DRAM, not yet written to disk, in the order they arrived (key -> size). */
  private readonly dirty = new Map<string, number>();
  /** Disk bytes the dirty blocks will take (admission keeps this within the disk's free space). */
  private dirtyDiskBytes = 0;
  /** Written to disk, not yet fdatasynced. */
  private readonly unsynced = new Set<string>();
  /** Blocks being written through to disk (no DRAM copy), with their writers' count: each writes again what a failed fdatasync lost. */
  private readonly writingThrough = new Map<string, number>();
  private readonly pinned = new Map<string, number>();
  /** Content held by open readers (sha -> count): reclamation waits until the last lease goes. */
  private readonly leases = new Map<string, number>();
  /** Content whose reclamation was deferred by a lease. */
  private readonly deferredReclaim = new Set<string>();
  /** Content held in DRAM for same-node clients that read the arena directly: never evicted while held. */
  private readonly dramHolds = new Map<string, number>();
  private pinnedBytes = 0;
  private flusher: Promise<void> | undefined;
  private flushRetry: NodeJS.Timeout | undefined;
  private closing = false;
  private closed = false;
  /** Cluster mode: blocks in DRAM whose durable copy is another node's on the shared tier. */
  private readonly sharedClean = new Set<string>();
  /**
   * Cluster mode: where other nodes hold blocks, as last looked up. An open handle's block is looked
   * up at open, so the handle keeps reading while Redis is away; a stale entry fails its check and
   * is looked up again.
   */
  private readonly placements = new LRUCache<string, BlockPlacement[]>({ max: PLACEMENT_CACHE_ENTRIES });
  private heartbeat: NodeJS.Timeout | undefined;
  /** Cluster mode: this process's lease token for its node name. */
  private readonly nodeToken: string;
  /**
   * Cluster mode: another daemon took this node's name (after this one missed heartbeats for the
   * whole lease). Its segments are that daemon's now: this one refuses writes from then on.
   */
  private leaseLost = false;
  /** Cluster mode: the remote DRAM tier (undefined: off, or no libfabric in the addon). */
  private remote: RemoteDram | undefined;
  /**
   * Copies fetched from a peer's DRAM that were not read often enough here to keep (RemotePromotion):
   * dropped when the last reader lets go, and never advertised to other nodes.
   */
  private readonly borrowed = new Set<string>();
  /** Borrowed copies read without a hold: dropped BORROWED_GRACE_MS after their last read. */
  private readonly borrowedTimers = new Map<string, NodeJS.Timeout>();
  /** Cluster mode: content pinned here as the second DRAM copy of another node's pin. */
  private readonly replicas = new Set<string>();
  /** Cluster mode: the current version of names this node last saw, for opens while Redis is away. */
  private readonly lastKnown = new LRUCache<string, VersionRecord>({ max: LAST_KNOWN_NAMES });
  /** Who hears of other nodes' changes to names (watchNames), and how this node stops hearing them. */
  private readonly changeListeners = new Set<ChangeListener>();
  private stopWatching: (() => Promise<void>) | undefined;
  /** Free DRAM bytes kept ahead of need (see StoreConfig.dramWatermarks), and the pass running now. */
  private readonly lowWatermarkBytes: number;
  private readonly highWatermarkBytes: number;
  private evictingAhead: Promise<void> | undefined;
  /** Metadata snapshots (SQLite metadata this store opened itself): the timer, the one running, the last one's seq and time. */
  private snapshotTimer: NodeJS.Timeout | undefined;
  private snapshotting: Promise<void> | undefined;
  private lastSnapshot = { seq: -1, atMs: 0 };

  private readonly counters = {
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

  /** The GPU tier and its policy, when it runs (see StoreConfig.gpu), and why not otherwise. */
  readonly gpu: GpuTier | undefined;
  private readonly gpuOffReason: string | undefined;
  private readonly gpuEviction: EvictionPolicy | undefined;
  private readonly gpuPromotion: PromotionPolicy | undefined;
  /** Storage faults injected by CASCADE_FAILPOINTS (tests), shown in stats. */
  private faults: FaultyDiskIo | undefined;
  /** Blocks held in the GPU tier for IPC readers (count per block): not evicted meanwhile. */
  private readonly gpuHolds = new Map<string, number>();

  private constructor(
    readonly dram: Tier,
    readonly disk: Tier,
    readonly meta: MetaEngine,
    private readonly config: StoreConfig,
    nodeToken?: string,
    gpu?: GpuTier | string,
  ) {
    if (gpu instanceof GpuTier) {
      this.gpu = gpu;
      this.gpuEviction = new LruEviction(Math.max(1024, Math.min(LRU_MAX_ENTRIES, Math.ceil(gpu.capacityBytes / gpu.slotBytes))));
      this.gpuPromotion = new ThresholdPromotion(config.gpu?.promoteAfterReads ?? GPU_PROMOTE_AFTER_READS_DEFAULT);
    } else {
      this.gpuOffReason = gpu ?? 'off (mount with --gpu SIZE to use it)';
    }
    this.nodeToken = nodeToken ?? '';
    this.keepVersions = config.keepVersions ?? KEEP_VERSIONS_DEFAULT;
    this.maxBlockBytes = config.maxBlockBytes ?? BLOCK_MAX_BYTES_DEFAULT;
    this.pinQuotaBytes = config.pinQuotaBytes ?? Math.floor(dram.capacityBytes * PIN_QUOTA_FRACTION_DEFAULT);
    const marks = config.dramWatermarks ?? DRAM_WATERMARKS_DEFAULT;
    this.lowWatermarkBytes = Math.floor(dram.capacityBytes * marks.low);
    this.highWatermarkBytes = Math.floor(dram.capacityBytes * marks.high);
    // As many recency entries as blocks fit in DRAM (a block takes at least one allocation unit).
    const minFootprintBytes = Math.max(dram.footprintBytes(1), LRU_MIN_BLOCK_BYTES);
    this.eviction = new LruEviction(Math.max(1024, Math.min(LRU_MAX_ENTRIES, Math.ceil(dram.capacityBytes / minFootprintBytes))));
    this.promotion = new ThresholdPromotion(config.promoteAfterReads ?? PROMOTE_AFTER_READS_DEFAULT);
    this.mover = new Mover(MOVER_QUEUE_MAX_JOBS, MOVER_QUEUE_MAX_BYTES, (e, job) =>
      this.warn(`promotion of ${job.key} failed: ${String(e)}`),
    );
    // Here, not where the tier is opened: a tier handed in (config.tiers) must not lose its blocks unheard.
    disk.subscribe?.({
      moved: (keys) => this.republish(keys),
      lost: (keys) => this.requeueLost(new DiskSyncError(keys, new Error('fdatasync failed during compaction'))),
    });
  }

  static async open(config: StoreConfig): Promise<Store> {
    validateConfig(config);
    const cluster = config.cluster;
    const diskDir = cluster ? path.join(cluster.sharedDir, 'nodes', cluster.node) : config.dataDir;
    // Blocks lie there in the clear, whatever their files' modes: only the daemon's user may enter
    // what Cascade creates (a directory that exists keeps its mode).
    mkdirAll(diskDir, 0o700);
    const opened: { close(): Promise<void> }[] = [];
    let store: Store | undefined;
    try {
      const meta = config.metaEngine ?? (config.meta === 'memory' ? new MemoryMeta() : openSqliteOwned(config.dataDir, config.metaGroupCommitMs));
      opened.push(meta);
      const token = `${os.hostname()}:${process.pid}:${crypto.randomBytes(6).toString('hex')}`;
      // Two daemons with one node name would append to one set of segments: the second is refused,
      // unless the holder is a process of this host that no longer runs (a daemon killed with -9).
      if (cluster && !(await cluster.directory.joinNode(cluster.node, token, NODE_LEASE_MS, await deadHolder(cluster.directory, cluster.node)))) {
        const holder = await cluster.directory.nodeHolder(cluster.node);
        throw new CascadeError('EBUSY', `node name ${cluster.node} is in use by another running daemon of this cluster (${holder ?? 'lease just expired'}); pick another --node`);
      }
      if (cluster) opened.push({ close: () => cluster.directory.leaveNode(cluster.node, token) });
      const dram =
        config.tiers?.dram ??
        (await openDram(config));
      opened.push(dram);
      // Tests inject storage faults under a real daemon this way (store/faults.ts); said loudly.
      const faults = config.tiers?.disk ? undefined : failpointsFromEnv(realDiskIo);
      if (faults) (config.log ?? ((m: string) => process.stderr.write(`cascade: ${m}\n`)))(`FAULT INJECTION ON (CASCADE_FAILPOINTS=${process.env.CASCADE_FAILPOINTS})`);
      const disk =
        config.tiers?.disk ??
        (await DiskSegmentTier.open({
          dir: diskDir,
          capacityBytes: config.diskCapacityBytes,
          directWrites: config.diskPageCache !== true,
          segmentTargetBytes: config.segmentTargetBytes,
          io: faults,
        }));
      opened.push(disk);
      const gpu = openGpu(config);
      if (gpu instanceof GpuTier) opened.push(gpu);
      else if (config.gpu) (config.log ?? ((m: string) => process.stderr.write(`cascade: ${m}\n`)))(`GPU tier off: ${gpu}`);
      if (dram instanceof NativeArenaTier) dram.setStrictVerify(config.verify === 'sha256');
      store = new Store(dram, disk, meta, config, token, gpu);
      store.faults = faults;
      if (cluster && cluster.remote !== false && dram instanceof NativeArenaTier && dram.capacityBytes > 0) {
        const s = store;
        try {
          s.remote = RemoteDram.open(dram, cluster.node, cluster.directory, cluster.remote ?? {}, (m) => s.warn(m));
        } catch (e) {
          if (cluster.remote?.provider !== undefined) throw e; // asked for by name: an error
          s.warn(`no remote DRAM tier (reads of other nodes' blocks use the shared tier): ${(e as Error).message}`);
        }
        if (s.remote) opened.splice(opened.indexOf(dram) + 1, 0, s.remote); // closed before the arena
      }
      if (cluster) {
        const s = store;
        s.stopWatching = await cluster.directory.watchChanges({ change: (c) => s.changedElsewhere(c), reset: () => s.changesMissed() });
        if (s.stopWatching) opened.push({ close: () => s.stopWatching!() });
      }
      await store.reconcile();
      store.startHeartbeat();
      await store.startSnapshots();
      return store;
    } catch (e) {
      for (const o of opened.reverse()) await o.close().catch(() => undefined);
      throw withFsckHint(e, config.dataDir);
    }
  }

  /**
   * Hear of every change other nodes make to names and directories (cluster mode), as Redis applies
   * it, and `reset` when some may have been missed. Returns a function that stops it.
   */
  watchNames(listener: ChangeListener): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  /** Whether watchNames() hears other nodes' changes (a cluster node whose watch is running). */
  get namesWatched(): boolean {
    return this.stopWatching !== undefined;
  }

  private changedElsewhere(c: NameChange): void {
    this.lastKnown.delete(c.name);
    if (c.kind === 'renamed') this.lastKnown.delete(c.to);
    this.tellListeners((l) => l.change(c));
  }

  private changesMissed(): void {
    this.warn('the watch of other nodes\' changes reconnected: cached names are dropped');
    this.lastKnown.clear();
    this.tellListeners((l) => l.reset());
  }

  private tellListeners(f: (l: ChangeListener) => void): void {
    for (const l of this.changeListeners) {
      try {
        f(l);
      } catch (e) {
        this.warn(`a listener of name changes failed: ${String(e)}`);
      }
    }
  }

  /** Whether other nodes share this store's namespace (cluster mode). */
  get clustered(): boolean {
    return this.config.cluster !== undefined;
  }

  /** Where this node's data lies: the data directory, or in a cluster its directory on the shared tier. */
  get dataDir(): string {
    const c = this.config.cluster;
    if (c) return path.join(c.sharedDir, 'nodes', c.node);
    return this.config.dataDir;
  }

  // ---- writes -------------------------------------------------------------------------------------

  /**
   * Commit `data` as a new version of `name`. After it returns the bytes are in memory and queued for disk.
   * `knownSha256` is for a caller that hashed the exact bytes as they arrived (fs/ hashes sequential writes
   * incrementally); it is trusted, so that the bytes are not hashed twice. `ino` names the file the
   * version belongs to (MetaEngine.commit): fs/ passes it; left out, a rewrite keeps the name's.
   */
  async put(name: string, data: Uint8Array, knownSha256?: string, ino?: number): Promise<VersionRecord> {
    this.checkOpen();
    validateName(name);
    if (!(data instanceof Uint8Array)) throw new CascadeError('EINVAL', 'data must be a Buffer or Uint8Array');
    if (data.length > this.maxBlockBytes) {
      throw new CascadeError('EINVAL', `block of ${data.length} bytes is over the ${this.maxBlockBytes}-byte limit`);
    }
    const sha = knownSha256 === undefined ? await sha256Hex(data) : validateSha256(knownSha256);
    return this.commitContent(name, sha, data.length, ino, () => this.ingest(sha, data));
  }

  /**
   * Commit a block the native FUSE engine staged and hashed in the DRAM arena (a sealed stage) as a new
   * version of `name`, without copying it: the DRAM tier takes the arena block itself. `owner.taken`
   * says whether the store took the handle (also when this throws afterwards); when it stays false the
   * caller still owns the handle and frees it (freeSealed) or reads it (readSealed).
   */
  async putSealed(name: string, block: { handle: number; sizeBytes: number; sha256: string }, ino: number | undefined, owner: { taken: boolean }): Promise<VersionRecord> {
    this.checkOpen();
    validateName(name);
    const sha = validateSha256(block.sha256);
    const size = block.sizeBytes;
    if (!Number.isSafeInteger(size) || size < 0 || size > this.maxBlockBytes) {
      throw new CascadeError('EINVAL', `block of ${size} bytes is over the ${this.maxBlockBytes}-byte limit`);
    }
    const dram = this.dram;
    return this.commitContent(name, sha, size, ino, async () => {
      if (dram instanceof NativeArenaTier) {
        this.checkDiskRoom(size);
        if (this.config.cluster && dram.adoptBlock(sha, block.handle, size)) {
          // The stage becomes the DRAM copy (no copy), dirty until it is in the segments: other nodes
          // read it there once it is committed, so it is written out now, from DRAM, before the commit.
          owner.taken = true;
          this.admit(sha);
          this.markDirty(sha, size);
          await this.flushLocked(sha);
          this.evictAhead();
          return;
        }
        if (!this.config.cluster && dram.adoptBlock(sha, block.handle, size)) {
          owner.taken = true;
          this.admit(sha);
          this.markDirty(sha, size);
          this.kickFlusher();
          this.evictAhead();
          return;
        }
      }
      // The tier had the content already: a copy.
      const data = allocLarge(size);
      this.readSealed(block, data);
      await this.ingest(sha, data);
    });
  }

  /** Copy a sealed stage's bytes into `target` (its size at least). */
  readSealed(block: { handle: number; sizeBytes: number }, target: Uint8Array): void {
    this.checkOpen();
    const dram = this.dram;
    if (!(dram instanceof NativeArenaTier)) throw new CascadeError('EOPNOTSUPP', 'no native arena');
    const n = dram.readHandle(block.handle, target.subarray(0, block.sizeBytes));
    if (n !== block.sizeBytes) throw new CascadeError('EIO', `sealed block: ${n} of ${block.sizeBytes} bytes read`);
  }

  /** Free a sealed stage the store did not take. */
  freeSealed(block: { handle: number }): void {
    if (this.dram instanceof NativeArenaTier) this.dram.freeHandle(block.handle);
  }

  /**
   * The DRAM arena's native binding, for the native FUSE engine's write stages and native opens;
   * undefined when the DRAM tier is not the native arena.
   */
  dramArena(): NativeArenaBinding | undefined {
    this.checkOpen();
    if (!(this.dram instanceof NativeArenaTier)) return undefined;
    return this.dram.arenaBinding();
  }

  /** Make `name` a new version with already-stored content `sha256`, with no data transfer. */
  async link(name: string, sha256: string, ino?: number): Promise<VersionRecord> {
    this.checkOpen();
    validateName(name);
    validateSha256(sha256);
    // In a cluster, content any node stores can be linked (the commit checks it is still stored).
    const size = this.residentSize(sha256) ?? (this.config.cluster ? (await this.meta.block(sha256))?.sizeBytes : undefined);
    if (size === undefined) throw new CascadeError('ENOENT', `no stored content ${sha256}`);
    return this.commitContent(name, sha256, size, ino, async () => {
      // Only in DRAM (a cluster node's cached copy of another node's block): store it here first.
      const data = Buffer.allocUnsafe(size);
      if (!this.dram.has(sha256) || (await this.dram.read(sha256, 0, data)) !== size) {
        throw new CascadeError('ENOENT', `content ${sha256} was reclaimed`);
      }
      await this.ingest(sha256, data);
    });
  }

  /** Reserve `count` inode numbers never handed out before (MetaEngine.allocateInodes). */
  async allocateInodes(count: number): Promise<number> {
    this.checkOpen();
    return this.meta.allocateInodes(count);
  }

  /** Remove a name and its versions. EPERM while its current content is pinned. */
  async delete(name: string): Promise<void> {
    this.checkOpen();
    validateName(name);
    const cur = await this.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    // In a cluster another node may have pinned it: ask the shared metadata, not this node's memory.
    const pinned = this.config.cluster ? (await this.meta.block(cur.sha256))?.pinned === true : this.pinned.has(cur.sha256);
    if (pinned) throw new CascadeError('EPERM', `${name} is pinned; unpin it first`);
    const { released } = await this.meta.remove(name);
    this.lastKnown.delete(name);
    await this.reclaim(released);
  }

  /** Atomically make `from`'s current content the newest version of `to` and remove `from`. */
  async rename(from: string, to: string): Promise<VersionRecord> {
    this.checkOpen();
    validateName(from);
    validateName(to);
    const { version, released } = await this.meta.rename(from, to, this.now(), this.keepVersions);
    this.lastKnown.delete(from);
    if (this.config.cluster) this.lastKnown.set(to, version);
    await this.reclaim(released);
    return version;
  }

  /**
   * Return only when the name's current content and metadata are durable: the block is written and
   * fdatasynced, then the metadata committed durably.
   */
  async sync(name: string): Promise<VersionRecord> {
    this.checkOpen();
    validateName(name);
    const cur = await this.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    // In a cluster, content this node never stored (committed by another node, then renamed or linked
    // here) is that node's to make durable.
    const own = !this.config.cluster || this.disk.has(cur.sha256) || this.dirty.has(cur.sha256);
    if (own) {
      await this.makeDurable([cur.sha256]);
      if (!this.disk.has(cur.sha256)) throw new CascadeError('EIO', `content of ${name} was lost by a failed fdatasync`);
    }
    await this.meta.sync();
    return cur;
  }

  /** Everything durable: all dirty blocks written, disk synced, metadata synced. */
  async syncAll(): Promise<void> {
    this.checkOpen();
    await this.makeDurable([...this.dirty.keys(), ...this.unsynced]);
    await this.meta.sync();
  }

  /**
   * Whether a new block of this size could be stored now (fs/ checks at close() so that the error reaches
   * the writer; the commit itself happens at the last release). Throws ENOSPC or EFBIG when it could not.
   */
  checkAdmission(sizeBytes: number): void {
    this.checkOpen();
    if (sizeBytes > this.maxBlockBytes) throw new CascadeError('EFBIG', `${sizeBytes} bytes is over the ${this.maxBlockBytes}-byte block limit`);
    this.checkDiskRoom(sizeBytes);
  }

  /** Accept only what can reach disk: the disk must hold this block on top of everything still dirty. */
  private checkDiskRoom(sizeBytes: number): void {
    const diskNeed = this.disk.footprintBytes(sizeBytes) + this.dirtyDiskBytes;
    if (diskNeed > this.disk.freeBytes()) {
      throw new CascadeError('ENOSPC', `disk tier has ${this.disk.freeBytes()} bytes free, ${diskNeed} needed`);
    }
  }

  /**
   * Keep a version's content readable while a reader holds it, even if the version is trimmed, replaced or
   * deleted meanwhile (an open handle keeps reading the version it opened). Returns the release function.
   */
  lease(v: VersionRecord): () => void {
    this.checkOpen();
    const sha = v.sha256;
    this.leases.set(sha, (this.leases.get(sha) ?? 0) + 1);
    const c = this.config.cluster;
    if (c && !this.dram.has(sha) && !this.disk.has(sha) && !this.placements.has(sha)) {
      // Off the open's path: where to read it from, so the handle does not depend on Redis later.
      c.directory.locate(sha).then(
        (places) => places.length > 0 && this.placements.set(sha, places),
        () => undefined, // the first read looks it up again, and reports the failure
      );
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.leases.get(sha) ?? 1) - 1;
      if (n > 0) {
        this.leases.set(sha, n);
        return;
      }
      this.leases.delete(sha);
      if (this.deferredReclaim.delete(sha) && !this.closed && !this.closing) {
        void this.reclaim([sha]).catch((e) => this.warn(`reclaim of ${sha} failed: ${String(e)}`));
      }
    };
  }

  /**
   * Keep a version's content in the DRAM tier (loading it from disk, verified, when needed) until
   * release(): it is neither evicted nor reclaimed meanwhile, so its extents stay valid. For same-node
   * clients that read the shared arena directly. Only a mapped DRAM tier (the native arena) has extents;
   * with another tier this throws EOPNOTSUPP.
   * onLoading: called with the arena handle when the block is loaded from this node's disk by the
   * native fill, or streamed from a peer's DRAM, before the load ends (FuseSession.setLoadingReadSource
   * serves its pieces as they pass their CRC-32C).
   */
  async holdInDram(v: VersionRecord, onLoading?: (handle: number) => void): Promise<DramHold> {
    this.checkOpen();
    const dram = this.dram;
    if (!isMappedTier(dram)) throw new CascadeError('EOPNOTSUPP', 'the DRAM tier is not a shared mapping (native addon off?)');
    const sha = v.sha256;
    const releaseLease = this.lease(v);
    try {
      const held = await this.locks.with(sha, async () => {
        for (let attempt = 0; ; attempt++) {
          await this.ensureInDram(sha, v.sizeBytes, true, true, onLoading);
          // Background eviction may run between ensureInDram's return and here: check, then hold
          // with nothing awaited in between.
          const e = dram.extentsOf(sha);
          if (e === undefined) {
            if (attempt < HOLD_ATTEMPTS_MAX) continue;
            throw new CascadeError('EIO', `content ${sha} keeps leaving DRAM before it can be held (DRAM too small for the readers?)`);
          }
          assert(e.sizeBytes === v.sizeBytes, 'held content is in DRAM with its size');
          this.dramHolds.set(sha, (this.dramHolds.get(sha) ?? 0) + 1);
          return { extents: e.extents, arenaHandle: this.dramHandleOf(sha) };
        }
      });
      let released = false;
      return {
        version: v,
        ...held,
        release: () => {
          if (released) return;
          released = true;
          const n = (this.dramHolds.get(sha) ?? 1) - 1;
          if (n > 0) this.dramHolds.set(sha, n);
          else this.dramHolds.delete(sha);
          if (n <= 0 && this.borrowed.has(sha)) this.dropBorrowed(sha);
          releaseLease();
        },
      };
    } catch (e) {
      releaseLease();
      throw e;
    }
  }

  /**
   * The native arena handle of content in DRAM now, or undefined (not resident, or no native arena).
   * The native engine opens files by it without asking the store; the handle's generation makes a
   * block evicted meanwhile stale there, so such an open comes back here instead.
   */
  dramHandleOf(sha256: string): number | undefined {
    this.checkOpen();
    return this.dram instanceof NativeArenaTier ? this.dram.handleOf(sha256) : undefined;
  }

  /** Blocks the native engine opened by arena handle: DRAM hits, and recent uses for eviction. */
  noteDramOpens(handles: readonly number[]): void {
    if (this.closed || !(this.dram instanceof NativeArenaTier)) return;
    for (const h of handles) {
      this.counters.hits.dram++; // served from DRAM, whatever happened to the block since
      const sha = this.dram.keyOfHandle(h);
      if (sha === undefined) continue; // evicted since: no recency to keep
      this.eviction.accessed(sha);
      const size = this.dram.sizeOf(sha);
      if (size !== undefined) this.noteGpuRead(sha, size, 0);
    }
  }

  /** The DRAM tier's shared mapping, when it has one (see holdInDram). */
  dramRegion(): { address: bigint; lengthBytes: number; fd: number } | undefined {
    this.checkOpen();
    return isMappedTier(this.dram) ? this.dram.region() : undefined;
  }

  isPinned(sha256: string): boolean {
    return this.pinned.has(sha256);
  }

  // ---- pins ---------------------------------------------------------------------------------------

  /** Pin the current content of `name` in DRAM. EDQUOT past the pin quota. */
  async pin(name: string): Promise<void> {
    this.checkOpen();
    validateName(name);
    const cur = await this.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    await this.locks.with(cur.sha256, async () => {
      if (this.pinned.has(cur.sha256)) return;
      if (this.pinnedBytes + cur.sizeBytes > this.pinQuotaBytes) {
        throw new CascadeError(
          'EDQUOT',
          `pinning ${cur.sizeBytes} bytes would exceed the pin quota (${this.pinnedBytes} of ${this.pinQuotaBytes} bytes pinned)`,
        );
      }
      await this.ensureInDram(cur.sha256, cur.sizeBytes);
      await this.meta.setPinned(cur.sha256, true);
      this.pinLocally(cur.sha256, cur.sizeBytes);
      // Evicted while the pin was being recorded (background eviction): load it again, for good now.
      if (!this.dram.has(cur.sha256)) await this.ensureInDram(cur.sha256, cur.sizeBytes);
    });
    this.offerGpu(cur.sha256, cur.sizeBytes); // pinned prefixes are the GPU tier's first choice
    // A pinned prefix keeps a second DRAM copy on another node, so losing one node loses no pin.
    if (this.config.cluster) this.askReplica(cur.sha256).catch((e: unknown) => this.warn(`asking for a replica of pinned ${cur.sha256}: ${String(e)}`));
  }

  async unpin(name: string): Promise<void> {
    this.checkOpen();
    validateName(name);
    const cur = await this.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    await this.locks.with(cur.sha256, async () => {
      const size = this.pinned.get(cur.sha256);
      // In a cluster the pin may be another node's: the shared row is what counts.
      if (size === undefined) {
        if (this.config.cluster && (await this.meta.block(cur.sha256))?.pinned === true) await this.meta.setPinned(cur.sha256, false);
        return;
      }
      await this.meta.setPinned(cur.sha256, false);
      this.unpinLocally(cur.sha256);
    });
  }

  /**
   * Names whose current content is pinned, in name order, at most `maxNames` of them (`total` counts
   * all). Pins are kept by content, and the metadata has no index from content to the names whose
   * current version it is, so this reads every name's current version: about 8 us a name with SQLite
   * (0.8 s for 100k names), yielding to other work between pages. With nothing pinned it reads nothing.
   */
  async pinnedNames(maxNames: number): Promise<{ names: PinnedName[]; total: number }> {
    this.checkOpen();
    const names: PinnedName[] = [];
    let total = 0;
    if (this.pinned.size === 0) return { names, total };
    for (let after: string | undefined; ; ) {
      const page = await this.meta.list('', { after, limit: PINNED_NAMES_PAGE });
      for (const name of page) {
        const v = await this.meta.current(name);
        if (v === undefined || !this.pinned.has(v.sha256)) continue; // removed meanwhile, or not pinned
        total++;
        if (names.length < maxNames) names.push({ name, sha256: v.sha256, sizeBytes: v.sizeBytes });
      }
      if (page.length < PINNED_NAMES_PAGE || this.closing) break;
      after = page[page.length - 1];
      await new Promise<void>((r) => setImmediate(r)); // let requests in between pages
    }
    return { names, total };
  }

  /**
   * Drop the current content of `name` from DRAM; it stays on disk (written down first when it was
   * not yet durable), and the next read loads it again. Returns false when it was not in DRAM.
   * EPERM while pinned (unpin first); EBUSY while a reader holds it in DRAM (a file open on the native
   * engine, a same-node client of the arena): their reads use its memory directly, which must not be
   * freed under them. Readers that go through read() lose nothing: they fall back to disk.
   */
  async evictFromDram(name: string): Promise<boolean> {
    this.checkOpen();
    validateName(name);
    const v = await this.resolve(name);
    const sha = v.sha256;
    const pinnedError = () => new CascadeError('EPERM', `${name} is pinned; unpin it first`);
    if (this.pinned.has(sha)) throw pinnedError();
    // Outside the block's lock: flushing takes its own.
    if (this.dirty.has(sha) || this.unsynced.has(sha)) await this.makeDurable([sha]);
    // Under the block's lock, as pin() loads it: a concurrent pin either sees it evicted and loads it
    // again, or pins it first and this refuses.
    return this.locks.with(sha, async () => {
      if (!this.dram.has(sha)) return false;
      if (this.pinned.has(sha)) throw pinnedError();
      const holds = this.dramHolds.get(sha);
      if (holds !== undefined) throw new CascadeError('EBUSY', `${name} is held in DRAM by ${holds} open reader(s) that read its memory directly; close them first`);
      // Dirty again already (written meanwhile), or in a cluster a copy borrowed from another node's
      // DRAM, which goes by itself a second after its last read.
      if (!this.evictable(sha)) throw new CascadeError('EBUSY', `${name} has no durable copy outside this node's DRAM right now; try again in a second`);
      await this.evict(sha);
      return true;
    });
  }

  /** Cluster: ask one other live node (one that holds the content in DRAM already, if any) to pin a copy. */
  private async askReplica(sha: string): Promise<void> {
    const c = this.config.cluster!;
    const live = (await c.directory.liveNodes()).filter((n) => n !== c.node);
    if (live.length === 0) return; // a one-node cluster: one copy is all there can be
    const holders = new Set(await c.directory.dramHolders(sha));
    const warm = live.filter((n) => holders.has(n));
    const pool = warm.length > 0 ? warm : live;
    await c.directory.requestReplica(pool[Math.floor(Math.random() * pool.length)], sha);
  }

  /** Cluster, each heartbeat: pin the copies other nodes asked for; let go of those no longer pinned. */
  private async tendReplicas(): Promise<void> {
    const c = this.config.cluster!;
    for (const sha of await c.directory.takeReplicaRequests(c.node, REPLICA_BATCH)) {
      const row = await this.meta.block(sha);
      if (row?.pinned !== true || this.closing) continue;
      await this.locks.with(sha, async () => {
        if (this.pinned.has(sha)) return;
        if (this.pinnedBytes + row.sizeBytes > this.pinQuotaBytes) {
          this.warn(`no replica of pinned ${sha} here: ${row.sizeBytes} bytes would exceed this node's pin quota (${this.pinnedBytes} of ${this.pinQuotaBytes})`);
          return;
        }
        this.pinLocally(sha, row.sizeBytes); // first: a pinned block is never a victim while it loads
        this.replicas.add(sha);
        try {
          await this.ensureInDram(sha, row.sizeBytes);
        } catch (e) {
          this.unpinLocally(sha);
          throw e;
        }
      });
    }
    for (const sha of [...this.replicas]) {
      const row = await this.meta.block(sha);
      if (row?.pinned === true) continue;
      await this.locks.with(sha, async () => {
        if (this.replicas.has(sha)) this.unpinLocally(sha);
      });
    }
  }

  // ---- reads --------------------------------------------------------------------------------------

  async resolve(name: string, which: VersionSelector = {}): Promise<VersionRecord> {
    this.checkOpen();
    validateName(name);
    let v: VersionRecord | undefined;
    if (which.version !== undefined) {
      if (!Number.isSafeInteger(which.version) || which.version < 1) throw new CascadeError('EINVAL', 'version must be an integer >= 1');
      v = await this.meta.version(name, which.version);
    } else if (which.atMs !== undefined) {
      if (!Number.isFinite(which.atMs)) throw new CascadeError('EINVAL', 'atMs must be a finite number');
      v = await this.meta.versionAt(name, which.atMs);
    } else {
      v = await this.currentVersion(name);
    }
    if (!v) throw new CascadeError('ENOENT', `no such ${which.version !== undefined || which.atMs !== undefined ? 'version of ' : ''}name: ${name}`);
    return v;
  }

  /**
   * The current version of a name. In a cluster, while Redis cannot be reached, the version this node
   * last saw (read or committed here) when its content is on this node: local reads keep working; a
   * name this node never saw, or whose content it lacks, fails with EIO as before.
   */
  private async currentVersion(name: string): Promise<VersionRecord | undefined> {
    const c = this.config.cluster;
    if (!c) return this.meta.current(name);
    try {
      let v: VersionRecord | undefined;
      if (this.remote) {
        // The holders of its content come in the same round trip: a read of content this node lacks
        // then fetches it from a peer's DRAM without asking Redis again.
        const r = await c.directory.currentWithHolders(name);
        v = r.version;
        if (v && !this.dram.has(v.sha256)) this.remote.noteHolders(v.sha256, r.dramHolders);
      } else {
        v = await this.meta.current(name);
      }
      if (v) this.lastKnown.set(name, v);
      else this.lastKnown.delete(name);
      return v;
    } catch (e) {
      return this.offlineVersion(name, e);
    }
  }

  /** Redis away (EIO): the version this node last saw of `name`, when its content is here; else `e`. */
  private offlineVersion(name: string, e: unknown): VersionRecord {
    const known = isCascadeError(e, 'EIO') ? this.lastKnown.get(name) : undefined;
    if (known === undefined || (!this.dram.has(known.sha256) && !this.disk.has(known.sha256))) throw e;
    this.counters.offlineResolves++;
    return known;
  }

  /**
   * What `name` (a path below kv/) is now: a file with its current version, a directory (with the
   * mode mkdir gave it, when it was made so), or neither. One round trip in a cluster; while Redis
   * cannot be reached, a name this node last saw as a file with its content here, as currentVersion.
   */
  async lookup(name: string): Promise<{ version?: VersionRecord; dir: boolean; dirMode?: number }> {
    this.checkOpen();
    validateDirName(name);
    const c = this.config.cluster;
    if (!c) {
      const version = await this.meta.current(name);
      if (version) return { version, dir: false };
      const dirMode = await this.meta.dirMode(name);
      const dir = dirMode !== undefined || (await this.meta.list(`${name}/`, { limit: 1 })).length > 0;
      return { dir, dirMode };
    }
    try {
      const r = await c.directory.lookupName(name);
      if (r.version) {
        this.lastKnown.set(name, r.version);
        if (this.remote && !this.dram.has(r.version.sha256)) this.remote.noteHolders(r.version.sha256, r.dramHolders);
      } else {
        this.lastKnown.delete(name);
      }
      return { version: r.version, dir: r.dir, dirMode: r.dirMode };
    } catch (e) {
      return { version: this.offlineVersion(name, e), dir: false };
    }
  }

  async stat(name: string, which: VersionSelector = {}): Promise<BlockInfo> {
    const v = await this.resolve(name, which);
    let tier = this.tierOf(v.sha256);
    const c = this.config.cluster;
    if (c && this.remote && !this.dram.has(v.sha256) && !this.disk.has(v.sha256)) {
      // Not here: in a peer's DRAM (where a read would fetch it from), else on the shared tier.
      const holders = await c.directory.dramHolders(v.sha256).catch(() => []);
      if (holders.some((n) => n !== c.node)) tier = 'remote';
    }
    return { ...v, tier, pinned: this.pinned.has(v.sha256) };
  }

  async versions(name: string): Promise<VersionRecord[]> {
    this.checkOpen();
    validateName(name);
    return this.meta.versions(name);
  }

  /** Keep a name's permission bits (chmod) in the metadata: they survive restarts. ENOENT without the name. */
  async setMode(name: string, mode: number): Promise<void> {
    this.checkOpen();
    validateName(name);
    await this.meta.setMode(name, mode);
  }

  /** Names with a mode kept by setMode(), paged as list() is. */
  async modes(options: { after?: string; limit?: number } = {}): Promise<Array<[string, number]>> {
    this.checkOpen();
    return this.meta.modes({ after: options.after, limit: Math.min(options.limit ?? LIST_PAGE_MAX, LIST_PAGE_MAX) });
  }

  /** Keep a directory made by mkdir (and its mode) in the metadata: it survives restarts, every node sees it. */
  async makeDir(name: string, mode: number): Promise<void> {
    this.checkOpen();
    validateDirName(name);
    await this.meta.makeDir(name, mode);
  }

  async removeDir(name: string): Promise<void> {
    this.checkOpen();
    validateDirName(name);
    await this.meta.removeDir(name);
  }

  /** The mode of a directory kept by makeDir(), or undefined. */
  async dirMode(name: string): Promise<number | undefined> {
    this.checkOpen();
    validateDirName(name);
    return this.meta.dirMode(name);
  }

  /** Directories kept by makeDir() under a prefix, with their modes, paged as list() is. */
  async dirs(prefix: string, options: { after?: string; limit?: number } = {}): Promise<Array<[string, number]>> {
    this.checkOpen();
    return this.meta.dirs(prefix, { after: options.after, limit: Math.min(options.limit ?? LIST_PAGE_MAX, LIST_PAGE_MAX) });
  }

  /** Names under a prefix (e.g. `model/dir/`), paged. */
  async list(prefix: string, options: { after?: string; limit?: number } = {}): Promise<string[]> {
    this.checkOpen();
    const limit = Math.min(options.limit ?? LIST_PAGE_MAX, LIST_PAGE_MAX);
    return this.meta.list(prefix, { after: options.after, limit });
  }

  /** The whole block (a copy the caller owns). */
  async get(name: string, which: VersionSelector = {}): Promise<Buffer> {
    const v = await this.resolve(name, which);
    const out = Buffer.allocUnsafe(v.sizeBytes);
    const n = await this.readBlock(v.sha256, v.sizeBytes, 0, out);
    assert(n === v.sizeBytes, 'whole-block read fills the block');
    return out;
  }

  /** Fill `target` from `offsetBytes` of a version's content; returns the bytes filled (0 at or past the end). */
  async read(name: string, offsetBytes: number, target: Uint8Array, which: VersionSelector = {}): Promise<number> {
    const v = await this.resolve(name, which);
    return this.readContent(v, offsetBytes, target);
  }

  /** Read from a resolved version (fs/ keeps the version an open handle saw). */
  async readContent(v: VersionRecord, offsetBytes: number, target: Uint8Array): Promise<number> {
    this.checkOpen();
    if (!Number.isSafeInteger(offsetBytes) || offsetBytes < 0) throw new CascadeError('EINVAL', 'offset must be a non-negative integer');
    return this.readBlock(v.sha256, v.sizeBytes, offsetBytes, target);
  }

  /** Load a name's current content into DRAM (no-op when it is there). */
  async warmup(name: string): Promise<void> {
    const v = await this.resolve(name);
    await this.locks.with(v.sha256, () => this.ensureInDram(v.sha256, v.sizeBytes));
  }

  async stats(): Promise<StoreStats> {
    this.checkOpen();
    const t = await this.meta.totals();
    const disk = this.disk as Partial<DiskSegmentTier>;
    return {
      tiers: this.tierStats(),
      hits: { ...this.counters.hits },
      misses: this.counters.misses,
      evictions: this.counters.evictions,
      evictionsAhead: this.counters.evictionsAhead,
      promotions: this.counters.promotions,
      promotionsRefused: this.mover.refused,
      demotions: this.counters.demotions,
      flushedBlocks: this.counters.flushedBlocks,
      dirtyBlocks: this.dirty.size,
      dedup: {
        hits: this.counters.dedupHits,
        savedBytes: this.counters.dedupSavedBytes,
        uniqueBytes: t.uniqueBytes,
        logicalBytes: t.logicalBytes,
      },
      pinned: { blocks: this.pinned.size, bytes: this.pinnedBytes, quotaBytes: this.pinQuotaBytes },
      names: t.names,
      versions: t.versions,
      recovery: {
        lostVersions: this.counters.lostVersions,
        orphanBlocksRemoved: this.counters.orphanBlocksRemoved,
        quarantined: disk.recovery?.quarantined ?? 0,
        journalReplayed: this.meta instanceof SqliteMeta ? this.meta.replayedAtOpen : 0,
      },
      diskSyncFailures: this.counters.diskSyncFailures,
      diskAppends: disk.appendedBytes?.() ?? { directBytes: 0, bufferedBytes: 0 },
      gpu: this.gpuFigures(),
      faultsInjected: this.faults ? { ...this.faults.injected } : undefined,
      cluster: this.config.cluster
        ? {
            node: this.config.cluster.node,
            sharedLoads: this.counters.sharedLoads,
            sharedLoadBytes: this.counters.sharedLoadBytes,
            offlineResolves: this.counters.offlineResolves,
            remote: this.remote?.stats(),
            nodes: await this.config.cluster.directory.nodeStats(),
          }
        : undefined,
    };
  }

  /** The whole block from the GPU tier, or undefined when it left meanwhile. */
  private async gpuCopy(sha: string, sizeBytes: number): Promise<Buffer | undefined> {
    const buf = Buffer.allocUnsafe(sizeBytes);
    try {
      return (await this.gpu!.read(sha, 0, buf)) === sizeBytes ? buf : undefined;
    } catch (e) {
      if (isCascadeError(e, 'ENOENT')) return undefined;
      throw e;
    }
  }

  private tierStats(): TierStats[] {
    return this.gpu ? [this.gpu.stats(), this.dram.stats(), this.disk.stats()] : [this.dram.stats(), this.disk.stats()];
  }

  private gpuFigures(): GpuFigures {
    const g = this.gpu;
    if (!g) return { available: false, reason: this.gpuOffReason, capacityBytes: 0, usedBytes: 0, blocks: 0, leases: 0, promotions: 0, evictions: 0, demotions: 0 };
    const t = g.stats();
    return {
      available: true,
      device: g.device.describe(),
      capacityBytes: t.capacityBytes,
      usedBytes: t.usedBytes,
      blocks: t.blocks,
      leases: [...this.gpuHolds.values()].reduce((a, b) => a + b, 0),
      promotions: this.counters.gpuPromotions,
      evictions: this.counters.gpuEvictions,
      demotions: this.counters.gpuDemotions,
    };
  }

  /** This node's figures for the cluster directory. */
  private figures(): NodeFigures {
    return {
      atMs: Date.now(),
      host: os.hostname(),
      pid: process.pid,
      tiers: this.tierStats(),
      hits: { ...this.counters.hits },
      misses: this.counters.misses,
      promotions: this.counters.promotions,
      dedupHits: this.counters.dedupHits,
      pinnedBytes: this.pinnedBytes,
      sharedLoads: this.counters.sharedLoads,
      sharedLoadBytes: this.counters.sharedLoadBytes,
      remote: this.remote?.stats(),
    };
  }

  /** Wait for background work (flusher and mover) to finish; for tests and benchmarks. */
  async idle(): Promise<void> {
    while (this.flusher || this.mover.pending() > 0 || this.evictingAhead) {
      if (this.flusher) await this.flusher;
      await this.mover.idle();
      if (this.evictingAhead) await this.evictingAhead;
    }
  }

  /**
   * Keep free DRAM at the watermarks: below `low`, evict clean blocks (least recent first) in the
   * background until `high` is free. Each pass evicts a bounded number of bytes (small blocks free
   * slots before they free pages) and yields between batches; blocks not yet flushed are left to the
   * flusher, which calls again when it made blocks clean.
   */
  private evictAhead(): void {
    if (this.evictingAhead || this.closing || this.highWatermarkBytes === 0 || this.dram.freeBytes() >= this.lowWatermarkBytes) return;
    this.evictingAhead = (async () => {
      let budget = EVICT_AHEAD_PASS_FACTOR * this.highWatermarkBytes;
      while (!this.closing && budget > 0 && this.dram.freeBytes() < this.highWatermarkBytes) {
        const victims = this.victims(Math.min(this.highWatermarkBytes - this.dram.freeBytes(), EVICT_AHEAD_BATCH_BYTES));
        if (victims.length === 0) break;
        for (const key of victims) {
          if (!this.dram.has(key) || !this.evictable(key)) continue; // changed while we yielded
          budget -= this.dram.footprintBytes(this.dram.sizeOf(key) ?? 0);
          await this.evict(key);
          this.counters.evictionsAhead++;
        }
        await new Promise<void>((r) => setImmediate(r)); // let requests in between batches
      }
    })()
      .catch((e: unknown) => this.warn(`evicting ahead of need: ${String(e)}`))
      .finally(() => (this.evictingAhead = undefined));
  }

  /** Persist everything (a clean close loses nothing) and release the tiers and the metadata engine. */
  async close(): Promise<void> {
    if (this.closed || this.closing) return;
    this.closing = true;
    clearTimeout(this.flushRetry);
    clearInterval(this.heartbeat);
    clearInterval(this.snapshotTimer);
    try {
      await this.mover.idle();
      await this.evictingAhead;
      await this.makeDurable([...this.dirty.keys(), ...this.unsynced]);
      await this.meta.sync();
      await this.snapshotting;
      if (this.config.metaSnapshotOnClose !== false) await this.snapshotMeta(false);
    } finally {
      this.closed = true;
      await this.remote?.close().catch((e: unknown) => this.warn(`closing the remote DRAM tier: ${String(e)}`));
      await this.gpu?.close().catch((e: unknown) => this.warn(`closing the GPU tier: ${String(e)}`));
      await this.dram.close();
      await this.disk.close();
      const c = this.config.cluster;
      if (c) await c.directory.leaveNode(c.node, this.nodeToken).catch((e: unknown) => this.warn(`leaving the cluster: ${String(e)}`));
      await this.stopWatching?.().catch((e: unknown) => this.warn(`stopping the watch of changes: ${String(e)}`));
      await this.meta.close();
    }
  }

  // ---- internals: write path ------------------------------------------------------------------------

  private async commitContent(name: string, sha: string, sizeBytes: number, ino: number | undefined, ingest: () => Promise<void>): Promise<VersionRecord> {
    if (this.leaseLost) throw new CascadeError('EIO', `node ${this.config.cluster?.node}: another daemon holds this node name now; this daemon no longer writes`);
    // Under the content's lock, so reclamation of the same content cannot interleave.
    const result = await this.locks.with(sha, async () => {
      const c = this.config.cluster;
      if (c && !this.disk.has(sha)) {
        // Global dedup: content some node already stores is referenced, not sent again. The check
        // and the new reference are one Redis step, so a concurrent release cannot slip between.
        try {
          const known = await c.directory.commitPlaced(name, sha, sizeBytes, this.now(), this.keepVersions, ino, undefined, true);
          this.counters.dedupHits++;
          this.counters.dedupSavedBytes += sizeBytes;
          return known;
        } catch (e) {
          if (!isCascadeError(e, 'ENOENT')) throw e;
        }
      }
      // In a cluster a commit needs this node's own durable copy (another node's copy, or a DRAM copy
      // of it, may be reclaimed by a concurrent release).
      const stored = c ? this.disk.has(sha) : this.residentSize(sha) !== undefined;
      if (!stored) {
        await ingest();
      } else {
        this.counters.dedupHits++;
        this.counters.dedupSavedBytes += sizeBytes;
      }
      if (!c) return this.meta.commit(name, sha, sizeBytes, this.now(), this.keepVersions, ino);
      // Committed together with where this node holds the content (when it does), so a reader on
      // another node never finds the version without a place to read it.
      // With the remote tier on, the DRAM copy is advertised in the same step: readers fetch it at once.
      const inDram = this.remote !== undefined && this.dram.has(sha) && !this.borrowed.has(sha);
      return c.directory.commitPlaced(name, sha, sizeBytes, this.now(), this.keepVersions, ino, this.placement(sha), false, inDram ? c.node : undefined);
    });
    if (this.config.cluster) this.lastKnown.set(name, result.version);
    await this.reclaim(result.released);
    return result.version;
  }

  /**
   * Cluster: other nodes read a block from this node's segments as soon as it is committed, so it is
   * written there before the commit (fdatasync comes from the flusher, or from fsync).
   */
  private async writeThroughShared(sha: string, data: Uint8Array): Promise<void> {
    await this.disk.write(sha, data).catch((e: unknown) => Promise.reject(this.requeueLost(e)));
    this.unsynced.add(sha);
    this.kickFlusher();
  }

  private async ingest(sha: string, data: Uint8Array): Promise<void> {
    this.checkDiskRoom(data.length);
    if (this.config.cluster) {
      await this.writeThroughShared(sha, data);
      // Then a clean DRAM copy.
      if ((await this.makeRoom(data.length)) && (await this.dramWriteRaced(sha, data))) {
        this.admit(sha);
        this.evictAhead();
      } else {
        this.counters.demotions++;
        await this.durableFromBuffer(sha, data); // no DRAM copy: the caller's buffer is the only other one
      }
      return;
    }
    if ((await this.makeRoom(data.length)) && (await this.dramWriteRaced(sha, data))) {
      this.admit(sha);
      this.markDirty(sha, data.length);
      this.kickFlusher();
      this.evictAhead();
      return;
    }
    // DRAM is full of pinned or not-yet-durable blocks: write through to disk, durably, so nothing is lost.
    this.counters.demotions++;
    await this.durableFromBuffer(sha, data);
  }

  /**
   * Make a block that has no DRAM copy durable before the put returns. A failed fdatasync drops the
   * blocks it could not confirm, and with no DRAM copy to write again from, a put that returned would
   * be lost for good (every later fsync of its name EIO). So the block is written and synced now, and
   * written once more (to a new segment) from the caller's buffer after a failed fdatasync; a second
   * failure fails the put, and the name keeps its previous content. The slow path only: DRAM full of
   * pinned or not-yet-durable blocks.
   */
  private async durableFromBuffer(sha: string, data: Uint8Array): Promise<void> {
    this.writingThrough.set(sha, (this.writingThrough.get(sha) ?? 0) + 1);
    try {
      for (let attempt = 0; ; attempt++) {
        let failed: unknown;
        try {
          if (!this.disk.has(sha)) {
            await this.disk.write(sha, data).catch((e: unknown) => Promise.reject(this.requeueLost(e)));
            this.unsynced.add(sha);
          }
          // Still unsynced after another segment's failed fdatasync: the next sync confirms it at once.
          if (this.unsynced.has(sha)) await this.syncDisk();
        } catch (e) {
          if (!(e instanceof DiskSyncError)) throw e;
          failed = e;
        }
        // Checked after every sync, failed or not: a concurrent one (the flusher's) may have lost it.
        if (this.disk.has(sha) && !this.unsynced.has(sha)) return;
        if (attempt >= 1) throw failed ?? new CascadeError('EIO', `fdatasync failed; block ${sha} was not made durable`);
      }
    } finally {
      const n = this.writingThrough.get(sha)! - 1;
      if (n === 0) this.writingThrough.delete(sha);
      else this.writingThrough.set(sha, n);
    }
  }

  /**
   * dram.write right after makeRoom said yes: false when a concurrent write took the room in between
   * (ENOSPC), so the caller writes through to disk instead of failing the put (seen under 8 writers).
   */
  /**
   * For a block on this node's disk (and not in the GPU tier): a loader that reads it from its segment
   * straight into its DRAM slot, hashing on a worker thread (NativeArenaTier + DiskSegmentTier with the
   * real I/O); undefined where the block must come through a buffer (loadFromDisk).
   */
  private nativeDiskLoad(sha: string, sizeBytes: number, onLoading?: (handle: number) => void): (() => Promise<void>) | undefined {
    const dram = this.dram;
    const disk = this.disk;
    const arena = dram instanceof NativeArenaTier ? dram.arenaBinding() : undefined;
    if (arena === undefined || !(disk instanceof DiskSegmentTier) || !disk.readsWith() || !disk.has(sha) || this.gpu?.has(sha)) return undefined;
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
   * Cluster: a block this node lacks, filled natively from another node's record on the shared tier
   * (Arena::FillRecord: its header checked, each piece published to readers as it passes its CRC-32C,
   * the whole SHA-256 checked before it joins DRAM), as nativeDiskLoad does for this node's own disk.
   * Places are tried in turn: one that moved (compaction) or fails its checks is skipped. undefined
   * where the block must come through a buffer (no arena, GPU copy, this node's own disk).
   */
  private nativeSharedLoad(sha: string, sizeBytes: number, onLoading?: (handle: number) => void): (() => Promise<void>) | undefined {
    const c = this.config.cluster;
    const dram = this.dram;
    const arena = dram instanceof NativeArenaTier ? dram.arenaBinding() : undefined;
    if (c === undefined || arena === undefined || this.disk.has(sha) || this.gpu?.has(sha)) return undefined;
    return async () => {
      const problems: string[] = [];
      for (let attempt = 0; attempt < 2; attempt++) {
        const cached = attempt === 0 ? this.placements.get(sha) : undefined;
        const found = cached ?? (await c.directory.locate(sha));
        if (found.length > 0) this.placements.set(sha, found);
        const places = found.filter((p) => p.sizeBytes === sizeBytes && p.node !== c.node);
        for (const p of places) {
          let fh: fs.promises.FileHandle | undefined;
          try {
            fh = await fs.promises.open(path.join(c.sharedDir, p.file), 'r');
            const fd = fh.fd;
            await (dram as NativeArenaTier).adopt(sha, sizeBytes, async (handle) => {
              const filling = arena.fillRecordAsync(handle, fd, p.offsetBytes, sha, 0); // marks it filling first
              onLoading?.(handle);
              await filling;
              return sha; // the fill checked the bytes' SHA-256
            });
            this.counters.sharedLoads++;
            this.counters.sharedLoadBytes += sizeBytes;
            return;
          } catch (e) {
            // A copy that moved, went or fails its checks (CascadeError, native or fs codes alike).
            const code = (e as { code?: unknown }).code;
            if (code !== 'ESTALE' && code !== 'ECORRUPT' && code !== 'ENOENT' && code !== 'EIO') throw e;
            problems.push(`${p.node}: ${(e as Error).message}`);
          } finally {
            await fh?.close().catch(() => undefined);
          }
        }
        this.placements.delete(sha);
        if (places.length === 0 && cached === undefined) break;
      }
      this.counters.misses++;
      throw new CascadeError('EIO', `content ${sha} has no readable copy on the shared tier${problems.length ? ` (${problems.join('; ')})` : ''}`);
    };
  }

  private async dramWriteRaced(sha: string, data: Uint8Array | (() => Promise<void>)): Promise<boolean> {
    try {
      if (typeof data === 'function') await data();
      else await this.dram.write(sha, data);
      return true;
    } catch (e) {
      if (!isCascadeError(e, 'ENOSPC')) throw e;
      this.counters.dramRaces++;
      return false;
    }
  }

  private markDirty(key: string, sizeBytes: number): void {
    if (this.dirty.has(key)) return;
    this.dirty.set(key, sizeBytes);
    this.dirtyDiskBytes += this.disk.footprintBytes(sizeBytes);
  }

  private clearDirty(key: string): void {
    const size = this.dirty.get(key);
    if (size === undefined) return;
    this.dirty.delete(key);
    this.dirtyDiskBytes -= this.disk.footprintBytes(size);
  }

  /**
   * Evict clean, unpinned blocks until DRAM can take a block of `sizeBytes`; false if it cannot. A tier
   * that packs small blocks (fits()) may have room in a slot of the block's size class without free
   * pages; evicting frees slots and pages, so it asks again after each round (a bounded number).
   */
  private async makeRoom(sizeBytes: number): Promise<boolean> {
    const needBytes = this.dram.footprintBytes(sizeBytes);
    if (needBytes > this.dram.capacityBytes) return false;
    const fits = () => (this.dram.fits ? this.dram.fits(sizeBytes) : this.dram.freeBytes() >= needBytes);
    for (let round = 0; round < MAKE_ROOM_ROUNDS_MAX; round++) {
      if (fits()) return true;
      const victims = this.victims(Math.max(1, needBytes - this.dram.freeBytes()));
      if (victims.length === 0) return false;
      for (const key of victims) await this.evict(key);
    }
    return fits();
  }

  /** DRAM blocks the eviction policy names to free `needBytes`, evictable ones only. */
  private victims(needBytes: number): string[] {
    return this.eviction.victims(
      needBytes,
      (k) => this.dram.footprintBytes(this.dram.sizeOf(k) ?? 0),
      (k) => this.dram.has(k) && this.evictable(k),
    );
  }

  private evictable(key: string): boolean {
    const durableElsewhere = this.disk.has(key) || this.sharedClean.has(key);
    return !this.pinned.has(key) && !this.dramHolds.has(key) && !this.dirty.has(key) && !this.unsynced.has(key) && durableElsewhere;
  }

  private async evict(key: string): Promise<void> {
    assert(this.evictable(key), `evicting ${key} loses no data`);
    await this.dram.delete(key);
    this.eviction.removed(key);
    this.sharedClean.delete(key);
    if (!this.borrowed.delete(key)) this.remote?.advertise(key, false);
    this.counters.evictions++;
  }

  // ---- internals: flusher ---------------------------------------------------------------------------

  private kickFlusher(): void {
    if (this.closed || this.flusher) return;
    clearTimeout(this.flushRetry);
    this.flushRetry = undefined;
    this.flusher = this.flushLoop()
      .catch((e) => {
        // A failing disk is retried after a pause, not in a hot loop; put and sync kick it sooner.
        this.warn(`flush failed: ${String(e)}`);
        this.flushRetry = setTimeout(() => this.kickFlusher(), FLUSH_RETRY_MS).unref();
      })
      .finally(() => {
        this.flusher = undefined;
      });
  }

  /** Write dirty blocks to disk in arrival order, then fdatasync, until nothing is left. */
  private async flushLoop(): Promise<void> {
    await new Promise<void>((r) => setImmediate(r)); // let the put that queued work return first
    while (!this.closed && (this.dirty.size > 0 || this.unsynced.size > 0)) {
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
  private async flushKeys(keys: Iterable<string>): Promise<void> {
    const writeMany = this.disk.writeMany?.bind(this.disk);
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
          this.counters.flushedBlocks++;
        }
      } finally {
        for (const b of blocks) b.release();
      }
    };
    for (const key of keys) {
      if (!this.dirty.has(key)) continue;
      const release = this.locks.tryAcquire(key);
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
    const n = await this.dram.read(key, offsetBytes, target);
    assert(n === target.length, 'a dirty block is whole in DRAM');
  }

  /**
   * Write one dirty block to disk (merged with a concurrent flush of the same block), under the content
   * lock so that reclamation of the block cannot interleave and leave an orphan on disk.
   */
  private flushOne(key: string): Promise<void> {
    return this.flushes.do(key, () => this.locks.with(key, () => this.flushLocked(key)));
  }

  /** flushOne's work, for a caller that holds the content's lock. */
  private async flushLocked(key: string): Promise<void> {
    const size = this.dirty.get(key);
    if (size === undefined) return; // reclaimed or flushed meanwhile
    const writeMany = this.disk.writeMany?.bind(this.disk);
    let written: Promise<void>;
    if (writeMany !== undefined) {
      // In pieces through the disk tier's staging buffer: no buffer of the block's size.
      written = writeMany([{ key, sizeBytes: size }], (k, target, offsetBytes) => this.fillFromDram(k, target, offsetBytes));
    } else {
      const buf = Buffer.allocUnsafe(size);
      const n = await this.dram.read(key, 0, buf);
      assert(n === size, 'a dirty block is whole in DRAM');
      written = this.disk.write(key, buf);
    }
    await written.catch((e: unknown) => Promise.reject(this.requeueLost(e)));
    this.clearDirty(key);
    this.unsynced.add(key);
    this.counters.flushedBlocks++;
  }

  /** fdatasync the disk tier; blocks whose durability a failed sync could not confirm go back to dirty. */
  private async syncDisk(): Promise<void> {
    const covered = [...this.unsynced];
    try {
      await this.disk.sync();
    } catch (e) {
      throw this.requeueLost(e);
    }
    for (const key of covered) this.unsynced.delete(key);
    this.evictAhead(); // blocks just made durable can go now
  }

  /**
   * After a failed fdatasync (from sync, or from the seal of a full segment inside a write): the blocks
   * it could not confirm are written again from DRAM, to a new segment, or reported when DRAM lost
   * them. Returns the error to rethrow.
   */
  private requeueLost(e: unknown): unknown {
    if (!(e instanceof DiskSyncError)) return e;
    this.counters.diskSyncFailures++;
    this.kickFlusher();
    for (const key of e.lostKeys) {
      this.unsynced.delete(key);
      const size = this.dram.sizeOf(key);
      if (size !== undefined) this.markDirty(key, size);
      else if (!this.writingThrough.has(key)) this.warn(`block ${key} was lost by a failed fdatasync and is not in memory`);
    }
    return e;
  }

  /** Make these blocks durable on disk now, retrying once after a failed fsync (which moves them). */
  private async makeDurable(keys: string[]): Promise<void> {
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

  // ---- internals: read path -------------------------------------------------------------------------

  private async readBlock(sha: string, sizeBytes: number, offsetBytes: number, target: Uint8Array): Promise<number> {
    if (offsetBytes >= sizeBytes || target.length === 0) return 0;
    // A read into host memory takes the DRAM copy when there is one (a memcpy beats a copy over PCIe);
    // the GPU tier serves blocks it holds alone, and same-node GPU processes through IPC.
    const fromDram = await this.readFromDram(sha, sizeBytes, offsetBytes, target);
    if (fromDram !== undefined) return fromDram;
    const g = this.gpu;
    if (g?.has(sha)) {
      try {
        const n = await g.read(sha, offsetBytes, target);
        this.counters.hits.gpu++;
        if (offsetBytes === 0) {
          this.gpuEviction?.accessed(sha);
          // Serving a whole block request by request over PCIe is 4x slower than copying it to DRAM
          // once and reading there (bench/results/gpu-2026-11-26-*): promote it like a disk read.
          if (this.promotion.onSlowRead(sha)) this.offerPromotionFromGpu(sha, sizeBytes);
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
    const local = this.disk.has(sha);
    if (!local && this.remote) {
      // A peer may hold it in DRAM: fetch it into DRAM here (single flight per block), read from there.
      const n = await this.locks.with(sha, async () => {
        if (this.dram.has(sha)) {
          this.counters.hits.dram++;
        } else if (!(await this.fetchRemote(sha, sizeBytes, true))) {
          // No peer holds it in memory: load it from the shared tier into DRAM here, at once (not
          // through the mover), so this read's next request and the other nodes find it in memory.
          await this.ensureInDram(sha, sizeBytes, false, false);
          this.counters.hits.shared++;
        }
        const got = await this.dram.read(sha, offsetBytes, target);
        // Reads without a hold come one request at a time: the copy stays while they keep coming.
        if (this.borrowed.has(sha)) this.dropBorrowedLater(sha);
        return got;
      }).catch((e: unknown) => (isCascadeError(e, 'ENOENT') || isCascadeError(e, 'ENOSPC') ? undefined : Promise.reject(e)));
      if (n !== undefined) return n;
    }
    if (!local && !this.config.cluster) {
      this.counters.misses++;
      throw new CascadeError('EIO', `content ${sha} is in no tier (lost after a failed fsync or a crash)`);
    }
    const whole = await this.loadFromDisk(sha, sizeBytes);
    this.counters.hits[local ? 'disk' : 'shared']++;
    const count = Math.min(target.length, sizeBytes - offsetBytes);
    target.set(whole.subarray(offsetBytes, offsetBytes + count));
    if (this.promotion.onSlowRead(sha)) this.offerPromotion(sha, whole);
    this.noteGpuRead(sha, sizeBytes, offsetBytes);
    return count;
  }

  /** The DRAM copy's bytes, counted as a DRAM hit; undefined when DRAM has none (or it left meanwhile). */
  private async readFromDram(sha: string, sizeBytes: number, offsetBytes: number, target: Uint8Array): Promise<number | undefined> {
    if (!this.dram.has(sha)) return undefined;
    try {
      const n = await this.dram.read(sha, offsetBytes, target);
      this.counters.hits.dram++;
      this.eviction.accessed(sha);
      this.noteGpuRead(sha, sizeBytes, offsetBytes);
      return n;
    } catch (e) {
      if (!isCascadeError(e, 'ENOENT')) throw e; // evicted meanwhile: read from elsewhere
      return undefined;
    }
  }

  /**
   * One verified whole-block disk read, shared by all concurrent readers of the block: from this node's
   * disk tier, or in a cluster from another node's segments on the shared tier.
   */
  private loadFromDisk(sha: string, sizeBytes: number): Promise<Buffer> {
    return this.loads.do(sha, async () => {
      if (!this.disk.has(sha) && this.config.cluster) return this.loadFromShared(sha, sizeBytes);
      const buf = Buffer.allocUnsafe(sizeBytes);
      const n = await this.disk.read(sha, 0, buf);
      if (n !== sizeBytes) throw new CascadeError('ECORRUPT', `block ${sha}: ${n} of ${sizeBytes} bytes on disk`);
      return buf;
    });
  }

  /**
   * Read a block from another node's segment file, checked against its SHA-256. A copy that moved
   * (compaction) or failed its check is skipped; the placements are looked up twice (a node may be
   * republishing a move) before the read fails with EIO. Never wrong bytes.
   */
  private async loadFromShared(sha: string, sizeBytes: number): Promise<Buffer> {
    const c = this.config.cluster!;
    const problems: string[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const cached = attempt === 0 ? this.placements.get(sha) : undefined;
      const found = cached ?? (await c.directory.locate(sha));
      if (found.length > 0) this.placements.set(sha, found);
      const places = found.filter((p) => p.sizeBytes === sizeBytes);
      // Other nodes' copies first: this node's own would be in its disk tier already.
      places.sort((a, b) => Number(a.node === c.node) - Number(b.node === c.node));
      for (const p of places) {
        try {
          const data = await readRecordAt({ file: path.join(c.sharedDir, p.file), offsetBytes: p.offsetBytes, sizeBytes }, sha);
          this.counters.sharedLoads++;
          this.counters.sharedLoadBytes += sizeBytes;
          return data;
        } catch (e) {
          if (!isCascadeError(e, 'ESTALE') && !isCascadeError(e, 'ECORRUPT')) throw e;
          problems.push(`${p.node}: ${(e as Error).message}`);
        }
      }
      this.placements.delete(sha);
      if (places.length === 0 && cached === undefined) break;
    }
    this.counters.misses++;
    throw new CascadeError('EIO', `content ${sha} has no readable copy on the shared tier${problems.length ? ` (${problems.join('; ')})` : ''}`);
  }

  /** Where this node holds a block on the shared tier, as the directory records it. */
  private placement(sha: string): BlockPlacement | undefined {
    const c = this.config.cluster;
    const loc = c && this.disk instanceof DiskSegmentTier ? this.disk.locate(sha) : undefined;
    if (!c || !loc) return undefined;
    return { node: c.node, file: path.relative(c.sharedDir, loc.file), offsetBytes: loc.offsetBytes, sizeBytes: loc.sizeBytes };
  }

  /** Cluster mode: record the current places of these blocks (after compaction moved them). */
  republish(keys: string[]): void {
    const c = this.config.cluster;
    if (!c) return;
    void (async () => {
      for (let i = 0; i < keys.length; i += PLACE_CONCURRENCY) {
        await Promise.all(
          keys.slice(i, i + PLACE_CONCURRENCY).map(async (k) => {
            const p = this.placement(k);
            if (p) await c.directory.placeBlock(k, p);
          }),
        );
      }
    })().catch((e: unknown) => this.warn(`publishing block places: ${String(e)}`));
  }

  private startHeartbeat(): void {
    const c = this.config.cluster;
    if (!c) return;
    const beat = () =>
      c.directory.joinNode(c.node, this.nodeToken, NODE_LEASE_MS).then(
        async (ok) => {
          if (!ok) {
            if (!this.leaseLost) this.warn(`node ${c.node}: another daemon took this node name (this one missed its heartbeats for ${NODE_LEASE_MS} ms); writes are refused from now on: unmount and restart under another --node`);
            this.leaseLost = true;
            return;
          }
          await c.directory.publishNodeStats(c.node, JSON.stringify(this.figures()), NODE_LEASE_MS);
          // Copies of content another node released: reclaim() keeps any that was stored again.
          const released = await c.directory.takeReclaims(c.node, RECLAIM_BATCH);
          if (released.length > 0 && !this.closing) await this.reclaim(released);
          if (!this.closing) await this.tendReplicas();
        },
        (e: unknown) => this.warn(`node ${c.node}: heartbeat failed: ${String(e)}`),
      ).catch((e: unknown) => this.warn(`node ${c.node}: publishing its figures failed: ${String(e)}`));
    let beating = false; // a slow beat (a long reclaim) is not overlapped by the next
    const once = () => {
      if (beating) return;
      beating = true;
      void beat().finally(() => (beating = false));
    };
    once();
    this.heartbeat = setInterval(once, NODE_HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /** As offerPromotion, for a block in the GPU tier: copied out of it when the job runs. */
  private offerPromotionFromGpu(sha: string, sizeBytes: number): void {
    if (this.dram.footprintBytes(sizeBytes) > this.dram.capacityBytes) return;
    this.mover.offer({
      key: sha,
      sizeBytes: 0, // holds no bytes while queued
      run: async () => {
        if (this.closed || this.dram.has(sha)) return;
        const data = await this.gpuCopy(sha, sizeBytes);
        if (data) await this.promoteNow(sha, data);
      },
    });
  }

  private offerPromotion(sha: string, data: Buffer): boolean {
    return this.mover.offer({
      key: sha,
      sizeBytes: data.length,
      run: () => this.promoteNow(sha, data),
    });
  }

  /** Copy a block's bytes into DRAM as a promotion, if it is still stored and DRAM can make room. */
  private promoteNow(sha: string, data: Buffer): Promise<void> {
    return this.locks.with(sha, async () => {
      // Still stored durably: on this node's disk, or (a cluster) on another node's.
      if (this.closed || this.dram.has(sha) || (!this.disk.has(sha) && !this.config.cluster)) return;
      const shared = !this.disk.has(sha);
      if (shared && (await this.meta.block(sha)) === undefined) return; // released meanwhile
      if (!(await this.makeRoom(data.length)) || !(await this.dramWriteRaced(sha, data))) return; // an optimisation: skipped
      if (shared) this.sharedClean.add(sha);
      this.admit(sha);
      this.remote?.advertise(sha, true);
      this.counters.promotions++;
    });
  }

  // ---- internals: GPU tier --------------------------------------------------------------------------

  /**
   * A read of a block from its first byte (one per whole-file read, however many requests it takes):
   * after GPU promoteAfterReads of them the block is copied into the GPU tier in the background.
   */
  private noteGpuRead(sha: string, sizeBytes: number, offsetBytes: number): void {
    if (!this.gpu || offsetBytes !== 0 || this.closing) return;
    if (this.gpu.has(sha)) {
      this.gpuEviction?.accessed(sha);
      return;
    }
    if (this.gpuPromotion?.onSlowRead(sha)) this.offerGpu(sha, sizeBytes);
  }

  /** Queue a copy into the GPU tier (skipped when the queue is full: an optimisation, never owed). */
  private offerGpu(sha: string, sizeBytes: number): void {
    const g = this.gpu;
    if (!g || g.has(sha) || g.footprintBytes(sizeBytes) > g.capacityBytes) return;
    this.mover.offer({
      key: `gpu:${sha}`,
      sizeBytes: 0, // the job reads the block when it runs: it holds no bytes while queued
      run: () => this.locks.with(sha, async () => void (await this.loadIntoGpu(sha, sizeBytes, false))),
    });
  }

  /**
   * Copy a block into the GPU tier from this node's DRAM or disk (verified), making room first. Under
   * the block's lock. `required` (an IPC hold): ENOSPC when no room can be made; else false.
   */
  private async loadIntoGpu(sha: string, sizeBytes: number, required: boolean): Promise<boolean> {
    const g = this.gpu;
    assert(g !== undefined, 'GPU loads only with a GPU tier');
    if (this.closed || this.closing) return false;
    if (g.has(sha)) return true;
    // The GPU tier only ever holds copies: the block must be stored elsewhere (or it was released).
    if (this.residentSize(sha) === undefined && !(this.config.cluster && (await this.meta.block(sha)) !== undefined)) {
      if (required) throw new CascadeError('ENOENT', `content ${sha} is no longer stored`);
      return false;
    }
    const noRoom = () => new CascadeError('ENOSPC', `no room in the GPU tier for ${sizeBytes} bytes (the rest is pinned or leased)`);
    if (!(await this.makeGpuRoom(sizeBytes))) {
      if (required) throw noRoom();
      return false;
    }
    const data = await this.localCopy(sha, sizeBytes);
    // Room may have gone to another load while the block was read: make it again, then copy.
    if (!(await this.makeGpuRoom(sizeBytes)) || g.has(sha)) {
      if (g.has(sha)) return true;
      if (required) throw noRoom();
      return false;
    }
    await g.write(sha, data);
    if (!this.pinned.has(sha)) this.gpuEviction?.admitted(sha);
    this.counters.gpuPromotions++;
    return true;
  }

  /** The whole block from this node's DRAM, or else its disk (or the shared tier), verified there. */
  private async localCopy(sha: string, sizeBytes: number): Promise<Buffer> {
    if (this.dram.has(sha)) {
      const buf = Buffer.allocUnsafe(sizeBytes);
      try {
        if ((await this.dram.read(sha, 0, buf)) === sizeBytes) return buf;
      } catch (e) {
        if (!isCascadeError(e, 'ENOENT')) throw e; // evicted meanwhile
      }
    }
    return this.loadFromDisk(sha, sizeBytes);
  }

  /** Evict from the GPU tier (least recent first; never pinned or leased blocks) until a block fits. */
  private async makeGpuRoom(sizeBytes: number): Promise<boolean> {
    const g = this.gpu!;
    const needBytes = g.footprintBytes(sizeBytes);
    if (needBytes > g.capacityBytes) return false;
    for (let round = 0; round < MAKE_ROOM_ROUNDS_MAX; round++) {
      if (g.fits(sizeBytes)) return true;
      const victims = this.gpuEviction!.victims(
        Math.max(1, needBytes - g.freeBytes()),
        (k) => g.footprintBytes(g.sizeOf(k) ?? 0),
        (k) => g.has(k) && this.gpuEvictable(k),
      );
      if (victims.length === 0) return false;
      for (const key of victims) await this.evictGpu(key);
    }
    return g.fits(sizeBytes);
  }

  private gpuEvictable(key: string): boolean {
    return !this.pinned.has(key) && !this.gpuHolds.has(key);
  }

  /**
   * Drop a block from the GPU tier. When DRAM lacks it, it is first copied down and offered to DRAM as
   * a promotion (a block hot enough for the GPU is likely hotter than DRAM's coldest).
   */
  private async evictGpu(key: string): Promise<void> {
    const g = this.gpu!;
    const size = g.sizeOf(key);
    if (size === undefined) return;
    let down: Buffer | undefined;
    if (!this.dram.has(key) && this.dram.footprintBytes(size) <= this.dram.capacityBytes) {
      down = Buffer.allocUnsafe(size);
      await g.read(key, 0, down).catch(() => (down = undefined));
    }
    // Checked again after the copy down (a hold may have come meanwhile); from here on nothing yields.
    if (!g.has(key) || !this.gpuEvictable(key)) return;
    void g.delete(key);
    this.gpuEviction!.removed(key);
    this.counters.gpuEvictions++;
    if (down && this.offerPromotion(key, down)) this.counters.gpuDemotions++;
  }

  /**
   * Hold a version's content in the GPU tier for a same-node GPU process (user.cascade.cuda_ipc):
   * loaded there now if needed, never evicted nor reclaimed until release(). EOPNOTSUPP without a GPU
   * tier (or a device that cannot export IPC handles), ENOSPC when the tier is full of pinned or held
   * blocks.
   */
  async holdInGpu(v: VersionRecord): Promise<GpuHold> {
    this.checkOpen();
    const g = this.gpu;
    if (!g) throw new CascadeError('EOPNOTSUPP', `no GPU tier: ${this.gpuOffReason}`);
    const ipcHandle = g.device.ipcHandle();
    if (!ipcHandle) throw new CascadeError('EOPNOTSUPP', `GPU device ${g.device.describe().name} cannot export CUDA IPC handles`);
    const sha = v.sha256;
    const releaseLease = this.lease(v);
    try {
      const where = await this.locks.with(sha, async () => {
        for (let attempt = 0; ; attempt++) {
          await this.loadIntoGpu(sha, v.sizeBytes, true);
          const w = g.locate(sha); // nothing awaited between the check and the hold
          if (w !== undefined) {
            this.gpuHolds.set(sha, (this.gpuHolds.get(sha) ?? 0) + 1);
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
          const n = (this.gpuHolds.get(sha) ?? 1) - 1;
          if (n > 0) this.gpuHolds.set(sha, n);
          else this.gpuHolds.delete(sha);
          releaseLease();
        },
      };
    } catch (e) {
      releaseLease();
      throw e;
    }
  }

  /**
   * Bring a block into DRAM: from this node's disk, a peer's DRAM (cluster, remote tier on), or the
   * shared tier. `reading`: for a reader (a remote copy is counted and may stay borrowed); else for a
   * pin or a warmup, which keep the copy.
   */
  private async ensureInDram(sha: string, sizeBytes: number, reading = false, tryRemote = true, onLoading?: (handle: number) => void): Promise<void> {
    if (this.dram.has(sha)) {
      if (reading) this.counters.hits.dram++;
      if (!reading && this.borrowed.delete(sha)) this.remote?.advertise(sha, true); // kept from now on
      return;
    }
    if (tryRemote && (await this.fetchRemote(sha, sizeBytes, reading, onLoading))) return;
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
    const native = this.nativeDiskLoad(sha, sizeBytes, onLoading) ?? this.nativeSharedLoad(sha, sizeBytes, onLoading);
    const fromGpu = native ? undefined : this.gpu?.has(sha) ? await this.gpuCopy(sha, sizeBytes) : undefined;
    // A reader's hit where the block came from (reads through a hold are counted once, at the hold).
    const source = fromGpu ? 'gpu' : this.disk.has(sha) ? 'disk' : 'shared';
    const data = native ? undefined : (fromGpu ?? (await this.loadFromDisk(sha, sizeBytes)));
    for (let attempt = 0; ; attempt++) {
      if (!(await this.makeRoom(sizeBytes))) {
        // Room may be held by blocks waiting for the flusher: let it finish, then try once more.
        await this.makeDurable([...this.dirty.keys(), ...this.unsynced]);
        if (!(await this.makeRoom(sizeBytes))) {
          throw new CascadeError('ENOSPC', `no room in DRAM for ${sizeBytes} bytes (pinned: ${this.pinnedBytes})`);
        }
      }
      if (await this.dramWriteRaced(sha, data ?? native!)) break;
      if (attempt >= MAKE_ROOM_ROUNDS_MAX) throw new CascadeError('ENOSPC', `no room in DRAM for ${sizeBytes} bytes: concurrent writes keep taking it`);
    }
    if (!this.disk.has(sha)) this.sharedClean.add(sha);
    this.admit(sha);
    this.remote?.advertise(sha, true);
    this.counters.promotions++;
    if (reading) this.counters.hits[source]++;
  }

  /**
   * Cluster, remote tier on: fetch a block this node lacks from a peer's DRAM into DRAM here. false
   * when no peer could (or no room): the caller reads the shared tier. Under the block's lock.
   */
  private async fetchRemote(sha: string, sizeBytes: number, reading: boolean, onLoading?: (handle: number) => void): Promise<boolean> {
    const remote = this.remote;
    if (!remote || this.disk.has(sha) || !(this.dram instanceof NativeArenaTier) || !(await this.makeRoom(sizeBytes))) return false;
    if (!(await remote.fetch(this.dram, sha, sizeBytes, onLoading))) return false;
    this.sharedClean.add(sha);
    this.admit(sha);
    if (reading) this.counters.hits.remote++;
    if (!reading || remote.remoteRead(sha)) remote.advertise(sha, true);
    else this.borrowed.add(sha);
    return true;
  }

  private dropBorrowedLater(sha: string): void {
    clearTimeout(this.borrowedTimers.get(sha));
    const t = setTimeout(() => {
      this.borrowedTimers.delete(sha);
      if (!this.dramHolds.has(sha)) this.dropBorrowed(sha);
    }, BORROWED_GRACE_MS);
    t.unref();
    this.borrowedTimers.set(sha, t);
  }

  /** A borrowed copy nobody reads any more goes (it was read remotely too rarely to keep). */
  private dropBorrowed(sha: string): void {
    clearTimeout(this.borrowedTimers.get(sha));
    this.borrowedTimers.delete(sha);
    void this.locks
      .with(sha, async () => {
        if (!this.borrowed.has(sha) || this.dramHolds.has(sha) || this.pinned.has(sha) || !this.dram.has(sha)) return;
        this.borrowed.delete(sha);
        await this.dram.delete(sha);
        this.eviction.removed(sha);
        this.sharedClean.delete(sha);
      })
      .catch((e: unknown) => this.warn(`dropping a borrowed copy of ${sha}: ${String(e)}`));
  }

  // ---- internals: reclamation and recovery ----------------------------------------------------------

  /** Remove content whose last reference went away, unless something referenced it again meanwhile. */
  private async reclaim(released: string[]): Promise<void> {
    for (const sha of released) {
      await this.locks.with(sha, async () => {
        if (await this.meta.block(sha)) return;
        if (this.leases.has(sha)) {
          this.deferredReclaim.add(sha); // an open handle still reads it; reclaimed at its release
          return;
        }
        await this.dropContent(sha);
      });
    }
  }

  private async dropContent(sha: string): Promise<void> {
    const pinnedSize = this.pinned.get(sha);
    if (pinnedSize !== undefined) {
      this.pinned.delete(sha);
      this.pinnedBytes -= pinnedSize;
    }
    this.clearDirty(sha);
    this.unsynced.delete(sha);
    this.promotion.forget(sha);
    if (this.dram.has(sha)) {
      await this.dram.delete(sha);
      this.eviction.removed(sha);
    }
    this.sharedClean.delete(sha);
    this.borrowed.delete(sha);
    this.replicas.delete(sha);
    this.placements.delete(sha);
    if (this.gpu?.has(sha)) {
      await this.gpu.delete(sha);
      this.gpuEviction?.removed(sha);
    }
    this.gpuPromotion?.forget(sha);
    await this.disk.delete(sha);
  }

  /**
   * At open: metadata is the truth for what is referenced, the disk tier for what survived. Content
   * referenced but not on disk was lost before it was flushed: its versions go (never served). Content on
   * disk that nothing references is removed. Pinned content is loaded into DRAM.
   */
  private async reconcile(): Promise<void> {
    if (this.config.cluster) return this.reconcileNode(this.config.cluster.directory);
    const rows = await this.meta.blocks();
    const referenced = new Set<string>();
    for (const row of rows) {
      if (!this.disk.has(row.sha256) && !this.dram.has(row.sha256)) {
        const { removedVersions } = await this.meta.forget(row.sha256);
        this.counters.lostVersions += removedVersions;
        continue;
      }
      referenced.add(row.sha256);
      if (row.pinned) this.pinLocally(row.sha256, row.sizeBytes);
    }
    for (const { key } of this.disk.scan()) {
      if (referenced.has(key)) continue;
      await this.disk.delete(key);
      this.counters.orphanBlocksRemoved++;
    }
    for (const { key } of this.dram.scan()) {
      if (referenced.has(key)) this.admit(key);
      else await this.dram.delete(key);
    }
    if (this.meta instanceof SqliteMeta && this.meta.replayedAtOpen > 0) {
      this.warn(`recovery: ${this.meta.replayedAtOpen} metadata change(s) a crash kept from committing were applied again from the journal`);
    }
    if (this.counters.lostVersions > 0) {
      this.warn(`recovery: ${this.counters.lostVersions} version(s) whose content never reached disk were dropped`);
    }
    if (this.config.loadPins !== false) for (const [sha, size] of this.pinned) await this.ensureInDram(sha, size);
  }

  /**
   * reconcile() for a cluster node, in O(this node's blocks + the pins), not O(the cluster's blocks):
   * its own segments' blocks that nothing references any more go; pinned content is loaded into DRAM.
   * Content the node lacks is other nodes' (on the shared tier), not lost.
   */
  private async reconcileNode(directory: ClusterDirectory): Promise<void> {
    const own = this.disk.scan().map((e) => e.key);
    const rows = await directory.blockRows(own);
    for (let i = 0; i < own.length; i++) {
      if (rows[i] !== undefined) continue;
      await this.disk.delete(own[i]);
      this.counters.orphanBlocksRemoved++;
    }
    // Where this node holds blocks on the shared tier, for the directory (its places may have been
    // dropped while it was away, or moved by compaction at open).
    this.republish(this.disk.scan().map((e) => e.key));
    const inDram = this.dram.scan().map((e) => e.key); // empty for a fresh arena; a test may inject one
    const dramRows = await directory.blockRows(inDram);
    for (let i = 0; i < inDram.length; i++) {
      if (dramRows[i] !== undefined) this.admit(inDram[i]);
      else await this.dram.delete(inDram[i]);
    }
    // Pins made before the pinned set existed (an older namespace): read every row once.
    const pinnedRows = await directory.pinnedBlocks();
    const legacy = pinnedRows.length === 0 && (await this.meta.totals()).pinnedBytes > 0;
    for (const row of legacy ? (await this.meta.blocks()).filter((r) => r.pinned) : pinnedRows) this.pinLocally(row.sha256, row.sizeBytes);
    for (const [sha, size] of this.pinned) await this.ensureInDram(sha, size);
  }

  // ---- metadata snapshots ---------------------------------------------------------------------------

  /** The SQLite metadata when this store opened it itself (not an injected or clustered engine). */
  private ownSqlite(): SqliteMeta | undefined {
    return this.config.metaEngine === undefined && this.meta instanceof SqliteMeta ? this.meta : undefined;
  }

  private async startSnapshots(): Promise<void> {
    const meta = this.ownSqlite();
    if (!meta) return;
    const newest = listSnapshots(this.config.dataDir, false)[0];
    this.lastSnapshot = { seq: newest?.seq ?? -1, atMs: Date.now() };
    // Every open starts a journal file; many short-lived opens (CLI commands) are folded into a snapshot.
    if (listJournalFiles(path.join(this.config.dataDir, JOURNAL_DIR_NAME)).length > META_JOURNAL_FILES_MAX) await this.snapshotMeta(false);
    const intervalMs = this.config.metaSnapshotIntervalMs ?? META_SNAPSHOT_INTERVAL_MS_DEFAULT;
    this.snapshotTimer = setInterval(() => {
      const due = intervalMs > 0 && Date.now() - this.lastSnapshot.atMs >= intervalMs;
      if (due || meta.journalFileBytes() >= META_JOURNAL_SNAPSHOT_BYTES) void this.snapshotMeta(true);
    }, intervalMs > 0 ? Math.min(intervalMs, META_SNAPSHOT_CHECK_MS) : META_SNAPSHOT_CHECK_MS).unref();
  }

  /**
   * Snapshot the metadata if it changed since the last one. A failure is a warning: the journal goes
   * on, so nothing is lost but a longer replay. `background`: skip if the store is closing.
   */
  private snapshotMeta(background: boolean): Promise<void> {
    const meta = this.ownSqlite();
    if (!meta || this.snapshotting || (background && this.closing)) return this.snapshotting ?? Promise.resolve();
    let seq: number;
    try {
      seq = meta.journalSeq();
    } catch (e) {
      this.warn(`metadata snapshot: ${String(e)}`);
      return Promise.resolve();
    }
    if (seq === this.lastSnapshot.seq) {
      this.lastSnapshot.atMs = Date.now();
      return Promise.resolve();
    }
    this.snapshotting = takeSnapshot(meta, this.config.dataDir)
      .then((r) => {
        this.lastSnapshot = { seq: r.seq, atMs: Date.now() };
        this.counters.metaSnapshots++;
        this.counters.metaSnapshotMs = r.durationMs;
      })
      .catch((e: unknown) => this.warn(`metadata snapshot failed (the journal still has every change): ${String(e)}`))
      .finally(() => (this.snapshotting = undefined));
    return this.snapshotting;
  }

  // ---- small helpers --------------------------------------------------------------------------------

  /** A block enters the DRAM recency order, unless pinned: pins are never victims, so never scanned. */
  private admit(sha: string): void {
    if (!this.pinned.has(sha)) this.eviction.admitted(sha);
  }

  private pinLocally(sha: string, sizeBytes: number): void {
    assert(!this.pinned.has(sha), 'a pin is counted once');
    this.pinned.set(sha, sizeBytes);
    this.pinnedBytes += sizeBytes;
    this.eviction.removed(sha);
    this.gpuEviction?.removed(sha); // a pinned block is never a GPU victim either
  }

  private unpinLocally(sha: string): void {
    const size = this.pinned.get(sha);
    if (size === undefined) return;
    this.pinned.delete(sha);
    this.pinnedBytes -= size;
    this.replicas.delete(sha);
    if (this.dram.has(sha)) this.eviction.admitted(sha);
    if (this.gpu?.has(sha)) this.gpuEviction?.admitted(sha);
  }

  private residentSize(sha: string): number | undefined {
    return this.dram.sizeOf(sha) ?? this.disk.sizeOf(sha);
  }

  private tierOf(sha: string): TierName | 'none' {
    if (this.gpu?.has(sha)) return 'gpu';
    if (this.dram.has(sha)) return this.dram.name;
    if (this.disk.has(sha)) return this.disk.name;
    // A committed block of a cluster is on the shared tier (its writer wrote it through).
    if (this.config.cluster) return this.disk.name;
    return 'none';
  }

  private now(): number {
    return this.config.nowMs ? this.config.nowMs() : Date.now();
  }

  private checkOpen(): void {
    if (this.closed || this.closing) throw new CascadeError('EBUSY', 'store is closed');
  }

  private warn(message: string): void {
    (this.config.log ?? ((m: string) => process.stderr.write(`cascade: ${m}\n`)))(message);
  }
}

/**
 * The data directory's SQLite metadata, held by this process alone (SQLite's exclusive lock). The holder
 * writes `owner.json` (host, pid, start), so a second process is told who holds the directory.
 */
function openSqliteOwned(dataDir: string, groupCommitMs: number | undefined): SqliteMeta {
  const ownerFile = path.join(dataDir, 'owner.json');
  const metaFile = path.join(dataDir, META_FILE);
  // A fresh database next to existing data would make every stored block an orphan, reclaimed at
  // once (reconcile): refuse instead.
  if (!fs.existsSync(metaFile) && hasStoredData(dataDir)) {
    throw new CascadeError('ECORRUPT', `metadata database ${metaFile} is missing but ${dataDir} holds data; ${FSCK_HINT.replace('DIR', dataDir)}`);
  }
  let meta: SqliteMeta;
  try {
    meta = SqliteMeta.open(metaFile, { journalDir: path.join(dataDir, JOURNAL_DIR_NAME), groupCommitMs });
  } catch (e) {
    if (!isCascadeError(e, 'EBUSY')) throw e;
    let holder = 'another process';
    try {
      const o = JSON.parse(fs.readFileSync(ownerFile, 'utf8')) as { host?: string; pid?: number; sinceMs?: number };
      holder = `pid ${o.pid} on host ${o.host}${o.sinceMs ? ` (since ${new Date(o.sinceMs).toISOString()})` : ''}`;
    } catch {
      // no owner file (an older version held it): the generic words stay
    }
    throw new CascadeError(
      'EBUSY',
      `data directory ${dataDir} is in use by ${holder}: one process per data directory (another node of a job needs its own --data; the default includes the host name)`,
      { cause: e },
    );
  }
  try {
    fs.writeFileSync(ownerFile, JSON.stringify({ host: os.hostname(), pid: process.pid, sinceMs: Date.now() }) + '\n');
  } catch {
    // informational only
  }
  return meta;
}

/** Whether a data directory holds anything a fresh metadata database would orphan or contradict. */
export function hasStoredData(dataDir: string): boolean {
  if (fs.existsSync(path.join(dataDir, SNAPSHOT_FILE)) || listJournalFiles(path.join(dataDir, JOURNAL_DIR_NAME)).length > 0) return true;
  let names: string[];
  try {
    names = fs.readdirSync(path.join(dataDir, 'segments'));
  } catch {
    return false;
  }
  return names.some((n) => /^seg-\d{8}\.log$/.test(n) && fs.statSync(path.join(dataDir, 'segments', n)).size > 0);
}

/** A damaged metadata database refuses the open (ECORRUPT) and says how to get the data back. */
function withFsckHint(e: unknown, dataDir: string): unknown {
  if (!isCascadeError(e, 'ECORRUPT') || !e.message.includes('metadata database') || e.message.includes('cascade fsck')) return e;
  return new CascadeError('ECORRUPT', `${e.message.replace(/^ECORRUPT: /, '')}; ${FSCK_HINT.replace('DIR', dataDir)}`, { cause: e });
}

/** The lease token of `node` when it belongs to a process of this host that is gone, else undefined. */
async function deadHolder(directory: ClusterDirectory, node: string): Promise<string | undefined> {
  const holder = await directory.nodeHolder(node);
  const m = holder === undefined ? null : /^(.*):(\d+):[0-9a-f]+$/.exec(holder);
  if (!m || m[1] !== os.hostname()) return undefined;
  try {
    process.kill(Number(m[2]), 0);
    return undefined; // alive (or not ours to signal): keep out
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ESRCH' ? holder : undefined;
  }
}

function validateConfig(c: StoreConfig): void {
  if (!c || typeof c.dataDir !== 'string' || c.dataDir.length === 0) throw new CascadeError('EINVAL', 'dataDir is required');
  const nonNegInt = (v: unknown, what: string) => {
    if (v !== undefined && !(Number.isSafeInteger(v) && (v as number) >= 0)) {
      throw new CascadeError('EINVAL', `${what} must be a non-negative integer`);
    }
  };
  nonNegInt(c.dramCapacityBytes, 'dramCapacityBytes');
  if (c.dramWatermarks !== undefined) {
    const { low, high } = c.dramWatermarks;
    if (!(Number.isFinite(low) && Number.isFinite(high) && low >= 0 && low <= high && high < 1)) {
      throw new CascadeError('EINVAL', `DRAM watermarks must satisfy 0 <= low <= high < 1, got low ${low}, high ${high}`);
    }
  }
  if (c.dramCapacityBytes === undefined && !c.tiers?.dram) throw new CascadeError('EINVAL', 'dramCapacityBytes is required');
  nonNegInt(c.pinQuotaBytes, 'pinQuotaBytes');
  nonNegInt(c.metaSnapshotIntervalMs, 'metaSnapshotIntervalMs');
  nonNegInt(c.maxBlockBytes, 'maxBlockBytes');
  if (c.diskCapacityBytes !== undefined && !(c.diskCapacityBytes >= 0)) throw new CascadeError('EINVAL', 'diskCapacityBytes must be >= 0');
  if (c.keepVersions !== undefined && !(Number.isInteger(c.keepVersions) && c.keepVersions >= 1 && c.keepVersions <= KEEP_VERSIONS_MAX)) {
    throw new CascadeError('EINVAL', `keepVersions must be an integer in [1, ${KEEP_VERSIONS_MAX}]`);
  }
  if (c.dram !== undefined && c.dram !== 'native' && c.dram !== 'shm' && c.dram !== 'memory') {
    throw new CascadeError('EINVAL', "dram must be 'native', 'shm' or 'memory'");
  }
  if (c.meta !== undefined && c.meta !== 'sqlite' && c.meta !== 'memory') throw new CascadeError('EINVAL', "meta must be 'sqlite' or 'memory'");
  if (c.gpu !== undefined) {
    const g = c.gpu;
    if (!(Number.isSafeInteger(g.capacityBytes) && g.capacityBytes > 0)) throw new CascadeError('EINVAL', 'gpu.capacityBytes must be a positive integer');
    if (g.device !== undefined && !(Number.isInteger(g.device) && g.device >= 0 && g.device < 1024)) throw new CascadeError('EINVAL', 'gpu.device must be a device ordinal (0, 1, ...)');
    if (g.promoteAfterReads !== undefined && !(Number.isInteger(g.promoteAfterReads) && g.promoteAfterReads >= 1)) {
      throw new CascadeError('EINVAL', 'gpu.promoteAfterReads must be an integer >= 1');
    }
  }
  if (c.verify !== undefined && c.verify !== 'crc32c' && c.verify !== 'sha256') throw new CascadeError('EINVAL', `verify must be crc32c or sha256, got ${JSON.stringify(c.verify)}`);
  if (c.cluster !== undefined) {
    if (!c.metaEngine) throw new CascadeError('EINVAL', 'cluster mode needs the shared metadata engine (metaEngine)');
    if (!NODE_NAME_RE.test(c.cluster.node)) throw new CascadeError('EINVAL', `bad node name ${JSON.stringify(c.cluster.node)}: letters, digits, _ . - (1-64)`);
    if (typeof c.cluster.sharedDir !== 'string' || c.cluster.sharedDir.length === 0) throw new CascadeError('EINVAL', 'cluster mode needs a shared directory');
  }
}

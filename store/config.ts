/** What a Store is opened with (StoreConfig), which version a read asks for, and the checks of both. */
import type { ClusterDirectory, MetaEngine } from './meta';
import type { RemoteDramOptions } from './cluster/remote';
import { KEEP_VERSIONS_MAX } from './constants';
import { CascadeError } from './errors';
import type { Tier } from './tier';
import type { GpuDevice } from './tiers/gpu';

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
     * The remote DRAM tier (store/cluster/remote.ts): read blocks other nodes hold in DRAM over libfabric, and
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

/** A node name is a directory name on the shared tier and a key part in the directory. */
const NODE_NAME_RE = /^[A-Za-z0-9_.-]{1,64}$/;

export function validateConfig(c: StoreConfig): void {
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

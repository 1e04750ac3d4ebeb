/** What the Store hands its callers: holds of content in DRAM or the GPU, block info, figures. */
import type { RemoteDramFigures } from './cluster/remote';
import type { VersionRecord } from './meta';
import type { TierName, TierStats } from './tier';
import type { GpuDeviceFigures } from './tiers/gpu';

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

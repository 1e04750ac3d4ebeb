/**
 * A Tier stores bytes under a content key (hex SHA-256) and nothing else: no policy, no names, no
 * versions. The Store decides what lives where. Every implementation passes test/store/tier-conformance.
 */
export type TierName = 'gpu' | 'dram' | 'remote' | 'disk' | 'memory';

export interface TierEntry {
  key: string;
  sizeBytes: number;
}

export interface TierStats {
  name: TierName;
  capacityBytes: number;
  /** Footprint of live blocks (may exceed the sum of sizes: pages, headers); dead bytes not included. */
  usedBytes: number;
  blocks: number;
  /** Tiers that pack blocks into slots (the native arena): the blocks' own bytes, and their slots'. */
  blockBytes?: number;
  slotBytes?: number;
  /** The native arena: loads from disk whose piece table was damaged or wrong while the SHA-256 held (loaded whole). */
  badPieceTables?: number;
  /** The native arena: bytes whose page tables are filled (reserved at open, mapped in the background). */
  prefaultedBytes?: number;
}

/**
 * What a tier tells its owner on its own, outside any call: blocks a background job moved (a cluster
 * node republishes where they lie) or lost (a background fdatasync failed: the owner writes them again).
 */
export interface TierEvents {
  moved?(keys: string[]): void;
  lost?(keys: string[]): void;
}

export interface Tier {
  readonly name: TierName;
  /** Bytes this tier may hold at most (Infinity where unbounded). */
  readonly capacityBytes: number;
  /** Whether this tier keeps bytes across a restart (disk: yes; memory tiers: no). */
  readonly persistent: boolean;
  /**
   * Whether delete() frees room at once. A log-structured tier (disk) frees it later, by compaction;
   * it still drops a segment as soon as nothing live is left in it, so an emptied tier has its room back.
   */
  readonly reclaimsOnDelete: boolean;

  has(key: string): boolean;
  /** Size of the block, or undefined when absent. */
  sizeOf(key: string): number | undefined;
  /** Bytes a block of this size would take here (for admission decisions before writing). */
  footprintBytes(sizeBytes: number): number;
  /** Free bytes for new blocks right now. */
  freeBytes(): number;
  /**
   * Whether a block of sizeBytes can be stored right now. Only tiers that pack small blocks into shared
   * pages (where free slots of one size do not show in freeBytes) implement it.
   */
  fits?(sizeBytes: number): boolean;

  /**
   * Store `data` under `key`. Writing a key that is present is a no-op (content addressing).
   * Throws CascadeError('ENOSPC') when there is no room; nothing half-written stays visible.
   */
  write(key: string, data: Uint8Array): Promise<void>;
  /**
   * Store several blocks with as few appends as the tier can (a log-structured tier: one write per
   * run of records): `fill` puts the block's bytes [offsetBytes, offsetBytes + target.length) into the
   * target the tier hands it (a large block may come in pieces). Keys present are skipped. Same failure
   * rules as write(), per record. Optional: without it, write() is called per block.
   */
  writeMany?(
    blocks: ReadonlyArray<{ key: string; sizeBytes: number }>,
    fill: (key: string, target: Uint8Array, offsetBytes: number) => Promise<void>,
  ): Promise<void>;
  /**
   * Fill `target` with bytes [offsetBytes, offsetBytes + target.length) of the block, clipped at its
   * end; returns the count filled. ENOENT when absent, ECORRUPT when stored bytes fail their check.
   */
  read(key: string, offsetBytes: number, target: Uint8Array): Promise<number>;
  /** Remove a block. Removing an absent key is a no-op. */
  delete(key: string): Promise<void>;
  /** Every block present. */
  scan(): TierEntry[];
  /** Make every write so far durable (no-op for memory tiers). */
  sync(): Promise<void>;
  stats(): TierStats;
  close(): Promise<void>;
  /**
   * Hear the tier's background events (tiers with background jobs only). The Store subscribes to the
   * tier it is given, so an injected tier cannot miss its lost blocks.
   */
  subscribe?(events: TierEvents): void;
}

/** A memory tier whose blocks lie in one shared mapping that other processes can map (the native arena). */
export interface MappedTier extends Tier {
  /** [arenaOffsetBytes, lengthBytes] pairs of a block, in block order; undefined when absent. */
  extentsOf(key: string): { sizeBytes: number; extents: Array<[number, number]> } | undefined;
  /** The mapping: its fd (for /proc/<pid>/fd/<fd>), length, and address (for RDMA registration). */
  region(): { address: bigint; lengthBytes: number; fd: number } | undefined;
}

export function isMappedTier(tier: Tier): tier is MappedTier {
  return typeof (tier as Partial<MappedTier>).extentsOf === 'function' && typeof (tier as Partial<MappedTier>).region === 'function';
}

/** Public surface of the store layer (what fs/ and mount/ may import). */
export * from './errors';
export * from './constants';
export type { Tier, TierName, TierEntry, TierStats } from './tier';
export type { MetaEngine, VersionRecord, BlockRecord, MetaTotals } from './meta';
export { validateName, validateComponent, validateSha256 } from './names';
export { Store } from './store';
export type { StoreConfig, StoreStats, BlockInfo, VersionSelector } from './store';
export { MemoryTier } from './tiers/memory';
export { ShmArenaTier } from './tiers/dram';
export { DiskSegmentTier, DiskSyncError } from './tiers/disk';
export { MemoryMeta } from './meta/memory';
export { SqliteMeta } from './meta/sqlite';

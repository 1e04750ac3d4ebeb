/**
 * The Store: content-addressed, versioned, tiered; a thin facade over its parts (docs/ARCHITECTURE.md
 * follows a write and a read through them): catalog.ts (names, versions, directories), writes.ts (a
 * block in: hash, dedup, admission, commit), writeback.ts (the flusher and fdatasyncs), dram-cache.ts
 * (DRAM copies: reads, loads, eviction, promotions), gpu-cache.ts (the GPU tier, CUDA IPC holds),
 * content.ts (leases, holds, reclamation), pins.ts, recovery.ts (owner, reconcile, snapshots), and
 * cluster/ for what only a cluster node does (membership, global dedup, the change feed, remote DRAM,
 * shared-tier reads, replicas). core.ts holds what they share: tiers, block index, locks, counters.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { Catalog } from './catalog';
import { ClusterNode, joinCluster } from './cluster/node';
import { PeerCopies } from './cluster/copies';
import { RemoteDram } from './cluster/remote';
import { validateConfig, type StoreConfig, type VersionSelector } from './config';
import { Content } from './content';
import { StoreCore } from './core';
import { DramCache } from './dram-cache';
import { assert, CascadeError } from './errors';
import { failpointsFromEnv, type FaultyDiskIo } from './faults';
import { gpuOffFigures, GpuCache, openGpu } from './gpu-cache';
import type { ChangeListener, MetaEngine, VersionRecord } from './meta';
import { MemoryMeta } from './meta/memory';
import { SqliteMeta } from './meta/sqlite';
import { mkdirAll } from './mkdir';
import { Pins } from './pins';
import { MetaSnapshots, openSqliteOwned, reconcile, withFsckHint } from './recovery';
import { isMappedTier, type Tier, type TierStats } from './tier';
import { DiskSegmentTier, DiskSyncError, realDiskIo } from './tiers/disk';
import { ShmArenaTier } from './tiers/dram';
import { GpuTier } from './tiers/gpu';
import { MemoryTier } from './tiers/memory';
import { NativeArenaTier } from './tiers/native-dram';
import { DRAM_PAGE_BYTES_DEFAULT } from './constants';
import { nativeBinding } from '../native';
import type { NativeArenaBinding } from '../native/types';
import type { BlockInfo, DramHold, GpuHold, NodeFigures, PinnedName, StoreStats } from './types';
import { validateName } from './names';
import { WriteBack } from './writeback';
import { Writes } from './writes';

export type { StoreConfig, VersionSelector } from './config';
export type { BlockInfo, DramHold, GpuFigures, GpuHold, NodeFigures, PinnedName, StoreStats } from './types';
export { hasStoredData } from './recovery';

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

export class Store {
  readonly keepVersions: number;
  readonly maxBlockBytes: number;
  readonly pinQuotaBytes: number;
  /** The GPU tier, when it runs (see StoreConfig.gpu). */
  readonly gpu: GpuTier | undefined;

  private readonly core: StoreCore;
  private readonly writeBack: WriteBack;
  private readonly dramCache: DramCache;
  private readonly gpuCache: GpuCache | undefined;
  private readonly gpuOffReason: string | undefined;
  private readonly content: Content;
  private readonly catalog: Catalog;
  private readonly writes: Writes;
  private readonly pins: Pins;
  private readonly snapshots: MetaSnapshots;
  private readonly cluster: { node: ClusterNode; copies: PeerCopies } | undefined;
  /** Storage faults injected by CASCADE_FAILPOINTS (tests), shown in stats. */
  private readonly faults: FaultyDiskIo | undefined;

  private constructor(
    readonly dram: Tier,
    readonly disk: Tier,
    readonly meta: MetaEngine,
    private readonly config: StoreConfig,
    parts: { token?: string; gpu: GpuTier | string; remote?: RemoteDram; faults?: FaultyDiskIo },
  ) {
    const gpu = parts.gpu instanceof GpuTier ? parts.gpu : undefined;
    if (typeof parts.gpu === 'string') this.gpuOffReason = parts.gpu; // why openGpu opened none
    const core = new StoreCore(dram, disk, meta, config, gpu);
    this.core = core;
    this.gpu = gpu;
    this.faults = parts.faults;
    this.keepVersions = core.keepVersions;
    this.maxBlockBytes = core.maxBlockBytes;
    this.pinQuotaBytes = core.pinQuotaBytes;
    this.writeBack = new WriteBack(core, () => this.dramCache.evictAhead());
    this.dramCache = new DramCache(core, this.writeBack);
    this.content = new Content(core, this.dramCache, this.writeBack);
    if (gpu) this.gpuCache = new GpuCache(core, gpu, this.dramCache, (v) => this.content.lease(v));
    this.dramCache.gpuCache = this.gpuCache;
    if (config.cluster) {
      const node = new ClusterNode(core, config.cluster, parts.token ?? '');
      const copies = new PeerCopies(core, config.cluster, this.dramCache, parts.remote);
      node.wire({ dramCache: this.dramCache, copies, reclaim: (released) => this.content.reclaim(released), figures: () => this.figures() });
      this.writeBack.synced = (keys) => node.recordPlaces(keys);
      this.cluster = { node, copies };
      this.dramCache.cluster = copies;
      this.content.cluster = this.cluster;
    }
    const node = this.cluster?.node;
    this.catalog = new Catalog(core, this.content, node);
    this.writes = new Writes(core, this.dramCache, this.writeBack, this.content, node);
    this.pins = new Pins(core, this.catalog, this.dramCache, this.writeBack, this.gpuCache, node);
    this.snapshots = new MetaSnapshots(core);
    // Here, not where the tier is opened: a tier handed in (config.tiers) must not lose its blocks unheard.
    disk.subscribe?.({
      moved: (keys) => this.republish(keys),
      lost: (keys) => this.writeBack.requeueLost(new DiskSyncError(keys, new Error('fdatasync failed during compaction'))),
    });
  }

  static async open(config: StoreConfig): Promise<Store> {
    validateConfig(config);
    const cluster = config.cluster;
    const diskDir = cluster ? path.join(cluster.sharedDir, 'nodes', cluster.node) : config.dataDir;
    const log = config.log ?? ((m: string) => process.stderr.write(`cascade: ${m}\n`));
    // Blocks lie there in the clear, whatever their files' modes: only the daemon's user may enter
    // what Cascade creates (a directory that exists keeps its mode).
    mkdirAll(diskDir, 0o700);
    const opened: { close(): Promise<void> }[] = [];
    try {
      const meta = config.metaEngine ?? (config.meta === 'memory' ? new MemoryMeta() : openSqliteOwned(config.dataDir, config.metaGroupCommitMs));
      opened.push(meta);
      const token = cluster ? await joinCluster(cluster) : undefined;
      if (cluster) opened.push({ close: () => cluster.directory.leaveNode(cluster.node, token!) });
      const dram = config.tiers?.dram ?? (await openDram(config));
      opened.push(dram);
      // Tests inject storage faults under a real daemon this way (store/faults.ts); said loudly.
      const faults = config.tiers?.disk ? undefined : failpointsFromEnv(realDiskIo);
      if (faults) log(`FAULT INJECTION ON (CASCADE_FAILPOINTS=${process.env.CASCADE_FAILPOINTS})`);
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
      else if (config.gpu) log(`GPU tier off: ${gpu}`);
      if (dram instanceof NativeArenaTier) dram.setStrictVerify(config.verify === 'sha256');
      let remote: RemoteDram | undefined;
      if (cluster && cluster.remote !== false && dram instanceof NativeArenaTier && dram.capacityBytes > 0) {
        try {
          remote = RemoteDram.open(dram, cluster.node, cluster.directory, cluster.remote ?? {}, log);
        } catch (e) {
          if (cluster.remote?.provider !== undefined) throw e; // asked for by name: an error
          log(`no remote DRAM tier (reads of other nodes' blocks use the shared tier): ${(e as Error).message}`);
        }
        if (remote) opened.splice(opened.indexOf(dram) + 1, 0, remote); // closed before the arena
      }
      const store = new Store(dram, disk, meta, config, { token, gpu, remote, faults });
      const node = store.cluster?.node;
      if (node) {
        await node.watch();
        opened.push({ close: () => node.leave() });
        await node.reconcile();
        node.startHeartbeat();
      } else {
        await reconcile(store.core, (sha, size) => store.dramCache.ensureInDram(sha, size));
      }
      await store.snapshots.start();
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
    return this.cluster ? this.cluster.node.watchNames(listener) : () => undefined;
  }

  /** Whether watchNames() hears other nodes' changes (a cluster node whose watch is running). */
  get namesWatched(): boolean {
    return this.cluster?.node.namesWatched ?? false;
  }

  /** Whether other nodes share this store's namespace (cluster mode). */
  get clustered(): boolean {
    return this.cluster !== undefined;
  }

  /** Where this node's data lies: the data directory, or in a cluster its directory on the shared tier. */
  get dataDir(): string {
    const c = this.config.cluster;
    return c ? path.join(c.sharedDir, 'nodes', c.node) : this.config.dataDir;
  }

  // ---- writes -------------------------------------------------------------------------------------

  /**
   * Commit `data` as a new version of `name`. After it returns the bytes are in memory and queued for disk.
   * `knownSha256` is for a caller that hashed the exact bytes as they arrived (fs/ hashes sequential writes
   * incrementally); it is trusted, so that the bytes are not hashed twice. `ino` names the file the
   * version belongs to (MetaEngine.commit): fs/ passes it; left out, a rewrite keeps the name's.
   */
  put(name: string, data: Uint8Array, knownSha256?: string, ino?: number): Promise<VersionRecord> {
    return this.writes.put(name, data, knownSha256, ino);
  }

  /**
   * Commit a block the native FUSE engine staged and hashed in the DRAM arena (a sealed stage) as a new
   * version of `name`, without copying it: the DRAM tier takes the arena block itself. `owner.taken`
   * says whether the store took the handle (also when this throws afterwards); when it stays false the
   * caller still owns the handle and frees it (freeSealed) or reads it (readSealed).
   */
  putSealed(name: string, block: { handle: number; sizeBytes: number; sha256: string }, ino: number | undefined, owner: { taken: boolean }): Promise<VersionRecord> {
    return this.writes.putSealed(name, block, ino, owner);
  }

  /** Copy a sealed stage's bytes into `target` (its size at least). */
  readSealed(block: { handle: number; sizeBytes: number }, target: Uint8Array): void {
    this.writes.readSealed(block, target);
  }

  /** Free a sealed stage the store did not take. */
  freeSealed(block: { handle: number }): void {
    if (this.dram instanceof NativeArenaTier) this.dram.freeHandle(block.handle);
  }

  /** Make `name` a new version with already-stored content `sha256`, with no data transfer. */
  link(name: string, sha256: string, ino?: number): Promise<VersionRecord> {
    return this.writes.link(name, sha256, ino);
  }

  /** Reserve `count` inode numbers never handed out before (MetaEngine.allocateInodes). */
  async allocateInodes(count: number): Promise<number> {
    this.core.checkOpen();
    return this.meta.allocateInodes(count);
  }

  /** Remove a name and its versions. EPERM while its current content is pinned. */
  delete(name: string): Promise<void> {
    return this.catalog.delete(name);
  }

  /** Atomically make `from`'s current content the newest version of `to` and remove `from`. */
  rename(from: string, to: string): Promise<VersionRecord> {
    return this.catalog.rename(from, to);
  }

  /**
   * Return only when the name's current content and metadata are durable: the block is written and
   * fdatasynced, then the metadata committed durably.
   */
  async sync(name: string): Promise<VersionRecord> {
    this.core.checkOpen();
    validateName(name);
    const cur = await this.core.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    // In a cluster, content this node never stored (committed by another node, then renamed or linked
    // here) is that node's to make durable: the fsync waits until it is on the shared tier.
    const own = !this.cluster || this.core.disk.has(cur.sha256) || this.writeBack.dirty.has(cur.sha256);
    if (own) {
      await this.writeBack.makeDurable([cur.sha256]);
      if (!this.core.disk.has(cur.sha256)) throw new CascadeError('EIO', `content of ${name} was lost by a failed fdatasync`);
    } else {
      await this.cluster?.node.placedElsewhere(name, cur.sha256);
    }
    await this.core.meta.sync();
    return cur;
  }

  /** Everything durable: all dirty blocks written, disk synced, metadata synced. */
  async syncAll(): Promise<void> {
    this.core.checkOpen();
    await this.writeBack.makeDurable(this.writeBack.allPending());
    await this.core.meta.sync();
  }

  /**
   * Whether a new block of this size could be stored now (fs/ checks at close() so that the error reaches
   * the writer; the commit itself happens at the last release). Throws ENOSPC or EFBIG when it could not.
   */
  checkAdmission(sizeBytes: number): void {
    this.core.checkOpen();
    if (sizeBytes > this.core.maxBlockBytes) throw new CascadeError('EFBIG', `${sizeBytes} bytes is over the ${this.core.maxBlockBytes}-byte block limit`);
    this.writeBack.checkDiskRoom(sizeBytes);
  }

  // ---- readers' leases and holds -----------------------------------------------------------------

  /**
   * Keep a version's content readable while a reader holds it, even if the version is trimmed, replaced or
   * deleted meanwhile (an open handle keeps reading the version it opened). Returns the release function.
   */
  lease(v: VersionRecord): () => void {
    this.core.checkOpen();
    return this.content.lease(v);
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
  holdInDram(v: VersionRecord, onLoading?: (handle: number) => void): Promise<DramHold> {
    return this.content.holdInDram(v, onLoading);
  }

  /**
   * Hold a version's content in the GPU tier for a same-node GPU process (user.cascade.cuda_ipc):
   * loaded there now if needed, never evicted nor reclaimed until release(). EOPNOTSUPP without a GPU
   * tier (or a device that cannot export IPC handles), ENOSPC when the tier is full of pinned or held
   * blocks.
   */
  async holdInGpu(v: VersionRecord): Promise<GpuHold> {
    this.core.checkOpen();
    if (!this.gpuCache) throw new CascadeError('EOPNOTSUPP', `no GPU tier: ${this.gpuOffReason}`);
    return this.gpuCache.hold(v);
  }

  /**
   * The native arena handle of content in DRAM now, or undefined (not resident, or no native arena).
   * The native engine opens files by it without asking the store; the handle's generation makes a
   * block evicted meanwhile stale there, so such an open comes back here instead.
   */
  dramHandleOf(sha256: string): number | undefined {
    this.core.checkOpen();
    return this.content.dramHandleOf(sha256);
  }

  /**
   * The DRAM arena's native binding, for the native FUSE engine's write stages and native opens;
   * undefined when the DRAM tier is not the native arena.
   */
  dramArena(): NativeArenaBinding | undefined {
    this.core.checkOpen();
    return this.dram instanceof NativeArenaTier ? this.dram.arenaBinding() : undefined;
  }

  /** The DRAM tier's shared mapping, when it has one (see holdInDram). */
  dramRegion(): { address: bigint; lengthBytes: number; fd: number } | undefined {
    this.core.checkOpen();
    return isMappedTier(this.dram) ? this.dram.region() : undefined;
  }

  // ---- pins ---------------------------------------------------------------------------------------

  isPinned(sha256: string): boolean {
    return this.core.pinned.has(sha256);
  }

  /** Pin the current content of `name` in DRAM. EDQUOT past the pin quota. */
  pin(name: string): Promise<void> {
    return this.pins.pin(name);
  }

  unpin(name: string): Promise<void> {
    return this.pins.unpin(name);
  }

  /** Names whose current content is pinned, in name order, at most `maxNames` of them (`total` counts all). */
  pinnedNames(maxNames: number): Promise<{ names: PinnedName[]; total: number }> {
    return this.pins.pinnedNames(maxNames);
  }

  /**
   * Drop the current content of `name` from DRAM; it stays on disk, and the next read loads it again.
   * False when it was not in DRAM; EPERM while pinned, EBUSY while held (see Pins.evictFromDram).
   */
  evictFromDram(name: string): Promise<boolean> {
    return this.pins.evictFromDram(name);
  }

  // ---- names --------------------------------------------------------------------------------------

  resolve(name: string, which: VersionSelector = {}): Promise<VersionRecord> {
    return this.catalog.resolve(name, which);
  }

  /** What `name` (a path below kv/) is now: a file with its current version, a directory, or neither. */
  lookup(name: string): Promise<{ version?: VersionRecord; dir: boolean; dirMode?: number }> {
    return this.catalog.lookup(name);
  }

  stat(name: string, which: VersionSelector = {}): Promise<BlockInfo> {
    return this.catalog.stat(name, which);
  }

  versions(name: string): Promise<VersionRecord[]> {
    return this.catalog.versions(name);
  }

  /** Keep a name's permission bits (chmod) in the metadata: they survive restarts. ENOENT without the name. */
  setMode(name: string, mode: number): Promise<void> {
    return this.catalog.setMode(name, mode);
  }

  /** Names with a mode kept by setMode(), paged as list() is. */
  modes(options: { after?: string; limit?: number } = {}): Promise<Array<[string, number]>> {
    return this.catalog.modes(options);
  }

  /** Keep a directory made by mkdir (and its mode) in the metadata: it survives restarts, every node sees it. */
  makeDir(name: string, mode: number): Promise<void> {
    return this.catalog.makeDir(name, mode);
  }

  removeDir(name: string): Promise<void> {
    return this.catalog.removeDir(name);
  }

  /** The mode of a directory kept by makeDir(), or undefined. */
  dirMode(name: string): Promise<number | undefined> {
    return this.catalog.dirMode(name);
  }

  /** Directories kept by makeDir() under a prefix, with their modes, paged as list() is. */
  dirs(prefix: string, options: { after?: string; limit?: number } = {}): Promise<Array<[string, number]>> {
    return this.catalog.dirs(prefix, options);
  }

  /** Names under a prefix (e.g. `model/dir/`), paged. */
  list(prefix: string, options: { after?: string; limit?: number } = {}): Promise<string[]> {
    return this.catalog.list(prefix, options);
  }

  // ---- reads --------------------------------------------------------------------------------------

  /** Blocks the native engine opened by arena handle: DRAM hits, and recent uses for eviction. */
  noteDramOpens(handles: readonly number[]): void {
    if (this.core.closed || !(this.core.dram instanceof NativeArenaTier)) return;
    for (const h of handles) {
      this.core.counters.hits.dram++; // served from DRAM, whatever happened to the block since
      const sha = this.core.dram.keyOfHandle(h);
      if (sha === undefined) continue; // evicted since: no recency to keep
      this.core.eviction.accessed(sha);
      const size = this.core.dram.sizeOf(sha);
      if (size !== undefined) this.gpuCache?.noteRead(sha, size, 0);
    }
  }

  /** The whole block (a copy the caller owns). */
  async get(name: string, which: VersionSelector = {}): Promise<Buffer> {
    const v = await this.catalog.resolve(name, which);
    const out = Buffer.allocUnsafe(v.sizeBytes);
    const n = await this.dramCache.readBlock(v.sha256, v.sizeBytes, 0, out);
    assert(n === v.sizeBytes, 'whole-block read fills the block');
    return out;
  }

  /** Fill `target` from `offsetBytes` of a version's content; returns the bytes filled (0 at or past the end). */
  async read(name: string, offsetBytes: number, target: Uint8Array, which: VersionSelector = {}): Promise<number> {
    const v = await this.catalog.resolve(name, which);
    return this.readContent(v, offsetBytes, target);
  }

  /** Read from a resolved version (fs/ keeps the version an open handle saw). */
  async readContent(v: VersionRecord, offsetBytes: number, target: Uint8Array): Promise<number> {
    this.core.checkOpen();
    if (!Number.isSafeInteger(offsetBytes) || offsetBytes < 0) throw new CascadeError('EINVAL', 'offset must be a non-negative integer');
    return this.dramCache.readBlock(v.sha256, v.sizeBytes, offsetBytes, target);
  }

  /** Load a name's current content into DRAM (no-op when it is there). */
  async warmup(name: string): Promise<void> {
    const v = await this.catalog.resolve(name);
    await this.core.locks.with(v.sha256, () => this.dramCache.ensureInDram(v.sha256, v.sizeBytes));
  }

  // ---- figures and life cycle ---------------------------------------------------------------------

  async stats(): Promise<StoreStats> {
    this.core.checkOpen();
    const t = await this.meta.totals();
    const disk = this.disk as Partial<DiskSegmentTier>;
    const k = this.core.counters;
    const c = this.config.cluster;
    return {
      tiers: this.tierStats(),
      hits: { ...k.hits },
      misses: k.misses,
      evictions: k.evictions,
      evictionsAhead: k.evictionsAhead,
      promotions: k.promotions,
      promotionsRefused: this.core.mover.refused,
      demotions: k.demotions,
      flushedBlocks: k.flushedBlocks,
      dirtyBlocks: this.writeBack.dirty.size,
      dedup: { hits: k.dedupHits, savedBytes: k.dedupSavedBytes, uniqueBytes: t.uniqueBytes, logicalBytes: t.logicalBytes },
      pinned: { blocks: this.core.pinned.size, bytes: this.core.pinnedBytes, quotaBytes: this.pinQuotaBytes },
      names: t.names,
      versions: t.versions,
      recovery: {
        lostVersions: k.lostVersions,
        orphanBlocksRemoved: k.orphanBlocksRemoved,
        quarantined: disk.recovery?.quarantined ?? 0,
        journalReplayed: this.meta instanceof SqliteMeta ? this.meta.replayedAtOpen : 0,
      },
      diskSyncFailures: k.diskSyncFailures,
      diskAppends: disk.appendedBytes?.() ?? { directBytes: 0, bufferedBytes: 0 },
      gpu: this.gpuCache?.figures() ?? gpuOffFigures(this.gpuOffReason),
      faultsInjected: this.faults ? { ...this.faults.injected } : undefined,
      cluster: c
        ? {
            node: c.node,
            sharedLoads: k.sharedLoads,
            sharedLoadBytes: k.sharedLoadBytes,
            offlineResolves: k.offlineResolves,
            remote: this.cluster?.copies.remote?.stats(),
            nodes: await c.directory.nodeStats(),
          }
        : undefined,
    };
  }

  private tierStats(): TierStats[] {
    return this.gpu ? [this.gpu.stats(), this.dram.stats(), this.disk.stats()] : [this.dram.stats(), this.disk.stats()];
  }

  /** This node's figures for the cluster directory. */
  private figures(): NodeFigures {
    const k = this.core.counters;
    return {
      atMs: Date.now(),
      host: os.hostname(),
      pid: process.pid,
      tiers: this.tierStats(),
      hits: { ...k.hits },
      misses: k.misses,
      promotions: k.promotions,
      dedupHits: k.dedupHits,
      pinnedBytes: this.core.pinnedBytes,
      sharedLoads: k.sharedLoads,
      sharedLoadBytes: k.sharedLoadBytes,
      remote: this.cluster?.copies.remote?.stats(),
    };
  }

  /** Cluster mode: record the current places of these blocks (after compaction moved them). */
  republish(keys: string[]): void {
    this.cluster?.node.republish(keys);
  }

  /** Wait for background work (flusher and mover) to finish; for tests and benchmarks. */
  async idle(): Promise<void> {
    const mover = this.core.mover;
    while (this.writeBack.flusher || mover.pending() > 0 || this.dramCache.evictingAhead) {
      if (this.writeBack.flusher) await this.writeBack.flusher;
      await mover.idle();
      if (this.dramCache.evictingAhead) await this.dramCache.evictingAhead;
    }
  }

  /** Persist everything (a clean close loses nothing) and release the tiers and the metadata engine. */
  async close(): Promise<void> {
    const core = this.core;
    if (core.closed || core.closing) return;
    core.closing = true;
    this.writeBack.stop();
    this.cluster?.node.stopHeartbeat();
    this.snapshots.stop();
    try {
      await core.mover.idle();
      await this.dramCache.evictingAhead;
      await this.writeBack.makeDurable(this.writeBack.allPending());
      await this.meta.sync();
      await this.snapshots.pending;
      if (this.config.metaSnapshotOnClose !== false) await this.snapshots.snapshot(false);
    } finally {
      core.closed = true;
      await this.cluster?.copies.remote?.close().catch((e: unknown) => core.warn(`closing the remote DRAM tier: ${String(e)}`));
      await this.gpu?.close().catch((e: unknown) => core.warn(`closing the GPU tier: ${String(e)}`));
      await this.dram.close();
      await this.disk.close();
      await this.cluster?.node.leave();
      await this.meta.close();
    }
  }
}

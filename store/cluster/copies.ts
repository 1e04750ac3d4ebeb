/**
 * A cluster node's copies of other nodes' blocks: fetched from a peer's DRAM over the fabric (kept,
 * or borrowed for as long as they are read), or read from another node's record on the shared tier.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { LruMap } from '../policy/lru-map';
import type { StoreConfig } from '../config';
import type { StoreCore } from '../core';
import type { ClusterCopies, DramCache } from '../dram-cache';
import { CascadeError, isCascadeError } from '../errors';
import type { BlockPlacement } from '../meta';
import { readRecordAt } from '../tiers/segment-format';
import { NativeArenaTier } from '../tiers/native-dram';
import type { RemoteDram } from './remote';

/** A borrowed copy read request by request (no hold) stays this long after its last read. */
const BORROWED_GRACE_MS = 1_000;
/** Blocks whose places on the shared tier a node remembers (reads still check every byte). */
const PLACEMENT_CACHE_ENTRIES = 65_536;
/** Place lookups prefetchPlaces keeps in flight at most (past it, the first read looks a block up). */
const LOCATING_MAX = 1_024;
/**
 * How long a read waits for the shared-tier place of a block that has none yet while a peer holds it
 * in DRAM: its writer committed it ahead of the segment write (placesAfterCommit) and records the
 * place a few milliseconds later, unless it died first (the block was not fsynced: EIO).
 */
const PLACE_WAIT_MS = 1_000;

export type ClusterConfig = NonNullable<StoreConfig['cluster']>;

export class PeerCopies implements ClusterCopies {
  /**
   * Where other nodes hold blocks, as last looked up. An open handle's block is looked up at open,
   * so the handle keeps reading while Redis is away; a stale entry fails its check and is looked up
   * again.
   */
  private readonly placements = new LruMap<string, BlockPlacement[]>(PLACEMENT_CACHE_ENTRIES);
  /** Blocks whose places prefetchPlaces is asking for now. */
  private readonly locating = new Set<string>();
  /**
   * Copies fetched from a peer's DRAM that were not read often enough here to keep (RemotePromotion):
   * dropped when the last reader lets go, and never advertised to other nodes.
   */
  private readonly borrowed = new Set<string>();
  /** Borrowed copies read without a hold: dropped BORROWED_GRACE_MS after their last read. */
  private readonly borrowedTimers = new Map<string, NodeJS.Timeout>();

  constructor(
    private readonly core: StoreCore,
    private readonly c: ClusterConfig,
    private readonly dramCache: DramCache,
    /** The remote DRAM tier (undefined: off, or no libfabric in the addon). */
    readonly remote: RemoteDram | undefined,
  ) {}

  get remoteOn(): boolean {
    return this.remote !== undefined;
  }

  /** Whether this node's DRAM copy is borrowed (not advertised, dropped after its last read). */
  isBorrowed(sha: string): boolean {
    return this.borrowed.has(sha);
  }

  readWithoutHold(sha: string): void {
    if (this.borrowed.has(sha)) this.dropBorrowedLater(sha);
  }

  /** The last DRAM hold of a block went: a borrowed copy goes with it. */
  released(sha: string): void {
    if (this.borrowed.has(sha)) this.dropBorrowed(sha);
  }

  keep(sha: string): void {
    if (this.borrowed.delete(sha)) this.remote?.advertise(sha, true);
  }

  advertise(sha: string): void {
    this.remote?.advertise(sha, true);
  }

  evicted(sha: string): void {
    if (!this.borrowed.delete(sha)) this.remote?.advertise(sha, false);
  }

  /** The content was reclaimed. */
  forget(sha: string): void {
    this.borrowed.delete(sha);
    this.placements.delete(sha);
  }

  /** Off an open's path: where to read a block this node lacks, so the handle does not depend on Redis later. */
  prefetchPlaces(sha: string): void {
    // One look per block at a time (a lookup and the open after it both ask).
    if (this.placements.has(sha) || this.locating.has(sha) || this.locating.size >= LOCATING_MAX) return;
    this.locating.add(sha);
    this.c.directory
      .locate(sha)
      .then(
        (places) => places.length > 0 && this.placements.set(sha, places),
        () => undefined, // the first read looks it up again, and reports the failure
      )
      .finally(() => this.locating.delete(sha));
  }

  /**
   * Cluster, remote tier on: fetch a block this node lacks from a peer's DRAM into DRAM here. false
   * when no peer could (or no room): the caller reads the shared tier. Under the block's lock.
   */
  async fetch(sha: string, sizeBytes: number, reading: boolean, onLoading?: (handle: number) => void): Promise<boolean> {
    const remote = this.remote;
    if (!remote || this.core.disk.has(sha) || !(this.core.dram instanceof NativeArenaTier) || !(await this.dramCache.makeRoom(sizeBytes))) return false;
    if (!(await remote.fetch(this.core.dram, sha, sizeBytes, onLoading))) return false;
    this.core.sharedClean.add(sha);
    this.core.admit(sha);
    if (reading) this.core.counters.hits.remote++;
    if (!reading || remote.remoteRead(sha)) remote.advertise(sha, true);
    else this.borrowed.add(sha);
    return true;
  }

  private dropBorrowedLater(sha: string): void {
    clearTimeout(this.borrowedTimers.get(sha));
    const t = setTimeout(() => {
      this.borrowedTimers.delete(sha);
      if (!this.core.dramHolds.has(sha)) this.dropBorrowed(sha);
    }, BORROWED_GRACE_MS);
    t.unref();
    this.borrowedTimers.set(sha, t);
  }

  /** A borrowed copy nobody reads any more goes (it was read remotely too rarely to keep). */
  private dropBorrowed(sha: string): void {
    clearTimeout(this.borrowedTimers.get(sha));
    this.borrowedTimers.delete(sha);
    void this.core.locks
      .with(sha, async () => {
        if (!this.borrowed.has(sha) || this.core.dramHolds.has(sha) || this.core.pinned.has(sha) || !this.core.dram.has(sha)) return;
        this.borrowed.delete(sha);
        await this.core.dram.delete(sha);
        this.core.eviction.removed(sha);
        this.core.sharedClean.delete(sha);
      })
      .catch((e: unknown) => this.core.warn(`dropping a borrowed copy of ${sha}: ${String(e)}`));
  }

  /**
   * Cluster: a block this node lacks, filled natively from another node's record on the shared tier
   * (Arena::FillRecord: its header checked, each piece published to readers as it passes its CRC-32C,
   * the whole SHA-256 checked before it joins DRAM), as nativeDiskLoad does for this node's own disk.
   * undefined where the block must come through a buffer (no arena, GPU copy, this node's own disk).
   */
  nativeSharedLoad(sha: string, sizeBytes: number, onLoading?: (handle: number) => void): (() => Promise<void>) | undefined {
    const c = this.c;
    const dram = this.core.dram;
    const arena = dram instanceof NativeArenaTier ? dram.arenaBinding() : undefined;
    if (arena === undefined || this.core.disk.has(sha) || this.core.gpu?.has(sha)) return undefined;
    return () =>
      this.fromPlaces(
        sha,
        sizeBytes,
        (places) => places.filter((p) => p.node !== c.node),
        async (p) => {
          const fh = await fs.promises.open(path.join(c.sharedDir, p.file), 'r');
          try {
            const fd = fh.fd;
            await (dram as NativeArenaTier).adopt(sha, sizeBytes, async (handle) => {
              const filling = arena.fillRecordAsync(handle, fd, p.offsetBytes, sha, 0); // marks it filling first
              onLoading?.(handle);
              await filling;
              return sha; // the fill checked the bytes' SHA-256
            });
          } finally {
            await fh.close().catch(() => undefined);
          }
        },
        // A copy that moved, went or fails its checks (CascadeError, native or fs codes alike).
        (e) => ['ESTALE', 'ECORRUPT', 'ENOENT', 'EIO'].includes((e as { code?: unknown }).code as string),
      );
  }

  /** Read a block from another node's segment file, checked against its SHA-256 (see fromPlaces). */
  loadFromShared(sha: string, sizeBytes: number): Promise<Buffer> {
    const c = this.c;
    return this.fromPlaces(
      sha,
      sizeBytes,
      // Other nodes' copies first: this node's own would be in its disk tier already.
      (places) => places.sort((a, b) => Number(a.node === c.node) - Number(b.node === c.node)),
      (p) => readRecordAt({ file: path.join(c.sharedDir, p.file), offsetBytes: p.offsetBytes, sizeBytes }, sha),
      (e) => isCascadeError(e, 'ESTALE') || isCascadeError(e, 'ECORRUPT'),
    );
  }

  /**
   * Load a block from the first of its places on the shared tier (of its size, chosen and ordered by
   * `order`) that `load` reads; a copy that moved (compaction) or fails its checks (an error `skippable`
   * accepts) is skipped. The places are looked up twice (a node may be republishing a
   * move) before the load fails with EIO. Never wrong bytes.
   */
  private async fromPlaces<T>(
    sha: string,
    sizeBytes: number,
    order: (places: BlockPlacement[]) => BlockPlacement[],
    load: (p: BlockPlacement) => Promise<T>,
    skippable: (e: unknown) => boolean,
  ): Promise<T> {
    const problems: string[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const cached = attempt === 0 ? this.placements.get(sha) : undefined;
      const found = cached ?? (await this.locateWaiting(sha, PLACE_WAIT_MS, true));
      if (found.length > 0) this.placements.set(sha, found);
      const places = order(found.filter((p) => p.sizeBytes === sizeBytes));
      for (const p of places) {
        try {
          const got = await load(p);
          this.core.counters.sharedLoads++;
          this.core.counters.sharedLoadBytes += sizeBytes;
          return got;
        } catch (e) {
          if (!skippable(e)) throw e;
          problems.push(`${p.node}: ${(e as Error).message}`);
        }
      }
      this.placements.delete(sha);
      if (places.length === 0 && cached === undefined) break;
    }
    this.core.counters.misses++;
    throw new CascadeError('EIO', `content ${sha} has no readable copy on the shared tier${problems.length ? ` (${problems.join('; ')})` : ''}`);
  }

  /**
   * A block's places on the shared tier; while it has none, asked again for up to `waitMs`: its writer
   * committed it ahead of the segment append (placesAfterCommit) and records the place shortly. With
   * `whileHeld`, only while a peer holds it in DRAM (a writer that died first never will).
   */
  async locateWaiting(sha: string, waitMs: number, whileHeld: boolean): Promise<BlockPlacement[]> {
    const deadline = Date.now() + waitMs;
    for (let pauseMs = 2; ; pauseMs = Math.min(pauseMs * 2, 100)) {
      const found = await this.c.directory.locate(sha);
      if (found.length > 0 || Date.now() >= deadline) return found;
      if (whileHeld && !(await this.c.directory.dramHolders(sha)).some((n) => n !== this.c.node)) return found;
      await new Promise((r) => setTimeout(r, pauseMs));
    }
  }

}

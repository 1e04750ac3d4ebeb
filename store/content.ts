/**
 * The life of stored content: readers' leases (an open handle keeps reading the version it opened)
 * and DRAM holds (same-node clients read the arena directly), and reclamation of content once no
 * retained version references it.
 */
import type { StoreCore } from './core';
import type { DramCache } from './dram-cache';
import { HOLD_ATTEMPTS_MAX } from './gpu-cache';
import { assert, CascadeError } from './errors';
import type { VersionRecord } from './meta';
import { isMappedTier, type MappedTier } from './tier';
import { NativeArenaTier } from './tiers/native-dram';
import type { DramHold } from './types';
import type { WriteBack } from './writeback';
import type { PeerCopies } from './cluster/copies';
import type { ClusterNode } from './cluster/node';

export class Content {
  /** Set by the Store in a cluster. */
  cluster: { node: ClusterNode; copies: PeerCopies } | undefined;

  constructor(
    private readonly core: StoreCore,
    private readonly dramCache: DramCache,
    private readonly writeBack: WriteBack,
  ) {}

  /**
   * The native arena handle of content in DRAM now, or undefined (not resident, or no native arena).
   * The native engine opens files by it without asking the store; the handle's generation makes a
   * block evicted meanwhile stale there, so such an open comes back here instead.
   */
  dramHandleOf(sha256: string): number | undefined {
    return this.core.dram instanceof NativeArenaTier ? this.core.dram.handleOf(sha256) : undefined;
  }

  /**
   * Keep a version's content readable while a reader holds it, even if the version is trimmed, replaced or
   * deleted meanwhile (an open handle keeps reading the version it opened). Returns the release function.
   */
  lease(v: VersionRecord): () => void {
    this.core.checkOpen();
    const sha = v.sha256;
    this.core.leases.set(sha, (this.core.leases.get(sha) ?? 0) + 1);
    if (this.cluster && !this.core.dram.has(sha) && !this.core.disk.has(sha)) this.cluster.copies.prefetchPlaces(sha);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.core.leases.get(sha) ?? 1) - 1;
      if (n > 0) {
        this.core.leases.set(sha, n);
        return;
      }
      this.core.leases.delete(sha);
      if (this.core.deferredReclaim.delete(sha) && !this.core.closed && !this.core.closing) {
        void this.reclaim([sha]).catch((e) => this.core.warn(`reclaim of ${sha} failed: ${String(e)}`));
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
    this.core.checkOpen();
    const dram = this.core.dram;
    if (!isMappedTier(dram)) throw new CascadeError('EOPNOTSUPP', 'the DRAM tier is not a shared mapping (native addon off?)');
    const sha = v.sha256;
    const releaseLease = this.lease(v);
    try {
      // A block the flusher is writing to disk is whole in DRAM: held at once rather than after its
      // disk write (a read right after a write would wait for it).
      const flushing = this.writeBack.lockedForFlush(sha) ? this.holdInDramNow(dram, sha, v.sizeBytes) : undefined;
      const held =
        flushing ??
        (await this.core.locks.with(sha, async () => {
          for (let attempt = 0; ; attempt++) {
            await this.dramCache.ensureInDram(sha, v.sizeBytes, true, true, onLoading);
            // Background eviction may run between ensureInDram's return and here: check, then hold
            // with nothing awaited in between.
            const now = this.holdInDramNow(dram, sha, v.sizeBytes);
            if (now !== undefined) return now;
            if (attempt >= HOLD_ATTEMPTS_MAX) throw new CascadeError('EIO', `content ${sha} keeps leaving DRAM before it can be held (DRAM too small for the readers?)`);
          }
        }));
      let released = false;
      return {
        version: v,
        ...held,
        release: () => {
          if (released) return;
          released = true;
          const n = (this.core.dramHolds.get(sha) ?? 1) - 1;
          if (n > 0) this.core.dramHolds.set(sha, n);
          else this.core.dramHolds.delete(sha);
          if (n <= 0) this.cluster?.copies.released(sha);
          releaseLease();
        },
      };
    } catch (e) {
      releaseLease();
      throw e;
    }
  }

  /** A hold of content that is in DRAM now (nothing awaited between the check and the hold), else undefined. */
  private holdInDramNow(dram: MappedTier, sha: string, sizeBytes: number): { extents: Array<[number, number]>; arenaHandle: number | undefined } | undefined {
    const e = dram.extentsOf(sha);
    if (e === undefined) return undefined;
    assert(e.sizeBytes === sizeBytes, 'held content is in DRAM with its size');
    this.core.dramHolds.set(sha, (this.core.dramHolds.get(sha) ?? 0) + 1);
    return { extents: e.extents, arenaHandle: this.dramHandleOf(sha) };
  }

  /** Remove content whose last reference went away, unless something referenced it again meanwhile. */
  async reclaim(released: string[]): Promise<void> {
    for (const sha of released) {
      await this.core.locks.with(sha, async () => {
        if (await this.core.meta.block(sha)) return;
        if (this.core.leases.has(sha)) {
          this.core.deferredReclaim.add(sha); // an open handle still reads it; reclaimed at its release
          return;
        }
        await this.dropContent(sha);
      });
    }
  }

  private async dropContent(sha: string): Promise<void> {
    const pinnedSize = this.core.pinned.get(sha);
    if (pinnedSize !== undefined) {
      this.core.pinned.delete(sha);
      this.core.pinnedBytes -= pinnedSize;
    }
    this.writeBack.forget(sha);
    this.core.promotion.forget(sha);
    if (this.core.dram.has(sha)) {
      await this.core.dram.delete(sha);
      this.core.eviction.removed(sha);
    }
    this.core.sharedClean.delete(sha);
    this.cluster?.node.forget(sha);
    if (this.core.gpu?.has(sha)) {
      await this.core.gpu.delete(sha);
      this.core.gpuEviction?.removed(sha);
    }
    this.core.gpuPromotion?.forget(sha);
    await this.core.disk.delete(sha);
  }
}

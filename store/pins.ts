/**
 * Pins: content kept in DRAM (and first in line for the GPU tier) within the pin quota, recorded in
 * the metadata so that it survives restarts; in a cluster each pin also keeps a replica on another
 * node. And the explicit eviction of a name's content from DRAM.
 */
import type { Catalog } from './catalog';
import type { StoreCore } from './core';
import type { DramCache } from './dram-cache';
import { CascadeError } from './errors';
import type { GpuCache } from './gpu-cache';
import { validateName } from './names';
import type { PinnedName } from './types';
import type { WriteBack } from './writeback';
import type { ClusterNode } from './cluster/node';

/** Names pinnedNames() reads per page (then lets other requests in). */
const PINNED_NAMES_PAGE = 10_000;

export class Pins {
  constructor(
    private readonly core: StoreCore,
    private readonly catalog: Catalog,
    private readonly dramCache: DramCache,
    private readonly writeBack: WriteBack,
    private readonly gpuCache: GpuCache | undefined,
    private readonly cluster: ClusterNode | undefined,
  ) {}

  private unpinLocally(sha: string): void {
    this.core.unpinLocally(sha);
    this.cluster?.unpinned(sha);
  }

  /** Pin the current content of `name` in DRAM. EDQUOT past the pin quota. */
  async pin(name: string): Promise<void> {
    this.core.checkOpen();
    validateName(name);
    const cur = await this.core.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    await this.core.locks.with(cur.sha256, async () => {
      if (this.core.pinned.has(cur.sha256)) return;
      if (this.core.pinnedBytes + cur.sizeBytes > this.core.pinQuotaBytes) {
        throw new CascadeError(
          'EDQUOT',
          `pinning ${cur.sizeBytes} bytes would exceed the pin quota (${this.core.pinnedBytes} of ${this.core.pinQuotaBytes} bytes pinned)`,
        );
      }
      await this.dramCache.ensureInDram(cur.sha256, cur.sizeBytes);
      await this.core.meta.setPinned(cur.sha256, true);
      this.core.pinLocally(cur.sha256, cur.sizeBytes);
      // Evicted while the pin was being recorded (background eviction): load it again, for good now.
      if (!this.core.dram.has(cur.sha256)) await this.dramCache.ensureInDram(cur.sha256, cur.sizeBytes);
    });
    this.gpuCache?.offer(cur.sha256, cur.sizeBytes); // pinned prefixes are the GPU tier's first choice
    // A pinned prefix keeps a second DRAM copy on another node, so losing one node loses no pin.
    this.cluster?.askReplica(cur.sha256).catch((e: unknown) => this.core.warn(`asking for a replica of pinned ${cur.sha256}: ${String(e)}`));
  }

  async unpin(name: string): Promise<void> {
    this.core.checkOpen();
    validateName(name);
    const cur = await this.core.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    await this.core.locks.with(cur.sha256, async () => {
      const size = this.core.pinned.get(cur.sha256);
      // In a cluster the pin may be another node's: the shared row is what counts.
      if (size === undefined) {
        if (this.cluster && (await this.cluster.pinnedAnywhere(cur.sha256))) await this.core.meta.setPinned(cur.sha256, false);
        return;
      }
      await this.core.meta.setPinned(cur.sha256, false);
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
    this.core.checkOpen();
    const names: PinnedName[] = [];
    let total = 0;
    if (this.core.pinned.size === 0) return { names, total };
    for (let after: string | undefined; ; ) {
      const page = await this.core.meta.list('', { after, limit: PINNED_NAMES_PAGE });
      for (const name of page) {
        const v = await this.core.meta.current(name);
        if (v === undefined || !this.core.pinned.has(v.sha256)) continue; // removed meanwhile, or not pinned
        total++;
        if (names.length < maxNames) names.push({ name, sha256: v.sha256, sizeBytes: v.sizeBytes });
      }
      if (page.length < PINNED_NAMES_PAGE || this.core.closing) break;
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
    this.core.checkOpen();
    validateName(name);
    const v = await this.catalog.resolve(name);
    const sha = v.sha256;
    const pinnedError = () => new CascadeError('EPERM', `${name} is pinned; unpin it first`);
    if (this.core.pinned.has(sha)) throw pinnedError();
    // Outside the block's lock: flushing takes its own.
    if (this.writeBack.pending(sha)) await this.writeBack.makeDurable([sha]);
    // Under the block's lock, as pin() loads it: a concurrent pin either sees it evicted and loads it
    // again, or pins it first and this refuses.
    return this.core.locks.with(sha, async () => {
      if (!this.core.dram.has(sha)) return false;
      if (this.core.pinned.has(sha)) throw pinnedError();
      const holds = this.core.dramHolds.get(sha);
      if (holds !== undefined) throw new CascadeError('EBUSY', `${name} is held in DRAM by ${holds} open reader(s) that read its memory directly; close them first`);
      // Dirty again already (written meanwhile), or in a cluster a copy borrowed from another node's
      // DRAM, which goes by itself a second after its last read.
      if (!this.dramCache.evictable(sha)) throw new CascadeError('EBUSY', `${name} has no durable copy outside this node's DRAM right now; try again in a second`);
      await this.dramCache.evict(sha);
      return true;
    });
  }
}

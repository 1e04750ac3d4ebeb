/**
 * Writes: a block in (from a buffer, from a native write stage, or by reference to stored content),
 * its SHA-256, global or local dedup, admission to DRAM (or to disk when DRAM is full of blocks that
 * must stay), and the metadata commit that makes it the name's new version.
 */
import type { Content } from './content';
import { allocLarge } from './copy';
import type { StoreCore } from './core';
import type { DramCache } from './dram-cache';
import { CascadeError } from './errors';
import { sha256Hex } from './hash';
import type { VersionRecord } from './meta';
import { validateName, validateSha256 } from './names';
import { NativeArenaTier } from './tiers/native-dram';
import type { WriteBack } from './writeback';
import type { ClusterNode } from './cluster/node';

export class Writes {
  constructor(
    private readonly core: StoreCore,
    private readonly dramCache: DramCache,
    private readonly writeBack: WriteBack,
    private readonly content: Content,
    private readonly cluster: ClusterNode | undefined,
  ) {}

  /**
   * Commit `data` as a new version of `name`. After it returns the bytes are in memory and queued for disk.
   * `knownSha256` is for a caller that hashed the exact bytes as they arrived (fs/ hashes sequential writes
   * incrementally); it is trusted, so that the bytes are not hashed twice. `ino` names the file the
   * version belongs to (MetaEngine.commit): fs/ passes it; left out, a rewrite keeps the name's.
   */
  async put(name: string, data: Uint8Array, knownSha256?: string, ino?: number): Promise<VersionRecord> {
    this.core.checkOpen();
    validateName(name);
    if (!(data instanceof Uint8Array)) throw new CascadeError('EINVAL', 'data must be a Buffer or Uint8Array');
    if (data.length > this.core.maxBlockBytes) {
      throw new CascadeError('EINVAL', `block of ${data.length} bytes is over the ${this.core.maxBlockBytes}-byte limit`);
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
    this.core.checkOpen();
    validateName(name);
    const sha = validateSha256(block.sha256);
    const size = block.sizeBytes;
    if (!Number.isSafeInteger(size) || size < 0 || size > this.core.maxBlockBytes) {
      throw new CascadeError('EINVAL', `block of ${size} bytes is over the ${this.core.maxBlockBytes}-byte limit`);
    }
    const dram = this.core.dram;
    return this.commitContent(name, sha, size, ino, async () => {
      if (dram instanceof NativeArenaTier) {
        this.writeBack.checkDiskRoom(size);
        if (dram.adoptBlock(sha, block.handle, size)) {
          // The stage becomes the DRAM copy (no copy), dirty until it is on disk.
          owner.taken = true;
          this.core.admit(sha);
          this.writeBack.markDirty(sha, size);
          // A cluster node without the remote tier: other nodes read it from the segments once it is
          // committed, so it is written out now, from DRAM, before the commit.
          if (this.cluster && !this.cluster.placesAfterCommit) await this.writeBack.flushLocked(sha);
          else this.writeBack.kickFlusher();
          this.dramCache.evictAhead();
          return;
        }
      }
      // The tier had the content already: a copy.
      const data = allocLarge(size);
      this.readSealed(block, data);
      await this.ingest(sha, data);
    });
  }

  /** Make `name` a new version with already-stored content `sha256`, with no data transfer. */
  async link(name: string, sha256: string, ino?: number): Promise<VersionRecord> {
    this.core.checkOpen();
    validateName(name);
    validateSha256(sha256);
    // In a cluster, content any node stores can be linked (the commit checks it is still stored).
    const size = this.core.residentSize(sha256) ?? (this.cluster ? (await this.core.meta.block(sha256))?.sizeBytes : undefined);
    if (size === undefined) throw new CascadeError('ENOENT', `no stored content ${sha256}`);
    return this.commitContent(name, sha256, size, ino, async () => {
      // Only in DRAM (a cluster node's cached copy of another node's block): store it here first.
      const data = Buffer.allocUnsafe(size);
      if (!this.core.dram.has(sha256) || (await this.core.dram.read(sha256, 0, data)) !== size) {
        throw new CascadeError('ENOENT', `content ${sha256} was reclaimed`);
      }
      await this.ingest(sha256, data);
    });
  }

  /** Copy a sealed stage's bytes into `target` (its size at least). */
  readSealed(block: { handle: number; sizeBytes: number }, target: Uint8Array): void {
    this.core.checkOpen();
    const dram = this.core.dram;
    if (!(dram instanceof NativeArenaTier)) throw new CascadeError('EOPNOTSUPP', 'no native arena');
    const n = dram.readHandle(block.handle, target.subarray(0, block.sizeBytes));
    if (n !== block.sizeBytes) throw new CascadeError('EIO', `sealed block: ${n} of ${block.sizeBytes} bytes read`);
  }

  /** Under the content's lock, so reclamation of the same content cannot interleave. */
  private async commitContent(name: string, sha: string, sizeBytes: number, ino: number | undefined, ingest: () => Promise<void>): Promise<VersionRecord> {
    if (this.cluster) return this.cluster.commit(name, sha, sizeBytes, ino, ingest);
    const core = this.core;
    const result = await core.locks.with(sha, async () => {
      if (core.residentSize(sha) === undefined) {
        await ingest();
      } else {
        core.counters.dedupHits++;
        core.counters.dedupSavedBytes += sizeBytes;
      }
      return core.meta.commit(name, sha, sizeBytes, core.now(), core.keepVersions, ino);
    });
    await this.content.reclaim(result.released);
    return result.version;
  }

  /** Store new content on this node: a DRAM copy when room can be made, else written through to disk. */
  private async ingest(sha: string, data: Uint8Array): Promise<void> {
    const { core, dramCache, writeBack } = this;
    writeBack.checkDiskRoom(data.length);
    if (this.cluster && !this.cluster.placesAfterCommit) {
      // Without the remote tier other nodes read a block from this node's segments as soon as it is
      // committed, so it is written there before the commit (fdatasync comes from the flusher, or
      // from fsync); then a clean DRAM copy.
      await writeBack.writeNow(sha, data);
      if ((await dramCache.makeRoom(data.length)) && (await dramCache.dramWriteRaced(sha, data))) {
        core.admit(sha);
        dramCache.evictAhead();
      } else {
        core.counters.demotions++;
        await writeBack.durableFromBuffer(sha, data); // no DRAM copy: the caller's buffer is the only other one
      }
      return;
    }
    if ((await dramCache.makeRoom(data.length)) && (await dramCache.dramWriteRaced(sha, data))) {
      core.admit(sha);
      writeBack.markDirty(sha, data.length);
      writeBack.kickFlusher();
      dramCache.evictAhead();
      return;
    }
    // DRAM is full of pinned or not-yet-durable blocks: write through to disk, durably, so nothing is lost.
    core.counters.demotions++;
    await writeBack.durableFromBuffer(sha, data);
  }
}

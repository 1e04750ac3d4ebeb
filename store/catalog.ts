/**
 * The catalogue of names and versions: resolving a name (current, by number, by time), what a path
 * is (file or directory), directories and modes kept as metadata, listings, removal and rename.
 */
import type { VersionSelector } from './config';
import { LIST_PAGE_MAX } from './constants';
import type { Content } from './content';
import type { StoreCore } from './core';
import { CascadeError } from './errors';
import type { VersionRecord } from './meta';
import { validateDirName, validateName } from './names';
import type { BlockInfo } from './types';
import type { ClusterNode } from './cluster/node';

export class Catalog {
  constructor(
    private readonly core: StoreCore,
    private readonly content: Content,
    private readonly cluster: ClusterNode | undefined,
  ) {}

  async resolve(name: string, which: VersionSelector = {}): Promise<VersionRecord> {
    this.core.checkOpen();
    validateName(name);
    let v: VersionRecord | undefined;
    if (which.version !== undefined) {
      if (!Number.isSafeInteger(which.version) || which.version < 1) throw new CascadeError('EINVAL', 'version must be an integer >= 1');
      v = await this.core.meta.version(name, which.version);
    } else if (which.atMs !== undefined) {
      if (!Number.isFinite(which.atMs)) throw new CascadeError('EINVAL', 'atMs must be a finite number');
      v = await this.core.meta.versionAt(name, which.atMs);
    } else {
      v = await this.currentVersion(name);
    }
    if (!v) throw new CascadeError('ENOENT', `no such ${which.version !== undefined || which.atMs !== undefined ? 'version of ' : ''}name: ${name}`);
    return v;
  }

  async versions(name: string): Promise<VersionRecord[]> {
    this.core.checkOpen();
    validateName(name);
    return this.core.meta.versions(name);
  }

  /** Keep a name's permission bits (chmod) in the metadata: they survive restarts. ENOENT without the name. */
  async setMode(name: string, mode: number): Promise<void> {
    this.core.checkOpen();
    validateName(name);
    await this.core.meta.setMode(name, mode);
  }

  /** Names with a mode kept by setMode(), paged as list() is. */
  async modes(options: { after?: string; limit?: number } = {}): Promise<Array<[string, number]>> {
    this.core.checkOpen();
    return this.core.meta.modes({ after: options.after, limit: Math.min(options.limit ?? LIST_PAGE_MAX, LIST_PAGE_MAX) });
  }

  /** Keep a directory made by mkdir (and its mode) in the metadata: it survives restarts, every node sees it. */
  async makeDir(name: string, mode: number): Promise<void> {
    this.core.checkOpen();
    validateDirName(name);
    await this.core.meta.makeDir(name, mode);
  }

  async removeDir(name: string): Promise<void> {
    this.core.checkOpen();
    validateDirName(name);
    await this.core.meta.removeDir(name);
  }

  /** The mode of a directory kept by makeDir(), or undefined. */
  async dirMode(name: string): Promise<number | undefined> {
    this.core.checkOpen();
    validateDirName(name);
    return this.core.meta.dirMode(name);
  }

  /** Directories kept by makeDir() under a prefix, with their modes, paged as list() is. */
  async dirs(prefix: string, options: { after?: string; limit?: number } = {}): Promise<Array<[string, number]>> {
    this.core.checkOpen();
    return this.core.meta.dirs(prefix, { after: options.after, limit: Math.min(options.limit ?? LIST_PAGE_MAX, LIST_PAGE_MAX) });
  }

  /** Names under a prefix (e.g. `model/dir/`), paged. */
  async list(prefix: string, options: { after?: string; limit?: number } = {}): Promise<string[]> {
    this.core.checkOpen();
    const limit = Math.min(options.limit ?? LIST_PAGE_MAX, LIST_PAGE_MAX);
    return this.core.meta.list(prefix, { after: options.after, limit });
  }

  /** The current version of a name (in a cluster, see ClusterNode.current). */
  private currentVersion(name: string): Promise<VersionRecord | undefined> {
    return this.cluster ? this.cluster.current(name) : this.core.meta.current(name);
  }

  /**
   * What `name` (a path below kv/) is now: a file with its current version, a directory (with the
   * mode mkdir gave it, when it was made so), or neither. One round trip in a cluster; while Redis
   * cannot be reached, a name this node last saw as a file with its content here, as currentVersion.
   */
  async lookup(name: string): Promise<{ version?: VersionRecord; dir: boolean; dirMode?: number }> {
    this.core.checkOpen();
    validateDirName(name);
    if (this.cluster) return this.cluster.lookup(name);
    const meta = this.core.meta;
    const version = await meta.current(name);
    if (version) return { version, dir: false };
    const dirMode = await meta.dirMode(name);
    const dir = dirMode !== undefined || (await meta.list(`${name}/`, { limit: 1 })).length > 0;
    return { dir, dirMode };
  }

  async stat(name: string, which: VersionSelector = {}): Promise<BlockInfo> {
    const v = await this.resolve(name, which);
    // Not here but in a peer's DRAM: 'remote' (where a read would fetch it from), else the shared tier.
    const tier = (await this.cluster?.inPeerDram(v.sha256)) ? 'remote' : this.core.tierOf(v.sha256);
    return { ...v, tier, pinned: this.core.pinned.has(v.sha256) };
  }

  /** Remove a name and its versions. EPERM while its current content is pinned. */
  async delete(name: string): Promise<void> {
    this.core.checkOpen();
    validateName(name);
    const cur = await this.core.meta.current(name);
    if (!cur) throw new CascadeError('ENOENT', `no such name: ${name}`);
    // In a cluster another node may have pinned it: ask the shared metadata, not this node's memory.
    const pinned = this.cluster ? await this.cluster.pinnedAnywhere(cur.sha256) : this.core.pinned.has(cur.sha256);
    if (pinned) throw new CascadeError('EPERM', `${name} is pinned; unpin it first`);
    const { released } = await this.core.meta.remove(name);
    this.cluster?.forgetName(name);
    await this.content.reclaim(released);
  }

  /** Atomically make `from`'s current content the newest version of `to` and remove `from`. */
  async rename(from: string, to: string): Promise<VersionRecord> {
    this.core.checkOpen();
    validateName(from);
    validateName(to);
    const seq = this.cluster?.changesHeard ?? 0;
    const { version, released } = await this.core.meta.rename(from, to, this.core.now(), this.core.keepVersions);
    this.cluster?.forgetName(from);
    this.cluster?.knowName(to, version, seq);
    await this.content.reclaim(released);
    return version;
  }
}

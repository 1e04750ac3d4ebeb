// What the native engine's C++ workers answer from without JS: attributes published from the filesystem's stable ones, directory listings its watchers keep exact, and their invalidation before a change is answered.
import * as fs from 'node:fs';
import type { NativeFuseSessionBinding } from '../../native';
import { isCascadeError } from '../../store/errors';
import type { CascadeFsOps, DirWatcher, FileAttr, Handle, RemoteWatcher } from '../../fs/types';
import * as P from './fuse-proto';
import type { NodeTable } from './node-table';

/** libfuse's default cache lifetimes: the same kernel caching as the fuse-native engine. */
export const VALIDITY: P.Validity = { entryMs: 1000, attrMs: 1000 };
const S_IFMT = fs.constants.S_IFMT;
const S_IFREG = fs.constants.S_IFREG;
/** Listing types as the C++ table keeps them: READDIR's d_type, 0 for a name READDIR skips. */
const LIST_TYPE = { file: P.DT.REG, dir: P.DT.DIR, hidden: 0 } as const;

/** The engine's node table seen as the workers' cache: entries and attributes for replies, publishing, invalidation, listings. */
export class WorkerCache {
  /** Whether attributes are published to the C++ workers (the filesystem offers stableAttr). */
  readonly caching: boolean;
  /**
   * Whether the filesystem tells every directory change (watchDirs): then a directory's cached
   * attributes are dropped exactly when it changes, and directories can be listed in C++ (a LOOKUP of
   * a name that is not there is answered without JS: every new file's first request).
   */
  private watching = false;
  /** Whether the filesystem tells other nodes' changes (watchRemote): a cluster node's cache follows them. */
  private remoteWatched = false;
  /** Directories listed in the C++ table (a mirror, so changes elsewhere cost no native call). */
  private readonly listed = new Set<string>();
  /** Directories whose attributes changed, published again once the current request is answered. */
  private readonly dirsToPublish = new Set<string>();

  constructor(
    private readonly nodes: NodeTable,
    private readonly fsOps: CascadeFsOps,
    /** Whether read-only opens of held content may read through the page cache (NativeEngineOptions.pageCache). */
    private readonly pageCache: boolean,
    /** The engine's session, once it has one (set after the mount's INIT). */
    private readonly session: () => NativeFuseSessionBinding | undefined,
    private readonly log: (msg: string) => void,
  ) {
    this.caching = fsOps.stableAttr !== undefined;
  }

  /** Once mounted: follow the filesystem's directory changes and, on a cluster node, other nodes' changes. */
  watch(): void {
    if (this.caching && this.fsOps.dirListing !== undefined) this.watching = this.fsOps.watchDirs?.(this.dirWatcher()) === true;
    // A cluster node: other nodes' changes drop what the workers answer from, as local changes do.
    if (this.caching) this.remoteWatched = this.fsOps.watchRemote?.(this.remoteWatcher()) === true;
  }

  /** At unmount, once nothing is served from the listings any more: stop following changes. */
  unwatch(): void {
    if (this.watching) {
      this.watching = false;
      this.fsOps.watchDirs?.(undefined);
    }
    if (this.remoteWatched) {
      this.remoteWatched = false;
      this.fsOps.watchRemote?.(undefined);
    }
  }

  async entry(p: string, handle?: Handle): Promise<Buffer> {
    const attr = await this.attrOf(p, handle);
    const nodeid = this.nodes.remember(p);
    return P.entryOut(nodeid, attr, this.validity(nodeid, attr));
  }

  /**
   * The cache lifetimes for a reply giving node nodeid these attributes: the attributes expire at once
   * while a page-cache open of the node reads more bytes than they say (the kernel would cut its reads
   * at that size; expired, it asks again with the reader's handle, which answers its own size).
   */
  validity(nodeid: number, attr: FileAttr): P.Validity {
    const session = this.session();
    if (!this.pageCache || session === undefined) return VALIDITY;
    return session.attrValidMs(nodeid, attr.sizeBytes) === 0 ? { entryMs: VALIDITY.entryMs, attrMs: 0 } : VALIDITY;
  }

  /**
   * p's attributes (a handle's, with one); where they are stable, also published to the C++ workers.
   * The generation is read before resolving: a change answered meanwhile refuses the publish.
   */
  async attrOf(p: string, handle?: Handle): Promise<FileAttr> {
    if (handle === undefined && this.caching) {
      const generation = this.nodes.native.generation();
      const stable = await this.fsOps.stableAttr!(p);
      if (stable !== undefined) {
        const a = stable.attr;
        const isFile = (a.mode & S_IFMT) === S_IFREG;
        this.nodes.native.publish(p, P.fuseAttr(a), isFile, a.sizeBytes, isFile ? (stable.blockHandle ?? 0) : 0, generation);
        return a;
      }
    }
    return this.fsOps.getattr(p, handle);
  }

  /**
   * Before answering a request that changed p: the workers stop answering from p's attributes (and,
   * for a directory removed or renamed, from everything under it) and from its parent's (its times).
   */
  invalidate(p: string, subtree = false): void {
    // Readers that read p's node through the page cache read the content they opened; the change may
    // give p another (a commit by a writer on a node the name has left, a link by hash). Any later reply
    // about p would tell their inode the new size, and the kernel applies a size even in a reply that
    // expires at once (it would cut such readers' pages): p gets a fresh node instead.
    const id = this.pageCache ? this.nodes.idOf(p) : undefined;
    if (id !== undefined && this.session()?.hasPageCacheOpens(id) === true) this.nodes.removed(p);
    if (!this.caching) return;
    this.nodes.native.invalidate(p, subtree);
    if (this.watching) return; // the parent, where it changed, was dropped by the directory watcher
    const slash = p.lastIndexOf('/');
    if (slash < 0) return;
    const parent = slash === 0 ? '/' : p.slice(0, slash);
    this.nodes.native.invalidate(parent, false);
    // The parent's new times, published now: the kernel dropped its cached attributes too, and the next
    // path walk through it (the next create there) asks for them. A change meanwhile refuses this.
    this.attrOf(parent).catch(() => undefined);
  }

  /** The filesystem's watcher of other nodes' changes: the workers stop answering from those paths. */
  private remoteWatcher(): RemoteWatcher {
    return {
      changed: (p, subtree) => this.invalidate(p, subtree),
      // Changes may have been missed: nothing cached under /kv is trusted any more.
      reset: () => this.invalidate('/kv', true),
    };
  }

  /**
   * The filesystem's directory watcher: listings kept exact, and a directory's attributes dropped the
   * moment an entry is added or removed (its times move), before the request that did it is answered.
   */
  private dirWatcher(): DirWatcher {
    const native = this.nodes.native;
    const changed = (dir: string) => {
      native.invalidate(dir, false);
      // Its new times are published once this request is answered (publishDirs): the kernel dropped
      // its cached attributes too, and the next path walk through it (the next create there) asks.
      this.dirsToPublish.add(dir);
    };
    return {
      added: (dir, name, kind) => {
        // False: the table is full and dropped the listing (lookups there go to JS; it may list it again).
        if (this.listed.has(dir) && !native.listAdd(dir, name, LIST_TYPE[kind])) this.listed.delete(dir);
        changed(dir);
      },
      removed: (dir, name) => {
        if (this.listed.has(dir)) native.listRemove(dir, name);
        changed(dir);
      },
      gone: (dir) => {
        for (const d of this.listed) if (d === dir || d.startsWith(`${dir}/`)) this.listed.delete(d);
        native.unlist(dir, true);
      },
    };
  }

  /** After a reply: directories that changed, published (their generation read now, after the change). */
  publishDirs(): void {
    if (this.dirsToPublish.size === 0) return;
    for (const d of this.dirsToPublish) this.attrOf(d).catch(() => undefined); // gone again: a lookup resolves it
    this.dirsToPublish.clear();
  }

  /**
   * After JS found no name in `dir`, or opened it: list dir, so the next lookup of a name that is not
   * there, and the next opendir and readdir, are answered in C++.
   */
  listDir(dir: string): void {
    if (!this.watching || this.listed.has(dir)) return;
    const entries = this.fsOps.dirListing!(dir);
    if (entries === undefined) return;
    try {
      const types = Uint8Array.from(entries, (e) => LIST_TYPE[e.kind]);
      if (this.nodes.native.list(dir, entries.map((e) => e.name), types)) this.listed.add(dir);
    } catch (e) {
      this.log(`listing ${dir} for the C++ workers: ${(e as Error).message}`); // a name C++ would refuse
    }
  }

  /**
   * Publish a node's attributes now, off the request's path (its generation is read at once, after
   * the invalidation that preceded it).
   */
  republish(nodeid: number): void {
    if (!this.caching || this.nodes.isDetached(nodeid)) return;
    let p: string;
    try {
      p = this.nodes.pathOf(nodeid);
    } catch {
      return; // forgotten meanwhile
    }
    this.attrOf(p).catch(() => undefined); // gone again, or not stable: the next lookup resolves it
  }

  /** As invalidate(), for the node a handle request names (which may be detached or forgotten). */
  invalidateNode(nodeid: number): void {
    if (!this.caching) return;
    try {
      this.invalidate(this.nodes.pathOf(nodeid));
    } catch (e) {
      if (!isCascadeError(e, 'ESTALE')) throw e;
    }
  }
}

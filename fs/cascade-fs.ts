/**
 * Filesystem semantics over the Store (DESIGN.md, "User-facing contract"):
 *
 *   /kv/<model>/<path...>                       files are store names `<model>/<path...>`
 *   /.cascade/stats.json                        a live snapshot of store statistics
 *   /.cascade/pins.json                         the files whose content is pinned, and the pin quota
 *   /.cascade/versions/kv/<model>/<path>/<N>    version N of a file
 *   /.cascade/at/<unix-ms>/kv/<model>/<path>    the version current at that time
 *
 * A file opened by create or O_TRUNC is a private staging buffer: other openers keep reading the committed
 * version (or an empty file) until it commits. A close() that follows new writes commits the whole buffer
 * as one new version (FUSE sends release asynchronously, after close() has returned, so a commit at
 * release would let a reader that opens right after close() or rename() see the old content). A close with
 * no new writes commits nothing: a shell redirect (open, dup2, close, write, close) or a duplicated
 * descriptor makes one version, not two. A file created or truncated and never written commits its empty
 * content at the last release. Writing into committed content is EPERM. A read handle keeps the version
 * it opened (the store holds a lease on its content).
 * Throws CascadeError with symbolic codes only.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import { LRUCache } from 'lru-cache';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { GiB, INODE_ALLOCATED_LIMIT, NAME_COMPONENT_MAX_BYTES } from '../store/constants';
import { allocLarge, COPY_ASYNC_MIN_BYTES, copyBytes } from '../store/copy';
import { assert, CascadeError, isCascadeError } from '../store/errors';
import { StreamHasher } from '../store/hash';
import type { NameChange, VersionRecord } from '../store/meta';
import { validateDirName, validateName, validateSha256 } from '../store/names';
import type { DramHold, Store } from '../store/store';
import { GpuLeases } from './gpu-leases';
import { DirTree, split, type DirInfo } from './tree';
import type { Caller, CascadeFsOps, DirEntry, DirWatcher, FileAttr, ListedEntry, FsStatfs, Handle, RemoteWatcher, SealedBlock, StableAttr, WriteStager } from './types';

const S_IFDIR = 0o040000;
/** The smallest JS staging buffer: a file written in 128 KiB pieces starts without a regrowth. */
const STAGING_MIN_BYTES = 128 * 1024;
const S_IFREG = 0o100000;
/** Event-loop delay sampling interval (stats.json eventLoop). */
const LOOP_DELAY_SAMPLE_MS = 20;
const O_ACCMODE = 3;
const O_WRONLY = 1;
const O_RDWR = 2;
const O_TRUNC = 0o1000;
const O_EXCL = 0o200;
const O_APPEND = 0o2000;

export const XATTR_PINNED = 'user.cascade.pinned';
export const XATTR_SHA256 = 'user.cascade.sha256';
export const XATTR_TIER = 'user.cascade.tier';
export const XATTR_LINK = 'user.cascade.link';
/** Read-only: the content's place in the GPU tier for a same-node GPU process, with a lease (fs/gpu-leases.ts). */
export const XATTR_CUDA_IPC = 'user.cascade.cuda_ipc';
/**
 * Write-only: setting it to 1 drops the file's content from DRAM (it stays on disk). An xattr, as pins
 * are: it names one file, goes through any tool (setfattr) and both engines, and needs no new file.
 */
export const XATTR_EVICT = 'user.cascade.evict';
/** Values written to our xattrs are short ('1', a hex digest); anything longer is a mistake. */
const XATTR_VALUE_MAX_BYTES = 256;
/** Open handles at once; past this, open fails instead of memory growing without bound. */
const HANDLES_MAX = 65_536;
/**
 * stats.json is re-rendered when its snapshot is older than this: fresh for every `cat`, and the same
 * snapshot for the getattr and open of one read, so the size a page-cache reader trusts matches.
 */
const STATS_SNAPSHOT_MS = 100;
/**
 * Files pins.json lists at most (about 150 bytes of JSON each: 10 MiB at most); past it the file says
 * how many there are. Pins are bounded by the quota, but one pinned block (a shared system prompt) may be
 * the content of any number of names.
 */
const PINS_LISTED_MAX = 65_536;
/**
 * libfuse (high-level API, without hard_remove) renames a file that is unlinked or replaced while open to
 * `.fuse_hidden<hex>` and unlinks that name at the last release. These names are not store names.
 */
const HIDDEN_RE = /^\.fuse_hidden[0-9a-f]+$/;
/** Names read per page when the tree is built at mount. */
const LIST_PAGE = 10_000;
/** Names a cluster node remembers as absent (see CascadeFs.absent). */
const ABSENT_NAMES_MAX = 65_536;
/** Inode numbers reserved from the store at a time for new files and directories. */
const INODE_BATCH = 1024;
/** The mount's own directories and files have fixed inode numbers (below INODE_FIRST_ALLOCATED). */
const INO = { root: 1, kv: 2, meta: 3, stats: 4, client: 5, versions: 6, at: 7, pins: 8 } as const;

export interface CascadeFsOptions {
  uid: number;
  gid: number;
  /** What /.cascade/client.json shows: how same-node clients reach the daemon (absent: no such file). */
  clientInfo?: () => object | undefined;
  /** The mount engine's name and counters, shown in stats.json as `engine`. */
  engineInfo?: () => object | undefined;
  /** Bytes all staging buffers may hold together (default: a quarter of memory, at most 8 GiB). */
  stagingCapacityBytes?: number;
  /**
   * Other daemons (cluster nodes) change the same namespace: a name this tree does not know is looked
   * up in the store before it is called missing, listings come from the store, and files the store
   * no longer has leave the tree.
   */
  sharedNamespace?: boolean;
  log?: (message: string) => void;
}

/**
 * Inode numbers for new files and directories, reserved from the store in batches. take() waits for a
 * refill when the batch is used up; concurrent takers share one refill.
 */
class InodePool {
  private next = 0;
  private end = 0;
  private refilling: Promise<void> | undefined;
  constructor(private readonly store: Store) {}

  async take(): Promise<number> {
    while (this.next >= this.end) {
      this.refilling ??= this.store.allocateInodes(INODE_BATCH).then(
        (first) => {
          this.next = first;
          this.end = first + INODE_BATCH;
          this.refilling = undefined;
        },
        (e: unknown) => {
          this.refilling = undefined;
          throw e;
        },
      );
      await this.refilling;
    }
    return this.next++;
  }
}

interface Staging {
  name: string;
  data: Buffer;
  sizeBytes: number;
  /**
   * Incremental SHA-256 while writes arrive in order (on a worker thread with the native addon);
   * undefined once they do not (the store hashes the whole content at commit).
   */
  hash: StreamHasher | undefined;
  /** Held while the buffer is replaced by a larger one or committed: writes and truncates wait. */
  gate: Promise<void> | undefined;
  /** Writes since the last commit: a close() commits. */
  dirty: boolean;
  /** Created or truncated and not committed since: the last release commits (possibly empty) content. */
  pending: boolean;
  /**
   * A close() returned on the session while it was still pending and unwritten (`: > f`, or a shell
   * redirect before its command writes): from then until the commit, new readers read the file as
   * empty, as its size says, instead of the version the truncation replaced.
   */
  truncationClosed: boolean;
  /**
   * Its only descriptor was closed with everything committed; FUSE's release (which ends the session)
   * comes later, asynchronously. Until then the file is committed content to anyone else: an open for
   * writing without O_TRUNC or a truncation to a non-zero size is EPERM, as after the release.
   */
  closedClean: boolean;
  handles: number;
  /** Unlinked or replaced while open: it is never committed. */
  orphaned: boolean;
  mtimeMs: number;
  /** The file's inode number: its committed version's for a rewrite, a fresh one for a new file. */
  ino: number;
  /**
   * Staged natively (the engine's stager id): its bytes are in the DRAM arena, written and hashed in
   * C++; `data`, `sizeBytes`, `dirty` and `mtimeMs` here are then stale until refresh() or toJs().
   */
  native: number | undefined;
  /** The native stage's bytes went to the store with a commit (the stage holds none now). */
  nativeSealed: boolean;
  /** The version the last commit made (a sealed native stage's content, for toJs()). */
  committed: VersionRecord | undefined;
}

type OpenFile =
  | { kind: 'read'; version: VersionRecord; release: () => void }
  | { kind: 'write'; staging: Staging; readable: boolean }
  | { kind: 'virtual'; data: Buffer };

/** The virtual files in /.cascade. */
type MetaFileName = 'stats.json' | 'client.json' | 'pins.json';

type Parsed =
  | { kind: 'root' }
  | { kind: 'kv'; rel: string } // '' is /kv itself
  | { kind: 'meta' } // /.cascade
  | { kind: 'stats'; file: MetaFileName } // the virtual files in /.cascade
  | { kind: 'versions'; rel: string | undefined } // /.cascade/versions (undefined) or .../versions/kv/<rel>
  | { kind: 'atroot' } // /.cascade/at
  | { kind: 'at'; timeMs: number; rel: string | undefined }; // /.cascade/at/<ms> (undefined) or .../kv/<rel>

/**
 * An inode number for a read-only view (a past version, a directory under /.cascade/versions): derived
 * from its path, in [2^52, 2^53), where no allocated number lies.
 */
function derivedIno(text: string): number {
  return INODE_ALLOCATED_LIMIT + (fnv1a53(text) % INODE_ALLOCATED_LIMIT);
}

function fnv1a53(text: string): number {
  // A stable hash of a string; 2^53 keeps it exact in a JS number.
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ c, 0x5bd1e995) >>> 0;
  }
  return ((h2 & 0x1fffff) * 0x100000000 + h1) || 1;
}

export async function createCascadeFs(store: Store, options: CascadeFsOptions): Promise<CascadeFs> {
  const tree = new DirTree(INO.kv);
  let after: string | undefined;
  for (;;) {
    const page = await store.list('', { after, limit: LIST_PAGE });
    // Directories get numbers from the store's counter too, reserved per page (at most 63 per name).
    const seen = new Set<string>();
    let missing = 0;
    for (const name of page) {
      for (let i = name.indexOf('/'); i >= 0; i = name.indexOf('/', i + 1)) {
        const dir = name.slice(0, i);
        if (!seen.has(dir) && tree.kindOf(dir) !== 'dir') missing++;
        seen.add(dir);
      }
    }
    let next = missing > 0 ? await store.allocateInodes(missing) : 0;
    const end = next + missing;
    for (const name of page) {
      tree.addNameWithParents(name, () => {
        assert(next < end, 'more directories than counted at mount');
        return next++;
      });
    }
    if (page.length < LIST_PAGE) break;
    after = page[page.length - 1];
  }
  // Directories made by mkdir, kept in the metadata (also the empty ones), with their modes.
  const dirModes = new Map<string, number>();
  for (after = undefined; ; ) {
    const page = await store.dirs('', { after, limit: LIST_PAGE });
    let missing = 0;
    for (const [dir] of page) missing += tree.kindOf(dir) === 'dir' ? 0 : tree.missingDirs(`${dir}/\0`);
    let next = missing > 0 ? await store.allocateInodes(missing) : 0;
    for (const [dir, mode] of page) {
      dirModes.set(dir, mode);
      // A file of the same name (written by an older build, or by another node meanwhile) wins.
      if (tree.kindOf(dir) !== undefined) continue;
      tree.addDirsWithParents(dir, () => next++);
    }
    if (page.length < LIST_PAGE) break;
    after = page[page.length - 1][0];
  }
  // Modes set by chmod are kept in the metadata; most files have none (0644).
  const modes = new Map<string, number>();
  for (after = undefined; ; ) {
    const page = await store.modes({ after, limit: LIST_PAGE });
    for (const [name, mode] of page) modes.set(name, mode);
    if (page.length < LIST_PAGE) break;
    after = page[page.length - 1][0];
  }
  return new CascadeFs(store, tree, options, modes, dirModes);
}

export class CascadeFs implements CascadeFsOps {
  private readonly staging = new Map<string, Staging>();
  private stagingBytes = 0;
  private readonly handles = new Map<Handle, OpenFile>();
  private nextHandle = 1;
  /** Files whose mode is not 0644: those kept in the metadata, and those of files not yet committed. */
  private readonly modes: Map<string, number>;
  /** Directories' modes, as mkdir gave them (kept in the metadata); one missing here is 0755. */
  private readonly dirModes: Map<string, number>;
  /** Modes set before the file's first commit (saved with it). */
  private readonly unsavedModes = new Set<string>();
  /** Hidden name -> the file it stands for, and the version it showed when hidden. */
  private readonly hidden = new Map<string, { target: string; version: VersionRecord | undefined; staging: Staging | undefined }>();
  /**
   * Files hidden by libfuse: gone from the tree, still in the store until a rename replaces them (their
   * version history continues) or their hidden name is unlinked (then they are deleted). Keyed by the
   * file's name, valued by the hidden name that owns the delete: one name can be hidden twice (replaced
   * while open, then the file renamed there unlinked while open), and only the latest hidden name's
   * release deletes it.
   */
  private readonly pendingDelete = new Map<string, string>();
  private statsSnapshot: { atMs: number; data: Buffer } | undefined;
  private pinsSnapshot: { atMs: number; generation: number; data: Buffer } | undefined;
  private pinsRendering: { generation: number; data: Promise<Buffer> } | undefined;
  /** Moves with every pin and unpin through the mount: a pins.json rendered before one is stale. */
  private pinsGeneration = 0;
  private readonly stagingCapacityBytes: number;
  private readonly mountTimeMs = Date.now();
  private readonly inodes: InodePool;
  /** The engine's native write staging, when it has it and the store can take its blocks. */
  private stager: WriteStager | undefined;
  /** Leases of user.cascade.cuda_ipc readers on GPU-resident content. */
  private readonly gpuLeases: GpuLeases;
  /**
   * Shared namespace with the change feed: names another node had not made when last looked up, until
   * a change to them is heard (or the feed resets); and the count of changes heard, so that a lookup
   * answered while one came in is not remembered.
   */
  private readonly absent = new LRUCache<string, true>({ max: ABSENT_NAMES_MAX });
  private changeSeq = 0;
  /** The engine's watcher of other nodes' changes (watchRemote), and how this stops hearing the store's. */
  private remoteWatcher: RemoteWatcher | undefined;
  private unwatchStore: (() => void) | undefined;
  /** The engine's directory watcher (watchDirs): also told of hidden names. */
  private dirWatcher: DirWatcher | undefined;

  constructor(
    private readonly store: Store,
    private readonly tree: DirTree,
    private readonly options: CascadeFsOptions,
    modes: Map<string, number> = new Map(),
    dirModes: Map<string, number> = new Map(),
  ) {
    this.modes = modes;
    this.dirModes = dirModes;
    this.stagingCapacityBytes = options.stagingCapacityBytes ?? Math.min(8 * GiB, Math.floor(os.totalmem() / 4));
    this.inodes = new InodePool(store);
    this.gpuLeases = new GpuLeases(store);
    if (options.sharedNamespace && store.namesWatched) {
      this.unwatchStore = store.watchNames({
        change: (c) => this.changedElsewhere(c),
        reset: () => {
          this.changeSeq++;
          this.absent.clear();
          this.remoteWatcher?.reset();
        },
      });
    }
    // How long requests wait for the JS thread: every FUSE op is served on it. Shown in stats.json.
    this.loopDelay.enable();
  }

  // Sampled every LOOP_DELAY_SAMPLE_MS (each sample is a timer that wakes the JS thread: at 1 ms an idle
  // daemon woke 1,000 times a second, a CPU's share on a small node); a sample is the whole interval.
  private readonly loopDelay = monitorEventLoopDelay({ resolution: LOOP_DELAY_SAMPLE_MS });

  // ---- attributes and directories -------------------------------------------------------------------

  async getattr(path: string, handle?: Handle): Promise<FileAttr> {
    const open = handle !== undefined ? this.handles.get(handle) : undefined;
    if (open?.kind === 'write') return this.stagingAttr(open.staging);
    if (open?.kind === 'read') return this.versionAttr(open.version);
    const p = parse(path);
    const hid = p.kind === 'kv' ? this.hidden.get(p.rel) : undefined;
    if (hid) {
      // A file unlinked or replaced while open (fstat of its descriptors): what its writer is
      // writing, else the version it had; no name links to it any more.
      if (hid.staging) return { ...this.stagingAttr(hid.staging), nlink: 0 };
      if (hid.version) return { ...this.versionAttr(hid.version), nlink: 0 };
      return this.fileAttr(0, this.mountTimeMs, 0o644, derivedIno(`hidden:${path}`));
    }
    switch (p.kind) {
      case 'root':
        return this.dirAttr(INO.root);
      case 'meta':
        return this.dirAttr(INO.meta);
      case 'atroot':
        return this.dirAttr(INO.at);
      case 'stats':
        return this.fileAttr((await this.metaFile(p.file)).length, Date.now(), 0o444, p.file === 'stats.json' ? INO.stats : p.file === 'pins.json' ? INO.pins : INO.client);
      case 'kv': {
        const resolved: { version?: VersionRecord } = {};
        const kind = await this.kindOf(p.rel, resolved);
        if (kind === 'dir') return this.dirAttr(this.tree.info(p.rel), this.dirModes.get(p.rel));
        if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
        // A file with a write session open has the session's size and times, for everyone, as after
        // an O_TRUNC on a local filesystem (fstat and SEEK_END of its writers depend on it); readers
        // that open it meanwhile still read the committed content.
        const st = this.staging.get(p.rel);
        if (st) return this.stagingAttr(st);
        const committed = resolved.version ?? (await this.current(p.rel));
        if (committed) return this.versionAttr(committed);
        // Removed or renamed away by another node: it leaves this tree too.
        if (this.options.sharedNamespace && !this.hidden.has(p.rel)) this.tree.removeFile(p.rel);
        throw new CascadeError('ENOENT', `no such file: ${path}`);
      }
      case 'versions':
      case 'at': {
        const target = await this.resolveVirtual(p);
        if (target === 'dir') return this.dirAttr(p.rel === undefined ? (p.kind === 'versions' ? INO.versions : derivedIno(path)) : derivedIno(path));
        // A past version is a file of its own: read-only, with its own number.
        return { ...this.versionAttr(target), mode: S_IFREG | 0o444, ino: derivedIno(`${target.name}#${target.version}`) };
      }
    }
  }

  /**
   * For an engine's attribute cache: the attributes of `path` where they change only through a
   * request that names it (the root, /kv and directories under it, and committed files with no write
   * session), with a file's DRAM arena handle when its content is resident; undefined otherwise (the
   * .cascade tree, a file being written or hidden, and with a shared namespace, where other nodes change
   * names).
   */
  async stableAttr(path: string): Promise<StableAttr | undefined> {
    const p = this.parseLocal(path);
    if (p === undefined) return undefined;
    if (p.kind === 'root') return { attr: this.dirAttr(INO.root) };
    if (p.kind !== 'kv') return undefined;
    const unstable = () => this.staging.has(p.rel) || this.hidden.has(p.rel) || this.pendingDelete.has(p.rel);
    const kind = this.tree.kindOf(p.rel);
    if (kind === 'dir') return { attr: this.dirAttr(this.tree.info(p.rel), this.dirModes.get(p.rel)) };
    if (kind !== 'file' || unstable()) return undefined;
    const v = await this.current(p.rel);
    if (v === undefined || unstable() || this.tree.kindOf(p.rel) !== 'file') return undefined;
    return { attr: this.versionAttr(v), blockHandle: this.store.dramHandleOf(v.sha256) };
  }

  writing(path: string): boolean {
    const p = this.parseLocal(path);
    return p !== undefined && p.kind === 'kv' && this.staging.has(p.rel);
  }

  watchDirs(w: DirWatcher | undefined): boolean {
    if (this.options.sharedNamespace) return false; // other nodes change names: nothing here is the whole truth
    this.dirWatcher = w;
    this.tree.watch(
      w === undefined
        ? undefined
        : {
            added: (dir, name, kind) => w.added(kvPath(dir), name, kind),
            // A name that leaves the tree while libfuse hides a file under it is still found by lookup.
            removed: (dir, name) => (this.hidden.has(dir === '' ? name : `${dir}/${name}`) ? w.added(kvPath(dir), name, 'hidden') : w.removed(kvPath(dir), name)),
            gone: (rel) => w.gone(kvPath(rel)),
          },
    );
    return true;
  }

  watchRemote(w: RemoteWatcher | undefined): boolean {
    if (this.unwatchStore === undefined) return false;
    this.remoteWatcher = w;
    return true;
  }

  /**
   * Another node changed `c`: the tree follows (a name removed or renamed away leaves it, unless this
   * node is writing or hiding it), and the engine drops what it cached of the paths.
   */
  private changedElsewhere(c: NameChange): void {
    this.changeSeq++;
    // The name, and the directories above it (which may exist through it now).
    for (const n of c.kind === 'renamed' ? [c.name, c.to] : [c.name]) {
      for (let i = n.length; i > 0; i = n.lastIndexOf('/', i - 1)) this.absent.delete(n.slice(0, i));
    }
    const w = this.remoteWatcher;
    const leaves = (rel: string) => {
      if (this.tree.kindOf(rel) === 'file' && !this.staging.has(rel) && !this.hidden.has(rel) && !this.pendingDelete.has(rel)) this.tree.removeFile(rel);
    };
    switch (c.kind) {
      case 'file':
        w?.changed(kvPath(c.name), false);
        break;
      case 'removed':
        leaves(c.name);
        w?.changed(kvPath(c.name), false);
        break;
      case 'renamed':
        leaves(c.name);
        w?.changed(kvPath(c.name), false);
        w?.changed(kvPath(c.to), false);
        break;
      case 'dirMade':
        w?.changed(kvPath(c.name), false);
        break;
      case 'dirRemoved':
        if (this.tree.kindOf(c.name) === 'dir' && this.tree.children(c.name).size === 0) this.tree.removeDir(c.name);
        this.dirModes.delete(c.name);
        w?.changed(kvPath(c.name), true);
        break;
    }
  }

  /**
   * For the engine caches: path parsed, where this node alone changes names, or where the store hears
   * every change other nodes make (watchRemote).
   */
  private parseLocal(path: string): Parsed | undefined {
    if (this.options.sharedNamespace && this.remoteWatcher === undefined) return undefined;
    try {
      return parse(path);
    } catch {
      return undefined;
    }
  }

  dirListing(path: string): ListedEntry[] | undefined {
    if (this.options.sharedNamespace) return undefined; // names made elsewhere are not in the tree yet
    const p = this.parseLocal(path);
    if (p === undefined || p.kind !== 'kv' || this.tree.kindOf(p.rel) !== 'dir') return undefined;
    const entries: ListedEntry[] = [...this.tree.children(p.rel)].map(([name, kind]) => ({ name, kind }));
    // Names libfuse hid there are not in the tree but are found by lookup.
    for (const h of this.hidden.keys()) if (split(h).parent === p.rel) entries.push({ name: split(h).base, kind: 'hidden' });
    return entries;
  }

  /** The hidden-name table, told to the directory watcher (a lookup finds these names). */
  private setHidden(rel: string, entry: { target: string; version: VersionRecord | undefined; staging: Staging | undefined }): void {
    const had = this.hidden.has(rel);
    this.hidden.set(rel, entry);
    const { parent, base } = split(rel);
    if (!had && this.tree.kindOf(rel) === undefined) this.dirWatcher?.added(kvPath(parent), base, 'hidden');
  }

  private deleteHidden(rel: string): void {
    const { parent, base } = split(rel);
    if (this.hidden.delete(rel) && this.tree.kindOf(rel) === undefined) this.dirWatcher?.removed(kvPath(parent), base);
  }

  async syncAll(): Promise<void> {
    await this.store.syncAll();
  }

  nativeOpened(blockHandles: readonly number[]): void {
    this.store.noteDramOpens(blockHandles);
  }

  async readdir(path: string): Promise<DirEntry[]> {
    const p = parse(path);
    const dir = (name: string): DirEntry => ({ name, kind: 'dir' });
    const file = (name: string): DirEntry => ({ name, kind: 'file' });
    switch (p.kind) {
      case 'root':
        return [dir('kv'), dir('.cascade')];
      case 'meta':
        return [file('stats.json'), file('pins.json'), ...(this.options.clientInfo?.() ? [file('client.json')] : []), dir('versions'), dir('at')];
      case 'atroot':
        return []; // any unix-ms below it is valid; there is nothing to list
      case 'stats':
        throw new CascadeError('ENOTDIR', `${path} is a file`);
      case 'kv':
        if (this.options.sharedNamespace) {
          if ((await this.kindOf(p.rel)) === 'dir') await this.syncDir(p.rel);
        }
        return this.entries(p.rel);
      case 'versions':
      case 'at': {
        if (p.rel === undefined) return [dir('kv')];
        const kind = await this.kindOf(p.rel);
        // A file's place under versions/ and at/ is a directory of versions, or a file (at/).
        if (kind === 'dir') return this.entries(p.rel).map((e) => (p.kind === 'versions' && e.kind === 'file' ? dir(e.name) : e));
        if (kind === 'file' && p.kind === 'versions') return (await this.store.versions(p.rel)).map((v) => file(String(v.version)));
        throw new CascadeError(kind === 'file' ? 'ENOTDIR' : 'ENOENT', `no directory ${path}`);
      }
    }
  }

  private entries(rel: string): DirEntry[] {
    return [...this.tree.children(rel)].map(([name, kind]) => ({ name, kind }));
  }

  async mkdir(path: string, mode: number): Promise<void> {
    const rel = this.kvRel(path, 'mkdir');
    if (rel === '') throw new CascadeError('EEXIST', '/kv exists');
    validateDirName(rel);
    // With a shared namespace another node may have made it (or a file there) since the kernel looked.
    if (this.options.sharedNamespace && (await this.kindOf(rel)) !== undefined) throw new CascadeError('EEXIST', `/kv/${rel} exists`);
    const ino = await this.inodes.take();
    this.tree.addDir(rel, ino); // EEXIST, ENOENT (no parent), ENOTDIR before anything is kept
    const perms = mode & 0o7777;
    try {
      // Kept in the metadata: an empty directory survives a restart and is seen by every node.
      await this.store.makeDir(rel, perms);
    } catch (e) {
      this.tree.removeDir(rel);
      throw e;
    }
    this.dirModes.set(rel, perms);
  }

  async rmdir(path: string): Promise<void> {
    const rel = this.kvRel(path, 'rmdir');
    if (rel === '') throw new CascadeError('EBUSY', '/kv cannot be removed');
    if (this.tree.kindOf(rel) !== 'dir' || this.tree.children(rel).size > 0) {
      this.tree.removeDir(rel); // throws the reason: ENOENT, ENOTDIR, ENOTEMPTY
      return;
    }
    this.checkNoHidden(rel);
    // With a shared namespace names made by other nodes count too.
    if (this.options.sharedNamespace) {
      const inside = (await this.store.list(`${rel}/`, { limit: 1 })).length + (await this.store.dirs(`${rel}/`, { limit: 1 })).length;
      if (inside > 0) throw new CascadeError('ENOTEMPTY', `/kv/${rel} is not empty`);
    }
    await this.store.removeDir(rel);
    this.dirModes.delete(rel);
    this.tree.removeDir(rel);
  }

  /**
   * A directory holding a hidden name is not empty (ENOTEMPTY, as on any libfuse filesystem): libfuse
   * builds the hidden file's path to serve its descriptor and to unlink it at the last release. Before,
   * rmdir succeeded and the open descriptor then read ENOENT (found by the model test). No waiting for a
   * release just sent: libfuse holds the directory's path lock for the rmdir, so the release's unlink
   * waits behind it (a 500 ms wait here only delayed the ENOTEMPTY; CI found it).
   */
  private checkNoHidden(dir: string): void {
    for (const h of this.hidden.keys()) {
      if (split(h).parent === dir) throw new CascadeError('ENOTEMPTY', `/kv/${dir} holds a file unlinked while open`);
    }
  }

  // ---- files --------------------------------------------------------------------------------------

  async create(path: string, mode: number, flags: number): Promise<Handle> {
    const rel = this.kvRel(path, 'create');
    this.checkFileName(rel);
    const kind = await this.kindOf(rel);
    // The kernel asks only for names it believes absent; one that exists after all (its cached entry
    // was stale) answers as open(2) does on a local filesystem: O_EXCL first, then a directory.
    if (kind !== undefined && (flags & O_EXCL) !== 0) throw new CascadeError('EEXIST', `${path} exists`);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    // Re-created after an unlink while open (libfuse hid the old file): the old file goes from the store
    // now, as an unlink does on the native engine, so that the new file starts empty, with a new history
    // and a new inode number (its open handles keep their leases). Its content could otherwise be read
    // back under the new file until that commits (found by the model test, test/mount/model.test.ts).
    if (kind === undefined && this.pendingDelete.has(rel)) await this.dropHiddenFile(rel);
    // An existing file keeps its inode number (O_CREAT|O_TRUNC rewrites it); a new one gets a fresh one.
    // kindOf knows every name the store has (but one unlinked while open): on one node the tree does;
    // with a shared namespace it asked the store (or the change feed said nobody made it since).
    const known = kind !== undefined || this.pendingDelete.has(rel);
    const ino = known ? await this.fileIno(rel) : await this.inodes.take();
    this.tree.addFile(rel); // EISDIR if a directory took the name meanwhile
    this.pendingDelete.delete(rel);
    if ((mode & 0o7777) !== 0o644) {
      this.modes.set(rel, mode & 0o7777);
      this.unsavedModes.add(rel); // kept in the metadata with the first commit
    }
    return this.openStaging(rel, true, ino);
  }

  async open(path: string, flags: number): Promise<Handle> {
    const p = parse(path);
    const writing = (flags & O_ACCMODE) === O_WRONLY || (flags & O_ACCMODE) === O_RDWR;
    if (p.kind !== 'kv') {
      if (writing) throw new CascadeError('EROFS', `${path} is read-only`);
      if (p.kind === 'stats') return this.addHandle({ kind: 'virtual', data: await this.metaFile(p.file) });
      const target = p.kind === 'versions' || p.kind === 'at' ? await this.resolveVirtual(p) : 'dir';
      if (target === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
      return this.addHandle({ kind: 'read', version: target, release: this.store.lease(target) });
    }
    const kind = await this.kindOf(p.rel);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
    const st = this.staging.get(p.rel);
    if (writing) {
      if (flags & O_APPEND) throw new CascadeError('EPERM', `${path}: appending to committed content is not allowed`);
      if (st && !(flags & O_TRUNC) && this.closedCommitted(st)) {
        throw new CascadeError('EPERM', `${path}: committed content is immutable; open with O_TRUNC to replace it`);
      }
      if (st) {
        // Another descriptor of a file being written: join it; O_TRUNC starts it over.
        if (flags & O_TRUNC) this.resize(st, 0);
        return this.joinStaging(st, (flags & O_ACCMODE) === O_RDWR);
      }
      if (!(flags & O_TRUNC)) throw new CascadeError('EPERM', `${path}: committed content is immutable; open with O_TRUNC to replace it`);
      const ino = await this.fileIno(p.rel);
      return this.openStaging(p.rel, (flags & O_ACCMODE) === O_RDWR, ino);
    }
    // Created, or truncated and closed, but not committed yet: its content is private to its
    // writers, so it reads as empty.
    if (st?.truncationClosed) return this.addHandle({ kind: 'virtual', data: Buffer.alloc(0) });
    const v = await this.current(p.rel);
    if (!v) return this.addHandle({ kind: 'virtual', data: Buffer.alloc(0) });
    return this.addHandle({ kind: 'read', version: v, release: this.store.lease(v) });
  }

  /**
   * For same-node clients: the version a read-only open of `path` would read (a file under /kv, or a
   * /.cascade/versions or /.cascade/at path), held in the DRAM arena until release().
   */
  async holdForClient(path: string): Promise<DramHold> {
    const p = parse(path);
    let v: VersionRecord | undefined;
    if (p.kind === 'kv') {
      const kind = await this.kindOf(p.rel);
      if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
      if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
      v = await this.current(p.rel);
      if (v === undefined) throw new CascadeError('ENOENT', `${path} has no committed version yet`);
    } else if (p.kind === 'versions' || p.kind === 'at') {
      const target = await this.resolveVirtual(p);
      if (target === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
      v = target;
    } else {
      throw new CascadeError('EINVAL', `${path} is not a block`);
    }
    return this.store.holdInDram(v);
  }

  /**
   * For the native engine: the version a read handle reads, held in the DRAM arena until release(),
   * so that its reads can be served from the arena without reaching JS. Undefined for handles that
   * are not plain committed-version reads (staging, virtual files) or smaller than minSizeBytes.
   * onLoading: see Store.holdInDram.
   */
  async holdHandle(handle: Handle, minSizeBytes = 0, onLoading?: (arenaHandle: number) => void): Promise<DramHold | undefined> {
    const h = this.handle(handle);
    if (h.kind !== 'read' || h.version.sizeBytes < minSizeBytes) return undefined;
    return this.store.holdInDram(h.version, onLoading);
  }

  contentKeyOf(handle: Handle): { key: number; sizeBytes: number } | undefined {
    const h = this.handle(handle);
    if (h.kind !== 'read') return undefined;
    const key = this.store.dramHandleOf(h.version.sha256);
    return key === undefined ? undefined : { key, sizeBytes: h.version.sizeBytes };
  }

  async read(handle: Handle, target: Buffer, offsetBytes: number): Promise<number> {
    const h = this.handle(handle);
    switch (h.kind) {
      case 'read':
        return this.store.readContent(h.version, offsetBytes, target);
      case 'virtual':
        return copyRange(h.data, h.data.length, offsetBytes, target);
      case 'write': {
        if (!h.readable) throw new CascadeError('EBADF', 'handle is open for writing only');
        const st = h.staging;
        while (st.gate) await st.gate;
        if (st.native !== undefined && !st.nativeSealed) return this.stager!.read(st.native, offsetBytes, target);
        if (st.native !== undefined) await this.toJs(st);
        return copyRange(st.data, st.sizeBytes, offsetBytes, target);
      }
    }
  }

  async write(handle: Handle, data: Buffer, offsetBytes: number): Promise<number> {
    const h = this.handle(handle);
    if (h.kind !== 'write') throw new CascadeError('EBADF', 'handle is not open for writing');
    const st = h.staging;
    const end = offsetBytes + data.length;
    while (st.gate) await st.gate;
    // A write the native stage did not take (no arena pages, or after a commit): JS stages from here.
    if (st.native !== undefined) await this.toJs(st);
    while (st.gate) await st.gate;
    if (end > st.data.length) await this.grow(st, end);
    // The kernel reuses `data` after we return: copy now.
    data.copy(st.data, offsetBytes);
    if (st.hash && offsetBytes === st.hash.lengthBytes && offsetBytes >= st.sizeBytes) {
      // A view of the staging buffer, whose bytes below the hashed length never change while hashed.
      st.hash.append(st.data.subarray(offsetBytes, end));
    } else if (st.hash && (offsetBytes < st.hash.lengthBytes || offsetBytes > st.sizeBytes)) {
      st.hash = undefined; // a rewrite or a hole: hash the whole buffer at commit
    }
    if (offsetBytes > st.sizeBytes) st.data.fill(0, st.sizeBytes, offsetBytes); // a hole reads as zeros
    st.sizeBytes = Math.max(st.sizeBytes, end);
    st.dirty = true;
    st.mtimeMs = Date.now();
    return data.length;
  }

  async truncate(path: string, sizeBytes: number, handle?: Handle): Promise<void> {
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes < 0) throw new CascadeError('EINVAL', 'size must be a non-negative integer');
    const open = handle !== undefined ? this.handles.get(handle) : undefined;
    if (open?.kind === 'write') {
      while (open.staging.gate) await open.staging.gate;
      if (sizeBytes !== 0) await this.toJs(open.staging);
      return this.resize(open.staging, sizeBytes);
    }
    const p = parse(path);
    if (p.kind !== 'kv') throw new CascadeError('EROFS', `${path} is read-only`);
    const kind = await this.kindOf(p.rel);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
    const st = this.staging.get(p.rel);
    if (st && !(sizeBytes !== 0 && this.closedCommitted(st))) {
      while (st.gate) await st.gate;
      if (sizeBytes !== 0) await this.toJs(st);
      return this.resize(st, sizeBytes);
    }
    const v = await this.store.resolve(p.rel);
    if (sizeBytes === v.sizeBytes && sizeBytes === 0) return;
    if (sizeBytes !== 0) throw new CascadeError('EPERM', `${path}: committed content is immutable (only truncation to 0 replaces it)`);
    await this.store.put(p.rel, Buffer.alloc(0));
  }

  async flush(handle: Handle): Promise<void> {
    const h = this.handle(handle);
    if (h.kind !== 'write') return;
    this.refresh(h.staging);
    if (h.staging.dirty) await this.commit(h.staging);
    else if (h.staging.pending) h.staging.truncationClosed = true;
    if (h.staging.handles === 1 && !h.staging.dirty && !h.staging.pending) h.staging.closedClean = true;
  }

  /** A session whose writer closed with everything committed: it takes no new writer but by O_TRUNC. */
  private closedCommitted(st: Staging): boolean {
    if (!st.closedClean) return false;
    this.refresh(st);
    return !st.dirty && !st.pending;
  }

  async fsync(handle: Handle): Promise<void> {
    const h = this.handle(handle);
    if (h.kind === 'write') {
      await this.commit(h.staging);
      if (!h.staging.orphaned && (await this.exists(h.staging.name))) await this.store.sync(h.staging.name);
    } else if (h.kind === 'read') {
      await this.store.syncAll();
    }
  }

  async release(handle: Handle): Promise<void> {
    const h = this.handles.get(handle);
    if (!h) return;
    this.handles.delete(handle);
    if (h.kind === 'read') h.release();
    if (h.kind !== 'write') return;
    const st = h.staging;
    st.handles--;
    if (st.handles > 0) return;
    try {
      await this.commit(st); // normally a no-op: flush committed it
    } catch (e) {
      this.log(`commit of ${st.name} at release failed: ${String(e)}`);
    }
    await this.dropStaging(st);
  }

  async unlink(path: string): Promise<void> {
    const rel = this.kvRel(path, 'unlink');
    const hid = this.hidden.get(rel);
    if (hid) {
      // The last release of a file unlinked while open: now it goes (unless a rename replaced it).
      this.deleteHidden(rel);
      if (this.pendingDelete.get(hid.target) !== rel) return; // replaced meanwhile: its history continues there
      this.pendingDelete.delete(hid.target);
      if (await this.exists(hid.target)) await this.store.delete(hid.target);
      return;
    }
    const kind = await this.kindOf(rel);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
    const committed = await this.exists(rel);
    if (committed) await this.store.delete(rel); // EPERM while pinned: nothing changes then
    const st = this.staging.get(rel);
    if (st) this.orphan(st);
    this.tree.removeFile(rel);
    this.modes.delete(rel);
    this.unsavedModes.delete(rel);
  }

  async rename(from: string, to: string): Promise<void> {
    const src = this.kvRel(from, 'rename');
    const dst = this.kvRel(to, 'rename');
    if (src === '' || dst === '') throw new CascadeError('EBUSY', '/kv cannot be renamed');
    const srcKind = await this.kindOf(src);
    if (srcKind === undefined) throw new CascadeError('ENOENT', `no such file: ${from}`);
    if (src === dst) return;
    if (srcKind === 'file' && HIDDEN_RE.test(split(dst).base)) return this.hide(src, dst);
    const dstKind = await this.kindOf(dst);
    const { parent } = split(dst);
    if ((await this.kindOf(parent)) !== 'dir') throw new CascadeError('ENOENT', `no directory /kv/${parent}`);
    if (srcKind === 'dir') return this.renameDir(src, dst, dstKind);
    this.checkFileName(dst);
    if (dstKind === 'dir') throw new CascadeError('EISDIR', `${to} is a directory`);
    // Committed content moves atomically in the store (a new version of dst); a file still being written
    // moves with it, and its commit lands at the new name.
    if (await this.exists(src)) await this.store.rename(src, dst);
    this.pendingDelete.delete(dst); // a hidden dst is replaced: its history continues here
    const replaced = this.staging.get(dst);
    if (replaced) this.orphan(replaced);
    const st = this.staging.get(src);
    if (st) {
      this.staging.delete(src);
      st.name = dst;
      this.staging.set(dst, st);
    }
    this.tree.moveFile(src, dst);
    // The store's rename moved a kept mode with the content; these follow in memory.
    const mode = this.modes.get(src);
    this.modes.delete(src);
    if (mode !== undefined) this.modes.set(dst, mode);
    else this.modes.delete(dst);
    const unsaved = this.unsavedModes.delete(src);
    if (unsaved) this.unsavedModes.add(dst);
    else this.unsavedModes.delete(dst);
  }

  async utimens(path: string, _atimeMs: number, mtimeMs: number): Promise<void> {
    // Directories keep the time given (in memory). Files accept it so that touch and cp -p work, but a
    // version's time is its commit time and does not change.
    const p = parse(path);
    if (p.kind === 'kv' && (await this.kindOf(p.rel)) === 'dir') return this.tree.setTimes(p.rel, mtimeMs);
    await this.getattr(path);
  }

  async chmod(path: string, mode: number): Promise<void> {
    const p = parse(path);
    if (p.kind !== 'kv' || (await this.kindOf(p.rel)) !== 'file') {
      await this.getattr(path);
      throw new CascadeError('EPERM', `${path}: only files under /kv can change mode`);
    }
    const perms = mode & 0o7777;
    // A committed file keeps its mode in the metadata (a restart must not widen access); one still
    // being written for the first time gets it with its first commit.
    if (await this.exists(p.rel)) {
      await this.store.setMode(p.rel, perms);
      this.unsavedModes.delete(p.rel);
    } else {
      this.unsavedModes.add(p.rel);
    }
    this.modes.set(p.rel, perms);
  }

  /** After a commit of `name`: a mode set before its first commit goes to the metadata now. */
  private async saveMode(name: string): Promise<void> {
    const mode = this.modes.get(name);
    if (!this.unsavedModes.has(name) || mode === undefined) return;
    await this.store.setMode(name, mode);
    this.unsavedModes.delete(name);
  }

  async statfs(_path: string): Promise<FsStatfs> {
    const disk = this.store.disk.stats();
    // The disk tier's filesystem is what fills up (SGLang evicts by statvfs): report it.
    const s = fs.statfsSync(this.store.dataDir);
    const blockBytes = 4096;
    const fsBytes = s.blocks * s.bsize;
    const totalBytes = Number.isFinite(disk.capacityBytes) ? Math.min(disk.capacityBytes, fsBytes) : fsBytes;
    const availBytes = Math.min(this.store.disk.freeBytes(), s.bavail * s.bsize);
    const freeBytes = Math.min(this.store.disk.freeBytes(), s.bfree * s.bsize);
    return {
      blockBytes,
      totalBlocks: Math.floor(totalBytes / blockBytes),
      freeBlocks: Math.floor(freeBytes / blockBytes),
      availBlocks: Math.floor(availBytes / blockBytes),
      totalFiles: 1 << 30,
      freeFiles: (1 << 30) - this.tree.dirCount(),
      nameMaxBytes: NAME_COMPONENT_MAX_BYTES,
    };
  }

  // ---- extended attributes ------------------------------------------------------------------------

  async getxattr(path: string, name: string, caller?: Caller): Promise<Buffer> {
    const rel = await this.xattrTarget(path, name);
    if (name === XATTR_LINK || name === XATTR_EVICT) throw new CascadeError('ENODATA', `${name} is write-only`);
    if (!(await this.exists(rel))) throw new CascadeError('ENODATA', `${path} has no committed content yet`);
    if (name === XATTR_CUDA_IPC) {
      if (caller === undefined) throw new CascadeError('EOPNOTSUPP', `${XATTR_CUDA_IPC} needs the calling process, which this engine does not pass (use --engine native)`);
      const value = await this.gpuLeases.take(caller.pid, rel, await this.store.resolve(rel));
      return Buffer.from(JSON.stringify(value));
    }
    const info = await this.store.stat(rel);
    if (name === XATTR_PINNED) return Buffer.from(info.pinned ? '1' : '0');
    if (name === XATTR_SHA256) return Buffer.from(info.sha256);
    return Buffer.from(info.tier);
  }

  async setxattr(path: string, name: string, value: Buffer, caller?: Caller): Promise<void> {
    const rel = await this.xattrTarget(path, name);
    if (value.length > XATTR_VALUE_MAX_BYTES) throw new CascadeError('EINVAL', `value of ${name} is too long`);
    const text = value.toString('utf8').replace(/\n$/, '');
    if (name === XATTR_SHA256 || name === XATTR_TIER || name === XATTR_CUDA_IPC) throw new CascadeError('EPERM', `${name} is read-only`);
    if (name === XATTR_PINNED) {
      if (text !== '0' && text !== '1') throw new CascadeError('EINVAL', `${XATTR_PINNED} takes 1 (pin) or 0 (unpin)`);
      if (!(await this.exists(rel))) throw new CascadeError('ENOENT', `${path} has no committed content to pin`);
      try {
        return await (text === '1' ? this.store.pin(rel) : this.store.unpin(rel));
      } finally {
        this.pinsGeneration++; // `cascade pin` then `cascade pins` must see the pin
      }
    }
    if (name === XATTR_EVICT) {
      if (text !== '1') throw new CascadeError('EINVAL', `${XATTR_EVICT} takes 1 (drop the content from DRAM)`);
      if (!(await this.exists(rel))) throw new CascadeError('ENOENT', `${path} has no committed content to evict`);
      // EPERM while pinned, EBUSY while held by a reader of the arena (store.evictFromDram).
      await this.store.evictFromDram(rel);
      return;
    }
    // XATTR_LINK: this file becomes that content, with no data transfer.
    const sha = text.toLowerCase();
    try {
      validateSha256(sha);
    } catch {
      throw new CascadeError('EINVAL', `${XATTR_LINK} takes a 64-character hex SHA-256`);
    }
    await this.checkMayLink(path, caller);
    const st = this.staging.get(rel);
    if (st) this.refresh(st);
    await this.store.link(rel, sha, st?.ino);
    await this.saveMode(rel);
    // A created-but-unwritten file (touch, then link) must not commit its empty content over the link.
    if (st && !st.dirty) this.orphan(st);
  }

  /**
   * Link by hash reads content by its SHA-256 alone, whatever the modes of the names that hold it: only
   * root and the mount's owner (the owner of every file here, who may read them all) may do it. Others
   * get EACCES even where the kernel let them write the file (a mode with g+w or o+w). Without the
   * caller (fuse-native does not pass it), a file that only its owner may write stands for the same
   * rule: only the owner or root can have passed the kernel's write check for it.
   */
  private async checkMayLink(path: string, caller: Caller | undefined): Promise<void> {
    const owner = this.options.uid;
    if (caller !== undefined) {
      if (caller.uid !== 0 && caller.uid !== owner) throw new CascadeError('EACCES', `${XATTR_LINK}: only root and the mount's owner (uid ${owner}) may link by hash`);
      return;
    }
    const attr = await this.getattr(path);
    if ((attr.mode & 0o022) !== 0) {
      throw new CascadeError('EACCES', `${XATTR_LINK}: ${path} may be written by others (mode ${(attr.mode & 0o7777).toString(8)}), and this engine cannot tell who asks`);
    }
  }

  async listxattr(path: string): Promise<string[]> {
    const p = parse(path);
    if (p.kind !== 'kv' || (await this.kindOf(p.rel)) !== 'file') {
      await this.getattr(path);
      return [];
    }
    return (await this.exists(p.rel)) ? [XATTR_PINNED, XATTR_SHA256, XATTR_TIER] : [];
  }

  async removexattr(path: string, name: string, caller?: Caller): Promise<void> {
    const rel = await this.xattrTarget(path, name);
    if (name === XATTR_CUDA_IPC) {
      // Ends the caller's lease: the block may be evicted from the GPU tier from now on.
      if (caller === undefined || !this.gpuLeases.release(caller.pid, rel)) throw new CascadeError('ENODATA', `no GPU lease of this process on ${path}`);
      return;
    }
    if (name !== XATTR_PINNED) throw new CascadeError('EPERM', `${name} cannot be removed`);
    try {
      if (await this.exists(rel)) await this.store.unpin(rel);
    } finally {
      this.pinsGeneration++;
    }
  }

  async close(): Promise<void> {
    this.loopDelay.disable();
    this.gpuLeases.close();
    this.unwatchStore?.();
    this.remoteWatcher = undefined;
    // Commit what writers left open (a clean unmount loses nothing), then persist the store.
    for (const st of [...this.staging.values()]) {
      try {
        await this.commit(st);
      } catch (e) {
        this.log(`commit of ${st.name} at unmount failed: ${String(e)}`);
      }
    }
    for (const h of this.handles.values()) if (h.kind === 'read') h.release();
    this.handles.clear();
    this.staging.clear();
    for (const rel of this.pendingDelete.keys()) {
      try {
        if (await this.exists(rel)) await this.store.delete(rel);
      } catch (e) {
        this.log(`delete of ${rel} (unlinked while open) at unmount failed: ${String(e)}`);
      }
    }
    this.pendingDelete.clear();
    this.hidden.clear();
  }

  // ---- internals ----------------------------------------------------------------------------------

  private openStaging(rel: string, readable: boolean, ino: number): Handle {
    let st = this.staging.get(rel);
    if (st) {
      this.resize(st, 0);
    } else {
      let native: number | undefined;
      try {
        native = this.stager?.create();
      } catch (e) {
        this.log(`native write staging unavailable for ${rel}: ${String(e)}`);
      }
      st = {
        name: rel,
        data: Buffer.alloc(0),
        sizeBytes: 0,
        hash: new StreamHasher(),
        gate: undefined,
        dirty: false,
        pending: true, // created or truncated: commits at the last release even if nothing is written
        truncationClosed: false,
        closedClean: false,
        handles: 0,
        orphaned: false,
        mtimeMs: Date.now(),
        ino,
        native,
        nativeSealed: false,
        committed: undefined,
      };
      this.staging.set(rel, st);
    }
    return this.joinStaging(st, readable);
  }

  private joinStaging(st: Staging, readable: boolean): Handle {
    const h = this.addHandle({ kind: 'write', staging: st, readable });
    st.handles++;
    st.closedClean = false;
    return h;
  }

  private addHandle(file: OpenFile): Handle {
    if (this.handles.size >= HANDLES_MAX) {
      if (file.kind === 'read') file.release();
      throw new CascadeError('EBUSY', `too many open files (${HANDLES_MAX})`);
    }
    while (this.handles.has(this.nextHandle) || this.nextHandle === 0) this.nextHandle = (this.nextHandle + 1) % 0x7fffffff;
    const h = this.nextHandle++;
    this.handles.set(h, file);
    return h;
  }

  private handle(handle: Handle): OpenFile {
    const h = this.handles.get(handle);
    if (!h) throw new CascadeError('EBADF', `no open handle ${handle}`);
    return h;
  }

  /** Commit the staging buffer as a new version if it changed since the last commit. */
  private async commit(st: Staging): Promise<void> {
    while (st.gate) await st.gate;
    this.refresh(st);
    if (!(st.dirty || st.pending) || st.orphaned) return;
    this.store.checkAdmission(st.sizeBytes);
    // Writes wait at the gate until the store has the content: the bytes hashed are the bytes stored.
    let open!: () => void;
    st.gate = new Promise<void>((resolve) => (open = resolve));
    const [dirty, pending] = [st.dirty, st.pending];
    try {
      if (st.native !== undefined) {
        st.dirty = false;
        st.pending = false;
        await this.commitNative(st);
      } else {
        const data = st.data.subarray(0, st.sizeBytes);
        const sha = st.hash && st.hash.lengthBytes === st.sizeBytes ? await st.hash.digest() : undefined;
        st.dirty = false;
        st.pending = false;
        st.committed = await this.store.put(st.name, data, sha, st.ino);
      }
      st.truncationClosed = false; // readers read the new version now
      await this.saveMode(st.name);
    } catch (e) {
      st.dirty = dirty;
      st.pending = pending;
      throw e;
    } finally {
      st.gate = undefined;
      open();
    }
  }

  private async dropStaging(st: Staging): Promise<void> {
    if (this.staging.get(st.name) === st) this.staging.delete(st.name);
    if (st.native !== undefined) {
      this.stager?.drop(st.native);
      st.native = undefined;
    }
    this.stagingBytes -= st.data.length;
    st.data = Buffer.alloc(0);
    // A created file whose commit failed, and that has no committed version, vanishes.
    if (!st.orphaned && st.committed === undefined && !(await this.exists(st.name)) && !this.staging.has(st.name)) this.tree.removeFile(st.name);
  }

  // ---- native write staging (the native engine's stager) ---------------------------------------

  useStager(stager: WriteStager | undefined): boolean {
    this.stager = stager !== undefined && this.store.dramArena() !== undefined ? stager : undefined;
    return this.stager !== undefined;
  }

  stageOf(handle: Handle): number | undefined {
    const h = this.handles.get(handle);
    return h?.kind === 'write' ? h.staging.native : undefined;
  }

  async detachStager(): Promise<void> {
    const all = new Set<Staging>([...this.staging.values()]);
    for (const h of this.handles.values()) if (h.kind === 'write') all.add(h.staging);
    for (const st of all) {
      while (st.gate) await st.gate;
      try {
        await this.toJs(st);
      } catch (e) {
        this.log(`staged bytes of ${st.name} could not be kept at unmount: ${String(e)}`);
      }
    }
    this.stager = undefined;
  }

  /** Bring size, times and the dirty flag of a native stage into the staging record. */
  private refresh(st: Staging, takeDirty = true): void {
    if (st.native === undefined) return;
    const info = this.stager!.info(st.native, takeDirty);
    st.sizeBytes = info.sizeBytes;
    st.mtimeMs = info.mtimeMs;
    if (info.dirty) st.dirty = true;
  }

  /**
   * Move a native stage's bytes into JS memory (a write it did not take, a truncate, unmount): from then
   * on the file is staged as without the native engine. Behind the gate: nothing else touches it.
   */
  private async toJs(st: Staging): Promise<void> {
    const id = st.native;
    if (id === undefined) return;
    const stager = this.stager!;
    let open!: () => void;
    st.gate = new Promise<void>((resolve) => (open = resolve));
    try {
      const info = stager.freeze(id); // from here its writes reach write(), which waits at the gate
      const size = info.sizeBytes;
      await this.intoJsBuffer(st, size, async (target) => {
        if (!st.nativeSealed) {
          if (stager.read(id, 0, target) !== size) throw new CascadeError('EIO', `staged bytes of ${st.name} are incomplete`);
        } else if (size > 0) {
          // Committed since: the content is the version that commit made.
          const v = st.committed;
          if (v === undefined || v.sizeBytes !== size) throw new CascadeError('EIO', `the committed content of ${st.name} is unknown`);
          if ((await this.store.readContent(v, 0, target)) !== size) throw new CascadeError('EIO', `committed content of ${st.name} is incomplete`);
        }
      });
      st.mtimeMs = info.mtimeMs;
      if (info.dirty) st.dirty = true;
    } finally {
      st.gate = undefined;
      open();
    }
  }

  /**
   * Stage `st` in JS memory from here: a buffer for its sizeBytes of content, counted against the
   * staging limit, filled by `fill`; its native stage (if any) is dropped. The store hashes it at commit.
   */
  private async intoJsBuffer(st: Staging, sizeBytes: number, fill: (target: Buffer) => Promise<void> | void): Promise<void> {
    const capacity = Math.min(this.store.maxBlockBytes, Math.max(sizeBytes, STAGING_MIN_BYTES));
    this.checkStagingRoom(capacity);
    const data = allocLarge(capacity);
    await fill(data.subarray(0, sizeBytes));
    if (st.native !== undefined) this.stager?.drop(st.native);
    st.native = undefined;
    st.nativeSealed = false;
    st.data = data;
    this.stagingBytes += capacity;
    st.sizeBytes = sizeBytes;
    st.hash = sizeBytes === 0 ? new StreamHasher() : undefined;
  }

  /** Commit a native stage: its sealed arena block becomes the version, with no copy. Under the gate. */
  private async commitNative(st: Staging): Promise<void> {
    const stager = this.stager!;
    const id = st.native!;
    let block: SealedBlock;
    if (st.nativeSealed) {
      // Sealed by an earlier commit and not written since (writes would have moved it to JS): a
      // pending re-commit of the same content.
      const v = st.committed!;
      st.committed = await this.store.link(st.name, v.sha256, st.ino);
      return;
    }
    block = await stager.seal(id);
    stager.info(id, true); // writes that landed before the seal are in the block
    const owner = { taken: false };
    try {
      st.committed = await this.store.putSealed(st.name, block, st.ino, owner);
      st.nativeSealed = true;
      st.sizeBytes = block.sizeBytes;
    } catch (e) {
      // Keep the content for the retry at release: JS stages it from here.
      try {
        await this.intoJsBuffer(st, block.sizeBytes, (target) => this.store.readSealed(block, target));
      } catch (e2) {
        this.log(`the content of ${st.name} was lost after a failed commit: ${String(e2)}`);
      }
      throw e;
    } finally {
      if (!owner.taken) this.store.freeSealed(block);
    }
  }

  private orphan(st: Staging): void {
    st.orphaned = true;
    if (this.staging.get(st.name) === st) this.staging.delete(st.name);
  }

  /**
   * Grow the buffer for a write ending at endBytes. A large copy runs on a worker (native addon) behind
   * the gate, so the event loop keeps serving while a 1 GiB file arrives.
   */
  private async grow(st: Staging, endBytes: number): Promise<void> {
    const old = st.data;
    const next = this.ensureCapacity(st, endBytes, false);
    if (next === undefined) return;
    if (st.sizeBytes < COPY_ASYNC_MIN_BYTES) {
      old.copy(next, 0, 0, st.sizeBytes);
      st.data = next;
      return;
    }
    let open!: () => void;
    st.gate = new Promise<void>((resolve) => (open = resolve));
    try {
      await copyBytes(next, 0, old.subarray(0, st.sizeBytes));
      st.data = next;
    } finally {
      st.gate = undefined;
      open();
    }
  }

  /** Make room for endBytes; copies the content itself unless `copy` is false (then returns the new buffer). */
  private ensureCapacity(st: Staging, endBytes: number, copy = true): Buffer | undefined {
    if (endBytes > this.store.maxBlockBytes) throw new CascadeError('EFBIG', `a file is at most ${this.store.maxBlockBytes} bytes`);
    if (endBytes <= st.data.length) return undefined;
    // Double, so a file written in 128 KiB pieces is copied O(log n) times, not once per write.
    const capacity = Math.min(this.store.maxBlockBytes, Math.max(endBytes, st.data.length * 2, STAGING_MIN_BYTES));
    const growth = capacity - st.data.length;
    this.checkStagingRoom(growth);
    const next = allocLarge(capacity);
    this.stagingBytes += growth;
    if (!copy) return next;
    st.data.copy(next, 0, 0, st.sizeBytes);
    st.data = next;
    return undefined;
  }

  /** ENOSPC when files being written would hold more than the staging limit with `growthBytes` more. */
  private checkStagingRoom(growthBytes: number): void {
    if (this.stagingBytes + growthBytes > this.stagingCapacityBytes) {
      throw new CascadeError('ENOSPC', `files being written hold ${this.stagingBytes} bytes; the staging limit is ${this.stagingCapacityBytes}`);
    }
  }

  private resize(st: Staging, sizeBytes: number): void {
    if (st.native !== undefined) {
      // Only truncation to 0 reaches here natively (others go through toJs first): the content goes,
      // and JS stages the file from now on (its handles' writes reach write()).
      assert(sizeBytes === 0, 'a native stage is resized only to 0');
      const info = this.stager!.freeze(st.native);
      this.stager!.drop(st.native);
      st.native = undefined;
      st.sizeBytes = info.sizeBytes;
      st.mtimeMs = info.mtimeMs;
      st.dirty = st.dirty || info.dirty;
      st.hash = undefined;
    }
    if (sizeBytes > st.sizeBytes) {
      this.ensureCapacity(st, sizeBytes);
      st.data.fill(0, st.sizeBytes, sizeBytes);
    }
    if (sizeBytes !== st.sizeBytes || sizeBytes === 0) {
      if (sizeBytes === 0) {
        st.hash = new StreamHasher();
      } else if (st.hash && (sizeBytes < st.hash.lengthBytes || sizeBytes > st.sizeBytes)) {
        st.hash = undefined;
      }
      st.sizeBytes = sizeBytes;
      st.dirty = true;
      st.mtimeMs = Date.now();
    }
    if (sizeBytes === 0) st.pending = true; // O_TRUNC of a file being written starts it over
  }

  /**
   * What `rel` is: the tree's answer, or with a shared namespace, on a miss, the store's (a name made
   * by another node joins the tree, with its directories).
   */
  private async kindOf(rel: string, resolved?: { version?: VersionRecord }): Promise<'dir' | 'file' | undefined> {
    const known = this.tree.kindOf(rel);
    if (known !== undefined || !this.options.sharedNamespace || rel === '' || !validDirName(rel)) return known;
    // Absent a moment ago, and no other node has made it since (the change feed would have said).
    if (this.absent.has(rel)) return undefined;
    const seq = this.changeSeq;
    const found = await this.store.lookup(rel);
    // The caller's request may use the version just read instead of asking the store again.
    if (resolved) resolved.version = found.version;
    const kind = found.version !== undefined ? 'file' : found.dir ? 'dir' : undefined;
    if (kind === undefined) {
      // Remembered only where no change came in meanwhile (its message may have come before the answer).
      if (this.unwatchStore !== undefined && this.changeSeq === seq) this.absent.set(rel, true);
      return undefined;
    }
    if (found.dirMode !== undefined) this.dirModes.set(rel, found.dirMode);
    await this.adopt(rel, kind);
    return this.tree.kindOf(rel);
  }

  /** A file or directory another node made: into the tree, with its missing directories numbered. */
  private async adopt(rel: string, kind: 'dir' | 'file'): Promise<void> {
    const path = kind === 'dir' ? `${rel}/\0` : rel; // a directory: as the parent of a placeholder
    const inos: number[] = [];
    for (let i = this.tree.missingDirs(path); i > 0; i--) inos.push(await this.inodes.take());
    if (this.tree.kindOf(rel) !== undefined) return; // another request adopted it meanwhile
    if (kind === 'dir') this.tree.addDirsWithParents(rel, () => inos.shift()!);
    else this.tree.addNameWithParents(rel, () => inos.shift()!);
  }

  /**
   * Shared namespace: bring a directory's entries in line with the store (names made or removed by
   * other nodes). Directories made here with mkdir and files being written here stay.
   */
  private async syncDir(rel: string): Promise<void> {
    const prefix = rel === '' ? '' : `${rel}/`;
    const files = new Set<string>();
    const dirs = new Set<string>();
    let after: string | undefined;
    for (;;) {
      const page = await this.store.list(prefix, { after, limit: LIST_PAGE });
      for (const name of page) {
        const rest = name.slice(prefix.length);
        const slash = rest.indexOf('/');
        if (slash < 0) files.add(rest);
        else dirs.add(rest.slice(0, slash));
      }
      if (page.length < LIST_PAGE) break;
      after = page[page.length - 1];
    }
    for (after = undefined; ; ) {
      const page = await this.store.dirs(prefix, { after, limit: LIST_PAGE });
      for (const [name, mode] of page) {
        const rest = name.slice(prefix.length);
        const slash = rest.indexOf('/');
        dirs.add(slash < 0 ? rest : rest.slice(0, slash));
        this.dirModes.set(name, mode);
      }
      if (page.length < LIST_PAGE) break;
      after = page[page.length - 1][0];
    }
    if (this.tree.kindOf(rel) !== 'dir') return;
    for (const [name, kind] of [...this.tree.children(rel)]) {
      const child = prefix + name;
      if (kind === 'file' && !files.has(name) && !this.staging.has(child)) this.tree.removeFile(child);
    }
    for (const name of files) if (this.tree.kindOf(prefix + name) === undefined) await this.adopt(prefix + name, 'file');
    for (const name of dirs) if (this.tree.kindOf(prefix + name) === undefined) await this.adopt(prefix + name, 'dir');
  }

  /** The inode number a write session of `rel` gets: the file's own if it exists, else a fresh one. */
  private async fileIno(rel: string): Promise<number> {
    const st = this.staging.get(rel);
    if (st) return st.ino;
    return (await this.current(rel))?.ino ?? (await this.inodes.take());
  }

  private async exists(rel: string): Promise<boolean> {
    return (await this.current(rel)) !== undefined;
  }

  private async current(rel: string): Promise<VersionRecord | undefined> {
    try {
      return await this.store.resolve(rel);
    } catch (e) {
      if (isCascadeError(e, 'ENOENT')) return undefined;
      throw e;
    }
  }

  /**
   * The store's copy of a file libfuse hid after an unlink while open, removed before its hidden name's
   * last release because the name is being created again. Content pinned meanwhile (through another name
   * with the same content) keeps it, as before: the new file then continues its history.
   */
  private async dropHiddenFile(rel: string): Promise<void> {
    try {
      if (await this.exists(rel)) await this.store.delete(rel);
      this.pendingDelete.delete(rel);
    } catch (e) {
      if (!isCascadeError(e, 'EPERM')) throw e;
      this.log(`${rel}, unlinked while open, is pinned: the file created under its name continues its history`);
    }
  }

  /** libfuse hides `src` (open while unlinked or replaced) under `hiddenRel`. See HIDDEN_RE. */
  private async hide(src: string, hiddenRel: string): Promise<void> {
    const version = await this.current(src);
    if (version && this.store.isPinned(version.sha256)) throw new CascadeError('EPERM', `/kv/${src} is pinned; unpin it first`);
    const st = this.staging.get(src);
    if (st) this.orphan(st); // a file replaced or unlinked while being written is never committed
    this.setHidden(hiddenRel, { target: src, version, staging: st });
    if (version) this.pendingDelete.set(src, hiddenRel);
    this.tree.removeFile(src);
  }

  private async renameDir(src: string, dst: string, dstKind: 'dir' | 'file' | undefined): Promise<void> {
    if (dstKind === 'file') throw new CascadeError('ENOTDIR', `/kv/${dst} is not a directory`);
    if (dstKind === 'dir' && this.tree.children(dst).size > 0) throw new CascadeError('ENOTEMPTY', `/kv/${dst} is not empty`);
    if (dst.startsWith(`${src}/`)) throw new CascadeError('EINVAL', 'cannot move a directory into itself');
    if (dstKind === 'dir') this.checkNoHidden(dst);
    validateDirName(dst);
    const files = this.tree.filesUnder(src);
    if (files.some((f) => this.staging.has(f))) throw new CascadeError('EBUSY', `files under /kv/${src} are being written`);
    // Not atomic as a whole: each file moves atomically, in order (documented).
    if (dstKind === 'dir') this.tree.removeDir(dst);
    for (const f of files) {
      const to = dst + f.slice(src.length);
      // A file libfuse hid there (unlinked while open) goes now: its hidden name's last release would
      // otherwise delete the file moved in (found while modelling hidden files for test/mount/model.test.ts).
      if (this.pendingDelete.has(to)) await this.dropHiddenFile(to);
      await this.store.rename(f, to);
      // The store moved the kept mode; the copy in memory follows (else the file would show 0644).
      const mode = this.modes.get(f);
      this.modes.delete(f);
      if (mode !== undefined) this.modes.set(to, mode);
    }
    // Directories made by mkdir keep their records (and modes) at their new paths.
    for (const [d, mode] of await this.dirRecords(src)) {
      const to = dst + d.slice(src.length);
      await this.store.makeDir(to, mode);
      await this.store.removeDir(d);
      this.dirModes.delete(d);
      this.dirModes.set(to, mode);
    }
    this.tree.moveDir(src, dst);
    // Files libfuse hid in the subtree (unlinked while open) move with it: libfuse asks for them at
    // the new path (fstat of their descriptors, the unlink at their last release). Their store names
    // stay where they were, deleted at that release.
    for (const [rel, entry] of [...this.hidden]) {
      if (!rel.startsWith(`${src}/`)) continue;
      const to = dst + rel.slice(src.length);
      this.deleteHidden(rel);
      this.setHidden(to, entry);
      if (this.pendingDelete.get(entry.target) === rel) this.pendingDelete.set(entry.target, to);
    }
  }

  /** The directory records (makeDir) of `rel` and of every directory under it, with their modes. */
  private async dirRecords(rel: string): Promise<Array<[string, number]>> {
    const out: Array<[string, number]> = [];
    const own = await this.store.dirMode(rel);
    if (own !== undefined) out.push([rel, own]);
    for (let after: string | undefined; ; ) {
      const page = await this.store.dirs(`${rel}/`, { after, limit: LIST_PAGE });
      out.push(...page);
      if (page.length < LIST_PAGE) return out;
      after = page[page.length - 1][0];
    }
  }

  private kvRel(path: string, op: string): string {
    if (path === '/.cascade' || path.startsWith('/.cascade/')) throw new CascadeError('EROFS', `${op}: ${path} is read-only`);
    // The root holds only kv and .cascade: making anything else there is refused, not "not found".
    if (path !== '/kv' && !path.startsWith('/kv/') && path !== '/' && path !== '') {
      throw new CascadeError('EPERM', `${op}: only /kv/<model>/... is writable`);
    }
    const p = parse(path);
    if (p.kind === 'kv') return p.rel;
    if (p.kind === 'root') throw new CascadeError('EPERM', `${op}: only /kv/<model>/... is writable`);
    throw new CascadeError('EROFS', `${op}: ${path} is read-only`);
  }

  private checkFileName(rel: string): void {
    if (!rel.includes('/')) throw new CascadeError('EPERM', `/kv/${rel}: files live under /kv/<model>/`);
    validateName(rel);
  }

  private async xattrTarget(path: string, name: string): Promise<string> {
    if (name !== XATTR_PINNED && name !== XATTR_SHA256 && name !== XATTR_TIER && name !== XATTR_LINK && name !== XATTR_CUDA_IPC && name !== XATTR_EVICT) {
      // The kernel asks for security.capability on every write: answer without touching the store
      // (the path was already looked up by the kernel).
      throw new CascadeError('EOPNOTSUPP', `unsupported extended attribute ${name}`);
    }
    const p = parse(path);
    if (p.kind !== 'kv' || (await this.kindOf(p.rel)) !== 'file') {
      await this.getattr(path);
      throw new CascadeError('EOPNOTSUPP', `${name} applies to files under /kv only`);
    }
    return p.rel;
  }

  private async resolveVirtual(p: Extract<Parsed, { kind: 'versions' | 'at' }>): Promise<'dir' | VersionRecord> {
    if (p.rel === undefined) return 'dir';
    const kind = await this.kindOf(p.rel);
    if (kind === 'dir') return 'dir';
    if (p.kind === 'at') {
      if (kind !== 'file') throw new CascadeError('ENOENT', `no such file: /kv/${p.rel}`);
      return this.store.resolve(p.rel, { atMs: p.timeMs });
    }
    if (kind === 'file') return 'dir'; // versions/kv/<file> lists version numbers
    const { parent, base } = split(p.rel);
    if ((await this.kindOf(parent)) !== 'file' || !/^[1-9]\d{0,15}$/.test(base)) throw new CascadeError('ENOENT', `no such version: ${p.rel}`);
    return this.store.resolve(parent, { version: Number(base) });
  }

  private async metaFile(file: MetaFileName): Promise<Buffer> {
    if (file === 'stats.json') return this.stats();
    if (file === 'pins.json') return this.pins();
    const info = this.options.clientInfo?.();
    if (info === undefined) throw new CascadeError('ENOENT', 'no same-node client service on this mount');
    return Buffer.from(JSON.stringify(info, null, 2) + '\n');
  }

  private async stats(): Promise<Buffer> {
    if (!this.statsSnapshot || Date.now() - this.statsSnapshot.atMs >= STATS_SNAPSHOT_MS) {
      const s = await this.store.stats();
      const d = this.loopDelay;
      // Beyond the sampling interval: how late the JS thread came to a timer.
      const late = (ns: number): number => (Number.isFinite(ns) ? Math.max(0, ns / 1e6 - LOOP_DELAY_SAMPLE_MS) : 0);
      const eventLoop = { delayMaxMs: late(d.max), delayP99Ms: late(d.percentile(99)), delayMeanMs: late(d.mean) };
      // daemon: who serves this mount (`cascade mounts` lists it; `cascade unmount` waits for the pid).
      const daemon = { pid: process.pid, host: os.hostname(), mountedAtMs: this.mountTimeMs, dataDir: this.store.dataDir };
      const body = { daemon, ...s, fs: { openHandles: this.handles.size, stagingFiles: this.staging.size, stagingBytes: this.stagingBytes }, eventLoop, engine: this.options.engineInfo?.() };
      this.statsSnapshot = { atMs: Date.now(), data: Buffer.from(JSON.stringify(body, null, 2) + '\n') };
    }
    return this.statsSnapshot.data;
  }

  /**
   * pins.json: the pin figures and the files whose content is pinned. Rendered in the daemon from the
   * store's pins, not by a client walking MOUNT/kv with one getxattr per file: measured here, that walk
   * takes ~150 us a file (15 s for 100k), this ~8 us a name, and nothing at all with no pins. Kept
   * like stats.json's snapshot, so the getattr and the open of one read see the same bytes; one
   * rendering at a time (a 100k-name rendering takes most of a second).
   */
  private async pins(): Promise<Buffer> {
    const generation = this.pinsGeneration;
    const snap = this.pinsSnapshot;
    if (snap && snap.generation === generation && Date.now() - snap.atMs < STATS_SNAPSHOT_MS) return snap.data;
    if (this.pinsRendering?.generation === generation) return this.pinsRendering.data;
    const rendering = (async () => {
      const { names, total } = await this.store.pinnedNames(PINS_LISTED_MAX);
      const { pinned } = await this.store.stats();
      const body = { pinned, files: names, total, truncated: total > names.length };
      const data = Buffer.from(JSON.stringify(body, null, 2) + '\n');
      if (this.pinsGeneration === generation) this.pinsSnapshot = { atMs: Date.now(), generation, data };
      return data;
    })().finally(() => {
      if (this.pinsRendering?.data === rendering) this.pinsRendering = undefined;
    });
    this.pinsRendering = { generation, data: rendering };
    return rendering;
  }

  /** A directory under /kv (its DirInfo), or one of the mount's own (an inode number; mount time). */
  private dirAttr(dir: DirInfo | number, perms = 0o755): FileAttr {
    const d = typeof dir === 'number' ? { ino: dir, mtimeMs: this.mountTimeMs, ctimeMs: this.mountTimeMs } : dir;
    return {
      mode: S_IFDIR | perms,
      sizeBytes: 4096,
      nlink: 2,
      uid: this.options.uid,
      gid: this.options.gid,
      mtimeMs: d.mtimeMs,
      ctimeMs: d.ctimeMs,
      atimeMs: d.mtimeMs,
      ino: d.ino,
    };
  }

  private fileAttr(sizeBytes: number, timeMs: number, perms: number, ino: number): FileAttr {
    return { mode: S_IFREG | perms, sizeBytes, nlink: 1, uid: this.options.uid, gid: this.options.gid, mtimeMs: timeMs, ctimeMs: timeMs, atimeMs: timeMs, ino };
  }

  private versionAttr(v: VersionRecord): FileAttr {
    return this.fileAttr(v.sizeBytes, v.timeMs, this.modes.get(v.name) ?? 0o644, v.ino);
  }

  private stagingAttr(st: Staging): FileAttr {
    this.refresh(st, false);
    return this.fileAttr(st.sizeBytes, st.mtimeMs, this.modes.get(st.name) ?? 0o644, st.ino);
  }

  private log(message: string): void {
    (this.options.log ?? ((m: string) => process.stderr.write(`cascade: ${m}\n`)))(message);
  }
}

function validDirName(rel: string): boolean {
  try {
    validateDirName(rel);
    return true;
  } catch {
    return false;
  }
}

function copyRange(src: Buffer, sizeBytes: number, offsetBytes: number, target: Buffer): number {
  if (offsetBytes >= sizeBytes) return 0;
  const n = Math.min(target.length, sizeBytes - offsetBytes);
  src.copy(target, 0, offsetBytes, offsetBytes + n);
  return n;
}

/** The mount path of a store-relative directory ('' is /kv). */
function kvPath(rel: string): string {
  return rel === '' ? '/kv' : `/kv/${rel}`;
}

/** Split an absolute mount path into what it names. Components are validated where they are used. */
export function parse(path: string): Parsed {
  if (path === '/' || path === '') return { kind: 'root' };
  const parts = path.split('/').slice(1);
  if (parts.some((x) => x === '')) throw new CascadeError('EINVAL', `bad path ${path}`);
  for (const part of parts) {
    if (Buffer.byteLength(part) > NAME_COMPONENT_MAX_BYTES) throw new CascadeError('ENAMETOOLONG', `a component of ${path} is over 255 bytes`);
  }
  if (parts[0] === 'kv') return { kind: 'kv', rel: parts.slice(1).join('/') };
  if (parts[0] !== '.cascade') throw new CascadeError('ENOENT', `no such file: ${path}`);
  if (parts.length === 1) return { kind: 'meta' };
  if ((parts[1] === 'stats.json' || parts[1] === 'client.json' || parts[1] === 'pins.json') && parts.length === 2) return { kind: 'stats', file: parts[1] };
  if (parts[1] === 'versions') {
    if (parts.length === 2) return { kind: 'versions', rel: undefined };
    if (parts[2] !== 'kv') throw new CascadeError('ENOENT', `no such file: ${path}`);
    return { kind: 'versions', rel: parts.slice(3).join('/') };
  }
  if (parts[1] === 'at') {
    if (parts.length === 2) return { kind: 'atroot' };
    if (!/^\d{1,16}$/.test(parts[2])) throw new CascadeError('ENOENT', `${parts[2]} is not a unix time in ms`);
    const timeMs = Number(parts[2]);
    if (parts.length === 3) return { kind: 'at', timeMs, rel: undefined };
    if (parts[3] !== 'kv') throw new CascadeError('ENOENT', `no such file: ${path}`);
    return { kind: 'at', timeMs, rel: parts.slice(4).join('/') };
  }
  throw new CascadeError('ENOENT', `no such file: ${path}`);
}


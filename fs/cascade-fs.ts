// The filesystem the engines serve (CascadeFsOps): CascadeFs composes the modules that own each part of it.
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
 *
 * The parts, each with its own state, composed here:
 *   fs/paths.ts       what a path names; fixed and derived inode numbers
 *   fs/namespace.ts   what each name under /kv is (the tree), and other nodes' changes to it
 *   fs/attrs.ts       file and directory modes, and the attributes built from them
 *   fs/staging.ts     open handles, and write sessions until they commit
 *   fs/hidden.ts      files libfuse hid while open after an unlink or replace
 *   fs/tree-ops.ts    mkdir, rmdir, unlink, rename
 *   fs/virtual.ts     the root and the /.cascade tree
 *   fs/xattrs.ts      the user.cascade.* extended attributes
 */
import * as fs from 'node:fs';
import { NAME_COMPONENT_MAX_BYTES } from '../store/constants';
import { CascadeError } from '../store/errors';
import type { VersionRecord } from '../store/meta';
import type { DramHold, Store } from '../store/store';
import { Attrs } from './attrs';
import { Hidden } from './hidden';
import { currentVersion, hasVersion, InodePool, loadTree, Namespace } from './namespace';
import { checkFileName, derivedIno, INO, kvPath, kvRel, parse } from './paths';
import { OpenFiles } from './staging';
import { TreeOps } from './tree-ops';
import type { DirTree } from './tree';
import type { Caller, CascadeFsOps, DirEntry, DirWatcher, FileAttr, ListedEntry, FsStatfs, Handle, RemoteWatcher, StableAttr, WriteStager } from './types';
import { Virtual } from './virtual';
import { Xattrs } from './xattrs';

export { XATTR_CUDA_IPC, XATTR_EVICT, XATTR_LINK, XATTR_PINNED, XATTR_SHA256, XATTR_TIER } from './xattrs';
export { parse } from './paths';

const O_ACCMODE = 3;
const O_WRONLY = 1;
const O_RDWR = 2;
const O_TRUNC = 0o1000;
const O_EXCL = 0o200;
const O_APPEND = 0o2000;

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

export async function createCascadeFs(store: Store, options: CascadeFsOptions): Promise<CascadeFs> {
  const { tree, modes, dirModes } = await loadTree(store);
  return new CascadeFs(store, tree, options, modes, dirModes);
}

export class CascadeFs implements CascadeFsOps {
  private readonly attrs: Attrs;
  private readonly inodes: InodePool;
  private readonly files: OpenFiles;
  private readonly hidden: Hidden;
  private readonly ns: Namespace;
  private readonly virtual: Virtual;
  private readonly xattrs: Xattrs;
  private readonly ops: TreeOps;

  constructor(
    private readonly store: Store,
    private readonly tree: DirTree,
    private readonly options: CascadeFsOptions,
    modes: Map<string, number> = new Map(),
    dirModes: Map<string, number> = new Map(),
  ) {
    const log = (message: string) => this.log(message);
    const shared = options.sharedNamespace ?? false;
    this.attrs = new Attrs(store, options.uid, options.gid, modes, dirModes);
    this.inodes = new InodePool(store);
    this.files = new OpenFiles(store, tree, this.attrs, options.stagingCapacityBytes, log);
    this.hidden = new Hidden(store, tree, this.files, log);
    this.ns = new Namespace(store, tree, this.attrs.dirModes, this.inodes, shared, {
      writing: (rel) => this.files.isWriting(rel),
      hidden: (rel) => this.hidden.holds(rel),
    });
    this.virtual = new Virtual(store, this.ns, this.attrs, this.files, options);
    this.xattrs = new Xattrs(store, this.ns, this.files, this.attrs, this.virtual, options.uid, (path) => this.getattr(path));
    this.ops = new TreeOps(store, tree, this.ns, this.attrs, this.files, this.hidden, this.inodes, shared);
  }

  // ---- attributes and directories -------------------------------------------------------------------

  async getattr(path: string, handle?: Handle): Promise<FileAttr> {
    const open = handle !== undefined ? this.files.find(handle) : undefined;
    if (open?.kind === 'write') return this.files.attr(open.staging);
    if (open?.kind === 'read') return this.attrs.versionAttr(open.version);
    const p = parse(path);
    if (p.kind !== 'kv') return this.virtual.attr(p, path);
    const hid = this.hidden.get(p.rel);
    if (hid) {
      // A file unlinked or replaced while open (fstat of its descriptors): what its writer is
      // writing, else the version it had; no name links to it any more.
      if (hid.staging) return { ...this.files.attr(hid.staging), nlink: 0 };
      if (hid.version) return { ...this.attrs.versionAttr(hid.version), nlink: 0 };
      return this.attrs.fileAttr(0, this.attrs.mountTimeMs, 0o644, derivedIno(`hidden:${path}`));
    }
    const resolved: { version?: VersionRecord } = {};
    const kind = await this.ns.kindOf(p.rel, resolved);
    if (kind === 'dir') return this.attrs.dirAttr(this.tree.info(p.rel), this.attrs.dirModes.get(p.rel));
    if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
    // A file with a write session open has the session's size and times, for everyone, as after
    // an O_TRUNC on a local filesystem (fstat and SEEK_END of its writers depend on it); readers
    // that open it meanwhile still read the committed content.
    const st = this.files.session(p.rel);
    if (st) return this.files.attr(st);
    const committed = resolved.version ?? (await currentVersion(this.store, p.rel));
    if (committed) return this.attrs.versionAttr(committed);
    // Removed or renamed away by another node: it leaves this tree too.
    if (this.options.sharedNamespace && !this.hidden.has(p.rel)) this.tree.removeFile(p.rel);
    throw new CascadeError('ENOENT', `no such file: ${path}`);
  }

  /**
   * For an engine's attribute cache: the attributes of `path` where they change only through a
   * request that names it (the root, /kv and directories under it, and committed files with no write
   * session), with a file's DRAM arena handle when its content is resident; undefined otherwise (the
   * .cascade tree, a file being written or hidden, and with a shared namespace, where other nodes change
   * names).
   */
  async stableAttr(path: string): Promise<StableAttr | undefined> {
    const p = this.ns.parseLocal(path);
    if (p === undefined) return undefined;
    if (p.kind === 'root') return { attr: this.attrs.dirAttr(INO.root) };
    if (p.kind !== 'kv') return undefined;
    const unstable = () => this.files.isWriting(p.rel) || this.hidden.holds(p.rel);
    const kind = this.tree.kindOf(p.rel);
    if (kind === 'dir') return { attr: this.attrs.dirAttr(this.tree.info(p.rel), this.attrs.dirModes.get(p.rel)) };
    if (kind !== 'file' || unstable()) return undefined;
    const v = await currentVersion(this.store, p.rel);
    if (v === undefined || unstable() || this.tree.kindOf(p.rel) !== 'file') return undefined;
    return { attr: this.attrs.versionAttr(v), blockHandle: this.store.dramHandleOf(v.sha256) };
  }

  writing(path: string): boolean {
    const p = this.ns.parseLocal(path);
    return p !== undefined && p.kind === 'kv' && this.files.isWriting(p.rel);
  }

  watchDirs(w: DirWatcher | undefined): boolean {
    if (this.options.sharedNamespace) return false; // other nodes change names: nothing here is the whole truth
    this.hidden.dirWatcher = w;
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
    return this.ns.watchRemote(w);
  }

  dirListing(path: string): ListedEntry[] | undefined {
    if (this.options.sharedNamespace) return undefined; // names made elsewhere are not in the tree yet
    const p = this.ns.parseLocal(path);
    if (p === undefined || p.kind !== 'kv' || this.tree.kindOf(p.rel) !== 'dir') return undefined;
    const entries: ListedEntry[] = [...this.tree.children(p.rel)].map(([name, kind]) => ({ name, kind }));
    // Names libfuse hid there are not in the tree but are found by lookup.
    entries.push(...this.hidden.listedIn(p.rel));
    return entries;
  }

  async syncAll(): Promise<void> {
    await this.store.syncAll();
  }

  nativeOpened(blockHandles: readonly number[]): void {
    this.store.noteDramOpens(blockHandles);
  }

  async readdir(path: string): Promise<DirEntry[]> {
    const p = parse(path);
    if (p.kind !== 'kv') return this.virtual.list(p, path);
    if (this.options.sharedNamespace) {
      if ((await this.ns.kindOf(p.rel)) === 'dir') await this.ns.syncDir(p.rel);
    }
    return this.ns.entries(p.rel);
  }

  mkdir(path: string, mode: number): Promise<void> {
    return this.ops.mkdir(path, mode);
  }

  rmdir(path: string): Promise<void> {
    return this.ops.rmdir(path);
  }

  // ---- files --------------------------------------------------------------------------------------

  async create(path: string, mode: number, flags: number): Promise<Handle> {
    const rel = kvRel(path, 'create');
    checkFileName(rel);
    const kind = await this.ns.kindOf(rel);
    // The kernel asks only for names it believes absent; one that exists after all (its cached entry
    // was stale) answers as open(2) does on a local filesystem: O_EXCL first, then a directory.
    if (kind !== undefined && (flags & O_EXCL) !== 0) throw new CascadeError('EEXIST', `${path} exists`);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    // Re-created after an unlink while open (libfuse hid the old file): the old file goes from the store
    // now, as an unlink does on the native engine, so that the new file starts empty, with a new history
    // and a new inode number (its open handles keep their leases); else its content could be read back
    // under the new file until that commits.
    const pendingDelete = this.hidden.pendingDelete;
    if (kind === undefined && pendingDelete.has(rel)) await this.hidden.dropFile(rel);
    // An existing file keeps its inode number (O_CREAT|O_TRUNC rewrites it); a new one gets a fresh one.
    // kindOf knows every name the store has (but one unlinked while open): on one node the tree does;
    // with a shared namespace it asked the store (or the change feed said nobody made it since).
    const known = kind !== undefined || pendingDelete.has(rel);
    const ino = known ? await this.fileIno(rel) : await this.inodes.take();
    this.tree.addFile(rel); // EISDIR if a directory took the name meanwhile
    pendingDelete.delete(rel);
    if ((mode & 0o7777) !== 0o644) {
      this.attrs.modes.set(rel, mode & 0o7777);
      this.attrs.unsavedModes.add(rel); // kept in the metadata with the first commit
    }
    return this.files.openStaging(rel, true, ino);
  }

  async open(path: string, flags: number): Promise<Handle> {
    const p = parse(path);
    const writing = (flags & O_ACCMODE) === O_WRONLY || (flags & O_ACCMODE) === O_RDWR;
    if (p.kind !== 'kv') {
      if (writing) throw new CascadeError('EROFS', `${path} is read-only`);
      const target = await this.virtual.open(p, path);
      if (Buffer.isBuffer(target)) return this.files.add({ kind: 'virtual', data: target });
      return this.files.add({ kind: 'read', version: target, release: this.store.lease(target) });
    }
    const kind = await this.ns.kindOf(p.rel);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
    const st = this.files.session(p.rel);
    if (writing) {
      if (flags & O_APPEND) throw new CascadeError('EPERM', `${path}: appending to committed content is not allowed`);
      if (st && !(flags & O_TRUNC) && this.files.closedCommitted(st)) {
        throw new CascadeError('EPERM', `${path}: committed content is immutable; open with O_TRUNC to replace it`);
      }
      if (st) {
        // Another descriptor of a file being written: join it; O_TRUNC starts it over.
        if (flags & O_TRUNC) this.files.resize(st, 0);
        return this.files.joinStaging(st, (flags & O_ACCMODE) === O_RDWR);
      }
      if (!(flags & O_TRUNC)) throw new CascadeError('EPERM', `${path}: committed content is immutable; open with O_TRUNC to replace it`);
      const ino = await this.fileIno(p.rel);
      return this.files.openStaging(p.rel, (flags & O_ACCMODE) === O_RDWR, ino);
    }
    // Created, or truncated and closed, but not committed yet: its content is private to its
    // writers, so it reads as empty.
    if (st?.truncationClosed) return this.files.add({ kind: 'virtual', data: Buffer.alloc(0) });
    const v = await currentVersion(this.store, p.rel);
    if (!v) return this.files.add({ kind: 'virtual', data: Buffer.alloc(0) });
    return this.files.add({ kind: 'read', version: v, release: this.store.lease(v) });
  }

  /**
   * For same-node clients: the version a read-only open of `path` would read (a file under /kv, or a
   * /.cascade/versions or /.cascade/at path), held in the DRAM arena until release().
   */
  async holdForClient(path: string): Promise<DramHold> {
    const p = parse(path);
    let v: VersionRecord | undefined;
    if (p.kind === 'kv') {
      const kind = await this.ns.kindOf(p.rel);
      if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
      if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
      v = await currentVersion(this.store, p.rel);
      if (v === undefined) throw new CascadeError('ENOENT', `${path} has no committed version yet`);
    } else if (p.kind === 'versions' || p.kind === 'at') {
      const target = await this.virtual.resolve(p);
      if (target === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
      v = target;
    } else {
      throw new CascadeError('EINVAL', `${path} is not a block`);
    }
    return this.store.holdInDram(v);
  }

  holdHandle(handle: Handle, minSizeBytes = 0, onLoading?: (arenaHandle: number) => void): Promise<DramHold | undefined> {
    return this.files.holdHandle(handle, minSizeBytes, onLoading);
  }

  contentKeyOf(handle: Handle): { key: number; sizeBytes: number } | undefined {
    return this.files.contentKeyOf(handle);
  }

  read(handle: Handle, target: Buffer, offsetBytes: number): Promise<number> {
    return this.files.read(handle, target, offsetBytes);
  }

  write(handle: Handle, data: Buffer, offsetBytes: number): Promise<number> {
    return this.files.write(handle, data, offsetBytes);
  }

  async truncate(path: string, sizeBytes: number, handle?: Handle): Promise<void> {
    if (!Number.isSafeInteger(sizeBytes) || sizeBytes < 0) throw new CascadeError('EINVAL', 'size must be a non-negative integer');
    const open = handle !== undefined ? this.files.find(handle) : undefined;
    if (open?.kind === 'write') return this.files.truncate(open.staging, sizeBytes);
    const p = parse(path);
    if (p.kind !== 'kv') throw new CascadeError('EROFS', `${path} is read-only`);
    const kind = await this.ns.kindOf(p.rel);
    if (kind === 'dir') throw new CascadeError('EISDIR', `${path} is a directory`);
    if (kind === undefined) throw new CascadeError('ENOENT', `no such file: ${path}`);
    const st = this.files.session(p.rel);
    if (st && !(sizeBytes !== 0 && this.files.closedCommitted(st))) return this.files.truncate(st, sizeBytes);
    const v = await this.store.resolve(p.rel);
    if (sizeBytes === v.sizeBytes && sizeBytes === 0) return;
    if (sizeBytes !== 0) throw new CascadeError('EPERM', `${path}: committed content is immutable (only truncation to 0 replaces it)`);
    await this.store.put(p.rel, Buffer.alloc(0));
  }

  flush(handle: Handle): Promise<void> {
    return this.files.flush(handle);
  }

  fsync(handle: Handle): Promise<void> {
    return this.files.fsync(handle);
  }

  release(handle: Handle): Promise<void> {
    return this.files.release(handle);
  }

  unlink(path: string): Promise<void> {
    return this.ops.unlink(path);
  }

  rename(from: string, to: string): Promise<void> {
    return this.ops.rename(from, to);
  }

  async utimens(path: string, _atimeMs: number, mtimeMs: number): Promise<void> {
    // Directories keep the time given (in memory). Files accept it so that touch and cp -p work, but a
    // version's time is its commit time and does not change.
    const p = parse(path);
    if (p.kind === 'kv' && (await this.ns.kindOf(p.rel)) === 'dir') return this.tree.setTimes(p.rel, mtimeMs);
    await this.getattr(path);
  }

  async chmod(path: string, mode: number): Promise<void> {
    const p = parse(path);
    if (p.kind !== 'kv' || (await this.ns.kindOf(p.rel)) !== 'file') {
      await this.getattr(path);
      throw new CascadeError('EPERM', `${path}: only files under /kv can change mode`);
    }
    const perms = mode & 0o7777;
    // A committed file keeps its mode in the metadata (a restart must not widen access); one still
    // being written for the first time gets it with its first commit.
    if (await hasVersion(this.store, p.rel)) {
      await this.store.setMode(p.rel, perms);
      this.attrs.unsavedModes.delete(p.rel);
    } else {
      this.attrs.unsavedModes.add(p.rel);
    }
    this.attrs.modes.set(p.rel, perms);
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

  // ---- extended attributes (fs/xattrs.ts) ----------------------------------------------------------

  getxattr(path: string, name: string, caller?: Caller): Promise<Buffer> {
    return this.xattrs.get(path, name, caller);
  }

  setxattr(path: string, name: string, value: Buffer, caller?: Caller): Promise<void> {
    return this.xattrs.set(path, name, value, caller);
  }

  listxattr(path: string): Promise<string[]> {
    return this.xattrs.list(path);
  }

  removexattr(path: string, name: string, caller?: Caller): Promise<void> {
    return this.xattrs.remove(path, name, caller);
  }

  // ---- native write staging (fs/staging.ts) --------------------------------------------------------

  useStager(stager: WriteStager | undefined): boolean {
    return this.files.useStager(stager);
  }

  stageOf(handle: Handle): number | undefined {
    return this.files.stageOf(handle);
  }

  detachStager(): Promise<void> {
    return this.files.detachStager();
  }

  async close(): Promise<void> {
    this.virtual.close();
    this.xattrs.close();
    this.ns.close();
    // Commit what writers left open (a clean unmount loses nothing), then persist the store.
    await this.files.close();
    await this.hidden.close();
  }

  /** The inode number a write session of `rel` gets: the file's own if it exists, else a fresh one. */
  private async fileIno(rel: string): Promise<number> {
    const st = this.files.session(rel);
    if (st) return st.ino;
    return (await currentVersion(this.store, rel))?.ino ?? (await this.inodes.take());
  }

  private log(message: string): void {
    (this.options.log ?? ((m: string) => process.stderr.write(`cascade: ${m}\n`)))(message);
  }
}

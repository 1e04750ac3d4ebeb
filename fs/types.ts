/**
 * The filesystem layer's interface, as the FUSE engines see it: path-based operations that resolve to
 * values or throw CascadeError with a symbolic code. No errno numbers here; mount/engine/errno.ts translates.
 * Paths are absolute within the mount ('/', '/kv/<model>/...', '/.cascade/...').
 */
import type { DramHold } from '../store/store';

/** Who asked: the kernel's record of the calling process (FUSE request header, SO_PEERCRED). */
export interface Caller {
  uid: number;
  gid: number;
  pid: number;
}

export interface FileAttr {
  /** S_IFREG | perms or S_IFDIR | perms. */
  mode: number;
  sizeBytes: number;
  nlink: number;
  uid: number;
  gid: number;
  mtimeMs: number;
  ctimeMs: number;
  atimeMs: number;
  /**
   * The file's inode number: kept by rewrites and renames, new for a file created after an unlink,
   * never reused (docs/SEMANTICS.md, "Inode numbers").
   */
  ino: number;
}

export interface FsStatfs {
  blockBytes: number;
  totalBlocks: number;
  freeBlocks: number;
  availBlocks: number;
  totalFiles: number;
  freeFiles: number;
  nameMaxBytes: number;
}

/** A directory entry: its name and whether it is a directory or a file (readdir's d_type). */
export interface DirEntry {
  name: string;
  kind: 'dir' | 'file';
}

/** An open file handle number (what FUSE calls fh). */
export type Handle = number;

/** A file being written, staged natively: what the engine's stager reports (native/src/engine/stage.h). */
export interface StageInfo {
  sizeBytes: number;
  mtimeMs: number;
  /** Written since the flag was last taken. */
  dirty: boolean;
  /** Its writes reach write() now instead of the stage. */
  forwarding: boolean;
}

/** A sealed stage: its content as a DRAM arena block of exactly sizeBytes, with its SHA-256. */
export interface SealedBlock {
  handle: number;
  sizeBytes: number;
  sha256: string;
}

/**
 * Native write staging, as an engine that has it offers it to the filesystem (the native engine:
 * WRITEs of attached handles land in the DRAM arena and are hashed in C++, never reaching write()).
 * Stage ids are the stager's; every method but seal() is synchronous and cheap.
 */
export interface WriteStager {
  /** A new empty stage, or undefined when none can be made now (the file is staged in JS then). */
  create(): number | undefined;
  info(id: number, takeDirty: boolean): StageInfo;
  /** No more writes land in the stage (they reach write()); its size is final. */
  freeze(id: number): StageInfo;
  read(id: number, offsetBytes: number, target: Buffer): number;
  /** Hash and hand over the content; the stage forwards writes from now on and owns no bytes. */
  seal(id: number): Promise<SealedBlock>;
  drop(id: number): void;
}

export interface CascadeFsOps {
  getattr(path: string, handle?: Handle): Promise<FileAttr>;
  readdir(path: string): Promise<DirEntry[]>;
  mkdir(path: string, mode: number): Promise<void>;
  rmdir(path: string): Promise<void>;
  /** Create (or truncate) a file for writing; it stays a private staging area until its last release. */
  create(path: string, mode: number, flags: number): Promise<Handle>;
  open(path: string, flags: number): Promise<Handle>;
  read(handle: Handle, target: Buffer, offsetBytes: number): Promise<number>;
  write(handle: Handle, data: Buffer, offsetBytes: number): Promise<number>;
  truncate(path: string, sizeBytes: number, handle?: Handle): Promise<void>;
  /** Called on every close() of a descriptor: reports errors the commit would hit (ENOSPC). */
  flush(handle: Handle): Promise<void>;
  /** Make the file durable (commits pending writes first). */
  fsync(handle: Handle): Promise<void>;
  /** The last close of the handle: a written file is committed here, atomically. */
  release(handle: Handle): Promise<void>;
  unlink(path: string): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  utimens(path: string, atimeMs: number, mtimeMs: number): Promise<void>;
  chmod(path: string, mode: number): Promise<void>;
  statfs(path: string): Promise<FsStatfs>;
  /** caller: who asks (user.cascade.cuda_ipc leases are per process); engines that cannot tell pass nothing. */
  getxattr(path: string, name: string, caller?: Caller): Promise<Buffer>;
  /** caller: who asked, where the engine knows it (the native engine's request header). */
  setxattr(path: string, name: string, value: Buffer, caller?: Caller): Promise<void>;
  listxattr(path: string): Promise<string[]>;
  removexattr(path: string, name: string, caller?: Caller): Promise<void>;
  /**
   * Same-node clients (mount/socket/server.ts): the version a read-only open of `path` would read, held
   * in the shared DRAM arena until release(). Optional: a filesystem without a shared arena omits it.
   */
  holdForClient?(path: string): Promise<DramHold>;
  /**
   * The native engine: the bytes of a read handle's version, held in the shared DRAM arena until
   * release(), or undefined where the handle's reads must go through read() (or where its version
   * is smaller than minSizeBytes: holding costs more than serving one read). Optional.
   * onLoading(arenaHandle): the block is being filled from disk into that arena block (before the
   * promise settles; again for a new load should the first block leave DRAM at once); must not throw.
   */
  holdHandle?(handle: Handle, minSizeBytes?: number, onLoading?: (arenaHandle: number) => void): Promise<DramHold | undefined>;
  /**
   * The native engine: the DRAM arena handle naming a read handle's content while it is resident
   * (what the workers' own opens of it are keyed by), without holding it, and the content's size;
   * else undefined. Optional.
   */
  contentKeyOf?(handle: Handle): { key: number; sizeBytes: number } | undefined;
  /**
   * An engine with native write staging offers it (undefined takes it back); true when the filesystem
   * uses it (its store can take sealed arena blocks). Optional.
   */
  useStager?(stager: WriteStager | undefined): boolean;
  /** The stage a write handle's WRITEs should land in (the engine routes them there), if any. */
  stageOf?(handle: Handle): number | undefined;
  /** Before the engine stops: every staged file's bytes move into the filesystem's own memory. */
  detachStager?(): Promise<void>;
  /**
   * An engine's attribute cache (the native engine answers LOOKUP, GETATTR and read-only opens from
   * it): `path`'s attributes where only a request naming it can change them, else undefined. Optional.
   */
  stableAttr?(path: string): Promise<StableAttr | undefined>;
  /**
   * Whether the file at `path` has a write session open now: its attributes show the session's size
   * until it commits, so an engine must not let a reader's page cache trust them. Optional.
   */
  writing?(path: string): boolean;
  /**
   * An engine's directory listings and directory attributes: `w` is told, synchronously and before the
   * request that made the change is answered, of every entry added to or removed from a directory under
   * /kv and of directories that moved or went (absolute paths, e.g. /kv/llama). False where names also
   * change elsewhere (a shared namespace): then nothing is told and nothing may be listed. Optional.
   */
  watchDirs?(w: DirWatcher | undefined): boolean;
  /** Every entry of a /kv directory now (for a listing kept by watchDirs), or undefined. */
  dirListing?(path: string): ListedEntry[] | undefined;
  /**
   * Where names also change elsewhere (a shared namespace whose changes the store hears): `w` is told
   * of each path another node changed (a file's content or mode, a removal, a rename's both ends, a
   * directory made or removed; `subtree` for a directory removed), and `reset` when changes may have
   * been missed. An engine drops what it cached of those paths. stableAttr is offered only while this
   * returns true there. Optional.
   */
  watchRemote?(w: RemoteWatcher | undefined): boolean;
  /** Make everything written durable (fsync of a read handle an engine opened by itself). Optional. */
  syncAll?(): Promise<void>;
  /** Blocks an engine opened by their arena handle, bypassing open(): hits and recent uses. Optional. */
  nativeOpened?(blockHandles: readonly number[]): void;
  /** Finish background work and persist everything (clean unmount). */
  close(): Promise<void>;
}

/**
 * An entry of a directory listing (CascadeFsOps.dirListing): `hidden` is a name lookup finds but
 * readdir does not list (a file libfuse hid while open).
 */
export interface ListedEntry {
  name: string;
  kind: 'file' | 'dir' | 'hidden';
}

/** See CascadeFsOps.watchRemote. */
export interface RemoteWatcher {
  changed(path: string, subtree: boolean): void;
  reset(): void;
}

/** See CascadeFsOps.watchDirs. */
export interface DirWatcher {
  added(dir: string, name: string, kind: ListedEntry['kind']): void;
  removed(dir: string, name: string): void;
  /** `dir` and every directory under it are no longer at those paths. */
  gone(dir: string): void;
}

/** Attributes an engine may cache (see CascadeFsOps.stableAttr). */
export interface StableAttr {
  attr: FileAttr;
  /** A file's content in the DRAM arena: its native handle (stale once the block leaves DRAM). */
  blockHandle?: number;
}

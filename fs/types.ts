/**
 * The filesystem layer's interface, as the FUSE engines see it: path-based operations that resolve to
 * values or throw CascadeError with a symbolic code. No errno numbers here; mount/errno.ts translates.
 * Paths are absolute within the mount ('/', '/kv/<model>/...', '/.cascade/...').
 */
import type { DramHold } from '../store/store';

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
  getxattr(path: string, name: string): Promise<Buffer>;
  setxattr(path: string, name: string, value: Buffer): Promise<void>;
  listxattr(path: string): Promise<string[]>;
  removexattr(path: string, name: string): Promise<void>;
  /**
   * Same-node clients (mount/local-server.ts): the version a read-only open of `path` would read, held
   * in the shared DRAM arena until release(). Optional: a filesystem without a shared arena omits it.
   */
  holdForClient?(path: string): Promise<DramHold>;
  /**
   * The native engine: the bytes of a read handle's version, held in the shared DRAM arena until
   * release(), or undefined where the handle's reads must go through read() (or where its version
   * is smaller than minSizeBytes: holding costs more than serving one read). Optional.
   */
  holdHandle?(handle: Handle, minSizeBytes?: number): Promise<DramHold | undefined>;
  /** Finish background work and persist everything (clean unmount). */
  close(): Promise<void>;
}

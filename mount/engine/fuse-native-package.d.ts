/**
 * Types for the parts of fuse-native 2.2 (which ships none) that mount/engine/fuse-native.ts uses, written
 * from its index.js and fuse-native.c. Every callback takes a status first: 0 or a negative errno;
 * it must be a number (null/undefined makes the native side throw or abort).
 */
declare module 'fuse-native' {
  namespace Fuse {
    type Done = (status: number) => void;
    type DoneWith<T> = (status: number, value?: T) => void;

    /** What getattr answers; times may be Dates or ms numbers. Packed into uint32s (ino, nlink: 32 bits). */
    interface Stat {
      mode: number;
      uid: number;
      gid: number;
      size: number;
      nlink: number;
      ino: number;
      blksize: number;
      blocks: number;
      atime: Date;
      mtime: Date;
      ctime: Date;
      dev?: number;
      rdev?: number;
    }

    /** What statfs answers; every field is packed into a uint32. */
    interface Statfs {
      bsize: number;
      frsize: number;
      blocks: number;
      bfree: number;
      bavail: number;
      files: number;
      ffree: number;
      favail: number;
      fsid: number;
      flag: number;
      namemax: number;
    }

    /** Handlers, with the argument orders of fuse-native's _op_* shims (not always its README's). */
    interface Ops {
      init?(cb: Done): void;
      getattr?(path: string, cb: DoneWith<Stat>): void;
      fgetattr?(path: string, fd: number, cb: DoneWith<Stat>): void;
      statfs?(path: string, cb: DoneWith<Statfs>): void;
      readdir?(path: string, cb: DoneWith<string[]>): void;
      open?(path: string, flags: number, cb: DoneWith<number>): void;
      /** No open flags reach JS for create: fuse-native passes the mode only. */
      create?(path: string, mode: number, cb: DoneWith<number>): void;
      /** cb(bytes read) or cb(negative errno). */
      read?(path: string, fd: number, buffer: Buffer, length: number, position: number, cb: Done): void;
      /** cb(bytes written) or cb(negative errno). */
      write?(path: string, fd: number, buffer: Buffer, length: number, position: number, cb: Done): void;
      flush?(path: string, fd: number, cb: Done): void;
      fsync?(path: string, datasync: number, fd: number, cb: Done): void;
      release?(path: string, fd: number, cb: Done): void;
      truncate?(path: string, size: number, cb: Done): void;
      ftruncate?(path: string, fd: number, size: number, cb: Done): void;
      /** Times in ms. fuse-native 2.2.6 passes atime for both (a bug in fuse-native.c). */
      utimens?(path: string, atime: number, mtime: number, cb: Done): void;
      chmod?(path: string, mode: number, cb: Done): void;
      chown?(path: string, uid: number, gid: number, cb: Done): void;
      mknod?(path: string, mode: number, dev: number, cb: Done): void;
      unlink?(path: string, cb: Done): void;
      rename?(src: string, dest: string, cb: Done): void;
      link?(src: string, dest: string, cb: Done): void;
      symlink?(src: string, dest: string, cb: Done): void;
      mkdir?(path: string, mode: number, cb: Done): void;
      rmdir?(path: string, cb: Done): void;
      setxattr?(path: string, name: string, value: Buffer, position: number, flags: number, cb: Done): void;
      getxattr?(path: string, name: string, position: number, cb: DoneWith<Buffer | null>): void;
      listxattr?(path: string, cb: DoneWith<string[]>): void;
      removexattr?(path: string, name: string, cb: Done): void;
    }

    interface Options {
      debug?: boolean;
      force?: boolean;
      mkdir?: boolean;
      /** ms, or false for none (the default 15 s answers ETIMEDOUT while the op still runs). */
      timeout?: number | false;
      allowOther?: boolean;
      defaultPermissions?: boolean;
      kernelCache?: boolean;
      /** Passed verbatim as fsname=...; libfuse splits it at commas, so it can carry other options. */
      fsname?: string;
      subtype?: string;
    }

    /** The reply function fuse-native hands its _op_* shims; extra values go to the native side. */
    type Signal = (status: number, ...values: unknown[]) => void;
  }

  class Fuse {
    constructor(mnt: string, ops: Fuse.Ops, opts?: Fuse.Options);
    readonly mnt: string;
    readonly ops: Fuse.Ops;
    mount(cb: (err: Error | null) => void): void;
    unmount(cb: (err: Error | null) => void): void;
    static unmount(mnt: string, cb: (err: Error | null) => void): void;

    // Private parts the engine overrides or needs (fuse-native 2.2.6).
    /** The native mount state (a fuse_thread_t); set by mount. */
    _thread: Buffer | null;
    _op_fgetattr(signal: Fuse.Signal, path: string, fd: number): void;
    _op_getxattr(signal: Fuse.Signal, path: string, name: string, valueBuf: Buffer, position: number): void;
    _op_listxattr(signal: Fuse.Signal, path: string, listBuf: Buffer): void;
  }

  export = Fuse;
}

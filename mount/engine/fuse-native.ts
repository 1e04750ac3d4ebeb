/**
 * The FUSE engine over fuse-native (libfuse 2.9, high-level path API): the only file that imports
 * fuse-native. A thin adapter: each FUSE op calls the matching CascadeFsOps method and replies.
 * Every handler is wrapped so that an exception or a rejection becomes an errno (mount/engine/errno.ts),
 * never a crash: a dead daemon leaves every user of the mount with ENOTCONN.
 *
 * fuse-native pitfalls handled here (see shared/FACTS.md):
 * - no options for atomic_o_trunc / big_writes / direct_io: they ride in fsname (libfuse splits it
 *   at commas);
 * - a 15 s default per-op timeout that answers ETIMEDOUT while the op still runs: disabled;
 * - getxattr/listxattr answer a too-small buffer with the full length (the kernel turns that into
 *   EIO; Python's os.getxattr fails for values over 128 bytes): overridden to answer ERANGE;
 * - fgetattr drops the file handle: overridden to pass it, so an open file reports its own version;
 * - utimens passes atime for both times (fuse-native.c), and UTIME_NOW/OMIT arrive as 1073 ms.
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import Fuse = require('fuse-native');
import { nativeBinding as cascadeNative } from '../../native';
import { CascadeError } from '../../store/errors';
import type { CascadeFsOps, FileAttr, FsStatfs } from '../../fs/types';
import { errnoOf, toErrno } from './errno';
import type { RequestObserver } from '../daemon/metrics';
import { checkMountpoint, clearStaleMount, fusermountUnmount, mountEntry, resolveMountpoint } from './mounts';

export { clearStaleMount, fusermountUnmount, mountEntry, resolveMountpoint };

export interface FuseEngineOptions {
  /**
   * Serve reads through the kernel page cache and keep it across opens (kernel_cache): much faster
   * re-reads, but one page cache per path is shared by every open of it, so while a file is being
   * overwritten (O_TRUNC) its readers can get short reads or the writer's staged bytes. Default:
   * direct I/O, where every read reaches the filesystem and each handle sees its own version.
   */
  kernelCache?: boolean;
  /** libfuse's per-request trace on stderr. */
  debug?: boolean;
  /** Told of every request answered (metrics: mount/daemon/metrics.ts). */
  observe?: RequestObserver;
  log?: (msg: string) => void;
}

const STAT_BLOCK_BYTES = 512; // st_blocks counts 512-byte units, whatever the block size
const PREFERRED_IO_BYTES = 4096;
const UINT32_MAX = 0xffff_ffff;
/** chown's "leave unchanged" ((uid_t)-1 as fuse-native hands it over: a uint32). */
const UNCHANGED_ID = UINT32_MAX;
/** UTIME_NOW and UTIME_OMIT ((1 << 30) - 1 and - 2 ns with 0 s) as fuse-native converts them to ms. */
const UTIME_SPECIAL_MS = Math.floor(((1 << 30) - 1) / 1e6);
/** fuse-native reads handles back as int32 (and 0 means "no handle set", which is still 0). */
const MAX_HANDLE = 0x7fff_ffff;
/** The open flags of a create are not passed to JS by fuse-native; the kernel enforces the real ones. */
const CREATE_FLAGS = fs.constants.O_CREAT | fs.constants.O_RDWR;

function defaultLog(msg: string): void {
  process.stderr.write(`cascade: ${msg}\n`);
}

/** The FUSE mount of one CascadeFsOps at one mountpoint. */
export class FuseNativeEngine {
  private fuse: CascadeFuse | undefined;
  private unmounting: Promise<void> | undefined;

  private constructor(
    /** Canonical (symlink-free) path, as /proc/mounts shows it. */
    readonly mountpoint: string,
    private readonly fsOps: CascadeFsOps,
    private readonly log: (msg: string) => void,
    private readonly observe?: RequestObserver,
  ) {}

  /**
   * Mounts fsOps at mountpoint (an existing empty directory); resolves once the kernel has sent
   * INIT, i.e. the mount is live. A stale mount there (its daemon died) is cleared first.
   */
  static async mount(mountpoint: string, fsOps: CascadeFsOps, options: FuseEngineOptions = {}): Promise<FuseNativeEngine> {
    const log = options.log ?? defaultLog;
    if (!fs.existsSync('/dev/fuse')) {
      throw new CascadeError('ENOENT', '/dev/fuse is missing: load the fuse kernel module (modprobe fuse) or run where FUSE is available');
    }
    await clearStaleMount(resolveMountpoint(mountpoint, false), log);
    const mnt = resolveMountpoint(mountpoint);
    const existing = mountEntry(mnt);
    if (existing) throw new CascadeError('EBUSY', `${mnt} is already mounted (${existing.fsType}); unmount it first: cascade unmount ${mnt}`);
    await checkMountpoint(mnt);

    const engine = new FuseNativeEngine(mnt, fsOps, log, options.observe);
    const fuse = new CascadeFuse(mnt, engine.buildOps(), {
      // Access control comes from the kernel: no caller uid/gid reaches JS (FACTS.md).
      defaultPermissions: true,
      // Other users' processes reach the mount; st_mode/uid/gid decide what they may do.
      allowOther: mayAllowOther(),
      timeout: false,
      force: true,
      mkdir: false,
      kernelCache: options.kernelCache === true,
      debug: options.debug === true,
      // atomic_o_trunc: O_TRUNC arrives at open (a whole-file overwrite is known there);
      // big_writes: 128 KiB write requests instead of 4 KiB; use_ino: st_ino is FileAttr.ino;
      // direct_io (unless kernelCache): the kernel's per-path page cache and i_size would mix a
      // writer's staging area into its readers' view and cut reads of live files (stats.json) at a
      // stale size. Costs: no page cache, and shared mmap fails with ENODEV (private mmap works).
      fsname: `cascade,atomic_o_trunc,big_writes,use_ino${options.kernelCache === true ? '' : ',direct_io'}`,
      subtype: 'cascade',
    });
    await new Promise<void>((resolve, reject) => fuse.mount((err) => (err ? reject(mountError(mnt, err)) : resolve())));
    engine.fuse = fuse;
    return engine;
  }

  info(): object {
    return { name: 'fuse-native' };
  }

  /** Whether the kernel still has this mount (false after an external `fusermount -u`). */
  isMounted(): boolean {
    return this.unmounting === undefined && mountEntry(this.mountpoint) !== undefined;
  }

  /**
   * Detaches the mount (lazily: open files keep working until closed) and releases fuse-native's
   * event-loop handle. Fine after an external unmount. Does not close the filesystem.
   */
  unmount(): Promise<void> {
    this.unmounting ??= this.detach();
    return this.unmounting;
  }

  private async detach(): Promise<void> {
    if (mountEntry(this.mountpoint) && !this.detachInProcess()) await fusermountUnmount(this.mountpoint);
    // What fuse-native's own unmount does after fusermount; called directly because its unmount
    // fails (and keeps the process alive) when the mount is already gone.
    const thread = this.fuse?._thread;
    if (thread) nativeBinding().fuse_native_unmount(this.mountpoint, thread);
  }

  /**
   * As root, the lazy unmount without a fusermount child: a SIGCHLD landing on one of libfuse's
   * workers while they are cancelled can hang there, and then the daemon never learns that fusermount
   * exited (its stop hung; see detachMount in native/src/binding/addon.cc). False: use fusermount.
   */
  private detachInProcess(): boolean {
    const native = process.getuid?.() === 0 ? cascadeNative() : undefined;
    if (native === undefined) return false;
    try {
      native.detachMount(this.mountpoint);
      return true;
    } catch (e) {
      this.log(`unmount ${this.mountpoint} in process failed (${(e as Error).message}); using fusermount -uz`);
      return false;
    }
  }

  // ---- the adapter ----

  /**
   * Runs one request: work's value goes to ok; anything thrown or rejected goes to fail as a
   * negative errno. ok and fail only call fuse-native's reply (which defers to the next tick).
   */
  private serve<T>(op: string, subject: string, work: () => Promise<T>, ok: (value: T) => void, fail: (errno: number) => void): void {
    let pending: Promise<T>;
    const observe = this.observe;
    const t0 = observe ? process.hrtime.bigint() : 0n;
    try {
      pending = work();
    } catch (e) {
      pending = Promise.reject(e);
    }
    pending
      .then(
        (v) => {
          ok(v);
          observe?.(op.toUpperCase(), Number(process.hrtime.bigint() - t0) / 1e9, 0);
        },
        (e: unknown) => {
          const errno = toErrno(e, (msg) => this.log(`${op} ${subject}: ${msg}`));
          fail(errno);
          observe?.(op.toUpperCase(), Number(process.hrtime.bigint() - t0) / 1e9, errno);
        },
      )
      .catch((e: unknown) => this.log(`${op} ${subject}: reply failed: ${e instanceof Error ? e.stack : String(e)}`));
  }

  /** An op that answers a status only. */
  private status(op: string, subject: string, cb: Fuse.Done, work: () => Promise<void>): void {
    this.serve(op, subject, work, () => cb(0), cb);
  }

  /** An op that answers a status and a value. */
  private value<T>(op: string, subject: string, cb: Fuse.DoneWith<T>, work: () => Promise<T>): void {
    this.serve(op, subject, work, (v) => cb(0, v), (errno) => cb(errno));
  }

  /** read/write: the reply is the byte count itself. */
  private count(op: string, subject: string, cb: Fuse.Done, work: () => Promise<number>): void {
    this.serve(op, subject, work, (n) => cb(n), cb);
  }

  private buildOps(): Fuse.Ops {
    const f = this.fsOps;
    const refuse = (cb: Fuse.Done) => cb(errnoOf('EPERM')); // links, symlinks, device nodes: not by design
    return {
      getattr: (p, cb) => this.value('getattr', p, cb, async () => toStat(await f.getattr(p))),
      fgetattr: (p, fd, cb) => this.value('fgetattr', p, cb, async () => toStat(await f.getattr(p, fd))),
      statfs: (p, cb) => this.value('statfs', p, cb, async () => toStatfs(await f.statfs(p))),
      readdir: (p, cb) => this.value('readdir', p, cb, async () => withDotEntries((await f.readdir(p)).map((e) => e.name))),
      mkdir: (p, mode, cb) => this.status('mkdir', p, cb, () => f.mkdir(p, mode)),
      rmdir: (p, cb) => this.status('rmdir', p, cb, () => f.rmdir(p)),
      create: (p, mode, cb) => this.value('create', p, cb, async () => checkHandle(await f.create(p, mode, CREATE_FLAGS))),
      open: (p, flags, cb) => this.value('open', p, cb, async () => checkHandle(await f.open(p, flags))),
      // The buffers belong to libfuse and are detached once the reply is sent: the filesystem must
      // copy what it keeps before its promise resolves.
      read: (p, fd, buf, length, position, cb) =>
        this.count('read', p, cb, async () => checkCount('read', await f.read(fd, sized(buf, length), position), length)),
      write: (p, fd, buf, length, position, cb) =>
        this.count('write', p, cb, async () => checkCount('write', await f.write(fd, sized(buf, length), position), length)),
      truncate: (p, size, cb) => this.status('truncate', p, cb, () => f.truncate(p, size)),
      ftruncate: (p, fd, size, cb) => this.status('ftruncate', p, cb, () => f.truncate(p, size, fd)),
      flush: (p, fd, cb) => this.status('flush', p, cb, () => f.flush(fd)),
      fsync: (p, _datasync, fd, cb) => this.status('fsync', p, cb, () => f.fsync(fd)),
      release: (p, fd, cb) => this.status('release', p, cb, () => f.release(fd)),
      unlink: (p, cb) => this.status('unlink', p, cb, () => f.unlink(p)),
      rename: (from, to, cb) => this.status('rename', `${from} -> ${to}`, cb, () => f.rename(from, to)),
      utimens: (p, atimeMs, _mtimeMs, cb) => {
        // fuse-native passes atime twice (the mtime is lost), and UTIME_NOW/UTIME_OMIT as 1073 ms:
        // the best available reading is "both times = this value, or now".
        const ms = atimeMs === UTIME_SPECIAL_MS ? Date.now() : atimeMs;
        this.status('utimens', p, cb, () => f.utimens(p, ms, ms));
      },
      chmod: (p, mode, cb) => this.status('chmod', p, cb, () => f.chmod(p, mode)),
      chown: (p, uid, gid, cb) =>
        this.status('chown', p, cb, async () => {
          // Ownership is fixed; a chown that changes nothing (cp -p, tar as the owner) succeeds.
          const attr = await f.getattr(p);
          const sameUid = uid === UNCHANGED_ID || uid === attr.uid;
          const sameGid = gid === UNCHANGED_ID || gid === attr.gid;
          if (!sameUid || !sameGid) throw new CascadeError('EPERM', `changing the owner of ${p} is not supported`);
        }),
      link: (_from, _to, cb) => refuse(cb),
      symlink: (_target, _p, cb) => refuse(cb),
      mknod: (_p, _mode, _dev, cb) => refuse(cb),
      // position is a macOS resource-fork offset; 0 on Linux. The value is copied: it is libfuse's.
      setxattr: (p, name, value, _position, _flags, cb) =>
        this.status('setxattr', `${p} ${name}`, cb, () => f.setxattr(p, name, Buffer.from(value))),
      getxattr: (p, name, _position, cb) => this.value('getxattr', `${p} ${name}`, cb, () => f.getxattr(p, name)),
      listxattr: (p, cb) => this.value('listxattr', p, cb, () => f.listxattr(p)),
      removexattr: (p, name, cb) => this.status('removexattr', `${p} ${name}`, cb, () => f.removexattr(p, name)),
    };
  }
}

/** fuse-native's Fuse with the shims that lose information or answer wrongly replaced. */
class CascadeFuse extends Fuse {
  // The stock shim ignores fd and calls getattr(path).
  override _op_fgetattr(signal: Fuse.Signal, p: string, fd: number): void {
    const fgetattr = this.ops.fgetattr;
    if (!fgetattr) return signal(errnoOf('EIO'));
    fgetattr(p, fd, (status, stat) => {
      if (status !== 0 || !stat) return signal(status !== 0 ? status : errnoOf('EIO'));
      signal(0, packStat(stat));
    });
  }

  // The stock shim copies into the kernel's buffer and answers the full length even when the buffer
  // is too small. Every reply must hand back valueBuf.buffer: the native side detaches it.
  override _op_getxattr(signal: Fuse.Signal, p: string, name: string, valueBuf: Buffer, position: number): void {
    const getxattr = this.ops.getxattr;
    if (!getxattr) return signal(errnoOf('EOPNOTSUPP'), valueBuf.buffer);
    getxattr(p, name, position, (status, value) => {
      if (status !== 0) return signal(status, valueBuf.buffer);
      if (!value) return signal(errnoOf('ENODATA'), valueBuf.buffer);
      signal(fitReply(value, valueBuf), valueBuf.buffer);
    });
  }

  // Same too-small-buffer flaw; the stock size query also adds 128 bytes of macOS slack.
  override _op_listxattr(signal: Fuse.Signal, p: string, listBuf: Buffer): void {
    const listxattr = this.ops.listxattr;
    if (!listxattr) return signal(errnoOf('EOPNOTSUPP'), listBuf.buffer);
    listxattr(p, (status, names) => {
      if (status !== 0) return signal(status, listBuf.buffer);
      const packed = Buffer.concat((names ?? []).map((n) => Buffer.from(`${n}\0`)));
      signal(fitReply(packed, listBuf), listBuf.buffer);
    });
  }
}

/** The xattr reply protocol: a 0-byte buffer asks for the size; a too-small one gets ERANGE. */
function fitReply(value: Buffer, target: Buffer): number {
  if (target.length === 0) return value.length;
  if (target.length < value.length) return errnoOf('ERANGE');
  value.copy(target);
  return value.length;
}

function toStat(a: FileAttr): Fuse.Stat {
  return {
    mode: a.mode,
    uid: a.uid,
    gid: a.gid,
    size: a.sizeBytes,
    nlink: a.nlink,
    ino: a.ino,
    blksize: PREFERRED_IO_BYTES,
    blocks: Math.ceil(a.sizeBytes / STAT_BLOCK_BYTES),
    atime: new Date(a.atimeMs),
    mtime: new Date(a.mtimeMs),
    ctime: new Date(a.ctimeMs),
  };
}

/**
 * The 18 uint32s fuse-native.c's populate_stat reads (what its private getStatArray builds): mode,
 * uid, gid, size (lo, hi), dev, nlink, ino, rdev, blksize, blocks (lo, hi), atime, mtime, ctime
 * (ms, lo, hi each). Needed only for the fgetattr override, which cannot reach getStatArray.
 */
export function packStat(s: Fuse.Stat): Uint32Array {
  const ints = new Uint32Array(18);
  ints[0] = s.mode;
  ints[1] = s.uid;
  ints[2] = s.gid;
  setUint64(ints, 3, s.size);
  ints[5] = s.dev ?? 0;
  ints[6] = s.nlink || 1;
  ints[7] = s.ino;
  ints[8] = s.rdev ?? 0;
  ints[9] = s.blksize;
  setUint64(ints, 10, s.blocks);
  setUint64(ints, 12, s.atime.getTime());
  setUint64(ints, 14, s.mtime.getTime());
  setUint64(ints, 16, s.ctime.getTime());
  return ints;
}

function setUint64(ints: Uint32Array, index: number, n: number): void {
  const whole = Math.max(0, Math.floor(n));
  const low = whole % 2 ** 32;
  ints[index] = low;
  ints[index + 1] = (whole - low) / 2 ** 32;
}

/** statvfs fields are packed as uint32 by fuse-native: clamp instead of wrapping. */
function toStatfs(s: FsStatfs): Fuse.Statfs {
  const u32 = (n: number) => Math.min(UINT32_MAX, Math.max(0, Math.floor(n)));
  return {
    bsize: u32(s.blockBytes),
    frsize: u32(s.blockBytes),
    blocks: u32(s.totalBlocks),
    bfree: u32(s.freeBlocks),
    bavail: u32(s.availBlocks),
    files: u32(s.totalFiles),
    ffree: u32(s.freeFiles),
    favail: u32(s.freeFiles),
    fsid: 0,
    flag: 0,
    namemax: u32(s.nameMaxBytes),
  };
}

/** libfuse's high-level readdir does not add '.' and '..'; ls -a and some tools expect them. */
function withDotEntries(names: string[]): string[] {
  const dots = ['.', '..'].filter((d) => !names.includes(d));
  return dots.length === 0 ? names : [...dots, ...names];
}

function checkHandle(handle: number): number {
  if (!Number.isInteger(handle) || handle < 0 || handle > MAX_HANDLE) throw new Error(`invalid file handle ${handle} from the filesystem`);
  return handle;
}

function checkCount(op: string, n: number, maxBytes: number): number {
  if (!Number.isInteger(n) || n < 0 || n > maxBytes) throw new Error(`${op} returned ${n} bytes for a ${maxBytes}-byte request`);
  return n;
}

function sized(buf: Buffer, length: number): Buffer {
  return buf.length === length ? buf : buf.subarray(0, length);
}

/** fuse-native reports mount failures as bare strings; give them a code and the mountpoint. */
function mountError(mnt: string, err: Error): Error {
  const known: Record<string, CascadeError> = {
    'Mountpoint does not exist': new CascadeError('ENOENT', `mountpoint ${mnt} does not exist`),
    'Mountpoint is not a directory': new CascadeError('ENOTDIR', `mountpoint ${mnt} is not a directory`),
    'Mountpoint in use': new CascadeError('EBUSY', `mountpoint ${mnt} is in use (another filesystem is mounted there)`),
  };
  return known[err.message] ?? new CascadeError('EIO', `cannot mount ${mnt}: ${err.message} (libfuse's reason, if any, is on stderr)`, { cause: err });
}

/** allow_other needs root or `user_allow_other` in /etc/fuse.conf; without it the mount fails. */
function mayAllowOther(): boolean {
  if (process.getuid?.() === 0) return true;
  try {
    return /^\s*user_allow_other\s*$/m.test(fs.readFileSync('/etc/fuse.conf', 'utf8'));
  } catch {
    return false;
  }
}

interface FuseNativeBinding {
  fuse_native_unmount(mnt: string, thread: Buffer): void;
}

let binding: FuseNativeBinding | undefined;

/** fuse-native's native addon (the same loaded instance: require caches it by path). */
function nativeBinding(): FuseNativeBinding {
  if (binding) return binding;
  const dir = path.dirname(require.resolve('fuse-native/package.json'));
  const load = createRequire(path.join(dir, 'index.js'))('node-gyp-build') as (dir: string) => unknown;
  const b = load(dir) as Partial<FuseNativeBinding>;
  if (typeof b.fuse_native_unmount !== 'function') throw new Error('fuse-native binding has no fuse_native_unmount');
  binding = b as FuseNativeBinding;
  return binding;
}

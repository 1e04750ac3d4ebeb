/**
 * The native FUSE engine's TypeScript half (issue 6). native/src/engine speaks the FUSE protocol on
 * /dev/fuse with worker threads and requests of up to 4 MiB; it answers INIT and the READs of handles whose
 * version is held in the DRAM arena by itself, and hands everything else here as raw messages. This
 * file only translates: it decodes a request (mount/engine/fuse-proto.ts), calls the matching CascadeFsOps
 * method, and replies; errors become errnos through mount/engine/errno.ts, the one translation table.
 *
 * Unlike libfuse's high-level API, operations name inodes (node ids), which this adapter maps to
 * paths. A node keeps its path when a rename replaces the file under it, so an open that raced the
 * rename opens the file now at that path instead of failing with ENOENT.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { requireNative, type NativeFuseSessionBinding } from '../../native';
import type { NativeArenaBinding, NativeMetaTableBinding } from '../../native/types';
import type { FuseNegotiated } from '../../native/types';
import { assert, CascadeError, isCascadeError } from '../../store/errors';
import type { DramHold } from '../../store/store';
import type { CascadeFsOps, DirEntry, DirWatcher, FileAttr, Handle, RemoteWatcher } from '../../fs/types';
import { errnoOf, toErrno } from './errno';
import type { RequestObserver } from '../daemon/metrics';
import type { FuseUringMode } from '../daemon/defaults';
import * as P from './fuse-proto';
import { BackingCache, type Backing } from './passthrough';
import { FUSE_URING_PARAM_PATH, MAX_PAGES_LIMIT_PATH, readKernelParam } from './kernel-params';
import { checkMountpoint, clearStaleMount, fusermountUnmount, mountEntry, resolveMountpoint } from './mounts';

export interface NativeEngineOptions {
  /** Keep the kernel page cache across opens (see FuseEngineOptions.kernelCache). Default: direct I/O. */
  kernelCache?: boolean;
  /**
   * Read-only opens of committed content held in the DRAM arena read through the kernel's page cache,
   * one content per inode at a time (FuseSession.readOpenFlags); writers and every other open keep
   * direct I/O (default true; off with kernelCache or passthrough, which choose for every open).
   */
  pageCache?: boolean;
  /** Worker threads reading /dev/fuse (default 4). */
  threads?: number;
  /** Pages per request (default: fuseRequestPages(), up to 1,024 = 4 MiB as the kernel allows). */
  maxPages?: number;
  /** The DRAM arena's fd, for reads served in C++ straight from it. */
  arenaFd?: number;
  /**
   * The DRAM arena itself (the store's; then arenaFd is unused): reads are served from it, and writes
   * of new files land in it natively, hashed in C++ (native writes), with maxBlockBytes the largest.
   */
  arena?: NativeArenaBinding;
  maxBlockBytes?: number;
  /**
   * FUSE passthrough for reads of committed versions: the kernel reads a shared-memory copy of the
   * block directly, so reads never reach the daemon. While a file is open this way, opening it for
   * writing fails with EBUSY (the kernel cannot mix passthrough and other opens of one inode): write
   * a temporary file and rename it over instead, as vLLM, LMCache and SGLang do.
   */
  passthrough?: boolean;
  /** Bound on the shared-memory copies passthrough reads from (default 1 GiB). */
  passthroughCacheBytes?: number;
  /**
   * FUSE over io_uring: requests come through one io_uring queue per CPU instead of read()/writev() on
   * /dev/fuse. auto (the default): where the kernel offers it (fuse.enable_uring=Y, Linux 6.14+); on:
   * as root, also turn that parameter on first; off: never.
   */
  uring?: FuseUringMode;
  /** Told of every request JS answers (metrics: mount/daemon/metrics.ts). */
  observe?: RequestObserver;
  log?: (msg: string) => void;
}

/** Pages per FUSE request asked for by default: 4 MiB, so a 2 MiB block is one READ, not two. */
export const REQUEST_PAGES_WANTED = 1024;
/** The kernel's cap when it has no max_pages_limit sysctl (before 6.13): 1 MiB. */
const KERNEL_MAX_PAGES_FIXED = 256;

/**
 * Pages per request to ask the kernel for: REQUEST_PAGES_WANTED, capped by the kernel's
 * fs.fuse.max_pages_limit (root may raise it: `sysctl fs.fuse.max_pages_limit=1024`). Asking for
 * more than the cap gains nothing and sizes every worker's buffer for requests that never come.
 */
export function fuseRequestPages(limitPath = MAX_PAGES_LIMIT_PATH): { pages: number; limitPages: number } {
  let limitPages = KERNEL_MAX_PAGES_FIXED; // no such sysctl: an older kernel, fixed at 256 pages
  const v = Number.parseInt(readKernelParam(limitPath) ?? '', 10);
  if (Number.isInteger(v) && v > 0) limitPages = v;
  return { pages: Math.min(REQUEST_PAGES_WANTED, limitPages), limitPages };
}

/**
 * Turns on the fuse module's enable_uring parameter (root only), so the kernel offers io_uring to
 * servers that ask; it changes nothing for servers that do not. Says what it did or why it could not.
 */
function enableFuseUring(log: (msg: string) => void): void {
  const value = readKernelParam(FUSE_URING_PARAM_PATH);
  if (value === undefined) {
    log(`--fuse-uring on: this kernel has no ${FUSE_URING_PARAM_PATH} (FUSE over io_uring needs Linux 6.14+ built with CONFIG_FUSE_IO_URING)`);
    return;
  }
  if (value === 'Y') return;
  try {
    fs.writeFileSync(FUSE_URING_PARAM_PATH, 'Y');
    log(`--fuse-uring on: set ${FUSE_URING_PARAM_PATH} to Y`);
  } catch (e) {
    log(`--fuse-uring on: cannot set ${FUSE_URING_PARAM_PATH} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; root can: echo Y > ${FUSE_URING_PARAM_PATH})`);
  }
}

/** FUSE opcode names by number, for metrics. */
const OP_NAMES = new Map<number, string>(Object.entries(P.Op).map(([name, n]) => [n, name]));

/** How long INIT may take after mount(2) before the mount is called failed. */
const INIT_TIMEOUT_MS = 10_000;
/** Nodes the kernel may hold at once (it forgets them under memory pressure). */
export const NODES_MAX = 4 * 1024 * 1024;
/** Open directories at once. */
export const OPEN_DIRS_MAX = 65_536;
/** libfuse's default cache lifetimes: the same kernel caching as the fuse-native engine. */
const VALIDITY: P.Validity = { entryMs: 1000, attrMs: 1000 };
/** Requests JS takes straight from the workers (takeNext) before it lets the event loop run once. */
const HANDOVER_CHAIN_MAX = 32;
const NO_CACHE: P.Validity = { entryMs: 0, attrMs: 0 };
/**
 * A read open sent back (ESTALE) for a content conflict: the same process's next open of the path this soon
 * is its retry (a loaded machine delays it by tens of ms: 50 ms let retries fail with ESTALE). The retry
 * that opens without conflict ends the wait, so a later conflict of that process is a new one.
 */
const CONFLICT_RETRY_MS = 1000;
/** (process, path) pairs remembered for that at once (then the expired go; all, should none have). */
const CONFLICT_RETRIES_MAX = 4096;
/** A conflicting read open waits this long for a node's writers to go (a closed writer's RELEASE), polling. */
const WRITERS_GONE_WAIT_MS = 50;
const WRITERS_GONE_POLL_MS = 2;
/** How long a path whose writer was sent back (ESTALE) takes no page-cache open: the writer's retry comes at once. */
const WRITER_RETRY_HOLD_MS = 1000;
/**
 * A path with a write session of an existing file (a writer's open, a truncate by path; not a create)
 * takes no page-cache open (its reads direct, exact) for the whole session: the C++ workers do not see
 * JS's write sessions, and JS's replies about the name during one carry the writer's size, which the
 * kernel applies even to an inode that page-cache readers read (the load test below: a reader cut at a
 * writer's 384 KiB, with the hold ended at the writer's open). The longest hold the session takes; the
 * writer's release shortens it to WRITTEN_DIRECT_MS.
 */
const WRITE_SESSION_HOLD_MS = 60_000;
/**
 * How long a path takes no page-cache open after such a session closed. A load test (six readers
 * beside a rewriter in place every 2 ms, two CPU-bound processes, two cores) found five ways a
 * page-cache reader read another version's size or pages, all fixed: a write session on a node the
 * name had left told the name's new node its size; the kernel applies the size of any reply, even one
 * that expires at once; a GETATTR of a node the name had left answered from a reader of another content
 * (in JS, and in C++ since: a native reader of the node's content answers first); an open kept the pages
 * while the open before it, which drops them, had not yet dropped them (Session::PagesRead); and a hold
 * that ended before its session. With all fixed and no hold after close, 0 bad reads in 22 runs of
 * 20 s (1,200 page-cache opens a run; 1 in 160-400 s before the last two). Kept as a margin, since
 * 440 s is no proof; files written once and read (KV blocks) take the page cache at once.
 */
const WRITTEN_DIRECT_MS = 1000;
const PASSTHROUGH_CACHE_BYTES_DEFAULT = 1024 * 1024 * 1024;
/**
 * Smallest version held in the arena for reads served in C++: a file of one 1 MiB request is read
 * in one trip either way, and the hold (locks, a lease) costs more than that trip's copy in JS.
 */
export const HOLD_MIN_BYTES = 1024 * 1024 + 1;
const O_ACCMODE = 3;
const UNCHANGED_ID = 0xffff_ffff;
const O_TRUNC = fs.constants.O_TRUNC;
const S_IFMT = fs.constants.S_IFMT;
const S_IFREG = fs.constants.S_IFREG;
/** How often blocks opened in C++ are told to the store (hits, and recency for its eviction). */
const TOUCH_DRAIN_MS = 250;
/**
 * At unmount, how long JS waits for the RELEASEs it is still serving. The workers answer RELEASE
 * before JS serves it, so the kernel's unmount no longer waits for that work; the filesystem must not
 * close under it.
 */
const RELEASES_DRAIN_MS = 2_000;
const RELEASES_DRAIN_POLL_MS = 2;

function defaultLog(msg: string): void {
  process.stderr.write(`cascade: ${msg}\n`);
}

/** Attribute cache entries the native table keeps at most (then it starts over: misses go to JS). */
export const ATTRS_MAX = 256 * 1024;
/**
 * Entry names the native table keeps in directory listings, in all (about 100 bytes each in C++): past
 * it, a directory is not listed (or stops being) and its negative lookups go to JS.
 */
export const LISTED_NAMES_MAX = 1024 * 1024;
/** Listing types as the C++ table keeps them: READDIR's d_type, 0 for a name READDIR skips. */
const LIST_TYPE = { file: P.DT.REG, dir: P.DT.DIR, hidden: 0 } as const;
/** File handles of opens the C++ workers answered start here (native/src/engine/session.h). */
export const NATIVE_HANDLE_BASE = 2 ** 40;

/**
 * Node id <-> path, and the attribute cache the C++ workers answer LOOKUP, GETATTR and read-only opens
 * from (native/src/engine/meta.h): one table in C++, so a lookup answered there and a FORGET or rename
 * handled here count on the same nodes. The root is node 1 and is never forgotten.
 */
export class NodeTable {
  readonly native: NativeMetaTableBinding;

  constructor(maxNodes = NODES_MAX, maxAttrs = ATTRS_MAX, maxListedNames = LISTED_NAMES_MAX) {
    this.native = new (requireNative('the native FUSE engine').MetaTable)(maxNodes, maxAttrs, maxListedNames);
  }

  get size(): number {
    return this.native.size();
  }

  pathOf(id: number): string {
    return typed(() => this.native.pathOf(id));
  }

  idOf(p: string): number | undefined {
    return this.native.idOf(p);
  }

  /** Whether the node's name was unlinked or replaced (it lives on through open files only). */
  isDetached(id: number): boolean {
    return this.native.isDetached(id);
  }

  /** A lookup that succeeded: the node for `p`, its lookup count raised by one. */
  remember(p: string): number {
    return typed(() => this.native.remember(p));
  }

  forget(id: number, count: number): void {
    this.native.forget(id, count);
  }

  /** After unlink/rmdir: the name no longer leads to the node (which keeps its path until forgotten). */
  removed(p: string): void {
    this.native.removed(p);
  }

  /** After a rename: `from` and everything under it now live under `to`; a node that was at `to` is detached. */
  renamed(from: string, to: string): void {
    this.native.renamed(from, to);
  }
}

/** A native error (code ESTALE, ENFILE, ...) as the typed error fs/ and the errno table know. */
function typed<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'ESTALE' || code === 'ENFILE' || code === 'EINVAL') throw new CascadeError(code, (e as Error).message);
    throw e;
  }
}

function childPath(parent: string, name: string): string {
  if (name === '' || name === '.' || name === '..' || name.includes('/')) throw new CascadeError('EINVAL', `bad name ${JSON.stringify(name)}`);
  return parent === '/' ? `/${name}` : `${parent}/${name}`;
}

/** The native engine's mount of one CascadeFsOps. */
/** Whether /etc/fuse.conf lets users who are not root mount with allow_other. */
function fuseConfAllowsOther(): boolean {
  try {
    return /^\s*user_allow_other\s*$/m.test(fs.readFileSync('/etc/fuse.conf', 'utf8'));
  } catch {
    return false;
  }
}

export class NativeFuseEngine {
  readonly name = 'native';
  private session: NativeFuseSessionBinding | undefined;
  private readonly nodes = new NodeTable();
  private readonly holds = new Map<Handle, DramHold>();
  /** Every open file handle: its node, whether it may write, and its passthrough backing if it has one. */
  private readonly opens = new Map<
    Handle,
    { nodeid: number; writer: boolean; backing?: Backing; pageCacheWriter?: boolean; otherContent?: boolean; sessionPath?: string }
  >();
  /** Write sessions of existing files open per path (writerOpening to writerDone): each holds the path off the page cache. */
  private readonly writeSessions = new Map<string, number>();
  /** (process, path) of read opens sent back for a content conflict, and when (readOpenConflict). */
  private readonly conflictRetries = new Map<string, number>();
  /** Per node: open handles with passthrough (all share one backing, a kernel rule) and without; of those, writers. */
  private readonly nodeOpens = new Map<number, { passthrough: number; other: number; writers: number; backing?: Backing }>();
  private backings: BackingCache | undefined;
  private readonly dirs = new Map<number, DirEntry[]>();
  private nextDir = 1;
  private unmounting: Promise<void> | undefined;
  /** Requests JS is serving now (dispatch to reply). */
  private inProgress = 0;
  /** RELEASEs JS is serving (already answered by the workers). */
  private releasesInProgress = 0;
  /** Requests handed over by takeNext since the event loop last had a turn. */
  private handedOver = 0;
  private holdWarned = false;
  /** Read handles answered while their block loads (open): their hold comes when the load ends. */
  private readonly loadingHolds = new Set<Handle>();
  /** Such handles once their load ended, until released. */
  private readonly streamed = new Set<Handle>();
  /** Whether the session maps the DRAM arena (settled at INIT). */
  private arena = false;
  /** Whether writes of new files are staged natively (the filesystem took the stager). */
  private staging = false;
  /** Whether attributes are published to the C++ workers (the filesystem offers stableAttr). */
  private readonly caching: boolean;
  /** Whether read-only opens of held content may read through the page cache (NativeEngineOptions.pageCache). */
  private readonly pageCache: boolean;
  /**
   * Whether the content of every read open is tracked, so that the opens of one inode read one
   * content (readOpenConflict): also with --no-page-cache, where an mmap still fills the page cache.
   */
  private readonly trackReads: boolean;
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
  private touchTimer: NodeJS.Timeout | undefined;

  private constructor(
    readonly mountpoint: string,
    private readonly fsOps: CascadeFsOps,
    private readonly options: NativeEngineOptions,
    private readonly log: (msg: string) => void,
  ) {
    this.caching = fsOps.stableAttr !== undefined;
    this.pageCache = options.pageCache !== false && options.kernelCache !== true && options.passthrough !== true;
    this.trackReads = options.kernelCache !== true && options.passthrough !== true;
  }

  /**
   * Why the native engine cannot run here, or undefined when it can: /dev/fuse, the addon, and root
   * (mount(2) itself) or, for other users, the setuid `fusermount` (it mounts and passes the /dev/fuse
   * descriptor back, as libfuse does).
   */
  static unavailable(): string | undefined {
    if (!fs.existsSync('/dev/fuse')) return '/dev/fuse is missing';
    if (process.getuid?.() !== 0 && spawnSync('which', ['fusermount'], { stdio: 'ignore' }).status !== 0) {
      return 'a user who is not root mounts through fusermount, which is not installed (Debian: apt-get install fuse)';
    }
    try {
      requireNative('the native FUSE engine');
    } catch (e) {
      return `the native addon did not load: ${(e as Error).message}`;
    }
    return undefined;
  }

  static async mount(mountpoint: string, fsOps: CascadeFsOps, options: NativeEngineOptions = {}): Promise<NativeFuseEngine> {
    const log = options.log ?? defaultLog;
    const why = NativeFuseEngine.unavailable();
    if (why !== undefined) throw new CascadeError('EOPNOTSUPP', `the native engine cannot run: ${why}`);
    await clearStaleMount(resolveMountpoint(mountpoint, false), log);
    const mnt = resolveMountpoint(mountpoint);
    const existing = mountEntry(mnt);
    if (existing) throw new CascadeError('EBUSY', `${mnt} is already mounted (${existing.fsType}); unmount it first: cascade unmount ${mnt}`);
    await checkMountpoint(mnt);

    const engine = new NativeFuseEngine(mnt, fsOps, options, log);
    const uringMode = options.uring ?? 'auto';
    if (uringMode === 'on') enableFuseUring(log);
    let initDone: (ok: boolean, why: string) => void = () => {};
    const init = new Promise<{ ok: boolean; why: string }>((resolve) => (initDone = (ok, why) => resolve({ ok, why })));
    const binding = requireNative('the native FUSE engine');
    let session: NativeFuseSessionBinding;
    try {
      session = new binding.FuseSession(
        {
          mountpoint: mnt,
          uid: process.getuid?.() ?? 0,
          gid: process.getgid?.() ?? 0,
          threads: options.threads,
          maxPages: options.maxPages ?? fuseRequestPages().pages,
          // Other users may enter as st_mode allows; for a user who is not root, fusermount allows
          // that only with user_allow_other in /etc/fuse.conf.
          allowOther: process.getuid?.() === 0 || fuseConfAllowsOther(),
          ...(options.arena !== undefined && options.maxBlockBytes !== undefined
            ? { arena: options.arena, maxBlockBytes: options.maxBlockBytes }
            : { arenaFd: options.arenaFd }),
          passthrough: options.passthrough === true && process.getuid?.() === 0, // needs CAP_SYS_ADMIN
          // LOOKUP, GETATTR and FORGET in C++ from the node table; read-only opens of DRAM-resident
          // files too, except under passthrough (the kernel wants one kind of open per inode).
          meta: engine.nodes.native,
          nativeOpens: engine.caching && options.arena !== undefined && options.maxBlockBytes !== undefined && options.passthrough !== true,
          pageCache: engine.pageCache,
          trackReads: engine.trackReads,
          // Those opens are read-only: no FLUSH at close (one trip less per block read).
          openFlags: engine.openFlags() | P.FOPEN.NOFLUSH,
          entryValidMs: VALIDITY.entryMs,
          attrValidMs: VALIDITY.attrMs,
          uring: uringMode !== 'off',
        },
        (request) => engine.dispatch(request),
        (ok, why) => initDone(ok, why),
      );
    } catch (e) {
      throw new CascadeError('EIO', `cannot mount ${mnt} with the native engine: ${(e as Error).message}`, { cause: e });
    }
    engine.session = session;
    const timer = setTimeout(() => initDone(false, `no INIT from the kernel within ${INIT_TIMEOUT_MS} ms`), INIT_TIMEOUT_MS);
    const r = await init;
    clearTimeout(timer);
    if (!r.ok) {
      session.unmount();
      throw new CascadeError('EIO', `cannot mount ${mnt} with the native engine: ${r.why}`);
    }
    engine.arena = session.negotiated().arena;
    if (engine.caching && fsOps.dirListing !== undefined) engine.watching = fsOps.watchDirs?.(engine.dirWatcher()) === true;
    // A cluster node: other nodes' changes drop what the workers answer from, as local changes do.
    if (engine.caching) engine.remoteWatched = fsOps.watchRemote?.(engine.remoteWatcher()) === true;
    // Native opens are hits the store counts, and recent uses its eviction must see.
    engine.touchTimer = setInterval(() => engine.drainTouched(), TOUCH_DRAIN_MS);
    engine.touchTimer.unref();
    if (options.arena !== undefined && fsOps.useStager !== undefined) {
      engine.staging = fsOps.useStager({
        create: () => session.stageCreate(),
        info: (id, takeDirty) => session.stageInfo(id, takeDirty),
        freeze: (id) => session.stageFreeze(id),
        read: (id, offsetBytes, target) => session.stageRead(id, offsetBytes, target),
        // Most files are hashed by the time they are closed: sealed here, without a trip to a worker.
        seal: (id) => {
          const now = session.stageTrySeal(id);
          return now !== undefined ? Promise.resolve(now) : session.stageSeal(id);
        },
        drop: (id) => session.stageDrop(id),
      });
    }
    if (uringMode === 'on') {
      const n = session.negotiated();
      if (!n.uring) log(`FUSE over io_uring was asked for and is not in use: ${n.uringWhyNot ?? 'the kernel did not take it'}; requests go through /dev/fuse`);
    }
    if (options.passthrough === true) {
      const n = session.negotiated();
      if (!n.passthrough) log('passthrough was asked for but the kernel did not offer it (needs Linux 6.9+ and CAP_SYS_ADMIN): reads are served');
      else if (!n.arena) log('passthrough needs the shared-memory DRAM arena (native addon): reads go through the daemon');
      else engine.backings = new BackingCache(session, options.passthroughCacheBytes ?? PASSTHROUGH_CACHE_BYTES_DEFAULT);
    }
    return engine;
  }

  negotiated(): FuseNegotiated | undefined {
    return this.session?.negotiated();
  }

  info(): object {
    const m = this.nodes.native.stats();
    return {
      name: 'native',
      ...this.session?.negotiated(),
      ...this.session?.stats(),
      nodes: m.nodes,
      cachedAttrs: m.attrs,
      attrPublishes: m.publishes,
      attrRefusedPublishes: m.refusedPublishes,
      attrInvalidations: m.invalidations,
      listedDirs: m.listedDirs,
      listedNames: m.listedNames,
      holds: this.holds.size,
      openDirs: this.dirs.size,
      passthroughFiles: this.backings?.size ?? 0,
      passthroughBytes: this.backings?.bytes ?? 0,
    };
  }

  isMounted(): boolean {
    return this.unmounting === undefined && mountEntry(this.mountpoint) !== undefined;
  }

  unmount(): Promise<void> {
    this.unmounting ??= this.detach();
    return this.unmounting;
  }

  private drainTouched(): void {
    const s = this.session;
    if (s === undefined) return;
    try {
      const handles = s.drainTouched();
      if (handles.length > 0) this.fsOps.nativeOpened?.(handles);
    } catch (e) {
      this.log(`recording native opens: ${(e as Error).message}`);
    }
  }

  private async detach(): Promise<void> {
    if (this.touchTimer !== undefined) clearInterval(this.touchTimer);
    this.drainTouched();
    if (mountEntry(this.mountpoint)) await fusermountUnmount(this.mountpoint).catch((e: unknown) => this.log(`unmount: ${(e as Error).message}`));
    const deadline = Date.now() + RELEASES_DRAIN_MS;
    while (this.releasesInProgress > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, RELEASES_DRAIN_POLL_MS));
    if (this.releasesInProgress > 0) this.log(`unmount: ${this.releasesInProgress} RELEASE(s) still being served after ${RELEASES_DRAIN_MS} ms; closing anyway`);
    // Staged bytes live in the session's stager: into the filesystem's memory before it goes.
    if (this.staging) await this.fsOps.detachStager?.().catch((e: unknown) => this.log(`unmount: ${(e as Error).message}`));
    this.session?.unmount();
    // Only now: a lazy unmount leaves the mount serving processes still inside it until here, and the
    // C++ listings must follow every change while anything is served from them.
    if (this.watching) {
      this.watching = false;
      this.fsOps.watchDirs?.(undefined);
    }
    if (this.remoteWatched) {
      this.remoteWatched = false;
      this.fsOps.watchRemote?.(undefined);
    }
    for (const h of this.holds.values()) h.release();
    this.holds.clear();
    this.dirs.clear();
    this.backings?.close();
  }

  // ---- dispatch ----

  private dispatch(request: Buffer): void {
    let hdr: P.InHeader;
    try {
      hdr = P.readHeader(request);
    } catch (e) {
      this.log(`dropped a malformed request: ${(e as Error).message}`);
      return;
    }
    const op = hdr.opcode;
    // No answer is due for these.
    if (op === P.Op.INIT || op === P.Op.INTERRUPT) return;
    if (op === P.Op.FORGET || op === P.Op.BATCH_FORGET) {
      try {
        this.forget(hdr, request);
      } catch (e) {
        this.log(`forget: ${(e as Error).message}`);
      }
      return;
    }
    let work: Promise<Buffer | Buffer[] | undefined>;
    const observe = this.options.observe;
    const t0 = observe ? process.hrtime.bigint() : 0n;
    this.inProgress++;
    try {
      work = this.serve(hdr, new P.Reader(request));
    } catch (e) {
      work = Promise.reject(e);
    }
    // The C++ workers answer every RELEASE before handing it on (no answer is waited for).
    const answered = op === P.Op.RELEASE;
    if (answered) this.releasesInProgress++;
    work.then(
      (payload) => {
        try {
          if (!answered) this.reply(hdr.unique, 0, payload);
          if (this.dirsToPublish.size > 0) this.publishDirs();
          observe?.(OP_NAMES.get(op) ?? String(op), Number(process.hrtime.bigint() - t0) / 1e9, 0);
        } finally {
          this.served(answered);
        }
      },
      (e: unknown) => {
        try {
          const errno = this.errnoFor(hdr, e);
          if (!answered) this.reply(hdr.unique, errno);
          if (this.dirsToPublish.size > 0) this.publishDirs();
          observe?.(OP_NAMES.get(op) ?? String(op), Number(process.hrtime.bigint() - t0) / 1e9, errno);
        } finally {
          this.served(answered);
        }
      },
    );
  }

  /**
   * A request was answered. With none left in progress, wait briefly for the next one (the session
   * hands over what comes within its window; see takeNext) rather than sleep in the event loop, whose
   * wakeup costs each trip through JS tens of microseconds.
   */
  private served(release: boolean): void {
    this.inProgress--;
    if (release) this.releasesInProgress--;
    const s = this.session;
    if (this.inProgress !== 0 || s === undefined || this.unmounting !== undefined) return;
    // Requests answered from memory chain here without the event loop ever getting a turn (timers,
    // I/O, signals): after HANDOVER_CHAIN_MAX of them JS goes back to it once.
    if (this.handedOver >= HANDOVER_CHAIN_MAX) return;
    const next = s.takeNext();
    if (next.length === 0) return;
    if (this.handedOver === 0) setImmediate(() => (this.handedOver = 0));
    this.handedOver += next.length;
    for (const request of next) {
      try {
        this.dispatch(request);
      } catch (e) {
        this.log(`dispatch: ${(e as Error).message}`); // never expected: dispatch answers its own errors
      }
    }
  }

  private errnoFor(hdr: P.InHeader, e: unknown): number {
    if (e instanceof P.ProtoError) {
      this.log(`opcode ${hdr.opcode}: ${e.message}`);
      return -errnoOf('EIO');
    }
    return -toErrno(e, (msg) => this.log(`opcode ${hdr.opcode} node ${hdr.nodeid}: ${msg}`));
  }

  private reply(unique: number, errno: number, payload?: Buffer | Buffer[]): void {
    const s = this.session;
    if (s === undefined || this.unmounting !== undefined) return;
    try {
      s.reply(unique, errno, payload);
    } catch (e) {
      this.log(`reply failed: ${(e as Error).message}`);
    }
  }

  private forget(hdr: P.InHeader, request: Buffer): void {
    const r = new P.Reader(request);
    if (hdr.opcode === P.Op.FORGET) return this.nodes.forget(hdr.nodeid, r.u64());
    const count = r.u32();
    r.u32();
    for (let i = 0; i < count; i++) {
      const id = r.u64();
      this.nodes.forget(id, r.u64());
    }
  }

  private async entry(p: string, handle?: Handle): Promise<Buffer> {
    const attr = await this.attrOf(p, handle);
    const nodeid = this.nodes.remember(p);
    return P.entryOut(nodeid, attr, this.validity(nodeid, attr));
  }

  /**
   * The cache lifetimes for a reply giving node nodeid these attributes: the attributes expire at once
   * while a page-cache open of the node reads more bytes than they say (the kernel would cut its reads
   * at that size; expired, it asks again with the reader's handle, which answers its own size).
   */
  private validity(nodeid: number, attr: FileAttr): P.Validity {
    if (!this.pageCache || this.session === undefined) return VALIDITY;
    return this.session.attrValidMs(nodeid, attr.sizeBytes) === 0 ? { entryMs: VALIDITY.entryMs, attrMs: 0 } : VALIDITY;
  }

  /**
   * A request that moves node nodeid's size (a writer's open, a truncate by path) is about to be
   * served: true if it was counted as a writer (release it with session.writerReleased), false where
   * there is nothing to count (no page cache). Where readers of the inode read through the page cache,
   * the request may not share their inode (the kernel's one size would cut their reads): the name is
   * detached from it and the caller gets ESTALE, on which the kernel looks the path up again (a new
   * node) and repeats the request there, once.
   */
  private writerOpening(nodeid: number, p: string): boolean {
    const session = this.session;
    if (!this.pageCache || session === undefined) return false;
    // A writer that came by a node the name has left (a dentry the kernel cached before the name got a
    // node of its own) changes the content of the name's node too, whose page-cache readers it is not
    // counted against: that node leaves the name now (the next lookup makes a fresh one).
    if (this.nodes.isDetached(nodeid) && this.nodes.idOf(p) !== undefined) {
      this.invalidate(p);
      this.nodes.removed(p);
    }
    if (session.tryWriterOpen(nodeid)) {
      this.writeSessions.set(p, (this.writeSessions.get(p) ?? 0) + 1);
      session.holdOffPageCache(p, WRITE_SESSION_HOLD_MS);
      return true;
    }
    // Nor may a reader's page-cache open take the new node before the writer comes back to it.
    session.holdOffPageCache(p, WRITER_RETRY_HOLD_MS);
    this.invalidate(p);
    this.nodes.removed(p);
    throw new CascadeError('ESTALE', `${p} is open for reading through the page cache: the writer gets a node of its own`);
  }

  /**
   * A writer counted by writerOpening (sessionPath: the path it opened) or by a create (undefined) is
   * gone. Once the last session of a path ends, the path reads direct WRITTEN_DIRECT_MS longer, as does
   * the node's path now, should a rename have moved it.
   */
  private writerDone(nodeid: number, sessionPath: string | undefined): void {
    const session = this.session;
    if (session === undefined) return;
    session.writerReleased(nodeid);
    if (sessionPath === undefined) return;
    const left = (this.writeSessions.get(sessionPath) ?? 1) - 1;
    if (left > 0) this.writeSessions.set(sessionPath, left);
    else {
      this.writeSessions.delete(sessionPath);
      session.holdOffPageCache(sessionPath, WRITTEN_DIRECT_MS);
    }
    let p: string;
    try {
      p = this.nodes.pathOf(nodeid);
    } catch {
      return; // forgotten: no open of it can come
    }
    if (p !== sessionPath && !this.writeSessions.has(p)) session.holdOffPageCache(p, WRITTEN_DIRECT_MS);
  }

  /** Whether nodeid has no writer open, waiting up to WRITERS_GONE_WAIT_MS for the last to go. */
  private async writersGone(nodeid: number): Promise<boolean> {
    for (let waitedMs = 0; ; waitedMs += WRITERS_GONE_POLL_MS) {
      if ((this.nodeOpens.get(nodeid)?.writers ?? 0) === 0) return true;
      if (waitedMs >= WRITERS_GONE_WAIT_MS) return false;
      await new Promise((r) => setTimeout(r, WRITERS_GONE_POLL_MS));
    }
  }

  /**
   * A read open of content other than the one already open on its node (an in-place rewrite committed
   * while readers of the old content stay open). Every open of an inode can fill its one page cache
   * (read() through it; mmap, even of a direct-I/O open), so the opens of one inode must read one
   * content: the name gets a new node and the open ESTALE, on which the kernel looks the path up again
   * and opens the new inode (once, invisibly). Should that retry (the same process's open of the path
   * within CONFLICT_RETRY_MS) conflict again, a commit having come between two opens of the fresh
   * node, it reads with direct I/O, untracked, rather than fail: read() is exact, an mmap of it is not
   * kept apart (docs/SEMANTICS.md, read.page-cache).
   */
  private async readOpenConflict(fh: Handle, p: string, pid: number): Promise<void> {
    const now = Date.now();
    const key = `${pid}\0${p}`;
    const last = this.conflictRetries.get(key);
    if (last !== undefined && now - last < CONFLICT_RETRY_MS) {
      this.conflictRetries.delete(key);
      return; // the retry conflicted again: it reads with direct I/O, untracked (the caller's openFlags)
    }
    if (this.conflictRetries.size >= CONFLICT_RETRIES_MAX) {
      for (const [k, at] of this.conflictRetries) if (now - at >= CONFLICT_RETRY_MS) this.conflictRetries.delete(k);
      if (this.conflictRetries.size >= CONFLICT_RETRIES_MAX) this.conflictRetries.clear();
    }
    this.conflictRetries.set(key, now);
    this.holds.get(fh)?.release();
    this.holds.delete(fh);
    this.session?.clearReadSource(fh);
    await this.fsOps.release(fh);
    this.invalidate(p);
    this.nodes.removed(p);
    throw new CascadeError('ESTALE', `${p}: another content is open on its node; the open gets a node of its own`);
  }

  /**
   * p's attributes (a handle's, with one); where they are stable, also published to the C++ workers.
   * The generation is read before resolving: a change answered meanwhile refuses the publish.
   */
  private async attrOf(p: string, handle?: Handle): Promise<FileAttr> {
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
  private invalidate(p: string, subtree = false): void {
    // Readers that read p's node through the page cache read the content they opened; the change may
    // give p another (a commit by a writer on a node the name has left, a link by hash). Any later reply
    // about p would tell their inode the new size, and the kernel applies a size even in a reply that
    // expires at once (it cut such readers' pages under a load test): p gets a fresh node instead.
    const id = this.pageCache ? this.nodes.idOf(p) : undefined;
    if (id !== undefined && this.session?.hasPageCacheOpens(id) === true) this.nodes.removed(p);
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
  private publishDirs(): void {
    for (const d of this.dirsToPublish) this.attrOf(d).catch(() => undefined); // gone again: a lookup resolves it
    this.dirsToPublish.clear();
  }

  /**
   * After JS found no name in `dir`, or opened it: list dir, so the next lookup of a name that is not
   * there, and the next opendir and readdir, are answered in C++.
   */
  private listDir(dir: string): void {
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
  private republish(nodeid: number): void {
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
  private invalidateNode(nodeid: number): void {
    if (!this.caching) return;
    try {
      this.invalidate(this.nodes.pathOf(nodeid));
    } catch (e) {
      if (!isCascadeError(e, 'ESTALE')) throw e;
    }
  }

  private async serve(hdr: P.InHeader, r: P.Reader): Promise<Buffer | Buffer[] | undefined> {
    const f = this.fsOps;
    switch (hdr.opcode) {
      case P.Op.LOOKUP: {
        const parent = this.nodes.pathOf(hdr.nodeid);
        try {
          return await this.entry(childPath(parent, r.name()));
        } catch (e) {
          if (isCascadeError(e, 'ENOENT') && !this.nodes.isDetached(hdr.nodeid)) this.listDir(parent);
          throw e;
        }
      }
      case P.Op.GETATTR: {
        const flags = r.u32();
        r.u32();
        // fh is meaningful only with GETATTR_FH; otherwise it may hold anything.
        const fh = r.u64Big();
        const handle = (flags & P.GETATTR_FH) !== 0 ? handleOf(fh) : undefined;
        if (this.nodes.isDetached(hdr.nodeid)) {
          const detached = await this.detachedAttr(hdr.nodeid, handle);
          return P.attrOut(detached, this.validity(hdr.nodeid, detached));
        }
        const attr = await this.attrOf(this.nodes.pathOf(hdr.nodeid), handle);
        return P.attrOut(attr, this.validity(hdr.nodeid, attr));
      }
      case P.Op.SETATTR: {
        const p = this.nodes.pathOf(hdr.nodeid);
        try {
          return await this.setattr(p, r, hdr.nodeid);
        } finally {
          this.invalidate(p); // truncate, chmod, utimens
        }
      }
      case P.Op.MKDIR: {
        const mode = r.u32();
        const umask = r.u32();
        const p = childPath(this.nodes.pathOf(hdr.nodeid), r.name());
        try {
          await f.mkdir(p, mode & ~umask);
        } finally {
          this.invalidate(p);
        }
        return this.entry(p);
      }
      case P.Op.UNLINK:
      case P.Op.RMDIR: {
        const p = childPath(this.nodes.pathOf(hdr.nodeid), r.name());
        try {
          await (hdr.opcode === P.Op.UNLINK ? f.unlink(p) : f.rmdir(p));
        } finally {
          this.invalidate(p, hdr.opcode === P.Op.RMDIR);
        }
        this.nodes.removed(p);
        return undefined;
      }
      case P.Op.RENAME:
      case P.Op.RENAME2: {
        const newdir = r.u64();
        const flags = hdr.opcode === P.Op.RENAME2 ? r.u32() : 0;
        if (hdr.opcode === P.Op.RENAME2) r.u32();
        const from = childPath(this.nodes.pathOf(hdr.nodeid), r.name());
        const to = childPath(this.nodes.pathOf(newdir), r.name());
        if ((flags & ~P.RENAME_NOREPLACE) !== 0) throw new CascadeError('EINVAL', 'rename: only RENAME_NOREPLACE is supported');
        if ((flags & P.RENAME_NOREPLACE) !== 0 && (await exists(f, to))) throw new CascadeError('EEXIST', `${to} exists`);
        try {
          await f.rename(from, to);
        } finally {
          this.invalidate(from, true);
          this.invalidate(to, true);
        }
        this.nodes.renamed(from, to);
        // Engines write a temporary file and rename it over the final name: publish the final name.
        const moved = this.nodes.idOf(to);
        if (moved !== undefined) this.republish(moved);
        return undefined;
      }
      case P.Op.OPEN:
        return this.open(hdr, r);
      case P.Op.CREATE: {
        const flags = r.u32();
        const mode = r.u32();
        const umask = r.u32();
        r.u32();
        const p = childPath(this.nodes.pathOf(hdr.nodeid), r.name());
        let fh: Handle;
        try {
          fh = checkHandle(await f.create(p, mode & ~umask, flags));
        } finally {
          this.invalidate(p);
        }
        try {
          const attr = await this.attrOf(p, fh);
          let nodeid = this.nodes.remember(p);
          let pageCacheWriter = false;
          if (this.pageCache && this.session !== undefined) {
            if (!this.session.tryWriterOpen(nodeid)) {
              // The name's old node is read through the page cache: the new file gets a node of its own.
              this.nodes.forget(nodeid, 1);
              this.nodes.removed(p);
              nodeid = this.nodes.remember(p);
              assert(this.session.tryWriterOpen(nodeid), 'a new node has no page-cache opens');
            }
            pageCacheWriter = true;
          }
          // A new file: no reader had it open, so none is held off it after this writer (a KV block is
          // usually read back at once, and through the page cache then).
          this.track(fh, nodeid, true, undefined, pageCacheWriter);
          if (this.attachStage(fh)) this.stagedAttr(fh, nodeid, attr);
          return [P.entryOut(nodeid, attr, this.validity(nodeid, attr)), P.openOut(fh, this.openFlags())];
        } catch (e) {
          await f.release(fh).catch(() => {});
          throw e;
        }
      }
      case P.Op.READ: {
        const fh = r.u64();
        const offset = P.safeNumber(r.u64Big());
        const size = r.u32();
        // Past 2^53 bytes is past any file's end (files are at most maxBlockBytes).
        if (offset === undefined) return Buffer.alloc(0);
        const target = Buffer.allocUnsafe(size);
        const n = await f.read(fh, target, offset);
        if (!Number.isInteger(n) || n < 0 || n > size) throw new Error(`read returned ${n} bytes for a ${size}-byte request`);
        return target.subarray(0, n);
      }
      case P.Op.WRITE: {
        const fh = r.u64();
        const offset = P.safeNumber(r.u64Big());
        const size = r.u32();
        r.skip(4 + 8 + 4 + 4); // write_flags, lock_owner, flags, padding
        if (offset === undefined) throw new CascadeError('EFBIG', 'write offset past 2^53 bytes');
        const n = await f.write(fh, r.rest(size), offset);
        if (!Number.isInteger(n) || n < 0 || n > size) throw new Error(`write returned ${n} bytes for a ${size}-byte request`);
        return P.writeOut(n);
      }
      case P.Op.STATFS:
        return P.statfsOut(await f.statfs(this.nodes.pathOf(hdr.nodeid)));
      case P.Op.RELEASE: {
        const fh = r.u64();
        const hold = this.holds.get(fh);
        const writer = this.opens.get(fh)?.writer === true;
        this.holds.delete(fh);
        // A handle answered while its block loaded: its source may have been set (again) after the
        // kernel's RELEASE cleared it in C++; clear it now, before the handle number can be reused.
        // (A load still running releases its hold when it ends.)
        if (this.loadingHolds.delete(fh) || this.streamed.delete(fh)) this.session?.clearReadSource(fh);
        this.untrack(fh);
        try {
          await f.release(fh); // a writer's last release may commit
        } finally {
          hold?.release();
          if (writer) this.invalidateNode(hdr.nodeid);
        }
        // A file just written is usually read next (a KV block): publish it, so that read is native.
        if (writer) this.republish(hdr.nodeid);
        return undefined;
      }
      case P.Op.FLUSH: {
        const fh = r.u64();
        try {
          await f.flush(fh); // a writer's close commits
        } finally {
          if (this.opens.get(fh)?.writer === true) this.invalidateNode(hdr.nodeid);
        }
        return undefined;
      }
      case P.Op.FSYNC: {
        const fh = r.u64();
        // A read-only open the C++ workers answered: JS has no handle for it; make everything durable,
        // as fsync of a read handle does.
        if (fh >= NATIVE_HANDLE_BASE) {
          await f.syncAll?.();
          return undefined;
        }
        try {
          await f.fsync(fh);
        } finally {
          if (this.opens.get(fh)?.writer === true) this.invalidateNode(hdr.nodeid);
        }
        return undefined;
      }
      case P.Op.FSYNCDIR:
        return undefined;
      case P.Op.SETXATTR: {
        const size = r.u32();
        r.u32(); // flags (XATTR_CREATE/REPLACE): not enforced, as with the fuse-native engine
        const name = r.name();
        const p = this.nodes.pathOf(hdr.nodeid);
        try {
          await f.setxattr(p, name, Buffer.from(r.rest(size)), { uid: hdr.uid, gid: hdr.gid, pid: hdr.pid });
        } finally {
          this.invalidate(p); // a link by hash changes the content
          this.clearStagedAttrs(p); // and the name no longer leads to the writer's bytes
        }
        return undefined;
      }
      case P.Op.GETXATTR: {
        const size = r.u32();
        r.u32();
        const value = await f.getxattr(this.nodes.pathOf(hdr.nodeid), r.name(), { uid: hdr.uid, gid: hdr.gid, pid: hdr.pid });
        return fitXattr(value, size);
      }
      case P.Op.LISTXATTR: {
        const size = r.u32();
        const names = await f.listxattr(this.nodes.pathOf(hdr.nodeid));
        return fitXattr(Buffer.concat(names.map((n) => Buffer.from(`${n}\0`))), size);
      }
      case P.Op.REMOVEXATTR: {
        const p = this.nodes.pathOf(hdr.nodeid);
        try {
          await f.removexattr(p, r.name(), { uid: hdr.uid, gid: hdr.gid, pid: hdr.pid });
        } finally {
          this.invalidate(p);
        }
        return undefined;
      }
      case P.Op.OPENDIR: {
        if (this.dirs.size >= OPEN_DIRS_MAX) throw new CascadeError('EMFILE', `${this.dirs.size} directories are open, the limit`);
        const dirPath = this.nodes.pathOf(hdr.nodeid);
        const entries = await f.readdir(dirPath);
        // The next opendir of it is answered in C++ (a directory listed since then already was).
        if (!this.nodes.isDetached(hdr.nodeid)) this.listDir(dirPath);
        const dh = this.nextDir++;
        const dot = (name: string): DirEntry => ({ name, kind: 'dir' });
        this.dirs.set(dh, [dot('.'), dot('..'), ...entries.filter((e) => e.name !== '.' && e.name !== '..')]);
        return P.openOut(dh, 0);
      }
      case P.Op.READDIR: {
        const dh = r.u64();
        const offset = r.u64();
        const size = r.u32();
        const entries = this.dirs.get(dh);
        if (entries === undefined) throw new CascadeError('EBADF', `directory handle ${dh} is not open`);
        return P.packDirents(entries, offset, size);
      }
      case P.Op.RELEASEDIR:
        this.dirs.delete(r.u64());
        return undefined;
      case P.Op.SYMLINK:
      case P.Op.LINK:
      case P.Op.MKNOD:
        throw new CascadeError('EPERM', 'links, symlinks and device nodes are not supported');
      case P.Op.READLINK:
        throw new CascadeError('EINVAL', 'not a symlink');
      case P.Op.FALLOCATE:
        throw new CascadeError('EOPNOTSUPP', 'fallocate is not supported');
      case P.Op.DESTROY:
        return undefined;
      default:
        throw new CascadeError('ENOSYS', `opcode ${hdr.opcode} is not implemented`);
    }
  }

  /**
   * fstat of a file unlinked or replaced while open: its path now names another file or nothing, so
   * the attributes come from an open handle of the node (the version a reader holds, the buffer a
   * writer fills), with nlink 0, as on a local filesystem.
   */
  private async detachedAttr(nodeid: number, handle: Handle | undefined): Promise<FileAttr> {
    let fh = handle;
    if (fh === undefined) {
      // A reader of the node's own content: the kernel applies this size to the inode whose page cache
      // its readers read (one that reads another content, direct, would cut them: found by the load test).
      let other: Handle | undefined;
      for (const [h, o] of this.opens) {
        if (o.nodeid !== nodeid) continue;
        if (o.otherContent !== true) {
          fh = h;
          break;
        }
        other ??= h;
      }
      fh ??= other;
    }
    const p = this.nodes.pathOf(nodeid);
    if (fh === undefined) {
      // No open of the node is left, and nothing of it is read. Its name may still be there on a node of
      // its own (an in-place rewrite or a content conflict gave it one): the kernel reached this node by a
      // dentry it cached before that, in a path walk (an open's permission check). It stands for the name
      // as it is now (an open of it opens the name; a writer's moves the name's node off: writerOpening),
      // rather than fail an open of a file that exists (found by the page-cache race test). A name that
      // is gone answers ENOENT.
      return this.fsOps.getattr(p);
    }
    return { ...(await this.fsOps.getattr(p, fh)), nlink: 0 };
  }

  private openFlags(): number {
    return this.options.kernelCache === true ? P.FOPEN.KEEP_CACHE : P.FOPEN.DIRECT_IO;
  }

  private async open(hdr: P.InHeader, r: P.Reader): Promise<Buffer> {
    const flags = r.u32();
    const f = this.fsOps;
    const reading = (flags & O_ACCMODE) === 0;
    const node = this.nodeOpens.get(hdr.nodeid);
    if (!reading && node !== undefined && node.passthrough > 0) {
      // The kernel would refuse a non-passthrough open of this inode after we answered (and the
      // release that follows would commit an empty file): refuse first, saying why.
      throw new CascadeError('EBUSY', `${this.nodes.pathOf(hdr.nodeid)} is open for passthrough reads; write a new file and rename it over`);
    }
    const p = this.nodes.pathOf(hdr.nodeid);
    const writer = !reading || (flags & O_TRUNC) !== 0;
    const pageCacheWriter = writer && this.writerOpening(hdr.nodeid, p);
    let fh: Handle;
    try {
      fh = checkHandle(await f.open(p, flags));
    } catch (e) {
      if (pageCacheWriter) this.writerDone(hdr.nodeid, p);
      throw e;
    } finally {
      if (writer) this.invalidate(p); // stat shows a write session's size from its open on
    }
    let openFlags = this.openFlags();
    let backing: Backing | undefined;
    let conflict = false;
    let tracked = false;
    // A read-only handle's flush is a no-op: answered in C++ at close, without a trip through JS.
    if (reading) this.session?.markReadOnly(fh);
    if (reading && f.holdHandle !== undefined && this.arena) {
      // Reads of a committed version are served in C++ from the arena while this handle is open.
      // Passthrough needs the hold too (its backing file is filled from the arena), so no minimum then.
      // A block that loads from this node's disk is served while it loads (not with passthrough, which
      // needs it whole): the open is answered once the fill has started, and each read waits in C++
      // for its pieces to pass their CRC-32C.
      const session = this.session;
      let announce: (() => void) | undefined;
      let opening = true;
      const loading = new Promise<'loading'>((resolve) => (announce = () => resolve('loading')));
      const onLoading =
        this.backings === undefined && session !== undefined
          ? (handle: number) => {
              // Again for a new load (the first block left DRAM before it was held): only while the
              // handle is open, never for one released meanwhile.
              if (!opening && !this.loadingHolds.has(fh)) return;
              try {
                session.setLoadingReadSource(fh, handle);
                announce?.();
              } catch {
                // (too many sources): this open waits for the whole load, as before
              }
            }
          : undefined;
      const holding = f.holdHandle(fh, this.backings !== undefined ? 0 : HOLD_MIN_BYTES, onLoading);
      try {
        const first = await Promise.race([holding, loading]).finally(() => (opening = false));
        if (first === 'loading') {
          this.loadingHolds.add(fh);
          void holding.then(
            (hold) => this.loaded(fh, hdr.nodeid, hold),
            (e: unknown) => this.loadFailed(fh, e),
          );
        } else if (first !== undefined) {
          this.holds.set(fh, first);
          this.session?.setReadSource(fh, first.version.sizeBytes, first.extents.flat());
          backing = await this.passthroughFor(hdr.nodeid, first);
          // Through the page cache where no other content of this inode is read that way now.
          if (backing === undefined && this.trackReads && first.arenaHandle !== undefined) {
            // Not while the name has a write session open (on a node it has left: this node's every
            // GETATTR shows the session's size, which would cut this reader's page cache).
            const cacheable = f.writing?.(p) !== true;
            const flags = this.session!.readOpenFlags(hdr.nodeid, fh, first.arenaHandle, first.version.sizeBytes, cacheable);
            tracked = true;
            if (flags === null) conflict = true;
            else openFlags = flags;
          }
        }
      } catch (e) {
        // Larger than DRAM, or DRAM full of pins: the handle's reads go through JS instead.
        this.holds.get(fh)?.release();
        this.holds.delete(fh);
        this.session?.clearReadSource(fh);
        this.warnHold(e);
      }
    }
    // A read through JS (small, or not held) keeps direct I/O, but counts on the node's content too: an
    // mmap of it fills the same page cache.
    if (reading && !tracked && backing === undefined && this.trackReads && this.session !== undefined) {
      const content = f.contentKeyOf?.(fh);
      if (content !== undefined) conflict = this.session.readOpenFlags(hdr.nodeid, fh, content.key, content.sizeBytes, false) === null;
    }
    // A node with a writer open keeps it: its write session stays on it (the reader reads direct,
    // untracked). A writer that just closed is usually still counted (its RELEASE comes after close()
    // returns), so wait a moment for it first.
    if (conflict && (await this.writersGone(hdr.nodeid))) await this.readOpenConflict(fh, p, hdr.pid);
    // A retry that opened without conflict is done: the process's next conflict is a new one.
    else if (reading && this.conflictRetries.size > 0) this.conflictRetries.delete(`${hdr.pid}\0${p}`);
    // conflict here: it reads another content than the node's, direct and untracked (see detachedAttr).
    this.track(fh, hdr.nodeid, writer, backing, pageCacheWriter, pageCacheWriter ? p : undefined, conflict);
    if (!reading && this.attachStage(fh)) this.stagedAttr(fh, hdr.nodeid, await f.getattr(p, fh));
    // The workers missed this open (not cached, or its block had left DRAM): publish what the next
    // open can be answered from.
    if (!writer) this.republish(hdr.nodeid);
    if (backing !== undefined) openFlags = P.FOPEN.PASSTHROUGH;
    // A reader's close needs no FLUSH (nothing to commit, no POSIX locks here): one trip less.
    if (!writer) openFlags |= P.FOPEN.NOFLUSH;
    return P.openOut(fh, openFlags, backing?.backingId ?? 0);
  }

  /**
   * The backing file for a passthrough open of `nodeid`, or undefined for a served open. The kernel
   * allows one backing file per inode and no other opens beside passthrough ones, so: a node with
   * other opens (a writer) gets served reads; a node already in passthrough keeps its backing file
   * (an open that raced a rename-replace reads the version the node had, as if it came first).
   */
  private async passthroughFor(nodeid: number, hold: DramHold): Promise<Backing | undefined> {
    const cache = this.backings;
    if (cache === undefined) return undefined;
    const node = this.nodeOpens.get(nodeid);
    if (node !== undefined && node.other > 0) return undefined;
    const sha = node?.backing?.sha256 ?? hold.version.sha256;
    return cache.acquire(sha, hold.version.sizeBytes, hold.extents.flat());
  }

  /** Route the handle's WRITEs to its file's native stage (before the open is answered); true if they are. */
  private attachStage(fh: Handle): boolean {
    if (!this.staging) return false;
    const id = this.fsOps.stageOf?.(fh);
    if (id === undefined) return false;
    try {
      this.session?.stageAttach(fh, id);
      return this.session !== undefined;
    } catch (e) {
      this.log(`writes of handle ${fh} go through JS: ${(e as Error).message}`); // too many handles
      return false;
    }
  }

  /**
   * The fstat that follows a create or O_TRUNC open (the kernel drops a truncated file's cached size)
   * is answered in C++: these attributes with the stage's size and time. A chmod of the node clears them.
   */
  private stagedAttr(fh: Handle, nodeid: number, attr: FileAttr): void {
    try {
      this.session?.setStagedAttr(fh, nodeid, P.fuseAttr(attr));
    } catch {
      // too many handles: JS answers this one's fstat
    }
  }

  /** p's writers' attributes are no longer answered in C++ (JS answers its GETATTRs again). */
  private clearStagedAttrs(p: string): void {
    const nodeid = this.nodes.idOf(p);
    if (nodeid === undefined) return;
    for (const [fh, o] of this.opens) if (o.nodeid === nodeid && o.writer) this.session?.clearStagedAttr(fh);
  }

  /** sessionPath: a page-cache writer's write session of an existing file (writerOpening), by the path it opened. */
  private track(fh: Handle, nodeid: number, writer: boolean, backing?: Backing, pageCacheWriter = false, sessionPath?: string, otherContent = false): void {
    this.opens.set(fh, { nodeid, writer, backing, pageCacheWriter, otherContent, sessionPath });
    const n = this.nodeOpens.get(nodeid) ?? { passthrough: 0, other: 0, writers: 0 };
    if (writer) n.writers++;
    if (backing !== undefined) {
      n.passthrough++;
      n.backing ??= backing;
    } else {
      n.other++;
    }
    this.nodeOpens.set(nodeid, n);
  }

  /** A load that an open answered early ended: the handle keeps the block held while it is open. */
  private loaded(fh: Handle, nodeid: number, hold: DramHold | undefined): void {
    if (!this.loadingHolds.delete(fh) || this.unmounting !== undefined) {
      hold?.release(); // released (or unmounting) meanwhile
      return;
    }
    this.streamed.add(fh); // RELEASE clears its source (see there)
    if (hold !== undefined) this.holds.set(fh, hold);
    try {
      // Reads need not ask the fill any more (and the held block is the one to read, should the load
      // have been redone into another).
      if (hold !== undefined) this.session?.setReadSource(fh, hold.version.sizeBytes, hold.extents.flat());
      this.republish(nodeid); // the block is in DRAM now: the next open of this file is answered in C++
    } catch (e) {
      this.warnHold(e); // (too many sources): the loading source stays, and still serves
    }
  }

  /** A load that an open answered early failed: its reads go to JS, which reads through the store. */
  private loadFailed(fh: Handle, e: unknown): void {
    if (this.loadingHolds.delete(fh)) this.session?.clearReadSource(fh);
    this.warnHold(e);
  }

  private warnHold(e: unknown): void {
    if (this.holdWarned) return;
    this.holdWarned = true;
    this.log(`reads served through JS for some files: ${(e as Error).message}`);
  }

  private untrack(fh: Handle): void {
    const o = this.opens.get(fh);
    if (o === undefined) return;
    this.opens.delete(fh);
    if (o.pageCacheWriter === true) this.writerDone(o.nodeid, o.sessionPath);
    o.backing?.release();
    const n = this.nodeOpens.get(o.nodeid);
    if (n === undefined) return;
    if (o.backing !== undefined) n.passthrough--;
    else n.other--;
    if (o.writer) n.writers--;
    if (n.passthrough === 0) n.backing = undefined;
    if (n.passthrough === 0 && n.other === 0) this.nodeOpens.delete(o.nodeid);
  }

  private async setattr(p: string, r: P.Reader, nodeid: number): Promise<Buffer> {
    const valid = r.u32();
    r.u32();
    // Fields not named in `valid` may hold anything (ftruncate sends a lock owner, a path truncate a
    // stale fh): read them raw and convert only those that are valid.
    const fhRaw = r.u64Big();
    const sizeRaw = r.u64Big();
    r.skip(8); // lock_owner
    const atime = Number(r.i64Big());
    const mtime = Number(r.i64Big());
    r.skip(8); // ctime
    const atimensec = r.u32();
    const mtimensec = r.u32();
    r.u32(); // ctimensec
    const mode = r.u32();
    r.u32();
    const uid = r.u32();
    const gid = r.u32();
    const f = this.fsOps;
    const handle = (valid & P.FATTR.FH) !== 0 ? handleOf(fhRaw) : undefined;
    if ((valid & (P.FATTR.UID | P.FATTR.GID)) !== 0) {
      // Ownership is fixed; a chown that changes nothing (cp -p, tar as the owner) succeeds.
      const attr = await f.getattr(p, handle);
      const sameUid = (valid & P.FATTR.UID) === 0 || uid === UNCHANGED_ID || uid === attr.uid;
      const sameGid = (valid & P.FATTR.GID) === 0 || gid === UNCHANGED_ID || gid === attr.gid;
      if (!sameUid || !sameGid) throw new CascadeError('EPERM', `changing the owner of ${p} is not supported`);
    }
    if ((valid & P.FATTR.SIZE) !== 0) {
      const size = P.safeNumber(sizeRaw);
      if (size === undefined) throw new CascadeError('EFBIG', `size ${sizeRaw} is past any file's limit`);
      // A truncate moves the inode's size as a writer does (a writer's ftruncate is counted already).
      const counted = handle === undefined && this.writerOpening(nodeid, p);
      try {
        await f.truncate(p, size, handle);
      } finally {
        if (counted) this.writerDone(nodeid, p);
      }
    }
    if ((valid & P.FATTR.MODE) !== 0) {
      await f.chmod(p, mode);
      this.clearStagedAttrs(p); // a writer's attributes in C++ would show the old mode
    }
    if ((valid & (P.FATTR.ATIME | P.FATTR.MTIME)) !== 0) {
      const now = Date.now();
      let current: FileAttr | undefined;
      const pick = async (set: number, isNow: number, sec: number, nsec: number, which: 'atimeMs' | 'mtimeMs') => {
        if ((valid & set) === 0) return (current ??= await f.getattr(p, handle))[which];
        return (valid & isNow) !== 0 ? now : sec * 1000 + Math.floor(nsec / 1e6);
      };
      const a = await pick(P.FATTR.ATIME, P.FATTR.ATIME_NOW, atime, atimensec, 'atimeMs');
      const m = await pick(P.FATTR.MTIME, P.FATTR.MTIME_NOW, mtime, mtimensec, 'mtimeMs');
      await f.utimens(p, a, m);
    }
    const own = await f.getattr(p, handle);
    if (handle !== undefined) {
      // A handle whose file the name no longer leads to (linked over by hash, unlinked or replaced
      // while open) has attributes of its own: the kernel, which keeps one inode for both, must not
      // cache them for the name (a stat of the name would show the orphaned writer's size).
      const named = await f.getattr(p).catch(() => undefined);
      if (named === undefined || named.ino !== own.ino || named.sizeBytes !== own.sizeBytes) return P.attrOut(own, NO_CACHE);
    }
    return P.attrOut(own, this.validity(nodeid, own));
  }
}

/** The xattr reply protocol: size 0 asks for the length; a too-small buffer gets ERANGE. */
function fitXattr(value: Buffer, size: number): Buffer {
  if (size === 0) return P.xattrSizeOut(value.length);
  if (value.length > size) throw new CascadeError('ERANGE', `value of ${value.length} bytes for a ${size}-byte buffer`);
  return value;
}

async function exists(f: CascadeFsOps, p: string): Promise<boolean> {
  try {
    await f.getattr(p);
    return true;
  } catch {
    return false;
  }
}

/** A file handle the kernel echoes back: one of ours, so always below 2^31; anything else is EBADF. */
function handleOf(fh: bigint): Handle {
  const n = P.safeNumber(fh);
  if (n === undefined) throw new CascadeError('EBADF', `file handle ${fh} was never handed out`);
  return n;
}

function checkHandle(handle: number): number {
  if (!Number.isSafeInteger(handle) || handle < 0) throw new Error(`invalid file handle ${handle} from the filesystem`);
  return handle;
}

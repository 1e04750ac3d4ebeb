/**
 * The native FUSE engine's TypeScript half: the mount of one CascadeFsOps and the translation of the
 * requests its C++ session hands over. native/src/engine speaks the FUSE protocol on /dev/fuse with
 * worker threads and requests of up to 4 MiB; it answers INIT and the READs of handles whose version is
 * held in the DRAM arena by itself, and hands everything else here as raw messages. This file only
 * translates: it decodes a request (mount/engine/fuse-proto.ts), calls the matching CascadeFsOps
 * method, and replies; errors become errnos through mount/engine/errno.ts, the one translation table.
 * Its parts: open files (native-opens.ts), what the workers answer from (native-meta.ts), page-cache
 * readers kept on one content (page-cache-guard.ts), node ids (node-table.ts), options (native-options.ts).
 *
 * Unlike libfuse's high-level API, operations name inodes (node ids), which this adapter maps to
 * paths. A node keeps its path when a rename replaces the file under it, so an open that raced the
 * rename opens the file now at that path instead of failing with ENOENT.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { requireNative, type NativeFuseSessionBinding } from '../../native';
import type { FuseNegotiated } from '../../native/types';
import { assert, CascadeError, isCascadeError } from '../../store/errors';
import type { CascadeFsOps, DirEntry, FileAttr, Handle } from '../../fs/types';
import { errnoOf, toErrno } from './errno';
import * as P from './fuse-proto';
import { BackingCache } from './passthrough';
import { checkMountpoint, clearStaleMount, fusermountUnmount, mountEntry, resolveMountpoint } from './mounts';
import { enableFuseUring, fuseConfAllowsOther, fuseRequestPages, type NativeEngineOptions } from './native-options';
import { VALIDITY, WorkerCache } from './native-meta';
import { childPath, NodeTable } from './node-table';
import { checkHandle, OpenFiles } from './native-opens';
import { PageCacheGuard } from './page-cache-guard';

export { fuseRequestPages, REQUEST_PAGES_WANTED, type NativeEngineOptions } from './native-options';
export { ATTRS_MAX, LISTED_NAMES_MAX, NodeTable, NODES_MAX } from './node-table';
export { HOLD_MIN_BYTES } from './native-opens';

/** FUSE opcode names by number, for metrics. */
const OP_NAMES = new Map<number, string>(Object.entries(P.Op).map(([name, n]) => [n, name]));

/** How long INIT may take after mount(2) before the mount is called failed. */
const INIT_TIMEOUT_MS = 10_000;
/** Open directories at once. */
export const OPEN_DIRS_MAX = 65_536;
/** Requests JS takes straight from the workers (takeNext) before it lets the event loop run once. */
const HANDOVER_CHAIN_MAX = 32;
const NO_CACHE: P.Validity = { entryMs: 0, attrMs: 0 };
const PASSTHROUGH_CACHE_BYTES_DEFAULT = 1024 * 1024 * 1024;
const UNCHANGED_ID = 0xffff_ffff;
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

/** File handles of opens the C++ workers answered start here (native/src/engine/session.h). */
export const NATIVE_HANDLE_BASE = 2 ** 40;

/** The native engine's mount of one CascadeFsOps. */
export class NativeFuseEngine {
  readonly name = 'native';
  private session: NativeFuseSessionBinding | undefined;
  private readonly nodes = new NodeTable();
  private readonly dirs = new Map<number, DirEntry[]>();
  private nextDir = 1;
  private unmounting: Promise<void> | undefined;
  /** Requests JS is serving now (dispatch to reply). */
  private inProgress = 0;
  /** RELEASEs JS is serving (already answered by the workers). */
  private releasesInProgress = 0;
  /** Requests handed over by takeNext since the event loop last had a turn. */
  private handedOver = 0;
  /** Whether read-only opens of held content may read through the page cache (NativeEngineOptions.pageCache). */
  private readonly pageCache: boolean;
  /**
   * Whether the content of every read open is tracked, so that the opens of one inode read one
   * content (readOpenConflict): also with --no-page-cache, where an mmap still fills the page cache.
   */
  private readonly trackReads: boolean;
  private touchTimer: NodeJS.Timeout | undefined;
  /** The attributes and listings the C++ workers answer from. */
  private readonly cache: WorkerCache;
  /** Page-cache readers of one inode read one content (write sessions, content conflicts). */
  private readonly guard: PageCacheGuard;
  /** Open files: handles, DRAM holds, passthrough backings, native stages. */
  private readonly files: OpenFiles;

  private constructor(
    readonly mountpoint: string,
    private readonly fsOps: CascadeFsOps,
    private readonly options: NativeEngineOptions,
    private readonly log: (msg: string) => void,
  ) {
    this.pageCache = options.pageCache !== false && options.kernelCache !== true && options.passthrough !== true;
    this.trackReads = options.kernelCache !== true && options.passthrough !== true;
    this.cache = new WorkerCache(this.nodes, fsOps, this.pageCache, () => this.session, log);
    this.guard = new PageCacheGuard(this.nodes, this.cache, this.pageCache, () => this.session, (nodeid) => this.files.writersOf(nodeid));
    this.files = new OpenFiles(this.nodes, fsOps, options, this.cache, this.guard, this.trackReads, () => this.session, () => this.unmounting !== undefined, log);
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
          nativeOpens: engine.cache.caching && options.arena !== undefined && options.maxBlockBytes !== undefined && options.passthrough !== true,
          pageCache: engine.pageCache,
          trackReads: engine.trackReads,
          // Those opens are read-only: no FLUSH at close (one trip less per block read).
          openFlags: engine.files.openFlags() | P.FOPEN.NOFLUSH,
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
    engine.files.arena = session.negotiated().arena;
    engine.cache.watch();
    // Native opens are hits the store counts, and recent uses its eviction must see.
    engine.touchTimer = setInterval(() => engine.drainTouched(), TOUCH_DRAIN_MS);
    engine.touchTimer.unref();
    if (options.arena !== undefined && fsOps.useStager !== undefined) {
      engine.files.staging = fsOps.useStager({
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
      else engine.files.backings = new BackingCache(session, options.passthroughCacheBytes ?? PASSTHROUGH_CACHE_BYTES_DEFAULT);
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
      holds: this.files.holdCount,
      openDirs: this.dirs.size,
      passthroughFiles: this.files.backings?.size ?? 0,
      passthroughBytes: this.files.backings?.bytes ?? 0,
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
    if (this.files.staging) await this.fsOps.detachStager?.().catch((e: unknown) => this.log(`unmount: ${(e as Error).message}`));
    this.session?.unmount();
    // Only now: a lazy unmount leaves the mount serving processes still inside it until here, and the
    // C++ listings must follow every change while anything is served from them.
    this.cache.unwatch();
    this.files.close();
    this.dirs.clear();
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
          this.cache.publishDirs();
          observe?.(OP_NAMES.get(op) ?? String(op), Number(process.hrtime.bigint() - t0) / 1e9, 0);
        } finally {
          this.served(answered);
        }
      },
      (e: unknown) => {
        try {
          const errno = this.errnoFor(hdr, e);
          if (!answered) this.reply(hdr.unique, errno);
          this.cache.publishDirs();
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

  private async serve(hdr: P.InHeader, r: P.Reader): Promise<Buffer | Buffer[] | undefined> {
    const f = this.fsOps;
    switch (hdr.opcode) {
      case P.Op.LOOKUP: {
        const parent = this.nodes.pathOf(hdr.nodeid);
        try {
          return await this.cache.entry(childPath(parent, r.name()));
        } catch (e) {
          if (isCascadeError(e, 'ENOENT') && !this.nodes.isDetached(hdr.nodeid)) this.cache.listDir(parent);
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
          const detached = await this.files.detachedAttr(hdr.nodeid, handle);
          return P.attrOut(detached, this.cache.validity(hdr.nodeid, detached));
        }
        const attr = await this.cache.attrOf(this.nodes.pathOf(hdr.nodeid), handle);
        return P.attrOut(attr, this.cache.validity(hdr.nodeid, attr));
      }
      case P.Op.SETATTR: {
        const p = this.nodes.pathOf(hdr.nodeid);
        try {
          return await this.setattr(p, r, hdr.nodeid);
        } finally {
          this.cache.invalidate(p); // truncate, chmod, utimens
        }
      }
      case P.Op.MKDIR: {
        const mode = r.u32();
        const umask = r.u32();
        const p = childPath(this.nodes.pathOf(hdr.nodeid), r.name());
        try {
          await f.mkdir(p, mode & ~umask);
        } finally {
          this.cache.invalidate(p);
        }
        return this.cache.entry(p);
      }
      case P.Op.UNLINK:
      case P.Op.RMDIR: {
        const p = childPath(this.nodes.pathOf(hdr.nodeid), r.name());
        try {
          await (hdr.opcode === P.Op.UNLINK ? f.unlink(p) : f.rmdir(p));
        } finally {
          this.cache.invalidate(p, hdr.opcode === P.Op.RMDIR);
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
          this.cache.invalidate(from, true);
          this.cache.invalidate(to, true);
        }
        this.nodes.renamed(from, to);
        // Engines write a temporary file and rename it over the final name: publish the final name.
        const moved = this.nodes.idOf(to);
        if (moved !== undefined) this.cache.republish(moved);
        return undefined;
      }
      case P.Op.OPEN:
        return this.files.open(hdr, r);
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
          this.cache.invalidate(p);
        }
        try {
          const attr = await this.cache.attrOf(p, fh);
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
          this.files.track(fh, nodeid, true, undefined, pageCacheWriter);
          if (this.files.attachStage(fh)) this.files.stagedAttr(fh, nodeid, attr);
          return [P.entryOut(nodeid, attr, this.cache.validity(nodeid, attr)), P.openOut(fh, this.files.openFlags())];
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
        await this.files.release(r.u64(), hdr.nodeid);
        return undefined;
      }
      case P.Op.FLUSH: {
        const fh = r.u64();
        try {
          await f.flush(fh); // a writer's close commits
        } finally {
          if (this.files.isWriter(fh)) this.cache.invalidateNode(hdr.nodeid);
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
          if (this.files.isWriter(fh)) this.cache.invalidateNode(hdr.nodeid);
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
          this.cache.invalidate(p); // a link by hash changes the content
          this.files.clearStagedAttrs(p); // and the name no longer leads to the writer's bytes
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
          this.cache.invalidate(p);
        }
        return undefined;
      }
      case P.Op.OPENDIR: {
        if (this.dirs.size >= OPEN_DIRS_MAX) throw new CascadeError('EMFILE', `${this.dirs.size} directories are open, the limit`);
        const dirPath = this.nodes.pathOf(hdr.nodeid);
        const entries = await f.readdir(dirPath);
        // The next opendir of it is answered in C++ (a directory listed since then already was).
        if (!this.nodes.isDetached(hdr.nodeid)) this.cache.listDir(dirPath);
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
      const counted = handle === undefined && this.guard.writerOpening(nodeid, p);
      try {
        await f.truncate(p, size, handle);
      } finally {
        if (counted) this.guard.writerDone(nodeid, p);
      }
    }
    if ((valid & P.FATTR.MODE) !== 0) {
      await f.chmod(p, mode);
      this.files.clearStagedAttrs(p); // a writer's attributes in C++ would show the old mode
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
    return P.attrOut(own, this.cache.validity(nodeid, own));
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


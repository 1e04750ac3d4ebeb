// The native engine's open files: their handles, the DRAM holds the C++ workers read them from, passthrough backings, native write stages, and what is open on each node.
import * as fs from 'node:fs';
import type { NativeFuseSessionBinding } from '../../native';
import { CascadeError } from '../../store/errors';
import type { DramHold } from '../../store/store';
import type { CascadeFsOps, FileAttr, Handle } from '../../fs/types';
import * as P from './fuse-proto';
import type { BackingCache, Backing } from './passthrough';
import type { WorkerCache } from './native-meta';
import type { NativeEngineOptions } from './native-options';
import type { NodeTable } from './node-table';
import type { PageCacheGuard } from './page-cache-guard';

/**
 * Smallest version held in the arena for reads served in C++: a file of one 1 MiB request is read
 * in one trip either way, and the hold (locks, a lease) costs more than that trip's copy in JS.
 */
export const HOLD_MIN_BYTES = 1024 * 1024 + 1;
const O_ACCMODE = 3;
const O_TRUNC = fs.constants.O_TRUNC;

/** The engine's open handles and what each holds, from the open that made it to its RELEASE. */
export class OpenFiles {
  private readonly holds = new Map<Handle, DramHold>();
  /** Every open file handle: its node, whether it may write, and its passthrough backing if it has one. */
  private readonly opens = new Map<
    Handle,
    { nodeid: number; writer: boolean; backing?: Backing; pageCacheWriter?: boolean; otherContent?: boolean; sessionPath?: string }
  >();
  /** Per node: open handles with passthrough (all share one backing, a kernel rule) and without; of those, writers. */
  private readonly nodeOpens = new Map<number, { passthrough: number; other: number; writers: number; backing?: Backing }>();
  /** The shared-memory copies passthrough opens read from (set at mount, where the kernel offers passthrough). */
  backings: BackingCache | undefined;
  private holdWarned = false;
  /** Read handles answered while their block loads (open): their hold comes when the load ends. */
  private readonly loadingHolds = new Set<Handle>();
  /** Such handles once their load ended, until released. */
  private readonly streamed = new Set<Handle>();
  /** Whether the session maps the DRAM arena (settled at INIT). */
  arena = false;
  /** Whether writes of new files are staged natively (the filesystem took the stager). */
  staging = false;

  constructor(
    private readonly nodes: NodeTable,
    private readonly fsOps: CascadeFsOps,
    private readonly options: NativeEngineOptions,
    private readonly cache: WorkerCache,
    private readonly guard: PageCacheGuard,
    /** Whether the content of every read open is tracked (the engine's trackReads). */
    private readonly trackReads: boolean,
    private readonly session: () => NativeFuseSessionBinding | undefined,
    /** Whether the engine is unmounting. */
    private readonly unmounting: () => boolean,
    private readonly log: (msg: string) => void,
  ) {}

  /** DRAM holds of open handles now. */
  get holdCount(): number {
    return this.holds.size;
  }

  /** The writers open on a node now. */
  writersOf(nodeid: number): number {
    return this.nodeOpens.get(nodeid)?.writers ?? 0;
  }

  /** Whether handle fh is open for writing. */
  isWriter(fh: Handle): boolean {
    return this.opens.get(fh)?.writer === true;
  }

  /**
   * The kernel's RELEASE of fh, which the workers have answered already: the handle's hold, read source
   * and bookkeeping go, then the filesystem's handle (a writer's last release may commit).
   */
  async release(fh: Handle, nodeid: number): Promise<void> {
    const hold = this.holds.get(fh);
    const writer = this.opens.get(fh)?.writer === true;
    this.holds.delete(fh);
    // A handle answered while its block loaded: its source may have been set (again) after the
    // kernel's RELEASE cleared it in C++; clear it now, before the handle number can be reused.
    // (A load still running releases its hold when it ends.)
    if (this.loadingHolds.delete(fh) || this.streamed.delete(fh)) this.session()?.clearReadSource(fh);
    this.untrack(fh);
    try {
      await this.fsOps.release(fh); // a writer's last release may commit
    } finally {
      hold?.release();
      if (writer) this.cache.invalidateNode(nodeid);
    }
    // A file just written is usually read next (a KV block): publish it, so that read is native.
    if (writer) this.cache.republish(nodeid);
  }

  /** At unmount: every hold is released and the passthrough copies go. */
  close(): void {
    for (const h of this.holds.values()) h.release();
    this.holds.clear();
    this.backings?.close();
  }

  /**
   * fstat of a file unlinked or replaced while open: its path now names another file or nothing, so
   * the attributes come from an open handle of the node (the version a reader holds, the buffer a
   * writer fills), with nlink 0, as on a local filesystem.
   */
  async detachedAttr(nodeid: number, handle: Handle | undefined): Promise<FileAttr> {
    let fh = handle;
    if (fh === undefined) {
      // A reader of the node's own content: the kernel applies this size to the inode whose page cache
      // its readers read (one that reads another content, direct, would cut them).
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
      // rather than fail an open of a file that exists. A name that is gone answers ENOENT.
      return this.fsOps.getattr(p);
    }
    return { ...(await this.fsOps.getattr(p, fh)), nlink: 0 };
  }

  openFlags(): number {
    return this.options.kernelCache === true ? P.FOPEN.KEEP_CACHE : P.FOPEN.DIRECT_IO;
  }

  async open(hdr: P.InHeader, r: P.Reader): Promise<Buffer> {
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
    const pageCacheWriter = writer && this.guard.writerOpening(hdr.nodeid, p);
    let fh: Handle;
    try {
      fh = checkHandle(await f.open(p, flags));
    } catch (e) {
      if (pageCacheWriter) this.guard.writerDone(hdr.nodeid, p);
      throw e;
    } finally {
      if (writer) this.cache.invalidate(p); // stat shows a write session's size from its open on
    }
    let openFlags = this.openFlags();
    let backing: Backing | undefined;
    let conflict = false;
    let tracked = false;
    // A read-only handle's flush is a no-op: answered in C++ at close, without a trip through JS.
    if (reading) this.session()?.markReadOnly(fh);
    if (reading && f.holdHandle !== undefined && this.arena) {
      // Reads of a committed version are served in C++ from the arena while this handle is open.
      // Passthrough needs the hold too (its backing file is filled from the arena), so no minimum then.
      // A block that loads from this node's disk is served while it loads (not with passthrough, which
      // needs it whole): the open is answered once the fill has started, and each read waits in C++
      // for its pieces to pass their CRC-32C.
      const session = this.session();
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
                // (too many sources): this open waits for the whole load instead
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
          this.session()?.setReadSource(fh, first.version.sizeBytes, first.extents.flat());
          backing = await this.passthroughFor(hdr.nodeid, first);
          // Through the page cache where no other content of this inode is read that way now.
          if (backing === undefined && this.trackReads && first.arenaHandle !== undefined) {
            // Not while the name has a write session open (on a node it has left: this node's every
            // GETATTR shows the session's size, which would cut this reader's page cache).
            const cacheable = f.writing?.(p) !== true;
            const flags = this.session()!.readOpenFlags(hdr.nodeid, fh, first.arenaHandle, first.version.sizeBytes, cacheable);
            tracked = true;
            if (flags === null) conflict = true;
            else openFlags = flags;
          }
        }
      } catch (e) {
        // Larger than DRAM, or DRAM full of pins: the handle's reads go through JS instead.
        this.holds.get(fh)?.release();
        this.holds.delete(fh);
        this.session()?.clearReadSource(fh);
        this.warnHold(e);
      }
    }
    // A read through JS (small, or not held) keeps direct I/O, but counts on the node's content too: an
    // mmap of it fills the same page cache.
    if (reading && !tracked && backing === undefined && this.trackReads && this.session() !== undefined) {
      const content = f.contentKeyOf?.(fh);
      if (content !== undefined) conflict = this.session()!.readOpenFlags(hdr.nodeid, fh, content.key, content.sizeBytes, false) === null;
    }
    // A node with a writer open keeps it: its write session stays on it (the reader reads direct,
    // untracked). A writer that just closed is usually still counted (its RELEASE comes after close()
    // returns), so wait a moment for it first.
    if (conflict && (await this.guard.writersGone(hdr.nodeid))) await this.guard.readOpenConflict(p, hdr.pid, () => this.dropOpen(fh));
    // A retry that opened without conflict is done: the process's next conflict is a new one.
    else if (reading) this.guard.retried(hdr.pid, p);
    // conflict here: it reads another content than the node's, direct and untracked (see detachedAttr).
    this.track(fh, hdr.nodeid, writer, backing, pageCacheWriter, pageCacheWriter ? p : undefined, conflict);
    if (!reading && this.attachStage(fh)) this.stagedAttr(fh, hdr.nodeid, await f.getattr(p, fh));
    // The workers missed this open (not cached, or its block had left DRAM): publish what the next
    // open can be answered from.
    if (!writer) this.cache.republish(hdr.nodeid);
    if (backing !== undefined) openFlags = P.FOPEN.PASSTHROUGH;
    // A reader's close needs no FLUSH (nothing to commit, no POSIX locks here): one trip less.
    if (!writer) openFlags |= P.FOPEN.NOFLUSH;
    return P.openOut(fh, openFlags, backing?.backingId ?? 0);
  }

  /** An open sent back for a content conflict: its hold, its read source and the filesystem's handle go. */
  private async dropOpen(fh: Handle): Promise<void> {
    this.holds.get(fh)?.release();
    this.holds.delete(fh);
    this.session()?.clearReadSource(fh);
    await this.fsOps.release(fh);
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
  attachStage(fh: Handle): boolean {
    if (!this.staging) return false;
    const id = this.fsOps.stageOf?.(fh);
    if (id === undefined) return false;
    try {
      this.session()?.stageAttach(fh, id);
      return this.session() !== undefined;
    } catch (e) {
      this.log(`writes of handle ${fh} go through JS: ${(e as Error).message}`); // too many handles
      return false;
    }
  }

  /**
   * The fstat that follows a create or O_TRUNC open (the kernel drops a truncated file's cached size)
   * is answered in C++: these attributes with the stage's size and time. A chmod of the node clears them.
   */
  stagedAttr(fh: Handle, nodeid: number, attr: FileAttr): void {
    try {
      this.session()?.setStagedAttr(fh, nodeid, P.fuseAttr(attr));
    } catch {
      // too many handles: JS answers this one's fstat
    }
  }

  /** p's writers' attributes are no longer answered in C++ (JS answers its GETATTRs again). */
  clearStagedAttrs(p: string): void {
    const nodeid = this.nodes.idOf(p);
    if (nodeid === undefined) return;
    for (const [fh, o] of this.opens) if (o.nodeid === nodeid && o.writer) this.session()?.clearStagedAttr(fh);
  }

  /** sessionPath: a page-cache writer's write session of an existing file (writerOpening), by the path it opened. */
  track(fh: Handle, nodeid: number, writer: boolean, backing?: Backing, pageCacheWriter = false, sessionPath?: string, otherContent = false): void {
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
    if (!this.loadingHolds.delete(fh) || this.unmounting()) {
      hold?.release(); // released (or unmounting) meanwhile
      return;
    }
    this.streamed.add(fh); // RELEASE clears its source (see there)
    if (hold !== undefined) this.holds.set(fh, hold);
    try {
      // Reads need not ask the fill any more (and the held block is the one to read, should the load
      // have been redone into another).
      if (hold !== undefined) this.session()?.setReadSource(fh, hold.version.sizeBytes, hold.extents.flat());
      this.cache.republish(nodeid); // the block is in DRAM now: the next open of this file is answered in C++
    } catch (e) {
      this.warnHold(e); // (too many sources): the loading source stays, and still serves
    }
  }

  /** A load that an open answered early failed: its reads go to JS, which reads through the store. */
  private loadFailed(fh: Handle, e: unknown): void {
    if (this.loadingHolds.delete(fh)) this.session()?.clearReadSource(fh);
    this.warnHold(e);
  }

  private warnHold(e: unknown): void {
    if (this.holdWarned) return;
    this.holdWarned = true;
    this.log(`reads served through JS for some files: ${(e as Error).message}`);
  }

  untrack(fh: Handle): void {
    const o = this.opens.get(fh);
    if (o === undefined) return;
    this.opens.delete(fh);
    if (o.pageCacheWriter === true) this.guard.writerDone(o.nodeid, o.sessionPath);
    o.backing?.release();
    const n = this.nodeOpens.get(o.nodeid);
    if (n === undefined) return;
    if (o.backing !== undefined) n.passthrough--;
    else n.other--;
    if (o.writer) n.writers--;
    if (n.passthrough === 0) n.backing = undefined;
    if (n.passthrough === 0 && n.other === 0) this.nodeOpens.delete(o.nodeid);
  }
}

/** A handle from the filesystem: a safe integer >= 0 (the kernel echoes it back as a u64). */
export function checkHandle(handle: number): number {
  if (!Number.isSafeInteger(handle) || handle < 0) throw new Error(`invalid file handle ${handle} from the filesystem`);
  return handle;
}

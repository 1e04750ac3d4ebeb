// Page-cache readers of an inode read one content: writers of an existing file take a node of their own and hold its path off the page cache, and a read open of another content is sent to a fresh node.
import type { NativeFuseSessionBinding } from '../../native';
import { CascadeError } from '../../store/errors';
import type { WorkerCache } from './native-meta';
import type { NodeTable } from './node-table';

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
 * kernel applies even to an inode that page-cache readers read (a hold that ended at the writer's open
 * would let a reader be cut at the writer's size). The longest hold the session takes; the writer's
 * release shortens it to WRITTEN_DIRECT_MS.
 */
const WRITE_SESSION_HOLD_MS = 60_000;
/**
 * How long a path takes no page-cache open after such a session closed. A page-cache reader could read
 * another version's size or pages in five ways, each closed where it arises: a write session on a node
 * the name has left telling the name's new node its size; the kernel applying the size of any reply,
 * even one that expires at once; a GETATTR of a node the name has left answered from a reader of
 * another content (a reader of the node's own content answers first, in JS and in C++); an open keeping
 * the pages while the open before it, which drops them, has not yet dropped them (Session::PagesRead);
 * and a hold that ends before its session. This hold is a margin beyond those, since no load test
 * proves there is no sixth; files written once and read (KV blocks) take the page cache at once.
 */
const WRITTEN_DIRECT_MS = 1000;

export class PageCacheGuard {
  /** Write sessions of existing files open per path (writerOpening to writerDone): each holds the path off the page cache. */
  private readonly writeSessions = new Map<string, number>();
  /** (process, path) of read opens sent back for a content conflict, and when (readOpenConflict). */
  private readonly conflictRetries = new Map<string, number>();

  constructor(
    private readonly nodes: NodeTable,
    private readonly cache: WorkerCache,
    /** Whether read-only opens of held content may read through the page cache (NativeEngineOptions.pageCache). */
    private readonly pageCache: boolean,
    private readonly session: () => NativeFuseSessionBinding | undefined,
    /** The writers open on a node now. */
    private readonly writersOf: (nodeid: number) => number,
  ) {}

  /**
   * A request that moves node nodeid's size (a writer's open, a truncate by path) is about to be
   * served: true if it was counted as a writer (release it with session.writerReleased), false where
   * there is nothing to count (no page cache). Where readers of the inode read through the page cache,
   * the request may not share their inode (the kernel's one size would cut their reads): the name is
   * detached from it and the caller gets ESTALE, on which the kernel looks the path up again (a new
   * node) and repeats the request there, once.
   */
  writerOpening(nodeid: number, p: string): boolean {
    const session = this.session();
    if (!this.pageCache || session === undefined) return false;
    // A writer that came by a node the name has left (a dentry the kernel cached before the name got a
    // node of its own) changes the content of the name's node too, whose page-cache readers it is not
    // counted against: that node leaves the name now (the next lookup makes a fresh one).
    if (this.nodes.isDetached(nodeid) && this.nodes.idOf(p) !== undefined) {
      this.cache.invalidate(p);
      this.nodes.removed(p);
    }
    if (session.tryWriterOpen(nodeid)) {
      this.writeSessions.set(p, (this.writeSessions.get(p) ?? 0) + 1);
      session.holdOffPageCache(p, WRITE_SESSION_HOLD_MS);
      return true;
    }
    // Nor may a reader's page-cache open take the new node before the writer comes back to it.
    session.holdOffPageCache(p, WRITER_RETRY_HOLD_MS);
    this.cache.invalidate(p);
    this.nodes.removed(p);
    throw new CascadeError('ESTALE', `${p} is open for reading through the page cache: the writer gets a node of its own`);
  }

  /**
   * A writer counted by writerOpening (sessionPath: the path it opened) or by a create (undefined) is
   * gone. Once the last session of a path ends, the path reads direct WRITTEN_DIRECT_MS longer, as does
   * the node's path now, should a rename have moved it.
   */
  writerDone(nodeid: number, sessionPath: string | undefined): void {
    const session = this.session();
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
  async writersGone(nodeid: number): Promise<boolean> {
    for (let waitedMs = 0; ; waitedMs += WRITERS_GONE_POLL_MS) {
      if (this.writersOf(nodeid) === 0) return true;
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
  async readOpenConflict(p: string, pid: number, drop: () => Promise<void>): Promise<void> {
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
    await drop();
    this.cache.invalidate(p);
    this.nodes.removed(p);
    throw new CascadeError('ESTALE', `${p}: another content is open on its node; the open gets a node of its own`);
  }

  /** A retry that opened without conflict is done: the process's next conflict is a new one. */
  retried(pid: number, p: string): void {
    if (this.conflictRetries.size > 0) this.conflictRetries.delete(`${pid}\0${p}`);
  }
}

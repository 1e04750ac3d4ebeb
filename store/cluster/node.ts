/**
 * A node of a cluster: its lease on its node name (renewed by the heartbeat, which also carries its
 * figures, the reclaims and replica requests other nodes leave it), the names it last saw and the
 * changes other nodes make to them, commits with global dedup, replicas of other nodes' pins, and
 * where its own blocks lie on the shared tier.
 */
import * as crypto from 'node:crypto';
import * as os from 'node:os';
import * as path from 'node:path';
import { LruMap } from '../policy/lru-map';
import type { StoreCore } from '../core';
import type { DramCache } from '../dram-cache';
import { CascadeError, isCascadeError } from '../errors';
import type { BlockPlacement, ChangeListener, ClusterDirectory, NameChange, VersionRecord } from '../meta';
import { DiskSegmentTier } from '../tiers/disk';
import type { NodeFigures } from '../types';
import type { ClusterConfig, PeerCopies } from './copies';

/** A cluster node's lease in the directory: renewed every NODE_HEARTBEAT_MS, lost NODE_LEASE_MS after. */
const NODE_LEASE_MS = 15_000;
const NODE_HEARTBEAT_MS = 5_000;
/** Block places recorded at once (at open, after compaction, after the flusher; each one round trip). */
const PLACE_CONCURRENCY = 64;
/** Released blocks a node drops per heartbeat (a release elsewhere names this node's copies). */
const RECLAIM_BATCH = 4096;
/** Names whose current version a cluster node remembers for opens while Redis is away. */
const LAST_KNOWN_NAMES = 65_536;
/** Replica requests a node takes per heartbeat. */
const REPLICA_BATCH = 64;
/** How long an fsync here waits for another node's block to reach the shared tier (placesAfterCommit). */
const PLACED_ELSEWHERE_WAIT_MS = 10_000;

/** What the node asks of the rest of the store, given once the parts exist. */
export interface ClusterNodeParts {
  dramCache: DramCache;
  copies: PeerCopies;
  /** Remove content whose last reference went (Store's reclamation). */
  reclaim(released: string[]): Promise<void>;
  /** This node's figures for the directory. */
  figures(): NodeFigures;
}

/**
 * Take the node name's lease for a new daemon (its token: host:pid:random). Two daemons with one node
 * name would append to one set of segments: the second is refused, unless the holder is a process of
 * this host that no longer runs (a daemon killed with -9).
 */
export async function joinCluster(c: ClusterConfig): Promise<string> {
  const token = `${os.hostname()}:${process.pid}:${crypto.randomBytes(6).toString('hex')}`;
  if (!(await c.directory.joinNode(c.node, token, NODE_LEASE_MS, await deadHolder(c.directory, c.node)))) {
    const holder = await c.directory.nodeHolder(c.node);
    throw new CascadeError('EBUSY', `node name ${c.node} is in use by another running daemon of this cluster (${holder ?? 'lease just expired'}); pick another --node`);
  }
  return token;
}

export class ClusterNode {
  private heartbeat: NodeJS.Timeout | undefined;
  /**
   * Another daemon took this node's name (after this one missed heartbeats for the whole lease). Its
   * segments are that daemon's now: this one refuses writes from then on.
   */
  private leaseLost = false;
  /** The current version of names this node last saw, for opens while Redis is away. */
  private readonly lastKnown = new LruMap<string, VersionRecord>(LAST_KNOWN_NAMES);
  /** Who hears of other nodes' changes to names (watchNames), and how this node stops hearing them. */
  private readonly changeListeners = new Set<ChangeListener>();
  private stopWatching: (() => Promise<void>) | undefined;
  /**
   * Current versions read from Redis while the change feed runs, with no change to any name heard
   * between the request and its reply (`changeSeq`): an open right after a lookup takes the version
   * from here instead of asking again. Every change heard drops its names; a reset drops all.
   */
  private readonly fresh = new LruMap<string, VersionRecord>(LAST_KNOWN_NAMES);
  /** Changes (and resets) heard so far. */
  private changeSeq = 0;
  /** Content pinned here as the second DRAM copy of another node's pin. */
  private readonly replicas = new Set<string>();
  private parts!: ClusterNodeParts;

  constructor(
    private readonly core: StoreCore,
    private readonly c: ClusterConfig,
    /** This process's lease token for its node name (joinCluster). */
    private readonly token: string,
  ) {}

  get node(): string {
    return this.c.node;
  }

  private get copies(): PeerCopies {
    return this.parts.copies;
  }

  /** Given once, before the node is used. */
  wire(parts: ClusterNodeParts): void {
    this.parts = parts;
  }

  /** Start hearing other nodes' changes (when the directory has a change feed). */
  async watch(): Promise<void> {
    this.stopWatching = await this.c.directory.watchChanges({ change: (c) => this.changedElsewhere(c), reset: () => this.changesMissed() });
  }

  /** Stop the heartbeat (the store closes). */
  stopHeartbeat(): void {
    clearInterval(this.heartbeat);
  }

  /** Give the node name back and stop hearing changes: the last step before the metadata closes. */
  async leave(): Promise<void> {
    await this.c.directory.leaveNode(this.c.node, this.token).catch((e: unknown) => this.core.warn(`leaving the cluster: ${String(e)}`));
    await this.stopWatching?.().catch((e: unknown) => this.core.warn(`stopping the watch of changes: ${String(e)}`));
  }

  /**
   * Whether a commit goes ahead of the block's shared-tier write: with the remote tier on, the commit
   * names this node as the DRAM holder and other nodes fetch the block from here, so close() waits
   * for Redis only; the flusher writes the block to the segments afterwards and records its place
   * once it is fdatasynced (fsync() waits for both). Without the remote tier the segments are the
   * only way another node can read it, so the block is written there before the commit.
   */
  get placesAfterCommit(): boolean {
    return this.copies.remote !== undefined;
  }

  /**
   * Record where these blocks, just fdatasynced in this node's segments, lie (placesAfterCommit);
   * until it returns they do not count as durable, so
   * the DRAM copy other nodes fetch stays until they can read the segments instead. EIO when Redis
   * cannot be reached (the flusher, or the fsync, tries again). A block released meanwhile is refused
   * by the script (its row is gone).
   */
  async recordPlaces(keys: string[]): Promise<void> {
    if (!this.placesAfterCommit) return; // each commit recorded its block's place
    try {
      await this.publishPlaces(keys);
    } catch (e) {
      // A clean close goes on: the next open republishes the places of every block in the segments.
      if (!this.core.closing) throw e;
      this.core.warn(`node ${this.c.node}: recording where ${keys.length} block(s) lie at close: ${String(e)}`);
    }
  }

  /**
   * fsync of a name whose content another node stores: return once that content has a place on the
   * shared tier (its writer's append follows its commit); EIO after PLACED_ELSEWHERE_WAIT_MS.
   */
  async placedElsewhere(name: string, sha: string): Promise<void> {
    if ((await this.copies.locateWaiting(sha, PLACED_ELSEWHERE_WAIT_MS, false)).length > 0) return;
    throw new CascadeError('EIO', `content of ${name} is not on the shared tier: the node that wrote it has not stored it there within ${PLACED_ELSEWHERE_WAIT_MS} ms`);
  }


  /** A name changed here (removed, renamed away): forget what was known of it. */
  forgetName(name: string): void {
    this.lastKnown.delete(name);
    this.fresh.delete(name);
  }

  /** Changes heard so far: taken before a request whose reply knowName() is given. */
  get changesHeard(): number {
    return this.changeSeq;
  }

  /**
   * A name's current version, as this node just made it, read it or heard it (the request sent when
   * changesHeard was `seqAsked`): the next open here takes it without asking Redis, unless a change
   * came in meanwhile (another node's newer commit may have been heard before this reply).
   */
  knowName(name: string, v: VersionRecord, seqAsked: number): void {
    this.lastKnown.set(name, v);
    if (this.stopWatching !== undefined && this.changeSeq === seqAsked) this.fresh.set(name, v);
    else this.fresh.delete(name);
  }

  /**
   * The current version of a name. While Redis cannot be reached, the version this node last saw
   * (read or committed here) when its content is on this node: local reads keep working; a name this
   * node never saw, or whose content it lacks, fails with EIO.
   */
  async current(name: string): Promise<VersionRecord | undefined> {
    const known = this.stopWatching !== undefined ? this.fresh.get(name) : undefined;
    if (known !== undefined) return known;
    const seq = this.changeSeq;
    try {
      let v: VersionRecord | undefined;
      if (this.copies.remote) {
        // The holders of its content come in the same round trip: a read of content this node lacks
        // then fetches it from a peer's DRAM without asking Redis again.
        const r = await this.c.directory.currentWithHolders(name);
        v = r.version;
        this.learned(name, v, r.dramHolders, seq);
      } else {
        v = await this.core.meta.current(name);
        this.learned(name, v, [], seq);
      }
      return v;
    } catch (e) {
      return this.offlineVersion(name, e);
    }
  }

  /** Store.lookup in a cluster: one round trip; while Redis is away, as current(). */
  async lookup(name: string): Promise<{ version?: VersionRecord; dir: boolean; dirMode?: number }> {
    const seq = this.changeSeq;
    try {
      const r = await this.c.directory.lookupName(name);
      this.learned(name, r.version, r.dramHolders, seq);
      return { version: r.version, dir: r.dir, dirMode: r.dirMode };
    } catch (e) {
      return { version: this.offlineVersion(name, e), dir: false };
    }
  }

  /**
   * What Redis just said of a name (asked when changeSeq was `seqAsked`): its version for opens while
   * Redis is away and for the opens that follow (`fresh`), and its content's DRAM holders for a fetch.
   */
  private learned(name: string, v: VersionRecord | undefined, dramHolders: readonly string[], seqAsked: number): void {
    if (v === undefined) return this.forgetName(name);
    const remote = this.copies.remote;
    if (remote && !this.core.dram.has(v.sha256)) remote.noteHolders(v.sha256, dramHolders);
    this.knowName(name, v, seqAsked);
  }

  /** Whether a peer holds this content in DRAM (where a read would fetch it from) and this node does not. */
  async inPeerDram(sha: string): Promise<boolean> {
    if (!this.copies.remote || this.core.dram.has(sha) || this.core.disk.has(sha)) return false;
    const holders = await this.c.directory.dramHolders(sha).catch(() => []);
    return holders.some((n) => n !== this.c.node);
  }

  /** Whether any node pinned this content (the shared row is what counts). */
  async pinnedAnywhere(sha: string): Promise<boolean> {
    return (await this.core.meta.block(sha))?.pinned === true;
  }

  /** A pin here ended: it is no longer a replica either. */
  unpinned(sha: string): void {
    this.replicas.delete(sha);
  }

  /** The content was reclaimed. */
  forget(sha: string): void {
    this.replicas.delete(sha);
    this.copies.forget(sha);
  }

  /**
   * Commit content as a new version of `name`, under the content's lock. Content some node already
   * stores on the shared tier is referenced (global dedup), else `ingest` stores it on this node
   * first: a commit needs a durable copy (another node's copy, or a DRAM copy of it, may be reclaimed
   * by a concurrent release; content only in its writer's DRAM is not durable yet).
   */
  async commit(name: string, sha: string, sizeBytes: number, ino: number | undefined, ingest: () => Promise<void>): Promise<VersionRecord> {
    if (this.leaseLost) throw new CascadeError('EIO', `node ${this.c.node}: another daemon holds this node name now; this daemon no longer writes`);
    const core = this.core;
    const c = this.c;
    const seq = this.changeSeq;
    const result = await core.locks.with(sha, async () => {
      if (!core.disk.has(sha)) {
        // The check and the new reference are one Redis step, so a concurrent release cannot slip between.
        try {
          const known = await c.directory.commitPlaced(name, sha, sizeBytes, core.now(), core.keepVersions, ino, undefined, true);
          core.counters.dedupHits++;
          core.counters.dedupSavedBytes += sizeBytes;
          return known;
        } catch (e) {
          if (!isCascadeError(e, 'ENOENT')) throw e;
        }
        await ingest();
      } else {
        core.counters.dedupHits++;
        core.counters.dedupSavedBytes += sizeBytes;
      }
      // Committed together with where this node holds the content, so a reader on another node never
      // finds the version without a place to read it: its place on the shared tier when it is written
      // there already, and with the remote tier on its DRAM copy, which readers fetch at once (a new
      // block's shared-tier place is recorded after the flusher writes it: placesAfterCommit).
      const inDram = this.copies.remote !== undefined && core.dram.has(sha) && !this.copies.isBorrowed(sha);
      return c.directory.commitPlaced(name, sha, sizeBytes, core.now(), core.keepVersions, ino, this.placement(sha), false, inDram ? c.node : undefined);
    });
    this.knowName(name, result.version, seq);
    await this.parts.reclaim(result.released);
    return result.version;
  }

  /**
   * Hear of every change other nodes make to names and directories (cluster mode), as Redis applies
   * it, and `reset` when some may have been missed. Returns a function that stops it.
   */
  watchNames(listener: ChangeListener): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  /** Whether watchNames() hears other nodes' changes (a cluster node whose watch is running). */
  get namesWatched(): boolean {
    return this.stopWatching !== undefined;
  }

  private changedElsewhere(c: NameChange): void {
    this.changeSeq++;
    this.forgetName(c.name);
    if (c.kind === 'renamed') this.forgetName(c.to);
    // A commit's message carries the version it made: changes come in the order Redis applied them,
    // so until the next one for the name it is the current version, as a lookup would have read it.
    // The first open of another node's new block then asks Redis nothing.
    const v = c.kind === 'file' || c.kind === 'renamed' ? c.version : undefined;
    if (v !== undefined) {
      this.knowName(v.name, v, this.changeSeq);
      const remote = this.copies.remote;
      if (c.kind === 'file' && c.dramHolder !== undefined && remote && !this.core.dram.has(v.sha256)) remote.noteHolders(v.sha256, [c.dramHolder], 'feed');
    }
    this.tellListeners((l) => l.change(c));
  }

  private changesMissed(): void {
    this.core.warn('the watch of other nodes\' changes reconnected: cached names are dropped');
    this.changeSeq++;
    this.lastKnown.clear();
    this.fresh.clear();
    this.tellListeners((l) => l.reset());
  }

  private tellListeners(f: (l: ChangeListener) => void): void {
    for (const l of this.changeListeners) {
      try {
        f(l);
      } catch (e) {
        this.core.warn(`a listener of name changes failed: ${String(e)}`);
      }
    }
  }

  /** Redis away (EIO): the version this node last saw of `name`, when its content is here; else `e`. */
  private offlineVersion(name: string, e: unknown): VersionRecord {
    const known = isCascadeError(e, 'EIO') ? this.lastKnown.get(name) : undefined;
    if (known === undefined || (!this.core.dram.has(known.sha256) && !this.core.disk.has(known.sha256))) throw e;
    this.core.counters.offlineResolves++;
    return known;
  }

  /** Cluster: ask one other live node (one that holds the content in DRAM already, if any) to pin a copy. */
  async askReplica(sha: string): Promise<void> {
    const c = this.c;
    const live = (await c.directory.liveNodes()).filter((n) => n !== c.node);
    if (live.length === 0) return; // a one-node cluster: one copy is all there can be
    const holders = new Set(await c.directory.dramHolders(sha));
    const warm = live.filter((n) => holders.has(n));
    const pool = warm.length > 0 ? warm : live;
    await c.directory.requestReplica(pool[Math.floor(Math.random() * pool.length)], sha);
  }

  /** Cluster, each heartbeat: pin the copies other nodes asked for; let go of those no longer pinned. */
  async tendReplicas(): Promise<void> {
    const c = this.c;
    for (const sha of await c.directory.takeReplicaRequests(c.node, REPLICA_BATCH)) {
      const row = await this.core.meta.block(sha);
      if (row?.pinned !== true || this.core.closing) continue;
      await this.core.locks.with(sha, async () => {
        if (this.core.pinned.has(sha)) return;
        if (this.core.pinnedBytes + row.sizeBytes > this.core.pinQuotaBytes) {
          this.core.warn(`no replica of pinned ${sha} here: ${row.sizeBytes} bytes would exceed this node's pin quota (${this.core.pinnedBytes} of ${this.core.pinQuotaBytes})`);
          return;
        }
        this.core.pinLocally(sha, row.sizeBytes); // first: a pinned block is never a victim while it loads
        this.replicas.add(sha);
        try {
          await this.parts.dramCache.ensureInDram(sha, row.sizeBytes);
        } catch (e) {
          this.core.unpinLocally(sha);
          throw e;
        }
      });
    }
    for (const sha of [...this.replicas]) {
      const row = await this.core.meta.block(sha);
      if (row?.pinned === true) continue;
      await this.core.locks.with(sha, async () => {
        if (this.replicas.delete(sha)) this.core.unpinLocally(sha);
      });
    }
  }

  /** Where this node holds a block on the shared tier, as the directory records it. */
  placement(sha: string): BlockPlacement | undefined {
    const c = this.c;
    const loc = this.core.disk instanceof DiskSegmentTier ? this.core.disk.locate(sha) : undefined;
    if (!loc) return undefined;
    return { node: c.node, file: path.relative(c.sharedDir, loc.file), offsetBytes: loc.offsetBytes, sizeBytes: loc.sizeBytes };
  }

  /** Cluster mode: record the current places of these blocks (after compaction moved them). */
  republish(keys: string[]): void {
    this.publishPlaces(keys).catch((e: unknown) => this.core.warn(`publishing block places: ${String(e)}`));
  }

  /** Record where these blocks lie on the shared tier, PLACE_CONCURRENCY script calls at a time. */
  private async publishPlaces(keys: string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += PLACE_CONCURRENCY) {
      await Promise.all(
        keys.slice(i, i + PLACE_CONCURRENCY).map(async (k) => {
          const p = this.placement(k);
          if (p) await this.c.directory.placeBlock(k, p);
        }),
      );
    }
  }


  startHeartbeat(): void {
    const c = this.c;
    const beat = () =>
      c.directory.joinNode(c.node, this.token, NODE_LEASE_MS).then(
        async (ok) => {
          if (!ok) {
            if (!this.leaseLost) this.core.warn(`node ${c.node}: another daemon took this node name (this one missed its heartbeats for ${NODE_LEASE_MS} ms); writes are refused from now on: unmount and restart under another --node`);
            this.leaseLost = true;
            return;
          }
          await c.directory.publishNodeStats(c.node, JSON.stringify(this.parts.figures()), NODE_LEASE_MS);
          // Copies of content another node released: reclaim() keeps any that was stored again.
          const released = await c.directory.takeReclaims(c.node, RECLAIM_BATCH);
          if (released.length > 0 && !this.core.closing) await this.parts.reclaim(released);
          if (!this.core.closing) await this.tendReplicas();
        },
        (e: unknown) => this.core.warn(`node ${c.node}: heartbeat failed: ${String(e)}`),
      ).catch((e: unknown) => this.core.warn(`node ${c.node}: publishing its figures failed: ${String(e)}`));
    let beating = false; // a slow beat (a long reclaim) is not overlapped by the next
    const once = () => {
      if (beating) return;
      beating = true;
      void beat().finally(() => (beating = false));
    };
    once();
    this.heartbeat = setInterval(once, NODE_HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /**
   * Store.open's reconcile for a cluster node, in O(this node's blocks + the pins), not O(the cluster's blocks):
   * its own segments' blocks that nothing references any more go; pinned content is loaded into DRAM.
   * Content the node lacks is other nodes' (on the shared tier), not lost.
   */
  async reconcile(): Promise<void> {
    const directory = this.c.directory;
    const own = this.core.disk.scan().map((e) => e.key);
    const rows = await directory.blockRows(own);
    for (let i = 0; i < own.length; i++) {
      if (rows[i] !== undefined) continue;
      await this.core.disk.delete(own[i]);
      this.core.counters.orphanBlocksRemoved++;
    }
    // Where this node holds blocks on the shared tier, for the directory (its places may have been
    // dropped while it was away, or moved by compaction at open).
    this.republish(this.core.disk.scan().map((e) => e.key));
    const inDram = this.core.dram.scan().map((e) => e.key); // empty for a fresh arena; a test may inject one
    const dramRows = await directory.blockRows(inDram);
    for (let i = 0; i < inDram.length; i++) {
      if (dramRows[i] !== undefined) this.core.admit(inDram[i]);
      else await this.core.dram.delete(inDram[i]);
    }
    // Pins made before the pinned set existed (an older namespace): read every row once.
    const pinnedRows = await directory.pinnedBlocks();
    const legacy = pinnedRows.length === 0 && (await this.core.meta.totals()).pinnedBytes > 0;
    for (const row of legacy ? (await this.core.meta.blocks()).filter((r) => r.pinned) : pinnedRows) this.core.pinLocally(row.sha256, row.sizeBytes);
    for (const [sha, size] of this.core.pinned) await this.parts.dramCache.ensureInDram(sha, size);
  }
}

/** The lease token of `node` when it belongs to a process of this host that is gone, else undefined. */
async function deadHolder(directory: ClusterDirectory, node: string): Promise<string | undefined> {
  const holder = await directory.nodeHolder(node);
  const m = holder === undefined ? null : /^(.*):(\d+):[0-9a-f]+$/.exec(holder);
  if (!m || m[1] !== os.hostname()) return undefined;
  try {
    process.kill(Number(m[2]), 0);
    return undefined; // alive (or not ours to signal): keep out
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ESRCH' ? holder : undefined;
  }
}

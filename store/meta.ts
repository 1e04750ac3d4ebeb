/**
 * The metadata engine: names -> versions -> content, and the block table (content -> size, refcount,
 * pin). Every mutation is one atomic transaction. Methods are async so that a networked engine
 * (Redis, for many nodes) fits the same interface. Every implementation passes
 * test/store/meta-conformance.
 */

export interface VersionRecord {
  /** `<model>/<path...>`, validated by store/names.ts before it reaches an engine. */
  name: string;
  /** 1 for the first version of a name; +1 per commit; restarts at 1 after remove(). */
  version: number;
  sha256: string;
  sizeBytes: number;
  /** Commit time, ms since the epoch; never decreases along one name's versions. */
  timeMs: number;
  /**
   * The inode number of the file this version belongs to: kept by a rewrite of the name and carried
   * by a rename; a name removed and created again is a new file with a new number. Numbers come from
   * allocateInodes() and are never handed out twice.
   */
  ino: number;
}

export interface BlockRecord {
  sha256: string;
  sizeBytes: number;
  /** Retained versions (of any name) that reference this content. A row exists only while refs > 0. */
  refs: number;
  pinned: boolean;
}

export interface CommitResult {
  version: VersionRecord;
  /** Content whose last reference went away in this transaction (its block row is gone). */
  released: string[];
}

export interface MetaTotals {
  names: number;
  versions: number;
  blocks: number;
  /** Sum of sizes of distinct content (what is stored). */
  uniqueBytes: number;
  /** Sum of sizes over all retained versions (what would be stored without dedup). */
  logicalBytes: number;
  pinnedBytes: number;
}

export interface ListOptions {
  /** Return names strictly greater than this (paging cursor). */
  after?: string;
  /** At most this many names (the caller bounds it by LIST_PAGE_MAX). */
  limit: number;
}

export interface MetaEngine {
  readonly kind: string;

  current(name: string): Promise<VersionRecord | undefined>;
  version(name: string, version: number): Promise<VersionRecord | undefined>;
  /** The version current at `timeMs`: the newest retained one whose timeMs <= the given time. */
  versionAt(name: string, timeMs: number): Promise<VersionRecord | undefined>;
  /** Retained versions of a name, oldest first; empty when the name does not exist. */
  versions(name: string): Promise<VersionRecord[]>;

  /**
   * Atomically add a version of `name` referencing `sha256` (creating the block row with refs 1, or
   * incrementing refs), then trim the name's versions to the newest `keepVersions`. timeMs is raised to
   * the previous version's timeMs if it is smaller. A sha256 already known with another size is a bug
   * in the caller (assert). The version's `ino` is `ino` when given (a number from allocateInodes(), or
   * the ino of a file being renamed onto this name), else the current version's, else a fresh one.
   */
  commit(name: string, sha256: string, sizeBytes: number, timeMs: number, keepVersions: number, ino?: number): Promise<CommitResult>;
  /** Atomically remove a name and all its versions. ENOENT if the name does not exist. */
  remove(name: string): Promise<{ released: string[] }>;
  /**
   * Atomically: commit `from`'s current content as a new version of `to` (as commit() does, with
   * `from`'s ino: the file moves), and remove `from` with all its versions. ENOENT if `from` does not
   * exist. from === to is a no-op returning the current version.
   */
  rename(from: string, to: string, timeMs: number, keepVersions: number): Promise<CommitResult>;
  /**
   * Reserve `count` inode numbers (1..INODE_RESERVE_MAX) that no earlier call returned, also across
   * restarts: returns the first; the range is [first, first + count). Durable with the next sync().
   */
  allocateInodes(count: number): Promise<number>;
  /** Names that start with `prefix`, ascending by UTF-8 byte order / JS string order. */
  list(prefix: string, options: ListOptions): Promise<string[]>;

  /**
   * A name's permission bits (0..0o7777), as chmod set them: kept by commits, carried by rename (the
   * target takes the source's, or none), gone with remove. ENOENT if the name does not exist.
   */
  setMode(name: string, mode: number): Promise<void>;
  /** Names with a mode set, ascending (as list()), with their modes; names without one are 0644. */
  modes(options: ListOptions): Promise<Array<[string, number]>>;

  /**
   * Directories made by mkdir, kept so that an empty one survives a restart and is seen by every node
   * of a cluster (a directory that holds names exists through them as well). makeDir keeps `mode`
   * (0..0o7777; an existing record takes the new mode), removeDir forgets the record (none: no error).
   * Neither checks the names under it: emptiness is the filesystem's rule, not the engine's.
   */
  makeDir(name: string, mode: number): Promise<void>;
  removeDir(name: string): Promise<void>;
  /** The mode of a directory made by makeDir, or undefined. */
  dirMode(name: string): Promise<number | undefined>;
  /** Directories made by makeDir that start with `prefix`, ascending as list(), with their modes. */
  dirs(prefix: string, options: ListOptions): Promise<Array<[string, number]>>;

  block(sha256: string): Promise<BlockRecord | undefined>;
  /** ENOENT if no such block row. */
  setPinned(sha256: string, pinned: boolean): Promise<void>;
  /** Every block row (for reconciliation at open). */
  blocks(): Promise<BlockRecord[]>;
  /**
   * Recovery: remove every version that references `sha256` (content that was lost in a crash before it
   * reached disk) and the block row. Returns how many versions went.
   */
  forget(sha256: string): Promise<{ removedVersions: number }>;
  totals(): Promise<MetaTotals>;

  /** Return only when every committed transaction is durable. */
  sync(): Promise<void>;
  close(): Promise<void>;
}

// ---- cluster mode (store/meta/redis.ts implements both interfaces) ----

/**
 * A change another node made to the namespace (ClusterDirectory.watchChanges): a file's content or
 * mode (`file`), a file removed, a file renamed (`name` to `to`), a directory made or removed. Changes
 * come in the order the directory applied them.
 */
export type NameChange =
  | { kind: 'removed' | 'dirMade' | 'dirRemoved'; name: string }
  /**
   * version: the name's new current version when the change made one (a commit; not a mode change);
   * dramHolder: the node that holds its content in DRAM, when the commit said so.
   */
  | { kind: 'file'; name: string; version?: VersionRecord; dramHolder?: string }
  /** version: the new current version of `to`. */
  | { kind: 'renamed'; name: string; to: string; version?: VersionRecord };

/** What a path is: a file (its current version), a directory (made by mkdir: its mode), or neither. */
export interface NameLookup {
  version: VersionRecord | undefined;
  dir: boolean;
  dirMode?: number;
  /** A file's: the nodes that say they hold its content in DRAM. */
  dramHolders: string[];
}

/** What watchChanges calls: each change, and `reset` when changes may have been missed (a reconnect). */
export interface ChangeListener {
  change(c: NameChange): void;
  reset(): void;
}

/** Where one node holds a block on the shared tier. */
export interface BlockPlacement {
  node: string;
  /** Relative to the shared directory. */
  file: string;
  offsetBytes: number;
  sizeBytes: number;
}

/** What cluster nodes share beside the metadata: where blocks lie, and who is alive. */
export interface ClusterDirectory {
  /**
   * MetaEngine.commit plus, atomically, where this node holds the content. knownOnly: commit only if
   * some node already stores the content on the shared tier (ENOENT otherwise, nothing changed): a put
   * that moves no bytes.
   */
  commitPlaced(
    name: string,
    sha256: string,
    sizeBytes: number,
    timeMs: number,
    keepVersions: number,
    ino: number | undefined,
    placement: BlockPlacement | undefined,
    knownOnly?: boolean,
    /** This node keeps the content in DRAM: recorded with the commit, so readers can fetch it at once. */
    dramHolder?: string,
  ): Promise<CommitResult>;
  /**
   * Which nodes hold which content in DRAM (for remote reads): a hint, applied in order. A block's
   * members go with its block row.
   */
  advertiseDram(changes: ReadonlyArray<{ sha256: string; node: string; held: boolean }>): Promise<void>;
  /** Nodes that said they hold the content in DRAM (possibly stale: ask them). */
  dramHolders(sha256: string): Promise<string[]>;
  /** What a path is (a file's current version, a directory), in one round trip, with the file's dramHolders. */
  lookupName(name: string): Promise<NameLookup>;
  /** MetaEngine.current and the dramHolders of its content, in one round trip (a remote read needs both). */
  currentWithHolders(name: string): Promise<{ version: VersionRecord | undefined; dramHolders: string[] }>;
  /** Block rows of these contents, in order (one round trip per batch): undefined where there is none. */
  blockRows(shas: readonly string[]): Promise<Array<BlockRecord | undefined>>;
  /** Every pinned block row (a node loads them at start without reading every row of the cluster). */
  pinnedBlocks(): Promise<BlockRecord[]>;
  /** Ask `node` to keep a DRAM copy of pinned content (a second copy of a pin, cluster-wide). */
  requestReplica(node: string, sha256: string): Promise<void>;
  /** Replica requests for this node, at most `max`, taken off its queue. */
  takeReplicaRequests(node: string, max: number): Promise<string[]>;
  /** Record a copy of existing content (after compaction moved it, or at a node's restart). */
  placeBlock(sha256: string, placement: BlockPlacement): Promise<void>;
  unplaceBlock(sha256: string, node: string): Promise<void>;
  locate(sha256: string): Promise<BlockPlacement[]>;
  /**
   * Take (or renew) the node's lease; false when another process holds that node name. `replacing`:
   * the token of a holder known to be dead (this host's process that no longer runs), taken over.
   */
  joinNode(node: string, token: string, ttlMs: number, replacing?: string): Promise<boolean>;
  /** The token holding the node's lease, if any. */
  nodeHolder(node: string): Promise<string | undefined>;
  leaveNode(node: string, token: string): Promise<void>;
  /** Nodes whose lease is current. */
  liveNodes(): Promise<string[]>;
  /**
   * Released content this node held a copy of (the release named every holder), at most `max`, taken
   * off the node's queue: the node drops its copies unless the content was stored again meanwhile.
   */
  takeReclaims(node: string, max: number): Promise<string[]>;
  /** A node's figures (JSON), kept for ttlMs: refreshed with each heartbeat. */
  publishNodeStats(node: string, statsJson: string, ttlMs: number): Promise<void>;
  /** Every node that ever joined: live or not, and its last published figures (parsed JSON). */
  /**
   * Every change other clients of this directory make to names and directories, told as it is applied
   * (before the writer's call returns to it). Returns a function that stops watching, or undefined
   * where changes cannot be told that soon (then nothing is told).
   */
  watchChanges(listener: ChangeListener): Promise<(() => Promise<void>) | undefined>;
  nodeStats(): Promise<Array<{ node: string; live: boolean; stats: unknown }>>;
}

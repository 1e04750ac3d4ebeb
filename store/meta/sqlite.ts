/**
 * SqliteMeta: the metadata engine for one node, on better-sqlite3.
 *
 * Durability: WAL journal with synchronous=NORMAL. A commit appends to the WAL without fsync, so it
 * survives a crash of the process (kill -9: the WAL pages are in the OS page cache) but not a power
 * loss; sync() makes every earlier commit durable against power loss too (see there).
 *
 * Group commit (`groupCommitMs`; by default GROUP_COMMIT_DELAY_MS with a journal, off without one):
 * new versions (`commit`, a close), inode reservations and, with a journal, renames and removals run
 * as savepoints inside one open transaction that commits `groupCommitMs` after its first mutation, at
 * GROUP_COMMIT_MAX_MUTATIONS, at sync()/close()/snapshot, or with the next mutation of any other kind.
 * Reads on this connection (the only one: exclusive locking) see every mutation at once; a failing
 * mutation rolls back only its savepoint. Without a journal a crash of the process loses at most the
 * open group, i.e. versions closed but not fsynced, which the contract does not promise (fsync calls
 * sync()); every other mutation commits before it returns, with the group: a rename of an fsynced
 * file, an unlink, a pin survive kill -9 once they return, as with one commit each. One commit
 * of a small create alone appends ~8 WAL pages (four b-trees); a group shares them, which was most of
 * a create's metadata cost. With a journal nothing is lost even then: each grouped mutation is
 * journaled before it returns and the next open applies the journal's entries past the database
 * (replayJournal), so every close, rename and unlink that returned survives a crash of the process,
 * grouped or not.
 * Without a journal the open group is lost with the process, and a block shared by several names can
 * then stay for some of them and go for others (the model test found it): off there.
 *
 * Locking: EXCLUSIVE locking mode. The totals are kept in this process and every mutation is assumed to
 * come from here, so a second process (or a second mount) on the same file must not write; it gets
 * EBUSY at open instead. In exclusive WAL mode SQLite also needs no -shm file.
 *
 * Journal (optional, `journalDir`): every committed mutation is also appended to the metadata journal
 * (store/meta/journal.ts) with a sequence number that the same transaction stores in the database
 * (`journal_seq`), so a snapshot (snapshotTo) plus the entries after its number rebuild the database
 * exactly when it is lost (`cascade fsck --repair`).
 *
 * Order: names compare with the BINARY collation, i.e. memcmp of UTF-8 = code point order, the order of
 * compareNames() in memory.ts (which differs from JS `<` only for characters above U+FFFF).
 */
import Database from 'better-sqlite3';
import { INODE_FIRST_ALLOCATED } from '../constants';
import { assert, CascadeError } from '../errors';
import type { BlockRecord, CommitResult, ListOptions, MetaEngine, MetaTotals, VersionRecord } from '../meta';
import {
  advanceInodes,
  checkCommitArgs,
  checkIno,
  checkInodeCount,
  checkKeepVersions,
  checkListArgs,
  checkMode,
  checkName,
  checkTimeMs,
  closedError,
  compareNames,
  prefixUpperBound,
} from './memory';
import { DIRS_SCHEMA, mapError, prepareStatements, SCHEMA, toBlock, toVersion, type BlockRow, type Statements, type VersionRow } from './sqlite-schema';
import { entriesAfter, JournalWriter, type JournalEntry, type JournalOp, type JournalReads } from './journal';

/** Bump when the schema changes; a database with a newer one is refused (an older binary must not write it). */
const SCHEMA_VERSION = 4;
/** How long a statement waits for a lock held by another connection before EBUSY. */
const BUSY_TIMEOUT_MS = 1000;
/**
 * WAL checkpoints. SQLite's default checkpoints every 1,000 pages, on the commit that crosses them; each
 * one fsyncs the WAL and the database, and on this project's VM that was most of a small commit's cost
 * (a create's commit: 154 us mean against 55 us median, stalls of 12-20 ms at p99.9). Checkpoints now
 * run when the daemon is idle (WAL_IDLE_CHECKPOINT_MS after the last change), and on a commit only once
 * the WAL holds WAL_CHECKPOINT_PAGES, which bounds the WAL (and the time to read it at the next open).
 */
const WAL_CHECKPOINT_PAGES = 8192;
const WAL_IDLE_CHECKPOINT_MS = 500;
/** The WAL file is cut back to this size after a checkpoint that emptied it (a burst may grow it past). */
const WAL_SIZE_LIMIT_BYTES = 32 * 1024 * 1024;
/** Group commit: the default window with a journal (see the header; `--meta-group-commit-ms`), and the group's bound. */
export const GROUP_COMMIT_DELAY_MS = 4;
/** The longest window accepted: a group stays a moment of closes (without a journal, what a kill -9 may lose). */
export const GROUP_COMMIT_MAX_MS = 1000;
const GROUP_COMMIT_MAX_MUTATIONS = 256;
/** The mutations that may wait in the group (see the header); any other commits it. */
const GROUPED_OPS: ReadonlySet<JournalOp['op']> = new Set(['commit', 'allocateInodes']);
/** And these with a journal, which replays them after a crash (without one, a rename that returned must survive). */
const JOURNALED_GROUPED_OPS: ReadonlySet<JournalOp['op']> = new Set(['rename', 'remove']);


export interface SqliteMetaOptions {
  /** Append every mutation to the metadata journal in this directory (see the header). */
  journalDir?: string;
  /**
   * Group commit window (see the header); 0 commits every mutation on its own. Default:
   * GROUP_COMMIT_DELAY_MS with a journalDir, 0 without (the journal is what makes a group crash-safe).
   */
  groupCommitMs?: number;
}

/** What fsck finds wrong with the reference counts (each list bounded by the caller's limit). */
export interface RefProblems {
  /** Content whose block row says `refs` but `counted` retained versions reference it (refs null: no row). */
  mismatched: Array<{ sha256: string; refs: number | null; counted: number }>;
  /** Block rows that no version references. */
  unreferenced: string[];
  total: number;
}

export class SqliteMeta implements MetaEngine {
  readonly kind = 'sqlite';
  private readonly db: Database.Database;
  private closed = false;
  /** A transaction committed since the last sync(). */
  private dirty = false;
  /** Kept here rather than aggregated per call (statfs asks often); recomputed from the tables at open. */
  private counts: MetaTotals;

  private readonly txn: Database.Transaction<(body: () => unknown) => unknown>;
  private readonly stmt: Statements;

  private journal: JournalWriter | undefined;
  private snapshotting = false;
  /** Fires WAL_IDLE_CHECKPOINT_MS after the last change (each change restarts it). */
  private idleCheckpoint: NodeJS.Timeout | undefined;
  /** Checkpoints taken while idle (stats, tests). */
  idleCheckpoints = 0;
  private readonly groupCommitMs: number;
  /**
   * The open group: mutations committed as savepoints, each journaled as it returns; `journalMark` is
   * the journal file's length when the group began (a rolled-back group is cut off it again).
   */
  private group: { mutations: number; journalMark: number; timer: NodeJS.Timeout | undefined } | undefined;
  /** Journal entries the database lacked at open (a crash with a group open), applied then. */
  readonly replayedAtOpen: number = 0;
  /** Set while those are applied: each commits on its own. */
  private replaying = false;
  /** Groups committed (stats, tests). */
  groupCommits = 0;

  static open(path: string, options: SqliteMetaOptions = {}): SqliteMeta {
    return new SqliteMeta(path, options);
  }

  constructor(path: string, options: SqliteMetaOptions = {}) {
    let db: Database.Database | undefined;
    const groupCommitMs = options.groupCommitMs ?? (options.journalDir !== undefined ? GROUP_COMMIT_DELAY_MS : 0);
    if (!Number.isFinite(groupCommitMs) || groupCommitMs < 0 || groupCommitMs > GROUP_COMMIT_MAX_MS) {
      throw new CascadeError('EINVAL', `groupCommitMs must be 0..${GROUP_COMMIT_MAX_MS}, not ${String(options.groupCommitMs)}`);
    }
    this.groupCommitMs = groupCommitMs;
    try {
      db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
      // Exclusive first: it must be set before the first WAL access to avoid the -shm file.
      db.pragma('locking_mode = EXCLUSIVE');
      const mode = db.pragma('journal_mode = WAL', { simple: true });
      if (mode !== 'wal' && path !== ':memory:') throw new CascadeError('EIO', `could not enable WAL on ${path} (got ${String(mode)})`);
      db.pragma('synchronous = NORMAL');
      db.pragma(`wal_autocheckpoint = ${WAL_CHECKPOINT_PAGES}`);
      db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
      const database = db;
      database.transaction(() => SqliteMeta.migrate(database, path)).immediate();
      this.db = db;
      this.txn = db.transaction((body: () => unknown) => body());
      this.stmt = prepareStatements(db);
      this.counts = this.recount();
      if (options.journalDir !== undefined) {
        const reads: JournalReads = new Map();
        this.replayedAtOpen = this.replayJournal(options.journalDir, reads);
        // A new file at every open: the last one may end in a torn entry (kill -9).
        this.journal = new JournalWriter(options.journalDir, this.journalSeq() + 1, reads);
      }
    } catch (e) {
      db?.close();
      throw mapError(e);
    }
  }

  /**
   * Applies the journal's entries beyond the database, in order: the mutations of a group that a crash
   * kept from committing had each been journaled before they returned. One that fails to apply stops
   * the replay (what follows it is cut off the journal by JournalWriter, kept aside as `.beyond-<ms>`).
   */
  private replayJournal(dir: string, reads: JournalReads): number {
    const entries = entriesAfter(dir, this.journalSeq(), reads);
    let applied = 0;
    this.replaying = true;
    try {
      for (const { seq, ...op } of entries) {
        try {
          this.execute(op as JournalOp, seq);
        } catch (e) {
          console.error(`cascade: metadata: journal entry ${seq} (${op.op}) did not apply at open; it and ${entries.length - applied - 1} after it are set aside: ${e instanceof Error ? e.message : String(e)}`);
          break;
        }
        applied++;
      }
    } finally {
      this.replaying = false;
    }
    return applied;
  }

  /** Creates the schema in an empty database, accepts the current one, refuses anything else. */
  private static migrate(db: Database.Database, path: string): void {
    db.exec('CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID');
    const found = db.prepare<[], { value: unknown }>("SELECT value FROM meta WHERE key = 'schema_version'").get();
    if (found === undefined) {
      const others = db.prepare<[], { n: number }>("SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name <> 'meta'").get();
      if ((others?.n ?? 0) > 0) throw new CascadeError('EINVAL', `${path} is not a Cascade metadata database`);
      db.exec(SCHEMA);
      db.prepare("INSERT INTO meta (key, value) VALUES ('schema_version', ?), ('sync_count', 0), ('next_ino', ?), ('journal_seq', 0)").run(
        SCHEMA_VERSION,
        INODE_FIRST_ALLOCATED,
      );
      return;
    }
    // Databases from before the journal: numbering starts now (no schema change, older builds ignore it).
    db.exec("INSERT OR IGNORE INTO meta (key, value) VALUES ('journal_seq', 0)");
    const version = found.value;
    if (typeof version !== 'number' || !Number.isInteger(version)) {
      throw new CascadeError('EINVAL', `${path}: unreadable schema version ${String(version)}`);
    }
    if (version > SCHEMA_VERSION) {
      throw new CascadeError('EINVAL', `${path} has metadata schema ${version}, newer than ${SCHEMA_VERSION} of this build; upgrade Cascade`);
    }
    if (version < 1) throw new CascadeError('EINVAL', `${path}: unknown metadata schema ${version}`);
    if (version === 1) SqliteMeta.migrateFrom1(db);
    if (version <= 2) SqliteMeta.migrateFrom2(db);
    if (version <= 3) SqliteMeta.migrateFrom3(db);
  }

  /** Schema 2 kept no modes: every name is 0644 until chmod. */
  private static migrateFrom2(db: Database.Database): void {
    db.exec('ALTER TABLE names ADD COLUMN mode INTEGER');
    db.prepare("UPDATE meta SET value = 3 WHERE key = 'schema_version'").run();
  }

  /** Schema 3 kept no directories: only those holding names came back after a restart. */
  private static migrateFrom3(db: Database.Database): void {
    db.exec(DIRS_SCHEMA);
    db.prepare("UPDATE meta SET value = 4 WHERE key = 'schema_version'").run();
  }

  /** Schema 1 had no inode numbers: each existing name becomes a file with a fresh one. */
  private static migrateFrom1(db: Database.Database): void {
    db.exec('ALTER TABLE versions ADD COLUMN ino INTEGER NOT NULL DEFAULT 0');
    const names = db.prepare<[], string>('SELECT name FROM names ORDER BY name').pluck().all();
    const setIno = db.prepare<[number, string]>('UPDATE versions SET ino = ? WHERE name = ?');
    let next = INODE_FIRST_ALLOCATED;
    for (const name of names) setIno.run(next++, name);
    db.prepare("INSERT INTO meta (key, value) VALUES ('next_ino', ?)").run(next);
  }

  async current(name: string): Promise<VersionRecord | undefined> {
    return this.guard(() => {
      checkName(name);
      const row = this.stmt.current.get(name);
      return row === undefined ? undefined : toVersion(row);
    });
  }

  async version(name: string, version: number): Promise<VersionRecord | undefined> {
    return this.guard(() => {
      checkName(name);
      const row = this.stmt.version.get(name, version);
      return row === undefined ? undefined : toVersion(row);
    });
  }

  async versionAt(name: string, timeMs: number): Promise<VersionRecord | undefined> {
    return this.guard(() => {
      checkName(name);
      // timeMs never decreases along versions, so the newest with time_ms <= timeMs is the answer.
      const row = this.stmt.versionAt.get(name, timeMs);
      return row === undefined ? undefined : toVersion(row);
    });
  }

  async versions(name: string): Promise<VersionRecord[]> {
    return this.guard(() => {
      checkName(name);
      return this.stmt.versions.all(name).map(toVersion);
    });
  }

  async commit(name: string, sha256: string, sizeBytes: number, timeMs: number, keepVersions: number, ino?: number): Promise<CommitResult> {
    return this.guard(() => this.execute({ op: 'commit', name, sha256, sizeBytes, timeMs, keepVersions, ...(ino === undefined ? {} : { ino }) }) as CommitResult);
  }

  async remove(name: string): Promise<{ released: string[] }> {
    return this.guard(() => this.execute({ op: 'remove', name }) as { released: string[] });
  }

  async rename(from: string, to: string, timeMs: number, keepVersions: number): Promise<CommitResult> {
    return this.guard(() => this.execute({ op: 'rename', from, to, timeMs, keepVersions }) as CommitResult);
  }

  async setMode(name: string, mode: number): Promise<void> {
    return this.guard(() => {
      this.execute({ op: 'setMode', name, mode });
    });
  }

  async modes(options: ListOptions): Promise<Array<[string, number]>> {
    return this.guard(() => {
      checkListArgs('', options);
      return this.stmt.modes.all(options.after ?? '', options.limit).map((r) => [r.name, r.mode] as [string, number]);
    });
  }

  async makeDir(name: string, mode: number): Promise<void> {
    return this.guard(() => {
      this.execute({ op: 'makeDir', name, mode });
    });
  }

  async removeDir(name: string): Promise<void> {
    return this.guard(() => {
      this.execute({ op: 'removeDir', name });
    });
  }

  async dirMode(name: string): Promise<number | undefined> {
    return this.guard(() => {
      checkName(name);
      return this.stmt.dirMode.get(name);
    });
  }

  async dirs(prefix: string, options: ListOptions): Promise<Array<[string, number]>> {
    return this.guard(() => {
      checkListArgs(prefix, options);
      const out: Array<[string, number]> = [];
      // Rows from the prefix on, in order, until the first that does not start with it.
      for (const r of this.stmt.dirsFrom.iterate(options.after ?? '', prefix, options.limit)) {
        if (!r.name.startsWith(prefix)) break;
        out.push([r.name, r.mode]);
      }
      return out;
    });
  }

  async allocateInodes(count: number): Promise<number> {
    return this.guard(() => this.execute({ op: 'allocateInodes', count }) as number);
  }

  async list(prefix: string, options: ListOptions): Promise<string[]> {
    return this.guard(() => {
      checkListArgs(prefix, options);
      const { after, limit } = options;
      if (limit === 0) return [];
      // A range scan on the primary key: [prefix, bound), or (after, bound) when the cursor is past prefix.
      const exclusive = after !== undefined && compareNames(after, prefix) >= 0;
      const lower = exclusive ? after : prefix;
      const bound = prefixUpperBound(prefix);
      if (bound === undefined) return (exclusive ? this.stmt.listAfter : this.stmt.listFrom).all(lower, limit);
      return (exclusive ? this.stmt.listAfterBounded : this.stmt.listFromBounded).all(lower, bound, limit);
    });
  }

  async block(sha256: string): Promise<BlockRecord | undefined> {
    return this.guard(() => {
      const row = this.stmt.block.get(sha256);
      return row === undefined ? undefined : toBlock(row);
    });
  }

  async setPinned(sha256: string, pinned: boolean): Promise<void> {
    return this.guard(() => {
      this.execute({ op: 'setPinned', sha256, pinned });
    });
  }

  async blocks(): Promise<BlockRecord[]> {
    return this.guard(() => this.stmt.blocks.all().map(toBlock));
  }

  async forget(sha256: string): Promise<{ removedVersions: number }> {
    return this.guard(() => this.execute({ op: 'forget', sha256 }) as { removedVersions: number });
  }

  // ---- journal, snapshots and checks (fsck) ---------------------------------------------------------

  /** The sequence number of the last journaled mutation this database holds (0: none yet). */
  journalSeq(): number {
    return this.guard(() => {
      const seq = this.stmt.journalSeq.get();
      assert(typeof seq === 'number' && Number.isSafeInteger(seq), `journal_seq is ${String(seq)}`);
      return seq;
    });
  }

  /** Bytes in the current journal file (the store takes a snapshot early when it grows). */
  journalFileBytes(): number {
    return this.journal?.fileBytes ?? 0;
  }

  /**
   * Re-run one journal entry (fsck, on a database restored from a snapshot): the same mutation with
   * the same arguments, so the same versions, inode numbers and references result. The database's
   * journal_seq becomes the entry's. Throws as the original call would on a state it does not fit.
   */
  applyJournalEntry(entry: JournalEntry): void {
    this.guard(() => {
      const { seq, ...op } = entry;
      this.execute(op as JournalOp, seq);
    });
  }

  /**
   * Copy the database to `file` with SQLite's online backup (other calls go on meanwhile; the copy is
   * the state when the backup finishes, with the journal_seq of that state). The journal moves to a new
   * file first, so files before the snapshot's number can be pruned. One snapshot at a time.
   */
  async snapshotTo(file: string): Promise<void> {
    if (this.closed) throw closedError(this.kind);
    if (this.snapshotting) throw new CascadeError('EBUSY', 'a snapshot is already being taken');
    this.snapshotting = true;
    try {
      // The backup copies committed pages; mutations meanwhile commit one by one (see mutate).
      this.commitGroup();
      this.journal?.rotate(this.journalSeq() + 1);
      await this.db.backup(file);
    } catch (e) {
      throw mapError(e);
    } finally {
      this.snapshotting = false;
    }
  }

  /** SQLite's own check of the file (b-trees, pages, indexes): empty when it finds nothing. */
  integrityCheck(maxErrors: number): string[] {
    return this.guard(() => {
      const rows = this.db.pragma(`integrity_check(${Math.max(1, Math.floor(maxErrors))})`, { simple: false }) as Array<{ integrity_check: string }>;
      const messages = rows.map((r) => r.integrity_check);
      return messages.length === 1 && messages[0] === 'ok' ? [] : messages;
    });
  }

  /** Every retained version, in name order (fsck walks them once; not for the serving path). */
  *allVersions(): IterableIterator<VersionRecord> {
    if (this.closed) throw closedError(this.kind);
    try {
      for (const row of this.stmt.allVersions.iterate()) yield toVersion(row);
    } catch (e) {
      throw mapError(e);
    }
  }

  /** Reference counts that disagree with the versions, and block rows nothing references (at most `limit` listed). */
  checkRefs(limit: number): RefProblems {
    return this.guard(() => {
      const out: RefProblems = { mismatched: [], unreferenced: [], total: 0 };
      for (const r of this.stmt.refCounts.iterate()) {
        if (r.refs === r.counted) continue;
        out.total++;
        if (out.mismatched.length < limit) out.mismatched.push({ sha256: r.sha, refs: r.refs, counted: r.counted });
      }
      for (const b of this.stmt.blocksWithoutVersions.iterate()) {
        out.total++;
        if (out.unreferenced.length < limit) out.unreferenced.push(b.sha);
      }
      return out;
    });
  }

  /** Rewrite the block rows from the versions (refs = versions referencing the content). Journaled. */
  fixRefs(): number {
    return this.guard(() => this.execute({ op: 'fixRefs' }) as number);
  }

  /** Every mutation, by journal op: the one implementation for calls and for replay (`replaySeq`). */
  private execute(op: JournalOp, replaySeq?: number): unknown {
    switch (op.op) {
      case 'commit': {
        const { name, sha256, sizeBytes, timeMs, keepVersions, ino } = op;
        checkCommitArgs(name, sha256, sizeBytes, timeMs, keepVersions);
        checkIno(ino);
        return this.mutate(op, replaySeq, (counts) => {
          const released: string[] = [];
          const fileIno = ino ?? this.stmt.current.get(name)?.ino ?? this.takeInodes(1);
          const version = this.addVersion(counts, name, sha256, sizeBytes, timeMs, keepVersions, fileIno, released);
          return { version, released };
        });
      }
      case 'remove': {
        const { name } = op;
        checkName(name);
        return this.mutate(op, replaySeq, (counts) => {
          if (this.stmt.lastVersion.get(name) === undefined) throw new CascadeError('ENOENT', `no such name: ${name}`);
          const released: string[] = [];
          this.dropName(counts, name, released);
          return { released };
        });
      }
      case 'rename': {
        const { from, to, timeMs, keepVersions } = op;
        checkName(from, 'from');
        checkName(to, 'to');
        checkTimeMs(timeMs);
        checkKeepVersions(keepVersions);
        const readHead = (): VersionRow => {
          const head = this.stmt.current.get(from);
          if (head === undefined) throw new CascadeError('ENOENT', `no such name: ${from}`);
          return head;
        };
        if (from === to) return { version: toVersion(readHead()), released: [] };
        return this.mutate(op, replaySeq, (counts) => {
          const head = readHead();
          const released: string[] = [];
          // Add to `to` first: the moved content gains a reference before `from` drops its own.
          const version = this.addVersion(counts, to, head.sha, head.size, timeMs, keepVersions, head.ino, released);
          this.stmt.setMode.run(this.stmt.modeOf.get(from) ?? null, to);
          this.dropName(counts, from, released);
          return { version, released };
        });
      }
      case 'setMode': {
        const { name, mode } = op;
        checkName(name);
        checkMode(mode);
        return this.mutate(op, replaySeq, () => {
          if (this.stmt.setMode.run(mode, name).changes === 0) throw new CascadeError('ENOENT', `no such name: ${name}`);
        });
      }
      case 'makeDir': {
        const { name, mode } = op;
        checkName(name);
        checkMode(mode);
        return this.mutate(op, replaySeq, () => {
          this.stmt.makeDir.run(name, mode);
        });
      }
      case 'removeDir': {
        const { name } = op;
        checkName(name);
        return this.mutate(op, replaySeq, () => {
          this.stmt.removeDir.run(name);
        });
      }
      case 'allocateInodes':
        checkInodeCount(op.count);
        return this.mutate(op, replaySeq, () => this.takeInodes(op.count));
      case 'setPinned': {
        const { sha256, pinned } = op;
        return this.mutate(op, replaySeq, (counts) => {
          const row = this.stmt.block.get(sha256);
          if (row === undefined) throw new CascadeError('ENOENT', `no such block: ${sha256}`);
          if ((row.pinned !== 0) === pinned) return;
          this.stmt.setPinned.run(pinned ? 1 : 0, sha256);
          counts.pinnedBytes += pinned ? row.size : -row.size;
        });
      }
      case 'forget': {
        const { sha256 } = op;
        return this.mutate(op, replaySeq, (counts) => {
          const block = this.stmt.block.get(sha256);
          const rows = this.stmt.bySha.all(sha256);
          assert(rows.length === (block?.refs ?? 0), `block ${sha256} has refs ${block?.refs ?? 0} but ${rows.length} versions`);
          for (const row of rows) {
            this.stmt.deleteVersion.run(row.name, row.version);
            counts.versions--;
            counts.logicalBytes -= row.size;
            // A name whose every version went no longer exists (its numbering restarts, as after remove).
            if (this.stmt.current.get(row.name) === undefined && this.stmt.deleteName.run(row.name).changes > 0) counts.names--;
          }
          if (block !== undefined) this.deleteBlockRow(counts, block);
          return { removedVersions: rows.length };
        });
      }
      case 'fixRefs':
        return this.mutate(op, replaySeq, () => {
          let changed = 0;
          for (const r of this.stmt.refCounts.all()) {
            if (r.refs === r.counted) continue;
            if (r.refs === null) this.stmt.insertBlock.run(r.sha, r.size);
            this.stmt.setRefs.run(r.counted, r.sha);
            changed++;
          }
          for (const b of this.stmt.blocksWithoutVersions.all()) {
            this.stmt.deleteBlock.run(b.sha);
            changed++;
          }
          return changed;
        });
      default:
        throw new CascadeError('EINVAL', `unknown journal op ${JSON.stringify((op as { op: unknown }).op)}`);
    }
  }

  async totals(): Promise<MetaTotals> {
    return this.guard(() => ({ ...this.counts }));
  }

  /**
   * Makes every committed transaction durable against power loss. With synchronous=NORMAL the WAL is
   * fsynced only at checkpoints; committing one tiny transaction under synchronous=FULL fsyncs the WAL,
   * and an fsync covers the whole file, so every earlier frame with it (frames already checkpointed were
   * fsynced into the database file by that checkpoint). SQLite also fsyncs the directory the first time
   * it syncs a new WAL, so the WAL's directory entry is durable too. This is cheaper than
   * wal_checkpoint(FULL), which would copy the WAL into the database and fsync both.
   */
  async sync(): Promise<void> {
    return this.guard(() => {
      this.commitGroup();
      if (!this.dirty) return;
      // The journal first: once sync() returns, a lost database can be rebuilt up to here.
      this.journal?.sync();
      this.db.pragma('synchronous = FULL');
      try {
        this.stmt.bumpSyncCount.run();
      } finally {
        this.db.pragma('synchronous = NORMAL');
      }
      this.dirty = false;
    });
  }

  /**
   * Idempotent. Commits the open group, then closing checkpoints the WAL into the database file
   * (fsynced) and removes the WAL. A failed group commit is thrown after the database is closed.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    clearTimeout(this.idleCheckpoint);
    this.idleCheckpoint = undefined;
    let failure: unknown;
    try {
      this.commitGroup();
    } catch (e) {
      failure = e;
    }
    this.closed = true;
    try {
      this.journal?.close();
    } finally {
      try {
        this.db.close();
      } catch (e) {
        failure ??= e;
      }
    }
    if (failure !== undefined) throw mapError(failure);
  }

  /** Closed check and error translation around every call. */
  private guard<T>(body: () => T): T {
    if (this.closed) throw closedError(this.kind);
    try {
      return body();
    } catch (e) {
      throw mapError(e);
    }
  }

  /**
   * Runs `body` as one transaction. It updates a copy of the totals, which replaces the kept totals only
   * once the transaction has committed; a throw rolls back both.
   */
  private mutate<T>(op: JournalOp, replaySeq: number | undefined, body: (counts: MetaTotals) => T): T {
    const groupable =
      this.groupCommitMs > 0 && !this.snapshotting && !this.replaying && (GROUPED_OPS.has(op.op) || (this.journal !== undefined && JOURNALED_GROUPED_OPS.has(op.op)));
    if (groupable && this.group === undefined) {
      assert(!this.db.inTransaction, 'a transaction is open outside a group');
      this.db.exec('BEGIN IMMEDIATE');
      this.group = { mutations: 0, journalMark: this.journal?.fileBytes ?? 0, timer: undefined };
    }
    const counts = { ...this.counts };
    let seq = 0;
    let result: T;
    try {
      // Inside the group's transaction better-sqlite3 runs this as a savepoint: a throw undoes only it.
      result = this.txn(() => {
        const r = body(counts);
        // The number goes into the same transaction, so a snapshot knows which entries it already holds.
        seq = replaySeq ?? this.journalSeqRaw() + 1;
        this.stmt.setJournalSeq.run(seq);
        return r;
      }) as T;
    } catch (e) {
      // Some errors (I/O, disk full) roll back the whole transaction, the group's earlier mutations too.
      if (this.group !== undefined && !this.db.inTransaction) this.groupLost(e);
      throw e;
    }
    // fixRefs rewrote the rows wholesale: count again rather than track each change.
    this.counts = op.op === 'fixRefs' ? this.recount() : counts;
    this.dirty = true;
    this.scheduleIdleCheckpoint();
    // Alone, an entry is for a mutation the database holds: appended after the commit (a crash between
    // the two loses this one entry, which the database, still intact then, does not need). In a group it
    // is appended now, ahead of the group's COMMIT: a crash before that COMMIT loses the group from the
    // database but not from the journal, and the next open applies it again (replayJournal), so a
    // grouped close survives kill -9 as an ungrouped one does.
    const entry = replaySeq === undefined && this.journal !== undefined ? ({ ...op, seq } as JournalEntry) : undefined;
    if (entry !== undefined) this.journal?.append(entry);
    const group = this.group;
    if (group === undefined) return result;
    group.mutations++;
    if (!groupable || group.mutations >= GROUP_COMMIT_MAX_MUTATIONS) this.commitGroup();
    else group.timer ??= setTimeout(() => this.commitGroupLater(), this.groupCommitMs);
    return result;
  }

  /** Commits the open group, if any, and appends its journal entries. Throws what COMMIT throws. */
  private commitGroup(): void {
    const group = this.group;
    if (group === undefined) return;
    clearTimeout(group.timer);
    try {
      this.db.exec('COMMIT');
    } catch (e) {
      // COMMIT can fail and leave the transaction open (busy) or rolled back (I/O): either way it is lost.
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
      this.groupLost(e);
      throw e;
    }
    this.group = undefined;
    this.groupCommits++;
  }

  /** The group's timer: nobody waits on this commit, so a failure is logged (it loses the group). */
  private commitGroupLater(): void {
    if (this.closed || this.group === undefined) return;
    this.group.timer = undefined;
    try {
      this.commitGroup();
    } catch (e) {
      console.error(`cascade: metadata group commit failed: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  /**
   * The group's transaction was rolled back: its mutations (already answered) are gone, as after a
   * crash. The kept totals are recounted from what the database holds.
   */
  private groupLost(cause: unknown): void {
    const lost = this.group?.mutations ?? 0;
    clearTimeout(this.group?.timer);
    // Its journal entries go too: numbers the database no longer has are reused by the next mutations.
    if (this.group !== undefined) this.journal?.cutBack(this.group.journalMark);
    this.group = undefined;
    this.counts = this.recount();
    console.error(`cascade: metadata: ${lost} uncommitted mutations lost with a rolled-back group (${cause instanceof Error ? cause.message : String(cause)})`);
  }

  private scheduleIdleCheckpoint(): void {
    if (this.idleCheckpoint !== undefined) {
      this.idleCheckpoint.refresh();
      return;
    }
    this.idleCheckpoint = setTimeout(() => {
      this.idleCheckpoint = undefined;
      if (this.closed) return;
      try {
        // A checkpoint copies committed frames only; the group (long committed by its timer) goes first.
        this.commitGroup();
        // PASSIVE: copies what it can and never waits; a failure here is retried by the next one.
        this.db.pragma('wal_checkpoint(PASSIVE)');
        this.idleCheckpoints++;
      } catch {
        // the next commit's automatic checkpoint, or close, does it (and reports a real error)
      }
    }, WAL_IDLE_CHECKPOINT_MS).unref();
  }

  private journalSeqRaw(): number {
    const seq = this.stmt.journalSeq.get();
    assert(typeof seq === 'number' && Number.isSafeInteger(seq), `journal_seq is ${String(seq)}`);
    return seq;
  }

  private recount(): MetaTotals {
    // Aggregates without GROUP BY always return one row.
    const versions = this.stmt.versionTotals.get() ?? { n: 0, bytes: 0 };
    const blocks = this.stmt.blockTotals.get() ?? { n: 0, bytes: 0, pinned: 0 };
    return {
      names: this.stmt.countNames.get() ?? 0,
      versions: versions.n,
      blocks: blocks.n,
      uniqueBytes: blocks.bytes,
      logicalBytes: versions.bytes,
      pinnedBytes: blocks.pinned,
    };
  }

  /** Inside a transaction: reserves `count` inode numbers and returns the first. */
  private takeInodes(count: number): number {
    const first = this.stmt.nextIno.get();
    assert(typeof first === 'number' && Number.isSafeInteger(first), `next_ino is ${String(first)}`);
    this.stmt.setNextIno.run(advanceInodes(first, count));
    return first;
  }

  /** Inside a transaction: appends a version of `name` and trims it to keepVersions. */
  private addVersion(
    counts: MetaTotals,
    name: string,
    sha256: string,
    sizeBytes: number,
    timeMs: number,
    keepVersions: number,
    ino: number,
    released: string[],
  ): VersionRecord {
    // Reference the content first, so content shared by old and new versions is never released.
    const block = this.stmt.block.get(sha256);
    if (block === undefined) {
      this.stmt.insertBlock.run(sha256, sizeBytes);
      counts.blocks++;
      counts.uniqueBytes += sizeBytes;
    } else {
      assert(block.size === sizeBytes, `block ${sha256} committed with size ${sizeBytes}, known as ${block.size}`);
      this.stmt.setRefs.run(block.refs + 1, sha256);
    }

    const lastVersion = this.stmt.lastVersion.get(name);
    if (lastVersion === undefined) counts.names++;
    const previous = this.stmt.current.get(name);
    const record: VersionRecord = {
      name,
      version: (lastVersion ?? 0) + 1,
      sha256,
      sizeBytes,
      timeMs: previous === undefined ? timeMs : Math.max(timeMs, previous.time_ms),
      ino,
    };
    this.stmt.upsertName.run(name, record.version);
    this.stmt.insertVersion.run(name, record.version, sha256, sizeBytes, record.timeMs, ino);
    counts.versions++;
    counts.logicalBytes += sizeBytes;

    for (const old of this.stmt.beyondKeep.all(name, keepVersions)) {
      this.stmt.deleteVersion.run(name, old.version);
      counts.versions--;
      counts.logicalBytes -= old.size;
      this.unref(counts, old.sha, released);
    }
    return record;
  }

  /** Inside a transaction: deletes an existing name and all its versions. */
  private dropName(counts: MetaTotals, name: string, released: string[]): void {
    const rows = this.stmt.versions.all(name);
    this.stmt.deleteVersions.run(name);
    this.stmt.deleteName.run(name);
    counts.names--;
    for (const row of rows) {
      counts.versions--;
      counts.logicalBytes -= row.size;
      this.unref(counts, row.sha, released);
    }
  }

  private unref(counts: MetaTotals, sha256: string, released: string[]): void {
    const block = this.stmt.block.get(sha256);
    assert(block !== undefined, `a retained version references ${sha256}, which has no block row`);
    if (block.refs > 1) {
      this.stmt.setRefs.run(block.refs - 1, sha256);
      return;
    }
    this.deleteBlockRow(counts, block);
    released.push(sha256);
  }

  private deleteBlockRow(counts: MetaTotals, block: BlockRow): void {
    this.stmt.deleteBlock.run(block.sha);
    counts.blocks--;
    counts.uniqueBytes -= block.size;
    if (block.pinned !== 0) counts.pinnedBytes -= block.size;
  }
}

/**
 * Getting a data directory back: who holds it (one process per directory), what an open keeps of
 * what a crash left (reconcile), and the metadata snapshots that bound the journal's replay.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { StoreCore } from './core';
import { CascadeError, isCascadeError } from './errors';
import { JOURNAL_DIR_NAME, listJournalFiles } from './meta/journal';
import { listSnapshots, META_FILE, SNAPSHOT_FILE, takeSnapshot } from './meta/snapshot';
import { SqliteMeta } from './meta/sqlite';

/** Metadata snapshots: default interval, how often the triggers are looked at, early snapshot past this much journal. */
const META_SNAPSHOT_INTERVAL_MS_DEFAULT = 10 * 60_000;
const META_SNAPSHOT_CHECK_MS = 5_000;
const META_JOURNAL_SNAPSHOT_BYTES = 64 * 1024 * 1024;
/** Journal files (one per open) past which an open takes a snapshot, which prunes them. */
const META_JOURNAL_FILES_MAX = 32;
/** What a refused open says to do about its metadata. */
const FSCK_HINT = 'run `cascade fsck --repair --data DIR` to restore it from its snapshot, journal and segments';

/**
 * The data directory's SQLite metadata, held by this process alone (SQLite's exclusive lock). The holder
 * writes `owner.json` (host, pid, start), so a second process is told who holds the directory.
 */
export function openSqliteOwned(dataDir: string, groupCommitMs: number | undefined): SqliteMeta {
  const ownerFile = path.join(dataDir, 'owner.json');
  const metaFile = path.join(dataDir, META_FILE);
  // A fresh database next to existing data would make every stored block an orphan, reclaimed at
  // once (reconcile): refuse instead.
  if (!fs.existsSync(metaFile) && hasStoredData(dataDir)) {
    throw new CascadeError('ECORRUPT', `metadata database ${metaFile} is missing but ${dataDir} holds data; ${FSCK_HINT.replace('DIR', dataDir)}`);
  }
  let meta: SqliteMeta;
  try {
    meta = SqliteMeta.open(metaFile, { journalDir: path.join(dataDir, JOURNAL_DIR_NAME), groupCommitMs });
  } catch (e) {
    if (!isCascadeError(e, 'EBUSY')) throw e;
    let holder = 'another process';
    try {
      const o = JSON.parse(fs.readFileSync(ownerFile, 'utf8')) as { host?: string; pid?: number; sinceMs?: number };
      holder = `pid ${o.pid} on host ${o.host}${o.sinceMs ? ` (since ${new Date(o.sinceMs).toISOString()})` : ''}`;
    } catch {
      // no owner file (an older version held it): the generic words stay
    }
    throw new CascadeError(
      'EBUSY',
      `data directory ${dataDir} is in use by ${holder}: one process per data directory (another node of a job needs its own --data; the default includes the host name)`,
      { cause: e },
    );
  }
  try {
    fs.writeFileSync(ownerFile, JSON.stringify({ host: os.hostname(), pid: process.pid, sinceMs: Date.now() }) + '\n');
  } catch {
    // informational only
  }
  return meta;
}

/** Whether a data directory holds anything a fresh metadata database would orphan or contradict. */
export function hasStoredData(dataDir: string): boolean {
  if (fs.existsSync(path.join(dataDir, SNAPSHOT_FILE)) || listJournalFiles(path.join(dataDir, JOURNAL_DIR_NAME)).length > 0) return true;
  let names: string[];
  try {
    names = fs.readdirSync(path.join(dataDir, 'segments'));
  } catch {
    return false;
  }
  return names.some((n) => /^seg-\d{8}\.log$/.test(n) && fs.statSync(path.join(dataDir, 'segments', n)).size > 0);
}

/** A damaged metadata database refuses the open (ECORRUPT) and says how to get the data back. */
export function withFsckHint(e: unknown, dataDir: string): unknown {
  if (!isCascadeError(e, 'ECORRUPT') || !e.message.includes('metadata database') || e.message.includes('cascade fsck')) return e;
  return new CascadeError('ECORRUPT', `${e.message.replace(/^ECORRUPT: /, '')}; ${FSCK_HINT.replace('DIR', dataDir)}`, { cause: e });
}


/**
 * At open: metadata is the truth for what is referenced, the disk tier for what survived. Content
 * referenced but not on disk was lost before it was flushed: its versions go (never served). Content on
 * disk that nothing references is removed. Pinned content is loaded into DRAM.
 */
export async function reconcile(core: StoreCore, ensureInDram: (sha: string, sizeBytes: number) => Promise<void>): Promise<void> {
  const rows = await core.meta.blocks();
  const referenced = new Set<string>();
  for (const row of rows) {
    if (!core.disk.has(row.sha256) && !core.dram.has(row.sha256)) {
      const { removedVersions } = await core.meta.forget(row.sha256);
      core.counters.lostVersions += removedVersions;
      continue;
    }
    referenced.add(row.sha256);
    if (row.pinned) core.pinLocally(row.sha256, row.sizeBytes);
  }
  for (const { key } of core.disk.scan()) {
    if (referenced.has(key)) continue;
    await core.disk.delete(key);
    core.counters.orphanBlocksRemoved++;
  }
  for (const { key } of core.dram.scan()) {
    if (referenced.has(key)) core.admit(key);
    else await core.dram.delete(key);
  }
  if (core.meta instanceof SqliteMeta && core.meta.replayedAtOpen > 0) {
    core.warn(`recovery: ${core.meta.replayedAtOpen} metadata change(s) a crash kept from committing were applied again from the journal`);
  }
  if (core.counters.lostVersions > 0) {
    core.warn(`recovery: ${core.counters.lostVersions} version(s) whose content never reached disk were dropped`);
  }
  if (core.config.loadPins !== false) for (const [sha, size] of core.pinned) await ensureInDram(sha, size);
}

/** Snapshots of the SQLite metadata this store opened itself: on a timer, past a journal size, at close. */
export class MetaSnapshots {
  private timer: NodeJS.Timeout | undefined;
  /** The one running, and the last one's seq and time. */
  private running: Promise<void> | undefined;
  private last = { seq: -1, atMs: 0 };

  constructor(private readonly core: StoreCore) {}

  /** The one running now (close waits for it). */
  get pending(): Promise<void> | undefined {
    return this.running;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The SQLite metadata when this store opened it itself (not an injected or clustered engine). */
  private ownSqlite(): SqliteMeta | undefined {
    return this.core.config.metaEngine === undefined && this.core.meta instanceof SqliteMeta ? this.core.meta : undefined;
  }

  async start(): Promise<void> {
    const meta = this.ownSqlite();
    if (!meta) return;
    const newest = listSnapshots(this.core.config.dataDir, false)[0];
    this.last = { seq: newest?.seq ?? -1, atMs: Date.now() };
    // Every open starts a journal file; many short-lived opens (CLI commands) are folded into a snapshot.
    if (listJournalFiles(path.join(this.core.config.dataDir, JOURNAL_DIR_NAME)).length > META_JOURNAL_FILES_MAX) await this.snapshot(false);
    const intervalMs = this.core.config.metaSnapshotIntervalMs ?? META_SNAPSHOT_INTERVAL_MS_DEFAULT;
    this.timer = setInterval(() => {
      const due = intervalMs > 0 && Date.now() - this.last.atMs >= intervalMs;
      if (due || meta.journalFileBytes() >= META_JOURNAL_SNAPSHOT_BYTES) void this.snapshot(true);
    }, intervalMs > 0 ? Math.min(intervalMs, META_SNAPSHOT_CHECK_MS) : META_SNAPSHOT_CHECK_MS).unref();
  }

  /**
   * Snapshot the metadata if it changed since the last one. A failure is a warning: the journal goes
   * on, so nothing is lost but a longer replay. `background`: skip if the store is closing.
   */
  snapshot(background: boolean): Promise<void> {
    const meta = this.ownSqlite();
    if (!meta || this.running || (background && this.core.closing)) return this.running ?? Promise.resolve();
    let seq: number;
    try {
      seq = meta.journalSeq();
    } catch (e) {
      this.core.warn(`metadata snapshot: ${String(e)}`);
      return Promise.resolve();
    }
    if (seq === this.last.seq) {
      this.last.atMs = Date.now();
      return Promise.resolve();
    }
    this.running = takeSnapshot(meta, this.core.config.dataDir)
      .then((r) => {
        this.last = { seq: r.seq, atMs: Date.now() };
        this.core.counters.metaSnapshots++;
        this.core.counters.metaSnapshotMs = r.durationMs;
      })
      .catch((e: unknown) => this.core.warn(`metadata snapshot failed (the journal still has every change): ${String(e)}`))
      .finally(() => (this.running = undefined));
    return this.running;
  }
}

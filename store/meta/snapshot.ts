/**
 * Snapshots of the metadata database: DATA/meta.snapshot.sqlite (newest) and meta.snapshot.1.sqlite
 * (the one before), each a self-contained SQLite file (rollback journal mode, so it opens read-only)
 * holding the journal_seq it is current to. Written to a temporary name, fsynced, then renamed over
 * (directory fsynced), so a crash leaves the old snapshots intact. Journal files whose entries both kept
 * snapshots hold are pruned after each snapshot (store/meta/journal.ts).
 */
import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CascadeError } from '../errors';
import { fsyncPath } from '../tiers/disk-io';
import { JOURNAL_DIR_NAME, pruneJournal } from './journal';
import type { SqliteMeta } from './sqlite';

export const META_FILE = 'meta.sqlite';
export const SNAPSHOT_FILE = 'meta.snapshot.sqlite';
export const SNAPSHOT_PREVIOUS_FILE = 'meta.snapshot.1.sqlite';
const SNAPSHOT_TMP_FILE = 'meta.snapshot.sqlite.tmp';
/** Problems integrity_check reports at most (it stops there). */
const SNAPSHOT_CHECK_ERRORS_MAX = 10;

export interface SnapshotResult {
  file: string;
  seq: number;
  sizeBytes: number;
  durationMs: number;
  prunedJournalFiles: number;
}

export interface SnapshotInfo {
  file: string;
  /** The journal_seq the snapshot is current to; undefined when unreadable. */
  seq?: number;
  /** Why it cannot be used (absent: it opened and passed integrity_check). */
  problem?: string;
}

/** The snapshots of a data directory, newest first, each checked (missing files are left out). */
export function listSnapshots(dataDir: string, check = true): SnapshotInfo[] {
  const out: SnapshotInfo[] = [];
  for (const name of [SNAPSHOT_FILE, SNAPSHOT_PREVIOUS_FILE]) {
    const file = path.join(dataDir, name);
    if (!fs.existsSync(file)) continue;
    out.push(readSnapshot(file, check));
  }
  return out;
}

/** Open a snapshot read-only: its journal_seq, and whether SQLite finds it intact. */
export function readSnapshot(file: string, check = true): SnapshotInfo {
  let db: Database.Database | undefined;
  try {
    db = new Database(file, { readonly: true, fileMustExist: true });
    if (check) {
      const rows = db.pragma(`integrity_check(${SNAPSHOT_CHECK_ERRORS_MAX})`) as Array<{ integrity_check: string }>;
      if (!(rows.length === 1 && rows[0].integrity_check === 'ok')) {
        return { file, problem: `integrity_check: ${rows.map((r) => r.integrity_check).join('; ')}` };
      }
    }
    const row = db.prepare<[], { value: unknown }>("SELECT value FROM meta WHERE key = 'journal_seq'").get();
    if (row === undefined || typeof row.value !== 'number') return { file, problem: 'no journal_seq in its meta table' };
    return { file, seq: row.value };
  } catch (e) {
    return { file, problem: (e as Error).message };
  } finally {
    db?.close();
  }
}

/**
 * Take a snapshot of `meta` into `dataDir` (see the header). Other metadata calls go on meanwhile
 * (SQLite's online backup runs in steps on the event loop).
 */
export async function takeSnapshot(meta: SqliteMeta, dataDir: string): Promise<SnapshotResult> {
  const t0 = performance.now();
  const tmp = path.join(dataDir, SNAPSHOT_TMP_FILE);
  fs.rmSync(tmp, { force: true });
  try {
    await meta.snapshotTo(tmp);
    // A backup copies the WAL flag of the source's header: switch the copy to a rollback journal so it
    // is one file that opens read-only, and read which journal entry it is current to.
    const db = new Database(tmp);
    let seq: unknown;
    try {
      db.pragma('journal_mode = DELETE');
      seq = db.prepare<[], { value: unknown }>("SELECT value FROM meta WHERE key = 'journal_seq'").get()?.value;
    } finally {
      db.close();
    }
    if (typeof seq !== 'number') throw new CascadeError('EIO', `snapshot ${tmp} has no journal_seq`);
    fsyncPath(tmp);
    const current = path.join(dataDir, SNAPSHOT_FILE);
    const previous = path.join(dataDir, SNAPSHOT_PREVIOUS_FILE);
    if (fs.existsSync(current)) fs.renameSync(current, previous);
    fs.renameSync(tmp, current);
    fsyncPath(dataDir);
    // Entries both kept snapshots hold are not needed: a bad newest snapshot falls back to the previous
    // one, which needs the entries after its own number.
    const prev = fs.existsSync(previous) ? readSnapshot(previous, false).seq : undefined;
    const covered = prev === undefined ? seq : Math.min(prev, seq);
    const pruned = pruneJournal(path.join(dataDir, JOURNAL_DIR_NAME), covered);
    return { file: current, seq, sizeBytes: fs.statSync(current).size, durationMs: performance.now() - t0, prunedJournalFiles: pruned };
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
}

/**
 * fsck of a data directory (`cascade fsck`): checks every segment record against its SHA-256, the
 * metadata database (SQLite's integrity_check, then every version against the segments and the
 * reference counts), the snapshots and the journal; with `repair`, fixes what it can.
 *
 * Repair of a missing or corrupt meta.sqlite: the damaged files are moved aside into DATA/fsck-<time>/
 * (never deleted), the newest snapshot that passes integrity_check is copied in, and the journal
 * entries after its number are re-run (store/meta/journal.ts): the same versions, numbers, times,
 * inode numbers and pins as before. When that chain has a gap (a journal file lost or damaged, no
 * snapshot and a journal that does not start at 1, a data directory from before the journal), every
 * intact block that nothing references then is adopted as `lost+found/<sha256>`, so no stored content
 * becomes unreachable. Then, for any database: reference counts are recomputed where wrong, and
 * versions whose content has no intact record are dropped (never served). The rebuilt database gets a
 * fresh snapshot; the old journal and snapshots go aside with the damaged file.
 *
 * It refuses a data directory that a running process holds (owner.json's pid with the files open, or
 * SQLite's exclusive lock), and holds that lock itself while it works.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { KEEP_VERSIONS_DEFAULT } from './constants';
import { CascadeError, isCascadeError } from './errors';
import { JOURNAL_DIR_NAME, listJournalFiles, readJournalFile, type JournalDamage, type JournalEntry } from './meta/journal';
import { listSnapshots, META_FILE, takeSnapshot, type SnapshotInfo } from './meta/snapshot';
import { SqliteMeta } from './meta/sqlite';
import { fsyncPath } from './tiers/disk-io';
import { listSegmentFiles, readSegmentIndex, scanSegmentFile } from './tiers/segment-format';

/** Items of each kind listed in a report (counts are always complete). */
export const FSCK_LIST_MAX = 100;
/** Problems SQLite's integrity_check reports at most. */
const INTEGRITY_ERRORS_MAX = 20;
/** The name prefix of content adopted without a name. */
export const LOST_FOUND_MODEL = 'lost+found';

/** Exit codes of `cascade fsck` (1 and 2 are the CLI's own: a typed error, bad usage). */
export const FSCK_EXIT = {
  clean: 0,
  /** Problems found; nothing was changed (no --repair). */
  problems: 3,
  /** Repaired; everything the metadata referenced is reachable again. */
  repaired: 4,
  /** Repaired, but some content or history could not be recovered (listed in the report). */
  repairedWithLoss: 5,
} as const;

export interface FsckProgress {
  phase: 'segments' | 'metadata' | 'replay' | 'repair';
  done: number;
  total: number;
}

export interface FsckOptions {
  dataDir: string;
  repair?: boolean;
  onProgress?: (p: FsckProgress) => void;
  /** Time for adopted lost+found versions (tests). */
  nowMs?: () => number;
}

export interface FsckReport {
  dataDir: string;
  repair: boolean;
  metadata: { state: 'ok' | 'missing' | 'corrupt'; problem?: string; names?: number; versions?: number; blocks?: number; journalSeq?: number };
  segments: {
    files: number;
    records: number;
    bytes: number;
    /** Records or stretches that fail their checks (never served), torn tails not included. */
    damaged: number;
    damagedList: Array<{ segment: string; offsetBytes: number; reason: string; sha256?: string }>;
    tornTailBytes: number;
    /** Intact records that no version references (content deleted since, reclaimed by the next open). */
    unreferenced: number;
    /** Intact records the segment's index leaves out: deleted before it was written; the store never reads them. */
    dead: number;
    durationMs: number;
  };
  snapshots: SnapshotInfo[];
  journal: { files: number; entries: number; firstSeq?: number; lastSeq?: number; damage: JournalDamage[] };
  /** Versions whose content has no intact record in the segments. */
  missing: { versions: number; blocks: number; list: Array<{ name: string; version: number; sha256: string }> };
  refs: { problems: number; list: Array<{ sha256: string; refs: number | null; counted: number }> };
  restore?: {
    from: string;
    snapshotSeq: number;
    replayed: number;
    failed: Array<{ seq: number; op: string; error: string }>;
    gaps: Array<{ afterSeq: number; nextSeq: number | null }>;
    chainComplete: boolean;
    lostFound: number;
    movedAside: string;
    journalSeq: number;
  };
  repairs: { refsFixed: number; forgottenBlocks: number; droppedVersions: number };
  /** One line per kind of problem found (empty: clean). */
  problems: string[];
  /** Things worth knowing that are not damage (a torn journal tail, an unusable older snapshot). */
  notes: string[];
  exitCode: number;
  durationMs: number;
}

export async function fsck(options: FsckOptions): Promise<FsckReport> {
  const t0 = performance.now();
  const dataDir = path.resolve(options.dataDir);
  if (!fs.existsSync(dataDir)) throw new CascadeError('ENOENT', `no data directory ${dataDir}`);
  const repair = options.repair === true;
  const progress = options.onProgress ?? (() => undefined);
  refuseIfInUse(dataDir);

  const report: FsckReport = {
    dataDir,
    repair,
    metadata: { state: 'ok' },
    segments: { files: 0, records: 0, bytes: 0, damaged: 0, damagedList: [], tornTailBytes: 0, unreferenced: 0, dead: 0, durationMs: 0 },
    snapshots: [],
    journal: { files: 0, entries: 0, damage: [] },
    missing: { versions: 0, blocks: 0, list: [] },
    refs: { problems: 0, list: [] },
    repairs: { refsFixed: 0, forgottenBlocks: 0, droppedVersions: 0 },
    problems: [],
    notes: [],
    exitCode: FSCK_EXIT.clean,
    durationMs: 0,
  };

  // 1. The metadata database: opened first, so its lock keeps a daemon out while fsck works.
  const metaFile = path.join(dataDir, META_FILE);
  const journalDir = path.join(dataDir, JOURNAL_DIR_NAME);
  let meta: SqliteMeta | undefined;
  if (!fs.existsSync(metaFile)) {
    report.metadata = { state: 'missing', problem: `${metaFile} does not exist` };
  } else {
    try {
      // Repairs of an intact database go through its journal like any other change.
      meta = SqliteMeta.open(metaFile, repair ? { journalDir } : {});
      const bad = meta.integrityCheck(INTEGRITY_ERRORS_MAX);
      if (bad.length > 0) throw new CascadeError('ECORRUPT', `integrity_check: ${bad.join('; ')}`);
    } catch (e) {
      await meta?.close().catch(() => undefined);
      meta = undefined;
      if (isCascadeError(e, 'EBUSY')) throw inUseError(dataDir, e);
      report.metadata = { state: 'corrupt', problem: (e as Error).message };
    }
  }

  try {
    // 2. Every segment record, checked against its SHA-256.
    const intact = await scanSegments(dataDir, report, progress);

    // 3. Snapshots and journal (what a restore would use).
    report.snapshots = listSnapshots(dataDir);
    for (const s of report.snapshots) if (s.problem) report.notes.push(`snapshot ${path.basename(s.file)} is unusable: ${s.problem}`);
    const journal = readJournal(journalDir, report);

    // 4. The metadata against the segments.
    if (meta) {
      try {
        progress({ phase: 'metadata', done: 0, total: 1 });
        checkMeta(meta, intact, report);
      } catch (e) {
        if (!isCascadeError(e, 'ECORRUPT')) throw e;
        await meta.close().catch(() => undefined);
        meta = undefined;
        report.metadata = { state: 'corrupt', problem: (e as Error).message };
      }
    }
    if (report.metadata.state !== 'ok') report.problems.push(`metadata database ${report.metadata.state}: ${report.metadata.problem}`);
    if (report.segments.damaged > 0) report.problems.push(`${report.segments.damaged} damaged segment record(s) (never served)`);
    if (report.missing.versions > 0) report.problems.push(`${report.missing.versions} version(s) reference ${report.missing.blocks} block(s) with no intact record`);
    if (report.refs.problems > 0) report.problems.push(`${report.refs.problems} reference count problem(s)`);

    if (!repair || report.problems.length === 0) {
      report.exitCode = report.problems.length === 0 ? FSCK_EXIT.clean : FSCK_EXIT.problems;
      return report;
    }

    // 5. Repair.
    let lossy = false;
    if (!meta) {
      const restored = await restore(dataDir, intact, journal, report, options, progress);
      lossy ||= !restored.complete;
      meta = restored.meta;
      await fixReferences(meta, intact, report);
      await installRestored(dataDir, meta, report);
      meta = undefined;
    } else {
      await fixReferences(meta, intact, report);
      await meta.sync();
    }
    lossy ||= report.repairs.droppedVersions > 0;
    report.exitCode = lossy ? FSCK_EXIT.repairedWithLoss : FSCK_EXIT.repaired;
    return report;
  } finally {
    await meta?.close().catch(() => undefined);
    report.durationMs = performance.now() - t0;
  }
}

/** sha256 -> size of every block with an intact record. */
async function scanSegments(dataDir: string, report: FsckReport, progress: (p: FsckProgress) => void): Promise<Map<string, number>> {
  const t0 = performance.now();
  const intact = new Map<string, number>();
  const files = listSegmentFiles(dataDir);
  const total = files.reduce((n, f) => n + fs.statSync(f).size, 0);
  let done = 0;
  const seg = report.segments;
  seg.files = files.length;
  progress({ phase: 'segments', done, total });
  for (const file of files) {
    // What the store will read: records its index lists, and every record past the index (re-indexed at open).
    const idx = readSegmentIndex(file.replace(/\.log$/, '.idx'));
    const live = new Set(idx?.entries.map((e) => e.offsetBytes));
    await scanSegmentFile(
      file,
      (r) => {
        if (r.problem === undefined) {
          if (idx && r.offsetBytes < idx.coveredBytes && !live.has(r.offsetBytes)) {
            seg.dead++;
            return;
          }
          seg.records++;
          intact.set(r.sha256!, r.sizeBytes!);
          return;
        }
        if (r.tail) {
          seg.tornTailBytes += r.lengthBytes;
          return;
        }
        seg.damaged++;
        if (seg.damagedList.length < FSCK_LIST_MAX) {
          seg.damagedList.push({ segment: path.basename(file), offsetBytes: r.offsetBytes, reason: r.problem, ...(r.sha256 ? { sha256: r.sha256 } : {}) });
        }
      },
      (n) => {
        done += n;
        progress({ phase: 'segments', done, total });
      },
    );
  }
  seg.bytes = total;
  seg.durationMs = performance.now() - t0;
  if (seg.tornTailBytes > 0) report.notes.push(`${seg.tornTailBytes} byte(s) of torn segment tail (an interrupted append; the next open truncates it)`);
  return intact;
}

/** Every journal entry, in file order, with damage noted (a torn tail of the newest file is normal). */
function readJournal(dir: string, report: FsckReport): JournalEntry[] {
  const files = listJournalFiles(dir);
  const entries: JournalEntry[] = [];
  files.forEach((f, i) => {
    const { entries: got, damage } = readJournalFile(f.file);
    entries.push(...got);
    if (!damage) return;
    report.journal.damage.push(damage);
    report.notes.push(`journal ${path.basename(f.file)}: ${damage.reason} at byte ${damage.offsetBytes}${i === files.length - 1 ? ' (the newest file: an interrupted append)' : ''}`);
  });
  report.journal.files = files.length;
  report.journal.entries = entries.length;
  if (entries.length > 0) {
    report.journal.firstSeq = entries[0].seq;
    report.journal.lastSeq = entries[entries.length - 1].seq;
  }
  return entries;
}

/** Versions against intact records, and reference counts. Throws ECORRUPT when SQLite finds damage. */
function checkMeta(meta: SqliteMeta, intact: Map<string, number>, report: FsckReport): void {
  const referenced = new Set<string>();
  const missingBlocks = new Set<string>();
  let names = 0;
  let versions = 0;
  let lastName = '';
  for (const v of meta.allVersions()) {
    versions++;
    if (v.name !== lastName) names++;
    lastName = v.name;
    referenced.add(v.sha256);
    if (intact.get(v.sha256) === v.sizeBytes) continue;
    missingBlocks.add(v.sha256);
    report.missing.versions++;
    if (report.missing.list.length < FSCK_LIST_MAX) report.missing.list.push({ name: v.name, version: v.version, sha256: v.sha256 });
  }
  report.missing.blocks = missingBlocks.size;
  const refs = meta.checkRefs(FSCK_LIST_MAX);
  report.refs = { problems: refs.total, list: [...refs.mismatched, ...refs.unreferenced.map((sha256) => ({ sha256, refs: null, counted: 0 }))].slice(0, FSCK_LIST_MAX) };
  report.segments.unreferenced = [...intact.keys()].filter((k) => !referenced.has(k)).length;
  report.metadata = { state: 'ok', names, versions, blocks: referenced.size, journalSeq: meta.journalSeq() };
}

/**
 * Build a new database in DATA/meta.sqlite.fsck-tmp from the newest good snapshot and the journal
 * after it; adopt unreferenced intact blocks as lost+found when the chain is incomplete.
 */
async function restore(
  dataDir: string,
  intact: Map<string, number>,
  journal: JournalEntry[],
  report: FsckReport,
  options: FsckOptions,
  progress: (p: FsckProgress) => void,
): Promise<{ meta: SqliteMeta; complete: boolean }> {
  const aside = path.join(dataDir, `fsck-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  fs.mkdirSync(aside);
  for (const suffix of ['', '-wal', '-shm', '-journal']) {
    const f = path.join(dataDir, META_FILE + suffix);
    if (fs.existsSync(f)) fs.renameSync(f, path.join(aside, META_FILE + suffix));
  }
  fsyncPath(dataDir);

  const tmp = path.join(dataDir, `${META_FILE}.fsck-tmp`);
  for (const suffix of ['', '-wal', '-shm']) fs.rmSync(tmp + suffix, { force: true });
  const base = report.snapshots.find((s) => s.problem === undefined && s.seq !== undefined);
  if (base) fs.copyFileSync(base.file, tmp);
  const meta = SqliteMeta.open(tmp);
  const baseSeq = meta.journalSeq();
  const r: NonNullable<FsckReport['restore']> = {
    from: base ? path.basename(base.file) : 'an empty database (no usable snapshot)',
    snapshotSeq: baseSeq,
    replayed: 0,
    failed: [],
    gaps: [],
    chainComplete: true,
    lostFound: 0,
    movedAside: aside,
    journalSeq: baseSeq,
  };
  report.restore = r;

  // Replay: entries must follow the snapshot's number without a gap for the result to be exact; after
  // a gap they are still applied (what fits the state), and the result is marked incomplete.
  const todo = journal.filter((e) => e.seq > baseSeq);
  let expected = baseSeq + 1;
  if (!base && journal.length === 0) r.chainComplete = false; // nothing to rebuild from: names come from lost+found
  for (let i = 0; i < todo.length; i++) {
    const e = todo[i];
    if (e.seq < expected) continue; // a duplicate number (a file moved aside as stale): the first wins
    if (e.seq > expected) {
      r.gaps.push({ afterSeq: expected - 1, nextSeq: e.seq });
      r.chainComplete = false;
    }
    try {
      meta.applyJournalEntry(e);
      r.replayed++;
    } catch (err) {
      r.chainComplete = false;
      if (r.failed.length < FSCK_LIST_MAX) r.failed.push({ seq: e.seq, op: e.op, error: (err as Error).message });
    }
    expected = e.seq + 1;
    if (i % 1024 === 0) progress({ phase: 'replay', done: i, total: todo.length });
  }
  progress({ phase: 'replay', done: todo.length, total: todo.length });

  if (!r.chainComplete) {
    const now = options.nowMs?.() ?? Date.now();
    for (const [sha, size] of intact) {
      if ((await meta.block(sha)) !== undefined) continue;
      await meta.commit(`${LOST_FOUND_MODEL}/${sha}`, sha, size, now, KEEP_VERSIONS_DEFAULT);
      r.lostFound++;
    }
  }
  r.journalSeq = meta.journalSeq();
  return { meta, complete: r.chainComplete && r.failed.length === 0 };
}

/** Recompute wrong reference counts, then drop versions whose content has no intact record. */
async function fixReferences(meta: SqliteMeta, intact: Map<string, number>, report: FsckReport): Promise<void> {
  if (meta.checkRefs(1).total > 0) report.repairs.refsFixed = meta.fixRefs();
  const lost = new Set<string>();
  for (const v of meta.allVersions()) if (intact.get(v.sha256) !== v.sizeBytes) lost.add(v.sha256);
  for (const sha of lost) {
    const { removedVersions } = await meta.forget(sha);
    report.repairs.forgottenBlocks++;
    report.repairs.droppedVersions += removedVersions;
  }
}

/**
 * Put the rebuilt database in place (closed, fsynced, renamed), move the old journal and snapshots aside
 * (they describe the history of the lost file), and start a new chain with a snapshot of the new one.
 */
async function installRestored(dataDir: string, meta: SqliteMeta, report: FsckReport): Promise<void> {
  const r = report.restore!;
  const tmp = path.join(dataDir, `${META_FILE}.fsck-tmp`);
  await meta.close(); // checkpoints the WAL into the file and removes it
  fsyncPath(tmp);
  const journalDir = path.join(dataDir, JOURNAL_DIR_NAME);
  if (fs.existsSync(journalDir)) fs.renameSync(journalDir, path.join(r.movedAside, JOURNAL_DIR_NAME));
  for (const s of report.snapshots) if (fs.existsSync(s.file)) fs.renameSync(s.file, path.join(r.movedAside, path.basename(s.file)));
  const metaFile = path.join(dataDir, META_FILE);
  fs.renameSync(tmp, metaFile);
  fsyncPath(dataDir);
  const fresh = SqliteMeta.open(metaFile, { journalDir });
  try {
    await takeSnapshot(fresh, dataDir);
  } finally {
    await fresh.close();
  }
}

/** EBUSY when a live process of this host holds the directory's files (owner.json names it). */
function refuseIfInUse(dataDir: string): void {
  let owner: { host?: string; pid?: number } = {};
  try {
    owner = JSON.parse(fs.readFileSync(path.join(dataDir, 'owner.json'), 'utf8')) as typeof owner;
  } catch {
    return; // no owner file: SQLite's lock is the check
  }
  if (owner.host !== os.hostname() || typeof owner.pid !== 'number' || owner.pid === process.pid) return;
  // A pid can be reused: it counts only while that process has the directory's files open.
  let fds: string[];
  try {
    fds = fs.readdirSync(`/proc/${owner.pid}/fd`);
  } catch {
    return; // gone (or not ours to look at: SQLite's lock still applies)
  }
  const held = [path.join(dataDir, META_FILE), path.join(dataDir, 'segments') + path.sep];
  for (const fd of fds) {
    let target: string;
    try {
      target = fs.readlinkSync(`/proc/${owner.pid}/fd/${fd}`);
    } catch {
      continue;
    }
    if (held.some((h) => target.startsWith(h))) throw inUseError(dataDir, undefined, owner);
  }
}

function inUseError(dataDir: string, cause?: unknown, owner?: { host?: string; pid?: number }): CascadeError {
  const who = owner?.pid !== undefined ? `pid ${owner.pid} on host ${owner.host}` : 'another process';
  return new CascadeError('EBUSY', `data directory ${dataDir} is in use by ${who}: stop it (cascade unmount) before fsck`, { cause });
}

/**
 * The metadata journal: every mutation SqliteMeta commits is also appended, as one small checksummed
 * entry, to a file in DATA/meta-journal/. With the periodic snapshots of the database
 * (store/meta/snapshot.ts) it lets `cascade fsck --repair` rebuild a lost or corrupt meta.sqlite
 * exactly: restore the newest good snapshot, then re-run the entries that came after it.
 *
 * Why a file of its own rather than fields in the segment records: a block record is written once per
 * content, later, by the flusher, and compaction rewrites it; dedup puts, links, renames, unlinks and
 * pins write no block record at all. Only a log of the mutations themselves replays all of them.
 *
 * Files: `<first seq, 16 digits>.jnl`; a new one at every open and at every snapshot, so a torn tail
 * (kill -9) is never appended after. Entry frame: payload length u32 | crc32(payload) u32 | payload
 * (JSON, see JournalEntry). Sequence numbers are consecutive across files; the database keeps the
 * last one it committed (meta key `journal_seq`), so a snapshot knows where its replay starts.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 } from 'node:zlib';
import { KiB } from '../constants';
import { assert, CascadeError } from '../errors';
import { fsyncPath } from '../tiers/disk-io';
import { mkdirAll } from '../mkdir';

/** The directory of journal files inside a data directory. */
export const JOURNAL_DIR_NAME = 'meta-journal';
/** One entry at most (a rename carries two names of at most 4 KiB each). */
export const JOURNAL_ENTRY_MAX_BYTES = 64 * KiB;
const FRAME_HEADER_BYTES = 8;
const JOURNAL_FILE_RE = /^(\d{16})\.jnl$/;

/** One mutation, with exactly the arguments its MetaEngine call had (replay calls it again). */
export type JournalOp =
  | { op: 'commit'; name: string; sha256: string; sizeBytes: number; timeMs: number; keepVersions: number; ino?: number }
  | { op: 'remove'; name: string }
  | { op: 'rename'; from: string; to: string; timeMs: number; keepVersions: number }
  | { op: 'allocateInodes'; count: number }
  | { op: 'setPinned'; sha256: string; pinned: boolean }
  | { op: 'setMode'; name: string; mode: number }
  | { op: 'makeDir'; name: string; mode: number }
  | { op: 'removeDir'; name: string }
  | { op: 'forget'; sha256: string }
  | { op: 'fixRefs' };

export type JournalEntry = JournalOp & { seq: number };

export interface JournalFileInfo {
  file: string;
  firstSeq: number;
}

export function journalFileName(firstSeq: number): string {
  return `${String(firstSeq).padStart(16, '0')}.jnl`;
}

/** Journal files of a directory, oldest first (missing directory: none). */
export function listJournalFiles(dir: string): JournalFileInfo[] {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  return names
    .map((n) => JOURNAL_FILE_RE.exec(n))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ file: path.join(dir, m[0]), firstSeq: Number(m[1]) }))
    .sort((a, b) => a.firstSeq - b.firstSeq);
}

export function encodeEntry(entry: JournalEntry): Buffer {
  const payload = Buffer.from(JSON.stringify(entry), 'utf8');
  if (payload.length > JOURNAL_ENTRY_MAX_BYTES) throw new CascadeError('EINVAL', `journal entry of ${payload.length} bytes is over ${JOURNAL_ENTRY_MAX_BYTES}`);
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.length);
  frame.writeUInt32LE(payload.length, 0);
  frame.writeUInt32LE(crc32(payload), 4);
  payload.copy(frame, FRAME_HEADER_BYTES);
  return frame;
}

/**
 * The entries numbered after `seq`, consecutive from seq + 1: what the journal holds beyond a database
 * whose last entry is `seq`. Under group commit each mutation is journaled before it returns, ahead of
 * its group's COMMIT, so after a crash these are the acknowledged mutations the database lost. Reading
 * stops at a gap or at a bad frame (a torn tail); what lies past it is not an acknowledged mutation of
 * this sequence.
 */
export function entriesAfter(dir: string, seq: number, reads?: JournalReads): JournalEntry[] {
  const files = listJournalFiles(dir);
  let start = 0;
  for (let i = 0; i < files.length; i++) if (files[i].firstSeq <= seq + 1) start = i;
  const out: JournalEntry[] = [];
  for (const f of files.slice(start)) {
    const read = readJournalFile(f.file);
    reads?.set(f.file, read);
    for (const e of read.entries) {
      const want = seq + out.length + 1;
      if (e.seq < want) continue;
      if (e.seq > want) return out;
      out.push(e);
    }
  }
  return out;
}

/** Appends entries to the current journal file; rotate() starts a new one. Synchronous: it runs inside a commit. */
export class JournalWriter {
  private fd: number;
  private bytes = 0;

  /** `reads`: files entriesAfter() just parsed (unchanged since), so the open reads each only once. */
  constructor(private readonly dir: string, firstSeq: number, reads?: JournalReads) {
    mkdirAll(dir);
    trimBeyond(dir, firstSeq, reads);
    this.fd = this.create(firstSeq);
  }

  /** Bytes appended to the current file. */
  get fileBytes(): number {
    return this.bytes;
  }

  append(entry: JournalEntry): void {
    this.writeFrame(encodeEntry(entry));
  }

  private writeFrame(frame: Buffer): void {
    let done = 0;
    while (done < frame.length) done += fs.writeSync(this.fd, frame, done, frame.length - done);
    this.bytes += frame.length;
  }

  sync(): void {
    fs.fdatasyncSync(this.fd);
  }

  /** Cut the current file back to `fileBytes` (a mark taken from fileBytes since the last rotate). */
  cutBack(fileBytes: number): void {
    assert(Number.isSafeInteger(fileBytes) && fileBytes >= 0 && fileBytes <= this.bytes, `journal cut to ${fileBytes} of ${this.bytes} bytes`);
    fs.ftruncateSync(this.fd, fileBytes);
    this.bytes = fileBytes;
  }

  /** Close the current file (synced) and continue in a new one whose first entry will be `firstSeq`. */
  rotate(firstSeq: number): void {
    const fd = this.create(firstSeq);
    try {
      fs.fdatasyncSync(this.fd);
    } finally {
      fs.closeSync(this.fd);
    }
    this.fd = fd;
    this.bytes = 0;
  }

  close(): void {
    try {
      fs.fdatasyncSync(this.fd);
    } finally {
      fs.closeSync(this.fd);
    }
  }

  private create(firstSeq: number): number {
    const file = path.join(this.dir, journalFileName(firstSeq));
    // A file with this number exists only if an earlier open at the same point appended nothing the
    // database kept; it is moved aside (never deleted), so sequence numbers stay unambiguous.
    if (fs.existsSync(file) && fs.statSync(file).size > 0) fs.renameSync(file, `${file}.stale-${Date.now()}`);
    const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_APPEND, 0o600);
    fsyncPath(this.dir);
    return fd;
  }
}

/**
 * At open (after SqliteMeta replayed what it could of entriesAfter()) the database is the truth.
 * Entries still numbered past it (past a gap, or one that failed to apply) would later be replayed in
 * place of the new changes that reuse their numbers. They are cut off the newest file (a copy of that
 * file is kept beside it as `.beyond-<ms>`).
 */
function trimBeyond(dir: string, firstSeq: number, reads: JournalReads | undefined): void {
  const files = listJournalFiles(dir);
  for (let i = files.length - 1; i >= 0; i--) {
    const f = files[i];
    if (f.firstSeq >= firstSeq) {
      if (fs.statSync(f.file).size > 0) fs.renameSync(f.file, `${f.file}.beyond-${Date.now()}`);
      continue;
    }
    const { entries, endOffsets } = reads?.get(f.file) ?? readJournalFile(f.file);
    if (entries.length === 0 || entries[entries.length - 1].seq < firstSeq) return;
    const kept = entries.findIndex((e) => e.seq >= firstSeq);
    const keepBytes = kept === 0 ? 0 : endOffsets[kept - 1];
    fs.copyFileSync(f.file, `${f.file}.beyond-${Date.now()}`);
    fs.truncateSync(f.file, keepBytes);
    return;
  }
}

/** Journal files already parsed, by path (a newest file can hold 64 MiB of entries: ~0.5 s to parse). */
export type JournalReads = Map<string, ReturnType<typeof readJournalFile>>;

export interface JournalDamage {
  file: string;
  offsetBytes: number;
  reason: string;
}

/**
 * Every readable entry of one file, in order. Reading stops at the first bad frame: a torn tail after
 * a crash, or damage (what follows cannot be framed again reliably); it is reported, not thrown.
 */
export function readJournalFile(file: string): { entries: JournalEntry[]; endOffsets: number[]; damage?: JournalDamage } {
  const buf = fs.readFileSync(file);
  const entries: JournalEntry[] = [];
  /** Where each entry ends in the file. */
  const endOffsets: number[] = [];
  let pos = 0;
  while (pos < buf.length) {
    const bad = (reason: string) => ({ entries, endOffsets, damage: { file, offsetBytes: pos, reason } });
    if (pos + FRAME_HEADER_BYTES > buf.length) return bad('torn frame header');
    const len = buf.readUInt32LE(pos);
    if (len === 0 || len > JOURNAL_ENTRY_MAX_BYTES) return bad(`bad entry length ${len}`);
    if (pos + FRAME_HEADER_BYTES + len > buf.length) return bad('torn entry');
    const payload = buf.subarray(pos + FRAME_HEADER_BYTES, pos + FRAME_HEADER_BYTES + len);
    if (crc32(payload) !== buf.readUInt32LE(pos + 4)) return bad('entry checksum mismatch');
    let entry: JournalEntry;
    try {
      entry = JSON.parse(payload.toString('utf8')) as JournalEntry;
    } catch {
      return bad('entry is not JSON');
    }
    if (!Number.isSafeInteger(entry.seq) || entry.seq < 1 || typeof entry.op !== 'string') return bad('entry without seq or op');
    entries.push(entry);
    pos += FRAME_HEADER_BYTES + len;
    endOffsets.push(pos);
  }
  return { entries, endOffsets };
}

/**
 * Remove journal files whose every entry is at or below `coveredSeq` (a kept snapshot has them). A
 * file's last entry is the next file's first seq - 1; the newest file is always kept.
 */
export function pruneJournal(dir: string, coveredSeq: number): number {
  const files = listJournalFiles(dir);
  let removed = 0;
  for (let i = 0; i + 1 < files.length; i++) {
    if (files[i + 1].firstSeq - 1 > coveredSeq) break;
    fs.rmSync(files[i].file, { force: true });
    removed++;
  }
  if (removed > 0) fsyncPath(dir);
  return removed;
}


/** The SQLite metadata's schema, its rows as records, and the statements SqliteMeta prepares once. */
import Database from 'better-sqlite3';
import { CascadeError, type ErrorCode } from '../errors';
import type { BlockRecord, VersionRecord } from '../meta';

/** Directories made by mkdir (schema 4). */
export const DIRS_SCHEMA = 'CREATE TABLE dirs (name TEXT PRIMARY KEY, mode INTEGER NOT NULL) WITHOUT ROWID;';

export const SCHEMA = `
  CREATE TABLE names (
    name TEXT PRIMARY KEY,
    last_version INTEGER NOT NULL, -- numbers are not reused while the name exists, even after forget()
    mode INTEGER -- permission bits set by chmod; NULL: 0644 (schema 3)
  ) WITHOUT ROWID;
  CREATE TABLE versions (
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    sha TEXT NOT NULL,
    size INTEGER NOT NULL,
    time_ms INTEGER NOT NULL,
    ino INTEGER NOT NULL, -- the file this version belongs to (schema 2)
    PRIMARY KEY (name, version)
  ) WITHOUT ROWID;
  CREATE INDEX versions_by_sha ON versions (sha);
  CREATE TABLE blocks (
    sha TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    refs INTEGER NOT NULL CHECK (refs > 0),
    pinned INTEGER NOT NULL
  ) WITHOUT ROWID;
  ${DIRS_SCHEMA}
`;

export interface VersionRow {
  name: string;
  version: number;
  sha: string;
  size: number;
  time_ms: number;
  ino: number;
}

export interface BlockRow {
  sha: string;
  size: number;
  refs: number;
  pinned: number;
}

export const VERSION_COLUMNS = 'name, version, sha, size, time_ms, ino';

export function toVersion(row: VersionRow): VersionRecord {
  return { name: row.name, version: row.version, sha256: row.sha, sizeBytes: row.size, timeMs: row.time_ms, ino: row.ino };
}

export function toBlock(row: BlockRow): BlockRecord {
  return { sha256: row.sha, sizeBytes: row.size, refs: row.refs, pinned: row.pinned !== 0 };
}

/** SQLite failures become CascadeErrors so that the FUSE boundary can translate them; others pass. */
export function mapError(e: unknown): unknown {
  if (!(e instanceof Database.SqliteError)) return e;
  let code: ErrorCode = 'EIO';
  if (e.code.startsWith('SQLITE_FULL')) code = 'ENOSPC';
  else if (e.code.startsWith('SQLITE_BUSY') || e.code.startsWith('SQLITE_LOCKED')) code = 'EBUSY';
  else if (e.code.startsWith('SQLITE_CORRUPT') || e.code === 'SQLITE_NOTADB') code = 'ECORRUPT';
  return new CascadeError(code, `metadata database: ${e.message} (${e.code})`, { cause: e });
}

/** Every statement, prepared once per connection. */
export function prepareStatements(db: Database.Database) {
  const listSql = (lower: '>=' | '>', bounded: boolean): string =>
    `SELECT name FROM names WHERE name ${lower} ?${bounded ? ' AND name < ?' : ''} ORDER BY name LIMIT ?`;
  return {
    current: db.prepare<[string], VersionRow>(`SELECT ${VERSION_COLUMNS} FROM versions WHERE name = ? ORDER BY version DESC LIMIT 1`),
    version: db.prepare<[string, number], VersionRow>(`SELECT ${VERSION_COLUMNS} FROM versions WHERE name = ? AND version = ?`),
    versionAt: db.prepare<[string, number], VersionRow>(
      `SELECT ${VERSION_COLUMNS} FROM versions WHERE name = ? AND time_ms <= ? ORDER BY version DESC LIMIT 1`,
    ),
    versions: db.prepare<[string], VersionRow>(`SELECT ${VERSION_COLUMNS} FROM versions WHERE name = ? ORDER BY version`),
    // Retained versions past the newest `keep`: the ones a trim removes.
    beyondKeep: db.prepare<[string, number], VersionRow>(
      `SELECT ${VERSION_COLUMNS} FROM versions WHERE name = ? ORDER BY version DESC LIMIT -1 OFFSET ?`,
    ),
    bySha: db.prepare<[string], VersionRow>(`SELECT ${VERSION_COLUMNS} FROM versions WHERE sha = ?`),
    insertVersion: db.prepare<[string, number, string, number, number, number]>(
      'INSERT INTO versions (name, version, sha, size, time_ms, ino) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    deleteVersion: db.prepare<[string, number]>('DELETE FROM versions WHERE name = ? AND version = ?'),
    deleteVersions: db.prepare<[string]>('DELETE FROM versions WHERE name = ?'),

    lastVersion: db.prepare<[string], number>('SELECT last_version FROM names WHERE name = ?').pluck(),
    upsertName: db.prepare<[string, number]>(
      'INSERT INTO names (name, last_version) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET last_version = excluded.last_version',
    ),
    deleteName: db.prepare<[string]>('DELETE FROM names WHERE name = ?'),
    setMode: db.prepare<[number | null, string]>('UPDATE names SET mode = ? WHERE name = ?'),
    modeOf: db.prepare<[string], number | null>('SELECT mode FROM names WHERE name = ?').pluck(),
    modes: db.prepare<[string, number], { name: string; mode: number }>('SELECT name, mode FROM names WHERE mode IS NOT NULL AND name > ? ORDER BY name LIMIT ?'),
    makeDir: db.prepare<[string, number]>('INSERT INTO dirs (name, mode) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET mode = excluded.mode'),
    removeDir: db.prepare<[string]>('DELETE FROM dirs WHERE name = ?'),
    dirMode: db.prepare<[string], number>('SELECT mode FROM dirs WHERE name = ?').pluck(),
    dirsFrom: db.prepare<[string, string, number], { name: string; mode: number }>('SELECT name, mode FROM dirs WHERE name > ? AND name >= ? ORDER BY name LIMIT ?'),
    listFrom: db.prepare<[string, number], string>(listSql('>=', false)).pluck(),
    listAfter: db.prepare<[string, number], string>(listSql('>', false)).pluck(),
    listFromBounded: db.prepare<[string, string, number], string>(listSql('>=', true)).pluck(),
    listAfterBounded: db.prepare<[string, string, number], string>(listSql('>', true)).pluck(),

    block: db.prepare<[string], BlockRow>('SELECT sha, size, refs, pinned FROM blocks WHERE sha = ?'),
    blocks: db.prepare<[], BlockRow>('SELECT sha, size, refs, pinned FROM blocks ORDER BY sha'),
    insertBlock: db.prepare<[string, number]>('INSERT INTO blocks (sha, size, refs, pinned) VALUES (?, ?, 1, 0)'),
    setRefs: db.prepare<[number, string]>('UPDATE blocks SET refs = ? WHERE sha = ?'),
    setPinned: db.prepare<[number, string]>('UPDATE blocks SET pinned = ? WHERE sha = ?'),
    deleteBlock: db.prepare<[string]>('DELETE FROM blocks WHERE sha = ?'),

    countNames: db.prepare<[], number>('SELECT count(*) FROM names').pluck(),
    versionTotals: db.prepare<[], { n: number; bytes: number }>('SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes FROM versions'),
    blockTotals: db.prepare<[], { n: number; bytes: number; pinned: number }>(
      'SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes, coalesce(sum(CASE WHEN pinned <> 0 THEN size ELSE 0 END), 0) AS pinned FROM blocks',
    ),
    bumpSyncCount: db.prepare("UPDATE meta SET value = value + 1 WHERE key = 'sync_count'"),
    nextIno: db.prepare<[], number>("SELECT value FROM meta WHERE key = 'next_ino'").pluck(),
    journalSeq: db.prepare<[], number>("SELECT value FROM meta WHERE key = 'journal_seq'").pluck(),
    setJournalSeq: db.prepare<[number]>("UPDATE meta SET value = ? WHERE key = 'journal_seq'"),
    allVersions: db.prepare<[], VersionRow>(`SELECT ${VERSION_COLUMNS} FROM versions ORDER BY name, version`),
    // Versions per content, for the reference counts (fsck): content in versions, in blocks, or both.
    refCounts: db.prepare<[], { sha: string; counted: number; size: number; refs: number | null }>(
      `SELECT v.sha AS sha, count(*) AS counted, min(v.size) AS size, b.refs AS refs FROM versions v LEFT JOIN blocks b ON b.sha = v.sha GROUP BY v.sha`,
    ),
    blocksWithoutVersions: db.prepare<[], BlockRow>('SELECT sha, size, refs, pinned FROM blocks b WHERE NOT EXISTS (SELECT 1 FROM versions v WHERE v.sha = b.sha)'),
    setNextIno: db.prepare<[number]>("UPDATE meta SET value = ? WHERE key = 'next_ino'"),
  };
}

export type Statements = ReturnType<typeof prepareStatements>;

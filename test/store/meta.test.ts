import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Database from 'better-sqlite3';
import { INODE_FIRST_ALLOCATED } from '../../store/constants';
import { isCascadeError, type ErrorCode } from '../../store/errors';
import type { MetaEngine } from '../../store/meta';
import { MemoryMeta } from '../../store/meta/memory';
import { GROUP_COMMIT_DELAY_MS, SqliteMeta } from '../../store/meta/sqlite';
import { listJournalFiles, readJournalFile } from '../../store/meta/journal';
import { metaConformance, sha } from './meta-conformance';

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-meta-'));
}

metaConformance('memory', async () => {
  const engine = new MemoryMeta();
  return { engine, cleanup: () => engine.close() };
});

metaConformance('sqlite', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'meta.db');
  let latest: MetaEngine = SqliteMeta.open(file);
  return {
    engine: latest,
    reopen: async () => (latest = SqliteMeta.open(file)),
    cleanup: async () => {
      await latest.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

function throwsWith(fn: () => unknown, code: ErrorCode): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(isCascadeError(e, code), `expected CascadeError ${code}, got ${String(e)}`);
    return true;
  });
}

describe('SqliteMeta', function () {
  let dir: string;
  let file: string;

  beforeEach(function () {
    dir = tempDir();
    file = path.join(dir, 'meta.db');
  });

  afterEach(function () {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** Runs `body` in a child process that opens the database, then SIGKILLs the child once it prints ok. */
  async function killedAfter(body: string, groupCommitMs: number, journalDir?: string): Promise<void> {
    const modulePath = path.join(__dirname, '..', '..', 'store', 'meta', 'sqlite.js');
    assert.ok(fs.existsSync(modulePath), `compiled engine at ${modulePath}`);
    const childCode = `
      const { SqliteMeta } = require(process.env.CASCADE_META_MODULE);
      (async () => {
        const meta = SqliteMeta.open(process.env.CASCADE_META_DB, { groupCommitMs: ${groupCommitMs}, journalDir: ${journalDir === undefined ? 'undefined' : JSON.stringify(journalDir)} });
        ${body}
        process.stdout.write('ok\\n');
        setInterval(() => {}, 1 << 30); // hold the database open until killed
      })().catch((e) => { console.error(e); process.exit(1); });
    `;
    const child = spawn(process.execPath, ['-e', childCode], {
      env: { ...process.env, CASCADE_META_MODULE: modulePath, CASCADE_META_DB: file },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    await new Promise<void>((resolve, reject) => {
      let stdout = '';
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        if (stdout.includes('ok\n')) resolve();
      });
      child.on('exit', (code) => reject(new Error(`child exited (${code}) before committing: ${stderr}`)));
    });
    child.kill('SIGKILL');
    assert.equal(await exited, 'SIGKILL');
    // The child never closed the database, so the commits can only be in the WAL it left behind.
    assert.ok(fs.statSync(`${file}-wal`).size > 0, 'the killed process left its WAL');
  }

  it('keeps commits, synced or not, of a process killed with SIGKILL once their group committed', async function () {
    await killedAfter(
      `await meta.commit('m/synced', '${sha('synced')}', 111, 1000, 8);
       await meta.sync();
       await meta.commit('m/unsynced', '${sha('unsynced')}', 222, 2000, 8);
       await new Promise((r) => setTimeout(r, 100)); // well past the group's window`,
      GROUP_COMMIT_DELAY_MS,
    );
    const meta = SqliteMeta.open(file);
    try {
      const synced = await meta.current('m/synced');
      assert.deepEqual(synced, { name: 'm/synced', version: 1, sha256: sha('synced'), sizeBytes: 111, timeMs: 1000, ino: synced?.ino });
      const unsynced = await meta.current('m/unsynced');
      assert.deepEqual(unsynced, {
        name: 'm/unsynced',
        version: 1,
        sha256: sha('unsynced'),
        sizeBytes: 222,
        timeMs: 2000,
        ino: unsynced?.ino,
      });
      assert.notEqual(synced?.ino, unsynced?.ino);
      assert.ok(!Number.isNaN(Number(synced?.ino)) && synced!.ino >= INODE_FIRST_ALLOCATED);
      assert.deepEqual(await meta.totals(), { names: 2, versions: 2, blocks: 2, uniqueBytes: 333, logicalBytes: 333, pinnedBytes: 0 });
    } finally {
      await meta.close();
    }
  });

  it('keeps every synced commit and every returned rename of a process killed with its group open, and loses only that group', async function () {
    await killedAfter(
      `for (let i = 0; i < 5; i++) await meta.commit('m/synced-' + i, '${sha('synced')}', 111, 1000 + i, 8);
       await meta.sync();
       await meta.commit('m/src', '${sha('moved')}', 333, 1500, 8);
       await meta.rename('m/src', 'm/moved', 1501, 8);
       for (let i = 0; i < 5; i++) await meta.commit('m/open-' + i, '${sha('open')}', 222, 2000 + i, 8);`,
      1000,
    );
    const meta = SqliteMeta.open(file);
    try {
      assert.deepEqual(await meta.list('m/', { limit: 100 }), ['m/moved', 'm/synced-0', 'm/synced-1', 'm/synced-2', 'm/synced-3', 'm/synced-4']);
      assert.equal((await meta.current('m/moved'))?.sha256, sha('moved'));
      assert.deepEqual(await meta.totals(), { names: 6, versions: 6, blocks: 2, uniqueBytes: 444, logicalBytes: 888, pinnedBytes: 0 });
    } finally {
      await meta.close();
    }
  });

  it('group commit with a journal: the group a SIGKILL kept from committing, a rename in it too, is applied again from the journal at the next open', async function () {
    // Lost with the process, a block flushed to disk under two names could stay for one name and go
    // for the other.
    const journalDir = path.join(dir, 'journal');
    await killedAfter(
      `await meta.commit('m/synced', '${sha('synced')}', 111, 1000, 8);
       await meta.sync();
       for (let i = 0; i < 5; i++) await meta.commit('m/open-' + i, '${sha('open')}', 222, 2000 + i, 8);
       await meta.rename('m/open-4', 'm/moved', 2100, 8);
       for (let i = 5; i < 8; i++) await meta.commit('m/open-' + i, '${sha('open')}', 222, 2000 + i, 8);`,
      1000,
      journalDir,
    );
    const lost = SqliteMeta.open(file); // without the journal: what the database alone kept
    try {
      // The rename waited in the group too (a journal replays it): only the synced commit is there.
      assert.equal((await lost.totals()).names, 1, 'the group of open-0..7 and the rename never committed');
    } finally {
      await lost.close();
    }
    const meta = SqliteMeta.open(file, { journalDir, groupCommitMs: 1000 });
    try {
      assert.equal(meta.replayedAtOpen, 9, 'eight commits and the rename between them');
      assert.deepEqual(await meta.list('m/', { limit: 100 }), ['m/moved', 'm/open-0', 'm/open-1', 'm/open-2', 'm/open-3', 'm/open-5', 'm/open-6', 'm/open-7', 'm/synced']);
      assert.deepEqual(await meta.current('m/open-7'), { name: 'm/open-7', version: 1, sha256: sha('open'), sizeBytes: 222, timeMs: 2007, ino: (await meta.current('m/open-7'))!.ino });
      assert.deepEqual(await meta.totals(), { names: 9, versions: 9, blocks: 2, uniqueBytes: 333, logicalBytes: 111 + 8 * 222, pinnedBytes: 0 });
      await meta.commit('m/after', sha('after'), 1, 3000, 8); // numbering goes on after the replayed entries
    } finally {
      await meta.close();
    }
    const entries = listJournalFiles(journalDir).flatMap((f) => readJournalFile(f.file).entries);
    assert.deepEqual(
      entries.map((e) => e.seq),
      Array.from({ length: entries.length }, (_, i) => i + 1),
      'one entry per number, none twice',
    );
    const again = SqliteMeta.open(file, { journalDir });
    try {
      assert.equal(again.replayedAtOpen, 0, 'a clean close leaves nothing to apply');
      assert.equal((await again.totals()).names, 10);
    } finally {
      await again.close();
    }
  });

  it('group commit is on by default with a journal (which makes it crash-safe), off without one', async function () {
    const journaled = SqliteMeta.open(file, { journalDir: path.join(dir, 'journal') });
    try {
      await journaled.commit('m/a', sha(1), 1, 1000, 8);
      assert.equal(journaled.groupCommits, 0, 'the commit waits in an open group');
      const deadline = Date.now() + 5000;
      while (journaled.groupCommits === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      assert.equal(journaled.groupCommits, 1, `the group committed after its ${GROUP_COMMIT_DELAY_MS} ms window`);
    } finally {
      await journaled.close();
    }
    const plain = SqliteMeta.open(path.join(dir, 'plain.db'));
    try {
      await plain.commit('m/a', sha(1), 1, 1000, 8);
      assert.equal(plain.groupCommits, 0, 'no group: the commit committed alone');
    } finally {
      await plain.close();
    }
  });

  it('journal replay at open stops at an entry that does not apply and sets it and the rest aside', async function () {
    const journalDir = path.join(dir, 'journal');
    const meta = SqliteMeta.open(file, { journalDir });
    await meta.commit('m/a', sha(1), 1, 1000, 8);
    await meta.close();
    // Entries beyond the database, as a crash would leave them: one that applies, one that cannot (its
    // source does not exist), one after it.
    const { encodeEntry, journalFileName } = await import('../../store/meta/journal');
    fs.writeFileSync(
      path.join(journalDir, journalFileName(2)),
      Buffer.concat([
        encodeEntry({ seq: 2, op: 'commit', name: 'm/b', sha256: sha(2), sizeBytes: 2, timeMs: 2000, keepVersions: 8 }),
        encodeEntry({ seq: 3, op: 'rename', from: 'm/nope', to: 'm/c', timeMs: 3000, keepVersions: 8 }),
        encodeEntry({ seq: 4, op: 'commit', name: 'm/d', sha256: sha(4), sizeBytes: 4, timeMs: 4000, keepVersions: 8 }),
      ]),
    );
    const again = SqliteMeta.open(file, { journalDir });
    try {
      assert.equal(again.replayedAtOpen, 1);
      assert.deepEqual(await again.list('m/', { limit: 10 }), ['m/a', 'm/b']);
    } finally {
      await again.close();
    }
    assert.ok(fs.readdirSync(journalDir).some((n) => n.includes('.beyond-')), 'the entries not applied are kept aside');
    const third = SqliteMeta.open(file, { journalDir });
    try {
      assert.equal(third.replayedAtOpen, 0, 'they are not applied later in place of new entries');
      assert.deepEqual(await third.list('m/', { limit: 10 }), ['m/a', 'm/b']);
    } finally {
      await third.close();
    }
  });

  it('group commit: reads see each mutation at once, a failing one undoes only itself, the group commits after its window or with a rename', async function () {
    const meta = SqliteMeta.open(file, { groupCommitMs: 200 });
    try {
      await meta.commit('m/a', sha(1), 10, 1000, 8);
      await meta.commit('m/b', sha(2), 20, 1001, 8);
      await assert.rejects(meta.rename('m/missing', 'm/c', 1002, 8), (e: unknown) => (e as { code?: string }).code === 'ENOENT');
      await meta.commit('m/d', sha(1), 10, 1004, 8);
      assert.equal(meta.groupCommits, 0, 'nothing committed inside the window');
      assert.deepEqual(await meta.list('m/', { limit: 10 }), ['m/a', 'm/b', 'm/d']);
      assert.deepEqual(await meta.totals(), { names: 3, versions: 3, blocks: 2, uniqueBytes: 30, logicalBytes: 40, pinnedBytes: 0 });
      const deadline = Date.now() + 5000;
      while (meta.groupCommits === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(meta.groupCommits, 1, 'one commit for the whole group');
      await meta.commit('m/e', sha(3), 30, 1005, 8);
      await meta.rename('m/b', 'm/c', 1006, 8);
      assert.equal(meta.groupCommits, 2, 'the rename committed the open group with itself');
      assert.equal((await meta.current('m/c'))?.sha256, sha(2));
    } finally {
      await meta.close();
    }
    const again = SqliteMeta.open(file);
    try {
      assert.deepEqual(await again.list('m/', { limit: 10 }), ['m/a', 'm/c', 'm/d', 'm/e']);
      assert.deepEqual(await again.totals(), { names: 4, versions: 4, blocks: 3, uniqueBytes: 60, logicalBytes: 70, pinnedBytes: 0 });
    } finally {
      await again.close();
    }
  });

  it('group commit: a burst commits at the group bound without waiting, close commits the rest, the journal gets every entry', async function () {
    const journalDir = path.join(dir, 'journal');
    const meta = SqliteMeta.open(file, { groupCommitMs: 1000, journalDir });
    try {
      for (let i = 0; i < 300; i++) await meta.commit(`m/f${i}`, sha(i + 1), 4096, 1000 + i, 8);
      assert.equal(meta.groupCommits, 1, 'the first 256 committed at the bound');
    } finally {
      await meta.close();
    }
    assert.equal(meta.groupCommits, 2, 'close committed the open group');
    const entries = listJournalFiles(journalDir).flatMap((f) => readJournalFile(f.file).entries);
    assert.deepEqual(
      entries.map((e) => e.seq),
      Array.from({ length: 300 }, (_, i) => i + 1),
    );
    const again = SqliteMeta.open(file);
    try {
      assert.equal((await again.totals()).names, 300);
    } finally {
      await again.close();
    }
  });

  it('refuses a database with a newer schema (EINVAL), leaving it as it was', async function () {
    const meta = SqliteMeta.open(file);
    await meta.commit('m/a', sha(1), 1, 1000, 8);
    await meta.close();
    const raw = new Database(file);
    raw.prepare("UPDATE meta SET value = 1000000 WHERE key = 'schema_version'").run();
    raw.close();

    throwsWith(() => SqliteMeta.open(file), 'EINVAL');

    const check = new Database(file, { readonly: true });
    try {
      assert.equal(check.prepare("SELECT value FROM meta WHERE key = 'schema_version'").pluck().get(), 1000000);
      assert.equal(check.prepare('SELECT count(*) FROM versions').pluck().get(), 1);
    } finally {
      check.close();
    }
  });

  it('migrates a schema-1 database: every name becomes a file with its own inode number, nothing lost', async function () {
    // Schema 1 as it shipped: no inode numbers, no next_ino.
    const raw = new Database(file);
    raw.exec(`
      CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
      CREATE TABLE names (name TEXT PRIMARY KEY, last_version INTEGER NOT NULL) WITHOUT ROWID;
      CREATE TABLE versions (name TEXT NOT NULL, version INTEGER NOT NULL, sha TEXT NOT NULL, size INTEGER NOT NULL,
        time_ms INTEGER NOT NULL, PRIMARY KEY (name, version)) WITHOUT ROWID;
      CREATE INDEX versions_by_sha ON versions (sha);
      CREATE TABLE blocks (sha TEXT PRIMARY KEY, size INTEGER NOT NULL, refs INTEGER NOT NULL CHECK (refs > 0), pinned INTEGER NOT NULL) WITHOUT ROWID;
      INSERT INTO meta VALUES ('schema_version', 1), ('sync_count', 0);
      INSERT INTO names VALUES ('m/a', 2), ('m/b', 1);
      INSERT INTO versions VALUES ('m/a', 1, '${sha(1)}', 1, 1000), ('m/a', 2, '${sha(2)}', 2, 2000), ('m/b', 1, '${sha(1)}', 1, 3000);
      INSERT INTO blocks VALUES ('${sha(1)}', 1, 2, 0), ('${sha(2)}', 2, 1, 1);
    `);
    raw.close();
    const meta = SqliteMeta.open(file);
    try {
      const a = await meta.versions('m/a');
      const b = await meta.versions('m/b');
      assert.deepEqual(a.map((v) => [v.version, v.sha256, v.timeMs]), [[1, sha(1), 1000], [2, sha(2), 2000]]);
      assert.equal(a[0].ino, a[1].ino, 'the versions of one name are one file');
      assert.ok(a[0].ino >= INODE_FIRST_ALLOCATED && b[0].ino >= INODE_FIRST_ALLOCATED && a[0].ino !== b[0].ino);
      assert.deepEqual(await meta.block(sha(2)), { sha256: sha(2), sizeBytes: 2, refs: 1, pinned: true });
      const fresh = await meta.allocateInodes(1);
      assert.ok(fresh > Math.max(a[0].ino, b[0].ino), 'the counter starts past the migrated numbers');
      await meta.makeDir('m/d', 0o700);
      assert.deepEqual(await meta.dirs('', { limit: 10 }), [['m/d', 0o700]], 'the migrated database keeps directories');
    } finally {
      await meta.close();
    }
  });

  it('refuses a database that is not its own (EINVAL) and a file that is not a database (ECORRUPT)', function () {
    const raw = new Database(file);
    raw.exec('CREATE TABLE other (x)');
    raw.close();
    throwsWith(() => SqliteMeta.open(file), 'EINVAL');

    const junk = path.join(dir, 'junk.db');
    fs.writeFileSync(junk, Buffer.alloc(8192, 0x5a));
    throwsWith(() => SqliteMeta.open(junk), 'ECORRUPT');
  });

  it('checkpoints the WAL once idle, not on the commits of a burst', async function () {
    // One commit per mutation, the WAL's worst case.
    const meta = SqliteMeta.open(file, { groupCommitMs: 0 });
    try {
      const dbBytes = () => fs.statSync(file).size;
      const before = dbBytes();
      // 400 commits write well over the 1,000 WAL pages at which SQLite would checkpoint by itself.
      for (let i = 0; i < 400; i++) await meta.commit(`m/burst/file-${i}`, sha(i + 1), 4096, 1000 + i, 8);
      assert.ok(fs.statSync(`${file}-wal`).size > 1000 * 4096, 'the burst stays in the WAL');
      assert.equal(dbBytes(), before, 'no checkpoint during the burst');
      assert.equal(meta.idleCheckpoints, 0);
      const deadline = Date.now() + 5000;
      while (meta.idleCheckpoints === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.equal(meta.idleCheckpoints, 1, 'one checkpoint once idle');
      assert.ok(dbBytes() > before, 'the checkpoint copied the pages into the database file');
      assert.equal((await meta.current('m/burst/file-399'))?.sha256, sha(400));
    } finally {
      await meta.close();
    }
  });

  it('lets one engine at a time open a database (EBUSY for the second)', async function () {
    const first = SqliteMeta.open(file);
    try {
      await first.commit('m/a', sha(1), 1, 1000, 8);
      throwsWith(() => SqliteMeta.open(file), 'EBUSY');
    } finally {
      await first.close();
    }
    const second = SqliteMeta.open(file);
    try {
      assert.equal((await second.current('m/a'))?.version, 1);
    } finally {
      await second.close();
    }
  });
});

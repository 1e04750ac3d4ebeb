import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Database from 'better-sqlite3';
import { isCascadeError, type ErrorCode } from '../../store/errors';
import type { MetaEngine } from '../../store/meta';
import { MemoryMeta } from '../../store/meta/memory';
import { SqliteMeta } from '../../store/meta/sqlite';
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

  it('keeps commits, synced or not, of a process killed with SIGKILL', async function () {
    const modulePath = path.join(__dirname, '..', '..', 'store', 'meta', 'sqlite.js');
    assert.ok(fs.existsSync(modulePath), `compiled engine at ${modulePath}`);
    const childCode = `
      const { SqliteMeta } = require(process.env.CASCADE_META_MODULE);
      (async () => {
        const meta = SqliteMeta.open(process.env.CASCADE_META_DB);
        await meta.commit('m/synced', '${sha('synced')}', 111, 1000, 8);
        await meta.sync();
        await meta.commit('m/unsynced', '${sha('unsynced')}', 222, 2000, 8);
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

    const meta = SqliteMeta.open(file);
    try {
      assert.deepEqual(await meta.current('m/synced'), { name: 'm/synced', version: 1, sha256: sha('synced'), sizeBytes: 111, timeMs: 1000 });
      assert.deepEqual(await meta.current('m/unsynced'), {
        name: 'm/unsynced',
        version: 1,
        sha256: sha('unsynced'),
        sizeBytes: 222,
        timeMs: 2000,
      });
      assert.deepEqual(await meta.totals(), { names: 2, versions: 2, blocks: 2, uniqueBytes: 333, logicalBytes: 333, pinnedBytes: 0 });
    } finally {
      await meta.close();
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

  it('refuses a database that is not its own (EINVAL) and a file that is not a database (ECORRUPT)', function () {
    const raw = new Database(file);
    raw.exec('CREATE TABLE other (x)');
    raw.close();
    throwsWith(() => SqliteMeta.open(file), 'EINVAL');

    const junk = path.join(dir, 'junk.db');
    fs.writeFileSync(junk, Buffer.alloc(8192, 0x5a));
    throwsWith(() => SqliteMeta.open(junk), 'ECORRUPT');
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

/**
 * Metadata loss and `fsck`: files written through the store, then meta.sqlite corrupted (pages
 * overwritten), deleted, deleted after commits newer than the last snapshot, or lost with its snapshots
 * and journal; fsck --repair must make every committed name read back byte-exact with its versions,
 * and a damaged segment record must be reported and never served.
 */
import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fsck, FSCK_EXIT, LOST_FOUND_MODEL } from '../../store/fsck';
import { JOURNAL_DIR_NAME, JournalWriter, listJournalFiles, readJournalFile } from '../../store/meta/journal';
import { META_FILE, SNAPSHOT_FILE, SNAPSHOT_PREVIOUS_FILE, listSnapshots } from '../../store/meta/snapshot';
import { Store, type StoreConfig } from '../../store/store';
import type { VersionRecord } from '../../store/meta';
import { isCascadeError } from '../../store/errors';
import { rejectsWith, rmDir, seededBytes, sha256, tmpDir } from './helpers';

const MiB = 1024 * 1024;

function config(dir: string, extra: Partial<StoreConfig> = {}): StoreConfig {
  return { dataDir: dir, dramCapacityBytes: 64 * MiB, dram: 'memory', prefault: false, ...extra };
}

/** What every name should read back as: its versions (number, sha256, size, time, ino) and pins. */
interface Expected {
  versions: Map<string, VersionRecord[]>;
  pinned: Set<string>;
  gone: string[];
  /** Every kept mode (chmod): they must come back too. */
  modes: Array<[string, number]>;
}

async function expectedOf(store: Store, names: string[], gone: string[]): Promise<Expected> {
  const versions = new Map<string, VersionRecord[]>();
  const pinned = new Set<string>();
  for (const n of names) {
    versions.set(n, await store.versions(n));
    if ((await store.stat(n)).pinned) pinned.add(n);
  }
  return { versions, pinned, gone, modes: await store.modes() };
}

/** Every name: the same versions, every version's bytes match its SHA-256; removed names stay removed. */
async function verify(dir: string, want: Expected): Promise<void> {
  const store = await Store.open(config(dir));
  try {
    for (const [name, versions] of want.versions) {
      assert.deepEqual(await store.versions(name), versions, name);
      for (const v of versions) {
        const data = await store.get(name, { version: v.version });
        assert.equal(sha256(data), v.sha256, `${name} v${v.version}`);
      }
      assert.equal((await store.stat(name)).pinned, want.pinned.has(name), `${name} pinned`);
    }
    for (const name of want.gone) await rejectsWith(() => store.stat(name), 'ENOENT');
    if (want.modes.length > 0) assert.deepEqual(await store.modes(), want.modes, 'modes');
  } finally {
    await store.close();
  }
}

/**
 * A mixed history: new content, overwrites, a dedup put, a link, a write-then-rename (what vLLM and
 * LMCache do), an unlink, a pin. Returns the names that exist and those removed.
 */
async function workload(store: Store, seed: number): Promise<{ names: string[]; gone: string[] }> {
  const names: string[] = [];
  for (let i = 0; i < 12; i++) {
    const name = `llama/s${seed}/b${i}`;
    await store.put(name, seededBytes(seed * 100 + i, 1000 + i * 37_000));
    names.push(name);
  }
  await store.put(names[0], seededBytes(seed * 100 + 50, 70_000)); // version 2
  await store.put(names[0], seededBytes(seed * 100 + 51, 5_000)); // version 3
  await store.put(`llama/s${seed}/dup`, seededBytes(seed * 100 + 1, 1000 + 37_000)); // content of b1: dedup
  names.push(`llama/s${seed}/dup`);
  const b2 = await store.stat(names[2]);
  await store.link(`llama/s${seed}/linked`, b2.sha256);
  names.push(`llama/s${seed}/linked`);
  await store.put(`llama/s${seed}/.tmp-b20`, seededBytes(seed * 100 + 20, 200_000));
  await store.rename(`llama/s${seed}/.tmp-b20`, `llama/s${seed}/b20`);
  names.push(`llama/s${seed}/b20`);
  await store.delete(names[3]);
  const gone = [names[3], `llama/s${seed}/.tmp-b20`];
  await store.pin(names[4]);
  await store.setMode(names[5], 0o600); // chmod: a rename carries it, fsck must bring it back
  return { names: names.filter((n) => !gone.includes(n)), gone };
}

/** Overwrite every page but the first (the header) with garbage: the tables are gone, the file still opens. */
function corruptPages(file: string): void {
  const size = fs.statSync(file).size;
  const fd = fs.openSync(file, 'r+');
  try {
    for (let off = 4096; off < size; off += 4096) fs.writeSync(fd, seededBytes(off, 4096), 0, 4096, off);
  } finally {
    fs.closeSync(fd);
  }
}

describe('fsck and metadata recovery', function () {
  this.timeout(120_000);
  let dir = '';
  beforeEach(() => {
    dir = tmpDir('fsck');
  });
  afterEach(() => rmDir(dir));

  /** The workload, closed cleanly (a snapshot at close). */
  async function populated(): Promise<Expected> {
    const store = await Store.open(config(dir));
    try {
      const { names, gone } = await workload(store, 1);
      return await expectedOf(store, names, gone);
    } finally {
      await store.close();
    }
  }

  it('a clean store is reported clean (exit 0) and the check changes nothing', async () => {
    await populated();
    const before = fs.readFileSync(path.join(dir, META_FILE));
    const r = await fsck({ dataDir: dir });
    assert.equal(r.exitCode, FSCK_EXIT.clean, r.problems.join('; '));
    assert.deepEqual(r.problems, []);
    assert.equal(r.metadata.state, 'ok');
    assert.equal(r.segments.damaged, 0);
    assert.ok(r.segments.records >= 14, `${r.segments.records} records`);
    assert.equal(r.missing.versions, 0);
    assert.equal(r.refs.problems, 0);
    assert.equal(r.snapshots.length, 1);
    assert.ok(fs.readFileSync(path.join(dir, META_FILE)).equals(before), 'meta.sqlite unchanged');
  });

  it('a corrupt meta.sqlite: the store refuses with ECORRUPT naming fsck; fsck --repair restores everything exactly', async () => {
    const want = await populated();
    corruptPages(path.join(dir, META_FILE));
    await assert.rejects(Store.open(config(dir)), (e: unknown) => isCascadeError(e, 'ECORRUPT') && /cascade fsck --repair --data/.test(e.message));
    const check = await fsck({ dataDir: dir });
    assert.equal(check.exitCode, FSCK_EXIT.problems);
    assert.equal(check.metadata.state, 'corrupt');
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repaired, JSON.stringify(r.restore));
    assert.equal(r.restore?.chainComplete, true);
    assert.equal(r.restore?.lostFound, 0);
    assert.ok(fs.existsSync(path.join(r.restore!.movedAside, META_FILE)), 'the damaged file is kept aside');
    await verify(dir, want);
    assert.equal((await fsck({ dataDir: dir })).exitCode, FSCK_EXIT.clean);
  });

  it('a deleted meta.sqlite: the store refuses (no fresh database that would orphan every block); fsck --repair restores everything', async () => {
    const want = await populated();
    fs.rmSync(path.join(dir, META_FILE));
    await assert.rejects(Store.open(config(dir)), (e: unknown) => isCascadeError(e, 'ECORRUPT') && /missing.*cascade fsck --repair/.test(e.message));
    assert.equal(fs.existsSync(path.join(dir, META_FILE)), false, 'the refused open created nothing');
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repaired);
    assert.equal(r.metadata.state, 'missing');
    await verify(dir, want);
  });

  it('deleted after commits newer than the last snapshot (daemon killed, no clean close): the journal replays them exactly', async () => {
    const first = await populated();
    // More history after the snapshot, never snapshotted: not closed (as after kill -9), only synced.
    const store = await Store.open(config(dir, { metaSnapshotOnClose: false }));
    const { names, gone } = await workload(store, 2);
    await store.rename('llama/s1/b5', 'llama/s1/b5-renamed'); // a name from before the snapshot
    await store.delete('llama/s1/b6');
    await store.unpin('llama/s1/b4');
    const want = await expectedOf(store, [...names, ...[...first.versions.keys()].filter((n) => !['llama/s1/b5', 'llama/s1/b6'].includes(n)), 'llama/s1/b5-renamed'], [
      ...gone,
      ...first.gone,
      'llama/s1/b5',
      'llama/s1/b6',
    ]);
    await store.syncAll();
    assert.ok(listJournalFiles(path.join(dir, JOURNAL_DIR_NAME)).length >= 1);
    // Closed without a snapshot: what a daemon killed after its last fsync leaves behind.
    await store.close();
    fs.rmSync(path.join(dir, META_FILE));
    const snap = listSnapshots(dir)[0];
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repaired, JSON.stringify(r.restore));
    assert.equal(r.restore?.snapshotSeq, snap.seq);
    assert.ok((r.restore?.replayed ?? 0) >= 20, `replayed ${r.restore?.replayed}`);
    assert.equal(r.restore?.chainComplete, true);
    await verify(dir, want);
  });

  it('a bad newest snapshot falls back to the previous one and its longer journal', async () => {
    await populated();
    const store = await Store.open(config(dir));
    const { names, gone } = await workload(store, 3);
    const want = await expectedOf(store, names, gone);
    await store.close(); // a second snapshot: the first becomes meta.snapshot.1
    assert.ok(fs.existsSync(path.join(dir, SNAPSHOT_PREVIOUS_FILE)));
    fs.rmSync(path.join(dir, META_FILE));
    corruptPages(path.join(dir, SNAPSHOT_FILE));
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repaired, JSON.stringify(r.restore));
    assert.equal(r.restore?.from, SNAPSHOT_PREVIOUS_FILE);
    assert.equal(r.restore?.chainComplete, true);
    await verify(dir, want);
  });

  it('metadata, snapshots and journal all lost: every intact block is still reachable, as lost+found/<sha256> (exit 5)', async () => {
    const want = await populated();
    for (const f of [META_FILE, SNAPSHOT_FILE]) fs.rmSync(path.join(dir, f), { force: true });
    fs.rmSync(path.join(dir, JOURNAL_DIR_NAME), { recursive: true });
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repairedWithLoss);
    assert.equal(r.restore?.chainComplete, false);
    const store = await Store.open(config(dir));
    try {
      for (const versions of want.versions.values()) {
        for (const v of versions) {
          const data = await store.get(`${LOST_FOUND_MODEL}/${v.sha256}`);
          assert.equal(sha256(data), v.sha256);
        }
      }
    } finally {
      await store.close();
    }
  });

  it('a flipped byte in a segment is reported, never served, and repair drops only that version', async () => {
    const store = await Store.open(config(dir));
    const good = await store.put('llama/r/good', seededBytes(1, 300_000));
    await store.put('llama/r/bad', seededBytes(2, 100_000));
    const bad2 = await store.put('llama/r/bad', seededBytes(3, 200_000)); // version 2 gets damaged
    await store.close();
    // Find bad2's record and flip one payload byte.
    const segDir = path.join(dir, 'segments');
    const seg = path.join(segDir, fs.readdirSync(segDir).find((f) => f.endsWith('.log'))!);
    const bytes = fs.readFileSync(seg);
    const at = bytes.indexOf(Buffer.from(bad2.sha256, 'hex'));
    assert.ok(at > 0, 'the record header names the block');
    const recordStart = at - 16;
    const fd = fs.openSync(seg, 'r+');
    const one = Buffer.alloc(1);
    fs.readSync(fd, one, 0, 1, recordStart + 4096 + 1234);
    one[0] ^= 0x40;
    fs.writeSync(fd, one, 0, 1, recordStart + 4096 + 1234);
    fs.closeSync(fd);

    const check = await fsck({ dataDir: dir });
    assert.equal(check.exitCode, FSCK_EXIT.problems);
    assert.equal(check.segments.damaged, 1);
    assert.equal(check.segments.damagedList[0].sha256, bad2.sha256);
    assert.match(check.segments.damagedList[0].reason, /SHA-256/);
    assert.deepEqual(check.missing.list.map((m) => [m.name, m.version]), [['llama/r/bad', 2]]);

    const s = await Store.open(config(dir));
    try {
      await assert.rejects(s.get('llama/r/bad'), (e: unknown) => isCascadeError(e, 'ECORRUPT') || isCascadeError(e, 'EIO'));
    } finally {
      await s.close();
    }
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repairedWithLoss);
    assert.equal(r.repairs.droppedVersions, 1);
    const after = await Store.open(config(dir));
    try {
      assert.equal(sha256(await after.get('llama/r/good')), good.sha256);
      const vs = await after.versions('llama/r/bad');
      assert.deepEqual(vs.map((v) => v.version), [1], 'the damaged version is gone, the older one stays');
      assert.equal(sha256(await after.get('llama/r/bad')), vs[0].sha256);
    } finally {
      await after.close();
    }
  });

  it('wrong reference counts are reported and fixed', async () => {
    await populated();
    const Database = (await import('better-sqlite3')).default;
    const db = new Database(path.join(dir, META_FILE));
    db.prepare('UPDATE blocks SET refs = refs + 3 WHERE sha = (SELECT sha FROM blocks ORDER BY sha LIMIT 1)').run();
    db.close();
    const check = await fsck({ dataDir: dir });
    assert.equal(check.exitCode, FSCK_EXIT.problems);
    assert.equal(check.refs.problems, 1);
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repaired);
    assert.equal(r.repairs.refsFixed, 1);
    assert.equal((await fsck({ dataDir: dir })).exitCode, FSCK_EXIT.clean);
  });

  it('a database that lost its tail (power loss) gets the journal entries past it back at open, so numbers are never reused', async () => {
    // Before group commit journaled ahead of its COMMIT, these entries were cut off instead (the database
    // was the truth); either way no entry number stands for two changes.
    const cfg = config(dir, { metaSnapshotOnClose: false });
    const put = async (names: string[], seed: number) => {
      const store = await Store.open(cfg);
      try {
        for (const [i, n] of names.entries()) await store.put(n, seededBytes(seed + i, 20_000));
      } finally {
        await store.close();
      }
    };
    await put(['m/a', 'm/b', 'm/c'], 1);
    const older = fs.readFileSync(path.join(dir, META_FILE));
    await put(['m/d', 'm/e'], 10);
    fs.writeFileSync(path.join(dir, META_FILE), older); // the database is back at m/c: the journal still has m/d and m/e
    await put(['m/f'], 20);
    const journal = fs.readdirSync(path.join(dir, JOURNAL_DIR_NAME));
    assert.ok(!journal.some((f) => /\.(beyond|stale)-/.test(f)), `nothing set aside: ${journal.join(', ')}`);
    const entries = listJournalFiles(path.join(dir, JOURNAL_DIR_NAME)).flatMap((f) => readJournalFile(f.file).entries);
    assert.deepEqual(entries.map((e) => e.seq), Array.from({ length: entries.length }, (_, i) => i + 1), 'one entry per number');
    fs.rmSync(path.join(dir, META_FILE));
    const r = await fsck({ dataDir: dir, repair: true });
    assert.equal(r.exitCode, FSCK_EXIT.repaired, JSON.stringify(r.restore));
    const store = await Store.open(config(dir));
    try {
      for (const [i, n] of ['m/a', 'm/b', 'm/c', 'm/d', 'm/e', 'm/f'].entries()) {
        assert.equal((await store.versions(n)).length, 1, n);
        assert.equal(sha256(await store.get(n)), sha256(seededBytes([1, 2, 3, 10, 11, 20][i], 20_000)), n);
      }
    } finally {
      await store.close();
    }
  });

  it('journal: entries past the database in the same file are cut off at open (a copy kept), torn tails are reported, not thrown', () => {
    const jdir = path.join(dir, JOURNAL_DIR_NAME);
    const w = new JournalWriter(jdir, 1);
    for (let seq = 1; seq <= 5; seq++) w.append({ seq, op: 'remove', name: `m/n${seq}` });
    w.close();
    new JournalWriter(jdir, 4).close(); // the database holds entries up to 3 only
    const files = listJournalFiles(jdir);
    assert.deepEqual(files.map((f) => f.firstSeq), [1, 4]);
    assert.deepEqual(readJournalFile(files[0].file).entries.map((e) => e.seq), [1, 2, 3]);
    assert.equal(fs.readdirSync(jdir).filter((f) => f.includes('.beyond-')).length, 1);
    fs.appendFileSync(files[0].file, Buffer.from([9, 0, 0, 0, 1, 2])); // a torn frame
    const torn = readJournalFile(files[0].file);
    assert.deepEqual(torn.entries.map((e) => e.seq), [1, 2, 3]);
    assert.match(torn.damage?.reason ?? '', /torn/);
  });

  it('refuses a data directory a store holds open (EBUSY), changing nothing', async () => {
    const store = await Store.open(config(dir));
    try {
      await store.put('llama/x/y', seededBytes(9, 10_000));
      await rejectsWith(() => fsck({ dataDir: dir, repair: true }), 'EBUSY');
    } finally {
      await store.close();
    }
  });
});

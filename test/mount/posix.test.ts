/**
 * POSIX semantics on a real mount, both engines, with direct system calls (test/posix/*.py):
 * - every row of docs/SEMANTICS.md, run by semantics.py and checked here one test per row;
 * - the doc and the suite list the same rows with the same expected results;
 * - random write sessions against an in-memory model (write_model.py);
 * - inode numbers that survive a remount.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { rmDir, tmpDir } from '../store/helpers';
import { canMount, Daemon, isMounted } from './daemon';

const REPO = path.join(__dirname, '..', '..', '..');
const SEMANTICS_PY = path.join(REPO, 'test', 'posix', 'semantics.py');
const MODEL_PY = path.join(REPO, 'test', 'posix', 'write_model.py');
const SEMANTICS_MD = path.join(REPO, 'docs', 'SEMANTICS.md');
const ENGINES = ['native', 'fuse-native'] as const;
/** Sequences of the write-session model per engine in CI (each well under a second); more with CASCADE_MODEL_SEQUENCES. */
const MODEL_SEQUENCES = Number(process.env.CASCADE_MODEL_SEQUENCES ?? 60);

/** Rows that guard against a known wrong answer, and that answer (shown in the row's test name). */
const REGRESSIONS: Record<string, string> = {
  'ftruncate.grow-before-write': 'regression: ftruncate returned EIO on the native engine',
  'ftruncate.shrink-grow': 'regression: ftruncate returned EIO on the native engine',
  'truncate.path-zero': 'regression: truncate(2) by path returned EIO on the native engine',
  'open.trunc-rewrite': 'regression: the old size after an O_TRUNC reopen (a 200-byte rewrite became 1,000,100 bytes)',
  'rename.keeps-inode': 'regression: rename changed the inode number, also for fstat of an open descriptor',
  'dir.times-create': 'regression: directory times never moved',
  'dir.times-remove': 'regression: directory times never moved',
  'dir.times-rename': 'regression: directory times never moved',
  'name.whole-name-too-long': 'documented limit: a name below kv/ is at most 4,096 bytes',
  'name.outside-kv': 'regression: creating outside kv/ said ENOENT',
  'ftruncate.past-limit': 'regression: ftruncate(2**40) said EIO',
};

interface Row {
  id: string;
  want: string;
  engines: Record<string, string>;
}

interface RowResult {
  id: string;
  ok: boolean;
  want: string;
  detail?: string;
  trace?: string;
}

function listRows(): Row[] {
  const r = spawnSync('python3', [SEMANTICS_PY, '--list'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`semantics.py --list failed: ${r.stderr}`);
  return r.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Row);
}

/** The doc's rows: `| \`id\` | what | result | why |`, result being `ok` or an errno (engine notes may follow). */
function docRows(): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of fs.readFileSync(SEMANTICS_MD, 'utf8').split('\n')) {
    // The second cell may hold escaped pipes (`O_CREAT\|O_EXCL`).
    const m = /^\| `([a-z0-9.-]+)` \|(?:[^|\\]|\\.)*\| *(ok|E[A-Z]+)\b/.exec(line);
    if (m) {
      assert.ok(!rows.has(m[1]), `row ${m[1]} appears twice in docs/SEMANTICS.md`);
      rows.set(m[1], m[2]);
    }
  }
  return rows;
}

const rows = listRows();

describe('POSIX semantics: docs/SEMANTICS.md and test/posix/semantics.py agree', function () {
  it('every documented row is tested with the documented result, and every tested row is documented', function () {
    const doc = docRows();
    const missingInDoc = rows.filter((r) => !doc.has(r.id)).map((r) => r.id);
    const missingInSuite = [...doc.keys()].filter((id) => !rows.some((r) => r.id === id));
    assert.deepEqual(missingInDoc, [], 'rows the suite checks but the doc does not list');
    assert.deepEqual(missingInSuite, [], 'rows the doc lists but the suite does not check');
    for (const r of rows) assert.equal(doc.get(r.id), r.want, `row ${r.id}: the doc says ${doc.get(r.id)}, the suite expects ${r.want}`);
    assert.ok(rows.length >= 60, `${rows.length} rows`);
  });
});

for (const engine of ENGINES) {
  describe(`POSIX semantics on a real mount (engine ${engine})`, function () {
    this.timeout(180_000);
    let root: string;
    let mnt: string;
    let daemon: Daemon;
    const results = new Map<string, RowResult>();

    before(async function () {
      if (!canMount(['fusermount', 'python3'])) this.skip();
      root = tmpDir(`posix-${engine}`);
      mnt = path.join(root, 'mnt');
      fs.mkdirSync(mnt);
      daemon = new Daemon(mnt, path.join(root, 'data'), ['--engine', engine]);
      await daemon.start();
      const r = spawnSync('python3', [SEMANTICS_PY, '--mount', mnt, '--engine', engine], { encoding: 'utf8', timeout: 120_000 });
      assert.equal(r.status, 0, `semantics.py: ${r.stderr}`);
      for (const line of r.stdout.trim().split('\n')) {
        const res = JSON.parse(line) as RowResult;
        results.set(res.id, res);
      }
    });

    after(async function () {
      if (!daemon) return;
      await daemon.stop();
      assert.equal(isMounted(mnt), false, 'nothing left mounted');
      rmDir(root);
    });

    for (const row of rows) {
      const want = row.engines[engine] ?? row.want;
      const label = REGRESSIONS[row.id] ? ` (${REGRESSIONS[row.id]})` : '';
      it(`${row.id}: ${want}${label}`, function () {
        const res = results.get(row.id);
        assert.ok(res, `semantics.py reported nothing for ${row.id}`);
        assert.equal(res.want, want);
        assert.ok(res.ok, `${res.detail}\n${res.trace ?? ''}`);
      });
    }

    it(`random write sessions match an in-memory model (${MODEL_SEQUENCES} sequences: pwrite, ftruncate, truncate, pread, fstat, O_TRUNC reopen)`, function () {
      const seed = Number(process.env.CASCADE_MODEL_SEED ?? Date.now() % 1_000_000);
      const r = spawnSync('python3', [MODEL_PY, '--mount', mnt, '--seed', String(seed), '--sequences', String(MODEL_SEQUENCES)], {
        encoding: 'utf8',
        timeout: 150_000,
      });
      assert.equal(r.status, 0, `write_model.py: ${r.stderr}`);
      const report = JSON.parse(r.stdout) as { sequences: number; steps: number; failures: unknown[] };
      assert.equal(report.sequences, MODEL_SEQUENCES);
      assert.ok(report.steps >= MODEL_SEQUENCES, `${report.steps} steps`);
      assert.deepEqual(report.failures, [], `seed ${seed}: ${JSON.stringify(report.failures, null, 1)}`);
    });

    it('inode numbers of files survive a remount (and are never reused for new files)', async function () {
      const dir = path.join(mnt, 'kv', 'remount', 'd');
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'a'), 'a');
      fs.writeFileSync(path.join(dir, 'b'), 'b');
      fs.renameSync(path.join(dir, 'b'), path.join(dir, 'c'));
      const before = { a: fs.statSync(path.join(dir, 'a')).ino, c: fs.statSync(path.join(dir, 'c')).ino };
      await daemon.stop();
      await daemon.start();
      assert.deepEqual({ a: fs.statSync(path.join(dir, 'a')).ino, c: fs.statSync(path.join(dir, 'c')).ino }, before);
      fs.writeFileSync(path.join(dir, 'new'), 'n');
      const fresh = fs.statSync(path.join(dir, 'new')).ino;
      assert.ok(fresh !== before.a && fresh !== before.c, 'a new file gets a new number');
    });
  });
}

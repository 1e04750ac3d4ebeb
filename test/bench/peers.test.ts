/**
 * The side-by-side benchmark's quick mode, smallest trial of every system (hot-read 2 MiB; cold-read
 * 2 MiB for the disk), through the real runner (run.js) and trial processes: every peer must start, give real
 * figures, read back what was written, stop, and leave nothing behind. A missing or broken peer
 * (bindfs, redis-server, python3-h5py; `bash scripts/bench-peers.sh` installs them) fails this test.
 * The Cascade rows must run the engine they name (native, fuse-native; the client beside a native
 * mount), and one rename-race trial (Cascade, with the tmpfs limit) must count every open.
 * Needs root and /dev/fuse, like the other real-mount tests; skipped elsewhere.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SUITES } from '../../bench/protocol';
import { SYSTEMS } from '../../bench/systems';
import { canMount } from '../mount/daemon';

const RUNNER = path.join(__dirname, '..', '..', 'bench', 'run.js');
const RACE = 'rename-race 2MiB cascade';
/** Also picks the other cascade-* rows (the filter is by substring). */
const PER_FILE = 'per-file 2MiB cascade';
/** --quick: 5 counted runs of 2,000 opens. */
const RACE_OPENS = 10_000;

/** `<workload> 2MiB <system>`: the first workload each system takes part in, at the smallest quick size. */
function smallestTrials(): string[] {
  return SYSTEMS.map((s) => `${SUITES.peers.workloads.find((w) => s.notApplicable[w] === undefined && w !== 'meta')} 2MiB ${s.name}`);
}

function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/\) [ZX] /.test(stat);
  } catch {
    return false;
  }
}

describe('bench: side-by-side peers (quick mode, smallest trial of every system)', function () {
  this.timeout(330_000);
  let outDir: string;

  before(function () {
    if (!canMount(['fusermount'])) this.skip();
    outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'peers-test-'));
  });
  after(() => {
    if (outDir) fs.rmSync(outDir, { recursive: true, force: true });
  });

  it('every peer starts, gives positive figures, reads back what was written, and leaves nothing behind', () => {
    const names = smallestTrials();
    const outFile = path.join(outDir, 'peers.json');
    // The filter is by substring: 'rename-race 2MiB cascade' also picks cascade-fuse-native's, and the runner adds the tmpfs limit.
    const r = spawnSync(process.execPath, [RUNNER, '--quick', '--filter', [...names, RACE, PER_FILE].join(','), '--out', outFile], { encoding: 'utf8', timeout: 300_000 });
    assert.equal(r.status, 0, `bench failed (${r.status ?? r.signal}):\n${r.stderr.slice(-3000)}`);
    const doc = JSON.parse(fs.readFileSync(outFile, 'utf8')) as {
      trials: { name: string; system: string; role: string; figures: { figure: string; rate: { median: number; min: number }; timesMs: number[]; xLimit: number | null }[]; checks: Record<string, unknown> }[];
      failures: unknown[];
      leftovers: string[];
      environment: Record<string, unknown>;
      chart: string | null;
    };
    assert.deepEqual(doc.failures, []);
    assert.deepEqual(doc.leftovers, [], 'nothing left in /tmp, /dev/shm or /proc/mounts');
    for (const name of names) {
      const t = doc.trials.find((x) => x.name === name);
      assert.ok(t, `trial ${name} ran`);
      assert.ok(t.figures.length > 0, `${name}: figures`);
      for (const f of t.figures) {
        assert.ok(f.timesMs.length >= 5, `${name}: at least 5 counted runs`);
        assert.ok(f.rate.min > 0 && Number.isFinite(f.rate.median), `${name}: positive throughput`);
      }
      assert.equal(t.checks.contentVerified, true, `${name}: bytes read equal bytes written`);
      if (typeof t.checks.redisPid === 'number') assert.equal(alive(t.checks.redisPid), false, 'redis-server stopped');
      if (name.startsWith('hot-read ')) assert.ok(t.figures.some((f) => f.figure === 'blocks/s'), `${name}: blocks/s next to GB/s`);
    }
    const engines: Record<string, RegExp> = { cascade: /^native:(?!.*io_uring)/, 'cascade-uring': /^native:.*io_uring/, 'cascade-fuse-native': /^fuse-native:/, 'cascade-client': /^native:/ };
    for (const [system, engine] of Object.entries(engines)) {
      const t = doc.trials.find((x) => x.name === `hot-read 2MiB ${system}`);
      assert.equal(t?.role, 'cascade', `${system}: role cascade`);
      assert.match(String(t?.checks.cascadeEngine), engine, `${system}: mounted with the engine it names`);
      assert.ok(t?.figures.every((f) => f.xLimit !== null), `${system}: a ratio to tmpfs`);
    }
    for (const system of ['tmpfs', 'cascade', 'cascade-fuse-native']) {
      const t = doc.trials.find((x) => x.name === `rename-race 2MiB ${system}`);
      assert.ok(t, `rename-race ${system} ran`);
      assert.equal(t.checks.opens, RACE_OPENS, `rename-race ${system}: every counted open attempted`);
      for (const k of ['enoent', 'wrongContent', 'otherErrors', 'renames']) assert.equal(typeof t.checks[k], 'number', `rename-race ${system}: ${k} counted`);
      assert.ok(t.figures[0].rate.min > 0, `rename-race ${system}: opens/s`);
    }
    for (const system of ['tmpfs', 'cascade']) {
      const t = doc.trials.find((x) => x.name === `per-file 2MiB ${system}`);
      assert.ok(t, `per-file ${system} ran`);
      assert.equal(t.checks.contentVerified, true, `per-file ${system}: every load byte-exact`);
      assert.deepEqual(t.figures.map((f) => f.figure), ['store', 'load', 'create', 'close-commit', 'rename', 'exists', 'read-open']);
      for (const f of t.figures) assert.ok(f.rate.min > 0 && Number.isFinite(f.rate.median), `per-file ${system}: ${f.figure} positive`);
    }
    const cold = doc.trials.find((x) => x.name === 'cold-read 2MiB disk');
    assert.equal(cold?.checks.maxResidentBytesAfterDrop, 0, 'the cold read found nothing of the file in the page cache');
    for (const key of ['redisServerVersion', 'h5py', 'hdf5', 'bindfsVersion', 'cpuModel', 'kernel', 'node']) assert.ok(doc.environment[key], `environment.${key}`);
    assert.ok(doc.chart !== null, 'a chart was drawn');
    assert.match(fs.readFileSync(path.join(outDir, doc.chart), 'utf8').slice(0, 200), /<svg/);
    assert.ok(fs.readFileSync(path.join(outDir, 'peers.md'), 'utf8').includes('| hot-read | 2MiB | read | cascade |'));
    const mounts = fs.readFileSync('/proc/mounts', 'utf8');
    assert.ok(!mounts.includes('cascade-bench-'), 'no benchmark mount left');
    assert.deepEqual(fs.readdirSync(os.tmpdir()).filter((n) => n.startsWith('cascade-bench-')), []);
  });
});

/**
 * npm test's closing line (test/summary.ts) and the counts the reporter writes for it: a failing,
 * crashed or empty part must make the line FAIL and the exit status non-zero.
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { mochaPart, nativePart, summaryLine, type MochaSummary } from './summary';

const SUMMARY_JS = path.join(__dirname, 'summary.js');
const REPORTER_JS = path.join(__dirname, 'reporter.js');
const MOCHA_BIN = require.resolve('mocha/bin/mocha.js');

const counts = (passes: number, failures: number, pending: number): MochaSummary => ({ passes, failures, pending, durationMs: 1 });

describe('npm test summary line (test/summary.ts)', function () {
  let dir: string;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-summary-'));
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('reads the native tests closing line: count, failures, crash, missing line', function () {
    assert.deepEqual(nativePart(0, '  gpu: skipped (x)\nnative tests: all 4021 checks passed\n'), { ok: true, text: 'native ok (4021 checks)' });
    assert.deepEqual(nativePart(1, 'FAIL a.cc:1: x\nnative tests: 2 of 99 check(s) failed\n'), { ok: false, text: 'native FAIL (2 of 99 checks failed, exit 1)' });
    assert.equal(nativePart(1, '==123==ERROR: AddressSanitizer: heap-use-after-free\n').ok, false); // killed before its line
    assert.equal(nativePart(0, '').ok, false);
    assert.equal(nativePart(134, 'native tests: all 5 checks passed\n').ok, false); // e.g. a leak report at exit
  });

  it('judges a mocha run by its counts and its exit status', function () {
    assert.deepEqual(mochaPart('mocha', 0, counts(700, 0, 11)), { ok: true, text: 'mocha 700 passing / 0 failing / 11 pending' });
    assert.equal(mochaPart('mocha', 1, counts(699, 1, 11)).ok, false);
    assert.equal(mochaPart('mocha', 7, counts(700, 0, 0)).ok, false); // crashed after its run
    assert.equal(mochaPart('mocha', 0, counts(0, 0, 3)).ok, false); // ran no test
    assert.match(mochaPart('fuse-native', 1, undefined).text, /^fuse-native FAIL \(exit 1 before the end of its run\)$/);
  });

  it('says PASS only when every part passed', function () {
    const ok = [nativePart(0, 'native tests: all 3 checks passed'), mochaPart('mocha', 0, counts(2, 0, 1)), mochaPart('fuse-native', 0, counts(25, 0, 0))];
    assert.equal(summaryLine(ok).line, 'cascade tests: native ok (3 checks), mocha 2 passing / 0 failing / 1 pending, fuse-native 25 passing / 0 failing / 0 pending — PASS');
    assert.equal(summaryLine(ok).ok, true);
    const bad = summaryLine([ok[0], mochaPart('mocha', 1, counts(1, 1, 0)), ok[2]]);
    assert.equal(bad.ok, false);
    assert.match(bad.line, / — FAIL$/);
    assert.equal(summaryLine([]).ok, false);
  });

  it('the reporter writes the counts of a real mocha run, and the command line exits by them', function () {
    this.timeout(60_000);
    const spec = path.join(dir, 'tiny.test.js');
    fs.writeFileSync(spec, "it('passes', () => {}); it('fails', () => { throw new Error('no'); }); it.skip('skipped', () => {});\n");
    const json = path.join(dir, 'mocha.json');
    const run = spawnSync(process.execPath, [MOCHA_BIN, '--no-config', '--reporter', REPORTER_JS, spec], {
      encoding: 'utf8',
      env: { ...process.env, CASCADE_TEST_SUMMARY: json },
    });
    assert.equal(run.status, 1, run.stdout + run.stderr);
    assert.match(run.stdout, /^1 passed, 1 failed, 1 skipped$/m);
    const written = JSON.parse(fs.readFileSync(json, 'utf8')) as MochaSummary;
    assert.deepEqual([written.passes, written.failures, written.pending], [1, 1, 1]);
    assert.deepEqual(written.failed?.map((f) => f.title), ['fails']);
    assert.match(written.failed?.[0].error ?? '', /^Error: no/);

    const log = path.join(dir, 'native.log');
    fs.writeFileSync(log, 'native tests: all 7 checks passed\n');
    const good = path.join(dir, 'good.json');
    fs.writeFileSync(good, JSON.stringify(counts(3, 0, 0)));
    const pass = spawnSync(process.execPath, [SUMMARY_JS, 'native', '0', log, 'mocha', '0', good], { encoding: 'utf8' });
    assert.equal(pass.status, 0, pass.stderr);
    assert.equal(pass.stdout, 'cascade tests: native ok (7 checks), mocha 3 passing / 0 failing / 0 pending — PASS\n');
    const fail = spawnSync(process.execPath, [SUMMARY_JS, 'native', '0', log, 'mocha', '1', json, 'fuse-native', '1', path.join(dir, 'never-written.json')], { encoding: 'utf8' });
    assert.equal(fail.status, 1, fail.stderr);
    // The failed test is repeated, with its error, just above the closing line (CI keeps the tail).
    assert.match(fail.stdout, /^failed tests:\n {2}\[mocha\] fails\n {4}Error: no\n/m);
    assert.match(fail.stdout, /mocha 1 passing \/ 1 failing \/ 1 pending \(exit 1\), fuse-native FAIL \(exit 1 before the end of its run\) — FAIL\n$/);
  });
});

/**
 * What a batch job does: `cascade mount -d` returns once the mount answers (or exits 1 with the
 * reason), `cascade mounts` lists it with its daemon, `cascade unmount` returns once the daemon has
 * persisted its data and exited. Also: a mountpoint under /proc fails at once (Node's recursive mkdir
 * spun forever there).
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { canMount, CLI, isMounted } from './daemon';

function cascade(args: string[], timeoutMs = 60_000) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: timeoutMs, killSignal: 'SIGKILL' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('background mounts: mount -d, mounts, unmount that waits', function () {
  this.timeout(120_000);
  let root: string;
  let mnt: string;

  before(function () {
    if (!canMount(['fusermount'])) this.skip();
  });
  beforeEach(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-bg-'));
    mnt = path.join(root, 'mnt');
  });
  afterEach(() => {
    if (isMounted(mnt)) spawnSync('fusermount', ['-uz', mnt]);
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('mount -d returns once the mount answers; mounts lists it; unmount returns after the daemon persisted and exited', async function () {
    const log = path.join(root, 'mount.log');
    const m = cascade(['mount', mnt, '--data', path.join(root, 'data'), '--dram', '64M', '-d', '--log-file', log]);
    assert.equal(m.code, 0, m.stderr);
    assert.ok(isMounted(mnt), 'mounted when mount -d returned');
    const pid = Number(/daemon pid (\d+)/.exec(m.stdout)?.[1]);
    assert.ok(pid > 0 && fs.existsSync(`/proc/${pid}`), m.stdout);
    fs.mkdirSync(path.join(mnt, 'kv', 'm'));
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'a'), 'persisted');
    const list = cascade(['mounts', '--json']);
    assert.equal(list.code, 0, list.stderr);
    const mine = (JSON.parse(list.stdout) as Array<{ mountpoint: string; pid: number; answering: boolean; engine: string }>).find((r) => r.mountpoint === mnt);
    assert.ok(mine && mine.answering && mine.pid === pid, list.stdout);
    assert.match(cascade(['mounts']).stdout, new RegExp(`${mnt}: daemon pid ${pid}`));
    const u = cascade(['unmount', mnt]);
    assert.equal(u.code, 0, u.stderr);
    assert.equal(fs.existsSync(`/proc/${pid}`), false, 'the daemon had exited when unmount returned');
    assert.match(u.stderr, /persisted its data and exited/);
    // Log lines: time, level, what; the mount's life at info.
    assert.match(fs.readFileSync(log, 'utf8'), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO  cascade: mounted /m);
    // Persisted: a new mount of the same data directory has the file.
    // --quiet: the mount still comes up (mount -d does not need the log line), and logs no info.
    const quietLog = path.join(root, 'quiet.log');
    const again = cascade(['mount', mnt, '--data', path.join(root, 'data'), '--dram', '64M', '-d', '--quiet', '--log-file', quietLog]);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(fs.readFileSync(path.join(mnt, 'kv', 'm', 'a'), 'utf8'), 'persisted');
    assert.equal(cascade(['unmount', mnt]).code, 0);
    assert.doesNotMatch(fs.readFileSync(quietLog, 'utf8'), /INFO/);
  });

  it('mount -d that cannot mount exits 1 at once with the daemon\'s reason, and leaves no daemon', function () {
    fs.mkdirSync(mnt);
    fs.writeFileSync(path.join(mnt, 'not-empty'), 'x');
    const t0 = Date.now();
    const m = cascade(['mount', mnt, '--data', path.join(root, 'data'), '--dram', '64M', '-d', '--log-file', path.join(root, 'log')]);
    assert.equal(m.code, 1);
    assert.match(m.stderr, /the mount failed \(daemon exited 1\).*\n.*not empty/);
    assert.ok(Date.now() - t0 < 20_000);
    assert.equal(isMounted(mnt), false);
  });

  it('a failed mount leaves nothing behind: the mountpoint and data directory it created are gone; a DRAM larger than memory fails at once', function () {
    const data = path.join(root, 'fresh', 'data');
    const m = cascade(['mount', mnt, '--data', data, '--dram', '64T'], 20_000);
    assert.equal(m.code, 1, m.stderr);
    assert.match(m.stderr, /--dram 64\.0 TiB is more than this machine can hold/);
    assert.equal(fs.existsSync(mnt), false, 'the mountpoint it created is removed');
    assert.equal(fs.existsSync(data), false, 'no data directory was left');
  });

  it('a mountpoint the kernel will not create (/proc/...) fails at once, in the foreground and in the background', function () {
    for (const extra of [[], ['-d', '--log-file', path.join(root, 'log2')]]) {
      const m = cascade(['mount', `/proc/cascade-test-${process.pid}`, '--data', path.join(root, 'data'), '--dram', '64M', ...extra], 20_000);
      assert.equal(m.code, 1, `${extra.join(' ')}: ${m.stderr}`);
      assert.match(m.stderr, /cannot create directory \/proc\/cascade-test-/);
    }
  });
});

/**
 * FUSE over io_uring on the native engine (real mounts, root, a kernel with the fuse module parameter
 * enable_uring and an addon built with liburing; skipped elsewhere). The parameter is global: the
 * suite sets what it needs and puts the old value back. The whole mount suite also runs over io_uring
 * in `npm test` (npm run test:uring); this file checks the parts only io_uring has: that requests
 * really come through the rings, the three modes, answers JS gives on its own thread, and a daemon
 * killed while its rings are busy.
 */
import * as assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FUSE_URING_PARAM_PATH } from '../../mount/engine/kernel-params';
import { nativeBinding } from '../../native';
import { canMount, Daemon, isMounted } from './daemon';

const MiB = 1024 * 1024;

type EngineStats = Record<string, number | boolean | string | undefined>;

/** stats.json's engine part, fresh (the daemon keeps one snapshot for 100 ms). */
function engineStats(mnt: string): EngineStats {
  spawnSync('sleep', ['0.15']);
  return (JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8')) as { engine: EngineStats }).engine;
}

function possibleCpus(): number {
  let n = 0;
  for (const part of fs.readFileSync('/sys/devices/system/cpu/possible', 'utf8').trim().split(',')) {
    const [a, b] = part.split('-').map(Number);
    n += b === undefined ? 1 : b - a + 1;
  }
  return n;
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('native engine: FUSE over io_uring (real mounts)', function () {
  this.timeout(120_000);
  let root: string;
  let saved: string | undefined;
  let daemon: Daemon | undefined;

  before(function () {
    if (!canMount() || !fs.existsSync(FUSE_URING_PARAM_PATH) || nativeBinding()?.features.uring !== true) return this.skip();
    saved = fs.readFileSync(FUSE_URING_PARAM_PATH, 'utf8').trim();
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-uring-'));
  });

  afterEach(async () => {
    await daemon?.stop();
    daemon = undefined;
  });

  after(() => {
    if (saved !== undefined) fs.writeFileSync(FUSE_URING_PARAM_PATH, saved);
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  async function start(name: string, mode: string): Promise<string> {
    const mnt = path.join(root, name, 'mnt');
    daemon = new Daemon(mnt, path.join(root, name, 'data'), ['--engine', 'native', '--fuse-uring', mode, '--dram', '128M']);
    await daemon.start();
    fs.mkdirSync(path.join(mnt, 'kv', 'm'), { recursive: true });
    return mnt;
  }

  it('--fuse-uring on sets the parameter and takes every request through one queue per CPU, byte-exact', async () => {
    fs.writeFileSync(FUSE_URING_PARAM_PATH, 'N');
    const mnt = await start('on', 'on');
    assert.equal(fs.readFileSync(FUSE_URING_PARAM_PATH, 'utf8').trim(), 'Y', 'the daemon turned the parameter on');
    assert.match(daemon!.stderr, /\(engine native:[^\n]*io_uring/, daemon!.stderr);
    const s0 = engineStats(mnt);
    assert.equal(s0.uring, true);
    assert.equal(s0.uringQueues, possibleCpus());
    const dir = path.join(mnt, 'kv', 'm');
    // Big writes (payload in place in the ring buffer), small files, reads served from the arena.
    const big = randomBytes(5 * MiB + 123);
    fs.writeFileSync(path.join(dir, 'big'), big);
    const small = Array.from({ length: 50 }, () => randomBytes(4096));
    small.forEach((b, i) => fs.writeFileSync(path.join(dir, `s${i}`), b));
    // A fresh process reads it all back (no page cache of ours; direct I/O anyway).
    const r = spawnSync('sha256sum', [path.join(dir, 'big'), ...small.map((_, i) => path.join(dir, `s${i}`))], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const sums = r.stdout.trim().split('\n').map((l) => l.split(' ')[0]);
    assert.deepEqual(sums, [sha(big), ...small.map(sha)]);
    assert.deepEqual(fs.readdirSync(dir).length, 51);
    const s1 = engineStats(mnt);
    const through = (s1.uringRequests as number) - (s0.uringRequests as number);
    assert.ok(through > 100, `requests came through the rings: ${through}`);
    assert.ok((s1.uringCrossThreadReplies as number) > (s0.uringCrossThreadReplies as number), 'JS answered some on its own thread');
    assert.equal(s1.uringErrors, 0);
    // Errno rows still come back through the ring, with direct syscalls.
    const e = spawnSync('python3', ['-c', `
import os, errno, sys
d = sys.argv[1]
out = []
for f in (lambda: os.stat(d + '/nope'), lambda: os.truncate(d + '/s1', 10), lambda: os.rmdir(d + '/s1')):
    try:
        f(); out.append('ok')
    except OSError as e:
        out.append(errno.errorcode[e.errno])
os.truncate(d + '/s2', 0)
out.append(str(os.stat(d + '/s2').st_size))
print(' '.join(out))`, dir], { encoding: 'utf8' });
    assert.equal(e.status, 0, e.stderr);
    assert.equal(e.stdout.trim(), 'ENOENT EPERM ENOTDIR 0');
  });

  it('auto uses io_uring only where the kernel offers it; off never; neither complains', async () => {
    fs.writeFileSync(FUSE_URING_PARAM_PATH, 'N');
    let mnt = await start('auto-n', 'auto');
    assert.equal(engineStats(mnt).uring, false);
    assert.doesNotMatch(daemon!.stderr, /io_uring/, 'auto says nothing when the kernel does not offer it');
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'x'), 'x');
    await daemon!.stop();
    fs.writeFileSync(FUSE_URING_PARAM_PATH, 'Y');
    mnt = await start('auto-y', 'auto');
    assert.equal(engineStats(mnt).uring, true);
    await daemon!.stop();
    mnt = await start('off', 'off');
    const s = engineStats(mnt);
    assert.equal(s.uring, false);
    assert.equal(s.uringQueues, 0);
  });

  it('a daemon killed while readers keep its rings busy leaves no hang; a new mount serves the data', async () => {
    fs.writeFileSync(FUSE_URING_PARAM_PATH, 'Y');
    const mnt = await start('kill', 'on');
    const dir = path.join(mnt, 'kv', 'm');
    const data = randomBytes(2 * MiB);
    const fd = fs.openSync(path.join(dir, 'blk'), 'w');
    fs.writeSync(fd, data);
    fs.fsyncSync(fd); // durable before the kill
    fs.closeSync(fd);
    // Readers in other processes, one per CPU and more, each looping over the block.
    const readers = Array.from({ length: 4 }, () =>
      spawn('python3', ['-c', `import sys\nwhile True:\n  try: open(sys.argv[1],'rb').read()\n  except OSError: sys.exit(0)`, path.join(dir, 'blk')], { stdio: 'ignore' }),
    );
    await new Promise((r) => setTimeout(r, 500));
    const started = Date.now();
    await daemon!.stop('SIGKILL');
    // Every reader gets an error (ENOTCONN) and ends instead of hanging on a dead ring.
    await Promise.all(readers.map((p) => new Promise((r) => (p.exitCode !== null ? r(null) : p.once('exit', r)))));
    assert.ok(Date.now() - started < 20_000, 'readers ended within 20 s');
    assert.equal(isMounted(mnt), false);
    const again = await start('kill', 'on');
    assert.equal(sha(fs.readFileSync(path.join(again, 'kv', 'm', 'blk'))), sha(data));
  });
});

/**
 * The cascade CLI: direct data-directory access (--data), and the same commands on a real FUSE mount
 * (a `cascade mount` daemon in a child process, as in mount.test.ts) through files and xattrs.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultDataDir } from '../../mount/defaults';
import { Store } from '../../store/store';
import { formatBytes, parseSize } from '../../mount/size';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import type { PathStat } from '../../mount/client';
import { canMount, CLI, Daemon, isMounted } from './daemon';


function cascade(args: string[], input?: Buffer, cwd?: string) {
  const r = spawnSync(process.execPath, [CLI, ...args], { input, cwd, maxBuffer: 64 << 20 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.toString() };
}

describe('mount/size', () => {
  it('parses human sizes and rejects nonsense', () => {
    assert.equal(parseSize('8G'), 8 * 2 ** 30);
    assert.equal(parseSize('512m'), 512 * 2 ** 20);
    assert.equal(parseSize('64KiB'), 64 * 1024);
    assert.equal(parseSize('1.5g'), 1.5 * 2 ** 30);
    assert.equal(parseSize('4096'), 4096);
    for (const bad of ['', 'x', '-1G', '8Q', '1e3']) assert.throws(() => parseSize(bad), /EINVAL/, bad);
    assert.equal(formatBytes(3 * 2 ** 20), '3.0 MiB');
  });

  it('puts the default data directory under $SCRATCH when set, one per host (the same $SCRATCH on every node)', () => {
    assert.equal(defaultDataDir({ SCRATCH: '/lus/me' }, 'nid001234.cluster'), '/lus/me/.cascade/nid001234/data');
    assert.notEqual(defaultDataDir({ SCRATCH: '/lus/me' }, 'nid001'), defaultDataDir({ SCRATCH: '/lus/me' }, 'nid002'));
    assert.ok(defaultDataDir({}).endsWith(`/.cascade/${os.hostname().split('.')[0]}/data`));
  });

  it('mount fails at once, before it fills DRAM, on a mountpoint that is not empty', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-pre-'));
    try {
      fs.mkdirSync(path.join(dir, 'mnt', 'x'), { recursive: true });
      const t0 = Date.now();
      const r = spawnSync(process.execPath, [CLI, 'mount', path.join(dir, 'mnt'), '--data', path.join(dir, 'data'), '--dram', '2G'], { encoding: 'utf8' });
      assert.equal(r.status, 1);
      assert.match(r.stderr, /ENOTEMPTY: mountpoint .* is not empty/);
      assert.ok(Date.now() - t0 < 5_000, `failed after ${Date.now() - t0} ms`);
      assert.equal(fs.existsSync(path.join(dir, 'data', 'meta.sqlite')), false, 'the store was never opened');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a data directory in use is refused with the host and pid that hold it', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-busy-'));
    const held = await Store.open({ dataDir: dir, dramCapacityBytes: 8 * 2 ** 20, prefault: false });
    try {
      const r = spawnSync(process.execPath, [CLI, 'stat', 'm/x', '--data', dir], { encoding: 'utf8' });
      assert.equal(r.status, 1);
      assert.match(r.stderr, new RegExp(`EBUSY: data directory ${dir} is in use by pid ${process.pid} on host ${os.hostname()}`));
    } finally {
      await held.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('cascade CLI (direct data-directory access)', function () {
  this.timeout(60_000);
  // Made in before(), not at definition: a filtered run (-g) skips after() and would leak it.
  let dir = '';
  let common: string[] = [];
  before(() => {
    dir = tmpDir('cli');
    common = ['--data', dir, '--dram', '32M'];
  });
  after(() => rmDir(dir));

  it('puts from a file and from stdin, gets versions back byte-exact through a pipe', () => {
    const file = path.join(dir, 'in.bin');
    const big = seededBytes(1, 3 * 1024 * 1024 + 3);
    fs.writeFileSync(file, big);
    const put = cascade(['put', 'llama/a/b', file, ...common, '--json']);
    assert.equal(put.code, 0, put.stderr);
    assert.equal(JSON.parse(put.stdout.toString()).sha256, sha256(big));
    assert.equal(cascade(['put', 'llama/a/b', '-', ...common], Buffer.from('small')).code, 0);
    const v1 = cascade(['get', 'llama/a/b', ...common, '--version', '1']);
    assert.equal(v1.code, 0, v1.stderr);
    assert.ok(v1.stdout.equals(big), 'a 3 MiB block arrives whole through a pipe');
    assert.equal(cascade(['get', 'llama/a/b', ...common]).stdout.toString(), 'small');
    const versions = cascade(['versions', 'llama/a/b', ...common, '--json']);
    assert.deepEqual(JSON.parse(versions.stdout.toString()).map((v: { version: number }) => v.version), [1, 2]);
  });

  it('stat, pin, unpin and stats with --data work on a data directory without a mount', () => {
    const stat = () => JSON.parse(cascade(['stat', 'llama/a/b', ...common, '--json']).stdout.toString());
    assert.equal(stat().version, 2);
    assert.equal(stat().sha256, sha256(Buffer.from('small')));
    assert.equal(JSON.parse(cascade(['stat', 'llama/a/b', ...common, '--json', '--version', '1']).stdout.toString()).sizeBytes, 3 * 1024 * 1024 + 3);
    assert.equal(cascade(['pin', 'llama/a/b', ...common]).code, 0);
    assert.equal(stat().pinned, true);
    assert.equal(cascade(['unpin', 'llama/a/b', ...common]).code, 0);
    assert.equal(stat().pinned, false);
    const stats = cascade(['stats', ...common, '--json']);
    assert.equal(stats.code, 0, stats.stderr);
    assert.deepEqual(JSON.parse(stats.stdout.toString()).tiers.map((t: { name: string }) => t.name), ['dram', 'disk']);
  });

  it('reports typed errors with exit 1 and usage errors with exit 2', () => {
    const bad = cascade(['get', 'nomodel', ...common]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /EINVAL/);
    const missing = cascade(['get', 'llama/a/b', ...common, '--version', '99']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /ENOENT/);
    assert.equal(cascade(['put', 'llama/x', '/nonexistent/file', ...common]).code, 1);
    const badSize = cascade(['get', 'llama/a/b', '--data', dir, '--dram', 'lots']);
    assert.equal(badSize.code, 2, 'a bad flag value is a usage error');
    assert.match(badSize.stderr, /--dram: bad size "lots"/);
    const nan = cascade(['mount', path.join(dir, 'mnt'), '--keep-versions', 'abc']);
    assert.equal(nan.code, 2);
    assert.match(nan.stderr, /--keep-versions must be a whole number >= 1, not something that is not a number/);
    const version = cascade(['--version']);
    assert.equal(version.code, 0);
    assert.match(version.stdout.toString(), /^cascade \d+\.\d+\.\d+\n$/);
    const usage = cascade(['frobnicate']);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--help/);
  });

  it('runs the demo and reports dedup savings', () => {
    const r = cascade(['demo', '--blocks', '8', '--block-size', '256K', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout.toString());
    assert.equal(out.stats.dedup.hits, 7, 'the shared prompt block was stored once');
    assert.equal(out.pinned, true);
    assert.ok(!fs.existsSync(out.dataDir), 'the temporary data directory is removed');
  });
});

// ---- the CLI on a real mount ----

/** An xattr read with getfattr, independently of the CLI under test. */
function getfattr(file: string, name: string): string {
  const r = spawnSync('getfattr', ['--only-values', '-n', name, file]);
  assert.equal(r.status, 0, r.stderr.toString());
  return r.stdout.toString();
}

function json<T>(r: { code: number | null; stdout: Buffer; stderr: string }): T {
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout.toString()) as T;
}

type StatJson = PathStat;

describe('cascade CLI on a mount (real FUSE mount)', function () {
  this.timeout(120_000);
  let root: string;
  let mnt: string;
  let daemon: Daemon | undefined;

  before(async function () {
    if (!canMount(['fusermount', 'getfattr'])) this.skip();
    root = tmpDir('cli-mount');
    mnt = path.join(root, 'mnt');
    fs.mkdirSync(mnt);
    daemon = new Daemon(mnt, path.join(root, 'data'), ['--pin-quota', '4M']);
    await daemon.start();
  });
  after(async function () {
    if (!daemon) return;
    await daemon.stop();
    assert.equal(isMounted(mnt), false, 'nothing left mounted');
    rmDir(root);
  });

  it('stat PATH: version, sha256 (as sha256sum computes it), size, tier, pinned, commit time', () => {
    const f = path.join(mnt, 'kv', 'llama', 'r0', 'b0.bin');
    const data = seededBytes(7, 3 * 1024 * 1024 + 5);
    fs.mkdirSync(path.dirname(f), { recursive: true });
    const before = Date.now();
    fs.writeFileSync(f, data);
    const s = json<StatJson>(cascade(['stat', f, '--json']));
    const sum = spawnSync('sha256sum', [f]).stdout.toString().split(' ')[0];
    assert.equal(s.sha256, sum);
    assert.equal(s.sha256, sha256(data));
    assert.deepEqual([s.path, s.name, s.version, s.sizeBytes, s.tier, s.pinned], [f, 'llama/r0/b0.bin', 1, data.length, 'dram', false]);
    assert.ok(s.timeMs >= before - 1000 && s.timeMs <= Date.now() + 1000, `commit time ${s.timeMs}`);
    const text = cascade(['stat', f]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout.toString(), new RegExp(`^version  1$[\\s\\S]*^sha256   ${sum}$[\\s\\S]*^size     ${data.length} [\\s\\S]*^tier     dram$[\\s\\S]*^pinned   false$`, 'm'));
    // A relative path from inside the mount, and a name with --mount, name the same file.
    assert.equal(json<StatJson>(cascade(['stat', 'b0.bin', '--json'], undefined, path.dirname(f))).sha256, sum);
    assert.equal(json<StatJson>(cascade(['stat', '--mount', mnt, 'llama/r0/b0.bin', '--json'])).sha256, sum);
  });

  it('pin and unpin PATH... change pinned (as getfattr sees it); past the pin quota: EDQUOT, exit 1', () => {
    const d = path.join(mnt, 'kv', 'llama', 'sys');
    fs.mkdirSync(d, { recursive: true });
    const files = ['p0.bin', 'p1.bin'].map((n) => path.join(d, n));
    files.forEach((f, i) => fs.writeFileSync(f, seededBytes(20 + i, 100_000)));
    assert.equal(cascade(['pin', ...files]).code, 0);
    for (const f of files) {
      assert.equal(json<StatJson>(cascade(['stat', f, '--json'])).pinned, true);
      assert.equal(getfattr(f, 'user.cascade.pinned'), '1');
    }
    const un = cascade(['unpin', '--mount', mnt, 'llama/sys/p0.bin']);
    assert.equal(un.code, 0, un.stderr);
    assert.equal(json<StatJson>(cascade(['stat', files[0], '--json'])).pinned, false);
    assert.equal(getfattr(files[0], 'user.cascade.pinned'), '0');
    assert.equal(cascade(['unpin', files[1]]).code, 0);
    assert.equal(getfattr(files[1], 'user.cascade.pinned'), '0');

    const big = path.join(d, 'big.bin');
    fs.writeFileSync(big, seededBytes(30, 5 * 1024 * 1024)); // over the daemon's 4 MiB pin quota
    const over = cascade(['pin', big]);
    assert.equal(over.code, 1);
    assert.match(over.stderr, /^cascade: EDQUOT: .*big\.bin: pinning it would exceed the pin quota/);
    assert.equal(getfattr(big, 'user.cascade.pinned'), '0');
    const missing = cascade(['pin', path.join(d, 'nope.bin')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^cascade: ENOENT: .*nope\.bin: no such file/);
  });

  it('versions PATH lists both versions after an overwrite; each reads back from the versions tree', () => {
    const f = path.join(mnt, 'kv', 'llama', 'v.bin');
    fs.writeFileSync(f, 'first version');
    fs.writeFileSync(f, 'the second one');
    const vs = json<{ version: number; sizeBytes: number; timeMs: number; current: boolean; sha256?: string; path: string }[]>(cascade(['versions', f, '--json']));
    assert.deepEqual(vs.map((v) => [v.version, v.sizeBytes, v.current]), [[1, 13, false], [2, 14, true]]);
    assert.equal(vs[1].sha256, sha256(Buffer.from('the second one')));
    assert.equal(fs.readFileSync(vs[0].path, 'utf8'), 'first version');
    assert.ok(vs[0].timeMs <= vs[1].timeMs);
    assert.equal(json<StatJson>(cascade(['stat', f, '--json'])).version, 2, 'stat shows the highest version');
    const text = cascade(['versions', f]).stdout.toString().trim().split('\n');
    assert.equal(text.length, 3);
    assert.equal(text[0], 'VERSION\tTIME\tBYTES\tPATH', 'a header');
    assert.match(text[2], /^2\t\S+Z\t14\t.*\/\.cascade\/versions\/kv\/llama\/v\.bin\/2\tcurrent sha256 [0-9a-f]{64}$/);
  });

  it('stats --json parses with tiers, from --mount, a PATH, or the current directory', () => {
    interface StatsJson { mount: string; tiers: { name: string; blocks: number }[]; names: number; dedup: { hits: number } }
    const viaMount = json<StatsJson>(cascade(['stats', '--mount', mnt, '--json']));
    assert.equal(viaMount.mount, mnt);
    assert.deepEqual(viaMount.tiers.map((t) => t.name), ['dram', 'disk']);
    assert.ok(viaMount.names >= 5, `names ${viaMount.names}`);
    assert.equal(typeof viaMount.dedup.hits, 'number');
    assert.equal(json<StatsJson>(cascade(['stats', path.join(mnt, 'kv', 'llama'), '--json'])).mount, mnt);
    assert.equal(json<StatsJson>(cascade(['stats', '--json'], undefined, path.join(mnt, 'kv'))).mount, mnt);
    const text = cascade(['stats', '--mount', mnt]);
    assert.match(text.stdout.toString(), /^tier dram: \d+ blocks/m);
  });

  it('warmup DIR after a restart moves every file from disk to DRAM (no bar without a TTY)', async () => {
    const d = path.join(mnt, 'kv', 'llama', 'warm');
    fs.mkdirSync(path.join(d, 'sub'), { recursive: true });
    const files = Array.from({ length: 8 }, (_, i) => path.join(d, i % 2 ? 'sub' : '', `b${i}.bin`));
    files.forEach((f, i) => fs.writeFileSync(f, seededBytes(100 + i, 1024 * 1024 + i)));
    // A restart empties DRAM: every block is on disk only, until something reads it.
    await daemon!.stop();
    await daemon!.start();
    for (const f of files) assert.equal(getfattr(f, 'user.cascade.tier'), 'disk', `${f} starts on disk`);

    const r = cascade(['warmup', d, '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, '', 'no progress bar into a pipe');
    const out = JSON.parse(r.stdout.toString()) as { files: number; bytes: number; inDram: number; tiers: Record<string, number>; GBps: number };
    const totalBytes = files.reduce((s, _f, i) => s + 1024 * 1024 + i, 0);
    assert.deepEqual([out.files, out.bytes, out.inDram, out.tiers], [8, totalBytes, 8, { dram: 8 }]);
    assert.ok(out.GBps > 0);
    for (const f of files) assert.equal(getfattr(f, 'user.cascade.tier'), 'dram', `${f} is in DRAM after warmup`);

    const text = cascade(['warmup', files[0]]);
    assert.match(text.stdout.toString(), /^warmup: 1 files, 1\.0 MiB read in [\d.]+ s \([\d.]+ GB\/s\)\nin dram: 1 of 1$/m);
    // On a terminal (script(1) gives it one) the bar is drawn on stderr.
    if (spawnSync('which', ['script']).status === 0) {
      const tty = spawnSync('script', ['-qec', `${process.execPath} ${CLI} warmup ${d}`, '/dev/null'], { maxBuffer: 1 << 20 });
      assert.equal(tty.status, 0, tty.stdout.toString());
      assert.match(tty.stdout.toString(), /warmup \[[^\]]+\] 100% \| 8\.0 MiB of 8\.0 MiB \| 8\/8 files/);
    }
  });

  it('a path outside any mount, or a store name without --data: exit 1 with a clear message; usage mistakes: exit 2', () => {
    const outside = path.join(os.tmpdir(), 'cascade-cli-outside.bin');
    fs.writeFileSync(outside, 'x');
    try {
      for (const args of [['stat', outside], ['pin', outside], ['versions', outside], ['warmup', outside], ['stat', 'llama/r0/b0.bin']]) {
        const r = cascade(args);
        assert.equal(r.code, 1, args.join(' '));
        assert.match(r.stderr, /^cascade: EINVAL: .*: not inside a cascade mount; pass --data DIR to use a data directory directly\n$/, args.join(' '));
      }
      const here = cascade(['stats'], undefined, os.tmpdir());
      assert.equal(here.code, 1);
      assert.match(here.stderr, /the current directory .*not inside a cascade mount/);
    } finally {
      fs.rmSync(outside, { force: true });
    }
    const f = path.join(mnt, 'kv', 'llama', 'r0', 'b0.bin');
    assert.equal(cascade(['stat', f, '--version', '1']).code, 2, '--version needs --data');
    assert.equal(cascade(['stat', f, '--mount', mnt, '--data', root]).code, 2, '--mount and --data exclude each other');
    assert.equal(cascade(['warmup', f, '--data', root]).code, 2);
    const dir = cascade(['stat', path.dirname(f)]);
    assert.equal(dir.code, 1);
    assert.match(dir.stderr, /EISDIR/);
    const meta = cascade(['warmup', path.join(mnt, '.cascade')]);
    assert.equal(meta.code, 1);
    assert.match(meta.stderr, /not the virtual \.cascade tree/);
  });
});

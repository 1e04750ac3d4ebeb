/**
 * The cascade CLI: direct data-directory access (--data), and the same commands on a real FUSE mount
 * (a `cascade mount` daemon in a child process, as in mount.test.ts) through files and xattrs.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultDataDir } from '../../mount/daemon/defaults';
import { Store } from '../../store/store';
import { formatBytes, parseSize } from '../../mount/cli/size';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import { walkPins, type PathStat, type PinsListing } from '../../mount/cli/mounted';
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

  it('get, stat and versions on a data directory that is not there fail (exit 1) and create nothing; put creates it', () => {
    const missing = path.join(dir, 'not-there');
    for (const args of [['get', 'm/x'], ['stat', 'm/x'], ['versions', 'm/x']]) {
      const r = cascade([...args, '--data', missing]);
      assert.equal(r.code, 1, `${args[0]}: ${r.stderr}`);
      assert.match(r.stderr, /no data directory at .*not-there/);
      assert.equal(fs.existsSync(missing), false, `${args[0]} left no directory behind`);
    }
    const put = cascade(['put', 'm/x', '-', '--data', missing], Buffer.from('made'));
    assert.equal(put.code, 0, put.stderr);
    assert.equal(cascade(['get', 'm/x', '--data', missing]).stdout.toString(), 'made');
  });

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
    const longGroup = cascade(['mount', path.join(dir, 'mnt'), '--meta-group-commit-ms', '2000']);
    assert.equal(longGroup.code, 2);
    assert.match(longGroup.stderr, /--meta-group-commit-ms must be a whole number of milliseconds from 0 to 1000, not 2000/);
    const version = cascade(['--version']);
    assert.equal(version.code, 0);
    assert.match(version.stdout.toString(), /^cascade \d+\.\d+\.\d+\n$/);
    const usage = cascade(['frobnicate']);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--help/);
  });

  it('pins --data DIR lists the names whose content is pinned, and the quota', () => {
    const pins = () => json<{ dataDir: string; pinned: { blocks: number; bytes: number; quotaBytes: number }; files: { name: string; sizeBytes: number; sha256: string }[]; total: number }>(cascade(['pins', ...common, '--json']));
    assert.deepEqual(pins().files, []);
    assert.equal(cascade(['put', 'llama/p/x', '-', ...common], Buffer.from('pinned prefix')).code, 0);
    assert.equal(cascade(['pin', 'llama/p/x', ...common]).code, 0);
    const listed = pins();
    assert.deepEqual(listed.files, [{ name: 'llama/p/x', sizeBytes: 13, sha256: sha256(Buffer.from('pinned prefix')) }]);
    assert.deepEqual([listed.total, listed.pinned.blocks, listed.pinned.bytes, listed.pinned.quotaBytes], [1, 1, 13, 16 * 2 ** 20], 'half of --dram 32M');
    const text = cascade(['pins', ...common]).stdout.toString();
    assert.match(text, /^pinned: 1 file\(s\), 1 block\(s\), 13 B of a 16\.0 MiB quota \(0\.0%\)\nNAME\tBYTES\tSHA256\nllama\/p\/x\t13\t[0-9a-f]{64}\n$/);
    assert.equal(cascade(['unpin', 'llama/p/x', ...common]).code, 0);
    assert.deepEqual(pins().files, []);
    assert.equal(cascade(['pins', 'somewhere', ...common]).code, 2, 'a PATH with --data is a usage error');
  });

  it("each command's --help lists its own options only, with real defaults; usage errors exit 2", () => {
    const help = (cmd: string[]) => {
      const r = cascade([...cmd, '--help']);
      assert.equal(r.code, 0, r.stderr);
      return r.stdout.toString();
    };
    const unmount = help(['unmount']);
    assert.doesNotMatch(unmount, /--dram|--data|--json/, 'mount and direct-access options are not unmount\'s');
    assert.match(unmount, /--wait/);
    const pin = help(['pin']);
    assert.doesNotMatch(pin, /\[default: \[\]\]/, 'a required list has no default');
    assert.match(pin, /\[array\] \[required\]/);
    const mount = help(['mount']);
    assert.match(mount, /--keep-versions\s+versions kept per file name\s+\[number\] \[default: 8\]/);
    assert.doesNotMatch(mount, /the store default/);
    assert.match(mount, /--dram\s+DRAM tier size, e\.g\. 512M, 8G\s+\[string\] \[default: \d+M \(a quarter of memory/);
    assert.doesNotMatch(mount, /--json/);
    assert.match(help(['stat']), /--dram\s+with --data: [^[]*\[string\] \[default: 256M\]/);
    for (const cmd of ['evict', 'warmup', 'mounts', 'unmount']) assert.doesNotMatch(help([cmd]), /--data/, `${cmd} takes no --data`);
    assert.match(help(['pins']), /--data/);
    assert.match(help(['warmup']), /--from/);
    assert.doesNotMatch(help(['fsck']), /--dram/);
    for (const args of [['unmount', '/nowhere', '--dram', '1G'], ['stat', 'x', '--dram', '1G'], ['warmup'], ['evict'], ['warmup', 'x', '--data', dir], ['fsck', '--dram', '1G']]) {
      const r = cascade(args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /--help/);
    }
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

// ---- pins, evict and warmup --from on a real mount, on each FUSE engine ----

/** Both engines, unless CASCADE_ENGINE names one (a run of the suite for one engine). */
const ENGINES_UNDER_TEST = process.env.CASCADE_ENGINE === 'native' || process.env.CASCADE_ENGINE === 'fuse-native' ? [process.env.CASCADE_ENGINE] : ['native', 'fuse-native'];

interface StatsJson {
  tiers: { name: string; usedBytes: number; capacityBytes: number }[];
  evictions: number;
}

for (const engine of ENGINES_UNDER_TEST) {
  describe(`cascade pins, evict, warmup --from on a mount (engine ${engine})`, function () {
    this.timeout(120_000);
    let root: string;
    let mnt: string;
    let daemon: Daemon | undefined;
    const file = (rel: string) => path.join(mnt, 'kv', 'llama', ...rel.split('/'));
    const write = (rel: string, data: Buffer) => {
      fs.mkdirSync(path.dirname(file(rel)), { recursive: true });
      fs.writeFileSync(file(rel), data);
      return file(rel);
    };
    const stats = () => json<StatsJson>(cascade(['stats', '--mount', mnt, '--json']));

    before(async function () {
      if (!canMount(['fusermount', 'getfattr'])) this.skip();
      root = tmpDir(`cli-ops-${engine}`);
      mnt = path.join(root, 'mnt');
      fs.mkdirSync(mnt);
      daemon = new Daemon(mnt, path.join(root, 'data'), ['--engine', engine, '--dram', '32M', '--pin-quota', '4M']);
      await daemon.start();
    });
    after(async function () {
      if (!daemon) return;
      await daemon.stop();
      assert.equal(isMounted(mnt), false, 'nothing left mounted');
      rmDir(root);
    });

    it('pins lists exactly the pinned files (path, size, sha256) and the pin quota in use', async () => {
      const prompt = seededBytes(200, 100_000);
      const other = seededBytes(201, 50_000);
      const p0 = write('pins/p0.bin', prompt);
      const p1 = write('pins/p1.bin', prompt); // the same content: pinning p0 pins it too
      const p2 = write('pins/p2.bin', other);
      const u = write('pins/u.bin', seededBytes(202, 30_000));
      const pins = () => json<PinsListing>(cascade(['pins', '--mount', mnt, '--json']));
      assert.deepEqual(pins(), { mount: mnt, pinned: { blocks: 0, bytes: 0, quotaBytes: 4 * 2 ** 20 }, files: [], total: 0, truncated: false });

      assert.equal(cascade(['pin', p0, p2]).code, 0);
      const listed = pins();
      const entry = (p: string, data: Buffer) => ({ path: p, name: path.relative(path.join(mnt, 'kv'), p), sizeBytes: data.length, sha256: sha256(data) });
      assert.deepEqual(listed.files, [entry(p0, prompt), entry(p1, prompt), entry(p2, other)]);
      assert.deepEqual([listed.total, listed.truncated, listed.pinned], [3, false, { blocks: 2, bytes: 150_000, quotaBytes: 4 * 2 ** 20 }]);
      // Exactly the files stat calls pinned.
      const pinnedByStat = [p0, p1, p2, u].filter((f) => json<StatJson>(cascade(['stat', f, '--json'])).pinned);
      assert.deepEqual(listed.files.map((f) => f.path), pinnedByStat);

      const text = cascade(['pins', path.join(mnt, 'kv', 'llama')]);
      assert.equal(text.code, 0, text.stderr);
      assert.equal(
        text.stdout.toString(),
        `pinned: 3 file(s), 2 block(s), ${formatBytes(150_000)} of a 4.0 MiB quota (3.6%)\nPATH\tBYTES\tSHA256\n` +
          listed.files.map((f) => `${f.path}\t${f.sizeBytes}\t${f.sha256}\n`).join(''),
      );
      assert.deepEqual(json<PinsListing>(cascade(['pins', '--json'], undefined, path.dirname(p0))).files, listed.files, 'the mount of the current directory');
      // The walk a daemon without pins.json gets finds the same.
      const walked = await walkPins(mnt);
      assert.deepEqual([walked.files, walked.total, walked.pinned], [listed.files, 3, listed.pinned]);

      assert.equal(cascade(['unpin', p1]).code, 0); // unpins the content: p0 and p1
      assert.deepEqual(pins().files.map((f) => f.path), [p2]);
      assert.equal(cascade(['unpin', p2]).code, 0);
      assert.deepEqual(pins().files, []);
    });

    it('evict drops a file from DRAM (tier dram -> disk, one eviction more); it still reads byte-exact', () => {
      const data = seededBytes(210, 2 * 1024 * 1024 + 7);
      const f = write('ev/e0.bin', data);
      assert.equal(getfattr(f, 'user.cascade.tier'), 'dram');
      const before = stats();
      const r = cascade(['evict', f]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout.toString(), `evicted ${f} (dram -> disk)\n`);
      assert.equal(getfattr(f, 'user.cascade.tier'), 'disk', 'no longer in DRAM');
      const after = stats();
      assert.ok(after.evictions >= before.evictions + 1, `evictions ${before.evictions} -> ${after.evictions}`);
      const dram = (s: StatsJson) => s.tiers.find((t) => t.name === 'dram')!.usedBytes;
      assert.ok(dram(after) <= dram(before) - data.length, `DRAM in use ${dram(before)} -> ${dram(after)}`);
      assert.ok(fs.readFileSync(f).equals(data), 'reads back byte-exact from disk');
      assert.equal(spawnSync('sha256sum', [f]).stdout.toString().split(' ')[0], sha256(data));

      const again = json<{ path: string; evicted: boolean; tierBefore: string; tierAfter: string }[]>(cascade(['evict', '--mount', mnt, 'llama/ev/e0.bin', '--json']));
      assert.deepEqual([again.length, again[0].path, again[0].tierAfter], [1, f, 'disk'], 'a name under --mount; whatever the read promoted is gone again');
    });

    it('evict of a pinned file is refused with a clear message and exit 1; the other files are still evicted', () => {
      const pinned = write('ev/k0.bin', seededBytes(220, 300_000));
      const plain = write('ev/k1.bin', seededBytes(221, 300_000));
      assert.equal(cascade(['pin', pinned]).code, 0);
      const r = cascade(['evict', pinned, plain]);
      assert.equal(r.code, 1);
      assert.equal(r.stderr, `cascade: EPERM: ${pinned} is pinned; unpin it first (cascade unpin ${pinned})\n`);
      assert.equal(r.stdout.toString(), `evicted ${plain} (dram -> disk)\n`);
      assert.equal(getfattr(pinned, 'user.cascade.tier'), 'dram', 'the pinned file stays in DRAM');
      assert.equal(getfattr(plain, 'user.cascade.tier'), 'disk');
      const typo = cascade(['evict', plain, path.join(path.dirname(plain), 'nope.bin')]);
      assert.equal(typo.code, 1);
      assert.match(typo.stderr, /^cascade: ENOENT: .*nope\.bin: no such file/);
      assert.equal(cascade(['unpin', pinned]).code, 0);
      assert.equal(cascade(['evict', pinned]).code, 0, 'unpinned, it goes');
      assert.equal(getfattr(pinned, 'user.cascade.tier'), 'disk');
    });

    it('evict while a reader has the file open: the reader still reads byte-exact', () => {
      const data = seededBytes(230, 3 * 1024 * 1024);
      const f = write('ev/open.bin', data);
      const fd = fs.openSync(f, 'r');
      try {
        const head = Buffer.alloc(4096);
        assert.equal(fs.readSync(fd, head, 0, head.length, 0), head.length);
        const r = cascade(['evict', f]);
        // Freed under the reader (its reads fall back to disk), or refused while the reader holds the DRAM copy.
        if (r.code !== 0) assert.match(r.stderr, /^cascade: EBUSY: .* is held in DRAM by a reader/);
        const rest = Buffer.alloc(data.length);
        let n = 0;
        for (let got; (got = fs.readSync(fd, rest, n, rest.length - n, n)) > 0; ) n += got;
        assert.equal(n, data.length);
        assert.ok(rest.equals(data), 'the open reader reads the same bytes');
      } finally {
        fs.closeSync(fd);
      }
    });

    it('warmup --from FILE and --from - load the listed files; one warning line when they exceed free DRAM, and it goes on', () => {
      const files = Array.from({ length: 6 }, (_, i) => write(`warm/w${i}.bin`, seededBytes(240 + i, 6 * 1024 * 1024)));
      assert.equal(cascade(['evict', ...files]).code, 0);
      for (const f of files) assert.equal(getfattr(f, 'user.cascade.tier'), 'disk');

      const small = path.join(root, 'small.list');
      fs.writeFileSync(small, `${files[0]}\r\n\n  \n${files[1]}\n`); // CRLF and blank lines
      const r = cascade(['warmup', '--from', small, '--json']);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stderr, '', '12 MiB fits the free DRAM: no warning');
      const out = JSON.parse(r.stdout.toString()) as { files: number; inDram: number; bytes: number };
      assert.deepEqual([out.files, out.inDram, out.bytes], [2, 2, 12 * 1024 * 1024]);

      // 36 MiB listed, 24 of them on disk: more than the 32 MiB tier.
      const big = cascade(['warmup', '--from', '-', files[5], '--json'], Buffer.from(files.slice(0, 5).join('\n')));
      assert.equal(big.code, 0, big.stderr);
      const lines = big.stderr.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 1, big.stderr);
      assert.match(lines[0], new RegExp(`^cascade: warning: warmup reads 36\\.0 MiB, more than the whole DRAM tier of ${mnt} \\([\\d.]+ \\S+ free of 32\\.0 MiB\\).*; going on$`));
      assert.equal((JSON.parse(big.stdout.toString()) as { files: number }).files, 6, 'and it went on: every file was read');

      const long = path.join(root, 'long.list');
      fs.writeFileSync(long, `${files[0]}\n${'x'.repeat(5000)}\n`);
      const bad = cascade(['warmup', '--from', long]);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /^cascade: EINVAL: --from .*long\.list: line 2 is over 4096 bytes/);
      assert.equal(cascade(['warmup', '--from', path.join(root, 'missing.list')]).code, 1);
    });
  });
}

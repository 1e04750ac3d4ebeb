/**
 * The programs in examples/ run against a real `cascade mount`, as their header comments say to run
 * them, and must read every block byte-exact (SHA-256 against what was written): numpy (np.fromfile,
 * and np.load(mmap_mode='r') of an .npy written through the mount), plain C built with cc, and the
 * same-node socket from Python.
 */
import * as assert from 'node:assert/strict';
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import { canMount, Daemon } from './daemon';

const EXAMPLES = path.join(__dirname, '..', '..', '..', 'examples');
const MiB = 1024 * 1024;

/** Runs a tool against the mount (another process: the daemon is one too, so nothing deadlocks). */
function run(cmd: string, args: string[]): SpawnSyncReturns<string> {
  return spawnSync(cmd, args, { encoding: 'utf8', timeout: 60_000 });
}

function ok(r: SpawnSyncReturns<string>, what: string): string {
  assert.equal(r.status, 0, `${what} exited ${r.status} (${r.signal ?? 'no signal'}): ${r.stdout}${r.stderr}${r.error ? String(r.error) : ''}`);
  return r.stdout;
}

describe('examples/ against a real mount', function () {
  this.timeout(120_000);
  let root: string;
  let mnt: string;
  let daemon: Daemon | undefined;
  let kv: string;

  before(async function () {
    if (!canMount(['fusermount', 'python3', 'cc'])) return this.skip();
    root = tmpDir('examples');
    mnt = path.join(root, 'mnt');
    daemon = new Daemon(mnt, path.join(root, 'data')); // 64 MiB of DRAM
    await daemon.start();
    kv = path.join(mnt, 'kv', 'llama-3-8b', 'req-0');
    fs.mkdirSync(kv, { recursive: true });
  });

  after(async function () {
    await daemon?.stop();
    if (root) rmDir(root);
  });

  it('numpy_read.py: np.fromfile of a block, np.load(mmap_mode="r") of an .npy written through the mount', function () {
    if (run('python3', ['-c', 'import numpy']).status !== 0) {
      this.test!.title += ' (skipped: numpy is not importable by python3; pip install numpy)';
      return this.skip();
    }
    // 4 MiB of float16 in a KV layout: [K/V, layers, heads, tokens, head dim]; more than one FUSE read.
    const data = seededBytes(1, 4 * MiB);
    const block = path.join(kv, 'block-000.bin');
    fs.writeFileSync(block, data);
    const npy = path.join(kv, 'block-000.npy');
    const out = ok(run('python3', [path.join(EXAMPLES, 'numpy_read.py'), block, '--dtype', 'float16', '--shape', '2,4,8,256,128', '--npy', npy]), 'numpy_read.py');

    const want = sha256(data);
    const fromfile = /^fromfile bytes=(\d+) dtype=float16 shape=\(2, 4, 8, 256, 128\) sha256=([0-9a-f]{64}) verified=user\.cascade\.sha256$/m.exec(out);
    assert.ok(fromfile, out);
    assert.equal(Number(fromfile[1]), data.length);
    assert.equal(fromfile[2], want, 'np.fromfile read other bytes');
    const mapped = /^npy-mmap mode=([rc]) bytes=(\d+) dtype=float16 shape=\(2, 4, 8, 256, 128\) sha256=([0-9a-f]{64})$/m.exec(out);
    assert.ok(mapped, out);
    assert.equal(mapped[3], want, 'the mapped .npy holds other bytes');
    // Shared read-only mmap works on the native engine (FUSE_DIRECT_IO_ALLOW_MMAP); only fuse-native
    // needs the private fallback.
    if (daemon!.stderr.includes('(engine native:')) assert.equal(mapped[1], 'r', 'the native engine refused a shared mapping');

    // The .npy np.save wrote through the mount: numpy's header, then exactly our bytes.
    const file = fs.readFileSync(npy);
    assert.ok(file.subarray(0, 6).equals(Buffer.from('\x93NUMPY', 'latin1')), 'an .npy header');
    assert.equal(sha256(file.subarray(file.length - data.length)), want);
    assert.equal(file.readUInt16LE(8) + 10, file.length - data.length, 'header length + data = file size');
  });

  it('read_block.c: built with cc as its comment says; open/read/close a block byte-exact; errors reported', function () {
    const bin = path.join(root, 'read_block');
    // The build line of its header, plus warnings as errors: an example should compile clean.
    ok(run('cc', ['-O2', '-Wall', '-Wextra', '-Werror', '-o', bin, path.join(EXAMPLES, 'read_block.c')]), 'cc');

    const data = seededBytes(2, 5 * MiB + 123); // not a multiple of any page or request size
    const block = path.join(kv, 'block-001.bin');
    fs.writeFileSync(block, data);
    const copy = path.join(root, 'block-001.copy');
    const r = run(bin, [block, copy]);
    ok(r, 'read_block');
    assert.match(r.stderr, new RegExp(`: ${data.length} bytes in `));
    assert.equal(sha256(fs.readFileSync(copy)), sha256(data));

    const missing = run(bin, [path.join(kv, 'no-such-block.bin')]);
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, /^read_block: open .*no-such-block\.bin: No such file or directory$/m);
    assert.equal(run(bin, []).status, 2, 'usage');
  });

  it('socket_client.py: blocks over the same-node socket, hashed in the mapped arena; current versions; ENOENT', function () {
    // The daemon offers the socket where it has the native addon's arena; asked of the mount itself,
    // so this process never loads the addon.
    if (!fs.existsSync(path.join(mnt, '.cascade', 'client.json'))) {
      this.test!.title += ' (skipped: the daemon offers no same-node client: no native addon)';
      return this.skip();
    }
    const script = path.join(EXAMPLES, 'socket_client.py');
    const a = seededBytes(3, 3 * MiB + 17);
    const b = seededBytes(4, 64 * 1024 + 1); // a small block: another size class in the arena
    const fa = path.join(kv, 'block-002.bin');
    const fb = path.join(kv, 'block-003.bin');
    fs.writeFileSync(fa, a);
    fs.writeFileSync(fb, b);
    const copy = path.join(root, 'block-002.copy');
    const one = ok(run('python3', [script, fa, '--out', copy]), 'socket_client.py --out');
    assert.equal(one, `${fa} version=1 bytes=${a.length} sha256=${sha256(a)} verified\n`);
    assert.equal(sha256(fs.readFileSync(copy)), sha256(a));

    // A rewrite is a new version, and the socket serves the current one.
    const a2 = seededBytes(5, 2 * MiB);
    fs.writeFileSync(fa, a2);
    const missing = path.join(kv, 'no-such-block.bin');
    const r = run('python3', [script, fa, fb, missing]);
    assert.equal(r.status, 1, 'a missing file fails the run');
    assert.equal(r.stdout, `${fa} version=2 bytes=${a2.length} sha256=${sha256(a2)} verified\n${fb} version=1 bytes=${b.length} sha256=${sha256(b)} verified\n`);
    assert.match(r.stderr, /no-such-block\.bin: ENOENT/);
  });
});

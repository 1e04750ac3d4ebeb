/**
 * The GPU tier through a real mount. Everywhere: a mount asked for --gpu on a machine without a usable
 * GPU runs without the tier, says why in .cascade/stats.json, and answers user.cascade.cuda_ipc with
 * clear errnos (direct syscalls from Python). On a GPU machine (skipped elsewhere; run there with the
 * device tool): a 64 MiB block written through the mount, loaded into the GPU tier, read back through
 * the mount from it (page cache dropped), and opened from a second process through CUDA IPC
 * (examples/cuda_ipc_read.py, byte-exact by SHA-256), with its lease ended by the process's exit.
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { probeGpu } from '../../store/tiers/gpu';
import { canMount, Daemon } from './daemon';

const EXAMPLE = path.join(__dirname, '..', '..', '..', 'examples', 'cuda_ipc_read.py');

function py(code: string, args: string[] = [], timeoutMs = 60_000): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('python3', ['-c', code, ...args], { encoding: 'utf8', timeout: timeoutMs });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** errno name of os.getxattr/setxattr/removexattr of user.cascade.cuda_ipc, or 'ok:<value>'. */
function xattrErrno(op: 'get' | 'set' | 'remove', file: string): string {
  const call = op === 'get' ? 'os.getxattr(f, n).decode()' : op === 'set' ? "os.setxattr(f, n, b'x')" : 'os.removexattr(f, n)';
  const r = py(`import os, errno, sys\nf, n = sys.argv[1], 'user.cascade.cuda_ipc'\ntry:\n  print('ok:' + str(${call}))\nexcept OSError as e:\n  print(errno.errorcode[e.errno])`, [file]);
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

function stats(mnt: string): { gpu: { available: boolean; reason?: string; blocks: number; leases: number }; hits: Record<string, number>; tiers: Array<{ name: string }> } {
  return JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8'));
}

describe('GPU tier through the mount', function () {
  this.timeout(120_000);
  let root: string;
  let daemon: Daemon | undefined;

  before(function () {
    if (!canMount(['fusermount', 'python3'])) this.skip();
  });
  beforeEach(() => (root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-gpu-mnt-'))));
  afterEach(async () => {
    await daemon?.stop();
    daemon = undefined;
    fs.rmSync(root, { recursive: true, force: true });
  });

  async function mount(extra: string[]): Promise<string> {
    const mnt = path.join(root, 'mnt');
    daemon = new Daemon(mnt, path.join(root, 'data'), ['--engine', 'native', ...extra]);
    await daemon.start();
    return mnt;
  }

  it('without a usable GPU: mounts anyway, stats say why, cuda_ipc is EOPNOTSUPP (get), EPERM (set), ENODATA (remove)', async function () {
    if (probeGpu().available) return this.skip(); // covered by the GPU test below
    const mnt = await mount(['--gpu', '64M']);
    assert.match(daemon!.stderr, /GPU tier off: /);
    const s = stats(mnt);
    assert.equal(s.gpu.available, false);
    assert.ok((s.gpu.reason ?? '').length > 0);
    assert.deepEqual(s.tiers.map((t) => t.name), ['dram', 'disk']);
    fs.mkdirSync(path.join(mnt, 'kv', 'm'), { recursive: true });
    const f = path.join(mnt, 'kv', 'm', 'a');
    fs.writeFileSync(f, 'block');
    assert.ok(['EOPNOTSUPP', 'ENOTSUP'].includes(xattrErrno('get', f)), 'EOPNOTSUPP (Python names errno 95 ENOTSUP)');
    assert.equal(xattrErrno('set', f), 'EPERM');
    assert.equal(xattrErrno('remove', f), 'ENODATA');
    assert.equal(fs.readFileSync(f, 'utf8'), 'block', 'everything else works as before');
    // Not listed: `getfattr -d` must not take leases.
    const listed = py('import os, sys\nprint(",".join(os.listxattr(sys.argv[1])))', [f]).stdout.trim();
    assert.ok(!listed.includes('cuda_ipc'), listed);
  });

  it('without --gpu: stats say the tier is off and how to turn it on', async function () {
    const mnt = await mount([]);
    assert.match(stats(mnt).gpu.reason ?? '', /--gpu/);
  });

  it('on a GPU: 64 MiB through the mount, served from the GPU tier, and opened by a second process over CUDA IPC', async function () {
    if (!probeGpu().available) return this.skip();
    // DRAM smaller than the block: the written block goes to disk, so reads come from the GPU tier.
    const mnt = await mount(['--dram', '32M', '--gpu', '512M']);
    fs.mkdirSync(path.join(mnt, 'kv', 'm'), { recursive: true });
    const f = path.join(mnt, 'kv', 'm', 'block64');
    const w = py(
      'import os, sys, hashlib\ndata = os.urandom(64 << 20)\nwith open(sys.argv[1], "wb") as f: f.write(data)\nprint(hashlib.sha256(data).hexdigest())',
      [f],
    );
    assert.equal(w.status, 0, w.stderr);
    const sha = w.stdout.trim();
    // A second process: lease, GPU->GPU copy into its own buffer, copy back, SHA-256 checked.
    const r = spawnSync('python3', [EXAMPLE, f, '--verify', '--json', '--repeat', '3'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    const out = JSON.parse(r.stdout);
    assert.equal(out.sizeBytes, 64 << 20);
    assert.equal(out.sha256Ok, true, 'the IPC reader got the exact bytes');
    assert.equal(fs.readFileSync(path.join(mnt, 'kv', 'm', 'block64'), { flag: 'r' }).length, 64 << 20);
    const tier = py('import os, sys\nprint(os.getxattr(sys.argv[1], "user.cascade.tier").decode())', [f]).stdout.trim();
    assert.equal(tier, 'gpu');
    // Read through the mount, page cache dropped first: served by the GPU tier, byte-exact.
    const before = stats(mnt).hits.gpu ?? 0;
    const rd = py(
      'import os, sys, hashlib\nfd = os.open(sys.argv[1], os.O_RDONLY)\nos.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\nh = hashlib.sha256()\nwhile True:\n  b = os.read(fd, 1 << 20)\n  if not b: break\n  h.update(b)\nprint(h.hexdigest())',
      [f],
    );
    assert.equal(rd.status, 0, rd.stderr);
    assert.equal(rd.stdout.trim(), sha, 'read back through the mount byte-exact');
    assert.ok((stats(mnt).hits.gpu ?? 0) > before, 'served from the GPU tier');
    // A lease lasts while its process lives: a process that takes one and exits without releasing it.
    const held = py('import os, sys, json\nprint(json.loads(os.getxattr(sys.argv[1], "user.cascade.cuda_ipc"))["size"])', [f]);
    assert.equal(held.stdout.trim(), String(64 << 20), held.stderr);
    let leases = stats(mnt).gpu.leases;
    for (let i = 0; i < 40 && leases > 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      leases = JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8')).gpu.leases;
    }
    assert.equal(leases, 0, 'the exited process\'s lease ended');
    assert.equal(sha.length, 64);
  });
});

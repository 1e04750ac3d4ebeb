/**
 * Storage faults under a real mount (CASCADE_FAILPOINTS, store/faults.ts), seen through direct system
 * calls from Python: failed segment reads give EIO or the exact bytes, never others, and the daemon
 * stays up and stops cleanly; a failed fdatasync makes fsync(2) fail (never an acknowledgement), a later
 * fsync succeeds, and what it acknowledged survives kill -9.
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { canMount, Daemon } from './daemon';

function py(code: string, args: string[]): string {
  const r = spawnSync('python3', ['-c', code, ...args], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, `python failed: ${r.stderr}`);
  return r.stdout.trim();
}

const WRITE_FILES = `
import os, sys, hashlib
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
for i in range(n):
    data = hashlib.sha256(b'%d' % i).digest() * (size // 32)
    fd = os.open(os.path.join(d, 'f%03d' % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data); os.fsync(fd); os.close(fd)
`;

const READ_FILES = `
import os, sys, hashlib, errno, json
d, n, size, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
out = {'exact': 0, 'eio': 0, 'wrong': 0, 'other': []}
for r in range(rounds):
    for i in range(n):
        want = hashlib.sha256(b'%d' % i).digest() * (size // 32)
        try:
            fd = os.open(os.path.join(d, 'f%03d' % i), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                got = b''
                while True:
                    b = os.read(fd, 1 << 20)
                    if not b: break
                    got += b
            finally:
                os.close(fd)
            if got == want: out['exact'] += 1
            else: out['wrong'] += 1
        except OSError as e:
            if e.errno == errno.EIO: out['eio'] += 1
            else: out['other'].append(errno.errorcode.get(e.errno, str(e.errno)))
print(json.dumps(out))
`;

describe('storage faults under a real mount', function () {
  this.timeout(180_000);
  let root: string;
  let daemon: Daemon | undefined;

  before(function () {
    if (!canMount(['fusermount', 'python3'])) this.skip();
  });
  beforeEach(() => (root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-faults-mnt-'))));
  afterEach(async () => {
    await daemon?.stop();
    daemon = undefined;
    fs.rmSync(root, { recursive: true, force: true });
  });

  async function mount(failpoints: string | undefined, extra: string[] = []): Promise<string> {
    const mnt = path.join(root, 'mnt');
    daemon = new Daemon(mnt, path.join(root, 'data'), ['--dram', '16M', ...extra]);
    if (failpoints) daemon.env = { CASCADE_FAILPOINTS: failpoints, CASCADE_FAILPOINTS_SEED: '42' };
    await daemon.start();
    return mnt;
  }

  it('failed disk reads: each read is EIO or the exact bytes (0 wrong), and the daemon lives on and stops cleanly', async function () {
    const mnt = await mount('disk.read=EIO@0.3');
    assert.match(daemon!.stderr, /FAULT INJECTION ON/);
    const d = path.join(mnt, 'kv', 'm');
    const n = 24;
    const size = 1024 * 1024;
    py(WRITE_FILES, [d, String(n), String(size)]); // 24 MiB through a 16 MiB DRAM: most go to disk
    const r = JSON.parse(py(READ_FILES, [d, String(n), String(size), '3']));
    assert.equal(r.wrong, 0, 'never wrong bytes');
    assert.deepEqual(r.other, [], 'no errno but EIO');
    assert.ok(r.eio > 0, `faults reached the readers (${JSON.stringify(r)})`);
    assert.ok(r.exact > 0, `and reads without a fault succeeded (${JSON.stringify(r)})`);
    const stats = JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8'));
    assert.ok(stats.faultsInjected['disk.read'] > 0);
    console.log(`      reads under faults: ${JSON.stringify(r)}, injected ${JSON.stringify(stats.faultsInjected)}`);
  });

  it('a failed fdatasync fails fsync(2); the next fsync succeeds and survives kill -9', async function () {
    // Two failures: the store's one retry (the block written again elsewhere) fails too.
    const mnt = await mount('disk.fdatasync=EIO#2');
    const f = path.join(mnt, 'kv', 'm', 'a');
    fs.mkdirSync(path.dirname(f), { recursive: true });
    const out = py(
      `import os, sys, errno
f = sys.argv[1]
fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b'x' * 300000)
try:
    os.fsync(fd); first = 'ok'
except OSError as e:
    first = errno.errorcode[e.errno]
os.fsync(fd)
os.close(fd)
print(first)`,
      [f],
    );
    assert.equal(out, 'EIO', 'the failed fdatasync was not acknowledged');
    await daemon!.stop('SIGKILL');
    daemon = new Daemon(daemon!.mnt, daemon!.data, ['--dram', '16M']);
    await daemon.start();
    assert.ok(fs.readFileSync(f).equals(Buffer.alloc(300000, 'x')), 'the acknowledged fsync survived kill -9');
  });
});

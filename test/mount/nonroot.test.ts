/**
 * The native engine for a user who is not root: `cascade mount` run as `nobody` mounts through the
 * setuid fusermount (which passes the /dev/fuse descriptor back), serves byte-exact reads and writes
 * and shared mmap, and unmounts cleanly on SIGTERM. Skipped where `nobody` cannot read this checkout.
 * Where /dev/fuse is not open to other users (some containers: mode 0600), the test opens it for its
 * duration and restores the mode after.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import { canMount, CLI, Daemon, isMounted } from './daemon';

const USER = 'nobody';

function asUser(cmd: string): { code: number; stdout: string; stderr: string } {
  const r = spawnSync('runuser', ['-u', USER, '--', 'bash', '-c', cmd], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe('native engine as a user who is not root (fusermount)', function () {
  this.timeout(120_000);
  let root: string;
  let mnt: string;
  let daemon: Daemon | undefined;
  let fuseMode: number | undefined;

  before(async function () {
    if (!canMount(['fusermount', 'runuser', 'setpriv', 'python3']) || spawnSync('id', [USER]).status !== 0) this.skip();
    if (asUser(`test -r ${CLI} && node -e 0`).code !== 0) this.skip(); // the checkout is not readable by nobody
    const mode = fs.statSync('/dev/fuse').mode & 0o777;
    if ((mode & 0o006) !== 0o006) {
      fuseMode = mode;
      fs.chmodSync('/dev/fuse', 0o666);
    }
    root = tmpDir('nonroot');
    fs.chmodSync(root, 0o755);
    mnt = path.join(root, 'mnt');
    const data = path.join(root, 'data');
    for (const d of [mnt, data]) {
      fs.mkdirSync(d);
      spawnSync('chown', [`${USER}:`, d]);
    }
    // setpriv execs the daemon itself (runuser would stand between it and our SIGTERM).
    const uid = spawnSync('id', ['-u', USER], { encoding: 'utf8' }).stdout.trim();
    const gid = spawnSync('id', ['-g', USER], { encoding: 'utf8' }).stdout.trim();
    daemon = new Daemon(mnt, data, ['--engine', 'native'], ['setpriv', `--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--']);
    await daemon.start();
  });

  after(async function () {
    if (daemon?.proc) await daemon.stop('SIGKILL'); // only after a failure: the test stops it itself
    if (mnt && isMounted(mnt)) spawnSync('fusermount', ['-uz', mnt]);
    if (fuseMode !== undefined) fs.chmodSync('/dev/fuse', fuseMode);
    if (root) rmDir(root);
  });

  it('mounts with the native engine, owned by the user; writes and reads byte-exact; shared mmap works; SIGTERM unmounts', async function () {
    assert.match(daemon!.stderr, /\(engine native:/, 'the native engine, not fuse-native');
    const entry = fs.readFileSync('/proc/mounts', 'utf8').split('\n').find((l) => l.split(' ')[1] === mnt);
    assert.ok(entry?.includes(`user_id=${spawnSync('id', ['-u', USER], { encoding: 'utf8' }).stdout.trim()}`), `mounted for ${USER}: ${entry}`);
    const src = path.join(root, 'src.bin');
    const data = seededBytes(61, 3 * 1024 * 1024 + 5);
    fs.writeFileSync(src, data);
    fs.chmodSync(src, 0o644);
    const r = asUser(
      `mkdir -p ${mnt}/kv/m && cp ${src} ${mnt}/kv/m/f && sha256sum ${mnt}/kv/m/f | cut -d' ' -f1 && ` +
        `python3 -c "import mmap,hashlib; f=open('${mnt}/kv/m/f','rb'); m=mmap.mmap(f.fileno(),0,flags=mmap.MAP_SHARED,prot=mmap.PROT_READ); print(hashlib.sha256(m[:]).hexdigest())"`,
    );
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.stdout.trim().split('\n'), [sha256(data), sha256(data)]);
    // Daemon.stop fails the test unless SIGTERM makes it exit 0, unmounted.
    assert.equal(await daemon!.stop('SIGTERM'), 0, daemon!.stderr);
    assert.match(daemon!.stderr, /cascade: unmounted/);
    assert.equal(isMounted(mnt), false);
  });
});

/**
 * The same-node client against a real daemon (another process): views of a block's bytes in the
 * daemon's arena, with the mount's version semantics, held in place while open, released by close.
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalClient, LocalClientError } from '../../mount/socket/client';
import { nativeBinding } from '../../native';
import { canMount, Daemon } from './daemon';

const MiB = 1024 * 1024;

function concat(views: Buffer[]): Buffer {
  return Buffer.concat(views);
}

describe('same-node client (mount/local-client)', function () {
  this.timeout(120_000);
  let root: string;
  let mnt: string;
  let daemon: Daemon;
  let client: LocalClient | undefined;

  before(async function () {
    if (!canMount() || nativeBinding() === undefined) return this.skip();
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-local-'));
    mnt = path.join(root, 'mnt');
    daemon = new Daemon(mnt, path.join(root, 'data')); // 64 MiB of DRAM
    await daemon.start();
    fs.mkdirSync(path.join(mnt, 'kv', 'm'), { recursive: true });
  });

  after(async function () {
    await client?.close();
    await daemon?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('lists client.json and connects', async function () {
    assert.ok(fs.readdirSync(path.join(mnt, '.cascade')).includes('client.json'));
    client = await LocalClient.connect(mnt);
    assert.equal(client.info.pid, daemon.proc!.pid);
  });

  it('returns views equal to the file, by absolute or mount-relative path', async function () {
    const data = randomBytes(3 * MiB + 17);
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'a'), data);
    const b = await client!.open(path.join(mnt, 'kv', 'm', 'a'));
    assert.equal(b.sizeBytes, data.length);
    assert.ok(concat(b.views).equals(data));
    assert.equal(b.version, 1);
    await b.release();
    assert.ok((await client!.read('kv/m/a')).equals(data));
  });

  it('keeps the opened version in place across an overwrite and under eviction pressure', async function () {
    const first = randomBytes(8 * MiB);
    const file = path.join(mnt, 'kv', 'm', 'held');
    fs.writeFileSync(file, first);
    const b = await client!.open(file);
    const second = randomBytes(8 * MiB);
    fs.writeFileSync(file, second); // a new version
    // Push far more than the 64 MiB of DRAM through the daemon: unheld blocks get evicted.
    for (let i = 0; i < 12; i++) fs.writeFileSync(path.join(mnt, 'kv', 'm', `filler-${i}`), randomBytes(8 * MiB));
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'sync-all'), Buffer.alloc(1));
    assert.ok(concat(b.views).equals(first), 'held views still show the version opened');
    await b.release();
    const c = await client!.open(file);
    assert.equal(c.version, 2);
    assert.ok(concat(c.views).equals(second));
    await c.release();
  });

  it('reads past versions through /.cascade/versions', async function () {
    const file = path.join(mnt, 'kv', 'm', 'v');
    const v1 = randomBytes(MiB);
    fs.writeFileSync(file, v1);
    fs.writeFileSync(file, randomBytes(MiB));
    const b = await client!.open(path.join(mnt, '.cascade', 'versions', 'kv', 'm', 'v', '1'));
    assert.ok(concat(b.views).equals(v1));
    await b.release();
  });

  it('answers errors with codes: missing file, directory, outside the mount', async function () {
    const code = async (p: string) => {
      try {
        await client!.open(p);
        return 'none';
      } catch (e) {
        assert.ok(e instanceof LocalClientError);
        return e.code;
      }
    };
    assert.equal(await code('kv/m/missing'), 'ENOENT');
    assert.equal(await code('kv/m'), 'EISDIR');
    assert.equal(await code('/etc/passwd'), 'EINVAL');
    assert.equal(await code('.cascade/stats.json'), 'EINVAL');
    // The connection still works after errors.
    assert.equal((await client!.read('kv/m/a')).length, 3 * MiB + 17);
  });

  it('refuses a local user who is neither root nor the daemon\'s (SO_PEERCRED): EACCES for an open of a readable file, no hold taken', async function () {
    if (spawnSync('id', ['nobody']).status !== 0 || spawnSync('which', ['runuser']).status !== 0) return this.skip();
    fs.chmodSync(root, 0o755); // mkdtemp made it 0700: let the other user reach the mount
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'public'), 'for everyone');
    assert.equal(fs.statSync(path.join(mnt, 'kv', 'm', 'public')).mode & 0o777, 0o644);
    // Written from the protocol as a client in another language would: the bare socket name from client.json.
    const py = [
      'import json, socket',
      `info = json.load(open(${JSON.stringify(path.join(mnt, '.cascade', 'client.json'))}))`,
      's = socket.socket(socket.AF_UNIX)',
      "s.connect(b'\\0' + info['socket'][1:].encode())",
      `s.sendall(json.dumps({'id': 1, 'op': 'open', 'path': '/kv/m/public'}).encode() + b'\\n')`,
      "print(s.makefile().readline().strip())",
    ].join('\n');
    const r = spawnSync('runuser', ['-u', 'nobody', '--', 'python3', '-c', py], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 0, r.stderr);
    const reply = JSON.parse(r.stdout) as { ok: boolean; code: string; message: string };
    assert.equal(reply.ok, false);
    assert.equal(reply.code, 'EACCES');
    assert.match(reply.message, /reads through the mount/);
    // The same file through the mount is readable for that user: only the arena path is refused.
    assert.equal(spawnSync('runuser', ['-u', 'nobody', '--', 'cat', path.join(mnt, 'kv', 'm', 'public')], { encoding: 'utf8' }).stdout, 'for everyone');
  });

  it('a closed client releases its holds: the block can be evicted again', async function () {
    const other = await LocalClient.connect(mnt);
    const file = path.join(mnt, 'kv', 'm', 'dropme');
    fs.writeFileSync(file, randomBytes(8 * MiB));
    await other.open(file); // never released by hand
    await other.close();
    await assert.rejects(other.open(file), (e: unknown) => (e as LocalClientError).code === 'EBADF');
    // With the hold gone, 64 MiB of DRAM can take 7 fresh 8 MiB blocks again (would fail to evict otherwise).
    for (let i = 0; i < 8; i++) fs.writeFileSync(path.join(mnt, 'kv', 'm', `after-${i}`), randomBytes(8 * MiB));
    const tier = fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8');
    assert.ok(JSON.parse(tier).tiers[0].usedBytes <= 64 * MiB);
  });
});

import { strict as assert } from 'node:assert';
import { createCascadeFs, type CascadeFs, XATTR_EVICT, XATTR_LINK, XATTR_PINNED, XATTR_SHA256, XATTR_TIER } from '../../fs/cascade-fs';
import { MiB } from '../../store/constants';
import { Store, type StoreConfig } from '../../store/store';
import { rejectsWith, rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';

const O_RDONLY = 0;
const O_WRONLY = 1;
const O_RDWR = 2;
const O_CREAT = 0o100;
const O_TRUNC = 0o1000;
const O_APPEND = 0o2000;
const O_EXCL = 0o200;

const dirs: string[] = [];
after(() => dirs.forEach(rmDir));

async function setup(extra: Partial<StoreConfig> = {}): Promise<{ fs: CascadeFs; store: Store; dir: string }> {
  const dir = tmpDir('fs');
  dirs.push(dir);
  const store = await Store.open({ dataDir: dir, dramCapacityBytes: 32 * MiB, prefault: false, dramHugePages: false, ...extra });
  const fs = await createCascadeFs(store, { uid: 1000, gid: 1000, log: () => undefined });
  return { fs, store, dir };
}

async function writeFile(fs: CascadeFs, path: string, data: Buffer, pieceBytes = 128 * 1024): Promise<void> {
  const h = await fs.create(path, 0o644, O_CREAT | O_WRONLY | O_TRUNC);
  for (let off = 0; off < data.length; off += pieceBytes) await fs.write(h, data.subarray(off, off + pieceBytes), off);
  await fs.flush(h);
  await fs.release(h);
}

/** Reads until EOF, as a reader does (during a write session the size in getattr is the writer's). */
async function readFile(fs: CascadeFs, path: string): Promise<Buffer> {
  const h = await fs.open(path, O_RDONLY);
  const parts: Buffer[] = [];
  for (let off = 0; ; ) {
    const piece = Buffer.alloc(128 * 1024);
    const n = await fs.read(h, piece, off);
    if (n === 0) break;
    parts.push(piece.subarray(0, n));
    off += n;
  }
  await fs.release(h);
  return Buffer.concat(parts);
}

describe('CascadeFs (no kernel)', function () {
  this.timeout(30_000);
  let fs: CascadeFs;
  let store: Store;
  beforeEach(async () => ({ fs, store } = await setup()));
  afterEach(async () => {
    await fs.close();
    await store.close();
  });

  it('commits a file written in 128 KiB pieces at close, hashed as it arrived', async () => {
    await fs.mkdir('/kv/llama', 0o755);
    await fs.mkdir('/kv/llama/a', 0o755);
    const data = seededBytes(1, 3 * MiB + 11);
    await writeFile(fs, '/kv/llama/a/block.bin', data);
    assert.ok((await readFile(fs, '/kv/llama/a/block.bin')).equals(data));
    assert.equal((await store.stat('llama/a/block.bin')).sha256, sha256(data));
    assert.equal((await fs.getattr('/kv/llama/a/block.bin')).sizeBytes, data.length);
    assert.deepEqual((await fs.readdir('/kv/llama')).map((e) => e.name), ['a']);
  });

  it('a create the kernel sends for a name that exists after all answers as open(2) does: O_EXCL is EEXIST, even on a directory', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await fs.mkdir('/kv/m/d', 0o755);
    await writeFile(fs, '/kv/m/f', Buffer.from('keep'));
    await rejectsWith(() => fs.create('/kv/m/f', 0o644, O_CREAT | O_EXCL | O_WRONLY), 'EEXIST');
    await rejectsWith(() => fs.create('/kv/m/d', 0o644, O_CREAT | O_EXCL | O_WRONLY), 'EEXIST');
    await rejectsWith(() => fs.create('/kv/m/d', 0o644, O_CREAT | O_WRONLY | O_TRUNC), 'EISDIR');
    assert.equal((await readFile(fs, '/kv/m/f')).toString(), 'keep', 'the O_EXCL create left the file alone');
  });

  it('handles holes, rewrites and ftruncate in a staging file; the commit hash is right', async () => {
    await fs.mkdir('/kv/m', 0o755);
    const h = await fs.create('/kv/m/f', 0o644, O_CREAT | O_RDWR);
    await fs.write(h, Buffer.from('world'), 10);
    await fs.write(h, Buffer.from('hello'), 0);
    await fs.write(h, Buffer.from('J'), 0);
    await fs.truncate('/kv/m/f', 12, h);
    await fs.truncate('/kv/m/f', 13, h);
    const back = Buffer.alloc(20);
    assert.equal(await fs.read(h, back, 0), 13, 'readable while being written (O_RDWR)');
    await fs.flush(h);
    await fs.release(h);
    const want = Buffer.concat([Buffer.from('Jello'), Buffer.alloc(5), Buffer.from('wo'), Buffer.alloc(1)]);
    const got = await readFile(fs, '/kv/m/f');
    assert.ok(got.equals(want), got.toString('hex'));
    assert.equal((await store.stat('m/f')).sha256, sha256(want));
  });

  it('refuses to write into committed content, but O_TRUNC replaces it atomically', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/f', Buffer.from('v1'));
    await rejectsWith(() => fs.open('/kv/m/f', O_WRONLY), 'EPERM');
    await rejectsWith(() => fs.open('/kv/m/f', O_WRONLY | O_APPEND), 'EPERM');
    await rejectsWith(() => fs.truncate('/kv/m/f', 1), 'EPERM');
    const reader = await fs.open('/kv/m/f', O_RDONLY);
    const w = await fs.open('/kv/m/f', O_WRONLY | O_TRUNC);
    await fs.write(w, Buffer.from('version two'), 0);
    assert.equal((await readFile(fs, '/kv/m/f')).toString(), 'v1', 'the staging file is private: others read v1');
    assert.equal((await fs.getattr('/kv/m/f')).sizeBytes, 11, 'the size is the write session\'s, as after O_TRUNC on a local filesystem');
    await fs.flush(w);
    await fs.release(w);
    const buf = Buffer.alloc(10);
    assert.equal(await fs.read(reader, buf, 0), 2);
    assert.equal(buf.subarray(0, 2).toString(), 'v1', 'an open handle keeps the version it opened');
    await fs.release(reader);
    assert.deepEqual((await store.versions('m/f')).map((v) => v.version), [1, 2]);
    await fs.truncate('/kv/m/f', 0);
    assert.equal((await fs.getattr('/kv/m/f')).sizeBytes, 0, 'truncate to 0 commits an empty version');
  });

  it('an open handle keeps its version even after the version is trimmed and its content reclaimed', async () => {
    await fs.close();
    await store.close();
    ({ fs, store } = await setup({ keepVersions: 1 }));
    await fs.mkdir('/kv/m', 0o755);
    const old = seededBytes(5, 300_000);
    await writeFile(fs, '/kv/m/f', old);
    const reader = await fs.open('/kv/m/f', O_RDONLY);
    await writeFile(fs, '/kv/m/f', seededBytes(6, 1000));
    await store.idle();
    const buf = Buffer.alloc(old.length);
    assert.equal(await fs.read(reader, buf, 0), old.length);
    assert.ok(buf.equals(old));
    await fs.release(reader);
    await store.idle();
    assert.equal((await store.stats()).dedup.uniqueBytes, 1000, 'reclaimed once the reader let go');
  });

  it('regression: between a writer\'s close() and its late release, its file is committed content (EPERM without O_TRUNC)', async () => {
    // FUSE sends release after close() has returned, asynchronously: under load an open (fuse-native's
    // POSIX rows, seen in CI) came first and joined the finished session instead of getting EPERM.
    await fs.mkdir('/kv/m', 0o755);
    const h = await fs.create('/kv/m/late', 0o644, O_CREAT | O_WRONLY | O_TRUNC);
    await fs.write(h, Buffer.from('committed'), 0);
    await fs.flush(h); // close(): committed; release not yet here
    await rejectsWith(() => fs.open('/kv/m/late', O_WRONLY), 'EPERM');
    await rejectsWith(() => fs.truncate('/kv/m/late', 3), 'EPERM');
    assert.equal((await readFile(fs, '/kv/m/late')).toString(), 'committed');
    // A descriptor still open on the session (a dup) may write on: that is the shell-redirect case.
    await fs.write(h, Buffer.from('!'), 9);
    const joined = await fs.open('/kv/m/late', O_WRONLY); // being written again: joins
    await fs.release(joined);
    await fs.flush(h);
    await fs.release(h);
    assert.equal((await readFile(fs, '/kv/m/late')).toString(), 'committed!');
    // O_TRUNC replaces it in the window too.
    const w = await fs.create('/kv/m/late2', 0o644, O_CREAT | O_WRONLY | O_TRUNC);
    await fs.write(w, Buffer.from('old'), 0);
    await fs.flush(w);
    const t = await fs.open('/kv/m/late2', O_WRONLY | O_TRUNC);
    await fs.write(t, Buffer.from('new'), 0);
    await fs.flush(t);
    await fs.release(w);
    await fs.release(t);
    assert.equal((await readFile(fs, '/kv/m/late2')).toString(), 'new');
  });

  it('a shell redirect (open, dup2, close, write, close) makes one version, not an empty one first', async () => {
    await fs.mkdir('/kv/m', 0o755);
    const h = await fs.create('/kv/m/r', 0o644, O_CREAT | O_WRONLY | O_TRUNC);
    await fs.flush(h); // close(3) after dup2(3, 1): nothing written yet
    await fs.write(h, Buffer.from('one'), 0);
    await fs.flush(h); // close(1)
    await fs.release(h);
    assert.deepEqual((await store.versions('m/r')).map((v) => v.sizeBytes), [3]);
    const t = await fs.create('/kv/m/empty', 0o644, O_CREAT | O_WRONLY);
    await fs.flush(t);
    assert.equal((await fs.getattr('/kv/m/empty')).sizeBytes, 0, 'visible before its release');
    assert.equal((await readFile(fs, '/kv/m/empty')).length, 0);
    await fs.release(t);
    assert.deepEqual((await store.versions('m/empty')).map((v) => v.sizeBytes), [0], 'touch commits an empty file at release');
  });

  it('an O_TRUNC reopen closed without writes reads as empty at once, though it commits at release', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/t', Buffer.from('old content'));
    const h = await fs.open('/kv/m/t', O_WRONLY | O_TRUNC);
    assert.equal((await readFile(fs, '/kv/m/t')).toString(), 'old content', 'before close: the committed version');
    await fs.flush(h); // close() returned; the release may come later
    assert.equal((await fs.getattr('/kv/m/t')).sizeBytes, 0);
    assert.equal((await readFile(fs, '/kv/m/t')).length, 0, 'after close: empty, as its size says');
    await fs.release(h);
    assert.deepEqual((await store.versions('m/t')).map((v) => v.sizeBytes), [11, 0]);
    assert.equal((await readFile(fs, '/kv/m/t')).length, 0);
  });

  it('touch then link: the link wins over the unwritten empty file', async () => {
    await fs.mkdir('/kv/m', 0o755);
    const data = Buffer.from('linked content');
    await writeFile(fs, '/kv/m/src', data);
    const t = await fs.create('/kv/m/dst', 0o644, O_CREAT | O_WRONLY);
    await fs.flush(t);
    await fs.setxattr('/kv/m/dst', XATTR_LINK, Buffer.from(sha256(data)));
    await fs.release(t);
    assert.equal((await readFile(fs, '/kv/m/dst')).toString(), 'linked content');
  });

  it('a duplicated descriptor flushing twice makes one version; each close with new writes makes one', async () => {
    await fs.mkdir('/kv/m', 0o755);
    const h = await fs.create('/kv/m/d', 0o644, O_CREAT | O_WRONLY);
    await fs.write(h, Buffer.from('abc'), 0);
    await fs.flush(h);
    await fs.flush(h);
    await fs.release(h);
    assert.equal((await store.versions('m/d')).length, 1);
  });

  it('renames: over an existing file, and of a file still open for writing (the commit lands at the new name)', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/final', Buffer.from('old'));
    await writeFile(fs, '/kv/m/tmp1', Buffer.from('new'));
    await fs.rename('/kv/m/tmp1', '/kv/m/final');
    assert.equal((await readFile(fs, '/kv/m/final')).toString(), 'new');
    await rejectsWith(() => fs.getattr('/kv/m/tmp1'), 'ENOENT');
    assert.deepEqual((await store.versions('m/final')).map((v) => v.version), [1, 2]);

    const h = await fs.create('/kv/m/tmp2', 0o644, O_CREAT | O_WRONLY);
    await fs.write(h, Buffer.from('written after rename'), 0);
    await fs.rename('/kv/m/tmp2', '/kv/m/final');
    await fs.flush(h);
    await fs.release(h);
    assert.equal((await readFile(fs, '/kv/m/final')).toString(), 'written after rename');
    await rejectsWith(() => store.get('m/tmp2'), 'ENOENT');
    assert.deepEqual((await fs.readdir('/kv/m')).map((e) => e.name), ['final']);
  });

  it('unlink: EPERM while pinned, then gone', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/p', Buffer.from('prefix'));
    await fs.setxattr('/kv/m/p', XATTR_PINNED, Buffer.from('1'));
    await rejectsWith(() => fs.unlink('/kv/m/p'), 'EPERM');
    assert.equal((await fs.getattr('/kv/m/p')).sizeBytes, 6, 'still there');
    await fs.setxattr('/kv/m/p', XATTR_PINNED, Buffer.from('0'));
    await fs.unlink('/kv/m/p');
    await rejectsWith(() => fs.getattr('/kv/m/p'), 'ENOENT');
  });

  it('xattrs: pinned, sha256, tier, link; errors for bad names and values', async () => {
    await fs.mkdir('/kv/m', 0o755);
    const data = seededBytes(9, 5000);
    await writeFile(fs, '/kv/m/a', data);
    assert.equal((await fs.getxattr('/kv/m/a', XATTR_PINNED)).toString(), '0');
    assert.equal((await fs.getxattr('/kv/m/a', XATTR_SHA256)).toString(), sha256(data));
    assert.equal((await fs.getxattr('/kv/m/a', XATTR_TIER)).toString(), 'dram');
    assert.deepEqual(await fs.listxattr('/kv/m/a'), [XATTR_PINNED, XATTR_SHA256, XATTR_TIER]);
    await fs.setxattr('/kv/m/a', XATTR_PINNED, Buffer.from('1\n'));
    assert.equal((await fs.getxattr('/kv/m/a', XATTR_PINNED)).toString(), '1');
    await rejectsWith(() => fs.setxattr('/kv/m/a', XATTR_PINNED, Buffer.from('yes')), 'EINVAL');
    await rejectsWith(() => fs.setxattr('/kv/m/a', XATTR_SHA256, Buffer.from('00')), 'EPERM');
    await rejectsWith(() => fs.getxattr('/kv/m/a', 'user.cascade.bogus'), 'EOPNOTSUPP');
    await rejectsWith(() => fs.getxattr('/kv/m/a', 'security.selinux'), 'EOPNOTSUPP');
    await rejectsWith(() => fs.getxattr('/kv/m/nope', XATTR_PINNED), 'ENOENT');

    await writeFile(fs, '/kv/m/b', Buffer.alloc(0));
    await fs.setxattr('/kv/m/b', XATTR_LINK, Buffer.from(sha256(data)));
    assert.ok((await readFile(fs, '/kv/m/b')).equals(data), 'link made b that content, no data written');
    await rejectsWith(() => fs.setxattr('/kv/m/b', XATTR_LINK, Buffer.from('f'.repeat(64))), 'ENOENT');
    await rejectsWith(() => fs.setxattr('/kv/m/b', XATTR_LINK, Buffer.from('xyz')), 'EINVAL');
  });

  it('user.cascade.evict drops a file from DRAM (made durable first), refuses pinned (EPERM) and held (EBUSY) content', async () => {
    await fs.mkdir('/kv/m', 0o755);
    const data = seededBytes(11, 300_000);
    await writeFile(fs, '/kv/m/e', data);
    assert.equal((await fs.getxattr('/kv/m/e', XATTR_TIER)).toString(), 'dram');
    await fs.setxattr('/kv/m/e', XATTR_EVICT, Buffer.from('1'));
    assert.equal((await fs.getxattr('/kv/m/e', XATTR_TIER)).toString(), 'disk', 'written down, then dropped from DRAM');
    assert.ok((await readFile(fs, '/kv/m/e')).equals(data), 'reads back from disk');
    await fs.setxattr('/kv/m/e', XATTR_EVICT, Buffer.from('1\n')); // whatever the read promoted: gone again, or a no-op
    assert.notEqual((await fs.getxattr('/kv/m/e', XATTR_TIER)).toString(), 'dram');
    await rejectsWith(() => fs.setxattr('/kv/m/e', XATTR_EVICT, Buffer.from('0')), 'EINVAL');
    await rejectsWith(() => fs.getxattr('/kv/m/e', XATTR_EVICT), 'ENODATA');
    assert.ok(!(await fs.listxattr('/kv/m/e')).includes(XATTR_EVICT), 'write-only: not listed');

    await writeFile(fs, '/kv/m/p', Buffer.from('prefix'));
    await fs.setxattr('/kv/m/p', XATTR_PINNED, Buffer.from('1'));
    await rejectsWith(() => fs.setxattr('/kv/m/p', XATTR_EVICT, Buffer.from('1')), 'EPERM');
    assert.equal((await fs.getxattr('/kv/m/p', XATTR_TIER)).toString(), 'dram');

    // A reader of the arena (the native engine's open handle) reads the DRAM copy itself: not freed under it.
    if (store.dramRegion() === undefined) return; // no native arena: nothing holds DRAM
    await writeFile(fs, '/kv/m/h', data);
    const h = await fs.open('/kv/m/h', O_RDONLY);
    const hold = await fs.holdHandle(h);
    assert.ok(hold);
    await rejectsWith(() => fs.setxattr('/kv/m/h', XATTR_EVICT, Buffer.from('1')), 'EBUSY');
    assert.equal((await fs.getxattr('/kv/m/h', XATTR_TIER)).toString(), 'dram');
    hold.release();
    await fs.release(h);
    await fs.setxattr('/kv/m/h', XATTR_EVICT, Buffer.from('1'));
    assert.equal((await fs.getxattr('/kv/m/h', XATTR_TIER)).toString(), 'disk');
  });

  it('/.cascade/pins.json lists the files whose content is pinned (one content, two names: both) and the quota', async () => {
    await fs.mkdir('/kv/m', 0o755);
    const prompt = seededBytes(12, 70_000);
    await writeFile(fs, '/kv/m/a', prompt);
    await writeFile(fs, '/kv/m/b', prompt); // the same content, stored once
    await writeFile(fs, '/kv/m/c', Buffer.from('not pinned'));
    const pins = async () => JSON.parse((await readFile(fs, '/.cascade/pins.json')).toString()) as { pinned: { blocks: number; bytes: number; quotaBytes: number }; files: { name: string; sizeBytes: number; sha256: string }[]; total: number; truncated: boolean };
    assert.deepEqual(await pins(), { pinned: { blocks: 0, bytes: 0, quotaBytes: 16 * MiB }, files: [], total: 0, truncated: false });
    await fs.setxattr('/kv/m/a', XATTR_PINNED, Buffer.from('1'));
    const one = await pins();
    assert.deepEqual(one.files, [{ name: 'm/a', sizeBytes: prompt.length, sha256: sha256(prompt) }, { name: 'm/b', sizeBytes: prompt.length, sha256: sha256(prompt) }], 'seen at once: no stale snapshot');
    assert.deepEqual([one.pinned, one.total, one.truncated], [{ blocks: 1, bytes: prompt.length, quotaBytes: 16 * MiB }, 2, false]);
    assert.equal((await fs.getattr('/.cascade/pins.json')).sizeBytes, (await readFile(fs, '/.cascade/pins.json')).length);
    assert.ok((await fs.readdir('/.cascade')).some((e) => e.name === 'pins.json'));
    await fs.removexattr('/kv/m/b', XATTR_PINNED); // unpins the content: both names
    assert.deepEqual((await pins()).files, []);
  });

  it('directories: mkdir, EEXIST, ENOTEMPTY, rmdir, long names, files only below a model', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await fs.mkdir('/kv/m/d', 0o755);
    await rejectsWith(() => fs.mkdir('/kv/m/d', 0o755), 'EEXIST');
    await rejectsWith(() => fs.mkdir('/kv/x/y', 0o755), 'ENOENT');
    await writeFile(fs, '/kv/m/d/f', Buffer.from('x'));
    await rejectsWith(() => fs.rmdir('/kv/m/d'), 'ENOTEMPTY');
    await rejectsWith(() => fs.create(`/kv/m/${'n'.repeat(256)}`, 0o644, O_CREAT), 'ENAMETOOLONG');
    await rejectsWith(() => fs.create('/kv/toplevel', 0o644, O_CREAT), 'EPERM');
    await rejectsWith(() => fs.create('/.cascade/x', 0o644, O_CREAT), 'EROFS');
    await fs.unlink('/kv/m/d/f');
    await fs.rmdir('/kv/m/d');
    assert.deepEqual((await fs.readdir('/kv/m')).map((e) => e.name), []);
    assert.deepEqual(await fs.readdir('/'), [{ name: 'kv', kind: 'dir' }, { name: '.cascade', kind: 'dir' }]);
  });

  it('a directory rename moves every name below it', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await fs.mkdir('/kv/m/a', 0o755);
    await fs.mkdir('/kv/m/a/b', 0o755);
    await writeFile(fs, '/kv/m/a/b/f', Buffer.from('deep'));
    await writeFile(fs, '/kv/m/a/g', Buffer.from('shallow'));
    await fs.rename('/kv/m/a', '/kv/m/z');
    assert.equal((await readFile(fs, '/kv/m/z/b/f')).toString(), 'deep');
    assert.equal((await store.get('m/z/g')).toString(), 'shallow');
    await rejectsWith(() => fs.getattr('/kv/m/a'), 'ENOENT');
  });

  it('versions and time-travel paths, and stats.json', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/v', Buffer.from('one'));
    const t1 = (await store.stat('m/v')).timeMs;
    await new Promise((r) => setTimeout(r, 5));
    await writeFile(fs, '/kv/m/v', Buffer.from('two!'));
    assert.deepEqual((await fs.readdir('/.cascade/versions/kv/m/v')).map((e) => e.name), ['1', '2']);
    assert.equal((await readFile(fs, '/.cascade/versions/kv/m/v/1')).toString(), 'one');
    assert.equal((await fs.getattr('/.cascade/versions/kv/m/v/2')).sizeBytes, 4);
    assert.equal((await readFile(fs, `/.cascade/at/${t1}/kv/m/v`)).toString(), 'one');
    assert.equal((await readFile(fs, `/.cascade/at/${Date.now()}/kv/m/v`)).toString(), 'two!');
    await rejectsWith(() => fs.getattr(`/.cascade/at/${t1 - 1000}/kv/m/v`), 'ENOENT');
    await rejectsWith(() => fs.getattr('/.cascade/versions/kv/m/v/3'), 'ENOENT');
    await rejectsWith(() => fs.open('/.cascade/versions/kv/m/v/1', O_WRONLY), 'EROFS');
    const stats = JSON.parse((await readFile(fs, '/.cascade/stats.json')).toString());
    assert.ok(Array.isArray(stats.tiers));
    await writeFile(fs, '/kv/m/w', Buffer.from('three'));
    await new Promise((r) => setTimeout(r, 150));
    const h = await fs.open('/.cascade/stats.json', O_RDONLY);
    const fresh = Buffer.alloc(1 << 16);
    const n = await fs.read(h, fresh, 0);
    await fs.release(h);
    assert.equal(JSON.parse(fresh.subarray(0, n).toString()).versions, stats.versions + 1, 'an open sees a fresh snapshot');
  });

  it('over capacity: ENOSPC at close, the old version intact', async () => {
    await fs.close();
    await store.close();
    ({ fs, store } = await setup({ diskCapacityBytes: 2 * MiB }));
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/f', Buffer.from('keep me'));
    const h = await fs.open('/kv/m/f', O_WRONLY | O_TRUNC);
    await fs.write(h, seededBytes(3, 3 * MiB), 0);
    await rejectsWith(() => fs.flush(h), 'ENOSPC');
    await fs.release(h);
    assert.equal((await readFile(fs, '/kv/m/f')).toString(), 'keep me');
  });

  it('rebuilds its tree from the store at mount', async () => {
    await store.put('llama/x/y/z', Buffer.from('1'));
    await store.put('llama/x/w', Buffer.from('2'));
    const fs2 = await createCascadeFs(store, { uid: 0, gid: 0 });
    assert.deepEqual((await fs2.readdir('/kv')).map((e) => e.name), ['llama']);
    assert.deepEqual((await fs2.readdir('/kv/llama/x')).sort((a, b) => a.name.localeCompare(b.name)), [{ name: 'w', kind: 'file' }, { name: 'y', kind: 'dir' }]);
    assert.equal((await fs2.getattr('/kv/llama/x/y')).mode & 0o170000, 0o040000);
  });
  it('inode numbers: kept by rewrites, renames and a rebuild of the tree; new after unlink and create; dirs keep theirs across rename', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await fs.mkdir('/kv/m/d', 0o755);
    const h = await fs.create('/kv/m/d/f', 0o644, O_CREAT | O_WRONLY | O_TRUNC);
    const ino = (await fs.getattr('/kv/m/d/f', h)).ino;
    assert.equal((await fs.getattr('/kv/m/d/f')).ino, ino, 'the same number by path during the session');
    await fs.write(h, Buffer.from('one'), 0);
    await fs.flush(h);
    await fs.release(h);
    assert.equal((await fs.getattr('/kv/m/d/f')).ino, ino, 'the commit keeps it');
    await writeFile(fs, '/kv/m/d/f', Buffer.from('two'));
    assert.equal((await fs.getattr('/kv/m/d/f')).ino, ino, 'a rewrite keeps it');
    const dirIno = (await fs.getattr('/kv/m/d')).ino;
    await fs.rename('/kv/m/d/f', '/kv/m/d/g');
    assert.equal((await fs.getattr('/kv/m/d/g')).ino, ino, 'a rename keeps it');
    await fs.rename('/kv/m/d', '/kv/m/e');
    assert.equal((await fs.getattr('/kv/m/e')).ino, dirIno, 'a directory rename keeps the directory\'s');
    assert.equal((await fs.getattr('/kv/m/e/g')).ino, ino, 'and its files\'');
    const fs2 = await createCascadeFs(store, { uid: 0, gid: 0 });
    assert.equal((await fs2.getattr('/kv/m/e/g')).ino, ino, 'a rebuilt tree (a remount) keeps file numbers');
    const all = new Set([ino, (await fs2.getattr('/kv/m/e')).ino, (await fs2.getattr('/kv/m')).ino, (await fs2.getattr('/kv')).ino, (await fs2.getattr('/')).ino]);
    assert.equal(all.size, 5, 'no number is shared');
    await fs2.close();
    await fs.unlink('/kv/m/e/g');
    await writeFile(fs, '/kv/m/e/g', Buffer.from('three'));
    assert.notEqual((await fs.getattr('/kv/m/e/g')).ino, ino, 'a file created after an unlink is a new file');
    await writeFile(fs, '/kv/m/e/g', Buffer.from('four'));
    assert.notEqual((await fs.getattr('/.cascade/versions/kv/m/e/g/1')).ino, (await fs.getattr('/kv/m/e/g')).ino, 'a past version is its own file');
  });

  it('directory times move on create, unlink, mkdir, rmdir and renames in and out, not on a rewrite', async () => {
    const fs2 = await createCascadeFs(store, { uid: 0, gid: 0 });
    // The tree's clock is the wall clock: step past it between operations.
    const later = async () => {
      const t = Date.now();
      while (Date.now() === t) await new Promise((r) => setTimeout(r, 1));
    };
    await fs2.mkdir('/kv/m', 0o755);
    await fs2.mkdir('/kv/m/a', 0o755);
    await fs2.mkdir('/kv/m/b', 0o755);
    const times = async (p: string) => {
      const a = await fs2.getattr(p);
      return [a.mtimeMs, a.ctimeMs];
    };
    const moves = async (dirs: string[], op: () => Promise<unknown>, what: string) => {
      const before = await Promise.all(dirs.map(times));
      await later();
      await op();
      const after = await Promise.all(dirs.map(times));
      dirs.forEach((d, i) => assert.ok(after[i][0] > before[i][0] && after[i][1] > before[i][1], `${what}: ${d} ${before[i]} -> ${after[i]}`));
    };
    await moves(['/kv/m/a'], () => writeFile(fs2, '/kv/m/a/f', Buffer.from('x')), 'create');
    await moves(['/kv/m/a'], () => fs2.mkdir('/kv/m/a/sub', 0o755), 'mkdir');
    await moves(['/kv/m/a'], () => fs2.rmdir('/kv/m/a/sub'), 'rmdir');
    await moves(['/kv/m/a', '/kv/m/b'], () => fs2.rename('/kv/m/a/f', '/kv/m/b/f'), 'rename');
    await moves(['/kv/m/b'], () => fs2.unlink('/kv/m/b/f'), 'unlink');
    await moves(['/kv/m'], () => fs2.rename('/kv/m/a', '/kv/m/c'), 'directory rename');
    await writeFile(fs2, '/kv/m/b/g', Buffer.from('1'));
    const before = await times('/kv/m/b');
    await later();
    await writeFile(fs2, '/kv/m/b/g', Buffer.from('2'));
    assert.deepEqual(await times('/kv/m/b'), before, 'a rewrite adds no entry');
    await fs2.utimens('/kv/m/b', 5_000, 5_000);
    assert.equal((await fs2.getattr('/kv/m/b')).mtimeMs, 5_000, 'utimens sets a directory\'s mtime');
    await fs2.close();
  });

  it('a write session\'s size is the file\'s size for getattr by path; readers still read the committed content', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/f', seededBytes(9, 1_000_000));
    const w = await fs.open('/kv/m/f', O_WRONLY | O_TRUNC);
    assert.equal((await fs.getattr('/kv/m/f')).sizeBytes, 0, 'O_TRUNC: size 0 at once');
    await fs.write(w, Buffer.alloc(100, 1), 0);
    assert.equal((await fs.getattr('/kv/m/f')).sizeBytes, 100);
    assert.equal((await readFile(fs, '/kv/m/f')).length, 1_000_000, 'a reader reads the committed version');
    await fs.truncate('/kv/m/f', 40, w);
    assert.equal((await fs.getattr('/kv/m/f', w)).sizeBytes, 40);
    await fs.flush(w);
    await fs.release(w);
    assert.equal((await fs.getattr('/kv/m/f')).sizeBytes, 40);
  });

  it('names outside /kv are EPERM to create; a name past 4,096 bytes or 64 levels is ENAMETOOLONG', async () => {
    await rejectsWith(() => fs.create('/elsewhere', 0o644, O_CREAT | O_WRONLY), 'EPERM');
    await rejectsWith(() => fs.mkdir('/elsewhere', 0o755), 'EPERM');
    await rejectsWith(() => fs.rename('/kv', '/x'), 'EPERM');
    await fs.mkdir('/kv/m', 0o755);
    let dir = '/kv/m';
    for (let i = 0; i < 20; i++) {
      dir += '/' + 'c'.repeat(200); // 4,021 bytes of directories: a 250-byte name below them passes 4,096
      await fs.mkdir(dir, 0o755);
    }
    await rejectsWith(() => fs.create(`${dir}/${'f'.repeat(250)}`, 0o644, O_CREAT | O_WRONLY), 'ENAMETOOLONG');
    await rejectsWith(() => fs.mkdir(`${dir}/${'d'.repeat(250)}`, 0o755), 'ENAMETOOLONG');
    let deep = '/kv/m';
    for (let i = 0; i < 62; i++) {
      deep += '/d';
      await fs.mkdir(deep, 0o755);
    }
    await rejectsWith(() => fs.mkdir(`${deep}/d`, 0o755), 'ENAMETOOLONG');
    await writeFile(fs, `${deep}/f`, Buffer.from('64 levels is the limit'));
  });

  // libfuse renames a file unlinked or replaced while open to .fuse_hidden<hex> and unlinks it at release.
  it('replace while open: the version history continues at the name, the hidden name never reaches the store', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/f', Buffer.from('one'));
    const reader = await fs.open('/kv/m/f', O_RDONLY);
    await writeFile(fs, '/kv/m/tmp', Buffer.from('two'));
    // What libfuse does for rename(tmp, f) while f is open: hide f, then rename.
    await fs.rename('/kv/m/f', '/kv/m/.fuse_hidden0000000a00000001');
    await fs.rename('/kv/m/tmp', '/kv/m/f');
    assert.deepEqual((await fs.readdir('/kv/m')).map((e) => e.name), ['f'], 'hidden names are not listed');
    const buf = Buffer.alloc(3);
    await fs.read(reader, buf, 0);
    assert.equal(buf.toString(), 'one', 'the open handle keeps its version');
    await fs.release(reader);
    await fs.unlink('/kv/m/.fuse_hidden0000000a00000001'); // libfuse, at the last release
    assert.deepEqual((await store.versions('m/f')).map((v) => v.version), [1, 2]);
    assert.equal((await readFile(fs, '/kv/m/f')).toString(), 'two');
    assert.deepEqual(await store.list('m/'), ['m/f']);
  });

  it('regression (model test, fuse-native): a name hidden twice is deleted by the latest hidden name\'s release only', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/f', Buffer.from('one'));
    await writeFile(fs, '/kv/m/tmp', Buffer.from('two'));
    await writeFile(fs, '/kv/m/g', Buffer.from('three'));
    // rename(tmp, f) while f is open, then unlink(f) while the file moved there is open.
    await fs.rename('/kv/m/f', '/kv/m/.fuse_hidden0000000a00000011');
    await fs.rename('/kv/m/tmp', '/kv/m/f');
    await fs.rename('/kv/m/f', '/kv/m/.fuse_hidden0000000a00000012');
    // The first file's last release: before, it deleted m/f, history and all, though the second
    // hidden file was still open (and a rename over the name continues its history until that closes).
    await fs.unlink('/kv/m/.fuse_hidden0000000a00000011');
    assert.deepEqual((await store.versions('m/f')).map((v) => v.version), [1, 2]);
    await fs.rename('/kv/m/g', '/kv/m/f');
    assert.deepEqual((await store.versions('m/f')).map((v) => v.version), [1, 2, 3], 'the history continues');
    await fs.unlink('/kv/m/.fuse_hidden0000000a00000012'); // replaced meanwhile: nothing to delete
    assert.equal((await readFile(fs, '/kv/m/f')).toString(), 'three');
  });

  it('regression (model test, fuse-native): a file unlinked while open moves with its directory (fstat, then its last release)', async () => {
    await fs.mkdir('/kv/a', 0o755);
    await writeFile(fs, '/kv/a/f', Buffer.from('kept until released'));
    await fs.rename('/kv/a/f', '/kv/a/.fuse_hidden0000000e00000005'); // libfuse: unlink(a/f) while open
    await fs.mkdir('/kv/m', 0o755);
    await fs.rename('/kv/a', '/kv/m/d');
    // libfuse moved the hidden node with the directory and asks for it there; before, ENOENT.
    assert.equal((await fs.getattr('/kv/m/d/.fuse_hidden0000000e00000005')).sizeBytes, 19);
    await rejectsWith(() => fs.getattr('/kv/a/.fuse_hidden0000000e00000005'), 'ENOENT');
    await fs.unlink('/kv/m/d/.fuse_hidden0000000e00000005'); // its last release
    await rejectsWith(() => store.get('a/f'), 'ENOENT');
    assert.deepEqual(await store.list(''), []);
  });

  it('unlink while open: gone from the tree at once, deleted from the store at the last release', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/g', Buffer.from('bye'));
    await fs.rename('/kv/m/g', '/kv/m/.fuse_hidden0000000b00000002');
    await rejectsWith(() => fs.getattr('/kv/m/g'), 'ENOENT');
    assert.equal((await fs.getattr('/kv/m/.fuse_hidden0000000b00000002')).sizeBytes, 3);
    await fs.unlink('/kv/m/.fuse_hidden0000000b00000002');
    await rejectsWith(() => store.get('m/g'), 'ENOENT');
    await fs.rmdir('/kv/m');
    await rejectsWith(() => fs.getattr('/kv/m'), 'ENOENT');
  });

  it('regression (model test, fuse-native): a directory holding a hidden name is not empty until its release', async () => {
    // Were rmdir to succeed, libfuse could not build the hidden file's path: a read of the open
    // descriptor would give ENOENT.
    await fs.mkdir('/kv/m', 0o755);
    await fs.mkdir('/kv/n', 0o755);
    await writeFile(fs, '/kv/m/g', Buffer.from('bye'));
    await fs.rename('/kv/m/g', '/kv/m/.fuse_hidden0000000b00000002'); // libfuse: unlink(g) while open
    await rejectsWith(() => fs.rmdir('/kv/m'), 'ENOTEMPTY');
    await rejectsWith(() => fs.rename('/kv/n', '/kv/m'), 'ENOTEMPTY');
    assert.equal((await fs.getattr('/kv/m/.fuse_hidden0000000b00000002')).sizeBytes, 3, 'the hidden file still reads');
    await fs.unlink('/kv/m/.fuse_hidden0000000b00000002'); // libfuse, at the last release
    await fs.rmdir('/kv/m');
    await rejectsWith(() => fs.getattr('/kv/m'), 'ENOENT');
    await rejectsWith(() => store.get('m/g'), 'ENOENT');
  });

  it('regression (model test, fuse-native): a name created again after an unlink while open is a new, empty file', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await writeFile(fs, '/kv/m/g', Buffer.from('old content'));
    const oldIno = (await fs.getattr('/kv/m/g')).ino;
    const reader = await fs.open('/kv/m/g', O_RDONLY);
    await fs.rename('/kv/m/g', '/kv/m/.fuse_hidden0000000c00000003'); // libfuse: unlink(g) while open
    const w = await fs.create('/kv/m/g', 0o644, O_CREAT | O_WRONLY | O_TRUNC);
    // Before: the new file read as the unlinked file's content until its commit, and continued its history.
    assert.equal((await readFile(fs, '/kv/m/g')).length, 0, 'the new file reads empty until it commits');
    assert.notEqual((await fs.getattr('/kv/m/g')).ino, oldIno, 'a new file gets a new inode number');
    await fs.write(w, Buffer.from('new'), 0);
    await fs.flush(w);
    await fs.release(w);
    assert.deepEqual((await store.versions('m/g')).map((v) => v.version), [1], 'a new history');
    const buf = Buffer.alloc(11);
    assert.equal(await fs.read(reader, buf, 0), 11);
    assert.equal(buf.toString(), 'old content', 'the unlinked file stays readable through its descriptor');
    await fs.release(reader);
    await fs.unlink('/kv/m/.fuse_hidden0000000c00000003'); // libfuse, at the last release: the new file stays
    assert.equal((await readFile(fs, '/kv/m/g')).toString(), 'new');
  });

  it('regression (fuse-native, found writing the model test): a directory renamed onto one whose file was unlinked while open keeps its files', async () => {
    await fs.mkdir('/kv/m', 0o755);
    await fs.mkdir('/kv/m/d', 0o755);
    await fs.mkdir('/kv/m/e', 0o755);
    await writeFile(fs, '/kv/m/d/f', Buffer.from('unlinked'));
    await writeFile(fs, '/kv/m/e/f', Buffer.from('moved'));
    await fs.rename('/kv/m/d/f', '/kv/m/d/.fuse_hidden0000000d00000004'); // libfuse: unlink(d/f) while open
    await rejectsWith(() => fs.rename('/kv/m/e', '/kv/m/d'), 'ENOTEMPTY'); // d holds the hidden name
    await fs.rename('/kv/m/d', '/kv/m/x'); // the hidden name moves along; its store name stays m/d/f
    await fs.mkdir('/kv/m/d', 0o755);
    await fs.rename('/kv/m/e', '/kv/m/d'); // d is empty: allowed
    await fs.unlink('/kv/m/x/.fuse_hidden0000000d00000004'); // libfuse, at the last release
    // Before: that release deleted m/d/f, the file moved in.
    assert.equal((await readFile(fs, '/kv/m/d/f')).toString(), 'moved');
    assert.deepEqual((await store.versions('m/d/f')).map((v) => v.version), [1], 'a new history at the name');
  });
  it('tells a directory watcher every entry added and removed, so a listing kept from it stays exact (the native engine\'s negative lookups)', async () => {
    const listings = new Map<string, Set<string>>();
    const changed: string[] = [];
    const names = (dir: string) => fs.dirListing(dir)?.map((e) => e.name);
    const kinds = new Map<string, string>();
    const list = (dir: string) => listings.set(dir, new Set(names(dir)));
    assert.equal(
      fs.watchDirs({
        added: (dir, name, kind) => {
          listings.get(dir)?.add(name);
          kinds.set(`${dir}/${name}`, kind);
          changed.push(dir);
        },
        removed: (dir, name) => {
          listings.get(dir)?.delete(name);
          changed.push(dir);
        },
        gone: (dir) => {
          for (const d of [...listings.keys()]) if (d === dir || d.startsWith(`${dir}/`)) listings.delete(d);
        },
      }),
      true,
    );
    list('/kv');
    await fs.mkdir('/kv/m', 0o755);
    list('/kv/m');
    await writeFile(fs, '/kv/m/a', Buffer.from('a'));
    await writeFile(fs, '/kv/m/b', Buffer.from('b'));
    await fs.mkdir('/kv/m/d', 0o755);
    list('/kv/m/d');
    await writeFile(fs, '/kv/m/d/x', Buffer.from('x'));
    await fs.rename('/kv/m/a', '/kv/m/d/a2'); // a file between listed directories
    await fs.unlink('/kv/m/b');
    // A failed create leaves the tree at its release: its name goes from the listing too.
    const h = await fs.create('/kv/m/never', 0o644, O_CREAT | O_WRONLY | O_TRUNC);
    assert.ok(listings.get('/kv/m')!.has('never'));
    await fs.release(h); // released without a flush: committed empty, so it stays
    // A name libfuse hides is found by lookup: listed while hidden.
    const reader = await fs.open('/kv/m/never', O_RDONLY);
    await fs.rename('/kv/m/never', '/kv/m/.fuse_hidden0000000c00000003');
    assert.ok(listings.get('/kv/m')!.has('.fuse_hidden0000000c00000003'));
    assert.equal(kinds.get('/kv/m/.fuse_hidden0000000c00000003'), 'hidden', 'found by lookup, not listed by readdir');
    assert.deepEqual(fs.dirListing('/kv/m')!.find((e) => e.name === '.fuse_hidden0000000c00000003')?.kind, 'hidden');
    await fs.release(reader);
    await fs.unlink('/kv/m/.fuse_hidden0000000c00000003');
    assert.ok(!listings.get('/kv/m')!.has('.fuse_hidden0000000c00000003'));
    // A hidden name a directory already had: listed as that directory, then as hidden once it goes.
    await fs.mkdir('/kv/m/.fuse_hidden00bb', 0o755);
    await writeFile(fs, '/kv/m/h2', Buffer.from('h'));
    const reader2 = await fs.open('/kv/m/h2', O_RDONLY);
    await fs.rename('/kv/m/h2', '/kv/m/.fuse_hidden00bb');
    await fs.rmdir('/kv/m/.fuse_hidden00bb');
    assert.equal((await fs.getattr('/kv/m/.fuse_hidden00bb')).sizeBytes, 1, 'lookup finds the hidden file');
    assert.ok(listings.get('/kv/m')!.has('.fuse_hidden00bb'));
    assert.equal(kinds.get('/kv/m/.fuse_hidden00bb'), 'hidden');
    await fs.release(reader2);
    await fs.unlink('/kv/m/.fuse_hidden00bb');
    assert.ok(!listings.get('/kv/m')!.has('.fuse_hidden00bb'));
    // A directory moved: its listing (and those under it) is forgotten, the parents follow.
    await fs.rename('/kv/m/d', '/kv/m/e');
    assert.equal(listings.has('/kv/m/d'), false);
    for (const [dir, listed] of listings) assert.deepEqual([...listed].sort(), names(dir)!.sort(), `listing of ${dir}`);
    assert.deepEqual([...listings.get('/kv/m')!].sort(), ['e']);
    assert.equal(kinds.get('/kv/m/e'), 'dir');
    assert.equal(kinds.get('/kv/m/d/x'), 'file');
    // Every change named its directory (an engine drops that directory's cached attributes then).
    assert.ok(changed.includes('/kv') && changed.includes('/kv/m') && changed.includes('/kv/m/d'));
    await fs.rmdir('/kv/m/e').catch(() => undefined); // not empty: ENOTEMPTY, nothing told
    assert.equal(fs.dirListing('/kv/m/e/x'), undefined, 'a file is not a directory');
    assert.equal(fs.dirListing('/.cascade'), undefined, 'only /kv is listed');
    fs.watchDirs(undefined);
    await writeFile(fs, '/kv/m/late', Buffer.from('l'));
    assert.ok(!listings.get('/kv/m')!.has('late'), 'no watcher, nothing told');
  });

  it('tells no directory watcher with a shared namespace (other nodes change names)', async () => {
    const shared = await createCascadeFs(store, { uid: 1000, gid: 1000, log: () => undefined, sharedNamespace: true });
    assert.equal(shared.watchDirs({ added: () => undefined, removed: () => undefined, gone: () => undefined }), false);
    assert.equal(shared.dirListing('/kv'), undefined);
  });
});

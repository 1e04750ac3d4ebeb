/**
 * Real-mount tests: the `cascade mount` daemon in a child process, exercised with real tools
 * (cp, dd, cat, sha256sum, setfattr/getfattr, python3). Every test leaves no mount and no process.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import { canMount, Daemon, isMounted } from './daemon';

/** Run a command against the mount; the daemon is another process, so a synchronous spawn is fine. */
function sh(cmd: string, input?: Buffer): { code: number; stdout: Buffer; stderr: string } {
  const r = spawnSync('bash', ['-c', cmd], { input, maxBuffer: 1 << 30 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr.toString() };
}

function py(code: string): { code: number; stdout: string; stderr: string } {
  const r = spawnSync('python3', ['-c', code], { maxBuffer: 1 << 26 });
  return { code: r.status ?? -1, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

describe('cascade mount (real FUSE mount)', function () {
  this.timeout(180_000);
  let root: string;
  let mnt: string;
  let daemon: Daemon;

  before(function () {
    if (!canMount()) this.skip();
    root = tmpDir('mount');
    mnt = path.join(root, 'mnt');
    fs.mkdirSync(mnt);
    daemon = new Daemon(mnt, path.join(root, 'data'));
  });
  beforeEach(async function () {
    if (!daemon.proc) await daemon.start();
  });
  after(async function () {
    if (!daemon) return;
    await daemon.stop();
    assert.equal(isMounted(mnt), false, 'nothing left mounted');
    rmDir(root);
  });

  it('cp, dd, cat and sha256sum: byte-exact round trips in nested directories', () => {
    const src = path.join(root, 'src.bin');
    const data = seededBytes(1, 5 * 1024 * 1024 + 123);
    fs.writeFileSync(src, data);
    assert.equal(sh(`mkdir -p ${mnt}/kv/llama/r0/aa/bb && cp ${src} ${mnt}/kv/llama/r0/aa/bb/x.bin`).code, 0);
    const sum = sh(`sha256sum ${mnt}/kv/llama/r0/aa/bb/x.bin`).stdout.toString().split(' ')[0];
    assert.equal(sum, sha256(data));
    assert.ok(sh(`cat ${mnt}/kv/llama/r0/aa/bb/x.bin`).stdout.equals(data));
    assert.equal(sh(`dd if=${src} of=${mnt}/kv/llama/r0/dd.bin bs=1M status=none && cmp ${src} ${mnt}/kv/llama/r0/dd.bin`).code, 0);
    assert.equal(sh(`dd if=${mnt}/kv/llama/r0/dd.bin bs=64K skip=10 count=3 status=none`).stdout.equals(data.subarray(640 * 1024, 832 * 1024)), true);
  });

  it('python3: open("wb"), os.replace over an existing file, reads of the tail at an offset, os.getxattr', () => {
    const r = py(`
import os, hashlib
d = "${mnt}/kv/mistral/p"
os.makedirs(d, exist_ok=True)
with open(d + "/final.bin", "wb") as f: f.write(b"old" * 1000)
tmp = d + "/final.bin.tmp"
fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
os.write(fd, b"N" * 3000000)
os.close(fd)
os.replace(tmp, d + "/final.bin")
with open(d + "/final.bin", "rb") as f:
    f.seek(2999990); tail = f.read()
assert tail == b"N" * 10, tail
sha = os.getxattr(d + "/final.bin", "user.cascade.sha256").decode()
assert sha == hashlib.sha256(b"N" * 3000000).hexdigest(), sha
assert not os.path.exists(tmp)
print("ok")
`);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'ok');
  });

  it('setfattr/getfattr: pin, sha256, tier, link', () => {
    const f = `${mnt}/kv/llama/sys/prompt.bin`;
    assert.equal(sh(`mkdir -p ${mnt}/kv/llama/sys && head -c 1000000 /dev/urandom > ${f}`).code, 0);
    assert.equal(sh(`setfattr -n user.cascade.pinned -v 1 ${f}`).code, 0);
    assert.equal(sh(`getfattr --only-values -n user.cascade.pinned ${f}`).stdout.toString(), '1');
    assert.equal(sh(`getfattr --only-values -n user.cascade.tier ${f}`).stdout.toString(), 'dram');
    const sha = sh(`getfattr --only-values -n user.cascade.sha256 ${f}`).stdout.toString();
    assert.equal(sha, sh(`sha256sum ${f}`).stdout.toString().split(' ')[0]);
    assert.equal(sh(`touch ${mnt}/kv/llama/sys/copy.bin && setfattr -n user.cascade.link -v ${sha} ${mnt}/kv/llama/sys/copy.bin`).code, 0);
    assert.equal(sh(`cmp ${f} ${mnt}/kv/llama/sys/copy.bin`).code, 0, 'linked: same content, no data written');
    assert.equal(sh(`setfattr -n user.cascade.pinned -v 0 ${f}`).code, 0);
  });

  it('link by hash: only root and the mount\'s owner; never another user with write access to the file (EACCES, content kept)', () => {
    const d = `${mnt}/kv/llama/trust`;
    assert.equal(sh(`mkdir -p ${d} && printf 'top secret' > ${d}/secret && chmod 600 ${d}/secret && printf 'public' > ${d}/shared && chmod 666 ${d}/shared`).code, 0);
    const sha = sha256(Buffer.from('top secret'));
    const fuseNative = process.env.CASCADE_ENGINE === 'fuse-native';
    if (!fuseNative && spawnSync('id', ['nobody']).status === 0 && spawnSync('which', ['runuser']).status === 0) {
      fs.chmodSync(root, 0o755); // let the other user reach the mount
      const other = sh(`runuser -u nobody -- setfattr -n user.cascade.link -v ${sha} ${d}/shared`);
      assert.notEqual(other.code, 0, 'a user who may write the file but not read the secret');
      assert.match(other.stderr, /Permission denied/);
      assert.equal(sh(`runuser -u nobody -- cat ${d}/shared`).stdout.toString(), 'public', 'the file kept its content');
      assert.equal(sh(`runuser -u nobody -- cat ${d}/secret`).code, 1, 'and the secret stays unreadable to that user');
      // Root (the caller is known on this engine) may, whatever the file's mode.
      assert.equal(sh(`setfattr -n user.cascade.link -v ${sha} ${d}/shared`).code, 0);
      assert.equal(fs.readFileSync(`${d}/shared`, 'utf8'), 'top secret');
    } else {
      // fuse-native does not say who asks: a file others may write refuses the link, even for root.
      const r = sh(`setfattr -n user.cascade.link -v ${sha} ${d}/shared`);
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /Permission denied/);
      assert.equal(fs.readFileSync(`${d}/shared`, 'utf8'), 'public');
      assert.equal(sh(`chmod 644 ${d}/shared && setfattr -n user.cascade.link -v ${sha} ${d}/shared`).code, 0);
      assert.equal(fs.readFileSync(`${d}/shared`, 'utf8'), 'top secret');
    }
  });

  it('modes set by chmod or at create survive a restart, move with rename (of the file or its directory) and go with unlink', async function () {
    const d = `${mnt}/kv/llama/modes`;
    const r = py(`
import os
d = ${JSON.stringify(d)}
os.makedirs(d + '/sub', exist_ok=True)
with open(d + '/chmodded', 'wb') as f: f.write(b'a')
os.chmod(d + '/chmodded', 0o600)
os.umask(0)
fd = os.open(d + '/created', os.O_CREAT | os.O_WRONLY, 0o640); os.write(fd, b'b'); os.close(fd)
fd = os.open(d + '/early', os.O_CREAT | os.O_WRONLY, 0o644); os.fchmod(fd, 0o400); os.write(fd, b'c'); os.close(fd)
with open(d + '/moved-src', 'wb') as f: f.write(b'd')
os.chmod(d + '/moved-src', 0o604)
os.rename(d + '/moved-src', d + '/moved')
with open(d + '/sub/f', 'wb') as f: f.write(b'e')
os.chmod(d + '/sub/f', 0o660)
os.rename(d + '/sub', d + '/sub2')
with open(d + '/gone', 'wb') as f: f.write(b'f')
os.chmod(d + '/gone', 0o600)
os.unlink(d + '/gone')
with open(d + '/gone', 'wb') as f: f.write(b'g')
`);
    assert.equal(r.code, 0, r.stderr);
    const want: Record<string, number> = { chmodded: 0o600, created: 0o640, early: 0o400, moved: 0o604, 'sub2/f': 0o660, gone: 0o666 }; // gone: re-created under umask 0
    const modes = () => Object.fromEntries(Object.keys(want).map((f) => [f, fs.statSync(`${d}/${f}`).mode & 0o7777]));
    assert.deepEqual(modes(), want, 'before the restart');
    await daemon.stop();
    await daemon.start();
    assert.deepEqual(modes(), want, 'after the restart');
  });

  it('empty directories survive a restart with their mkdir modes; a renamed one moves, a removed one stays gone', async function () {
    const d = `${mnt}/kv/llama/dirs`;
    const r = py(`
import os
d = ${JSON.stringify(d)}
os.umask(0)
os.makedirs(d + '/empty/deeper', exist_ok=True)
os.mkdir(d + '/private', 0o700)
os.mkdir(d + '/from', 0o750)
os.mkdir(d + '/from/inner')
os.rename(d + '/from', d + '/to')
os.mkdir(d + '/gone')
os.rmdir(d + '/gone')
`);
    assert.equal(r.code, 0, r.stderr);
    const want = { empty: 0o777, 'empty/deeper': 0o777, private: 0o700, to: 0o750, 'to/inner': 0o777 };
    const seen = () => Object.fromEntries(Object.keys(want).map((n) => [n, fs.statSync(`${d}/${n}`).mode & 0o7777]));
    assert.deepEqual(seen(), want, 'before the restart');
    await daemon.stop();
    await daemon.start();
    assert.deepEqual(seen(), want, 'after the restart');
    assert.equal(fs.existsSync(`${d}/from`), false, 'the old name of a renamed directory');
    assert.equal(fs.existsSync(`${d}/gone`), false, 'a removed directory');
    assert.deepEqual(fs.readdirSync(d).sort(), ['empty', 'private', 'to']);
    fs.writeFileSync(`${d}/private/f`, 'x'); // usable after the restart
    assert.equal(fs.readFileSync(`${d}/private/f`, 'utf8'), 'x');
  });

  it('errno table: every row gives its errno, leaves content intact and the daemon alive', () => {
    const d = `${mnt}/kv/llama/errs`;
    assert.equal(sh(`mkdir -p ${d} && printf committed > ${d}/f`).code, 0);
    const row = (cmd: string, pattern: RegExp) => {
      const r = sh(cmd);
      assert.notEqual(r.code, 0, `${cmd} should fail`);
      assert.match(r.stderr, pattern, cmd);
    };
    row(`touch ${d}/${'n'.repeat(256)}`, /File name too long/);
    row(`printf more >> ${d}/f`, /Operation not permitted/); // O_APPEND
    row(`python3 -c "open('${d}/f', 'r+b').write(b'x')"`, /Operation not permitted/); // write without O_TRUNC
    row(`truncate -s 3 ${d}/f`, /Operation not permitted/);
    row(`ln ${d}/f ${d}/hard`, /Operation not permitted/);
    row(`ln -s ${d}/f ${d}/soft`, /Operation not permitted/);
    row(`mknod ${d}/fifo p`, /Operation not permitted/);
    row(`setfattr -n user.cascade.bogus -v 1 ${d}/f`, /Operation not supported/);
    row(`setfattr -n user.other -v 1 ${d}/f`, /Operation not supported/);
    row(`setfattr -n user.cascade.pinned -v 2 ${d}/f`, /Invalid argument/);
    assert.equal(sh(`setfattr -n user.cascade.pinned -v 1 ${d}/f`).code, 0);
    row(`rm ${d}/f`, /Operation not permitted/);
    assert.equal(sh(`cat ${d}/f`).stdout.toString(), 'committed', 'content intact');
    assert.equal(sh(`setfattr -n user.cascade.pinned -v 0 ${d}/f && rm ${d}/f`).code, 0);
    // A too-small buffer gets ERANGE (not EIO): ask for 10 bytes of a 64-byte value.
    const r = py(`
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
open("${d}/g", "wb").write(b"x")
buf = ctypes.create_string_buffer(10)
n = libc.getxattr(b"${d}/g", b"user.cascade.sha256", buf, ctypes.c_size_t(10))
print(n, errno.errorcode[ctypes.get_errno()])
`);
    assert.equal(r.stdout.trim(), '-1 ERANGE', r.stderr);
    assert.equal(sh(`ls ${mnt}/kv`).code, 0, 'daemon alive');
  });

  it('8 readers during repeated overwrites: zero mixed reads, and ENOENT during rename-replace is counted', () => {
    const d = `${mnt}/kv/llama/race`;
    const r = py(`
import os, multiprocessing, time
d = "${d}"
os.makedirs(d, exist_ok=True)
size = 256 * 1024
with open(d + "/f", "wb") as f: f.write(b"A" * size)
def reader(q):
    mixed = enoent = reads = 0
    end = time.time() + 3
    while time.time() < end:
        try:
            with open(d + "/f", "rb") as f: b = f.read()
        except FileNotFoundError:
            enoent += 1; continue
        reads += 1
        if len(b) != size or b.count(b[:1]) != len(b): mixed += 1
    q.put((mixed, enoent, reads))
q = multiprocessing.Queue()
ps = [multiprocessing.Process(target=reader, args=(q,)) for _ in range(8)]
[p.start() for p in ps]
end = time.time() + 3; i = 0; writes = 0
while time.time() < end:
    c = bytes([65 + (i % 26)]) * size; i += 1
    if i % 2:
        with open(d + "/f", "wb") as f: f.write(c)               # O_TRUNC overwrite
    else:
        with open(d + "/t%d" % i, "wb") as f: f.write(c)
        os.replace(d + "/t%d" % i, d + "/f")                    # rename-replace
    writes += 1
res = [q.get() for _ in ps]
[p.join() for p in ps]
print(sum(r[0] for r in res), sum(r[1] for r in res), sum(r[2] for r in res), writes)
`);
    assert.equal(r.code, 0, r.stderr);
    const [mixed, enoent, reads, writes] = r.stdout.trim().split(' ').map(Number);
    process.stdout.write(`      race: ${reads} reads, ${writes} overwrites, ${mixed} mixed, ${enoent} ENOENT\n`);
    assert.equal(mixed, 0, 'a reader never sees a mix of two versions');
    assert.ok(reads > 100 && writes > 10);
  });

  it('kill -9 of the daemon, remount: every fsynced file intact', async () => {
    const d = `${mnt}/kv/llama/durable`;
    const r = py(`
import os
os.makedirs("${d}", exist_ok=True)
for i in range(20):
    with open("${d}/b%d" % i, "wb") as f:
        f.write(bytes([i]) * (100000 + i)); f.flush(); os.fsync(f.fileno())
print("ok")
`);
    assert.equal(r.stdout.trim(), 'ok', r.stderr);
    await daemon.stop('SIGKILL');
    assert.equal(isMounted(mnt), false);
    await daemon.start(); // clears nothing stale: stop() unmounted; the daemon must cope either way
    for (let i = 0; i < 20; i++) {
      const got = fs.readFileSync(`${d}/b${i}`);
      assert.ok(got.equals(Buffer.alloc(100000 + i, i)), `b${i} intact`);
    }
  });

  it('200 files of 1 MiB through a 64 MiB DRAM tier all read back', () => {
    const r = py(`
import os, hashlib
d = "${mnt}/kv/llama/many"
os.makedirs(d, exist_ok=True)
sums = []
for i in range(200):
    b = hashlib.sha256(str(i).encode()).digest() * 32768
    with open(d + "/b%03d" % i, "wb") as f: f.write(b)
    sums.append(hashlib.sha256(b).hexdigest())
bad = 0
for i in range(200):
    with open(d + "/b%03d" % i, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != sums[i]: bad += 1
print(bad, len(os.listdir(d)))
`);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), '0 200');
  });

  it("vLLM / llm-d: stat, O_EXCL|O_DIRECT temp file, one large write, rename over the final name, tail reads", () => {
    const r = py(`
import os, mmap, hashlib
root = "${mnt}/kv/llama-3-8b_abc123_r0/a1b/c2_g0"
os.makedirs(root, exist_ok=True)
final = root + "/deadbeef.bin"
assert not os.path.exists(final)
size = 4 * 1024 * 1024
buf = mmap.mmap(-1, size)                       # page-aligned, as O_DIRECT wants
buf.write(hashlib.sha256(b"kv").digest() * (size // 32))
for attempt in range(2):                        # the second write replaces the first
    tmp = final + ".tmp%d" % attempt
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_DIRECT, 0o644)
    assert os.write(fd, buf) == size
    os.close(fd)
    os.rename(tmp, final)
fd = os.open(final, os.O_RDONLY | os.O_DIRECT)
tail = mmap.mmap(-1, 65536)
n = os.preadv(fd, [tail], size - 65536)
os.close(fd)
assert n == 65536 and tail[:] == bytes(buf[size - 65536:]), n
print(len(os.listdir(root)), os.stat(final).st_size)
`);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), `1 ${4 * 1024 * 1024}`);
  });

  it('LMCache file connector: <key>.tmp then rename, repeated with the same temp name', () => {
    const r = py(`
import os
d = "${mnt}/kv/mistral/lmcache"
os.makedirs(d, exist_ok=True)
for i in range(20):
    key = "chunk%02d" % (i % 5)
    with open(d + "/" + key + ".tmp", "wb") as f: f.write(bytes([i]) * 70000)
    os.rename(d + "/" + key + ".tmp", d + "/" + key + ".data")
names = sorted(os.listdir(d))
ok = all(open(d + "/chunk%02d.data" % k, "rb").read() == bytes([15 + k]) * 70000 for k in range(5))
print(len(names), ok)
`);
    assert.equal(r.stdout.trim(), '5 True', r.stderr);
  });

  it('SGLang HiCacheFile: 10,000 files, a full listing per existence check, statvfs, unlink to evict', () => {
    const r = py(`
import os, time
d = "${mnt}/kv/sglang"
os.makedirs(d, exist_ok=True)
for i in range(10000):
    tmp = d + "/.tmp%d" % i
    with open(tmp, "wb") as f: f.write(b"p%05d" % i)
    os.rename(tmp, d + "/page%05d_qwen_0_1.bin" % i)
t = time.time()
for _ in range(5): names = os.listdir(d)
listing_ms = (time.time() - t) / 5 * 1000
st = os.statvfs(d)
assert st.f_bsize > 0 and st.f_blocks > 0 and st.f_bavail > 0 and st.f_namemax == 255, st
for i in range(0, 10000, 2): os.unlink(d + "/page%05d_qwen_0_1.bin" % i)
print(len(names), len(os.listdir(d)), "%.1f" % listing_ms)
`);
    assert.equal(r.code, 0, r.stderr);
    const [before, after, listingMs] = r.stdout.trim().split(' ');
    process.stdout.write(`      10,000-entry listing: ${listingMs} ms\n`);
    assert.equal(before, '10000');
    assert.equal(after, '5000');
  });

  it('concurrent mkdir -p of the same directories all succeed; utimensat and O_DIRECT dd work', () => {
    const r = sh(`for i in 1 2 3 4 5 6 7 8; do mkdir -p ${mnt}/kv/m2/a/b/c/d & done; wait; ls -d ${mnt}/kv/m2/a/b/c/d`);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(sh(`dd if=/dev/zero of=${mnt}/kv/m2/a/direct.bin bs=1M count=8 oflag=direct status=none && stat -c %s ${mnt}/kv/m2/a/direct.bin`).stdout.toString().trim(), String(8 * 1024 * 1024));
    assert.equal(sh(`dd if=${mnt}/kv/m2/a/direct.bin of=/dev/null bs=1M iflag=direct status=none`).code, 0);
    assert.equal(sh(`touch ${mnt}/kv/m2/a/direct.bin && touch -d '2020-01-01' ${mnt}/kv/m2/a/direct.bin`).code, 0, 'utimensat accepted');
  });

  it('over capacity (--disk): ENOSPC at write or close, the old version intact, statvfs shows the bound', async () => {
    const small = new Daemon(path.join(root, 'mnt-small'), path.join(root, 'data-small'), ['--disk', '8M']);
    fs.mkdirSync(small.mnt);
    await small.start();
    try {
      const f = `${small.mnt}/kv/m/f`;
      assert.equal(sh(`mkdir -p ${small.mnt}/kv/m && printf keep > ${f}`).code, 0);
      const r = sh(`head -c 12000000 /dev/zero > ${f}`);
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /No space left on device/);
      assert.equal(sh(`cat ${f}`).stdout.toString(), 'keep', 'the old version is intact');
      const st = py(`import os; s = os.statvfs("${small.mnt}/kv"); print(s.f_blocks * s.f_frsize)`);
      assert.ok(Number(st.stdout) <= 8 * 1024 * 1024, `statvfs total ${st.stdout.trim()} bytes within --disk`);
    } finally {
      await small.stop();
    }
  });

  it('stats.json and the versions tree are readable with cat and ls', () => {
    const stats = JSON.parse(sh(`cat ${mnt}/.cascade/stats.json`).stdout.toString());
    assert.ok(stats.tiers.length >= 2);
    assert.equal(sh(`printf one > ${mnt}/kv/llama/v && printf two > ${mnt}/kv/llama/v`).code, 0);
    assert.equal(sh(`ls ${mnt}/.cascade/versions/kv/llama/v`).stdout.toString().split('\n').filter(Boolean).length >= 2, true);
    assert.equal(sh(`cat ${mnt}/.cascade/versions/kv/llama/v/1`).stdout.toString(), 'one');
  });
});

/**
 * Several nodes, one Cascade: three `cascade mount --cluster` daemons on this machine, each with its own
 * mountpoint, DRAM arena and node name, sharing one Redis (metadata) and one directory (the shared
 * tier). Real daemons, a real redis-server, real tools (cp, sha256sum, python3 with direct syscalls).
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { rmDir, seededBytes, sha256, tmpDir } from '../store/helpers';
import { haveRedis, RedisServers } from '../store/redis-server';
import { canMount, CLI, Daemon, isMounted } from './daemon';

function sh(cmd: string): { code: number; stdout: string; stderr: string } {
  const r = spawnSync('bash', ['-c', cmd], { encoding: 'utf8', maxBuffer: 1 << 28 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

function py(code: string, timeoutMs = 60_000): { code: number; stdout: string; stderr: string } {
  const r = spawnSync('python3', ['-c', code], { encoding: 'utf8', timeout: timeoutMs });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe('cluster: three daemons, one Redis, one shared tier', function () {
  this.timeout(180_000);
  let root: string;
  let redis: RedisServers;
  let url: string;
  const nodes: Record<'a' | 'b' | 'c', Daemon> = {} as Record<'a' | 'b' | 'c', Daemon>;
  const mnt = (n: 'a' | 'b' | 'c') => nodes[n].mnt;

  function daemon(name: 'a' | 'b' | 'c'): Daemon {
    const m = path.join(root, `mnt-${name}`);
    fs.mkdirSync(m, { recursive: true });
    return new Daemon(m, path.join(root, `data-${name}`), ['--cluster', url, '--node', name, '--shared', path.join(root, 'shared')]);
  }

  before(async function () {
    if (!canMount(['fusermount', 'python3', 'sha256sum']) || !haveRedis()) this.skip();
    root = tmpDir('cluster');
    redis = await RedisServers.start(false);
    url = `redis://127.0.0.1:${redis.ports[0]}/c${process.pid}`;
    for (const n of ['a', 'b', 'c'] as const) {
      nodes[n] = daemon(n);
      await nodes[n].start();
    }
  });

  after(async function () {
    for (const d of Object.values(nodes)) await d.stop();
    for (const d of Object.values(nodes)) assert.equal(isMounted(d.mnt), false, 'nothing left mounted');
    await redis?.stop();
    if (root) rmDir(root);
  });

  it('a file written on A reads byte-exact on B and C: same sha256, size, inode number and versions', function () {
    const src = path.join(root, 'src.bin');
    const data = seededBytes(11, 5 * 1024 * 1024 + 7);
    fs.writeFileSync(src, data);
    assert.equal(sh(`mkdir -p ${mnt('a')}/kv/llama/r0 && cp ${src} ${mnt('a')}/kv/llama/r0/block.bin`).code, 0);
    for (const n of ['b', 'c'] as const) {
      const f = `${mnt(n)}/kv/llama/r0/block.bin`;
      assert.equal(sh(`sha256sum ${f}`).stdout.split(' ')[0], sha256(data), `sha256sum on ${n}`);
      assert.equal(fs.statSync(f).ino, fs.statSync(`${mnt('a')}/kv/llama/r0/block.bin`).ino, `one file, one inode number, on ${n}`);
      assert.equal(sh(`getfattr --only-values -n user.cascade.sha256 ${f}`).stdout, sha256(data));
      assert.deepEqual(fs.readdirSync(`${mnt(n)}/.cascade/versions/kv/llama/r0/block.bin`), ['1']);
    }
  });

  it('vLLM layout: O_EXCL temp file, one write, rename over the final name on A; listings and reads on C', function () {
    const r = py(`
import os, hashlib
d = "${mnt('a')}/kv/vllm/llama_abc_r0/a1b/c2"
os.makedirs(d, exist_ok=True)
for i in range(20):
    data = hashlib.sha256(str(i).encode()).digest() * 40000
    tmp = d + "/.tmp-%d" % i
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.close(fd)
    os.replace(tmp, d + "/%d.bin" % i)
print("ok")
`);
    assert.equal(r.code, 0, r.stderr);
    const check = py(`
import os, hashlib
d = "${mnt('c')}/kv/vllm/llama_abc_r0/a1b/c2"
names = sorted(os.listdir(d))
assert names == sorted("%d.bin" % i for i in range(20)), names
for i in range(20):
    with open(d + "/%d.bin" % i, "rb") as f:
        assert f.read() == hashlib.sha256(str(i).encode()).digest() * 40000, i
print("ok")
`);
    assert.equal(check.code, 0, check.stderr);
  });

  it('an empty directory made on A is seen on B at once (stat, listing, a create in it), keeps its mode, and rmdir on B removes it for A', function () {
    const r = py(`
import os
os.umask(0)
os.makedirs("${mnt('a')}/kv/sg/hicache", exist_ok=True)
os.mkdir("${mnt('a')}/kv/sg/private", 0o700)
`);
    assert.equal(r.code, 0, r.stderr);
    const check = py(`
import os, stat
b = "${mnt('b')}/kv/sg"
assert stat.S_ISDIR(os.stat(b + "/hicache").st_mode)
assert stat.S_IMODE(os.stat(b + "/private").st_mode) == 0o700, oct(os.stat(b + "/private").st_mode)
assert sorted(os.listdir(b)) == ["hicache", "private"], os.listdir(b)
assert [e.name for e in os.scandir(b + "/hicache")] == []
with open(b + "/hicache/page.bin", "wb") as f: f.write(b"p" * 4096)
try:
    os.rmdir(b + "/hicache")
    raise SystemExit("rmdir of a directory holding a file succeeded")
except OSError as e:
    assert e.errno == 39, e
os.rmdir(b + "/private")
print("ok")
`);
    assert.equal(check.code, 0, check.stderr);
    assert.equal(fs.readFileSync(`${mnt('a')}/kv/sg/hicache/page.bin`).length, 4096);
    // A's kernel may keep the name for its entry validity (1 s); past it, A asks and finds it gone.
    assert.equal(sh(`for i in $(seq 40); do [ -e ${mnt('a')}/kv/sg/private ] || exit 0; sleep 0.05; done; exit 1`).code, 0, 'removed on B: gone on A within 2 s');
    assert.equal(py(`import os; os.rmdir("${mnt('c')}/kv/sg/hicache")`).code !== 0, true, 'C sees the file B wrote: not empty');
  });

  it('close-to-open across nodes: a rewrite on A is what B opens next, within the stated bound; B never reads a mix', function () {
    // B's native cache answers opens of a name it has read; A's commit tells B through Redis before
    // A's close() returns, and B drops the name when its event loop takes that message.
    const r = py(`
import os, time, json
a = "${mnt('a')}/kv/c2o/block"
b = "${mnt('b')}/kv/c2o/block"
os.makedirs(os.path.dirname(a), exist_ok=True)
lags, stale = [], 0
for i in range(40):
    data = (b"%08d" % i) * (65536 // 8)
    with open(a, "wb") as f: f.write(data)
    t0 = time.perf_counter()
    while True:
        with open(b, "rb") as f: got = f.read()
        assert len(got) == len(data) and got == got[:8] * (len(got) // 8), "a mixed or cut read"
        if got == data: break
        stale += 1
        assert time.perf_counter() - t0 < 1.0, "B still reads the old version 1 s after A's close"
    lags.append(time.perf_counter() - t0)
print(json.dumps({"stale": stale, "maxLagMs": round(max(lags) * 1000, 2)}))
`);
    assert.equal(r.code, 0, r.stderr);
    console.log(`      close-to-open A -> B: ${r.stdout.trim()}`);
  });

  it('global dedup: content already stored on A is put on C without moving bytes; link by hash works across nodes', function () {
    const data = seededBytes(13, 2 * 1024 * 1024);
    const src = path.join(root, 'dup.bin');
    fs.writeFileSync(src, data);
    assert.equal(sh(`mkdir -p ${mnt('a')}/kv/m/dup && cp ${src} ${mnt('a')}/kv/m/dup/one`).code, 0);
    const segBytes = () => sh(`du -sb ${root}/shared/nodes/c`).stdout.split('\t')[0];
    const before = { seg: segBytes(), stats: JSON.parse(fs.readFileSync(`${mnt('c')}/.cascade/stats.json`, 'utf8')) };
    assert.equal(sh(`cp ${src} ${mnt('c')}/kv/m/dup/two && sleep 0.2`).code, 0); // past the stats.json snapshot's age
    const after = JSON.parse(fs.readFileSync(`${mnt('c')}/.cascade/stats.json`, 'utf8'));
    assert.equal(after.dedup.hits - before.stats.dedup.hits, 1, 'one dedup hit on C');
    assert.equal(after.dedup.savedBytes - before.stats.dedup.savedBytes, data.length);
    assert.equal(segBytes(), before.seg, "C's segments did not grow");
    assert.equal(sha256(fs.readFileSync(`${mnt('b')}/kv/m/dup/two`)), sha256(data));
    fs.writeFileSync(`${mnt('b')}/kv/m/dup/three`, '');
    assert.equal(sh(`setfattr -n user.cascade.link -v ${sha256(data)} ${mnt('b')}/kv/m/dup/three`).code, 0);
    assert.equal(sha256(fs.readFileSync(`${mnt('c')}/kv/m/dup/three`)), sha256(data));
  });

  it('LMCache connector on A (<key>.tmp then rename, same temp names), reads on B; SGLang pages on C, existence by listing and eviction by unlink on A', function () {
    const lm = py(`
import os
d = "${mnt('a')}/kv/mistral/lmcache"
os.makedirs(d, exist_ok=True)
for i in range(20):
    key = "chunk%02d" % (i % 5)
    with open(d + "/" + key + ".tmp", "wb") as f: f.write(bytes([i]) * 70000)
    os.rename(d + "/" + key + ".tmp", d + "/" + key + ".data")
print("ok")
`);
    assert.equal(lm.code, 0, lm.stderr);
    const lmRead = py(`
import os
d = "${mnt('b')}/kv/mistral/lmcache"
names = sorted(os.listdir(d))
ok = all(open(d + "/chunk%02d.data" % k, "rb").read() == bytes([15 + k]) * 70000 for k in range(5))
print(len(names), ok)
`);
    assert.equal(lmRead.stdout.trim(), '5 True', lmRead.stderr);
    const sg = py(`
import os
d = "${mnt('c')}/kv/sglang"
os.makedirs(d, exist_ok=True)
for i in range(300):
    tmp = d + "/.tmp%d" % i
    with open(tmp, "wb") as f: f.write(b"p%05d" % i)
    os.rename(tmp, d + "/page%05d_qwen_0_1.bin" % i)
print("ok")
`);
    assert.equal(sg.code, 0, sg.stderr);
    const evict = py(`
import os
d = "${mnt('a')}/kv/sglang"
names = set(os.listdir(d))
assert len(names) == 300, len(names)
assert all(open(d + "/page%05d_qwen_0_1.bin" % i, "rb").read() == b"p%05d" % i for i in range(0, 300, 7))
for i in range(0, 300, 2): os.unlink(d + "/page%05d_qwen_0_1.bin" % i)
print("ok")
`);
    assert.equal(evict.code, 0, evict.stderr);
    const left = fs.readdirSync(`${mnt('c')}/kv/sglang`);
    assert.equal(left.length, 150, 'C lists what A evicted as gone');
    assert.ok(left.every((n) => Number(n.slice(4, 9)) % 2 === 1));
  });

  it('content released on one node is dropped from the node that stored it (within a heartbeat)', async function () {
    const diskBlocks = (n: 'a' | 'b' | 'c') =>
      (JSON.parse(fs.readFileSync(`${mnt(n)}/.cascade/stats.json`, 'utf8')) as { tiers: Array<{ name: string; blocks: number }> }).tiers.find((t) => t.name === 'disk')!.blocks;
    fs.mkdirSync(`${mnt('a')}/kv/m/gc`, { recursive: true });
    await new Promise((r) => setTimeout(r, 150)); // past the stats.json snapshot's age
    const before = diskBlocks('a');
    fs.writeFileSync(`${mnt('a')}/kv/m/gc/unique`, seededBytes(31, 1024 * 1024));
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(diskBlocks('a'), before + 1, 'A stored it');
    fs.unlinkSync(`${mnt('b')}/kv/m/gc/unique`); // the last reference goes, on B
    const deadline = Date.now() + 15_000;
    while (diskBlocks('a') !== before) {
      assert.ok(Date.now() < deadline, `A still holds the released block (${diskBlocks('a')} blocks, ${before} before)`);
      await new Promise((r) => setTimeout(r, 250));
    }
  });

  it('renames and unlinks on one node show on the others (listing, stat, ENOENT)', function () {
    assert.equal(sh(`mkdir -p ${mnt('b')}/kv/m/ren && echo one > ${mnt('b')}/kv/m/ren/x && echo two > ${mnt('b')}/kv/m/ren/y`).code, 0);
    assert.deepEqual(fs.readdirSync(`${mnt('a')}/kv/m/ren`).sort(), ['x', 'y']);
    fs.renameSync(`${mnt('c')}/kv/m/ren/x`, `${mnt('c')}/kv/m/ren/z`);
    fs.unlinkSync(`${mnt('c')}/kv/m/ren/y`);
    assert.deepEqual(fs.readdirSync(`${mnt('a')}/kv/m/ren`).sort(), ['z']);
    assert.equal(fs.readFileSync(`${mnt('b')}/kv/m/ren/z`, 'utf8'), 'one\n');
    assert.throws(() => fs.readFileSync(`${mnt('b')}/kv/m/ren/y`), /ENOENT/);
  });

  it('a file A commits (or renames into place, or makes with a mode of its own) in a directory B knows: B finds it, with its size and inode number, from the change feed alone', async function () {
    fs.mkdirSync(`${mnt('a')}/kv/feed/d`, { recursive: true });
    assert.deepEqual(fs.readdirSync(`${mnt('b')}/kv/feed/d`), [], 'B knows the directory, empty');
    const data = seededBytes(77, 300_000);
    fs.writeFileSync(`${mnt('a')}/kv/feed/d/tmp`, data);
    fs.renameSync(`${mnt('a')}/kv/feed/d/tmp`, `${mnt('a')}/kv/feed/d/final`);
    fs.writeFileSync(`${mnt('a')}/kv/feed/d/direct`, data.subarray(0, 1000));
    // A mode other than the default is saved after the commit, with a change message of its own.
    fs.writeFileSync(`${mnt('a')}/kv/feed/d/moded`, data.subarray(0, 2000), { mode: 0o750 });
    const onA = (n: string) => fs.statSync(`${mnt('a')}/kv/feed/d/${n}`);
    assert.equal(onA('moded').mode & 0o777, 0o750);
    const want = { final: [onA('final').size, onA('final').ino], direct: [onA('direct').size, onA('direct').ino], moded: [onA('moded').size, onA('moded').ino] };
    await new Promise((r) => setTimeout(r, 300)); // the feed's messages reach B
    // Redis stops answering (its connections stay open): B can answer only from what the feed told it.
    redis.pause(true);
    let r: ReturnType<typeof py>;
    try {
      r = py(`
import os, json
d = "${mnt('b')}/kv/feed/d"
print(json.dumps({n: [os.stat(f"{d}/{n}").st_size, os.stat(f"{d}/{n}").st_ino, os.path.exists(f"{d}/{n}")] for n in ["final", "direct", "moded"]}))
`, 20_000);
    } finally {
      redis.pause(false);
    }
    assert.equal(r.code, 0, `B answered without Redis: ${r.stderr}`);
    const got = JSON.parse(r.stdout) as Record<string, [number, number, boolean]>;
    assert.deepEqual(got, { final: [...want.final, true], direct: [...want.direct, true], moded: [...want.moded, true] });
    assert.ok(fs.readFileSync(`${mnt('b')}/kv/feed/d/final`).equals(data), 'byte-exact on B');
    assert.equal(fs.existsSync(`${mnt('b')}/kv/feed/d/tmp`), false, 'the temporary name is gone on B');
    assert.deepEqual(fs.readdirSync(`${mnt('b')}/kv/feed/d`).sort(), ['direct', 'final', 'moded']);
  });

  it('a directory a node listed or made empty answers absent names itself, and still finds what other nodes make in it', async function () {
    const base = 'kv/complete';
    fs.mkdirSync(`${mnt('a')}/${base}/d`, { recursive: true }); // made empty on A
    assert.deepEqual(fs.readdirSync(`${mnt('b')}/${base}/d`), [], 'listed on B');
    const exists = (n: 'a' | 'b', names: string[]) =>
      py(`
import os, json, errno
def what(p):
    try:
        os.stat(p)
        return "exists"
    except OSError as e:
        return errno.errorcode[e.errno]
print(json.dumps([what("${mnt(n)}/${base}/d/" + x) for x in ${JSON.stringify(names)}]))
`, 20_000);
    // Redis stops answering: absent names in those directories are answered from the tree alone.
    redis.pause(true);
    let onA: ReturnType<typeof py>;
    let onB: ReturnType<typeof py>;
    try {
      onA = exists('a', ['nope', 'x.tmp']);
      onB = exists('b', ['nope', 'x.tmp']);
    } finally {
      redis.pause(false);
    }
    assert.equal(onA.code, 0, `A answered without Redis: ${onA.stderr}`);
    assert.equal(onB.code, 0, `B answered without Redis: ${onB.stderr}`);
    assert.deepEqual([JSON.parse(onA.stdout), JSON.parse(onB.stdout)], [['ENOENT', 'ENOENT'], ['ENOENT', 'ENOENT']]);
    // What other nodes make there is found: a file (its version comes with the change) and a
    // directory (the tree cannot take it from the change alone: the next lookup asks Redis).
    fs.writeFileSync(`${mnt('a')}/${base}/d/x`, 'from A');
    fs.mkdirSync(`${mnt('c')}/${base}/d/sub`);
    fs.writeFileSync(`${mnt('c')}/${base}/d/sub/y`, 'from C');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(fs.readFileSync(`${mnt('b')}/${base}/d/x`, 'utf8'), 'from A');
    assert.ok(fs.statSync(`${mnt('b')}/${base}/d/sub`).isDirectory(), 'a directory C made in it is found on B');
    assert.ok(fs.statSync(`${mnt('a')}/${base}/d/sub`).isDirectory(), 'and on A');
    assert.equal(fs.readFileSync(`${mnt('a')}/${base}/d/sub/y`, 'utf8'), 'from C');
    assert.deepEqual(fs.readdirSync(`${mnt('b')}/${base}/d`).sort(), ['sub', 'x']);
  });

  it('files created on several nodes at once all exist everywhere, each with its own inode number', async function () {
    const writers = (['a', 'b', 'c'] as const).map((n) =>
      new Promise<number | null>((resolve) => {
        const p = spawn('python3', [
          '-c',
          `
import os
d = "${mnt(n)}/kv/m/many"
os.makedirs(d, exist_ok=True)
for i in range(50):
    with open(d + "/${n}-%d" % i, "wb") as f: f.write(b"${n}" * (1000 + i))
`,
        ]);
        p.on('exit', resolve);
      }),
    );
    assert.deepEqual(await Promise.all(writers), [0, 0, 0]);
    const names = fs.readdirSync(`${mnt('a')}/kv/m/many`);
    assert.equal(names.length, 150);
    const inos = new Set(names.map((n) => fs.statSync(`${mnt('c')}/kv/m/many/${n}`).ino));
    assert.equal(inos.size, 150, 'distinct inode numbers across nodes');
  });

  it('overwrites on B while C reads in a loop: every read is one whole version, never a mix', function () {
    assert.equal(sh(`mkdir -p ${mnt('b')}/kv/m/race`).code, 0);
    fs.writeFileSync(`${mnt('b')}/kv/m/race/f`, Buffer.alloc(1 << 20, 0));
    const reader = spawn('python3', [
      '-c',
      `
import os, time, json
p = "${mnt('c')}/kv/m/race/f"
reads = mixed = errors = 0
end = time.time() + 6
while time.time() < end:
    try:
        with open(p, "rb") as f: data = f.read()
    except OSError:
        errors += 1
        continue
    reads += 1
    if len(data) != (1 << 20) or data.count(data[:1]) != len(data): mixed += 1
print(json.dumps({"reads": reads, "mixed": mixed, "errors": errors}))
`,
    ]);
    let out = '';
    reader.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const done = new Promise<void>((resolve) => reader.on('exit', () => resolve()));
    const w = py(
      `
import os, time
d = "${mnt('b')}/kv/m/race"
end = time.time() + 5
i = 0
while time.time() < end:
    i += 1
    v = bytes([i % 250 + 1]) * (1 << 20)
    if i % 2:
        with open(d + "/f", "wb") as f: f.write(v)
    else:
        with open(d + "/tmp", "wb") as f: f.write(v)
        os.replace(d + "/tmp", d + "/f")
print(i)
`,
      30_000,
    );
    assert.equal(w.code, 0, w.stderr);
    return done.then(() => {
      const r = JSON.parse(out) as { reads: number; mixed: number; errors: number };
      process.stdout.write(`      cluster race: ${r.reads} reads on C, ${w.stdout.trim()} overwrites on B, ${r.mixed} mixed, ${r.errors} errors\n`);
      assert.ok(r.reads > 20, `${r.reads} reads`);
      assert.equal(r.mixed, 0);
    });
  });

  it('a block read from another node\'s segment streams, each piece once it passes its CRC-32C; a damaged piece is never served', function () {
    const data = seededBytes(31, 6 * 1024 * 1024 + 5);
    fs.mkdirSync(`${mnt('a')}/kv/m/seg`, { recursive: true });
    fs.writeFileSync(`${mnt('a')}/kv/m/seg/blk`, data);
    // Out of A's DRAM: other nodes read A's segment, not A's memory.
    const ev = spawnSync(process.execPath, [CLI, 'evict', `${mnt('a')}/kv/m/seg/blk`], { encoding: 'utf8' });
    assert.equal(ev.status, 0, ev.stderr);
    // One payload byte flipped past 5 MiB (256 KiB pieces: the 21st).
    const segDir = path.join(root, 'shared', 'nodes', 'a', 'segments');
    const name = Buffer.from(sha256(data), 'hex');
    let damaged = false;
    for (const seg of fs.readdirSync(segDir).filter((n) => n.endsWith('.log'))) {
      const bytes = fs.readFileSync(path.join(segDir, seg));
      const header = bytes.indexOf(name) - 16;
      if (header < 0 || header % 4096 !== 0) continue;
      const at = header + 4096 + 5 * 1024 * 1024 + 11;
      const fd = fs.openSync(path.join(segDir, seg), 'r+');
      fs.writeSync(fd, Buffer.from([bytes[at] ^ 0x20]), 0, 1, at);
      fs.closeSync(fd);
      damaged = true;
    }
    assert.ok(damaged, "the block's record in A's segments");
    const r = py(`
import hashlib, os
fd = os.open("${mnt('b')}/kv/m/seg/blk", os.O_RDONLY)
got = bytearray()
try:
    while True:
        b = os.read(fd, 1 << 20)
        if not b: break
        got += b
    print("no-error", len(got))
except OSError as e:
    print("errno", e.errno, len(got), hashlib.sha256(got).hexdigest())
`);
    const [word, code, n, digest] = r.stdout.trim().split(' ');
    assert.equal(word, 'errno', r.stdout + r.stderr);
    assert.equal(Number(code), 5, 'EIO');
    assert.ok(Number(n) <= 5 * 1024 * 1024, `${n} bytes before the error: none of the damaged piece`);
    assert.ok(Number(n) >= 1024 * 1024, `${n} bytes before the error: the pieces before it were served as they passed`);
    assert.equal(digest, sha256(data.subarray(0, Number(n))), 'what came before is the file\'s own bytes');
    assert.notEqual(sh(`getfattr --only-values -n user.cascade.tier ${mnt('b')}/kv/m/seg/blk`).stdout, 'dram', 'nothing kept');
  });

  it('kill -9 of B: its files stay readable on A and C from the shared tier; B restarts under its name', async function () {
    const data = seededBytes(12, 3 * 1024 * 1024);
    fs.mkdirSync(`${mnt('b')}/kv/m/fromb`, { recursive: true });
    fs.writeFileSync(`${mnt('b')}/kv/m/fromb/blk`, data);
    assert.equal(sh(`python3 -c "import os; fd = os.open('${mnt('b')}/kv/m/fromb/blk', os.O_RDONLY); os.fsync(fd)"`).code, 0);
    await nodes.b.stop('SIGKILL');
    for (const n of ['a', 'c'] as const) {
      assert.equal(sha256(fs.readFileSync(`${mnt(n)}/kv/m/fromb/blk`)), sha256(data), `read on ${n} after B died`);
    }
    await nodes.b.start(); // the lease of the killed daemon is taken over at once (same host, dead pid)
    assert.equal(sha256(fs.readFileSync(`${mnt('b')}/kv/m/fromb/blk`)), sha256(data));
  });

  it('Redis killed and restarted mid-run: commits and opens of unknown names fail with EIO meanwhile (no hang), names a node saw and holds keep reading, then everything works again', async function () {
    const data = seededBytes(14, 1024 * 1024);
    fs.mkdirSync(`${mnt('a')}/kv/m/redis`, { recursive: true });
    fs.writeFileSync(`${mnt('a')}/kv/m/redis/before`, data);
    const held = fs.openSync(`${mnt('c')}/kv/m/redis/before`, 'r');
    try {
      await new Promise((r) => setTimeout(r, 100)); // the open looks up where the block lies, off its path
      await redis.kill();
      const started = Date.now();
      assert.throws(() => fs.writeFileSync(`${mnt('a')}/kv/m/redis/during`, 'x'), /EIO/, 'a commit without Redis');
      assert.throws(() => fs.readFileSync(`${mnt('b')}/kv/m/redis/before`), /EIO|ENOENT/, 'an open without Redis of a name B never saw');
      // A wrote it and holds its content: A's opens use the version it last saw.
      assert.ok(fs.readFileSync(`${mnt('a')}/kv/m/redis/before`).equals(data), 'an open on A of a name A wrote, from its own copy');
      assert.ok(Date.now() - started < 15_000, `failed within the command timeout (${Date.now() - started} ms)`);
      const buf = Buffer.alloc(data.length);
      assert.equal(fs.readSync(held, buf, 0, buf.length, 0), data.length);
      assert.ok(buf.equals(data), 'a handle opened before keeps reading its version');
      await redis.restart();
      // ioredis reconnects by itself (its retry backs off to 2 s).
      const deadline = Date.now() + 20_000;
      for (;;) {
        try {
          fs.writeFileSync(`${mnt('a')}/kv/m/redis/after`, 'back');
          break;
        } catch (e) {
          if (Date.now() > deadline) throw e;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
      assert.equal(sha256(fs.readFileSync(`${mnt('b')}/kv/m/redis/before`)), sha256(data), 'data committed before the restart is intact');
      assert.equal(fs.readFileSync(`${mnt('c')}/kv/m/redis/after`, 'utf8'), 'back');
      assert.equal(fs.existsSync(`${mnt('b')}/kv/m/redis/during`), false, 'the failed commit left nothing');
    } finally {
      fs.closeSync(held);
    }
  });

  it('cascade cluster status and stats.json show every node, live, with its figures', async function () {
    await new Promise((r) => setTimeout(r, 5_500)); // one heartbeat: figures are published with it
    const r = spawnSync(process.execPath, [CLI, 'cluster', 'status', '--cluster', url, '--json'], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 0, r.stderr);
    const status = JSON.parse(r.stdout) as { nodes: Array<{ node: string; live: boolean; stats: { hits: Record<string, number>; tiers: unknown[] } }> };
    assert.deepEqual(status.nodes.map((n) => [n.node, n.live]), [['a', true], ['b', true], ['c', true]]);
    assert.ok(status.nodes.every((n) => n.stats && n.stats.tiers.length === 2), 'each node published its tiers');
    assert.ok(status.nodes.some((n) => n.stats.hits.shared > 0), 'some node read a block from another node\'s segments');
    const text = spawnSync(process.execPath, [CLI, 'cluster', 'status', '--cluster', url], { encoding: 'utf8', timeout: 30_000 });
    assert.match(text.stdout, /node a: live/);
    const stats = JSON.parse(fs.readFileSync(`${mnt('b')}/.cascade/stats.json`, 'utf8')) as { cluster: { node: string; nodes: unknown[] } };
    assert.equal(stats.cluster.node, 'b');
    assert.equal(stats.cluster.nodes.length, 3);
  });

  it('a second daemon under a node name that is running is refused, naming the holder', function () {
    const m = path.join(root, 'mnt-dup');
    fs.mkdirSync(m, { recursive: true });
    const r = spawnSync(process.execPath, [CLI, 'mount', m, '--dram', '64M', '--cluster', url, '--node', 'a', '--shared', path.join(root, 'shared')], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /node name a is in use/);
    assert.equal(isMounted(m), false);
  });

  it('a daemon whose node name was taken over (its lease lapsed) refuses writes with EIO', async function () {
    // What another host starting under the same name would do once this one missed its heartbeats.
    const ns = url.slice(url.lastIndexOf('/') + 1);
    const out = spawnSync('redis-cli', ['-p', String(redis.ports[0]), 'SET', `cascade:{${ns}}:node:c`, 'elsewhere:1:ab'], { encoding: 'utf8' });
    assert.match(out.stdout, /OK/);
    fs.mkdirSync(`${mnt('c')}/kv/m/lapsed`, { recursive: true });
    const deadline = Date.now() + 12_000;
    for (;;) {
      try {
        fs.writeFileSync(`${mnt('c')}/kv/m/lapsed/f${Date.now()}`, 'x');
      } catch (e) {
        assert.match(String(e), /EIO/);
        break;
      }
      assert.ok(Date.now() < deadline, 'node c still writes after losing its name');
      await new Promise((r) => setTimeout(r, 250));
    }
    // The daemon warns before it refuses, but this process reads the daemon's stderr pipe only
    // between awaits: the warning may still be in the pipe when the refused write returns.
    const warned = Date.now() + 5_000;
    while (!/another daemon took this node name/.test(nodes.c.stderr) && Date.now() < warned) await new Promise((r) => setTimeout(r, 50));
    assert.match(nodes.c.stderr, /another daemon took this node name/);
    assert.equal(fs.readFileSync(`${mnt('c')}/kv/m/fromb/blk`).length, 3 * 1024 * 1024, 'it still reads');
  });
});

describe('cluster on a 3-master Redis Cluster: two daemons', function () {
  this.timeout(120_000);
  let root: string;
  let redis: RedisServers | undefined;
  const daemons: Daemon[] = [];

  before(async function () {
    if (!canMount(['fusermount', 'sha256sum']) || !haveRedis()) this.skip();
    root = tmpDir('rcluster');
    redis = await RedisServers.start(true);
    const url = `redis://${redis.ports.map((p) => `127.0.0.1:${p}`).join(',')}/rc${process.pid}`;
    for (const n of ['a', 'b']) {
      const m = path.join(root, `mnt-${n}`);
      fs.mkdirSync(m);
      const d = new Daemon(m, path.join(root, `data-${n}`), ['--cluster', url, '--node', n, '--shared', path.join(root, 'shared')]);
      daemons.push(d);
      await d.start();
    }
  });

  after(async function () {
    for (const d of daemons) await d.stop();
    for (const d of daemons) assert.equal(isMounted(d.mnt), false);
    await redis?.stop();
    if (root) rmDir(root);
  });

  it('a file written on A reads byte-exact on B; a rewrite on B reads on A', function () {
    const [a, b] = daemons.map((d) => d.mnt);
    const data = seededBytes(21, 3 * 1024 * 1024 + 1);
    fs.mkdirSync(`${a}/kv/m/d`, { recursive: true });
    fs.writeFileSync(`${a}/kv/m/d/f`, data);
    assert.equal(sh(`sha256sum ${b}/kv/m/d/f`).stdout.split(' ')[0], sha256(data));
    fs.writeFileSync(`${b}/kv/m/d/f`, 'rewritten on b');
    assert.equal(fs.readFileSync(`${a}/kv/m/d/f`, 'utf8'), 'rewritten on b');
    assert.deepEqual(fs.readdirSync(`${a}/.cascade/versions/kv/m/d/f`), ['1', '2']);
  });
});

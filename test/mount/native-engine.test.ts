/**
 * The native FUSE engine. First without a kernel: the protocol codec, the node table and
 * the passthrough backing cache. Then real mounts (root): reads served in C++ from the arena,
 * passthrough, and engine selection. The whole mount suite also runs on both engines (npm test).
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { FileAttr } from '../../fs/types';
import * as P from '../../mount/engine/fuse-proto';
import { fuseRequestPages, NodeTable } from '../../mount/engine/native';
import { BackingCache, type BackingSession } from '../../mount/engine/passthrough';
import { nativeBinding } from '../../native';
import { isCascadeError } from '../../store/errors';
import { canMount, CLI, Daemon } from './daemon';

const MiB = 1024 * 1024;

const attr: FileAttr = { mode: 0o100644, sizeBytes: 5000, nlink: 1, uid: 7, gid: 8, mtimeMs: 1_700_000_000_123, ctimeMs: 1_700_000_000_456, atimeMs: 1_700_000_000_789, ino: 4242 };

function request(opcode: number, body: Buffer, nodeid = 1, unique = 10): Buffer {
  const h = Buffer.alloc(P.IN_HEADER_BYTES);
  h.writeUInt32LE(P.IN_HEADER_BYTES + body.length, 0);
  h.writeUInt32LE(opcode, 4);
  h.writeBigUInt64LE(BigInt(unique), 8);
  h.writeBigUInt64LE(BigInt(nodeid), 16);
  h.writeUInt32LE(1000, 24);
  h.writeUInt32LE(1001, 28);
  h.writeUInt32LE(4321, 32);
  return Buffer.concat([h, body]);
}

describe('native engine: FUSE protocol codec (mount/fuse-proto)', () => {
  it('reads the request header and bounds-checks every field', () => {
    const msg = request(P.Op.LOOKUP, Buffer.from('name\0'), 77, 12345);
    const h = P.readHeader(msg);
    assert.deepEqual(h, { len: msg.length, opcode: P.Op.LOOKUP, unique: 12345, nodeid: 77, uid: 1000, gid: 1001, pid: 4321 });
    const r = new P.Reader(msg);
    assert.equal(r.name(), 'name');
    assert.throws(() => r.u32(), P.ProtoError);
    assert.throws(() => P.readHeader(Buffer.alloc(10)), P.ProtoError);
    assert.throws(() => new P.Reader(request(P.Op.LOOKUP, Buffer.from('no-nul'))).name(), P.ProtoError);
  });

  it('writes entry and attr replies in the kernel layout', () => {
    const e = P.entryOut(99, attr, { entryMs: 1500, attrMs: 250 });
    assert.equal(e.length, P.ENTRY_OUT_BYTES);
    assert.equal(e.readBigUInt64LE(0), 99n); // nodeid
    assert.equal(e.readBigUInt64LE(16), 1n); // entry_valid seconds
    assert.equal(e.readUInt32LE(32), 500_000_000); // entry_valid_nsec
    assert.equal(e.readUInt32LE(36), 250_000_000); // attr_valid_nsec
    const a = 40; // fuse_attr
    assert.equal(e.readBigUInt64LE(a), 4242n);
    assert.equal(e.readBigUInt64LE(a + 8), 5000n);
    assert.equal(e.readBigUInt64LE(a + 16), 10n); // 512-byte blocks
    assert.equal(e.readBigUInt64LE(a + 32), 1_700_000_000n); // mtime
    assert.equal(e.readUInt32LE(a + 52), 123_000_000); // mtimensec
    assert.equal(e.readUInt32LE(a + 60), 0o100644);
    assert.equal(e.readUInt32LE(a + 68), 7);
    assert.equal(e.readUInt32LE(a + 72), 8);
    const o = P.attrOut(attr, { entryMs: 0, attrMs: 1000 });
    assert.equal(o.length, P.ATTR_OUT_BYTES);
    assert.equal(o.readBigUInt64LE(0), 1n);
    assert.equal(o.readBigUInt64LE(16), 4242n);
    const open = P.openOut(5, P.FOPEN.PASSTHROUGH, 3);
    assert.deepEqual([open.readBigUInt64LE(0), open.readUInt32LE(8), open.readInt32LE(12)], [5n, 1 << 7, 3]);
  });

  it('packs directory entries 8-byte aligned, resumes at an offset, and stops at the size', () => {
    const names = [
      { name: '.', kind: 'dir' as const },
      { name: '..', kind: 'dir' as const },
      { name: 'a', kind: 'file' as const },
      { name: 'longer-name', kind: 'dir' as const },
    ];
    const all = P.packDirents(names, 0, 4096);
    assert.deepEqual([0, 32, 64, 96].map((at) => all.readUInt32LE(at + 20)), [P.DT.DIR, P.DT.DIR, P.DT.REG, P.DT.DIR], 'd_type of each entry');
    assert.equal(all.length, 32 + 32 + 32 + 40);
    assert.equal(all.readBigUInt64LE(8), 1n); // off of the next entry
    assert.equal(all.readUInt32LE(96 + 16), 'longer-name'.length);
    assert.equal(all.toString('utf8', 96 + 24, 96 + 24 + 11), 'longer-name');
    const rest = P.packDirents(names, 2, 4096);
    assert.equal(rest.readBigUInt64LE(8), 3n);
    assert.equal(P.packDirents(names, 0, 70).length, 64, 'only whole entries that fit');
    assert.equal(P.packDirents(names, 4, 4096).length, 0);
    assert.equal(all.readBigUInt64LE(0), 0xffffffffn, 'ino: unknown (the kernel asks with LOOKUP)');
    const utf8 = P.packDirents([{ name: 'ü-€', kind: 'file' }], 0, 4096);
    assert.equal(utf8.readUInt32LE(16), Buffer.byteLength('ü-€'), 'namelen in bytes, not characters');
    assert.equal(utf8.toString('utf8', 24, 24 + Buffer.byteLength('ü-€')), 'ü-€');
    assert.equal(utf8.length, 32);
    assert.ok(utf8.subarray(24 + Buffer.byteLength('ü-€')).equals(Buffer.alloc(32 - 24 - Buffer.byteLength('ü-€'))), 'zero padding');
  });
});

describe('native engine: node table', () => {
  it('gives one id per path, counts lookups, and forgets', () => {
    const t = new NodeTable();
    const a = t.remember('/kv');
    assert.equal(t.remember('/kv'), a);
    assert.equal(t.pathOf(a), '/kv');
    t.forget(a, 1);
    assert.equal(t.pathOf(a), '/kv', 'still one lookup left');
    t.forget(a, 1);
    assert.throws(() => t.pathOf(a), (e: unknown) => isCascadeError(e, 'ESTALE'));
    assert.notEqual(t.remember('/kv'), a, 'a forgotten id is never reused');
    t.forget(1, 100);
    assert.equal(t.pathOf(1), '/', 'the root is never forgotten');
  });

  it('a rename moves a subtree; the node it replaced keeps its path (no ENOENT for a racing open)', () => {
    const t = new NodeTable();
    const dir = t.remember('/kv/m');
    const file = t.remember('/kv/m/f');
    const old = t.remember('/kv/n/f');
    const tmp = t.remember('/kv/n/f.tmp');
    t.renamed('/kv/n/f.tmp', '/kv/n/f');
    assert.equal(t.pathOf(tmp), '/kv/n/f');
    assert.equal(t.pathOf(old), '/kv/n/f', 'the replaced node still resolves to the name');
    assert.equal(t.remember('/kv/n/f'), tmp, 'new lookups find the renamed node');
    t.forget(old, 1);
    assert.equal(t.idOf('/kv/n/f'), tmp, 'forgetting the replaced node leaves the name alone');
    t.renamed('/kv/m', '/kv/m2');
    assert.equal(t.pathOf(dir), '/kv/m2');
    assert.equal(t.pathOf(file), '/kv/m2/f');
    assert.equal(t.idOf('/kv/m/f'), undefined);
    t.removed('/kv/m2/f');
    assert.equal(t.idOf('/kv/m2/f'), undefined);
    assert.equal(t.pathOf(file), '/kv/m2/f');
  });

  it('refuses past its node limit with ENFILE', () => {
    const t = new NodeTable(3);
    t.remember('/a');
    t.remember('/b');
    assert.throws(() => t.remember('/c'), (e: unknown) => isCascadeError(e, 'ENFILE'));
  });
});

describe('native engine: passthrough backing cache', () => {
  function fakeSession() {
    const open = new Set<number>();
    let next = 1;
    let fills = 0;
    const s: BackingSession & { open: Set<number>; fills: () => number } = {
      open,
      fills: () => fills,
      openBacking: () => {
        const id = next++;
        open.add(id);
        return id;
      },
      closeBacking: (id) => void open.delete(id),
      writeArenaTo: async (fd, sizeBytes) => {
        fills++;
        fs.writeSync(fd, Buffer.alloc(sizeBytes, 1), 0, sizeBytes, 0);
      },
    };
    return s;
  }

  it('fills once per content, stays within its bound, and never evicts what is in use', async () => {
    const s = fakeSession();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-pt-'));
    try {
      const c = new BackingCache(s, 3 * MiB, dir);
      const [a1, a2] = await Promise.all([c.acquire('a', MiB, []), c.acquire('a', MiB, [])]);
      assert.equal(s.fills(), 1, 'concurrent acquires of one content fill it once');
      assert.equal(a1!.backingId, a2!.backingId);
      const b = await c.acquire('b', 2 * MiB, []);
      assert.equal(c.bytes, 3 * MiB);
      assert.equal(await c.acquire('c', MiB, []), undefined, 'no room: everything is in use');
      a1!.release();
      a2!.release();
      const cc = await c.acquire('c', MiB, []);
      assert.ok(cc, 'the unused entry was evicted to make room');
      assert.equal(c.bytes, 3 * MiB);
      assert.equal(s.open.size, 2, 'the evicted backing id was closed');
      assert.equal(await c.acquire('huge', 4 * MiB, []), undefined, 'larger than the bound');
      assert.deepEqual(fs.readdirSync(dir), [], 'backing files are unlinked at once');
      b!.release();
      cc!.release();
      c.close();
      assert.equal(s.open.size, 0);
      assert.equal(c.bytes, 0);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

// ---- real mounts ----

/** stats.json, fresh: the daemon keeps one snapshot for 100 ms (fs/virtual.ts STATS_SNAPSHOT_MS). */
function stats(mnt: string): { engine: Record<string, unknown>; tiers: Array<Record<string, number> & { name: string }> } {
  spawnSync('sleep', ['0.15']);
  return JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8')) as {
    engine: Record<string, unknown>;
    tiers: Array<Record<string, number> & { name: string }>;
  };
}

function dramTier(mnt: string): Record<string, number> {
  return stats(mnt).tiers.find((t) => t.name === 'dram')!;
}

/** An xattr value, read with getfattr (not through our code). */
function getXattr(file: string, name: string): string {
  const r = spawnSync('getfattr', ['--only-values', '-n', name, file], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Drop a file's pages from the page cache (the addon's posix_fadvise DONTNEED). */
function dropCache(file: string): void {
  const fd = fs.openSync(file, 'r');
  try {
    nativeBinding()!.fadvise(fd, 0, 0, 'dontneed');
  } finally {
    fs.closeSync(fd);
  }
}

describe('native engine: real mounts', function () {
  this.timeout(120_000);
  let root: string;
  let daemon: Daemon | undefined;

  before(function () {
    if (!canMount() || nativeBinding() === undefined) return this.skip();
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-native-engine-'));
  });

  afterEach(async () => {
    await daemon?.stop();
    daemon = undefined;
  });

  after(() => {
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  async function start(name: string, extra: string[]): Promise<string> {
    const mnt = path.join(root, name, 'mnt');
    daemon = new Daemon(mnt, path.join(root, name, 'data'), extra);
    await daemon.start();
    fs.mkdirSync(path.join(mnt, 'kv', 'm'), { recursive: true });
    return mnt;
  }

  it('--engine native: requests as large as the kernel allows (up to 4 MiB), and reads of DRAM blocks answered in C++ from the arena', async () => {
    // Direct I/O (the page cache would read ahead in its own pieces; test/mount/page-cache.test.ts).
    const mnt = await start('served', ['--engine', 'native', '--no-page-cache']);
    const req = fuseRequestPages(); // the kernel's fs.fuse.max_pages_limit caps what we ask for
    const reqBytes = req.pages * 4096;
    assert.match(daemon!.stderr, new RegExp(`engine native: FUSE 7\\.\\d+, ${reqBytes / 1024} KiB requests.*, reads of DRAM blocks served from the arena`));
    const data = randomBytes(5 * MiB + 123);
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'a'), data);
    const before = stats(mnt).engine;
    assert.equal(before.name, 'native');
    assert.equal(before.maxPages, req.pages);
    const dd = spawnSync('dd', [`if=${path.join(mnt, 'kv', 'm', 'a')}`, 'bs=16M', 'status=none'], { maxBuffer: 64 * MiB });
    assert.equal(dd.status, 0, String(dd.stderr));
    assert.equal(sha(dd.stdout), sha(data));
    const after = stats(mnt).engine;
    const served = (after.servedReads as number) - (before.servedReads as number);
    const bytes = (after.servedReadBytes as number) - (before.servedReadBytes as number);
    const expected = Math.ceil(data.length / reqBytes);
    assert.ok(served >= expected && served <= expected + 2, `${expected} reads of up to ${reqBytes} bytes answered natively, saw ${served}`);
    assert.equal(bytes, data.length);
    assert.equal(after.servedFlushes, before.servedFlushes, 'a read-only open asks for no FLUSH at close (FOPEN_NOFLUSH)');
    // A small file, read once it is published (native-meta.test.ts has the rest).
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'small'), data.subarray(0, 4096));
    assert.ok(fs.readFileSync(path.join(mnt, 'kv', 'm', 'small')).equals(data.subarray(0, 4096)));
    // A file being written is read through JS (its bytes are staged, not in the arena).
    const fd = fs.openSync(path.join(mnt, 'kv', 'm', 'w'), 'w+');
    fs.writeSync(fd, Buffer.from('staged'));
    const back = Buffer.alloc(6);
    assert.equal(fs.readSync(fd, back, 0, 6, 0), 6);
    assert.equal(back.toString(), 'staged');
    fs.closeSync(fd);
  });

  it('a block loading from disk is read while it loads: each read served in C++ once its pieces pass their CRC-32C; a damaged piece gives EIO, never its bytes', async () => {
    const mnt = await start('streamed', ['--engine', 'native', '--dram', '256M']);
    const f = path.join(mnt, 'kv', 'm', 'cold');
    const data = randomBytes(24 * MiB + 4321);
    fs.writeFileSync(f, data);
    const evict = () => {
      const r = spawnSync(process.execPath, [CLI, 'evict', f], { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    };
    evict();
    const before = stats(mnt).engine;
    const dd = spawnSync('dd', [`if=${f}`, 'bs=1M', 'status=none'], { maxBuffer: 64 * MiB });
    assert.equal(dd.status, 0, String(dd.stderr));
    assert.equal(sha(dd.stdout), sha(data), 'byte-exact');
    const after = stats(mnt).engine;
    assert.ok((after.gatedReads as number) > (before.gatedReads as number), 'reads were served while the block loaded');
    assert.equal(after.gatedToJs, before.gatedToJs, 'none went to JS');

    // One byte of its 21st MiB flipped on disk: the load fails at that piece. Whatever a reader got
    // before is the file's own bytes; then EIO.
    evict();
    const segDir = path.join(root, 'streamed', 'data', 'segments');
    const seg = path.join(segDir, fs.readdirSync(segDir).find((n) => n.endsWith('.log'))!);
    const bytes = fs.readFileSync(seg);
    const header = bytes.indexOf(Buffer.from(sha(data), 'hex')) - 16;
    assert.ok(header >= 0 && header % 4096 === 0, 'the record header');
    const at = header + 4096 + 20 * MiB + 7;
    const fd = fs.openSync(seg, 'r+');
    fs.writeSync(fd, Buffer.from([bytes[at] ^ 0x10]), 0, 1, at);
    fs.closeSync(fd);
    const py = spawnSync('python3', ['-c', `
import errno, hashlib, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
got = bytearray()
try:
    while True:
        b = os.read(fd, 1 << 20)
        if not b: break
        got += b
    print('no error', len(got))
except OSError as e:
    print('errno', e.errno, len(got), hashlib.sha256(got).hexdigest())
`, f], { encoding: 'utf8' });
    const [word, code, n, digest] = py.stdout.trim().split(' ');
    assert.equal(word, 'errno', py.stdout + py.stderr);
    assert.equal(Number(code), 5, 'EIO');
    assert.ok(Number(n) <= 20 * MiB, `${n} bytes before the error: none of the damaged piece (256 KiB pieces: it starts at 20 MiB)`);
    assert.equal(digest, sha(data.subarray(0, Number(n))), 'the bytes read before the error are the file\'s');
  });

  it('a read waiting for a loading block does not hold up other requests (small reads hand /dev/fuse to another worker)', async () => {
    const mnt = await start('gate-stall', ['--engine', 'native', '--dram', '768M']);
    const cold = path.join(mnt, 'kv', 'm', 'cold');
    const warm = path.join(mnt, 'kv', 'm', 'warm');
    fs.writeFileSync(cold, randomBytes(256 * MiB));
    fs.writeFileSync(warm, randomBytes(64 * 1024));
    const r = spawnSync(process.execPath, [CLI, 'evict', cold], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const segDir = path.join(root, 'gate-stall', 'data', 'segments');
    for (const n of fs.readdirSync(segDir)) dropCache(path.join(segDir, n));
    // A 4 KiB read at the end of the cold file (it waits for the whole load) while another thread
    // reads the warm file over and over: the warm reads must not wait for the load.
    const py = spawnSync('python3', ['-c', `
import os, sys, threading, time
cold, warm = sys.argv[1], sys.argv[2]
done = threading.Event(); worst = [0.0]; cold_s = [0.0]
def reader():
    fd = os.open(cold, os.O_RDONLY)
    t = time.perf_counter(); os.pread(fd, 4096, os.fstat(fd).st_size - 4096); cold_s[0] = time.perf_counter() - t
    os.close(fd); done.set()
fw = os.open(warm, os.O_RDONLY)
th = threading.Thread(target=reader); th.start()
while not done.is_set():
    t = time.perf_counter(); os.pread(fw, 4096, 0); worst[0] = max(worst[0], time.perf_counter() - t)
th.join()
print('%.1f %.1f' % (cold_s[0] * 1000, worst[0] * 1000))
`, cold, warm], { encoding: 'utf8' });
    assert.equal(py.status, 0, py.stderr);
    const [coldMs, worstMs] = py.stdout.trim().split(' ').map(Number);
    assert.ok(coldMs > 50, `the cold read took ${coldMs} ms: too fast to tell (a 256 MiB load should take longer)`);
    assert.ok(worstMs < coldMs / 3, `a warm read waited ${worstMs} ms while the cold read took ${coldMs} ms`);
  });

  it('ioctl on a file is ENOTTY, answered in C++ (isatty from every Python open is no trip into JS)', async () => {
    const mnt = await start('ioctl', ['--engine', 'native']);
    const f = path.join(mnt, 'kv', 'm', 'x');
    fs.writeFileSync(f, 'x');
    const before = stats(mnt).engine;
    const py = spawnSync('python3', ['-c', `
import errno, fcntl, os, sys, termios
fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(20):
    try:
        fcntl.ioctl(fd, termios.TCGETS, bytes(64)); print('no error'); sys.exit(1)
    except OSError as e:
        if e.errno != errno.ENOTTY: print(e); sys.exit(1)
print(os.isatty(fd))
`, f], { encoding: 'utf8' });
    assert.equal(py.status, 0, py.stdout + py.stderr);
    assert.equal(py.stdout.trim(), 'False');
    const after = stats(mnt).engine;
    assert.ok((after.forwarded as number) - (before.forwarded as number) < 10, `21 ioctls, ${(after.forwarded as number) - (before.forwarded as number)} requests reached JS`);
  });

  it('native writes: WRITEs land in the arena and are hashed in C++ (none reach JS); the committed block is the staged one', async () => {
    const mnt = await start('writes', ['--engine', 'native', '--dram', '256M']);
    const f = path.join(mnt, 'kv', 'm', 'w');
    const data = randomBytes(9 * MiB + 4321);
    const before = stats(mnt).engine;
    fs.writeFileSync(f, data);
    const after = stats(mnt).engine;
    const reqBytes = fuseRequestPages().pages * 4096;
    const writes = Math.ceil(data.length / reqBytes);
    assert.equal((after.servedWrites as number) - (before.servedWrites as number), writes, `${writes} WRITEs of up to ${reqBytes} bytes taken in C++`);
    assert.equal((after.servedWriteBytes as number) - (before.servedWriteBytes as number), data.length);
    assert.ok((after.forwarded as number) - (before.forwarded as number) < 12, 'only lookup/create/flush/release and the stats reads reached JS');
    assert.equal(after.stagedFiles, 0, 'the stage is gone after the release');
    assert.ok(fs.readFileSync(f).equals(data));
    assert.equal(getXattr(f, 'user.cascade.sha256'), sha(data));
    const dram = dramTier(mnt);
    // The staged pages became the block: padding only up to one 64 KiB page, nothing twice.
    assert.ok(dram.slotBytes - dram.blockBytes < 64 * 1024, `slots ${dram.slotBytes} for blocks ${dram.blockBytes}`);
    // A small file settles into a slab slot.
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'tiny'), 'tiny');
    const d2 = dramTier(mnt);
    assert.equal(d2.slotBytes - dram.slotBytes, 4096);
    // Identical content under another name is stored once (the second stage is freed).
    fs.writeFileSync(`${f}.copy`, data);
    assert.equal(dramTier(mnt).blockBytes, d2.blockBytes);
    assert.ok(fs.readFileSync(`${f}.copy`).equals(data));
  });

  it('native writes: holes, rewrites, fsync then more writes, ftruncate, read-back, a file larger than DRAM, unmount with a writer open', async () => {
    const mnt = await start('writes2', ['--engine', 'native', '--dram', '16M']);
    const dir = path.join(mnt, 'kv', 'm');
    // Out of order with a hole: zeros in the hole, hashed whole at commit.
    const fd = fs.openSync(path.join(dir, 'holes'), 'w');
    fs.writeSync(fd, Buffer.from('tail'), 0, 4, 3 * MiB);
    fs.writeSync(fd, Buffer.from('head'), 0, 4, 10);
    fs.writeSync(fd, Buffer.from('HE'), 0, 2, 10); // a rewrite
    fs.closeSync(fd);
    const want = Buffer.alloc(3 * MiB + 4);
    want.write('HEad', 10);
    want.write('tail', 3 * MiB);
    const got = fs.readFileSync(path.join(dir, 'holes'));
    assert.ok(got.equals(want));
    assert.equal(getXattr(path.join(dir, 'holes'), 'user.cascade.sha256'), sha(want));
    // fsync commits; writes after it continue the same content (moved to JS from the version).
    const a = randomBytes(2 * MiB);
    const b = randomBytes(MiB);
    const g = fs.openSync(path.join(dir, 'synced'), 'w+');
    fs.writeSync(g, a);
    fs.fsyncSync(g);
    assert.ok(fs.readFileSync(path.join(dir, 'synced')).equals(a), 'fsync committed the first part');
    fs.writeSync(g, b, 0, b.length, a.length);
    const back = Buffer.alloc(a.length + b.length);
    assert.equal(fs.readSync(g, back, 0, back.length, 0), back.length, 'read-back through the write handle');
    assert.ok(back.equals(Buffer.concat([a, b])));
    fs.ftruncateSync(g, MiB);
    fs.closeSync(g);
    assert.ok(fs.readFileSync(path.join(dir, 'synced')).equals(a.subarray(0, MiB)));
    // Larger than the 16 MiB arena: the stage runs out of pages and JS stages the rest.
    const big = randomBytes(40 * MiB);
    fs.writeFileSync(path.join(dir, 'big'), big);
    assert.equal(sha(fs.readFileSync(path.join(dir, 'big'))), sha(big));
    // A writer still open at unmount: its staged bytes are committed by the clean stop.
    const h = fs.openSync(path.join(dir, 'open'), 'w');
    const last = randomBytes(3 * MiB);
    fs.writeSync(h, last);
    assert.equal(fs.fstatSync(h).size, last.length, 'fstat sees the staged size');
    const data = path.join(root, 'writes2', 'data');
    await daemon!.stop();
    assert.throws(() => fs.closeSync(h), /ENOTCONN/); // the connection is gone; the bytes are not
    daemon = new Daemon(mnt, data, ['--engine', 'native', '--dram', '16M']);
    await daemon.start();
    assert.ok(fs.readFileSync(path.join(dir, 'open')).equals(last), 'staged bytes survived the clean unmount');
    assert.equal(sha(fs.readFileSync(path.join(dir, 'big'))), sha(big));
  });

  it('--passthrough: the kernel reads committed files without the daemon; in-place writes of an open file get EBUSY, rename-replace works', async () => {
    const mnt = await start('pt', ['--engine', 'native', '--passthrough']);
    assert.match(daemon!.stderr, /passthrough/);
    const f = path.join(mnt, 'kv', 'm', 'p');
    const v1 = randomBytes(3 * MiB);
    fs.writeFileSync(f, v1);
    const before = stats(mnt).engine;
    assert.equal(before.passthrough, true);
    const fd = fs.openSync(f, 'r');
    const got = Buffer.alloc(v1.length);
    assert.equal(fs.readSync(fd, got, 0, got.length, 0), v1.length);
    assert.ok(got.equals(v1));
    const mid = stats(mnt).engine;
    assert.equal(mid.servedReads, before.servedReads, 'no read reached the daemon');
    assert.ok((mid.forwarded as number) - (before.forwarded as number) < 10, 'only the open and the stats reads were forwarded');
    assert.equal(mid.passthroughFiles, 1);
    assert.throws(() => fs.writeFileSync(f, 'overwrite'), (e: NodeJS.ErrnoException) => e.code === 'EBUSY');
    assert.ok(fs.readFileSync(f).equals(v1), 'the refused write left the file intact');
    const v2 = randomBytes(2 * MiB);
    fs.writeFileSync(`${f}.tmp`, v2);
    fs.renameSync(`${f}.tmp`, f);
    assert.ok(fs.readFileSync(f).equals(v2), 'new opens read the renamed file');
    assert.equal(fs.readSync(fd, got, 0, got.length, 0), v1.length);
    assert.ok(got.equals(v1), 'the open descriptor keeps its version');
    fs.closeSync(fd);
    fs.writeFileSync(f, 'now it may be overwritten');
    assert.equal(fs.readFileSync(f, 'utf8'), 'now it may be overwritten');
  });

  it('--engine fuse-native is honoured and said; a bad --engine is refused', async () => {
    const mnt = await start('fn', ['--engine', 'fuse-native']);
    assert.match(daemon!.stderr, /engine fuse-native: libfuse 2, 128 KiB requests/);
    fs.writeFileSync(path.join(mnt, 'kv', 'm', 'x'), 'x');
    assert.equal(stats(mnt).engine.name, 'fuse-native');
    await daemon!.stop();
    daemon = undefined;
    const r = spawnSync(process.execPath, [CLI, 'mount', path.join(root, 'bad'), '--engine', 'kernel'], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /engine.*(auto|Choices)/i);
  });
});

describe('native engine: FUSE request size', () => {
  it('asks for 1,024 pages (4 MiB), capped by fs.fuse.max_pages_limit; 256 where the kernel has no such limit', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-maxpages-'));
    try {
      const f = path.join(dir, 'max_pages_limit');
      fs.writeFileSync(f, '256\n');
      assert.deepEqual(fuseRequestPages(f), { pages: 256, limitPages: 256 });
      fs.writeFileSync(f, '65535\n');
      assert.deepEqual(fuseRequestPages(f), { pages: 1024, limitPages: 65535 });
      fs.writeFileSync(f, 'junk');
      assert.deepEqual(fuseRequestPages(f), { pages: 256, limitPages: 256 });
      assert.deepEqual(fuseRequestPages(path.join(dir, 'absent')), { pages: 256, limitPages: 256 });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

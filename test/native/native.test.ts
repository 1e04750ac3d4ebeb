/**
 * The native addon through its JavaScript boundary: argument validation (no crash on bad input),
 * stale handles, a full arena, frees racing async copies, hashing against node:crypto, file I/O,
 * read-only mappings; the Tier conformance suite on the native DRAM tier; and the plain C++ tests
 * under AddressSanitizer (native/test/run.sh).
 */
import * as assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { KiB, MiB } from '../../store/constants';
import { StreamHasher, sha256Hex } from '../../store/hash';
import { NativeArenaTier } from '../../store/tiers/native-dram';
import { nativeBinding, nativeLoad, type NativeArenaBinding, type NativeBinding } from '../../native';
import { randomBlock, tierConformance } from '../store/tier-conformance';

const ROOT = path.join(__dirname, '..', '..', '..');

function binding(): NativeBinding {
  const b = nativeBinding();
  assert.ok(b, `the native addon must load in tests: ${JSON.stringify(nativeLoad())}`);
  return b;
}

function shmFd(): number {
  const file = path.join('/dev/shm', `cascade-test-${process.pid}-${randomBytes(4).toString('hex')}`);
  const fd = fs.openSync(file, 'wx+', 0o600);
  fs.unlinkSync(file);
  return fd;
}

function openArena(capacityBytes: number, pageBytes = 4 * KiB): NativeArenaBinding {
  const fd = shmFd();
  try {
    return new (binding().Arena)(fd, capacityBytes, pageBytes, true);
  } finally {
    fs.closeSync(fd);
  }
}

function throwsCode(f: () => unknown, code: string): void {
  assert.throws(f, (e: unknown) => (e as { code?: string }).code === code);
}

tierConformance('NativeArenaTier (4 KiB pages, prefault)', (capacityBytes) =>
  NativeArenaTier.open({ capacityBytes, pageBytes: 4 * KiB, prefault: true }),
);
tierConformance('NativeArenaTier (default 64 KiB pages, huge pages auto)', (capacityBytes) =>
  NativeArenaTier.open({ capacityBytes, prefault: false, hugePages: 'auto' }),
);

describe('native binding', function () {
  it('loads, with the declared members and features', function () {
    const b = binding();
    assert.equal(typeof b.features.openssl, 'string');
    assert.equal(b.features.gpu, true); // the GPU loader is always built (libcuda.so.1 is opened at run time)
    // libfabric when pkg-config finds it (scripts/setup.sh installs libfabric-dev); then the Fabric class too.
    const haveLibfabric = spawnSync('pkg-config', ['--exists', 'libfabric']).status === 0;
    assert.equal(b.features.libfabric, haveLibfabric);
    assert.equal(typeof b.Fabric, haveLibfabric ? 'function' : 'undefined');
  });

  it('rejects bad arguments with EINVAL and keeps running', function () {
    const b = binding();
    const a = openArena(MiB);
    try {
      for (const bad of [-1, 1.5, NaN, Infinity, 2 ** 60, '1', undefined, {}]) {
        throwsCode(() => a.allocate(bad as number), 'EINVAL');
        throwsCode(() => a.read(bad as number, 0, Buffer.alloc(1)), 'EINVAL');
      }
      const h = a.allocate(100);
      throwsCode(() => a.write(h, 0, 'text' as unknown as Buffer), 'EINVAL');
      throwsCode(() => a.write(h, 0, new Uint16Array(4) as unknown as Buffer), 'EINVAL');
      throwsCode(() => a.write(h, 90, Buffer.alloc(11)), 'ERANGE');
      throwsCode(() => new b.Arena(-1, MiB, 4096, true), 'EINVAL');
      throwsCode(() => new b.Arena(0, MiB, 1000, true), 'EINVAL');
      throwsCode(() => b.sha256Sync(null as unknown as Buffer), 'EINVAL');
      throwsCode(() => b.fadvise(0, 0, 0, 'sometimes' as 'normal'), 'EINVAL');
      throwsCode(() => b.copyAsync(Buffer.alloc(4), 2, Buffer.alloc(4)), 'ERANGE');
      throwsCode(() => new b.Mapping('/nonexistent/cascade'), 'ESTALE');
      throwsCode(() => b.detachMount('relative/mnt'), 'EINVAL');
      throwsCode(() => b.detachMount(7 as unknown as string), 'EINVAL');
      // Not a mount point: umount2 says EINVAL as root, EPERM for anyone else; nothing is unmounted.
      throwsCode(() => b.detachMount(os.tmpdir()), process.getuid?.() === 0 ? 'EINVAL' : 'EPERM');
    } finally {
      a.close();
    }
  });

  it('rejects stale handles after free and after the slot is reused', function () {
    const a = openArena(MiB);
    try {
      const h = a.allocate(5000);
      a.write(h, 0, Buffer.alloc(5000, 1));
      a.free(h);
      throwsCode(() => a.read(h, 0, Buffer.alloc(10)), 'ESTALE');
      throwsCode(() => a.free(h), 'ESTALE');
      throwsCode(() => a.describe(h), 'ESTALE');
      const h2 = a.allocate(5000);
      assert.notEqual(h2, h);
      throwsCode(() => a.read(h, 0, Buffer.alloc(10)), 'ESTALE');
      assert.equal(a.read(h2, 0, Buffer.alloc(10)), 10);
      assert.ok(a.stats().staleRejects >= 4);
    } finally {
      a.close();
    }
  });

  it('fails cleanly when the arena is full, and reuses freed room', function () {
    const a = openArena(16 * 4 * KiB);
    try {
      assert.equal(a.freeBytes(), 16 * 4 * KiB);
      const hs = Array.from({ length: 16 }, () => a.allocate(4 * KiB));
      throwsCode(() => a.allocate(1), 'ENOSPC');
      assert.equal(a.stats().freeBytes, 0);
      assert.equal(a.freeBytes(), 0);
      for (let i = 0; i < hs.length; i += 2) a.free(hs[i]);
      assert.equal(a.freeBytes(), 8 * 4 * KiB, 'freeBytes() is stats().freeBytes');
      assert.equal(a.freeBytes(), a.stats().freeBytes);
      const big = a.allocate(8 * 4 * KiB); // eight single free pages: not contiguous, still fits
      const data = randomBytes(8 * 4 * KiB);
      a.write(big, 0, data);
      const out = Buffer.alloc(data.length);
      assert.equal(a.read(big, 0, out), data.length);
      assert.ok(out.equals(data));
      assert.equal(a.describe(big).extents.length, 16); // 8 pieces as (offset, length) pairs
    } finally {
      a.close();
    }
  });

  it('keeps a freed block\'s pages until an async read of it ends: the read gets its own bytes', async function () {
    const a = openArena(64 * MiB, 64 * KiB);
    try {
      const size = 24 * MiB;
      const original = randomBytes(size);
      const h = a.allocate(size);
      a.write(h, 0, original);
      const target = Buffer.alloc(size);
      const reading = a.readAsync(h, 0, target);
      a.free(h); // while the worker may still copy
      // Fill the rest of the arena with other bytes: must not land on pages still being read.
      const others: number[] = [];
      for (;;) {
        try {
          const o = a.allocate(4 * MiB);
          a.write(o, 0, Buffer.alloc(4 * MiB, 0xee));
          others.push(o);
        } catch {
          break;
        }
      }
      try {
        assert.equal(await reading, size);
        assert.ok(target.equals(original), 'the async read returned the block\'s own bytes');
      } catch (e) {
        assert.equal((e as { code?: string }).code, 'ESTALE'); // or it started after the free: refused whole
      }
      assert.equal(a.stats().copiesInFlight, 0);
    } finally {
      a.close();
    }
  });

  it('closing with a copy in flight unmaps only after it ends', async function () {
    const a = openArena(32 * MiB, 64 * KiB);
    const h = a.allocate(16 * MiB);
    const data = randomBytes(16 * MiB);
    await a.writeAsync(h, 0, data);
    const target = Buffer.alloc(16 * MiB);
    const reading = a.readAsync(h, 0, target);
    a.close();
    throwsCode(() => a.allocate(1), 'EBADF');
    throwsCode(() => a.freeBytes(), 'EBADF');
    assert.equal(await reading, 16 * MiB);
    assert.ok(target.equals(data));
  });

  it('hashes like node:crypto: one shot, async, and streamed in uneven pieces; one update at a time', async function () {
    const b = binding();
    const data = randomBytes(5 * MiB + 123);
    const want = createHash('sha256').update(data).digest('hex');
    assert.equal(b.sha256Sync(data), want);
    assert.equal(await b.sha256(data), want);
    assert.equal(b.sha256Sync(Buffer.alloc(0)), createHash('sha256').digest('hex'));
    const h = new b.Hasher();
    let at = 0;
    while (at < data.length) {
      const n = Math.min(data.length - at, 1 + Math.floor(Math.random() * 700 * KiB));
      const p = h.update(data.subarray(at, at + n));
      throwsCode(() => h.update(Buffer.alloc(1)), 'EBUSY');
      throwsCode(() => h.digest(), 'EBUSY');
      await p;
      at += n;
    }
    assert.equal(h.digest(), want);
    assert.equal(h.bytesHashed, data.length);
  });

  it('StreamHasher and sha256Hex agree with node:crypto, with and without batching', async function () {
    for (const size of [0, 1, 64 * KiB, 9 * MiB + 7]) {
      const data = randomBytes(size);
      const want = createHash('sha256').update(data).digest('hex');
      assert.equal(await sha256Hex(data), want);
      const s = new StreamHasher();
      for (let at = 0; at < size; at += 128 * KiB) s.append(data.subarray(at, Math.min(size, at + 128 * KiB)));
      assert.equal(await s.digest(), want);
      assert.equal(s.lengthBytes, size);
    }
  });

  it('pread/pwrite/fdatasync/fadvise off the JS thread, and O_DIRECT with aligned buffers', async function () {
    const b = binding();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-native-'));
    try {
      const file = path.join(dir, 'f');
      const fd = b.openFile(file, true, true, false);
      const data = randomBytes(3 * MiB);
      await b.pwrite(fd, data, 4096);
      await b.fdatasync(fd);
      b.fadvise(fd, 0, 0, 'dontneed');
      const out = Buffer.alloc(data.length);
      assert.equal(await b.pread(fd, out, 4096), data.length);
      assert.ok(out.equals(data));
      assert.equal(await b.pread(fd, out, 4096 + data.length - 10), 10); // end of file
      fs.closeSync(fd);
      await assert.rejects(b.pread(fd, out, 0), (e: unknown) => (e as { code?: string }).code === 'EIO');
      // O_DIRECT, where the filesystem supports it (tmpfs does not).
      let dfd: number | undefined;
      try {
        dfd = b.openFile(file, false, false, true);
      } catch (e) {
        assert.equal((e as { code?: string }).code, 'EINVAL');
      }
      if (dfd !== undefined) {
        const aligned = b.alignedBuffer(MiB);
        assert.equal(await b.pread(dfd, aligned, 4096), MiB);
        assert.ok(aligned.equals(data.subarray(0, MiB)));
        fs.closeSync(dfd);
      }
      throwsCode(() => b.openFile(path.join(dir, 'missing'), false, false, false), 'ENOENT');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('maps a file read-only; views outlive close()', function () {
    const b = binding();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-native-'));
    try {
      const file = path.join(dir, 'm');
      const data = randomBytes(256 * KiB);
      fs.writeFileSync(file, data);
      const m = new b.Mapping(file);
      assert.equal(m.lengthBytes, data.length);
      const v = m.view(1000, 5000);
      assert.ok(v.equals(data.subarray(1000, 6000)));
      throwsCode(() => m.view(data.length - 1, 2), 'ERANGE');
      m.close();
      throwsCode(() => m.view(0, 1), 'EBADF');
      assert.ok(v.equals(data.subarray(1000, 6000)), 'a view keeps the mapping alive');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('allocBuffer gives writable zeroed memory of the exact length, and rejects bad lengths', function () {
    const b = binding();
    const big = b.allocBuffer(9 * MiB + 3);
    assert.equal(big.length, 9 * MiB + 3);
    assert.equal(big[0], 0);
    assert.equal(big[big.length - 1], 0);
    big.fill(0xab);
    assert.equal(big[big.length - 1], 0xab);
    assert.equal(b.allocBuffer(0).length, 0);
    throwsCode(() => b.allocBuffer(-1), 'EINVAL');
    throwsCode(() => b.allocBuffer(1.5), 'EINVAL');
  });
});

describe('NativeArenaTier', function () {
  it('exposes extents and the mapping region, and a block read through them equals the block', async function () {
    const tier = await NativeArenaTier.open({ capacityBytes: 8 * MiB, pageBytes: 64 * KiB });
    try {
      const block = randomBlock(3 * MiB + 5);
      await tier.write(block.key, block.data);
      const ext = tier.extentsOf(block.key)!;
      assert.equal(ext.sizeBytes, block.data.length);
      assert.equal(ext.extents.reduce((n, [, len]) => n + len, 0), block.data.length);
      const region = tier.region()!;
      assert.ok(region.lengthBytes >= 8 * MiB - 64 * KiB && typeof region.address === 'bigint');
      const m = new (binding().Mapping)(`/proc/self/fd/${region.fd}`);
      const parts = ext.extents.map(([off, len]) => m.view(off, len));
      assert.ok(Buffer.concat(parts).equals(block.data));
      m.close();
      assert.equal(tier.extentsOf('0'.repeat(64)), undefined);
    } finally {
      await tier.close();
    }
  });

  it('a delete during a large read gives the whole old block or ENOENT, never other bytes', async function () {
    const tier = await NativeArenaTier.open({ capacityBytes: 32 * MiB, pageBytes: 64 * KiB });
    try {
      const a = randomBlock(12 * MiB);
      await tier.write(a.key, a.data);
      const target = Buffer.alloc(a.data.length);
      const reading = tier.read(a.key, 0, target);
      reading.catch(() => undefined); // may reject (ENOENT) before it is awaited below: not unhandled
      await tier.delete(a.key);
      const b = randomBlock(12 * MiB);
      await tier.write(b.key, b.data);
      try {
        assert.equal(await reading, a.data.length);
        assert.ok(target.equals(a.data));
      } catch (e) {
        assert.equal((e as { code?: string }).code, 'ENOENT');
      }
    } finally {
      await tier.close();
    }
  });
});

describe('native core under AddressSanitizer (native/test/run.sh)', function () {
  this.timeout(300_000);
  it('builds the C++ tests with ASan + UBSan and runs them clean', function () {
    const r = spawnSync('bash', [path.join(ROOT, 'native', 'test', 'run.sh')], { encoding: 'utf8' });
    assert.equal(r.status, 0, `native tests failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stderr, /native tests: all \d+ checks passed/);
    assert.doesNotMatch(r.stderr, /ERROR: AddressSanitizer|runtime error:/);
  });
});

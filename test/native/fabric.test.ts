/**
 * The libfabric data plane of the remote DRAM tier through its JavaScript boundary (native Fabric +
 * Arena.name/sha256Async), two endpoints in one process over tcp;ofi_rxm on loopback: byte-exact
 * fetches of blocks of many shapes (fragmented on both sides), a block the peer does not hold (ESTALE),
 * a peer that is gone (EIO within the timeout, never a hang), bytes that do not match their name
 * (caught by the hash check in NativeArenaTier.adopt), a freed block while a peer holds it (the pages
 * stay until the hold ends), and argument validation. Skipped when the addon was built without
 * libfabric.
 */
import * as assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { KiB, MiB } from '../../store/constants';
import { CascadeError } from '../../store/errors';
import { NativeArenaTier } from '../../store/tiers/native-dram';
import { nativeBinding, type NativeArenaBinding, type NativeFabricBinding } from '../../native';

const PROVIDER = 'tcp;ofi_rxm';
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

function openArena(capacityBytes: number, pageBytes = 64 * KiB): NativeArenaBinding {
  const b = nativeBinding()!;
  const file = path.join('/dev/shm', `cascade-fabric-test-${process.pid}-${randomBytes(4).toString('hex')}`);
  const fd = fs.openSync(file, 'wx+', 0o600);
  fs.unlinkSync(file);
  try {
    return new b.Arena(fd, capacityBytes, pageBytes, false);
  } finally {
    fs.closeSync(fd);
  }
}

async function rejectsCode(p: Promise<unknown>, code: string): Promise<Error> {
  try {
    await p;
  } catch (e) {
    assert.equal((e as { code?: string }).code, code, String(e));
    return e as Error;
  }
  assert.fail(`expected a rejection with ${code}`);
}

describe('native Fabric (remote DRAM data plane)', function () {
  this.timeout(60_000);
  let arenaA: NativeArenaBinding, arenaB: NativeArenaBinding;
  let a: NativeFabricBinding, b: NativeFabricBinding;

  before(function () {
    const binding = nativeBinding();
    if (!binding?.features.libfabric || binding.Fabric === undefined) this.skip();
    arenaA = openArena(256 * MiB);
    arenaB = openArena(256 * MiB);
    a = new binding.Fabric(arenaA, PROVIDER, '127.0.0.1', 4, 64, 30_000);
    b = new binding.Fabric(arenaB, PROVIDER, '127.0.0.1', 4, 64, 30_000);
  });

  after(function () {
    a?.close();
    b?.close();
    arenaA?.close();
    arenaB?.close();
  });

  /** Store `data` on A under its name; returns the handle. */
  function put(data: Uint8Array, name = sha(data)): number {
    const h = arenaA.allocate(data.length);
    arenaA.write(h, 0, data);
    arenaA.name(h, name);
    return h;
  }

  it('fetches blocks byte-exact, whatever their size and however both arenas are fragmented', async function () {
    // Fragment both arenas: allocate many small blocks and free every other one.
    const holesA = Array.from({ length: 64 }, () => arenaA.allocate(64 * KiB));
    const holesB = Array.from({ length: 64 }, () => arenaB.allocate(64 * KiB));
    holesA.filter((_, i) => i % 2 === 0).forEach((h) => arenaA.free(h));
    holesB.filter((_, i) => i % 3 === 0).forEach((h) => arenaB.free(h));
    for (const size of [1, 4095, 64 * KiB, 64 * KiB + 1, 2 * MiB + 12345, 17 * MiB]) {
      const data = randomBytes(size);
      const ha = put(data);
      const hb = arenaB.allocate(size);
      await b.fetch(a.address(), sha(data), size, hb, 10_000);
      assert.equal(await arenaB.sha256Async(hb), sha(data), `${size} bytes`);
      const back = Buffer.alloc(size);
      arenaB.read(hb, 0, back);
      assert.ok(back.equals(data), `${size} bytes read back`);
      arenaA.free(ha);
      arenaB.free(hb);
    }
    holesA.filter((_, i) => i % 2 === 1).forEach((h) => arenaA.free(h));
    holesB.filter((_, i) => i % 3 !== 0).forEach((h) => arenaB.free(h));
    assert.equal(a.stats().holdsActive, 0, 'every hold was released');
  });

  it('streams blocks of every size byte-exact, with the whole SHA-256 at the end', async function () {
    for (const size of [1, 256 * KiB, 2 * MiB + 7, 64 * MiB]) {
      const data = randomBytes(size);
      const ha = put(data);
      const hb = arenaB.allocate(size);
      const digest = await b.fetch(a.address(), sha(data), size, hb, 30_000, true);
      assert.equal(digest, sha(data), `${size} bytes`);
      const back = Buffer.alloc(size);
      arenaB.read(hb, 0, back);
      assert.ok(back.equals(data), `${size} bytes read back`);
      arenaA.free(ha);
      arenaB.free(hb);
    }
  });

  it('a piece that fails its CRC-32C fails the fetch with ECORRUPT; so does a block whose CRCs pass but whose SHA-256 differs; each counted', async function () {
    const binding = nativeBinding()!;
    for (const fault of ['piece-crc', 'block-bytes'] as const) {
      const arenaF = openArena(16 * MiB);
      const f = new binding.Fabric!(arenaF, PROVIDER, '127.0.0.1', 4, 64, 30_000, fault);
      try {
        const data = randomBytes(3 * MiB);
        const hf = arenaF.allocate(data.length);
        arenaF.write(hf, 0, data);
        arenaF.name(hf, sha(data));
        const hb = arenaB.allocate(data.length);
        const before = b.stats();
        await rejectsCode(b.fetch(f.address(), sha(data), data.length, hb, 10_000, true), 'ECORRUPT');
        const after = b.stats();
        if (fault === 'piece-crc') {
          assert.equal(after.piecesCorrupt, before.piecesCorrupt + 1, 'the bad piece is counted, once');
          assert.equal(after.blocksCorrupt, before.blocksCorrupt);
        } else {
          assert.equal(after.piecesCorrupt, before.piecesCorrupt, 'every piece passed its CRC');
          assert.equal(after.blocksCorrupt, before.blocksCorrupt + 1, 'the whole SHA-256 told');
        }
        arenaB.free(hb);
        arenaF.free(hf);
      } finally {
        f.close();
        arenaF.close();
      }
    }
  });

  it('a block the peer does not hold (or holds with another size) is ESTALE, and nothing is held', async function () {
    const data = randomBytes(1000);
    const ha = put(data);
    const hb = arenaB.allocate(999);
    await rejectsCode(b.fetch(a.address(), sha(data), 999, hb, 5_000), 'ESTALE');
    await rejectsCode(b.fetch(a.address(), 'f'.repeat(64), 999, hb, 5_000), 'ESTALE');
    arenaA.free(ha);
    // Freed: the name went with it.
    const hb2 = arenaB.allocate(1000);
    await rejectsCode(b.fetch(a.address(), sha(data), 1000, hb2, 5_000), 'ESTALE');
    arenaB.free(hb);
    arenaB.free(hb2);
    assert.equal(a.stats().holdsActive, 0);
  });

  it('a peer that is gone fails the fetch with EIO within the 500 ms reply bound (no hang), and the local block stays usable', async function () {
    const binding = nativeBinding()!;
    const arenaC = openArena(4 * MiB);
    const c = new binding.Fabric!(arenaC, PROVIDER, '127.0.0.1', 4, 64, 30_000);
    const gone = c.address();
    c.close();
    arenaC.close();
    const hb = arenaB.allocate(100);
    const t0 = Date.now();
    await rejectsCode(b.fetch(gone, 'a'.repeat(64), 100, hb, 1_500), 'EIO');
    const ms = Date.now() - t0;
    assert.ok(ms >= 450 && ms < 1_400, `failed after ${ms} ms (the reply bound is 500 ms, the fetch's timeout 1,500)`);
    arenaB.write(hb, 0, Buffer.alloc(100, 7));
    arenaB.free(hb);
  });

  it('bytes that do not hash to their name never become visible (NativeArenaTier.adopt: ECORRUPT, slot freed)', async function () {
    const data = randomBytes(300 * KiB);
    const wrongName = sha(Buffer.from('something else'));
    const ha = put(data, wrongName); // a peer whose block is named wrongly
    const tier = await NativeArenaTier.open({ capacityBytes: 8 * MiB, prefault: false, hugePages: false });
    try {
      const fabric = tier.openFabric(PROVIDER, '127.0.0.1', { fetchesPerPeerMax: 2, holdsMax: 8, holdTimeoutMs: 10_000 })!;
      try {
        const freeBefore = tier.freeBytes();
        await assert.rejects(
          tier.adopt(wrongName, data.length, (h) => fabric.fetch(a.address(), wrongName, data.length, h, 5_000)),
          (e: unknown) => e instanceof CascadeError && e.code === 'ECORRUPT',
        );
        assert.equal(tier.has(wrongName), false, 'nothing visible');
        assert.equal(tier.freeBytes(), freeBefore, 'the slot went back');
        // A right name adopts.
        arenaA.name(ha, sha(data));
        await tier.adopt(sha(data), data.length, (h) => fabric.fetch(a.address(), sha(data), data.length, h, 5_000));
        const back = Buffer.alloc(data.length);
        assert.equal(await tier.read(sha(data), 0, back), data.length);
        assert.ok(back.equals(data));
      } finally {
        fabric.close();
      }
    } finally {
      await tier.close();
      arenaA.free(ha);
    }
  });

  it('many concurrent fetches (more than the per-peer limit) all complete byte-exact', async function () {
    const blocks = Array.from({ length: 24 }, (_, i) => randomBytes(256 * KiB + i));
    const handles = blocks.map((d) => put(d));
    const targets = blocks.map((d) => arenaB.allocate(d.length));
    await Promise.all(blocks.map((d, i) => b.fetch(a.address(), sha(d), d.length, targets[i], 20_000)));
    for (let i = 0; i < blocks.length; i++) assert.equal(await arenaB.sha256Async(targets[i]), sha(blocks[i]));
    handles.forEach((h) => arenaA.free(h));
    targets.forEach((h) => arenaB.free(h));
    const s = a.stats();
    assert.equal(s.holdsActive, 0);
    assert.equal(s.badMessages, 0);
  });

  it('validates its arguments (no crash on bad input)', function () {
    const binding = nativeBinding()!;
    assert.throws(() => new binding.Fabric!({} as NativeArenaBinding, PROVIDER, '', 4, 64, 1000), /arena/);
    assert.throws(() => new binding.Fabric!(arenaA, 'no-such-provider', '', 4, 64, 1000), (e: unknown) => (e as { code?: string }).code === 'EIO');
    assert.throws(() => new binding.Fabric!(arenaA, PROVIDER, '', 0, 64, 1000), (e: unknown) => (e as { code?: string }).code === 'EINVAL');
    const hb = arenaB.allocate(10);
    assert.throws(() => b.fetch('zz', 'a'.repeat(64), 10, hb, 1000), (e: unknown) => (e as { code?: string }).code === 'EINVAL');
    assert.throws(() => b.fetch(a.address(), 'A'.repeat(64), 10, hb, 1000), (e: unknown) => (e as { code?: string }).code === 'EINVAL');
    assert.throws(() => b.fetch(a.address(), 'a'.repeat(64), 10, hb, 0), (e: unknown) => (e as { code?: string }).code === 'EINVAL');
    assert.throws(() => arenaB.name(hb, 'xyz'), (e: unknown) => (e as { code?: string }).code === 'EINVAL');
    arenaB.free(hb);
    assert.throws(() => arenaB.name(hb, 'a'.repeat(64)), (e: unknown) => (e as { code?: string }).code === 'ESTALE');
  });
});

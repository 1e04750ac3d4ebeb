/**
 * The GPU tier without a GPU: its slot allocator, the tier (conformance suite) over a device in host
 * memory, the store's placement policy (reads and pins promote, pinned and leased blocks stay, evicted
 * blocks go down to DRAM), IPC leases, and how a store without a usable device reports it. The same
 * store tests run against the real device when there is one (test/store/gpu-device.test.ts).
 */
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { KiB, MiB } from '../../store/constants';
import { CascadeError } from '../../store/errors';
import { Store, type StoreConfig } from '../../store/store';
import { ExtentAllocator } from '../../store/tiers/dram';
import { CudaGpuDevice, GpuTier, HostMemoryGpuDevice, probeGpu, type GpuDevice } from '../../store/tiers/gpu';
import { nativeBinding } from '../../native';
import { MemoryTier } from '../../store/tiers/memory';
import { GpuLeases } from '../../fs/gpu-leases';
import { rejectsWith, rmDir, seededBytes, sha256, tmpDir } from './helpers';
import { tierConformance } from './tier-conformance';

tierConformance('GpuTier (host-memory device, 4 KiB slots)', async (capacityBytes) => new GpuTier(new HostMemoryGpuDevice(capacityBytes), { slotBytes: 4 * KiB }));
tierConformance('GpuTier (host-memory device, default 64 KiB slots)', async (capacityBytes) => new GpuTier(new HostMemoryGpuDevice(capacityBytes)));

describe('GPU slot allocator (ExtentAllocator.allocateContiguous)', function () {
  it('gives one run per block, best fit, and refuses a block no single free run holds', function () {
    const a = new ExtentAllocator(16);
    const x = a.allocateContiguous(4)!;
    const y = a.allocateContiguous(2)!;
    const z = a.allocateContiguous(4)!;
    assert.deepEqual([x, y, z], [
      { startPage: 0, pageCount: 4 },
      { startPage: 4, pageCount: 2 },
      { startPage: 6, pageCount: 4 },
    ]);
    a.release([x, z]); // free: [0,4) [6,10) [10,16) -> [0,4) and [6,16)
    assert.equal(a.freePages, 14);
    assert.equal(a.largestFreePages(), 10);
    assert.deepEqual(a.allocateContiguous(3), { startPage: 0, pageCount: 3 }, 'best fit: the 4-run, not the 10-run');
    assert.equal(a.allocateContiguous(11), undefined, '11 pages are free but in no one run');
    assert.equal(a.freePages, 11, 'a refused allocation takes nothing');
    a.release([y]);
    const joined = a.allocateContiguous(13)!;
    assert.deepEqual(joined, { startPage: 3, pageCount: 13 }, 'freeing the middle run joins its neighbours');
    a.release([joined]);
    assert.throws(() => a.release([joined]), /double free/);
  });
});

/** A host-memory device whose reads wait until `go()`: to hold a copy in flight. */
class GatedDevice extends HostMemoryGpuDevice {
  private gate: Promise<void> | undefined;
  private open: (() => void) | undefined;
  hold(): void {
    this.gate = new Promise((r) => (this.open = r));
  }
  go(): void {
    this.open?.();
    this.gate = undefined;
  }
  override async read(offsetBytes: number, target: Uint8Array): Promise<void> {
    if (this.gate) await this.gate;
    return super.read(offsetBytes, target);
  }
}

describe('GpuTier', function () {
  it('keeps a deleted block\'s slot until a copy out of it ends (no new block lands under a reader)', async function () {
    const device = new GatedDevice(64 * KiB);
    const tier = new GpuTier(device, { slotBytes: 4 * KiB });
    const a = seededBytes(1, 64 * KiB);
    await tier.write(sha256(a), a);
    device.hold();
    const out = Buffer.alloc(a.length);
    const reading = tier.read(sha256(a), 0, out);
    await tier.delete(sha256(a));
    assert.equal(tier.has(sha256(a)), false);
    const b = seededBytes(2, 4 * KiB);
    await rejectsWith(() => tier.write(sha256(b), b), 'ENOSPC');
    device.go();
    assert.equal(await reading, a.length);
    assert.ok(out.equals(a), 'the reader got the deleted block\'s bytes, whole');
    await tier.write(sha256(b), b); // room again once the copy ended
    await tier.close();
  });

  it('says where a block lies (offset, size) and refuses bad slot sizes', async function () {
    const tier = new GpuTier(new HostMemoryGpuDevice(1 * MiB), { slotBytes: 64 * KiB });
    const a = seededBytes(3, 100 * KiB);
    const b = seededBytes(4, 10);
    await tier.write(sha256(a), a);
    await tier.write(sha256(b), b);
    assert.deepEqual(tier.locate(sha256(a)), { offsetBytes: 0, sizeBytes: 100 * KiB });
    assert.deepEqual(tier.locate(sha256(b)), { offsetBytes: 128 * KiB, sizeBytes: 10 });
    assert.equal(tier.stats().usedBytes, 192 * KiB);
    assert.equal(tier.stats().blockBytes, 100 * KiB + 10);
    await tier.close();
    for (const slotBytes of [0, 1000, 4096 + 1, -4096]) {
      assert.throws(() => new GpuTier(new HostMemoryGpuDevice(1 * MiB), { slotBytes }), (e: unknown) => e instanceof CascadeError && e.code === 'EINVAL');
    }
  });
});

/**
 * The store's GPU policy over `device`. DRAM is a small in-memory tier so that blocks leave it; the disk
 * tier is real (blocks are always durable there, so GPU copies may be dropped).
 */
export function gpuStoreSuite(label: string, makeDevice: (capacityBytes: number) => GpuDevice | undefined): void {
  describe(`Store with a GPU tier: ${label}`, function () {
    this.timeout(60_000);
    let dir: string;
    let store: Store | undefined;
    const BLOCK = 256 * KiB;

    async function open(gpuBytes: number, extra: Partial<StoreConfig> = {}): Promise<Store | undefined> {
      const device = makeDevice(gpuBytes);
      if (!device) return undefined;
      store = await Store.open({
        dataDir: dir,
        dramCapacityBytes: 0,
        tiers: { dram: new MemoryTier({ name: 'dram', capacityBytes: 4 * BLOCK }) },
        meta: 'memory',
        dramWatermarks: { low: 0, high: 0 },
        gpu: { capacityBytes: gpuBytes, testDevice: device, slotBytes: 64 * KiB },
        log: () => undefined,
        ...extra,
      });
      return store;
    }

    async function readAll(s: Store, name: string): Promise<Buffer> {
      return s.get(name);
    }

    beforeEach(function () {
      dir = tmpDir('gpu');
    });
    afterEach(async function () {
      await store?.close();
      store = undefined;
      rmDir(dir);
    });

    it('copies a block read twice into the GPU tier, and serves it from there once DRAM lost it', async function () {
      const s = await open(2 * MiB);
      if (!s) return this.skip();
      const a = seededBytes(10, BLOCK);
      await s.put('m/a', a);
      await readAll(s, 'm/a');
      await s.idle();
      assert.equal((await s.stat('m/a')).tier, 'dram', 'one read: not yet');
      await readAll(s, 'm/a');
      await s.idle();
      assert.equal((await s.stat('m/a')).tier, 'gpu');
      assert.equal((await s.stats()).gpu.promotions, 1);
      // Push it out of DRAM (4 blocks fit there) with other blocks.
      for (let i = 0; i < 6; i++) await s.put(`m/f${i}`, seededBytes(100 + i, BLOCK));
      await s.syncAll();
      for (let i = 0; i < 6; i++) await s.put(`m/g${i}`, seededBytes(200 + i, BLOCK));
      assert.equal(s.dram.has(sha256(a)), false, 'a left DRAM');
      const before = (await s.stats()).hits.gpu;
      const part = Buffer.alloc(1000);
      assert.equal(await s.read('m/a', BLOCK - 500, part), 500);
      assert.ok(part.subarray(0, 500).equals(a.subarray(BLOCK - 500)), 'a read at an offset, clipped at the end');
      await s.idle();
      assert.equal(s.dram.has(sha256(a)), false, 'a read from the middle does not promote');
      const got = await readAll(s, 'm/a');
      assert.ok(got.equals(a), 'bytes from the GPU tier are exact');
      assert.equal((await s.stats()).hits.gpu, before + 2);
      await s.idle();
      assert.ok(s.dram.has(sha256(a)), 'a whole read from the GPU tier promotes the block to DRAM (4x faster for the next reads)');
      assert.ok(s.gpu!.has(sha256(a)), 'and it stays in the GPU tier too');
    });

    it('pins go to the GPU tier and stay; other blocks take turns in the rest (LRU), the evicted going down to DRAM', async function () {
      const s = await open(4 * BLOCK); // room for 4 blocks
      if (!s) return this.skip();
      const prefix = seededBytes(20, BLOCK);
      await s.put('m/prefix', prefix);
      await s.pin('m/prefix');
      await s.idle();
      assert.equal((await s.stat('m/prefix')).tier, 'gpu', 'pinned: in the GPU tier at once');
      const hot = [0, 1, 2, 3, 4].map((i) => seededBytes(30 + i, BLOCK));
      for (let i = 0; i < hot.length; i++) {
        await s.put(`m/h${i}`, hot[i]);
        await readAll(s, `m/h${i}`);
        await readAll(s, `m/h${i}`);
        await s.idle();
      }
      const st = await s.stats();
      assert.equal(st.gpu.blocks, 4, 'the tier is full');
      assert.ok(st.gpu.evictions >= 2, `unpinned blocks were evicted to make room (${st.gpu.evictions})`);
      assert.equal((await s.stat('m/prefix')).tier, 'gpu', 'the pinned block was never a victim');
      assert.equal((await s.stat('m/h4')).tier, 'gpu', 'the most recent hot block is in');
      assert.equal(s.gpu!.has(sha256(hot[0])), false, 'the least recent went');
      for (let i = 0; i < hot.length; i++) assert.ok((await readAll(s, `m/h${i}`)).equals(hot[i]), `h${i} reads back exact`);
      // Unpinned, the prefix is an ordinary block again: it can be evicted.
      await s.unpin('m/prefix');
      for (let i = 5; i < 9; i++) {
        await s.put(`m/h${i}`, seededBytes(30 + i, BLOCK));
        await readAll(s, `m/h${i}`);
        await readAll(s, `m/h${i}`);
        await s.idle();
      }
      assert.equal(s.gpu!.has(sha256(prefix)), false, 'unpinned, it was evicted in turn');
    });

    it('an evicted GPU block DRAM lacks is copied down into DRAM', async function () {
      const s = await open(1 * BLOCK);
      if (!s) return this.skip();
      const a = seededBytes(40, BLOCK);
      await s.put('m/a', a);
      await readAll(s, 'm/a');
      await readAll(s, 'm/a');
      await s.idle();
      assert.ok(s.gpu!.has(sha256(a)));
      await s.syncAll();
      for (let i = 0; i < 8; i++) await s.put(`m/x${i}`, seededBytes(300 + i, BLOCK)); // a leaves DRAM
      await s.syncAll();
      assert.equal(s.dram.has(sha256(a)), false);
      const b = seededBytes(41, BLOCK);
      await s.put('m/b', b);
      await readAll(s, 'm/b');
      await readAll(s, 'm/b');
      await s.idle();
      assert.ok(s.gpu!.has(sha256(b)) && !s.gpu!.has(sha256(a)), 'b took a\'s place');
      const st = await s.stats();
      assert.equal(st.gpu.demotions, 1);
      assert.ok(s.dram.has(sha256(a)), 'a went down to DRAM');
      assert.ok((await readAll(s, 'm/a')).equals(a));
    });

    it('an IPC hold loads the block, keeps it in place through eviction pressure and rewrites, and ENOSPC when all is held', async function () {
      const s = await open(2 * BLOCK);
      if (!s) return this.skip();
      const a = seededBytes(50, BLOCK);
      await s.put('m/a', a);
      const hold = await s.holdInGpu(await s.resolve('m/a'));
      assert.equal(hold.sizeBytes, BLOCK);
      assert.equal(hold.ipcHandle.length, 64);
      assert.match(hold.deviceUuid, /^GPU-[0-9a-f-]{36}$/);
      assert.equal((await s.stats()).gpu.leases, 1);
      // Rewrite and delete the name: the held content stays where it is.
      await s.put('m/a', seededBytes(51, BLOCK));
      await s.delete('m/a');
      const b = seededBytes(52, BLOCK);
      await s.put('m/b', b);
      const holdB = await s.holdInGpu(await s.resolve('m/b'));
      const c = seededBytes(53, BLOCK);
      await s.put('m/c', c);
      await rejectsWith(async () => s.holdInGpu(await s.resolve('m/c')), 'ENOSPC');
      const where = s.gpu!.locate(sha256(a));
      assert.deepEqual(where, { offsetBytes: hold.offsetBytes, sizeBytes: BLOCK }, 'held content did not move');
      const back = Buffer.alloc(BLOCK);
      await s.gpu!.read(sha256(a), 0, back);
      assert.ok(back.equals(a), 'held bytes intact');
      hold.release();
      hold.release(); // idempotent
      const holdC = await s.holdInGpu(await s.resolve('m/c')); // a's room is free again (a was reclaimed)
      assert.equal(s.gpu!.has(sha256(a)), false, 'released and unreferenced: reclaimed from the GPU tier');
      holdB.release();
      holdC.release();
      assert.equal((await s.stats()).gpu.leases, 0);
    });

    it('leases: one per process and file, moved by a rewrite, ended by release or by the process exiting', async function () {
      const s = await open(4 * BLOCK);
      if (!s) return this.skip();
      const proc = tmpDir('proc');
      const fakeStat = (pid: number, start: string) => {
        fs.mkdirSync(path.join(proc, String(pid)), { recursive: true });
        // comm with a space and a parenthesis, as /proc allows
        fs.writeFileSync(path.join(proc, String(pid), 'stat'), `${pid} (py (x) y) S 1 ${Array.from({ length: 17 }, () => '0').join(' ')} ${start} 0 0`);
      };
      try {
        const leases = new GpuLeases(s, proc);
        await s.put('m/a', seededBytes(60, BLOCK));
        fakeStat(4242, '777');
        const v1 = await leases.take(4242, 'm/a', await s.resolve('m/a'));
        const again = await leases.take(4242, 'm/a', await s.resolve('m/a'));
        assert.deepEqual(again, v1, 'the same lease');
        assert.equal(leases.size, 1);
        await s.put('m/a', seededBytes(61, BLOCK));
        const v2 = await leases.take(4242, 'm/a', await s.resolve('m/a'));
        assert.notEqual(v2.sha256, v1.sha256);
        assert.equal((await s.stats()).gpu.leases, 1, 'the lease moved to the new content');
        fakeStat(4243, '1');
        await leases.take(4243, 'm/a', await s.resolve('m/a'));
        assert.equal((await s.stats()).gpu.leases, 2);
        assert.equal(leases.release(4243, 'm/a'), true);
        assert.equal(leases.release(4243, 'm/a'), false);
        // 4242 exits and its pid is reused by another process: its lease ends.
        fakeStat(4242, '999');
        assert.equal(leases.sweep(), 1);
        assert.equal((await s.stats()).gpu.leases, 0);
        await rejectsWith(() => leases.take(0, 'm/a', {} as never), 'EOPNOTSUPP');
        leases.close();
      } finally {
        rmDir(proc);
      }
    });
  });
}

gpuStoreSuite('host-memory device', (capacityBytes) => new HostMemoryGpuDevice(capacityBytes));
// The same policy tests on the real device (skipped without one; run them on a GPU machine).
gpuStoreSuite('CUDA device 0', (capacityBytes) => (probeGpu().available ? CudaGpuDevice.open(0, capacityBytes) : undefined));
tierConformance('GpuTier (CUDA device 0, skipped without one)', async (capacityBytes) => {
  if (!probeGpu().available) return new GpuTier(new HostMemoryGpuDevice(capacityBytes)); // runs the suite on the fake again
  return new GpuTier(CudaGpuDevice.open(0, capacityBytes));
});

describe('GpuPool (native binding) on a real GPU', function () {
  this.timeout(60_000);
  before(function () {
    if (!probeGpu().available) this.skip();
  });

  it('round-trips 64 MiB and odd ranges byte-exact, checks ranges, exports a 64-byte IPC handle', async function () {
    const pool = new (nativeBinding()!.GpuPool)(0, 96 * MiB, 4 * MiB);
    try {
      const big = seededBytes(7, 64 * MiB);
      await pool.write(4096, big);
      const back = Buffer.alloc(big.length);
      await pool.read(4096, back);
      assert.ok(back.equals(big), '64 MiB H2D + D2H byte-exact');
      const odd = seededBytes(8, 3 * MiB + 5);
      await pool.write(65 * MiB + 3, odd);
      const oddBack = Buffer.alloc(odd.length);
      await pool.read(65 * MiB + 3, oddBack);
      assert.ok(oddBack.equals(odd));
      assert.throws(() => pool.write(96 * MiB, Buffer.alloc(1)), /outside/);
      assert.equal(pool.ipcHandle().length, 64);
      const info = pool.info();
      assert.match(info.uuid, /^GPU-/);
      assert.equal(info.bytesToDevice, big.length + odd.length);
    } finally {
      pool.close();
      pool.close();
    }
  });
});

describe('Store without a usable GPU', function () {
  let dir: string;
  beforeEach(() => (dir = tmpDir('nogpu')));
  afterEach(() => rmDir(dir));

  it('opens without the tier and says why in stats; IPC holds are EOPNOTSUPP', async function () {
    const probe = probeGpu();
    if (probe.available) return this.skip(); // a GPU machine: test/store/gpu-device.test.ts covers it
    const logs: string[] = [];
    const s = await Store.open({ dataDir: dir, dramCapacityBytes: 16 * MiB, meta: 'memory', prefault: false, gpu: { capacityBytes: 64 * MiB }, log: (m) => logs.push(m) });
    try {
      const st = await s.stats();
      assert.equal(st.gpu.available, false);
      assert.ok(st.gpu.reason && st.gpu.reason.length > 0);
      assert.deepEqual(st.tiers.map((t) => t.name), ['dram', 'disk']);
      assert.ok(logs.some((l) => l.startsWith('GPU tier off:')), 'the mount log says why');
      await s.put('m/a', Buffer.from('x'));
      assert.equal((await s.stat('m/a')).tier, 'dram');
      await rejectsWith(async () => s.holdInGpu(await s.resolve('m/a')), 'EOPNOTSUPP');
    } finally {
      await s.close();
    }
  });

  it('without --gpu says the tier is off and does not load the driver', async function () {
    const s = await Store.open({ dataDir: dir, dramCapacityBytes: 16 * MiB, meta: 'memory', prefault: false });
    try {
      const st = await s.stats();
      assert.equal(st.gpu.available, false);
      assert.match(st.gpu.reason ?? '', /--gpu/);
    } finally {
      await s.close();
    }
  });

  it('refuses bad GPU settings', async function () {
    for (const gpu of [{ capacityBytes: 0 }, { capacityBytes: 1.5 }, { capacityBytes: MiB, device: -1 }, { capacityBytes: MiB, promoteAfterReads: 0 }]) {
      await rejectsWith(() => Store.open({ dataDir: dir, dramCapacityBytes: MiB, meta: 'memory', gpu }), 'EINVAL');
    }
  });
});

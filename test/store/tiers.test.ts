import * as assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { KiB, MiB } from '../../store/constants';
import { CascadeError } from '../../store/errors';
import type { Tier } from '../../store/tier';
import { ExtentAllocator, ShmArenaTier, type Extent } from '../../store/tiers/dram';
import { MemoryTier } from '../../store/tiers/memory';
import {
  assertAbsent,
  assertStatsConsistent,
  assertStored,
  randomBlock,
  randomInt,
  readWhole,
  rejectsWith,
  seededRandom,
  tierConformance,
  type TestBlock,
} from './tier-conformance';

const PAGE_4K_BYTES = 4 * KiB;

tierConformance('MemoryTier', async (capacityBytes) => new MemoryTier({ capacityBytes }));
tierConformance('MemoryTier (unbounded, named dram)', async () => new MemoryTier({ name: 'dram' }));
tierConformance('ShmArenaTier (4 KiB pages, prefault)', (capacityBytes) =>
  ShmArenaTier.open({ capacityBytes, pageBytes: PAGE_4K_BYTES, prefault: true }),
);
tierConformance('ShmArenaTier (default 64 KiB pages, no prefault)', (capacityBytes) =>
  ShmArenaTier.open({ capacityBytes, prefault: false }),
);

/** Every public method of a closed tier throws EBUSY; close stays idempotent. */
async function assertClosed(tier: Tier): Promise<void> {
  const key = randomBlock(1).key;
  const busy = (f: () => unknown): void =>
    assert.throws(f, (e: unknown) => e instanceof CascadeError && e.code === 'EBUSY');
  busy(() => tier.has(key));
  busy(() => tier.sizeOf(key));
  busy(() => tier.freeBytes());
  busy(() => tier.scan());
  busy(() => tier.stats());
  await rejectsWith(tier.write(key, Buffer.alloc(1)), 'EBUSY');
  await rejectsWith(tier.read(key, 0, Buffer.alloc(1)), 'EBUSY');
  await rejectsWith(tier.delete(key), 'EBUSY');
  await rejectsWith(tier.sync(), 'EBUSY');
  await tier.close();
}

async function assertRejectsBadInput(tier: Tier): Promise<void> {
  const block = randomBlock(100);
  await tier.write(block.key, block.data);
  for (const offset of [-1, 0.5, Number.NaN, Infinity]) {
    await rejectsWith(tier.read(block.key, offset, Buffer.alloc(10)), 'EINVAL');
  }
  for (const key of ['', 'abc', block.key.toUpperCase(), `${block.key}0`, '../'.repeat(21) + 'a']) {
    await rejectsWith(tier.write(key, block.data), 'EINVAL');
  }
  assert.throws(() => tier.footprintBytes(-1), (e: unknown) => e instanceof CascadeError && e.code === 'EINVAL');
  assert.equal(tier.stats().blocks, 1, 'rejected writes stored nothing');
}

describe('MemoryTier', function () {
  it('is named memory by default, dram on request, and not persistent', async function () {
    const plain = new MemoryTier();
    const dram = new MemoryTier({ name: 'dram', capacityBytes: 10 });
    assert.equal(plain.name, 'memory');
    assert.equal(plain.capacityBytes, Infinity);
    assert.equal(plain.freeBytes(), Infinity);
    assert.equal(dram.name, 'dram');
    assert.equal(dram.stats().name, 'dram');
    assert.equal(dram.capacityBytes, 10);
    assert.equal(plain.persistent, false);
    assert.equal(plain.footprintBytes(12345), 12345);
  });

  it('validates its options', function () {
    for (const capacityBytes of [-1, 1.5, Number.NaN, -Infinity]) {
      assert.throws(() => new MemoryTier({ capacityBytes }), (e: unknown) => e instanceof CascadeError && e.code === 'EINVAL');
    }
    assert.equal(new MemoryTier({ capacityBytes: 0 }).freeBytes(), 0);
  });

  it('rejects bad offsets, keys and sizes with EINVAL', async function () {
    await assertRejectsBadInput(new MemoryTier());
  });

  it('refuses every call after close with EBUSY', async function () {
    const tier = new MemoryTier();
    await tier.close();
    await assertClosed(tier);
  });
});

describe('ShmArenaTier', function () {
  let opened: ShmArenaTier[] = [];
  let tempDirs: string[] = [];

  async function open(capacityBytes: number, pageBytes = PAGE_4K_BYTES, dir?: string): Promise<ShmArenaTier> {
    const tier = await ShmArenaTier.open({ capacityBytes, pageBytes, dir });
    opened.push(tier);
    return tier;
  }

  function tempDir(): string {
    const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
    const dir = fs.mkdtempSync(path.join(base, 'cascade-tiers-test-'));
    tempDirs.push(dir);
    return dir;
  }

  afterEach(async function () {
    for (const tier of opened) await tier.close();
    for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
    opened = [];
    tempDirs = [];
  });

  /** The allocator's free list and the blocks' extents partition the arena exactly. */
  function assertAllocatorSound(tier: ShmArenaTier): void {
    const totalPages = tier.capacityBytes / tier.pageBytes;
    const owners = new Int32Array(totalPages).fill(-1);
    const claim = (extent: Extent, owner: number): void => {
      assert.ok(extent.pageCount > 0, 'no empty extents');
      assert.ok(extent.startPage >= 0 && extent.startPage + extent.pageCount <= totalPages, 'extent in the arena');
      for (let p = extent.startPage; p < extent.startPage + extent.pageCount; p++) {
        assert.equal(owners[p], -1, `page ${p} claimed twice`);
        owners[p] = owner;
      }
    };
    const free = tier.freeExtents();
    for (let i = 1; i < free.length; i++) {
      assert.ok(free[i - 1].startPage + free[i - 1].pageCount < free[i].startPage, 'free list sorted and coalesced');
    }
    free.forEach((extent) => claim(extent, 0));
    tier.scan().forEach((entry, i) => {
      const extents = tier.extentsOf(entry.key) ?? [];
      assert.equal(extents.reduce((sum, e) => sum + e.pageCount, 0), Math.ceil(entry.sizeBytes / tier.pageBytes));
      extents.forEach((extent) => claim(extent, i + 1));
    });
    assert.ok(owners.every((owner) => owner !== -1), 'every page is free or in a block');
    assert.equal(tier.freeBytes(), free.reduce((sum, e) => sum + e.pageCount, 0) * tier.pageBytes);
  }

  it('validates its options with EINVAL and creates nothing', async function () {
    const dir = tempDir();
    const bad = [
      { capacityBytes: -1 },
      { capacityBytes: 1.5 },
      { capacityBytes: Number.NaN },
      { capacityBytes: Infinity },
      { capacityBytes: MiB, pageBytes: 0 },
      { capacityBytes: MiB, pageBytes: -4096 },
      { capacityBytes: MiB, pageBytes: 1000 },
      { capacityBytes: MiB, pageBytes: 6144 },
      { capacityBytes: MiB, pageBytes: 4096.5 },
    ];
    for (const options of bad) await rejectsWith(ShmArenaTier.open({ ...options, dir }), 'EINVAL');
    assert.deepEqual(fs.readdirSync(dir), []);
  });

  it('rounds capacity down to whole pages, and footprints up', async function () {
    const tier = await open(10_000);
    assert.equal(tier.name, 'dram');
    assert.equal(tier.persistent, false);
    assert.equal(tier.capacityBytes, 8192);
    assert.equal(tier.freeBytes(), 8192);
    assert.deepEqual([0, 1, 4095, 4096, 4097].map((s) => tier.footprintBytes(s)), [0, 4096, 4096, 4096, 8192]);
    const big = await ShmArenaTier.open({ capacityBytes: MiB }); // default page size
    opened.push(big);
    assert.equal(big.pageBytes, 64 * KiB);
    assert.equal(big.footprintBytes(1), 64 * KiB);
  });

  it('stores 0-byte blocks in 0 pages, even in a 0-byte arena', async function () {
    const tier = await open(0);
    assert.equal(tier.capacityBytes, 0);
    const empty = randomBlock(0);
    await tier.write(empty.key, empty.data);
    await assertStored(tier, empty);
    assert.equal(tier.stats().usedBytes, 0);
    assert.deepEqual(tier.extentsOf(empty.key), []);
    const one = randomBlock(1);
    await rejectsWith(tier.write(one.key, one.data), 'ENOSPC');
    await assertAbsent(tier, one.key);
  });

  it('unlinks its arena file at open and keeps only the fd', async function () {
    const dir = tempDir();
    const tier = await open(4 * PAGE_4K_BYTES, PAGE_4K_BYTES, dir);
    assert.equal(tier.arenaDir, dir);
    assert.deepEqual(fs.readdirSync(dir), [], 'no arena file visible in the directory');
    const arenaLinks = (): string[] => {
      const links: string[] = [];
      for (const fd of fs.readdirSync('/proc/self/fd')) {
        try {
          const target = fs.readlinkSync(`/proc/self/fd/${fd}`);
          if (target.startsWith(`${dir}/`)) links.push(target);
        } catch {
          // fds come and go (the readdir fd itself); not ours
        }
      }
      return links;
    };
    if (fs.existsSync('/proc/self/fd')) {
      const links = arenaLinks();
      assert.equal(links.length, 1, 'one open fd on an arena in the directory');
      assert.match(links[0], /\(deleted\)$/);
      await tier.close();
      assert.deepEqual(arenaLinks(), [], 'close releases the fd');
    }
  });

  it('falls back to os.tmpdir() only when the directory does not exist', async function () {
    const missing = path.join(tempDir(), 'does', 'not', 'exist');
    const tier = await open(PAGE_4K_BYTES, PAGE_4K_BYTES, missing);
    assert.equal(tier.arenaDir, os.tmpdir());
    const block = randomBlock(100);
    await tier.write(block.key, block.data);
    await assertStored(tier, block);
    const dir = tempDir();
    assert.equal((await open(PAGE_4K_BYTES, PAGE_4K_BYTES, dir)).arenaDir, dir);
  });

  it('stores a block larger than any free extent across several extents', async function () {
    const tier = await open(16 * PAGE_4K_BYTES);
    const pages = Array.from({ length: 16 }, () => randomBlock(PAGE_4K_BYTES));
    for (const block of pages) await tier.write(block.key, block.data);
    assert.equal(tier.freeBytes(), 0);
    // Free every other page: 8 free pages, no two adjacent.
    for (let i = 0; i < 16; i += 2) await tier.delete(pages[i].key);
    const free = tier.freeExtents();
    assert.equal(free.length, 8);
    assert.ok(free.every((e) => e.pageCount === 1), 'largest free extent is one page');

    const big = randomBlock(8 * PAGE_4K_BYTES - 5);
    await tier.write(big.key, big.data);
    assert.equal(tier.extentsOf(big.key)?.length, 8, 'placed in 8 one-page pieces');
    await assertStored(tier, big);
    for (let i = 1; i < 16; i += 2) await assertStored(tier, pages[i]);
    assert.equal(tier.freeBytes(), 0);
    assertAllocatorSound(tier);

    const more = randomBlock(1);
    await rejectsWith(tier.write(more.key, more.data), 'ENOSPC');
    assertAllocatorSound(tier);
  });

  it('refuses a block that would need more pages than are free, taking none', async function () {
    const tier = await open(8 * PAGE_4K_BYTES);
    const a = randomBlock(3 * PAGE_4K_BYTES);
    await tier.write(a.key, a.data);
    const freeBefore = tier.freeExtents();
    const tooBig = randomBlock(5 * PAGE_4K_BYTES + 1); // 6 pages, 5 free
    await rejectsWith(tier.write(tooBig.key, tooBig.data), 'ENOSPC');
    assert.deepEqual(tier.freeExtents(), freeBefore);
    const fits = randomBlock(5 * PAGE_4K_BYTES);
    await tier.write(fits.key, fits.data);
    await assertStored(tier, fits);
    await assertStored(tier, a);
  });

  it('places a block in the smallest free extent that holds it (best fit)', async function () {
    const tier = await open(32 * PAGE_4K_BYTES);
    // Layout in pages: [A:3][h:5][B:1][h:2][C:1][h:4][D:1][rest free: 15].
    const sizesPages = [3, 5, 1, 2, 1, 4, 1];
    const blocks = sizesPages.map((p) => randomBlock(p * PAGE_4K_BYTES));
    for (const block of blocks) await tier.write(block.key, block.data);
    for (const i of [1, 3, 5]) await tier.delete(blocks[i].key);
    assert.deepEqual(tier.freeExtents(), [
      { startPage: 3, pageCount: 5 },
      { startPage: 9, pageCount: 2 },
      { startPage: 12, pageCount: 4 },
      { startPage: 17, pageCount: 15 },
    ]);
    const two = randomBlock(2 * PAGE_4K_BYTES - 100);
    await tier.write(two.key, two.data);
    assert.deepEqual(tier.extentsOf(two.key), [{ startPage: 9, pageCount: 2 }]);
    const four = randomBlock(3 * PAGE_4K_BYTES + 1);
    await tier.write(four.key, four.data);
    assert.deepEqual(tier.extentsOf(four.key), [{ startPage: 12, pageCount: 4 }]);
    await assertStored(tier, two);
    await assertStored(tier, four);
    assertAllocatorSound(tier);
  });

  it('coalesces freed pages back into one extent', async function () {
    const tier = await open(64 * PAGE_4K_BYTES);
    const rng = seededRandom(7);
    const blocks: TestBlock[] = [];
    while (tier.freeBytes() > 0) {
      const block = randomBlock(Math.min(tier.freeBytes(), randomInt(rng, 1, 5 * PAGE_4K_BYTES)));
      await tier.write(block.key, block.data);
      blocks.push(block);
    }
    // Delete in a scrambled order so that merges happen with the previous, the next, and both.
    const order = blocks.map((_, i) => i).sort(() => rng() - 0.5);
    for (const i of order) {
      await tier.delete(blocks[i].key);
      assertAllocatorSound(tier);
    }
    assert.deepEqual(tier.freeExtents(), [{ startPage: 0, pageCount: 64 }]);
    assert.equal(tier.stats().usedBytes, 0);
  });

  it('survives a seeded random alloc/free stress with exact usage and contents', async function () {
    this.timeout(120_000);
    const tier = await open(256 * PAGE_4K_BYTES);
    const rng = seededRandom(20240521);
    const live = new Map<string, TestBlock>();
    let refused = 0;
    const OPS = 4000;
    for (let op = 0; op < OPS; op++) {
      if (live.size === 0 || rng() < 0.55) {
        const r = rng();
        const sizeBytes = r < 0.05 ? 0 : r < 0.2 ? PAGE_4K_BYTES * randomInt(rng, 1, 4) : randomInt(rng, 1, 40 * KiB);
        const entry = randomBlock(sizeBytes); // tiny sizes may repeat content: a present key
        const usedBefore = tier.stats().usedBytes;
        if (live.has(entry.key)) {
          await tier.write(entry.key, entry.data); // no-op, even when full
          assert.equal(tier.stats().usedBytes, usedBefore);
        } else if (tier.footprintBytes(sizeBytes) > tier.freeBytes()) {
          await rejectsWith(tier.write(entry.key, entry.data), 'ENOSPC');
          assert.equal(tier.has(entry.key), false);
          assert.equal(tier.stats().usedBytes, usedBefore);
          refused++;
        } else {
          await tier.write(entry.key, entry.data);
          live.set(entry.key, entry);
        }
      } else {
        const keys = [...live.keys()];
        const key = keys[randomInt(rng, 0, keys.length - 1)];
        await tier.delete(key);
        live.delete(key);
      }
      const footprintSumBytes = [...live.values()].reduce((sum, b) => sum + tier.footprintBytes(b.data.length), 0);
      assert.equal(tier.stats().usedBytes, footprintSumBytes, `usage after op ${op}`);
      assert.equal(tier.stats().blocks, live.size);
      assert.equal(tier.freeBytes() + tier.stats().usedBytes, tier.capacityBytes);
      if (op % 200 === 0) {
        assertAllocatorSound(tier);
        const sample = [...live.values()][randomInt(rng, 0, live.size - 1)];
        if (sample !== undefined) assert.ok((await readWhole(tier, sample.key)).equals(sample.data));
      }
    }
    assert.ok(refused > 0, 'the stress ran the tier full at least once');
    assertAllocatorSound(tier);
    assertStatsConsistent(tier);
    for (const block of live.values()) await assertStored(tier, block);
    const fragmented = [...live.keys()].filter((k) => (tier.extentsOf(k)?.length ?? 0) > 1);
    assert.ok(fragmented.length > 0, 'some blocks were placed in several extents');
  });

  it('rejects bad offsets, keys and sizes with EINVAL', async function () {
    await assertRejectsBadInput(await open(64 * KiB));
  });

  it('refuses every call after close with EBUSY', async function () {
    const tier = await open(64 * KiB);
    const block = randomBlock(10);
    await tier.write(block.key, block.data);
    await tier.close();
    await assertClosed(tier);
    assert.throws(() => tier.extentsOf(block.key), (e: unknown) => e instanceof CascadeError && e.code === 'EBUSY');
  });
});

describe('ExtentAllocator', function () {
  it('allocates nothing for 0 pages and refuses more than is free', function () {
    const allocator = new ExtentAllocator(10);
    assert.deepEqual(allocator.allocate(0), []);
    assert.equal(allocator.allocate(11), undefined);
    assert.equal(allocator.freePages, 10);
    assert.deepEqual(allocator.allocate(10), [{ startPage: 0, pageCount: 10 }]);
    assert.equal(allocator.allocate(1), undefined);
    assert.deepEqual(allocator.freeExtents(), []);
  });

  it('takes the largest extents when none is big enough, and crashes on a double free', function () {
    const allocator = new ExtentAllocator(20);
    const pieces = [2, 1, 3, 1, 4, 1, 5, 3].map((n) => allocator.allocate(n) ?? []);
    assert.equal(allocator.freePages, 0);
    for (const i of [0, 2, 4, 6]) allocator.release(pieces[i]); // free runs of 2, 3, 4, 5
    const got = allocator.allocate(10) ?? [];
    // 5 + 4 + 1 of the 3: the fewest pieces.
    assert.deepEqual(got, [
      { startPage: 3, pageCount: 1 },
      { startPage: 7, pageCount: 4 },
      { startPage: 12, pageCount: 5 },
    ]);
    assert.deepEqual(allocator.freeExtents(), [
      { startPage: 0, pageCount: 2 },
      { startPage: 4, pageCount: 2 },
    ]);
    allocator.release(got);
    assert.throws(() => allocator.release(got), /double free/);
  });
});

describe('ShmArenaTier: huge pages', () => {
  it('backs the arena with a private huge-page tmpfs that leaves no mount behind', async function () {
    if (process.getuid?.() !== 0) this.skip(); // mounting a tmpfs needs CAP_SYS_ADMIN
    const tier = await ShmArenaTier.open({ capacityBytes: 8 * 1024 * 1024, hugePages: true, prefault: true });
    try {
      assert.equal(tier.hugePages, true);
      assert.ok(!fs.readFileSync('/proc/mounts', 'utf8').includes('cascade-arena'), 'the mount is detached at once');
      const data = Buffer.alloc(3 * 1024 * 1024 + 5, 0x5a);
      const key = createHash('sha256').update(data).digest('hex');
      await tier.write(key, data);
      const out = Buffer.alloc(data.length);
      assert.equal(await tier.read(key, 0, out), data.length);
      assert.ok(out.equals(data));
    } finally {
      await tier.close();
    }
  });

  it("'auto' falls back to the given directory when huge pages are off", async () => {
    const tier = await ShmArenaTier.open({ capacityBytes: 1024 * 1024, hugePages: false });
    assert.equal(tier.hugePages, false);
    await tier.close();
  });
});

describe('NativeArenaTier: prefault', () => {
  it('reserves the whole arena at open: one larger than its tmpfs fails there with ENOSPC (no SIGBUS later), and the page tables fill in the background', async function () {
    if (process.getuid?.() !== 0) this.skip(); // mounting a tmpfs needs CAP_SYS_ADMIN
    const { NativeArenaTier } = await import('../../store/tiers/native-dram');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-small-tmpfs-'));
    const { spawnSync } = await import('node:child_process');
    const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', dir], { encoding: 'utf8' });
    if (m.status !== 0) this.skip(); // no mount(8) or not allowed here
    try {
      await assert.rejects(NativeArenaTier.open({ capacityBytes: 64 * MiB, dir, prefault: true }), (e: unknown) => e instanceof CascadeError && e.code === 'ENOSPC');
      assert.deepEqual(fs.readdirSync(dir), [], 'nothing left in the tmpfs');
      const tier = await NativeArenaTier.open({ capacityBytes: 8 * MiB, dir, prefault: true });
      try {
        const deadline = Date.now() + 10_000;
        while ((tier.stats().prefaultedBytes ?? 0) < 8 * MiB && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
        assert.equal(tier.stats().prefaultedBytes, 8 * MiB);
      } finally {
        await tier.close();
      }
    } finally {
      spawnSync('umount', [dir]);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

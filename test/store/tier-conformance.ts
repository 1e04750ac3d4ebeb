/**
 * The one suite every Tier implementation runs (see store/tier.ts). It reasons about room through
 * tier.footprintBytes and tier.freeBytes only, never assuming footprint == size, and skips the capacity
 * tests for tiers too large to fill cheaply (Infinity included).
 */
import * as assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { KiB, MiB } from '../../store/constants';
import { isCascadeError, type ErrorCode } from '../../store/errors';
import type { Tier, TierEntry } from '../../store/tier';
import { seededRandom } from '../../store/faults';

/** Capacity asked for when a test only needs room. */
const ROOMY_CAPACITY_BYTES = 32 * MiB;
/** Capacity asked for by tests that fill the tier. */
const SMALL_CAPACITY_BYTES = 1 * MiB;
/** Room the range test leaves unfilled before it fragments the tier. */
const RANGE_TEST_RESERVE_BYTES = 128 * KiB;
/** Capacity tests are skipped above this: filling the tier would be too slow. */
const CAPACITY_TEST_MAX_BYTES = 64 * MiB;

export interface TestBlock {
  key: string;
  data: Buffer;
}

export function sha256Hex(data: Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Random bytes keyed by their real SHA-256. */
export function randomBlock(sizeBytes: number): TestBlock {
  const data = randomBytes(sizeBytes);
  return { key: sha256Hex(data), data };
}

/** The store's seeded PRNG (mulberry32), so that failures reproduce. */
export { seededRandom };

/** Integer in [lo, hi]. */
export function randomInt(rng: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rng() * (hi - lo + 1));
}

export async function rejectsWith(promise: Promise<unknown>, code: ErrorCode): Promise<void> {
  await assert.rejects(promise, (e: unknown) => {
    assert.ok(isCascadeError(e, code), `expected CascadeError ${code}, got ${String(e)}`);
    return true;
  });
}

/** The whole block, checking that read reports its full size. */
export async function readWhole(tier: Tier, key: string): Promise<Buffer> {
  const sizeBytes = tier.sizeOf(key);
  assert.notEqual(sizeBytes, undefined, `block ${key} is present`);
  const target = Buffer.alloc(sizeBytes ?? 0);
  assert.equal(await tier.read(key, 0, target), target.length);
  return target;
}

export async function assertStored(tier: Tier, block: TestBlock): Promise<void> {
  assert.ok(tier.has(block.key), `has(${block.key.slice(0, 8)})`);
  assert.equal(tier.sizeOf(block.key), block.data.length);
  const stored = await readWhole(tier, block.key);
  assert.ok(stored.equals(block.data), `bytes of ${block.key.slice(0, 8)} (${block.data.length} bytes) read back exact`);
}

export async function assertAbsent(tier: Tier, key: string): Promise<void> {
  assert.equal(tier.has(key), false);
  assert.equal(tier.sizeOf(key), undefined);
  assert.ok(!tier.scan().some((e) => e.key === key), 'absent key is not scanned');
  await rejectsWith(tier.read(key, 0, Buffer.alloc(1)), 'ENOENT');
}

/** stats() agrees with scan(), and usage is the sum of footprints of live blocks. */
export function assertStatsConsistent(tier: Tier): void {
  const entries = tier.scan();
  const stats = tier.stats();
  assert.equal(stats.name, tier.name);
  assert.equal(stats.capacityBytes, tier.capacityBytes);
  assert.equal(stats.blocks, entries.length);
  assert.equal(new Set(entries.map((e) => e.key)).size, entries.length, 'scan lists each key once');
  for (const e of entries) assert.equal(tier.sizeOf(e.key), e.sizeBytes);
  const footprintSumBytes = entries.reduce((sum, e) => sum + tier.footprintBytes(e.sizeBytes), 0);
  assert.equal(stats.usedBytes, footprintSumBytes, 'usedBytes is the sum of footprints of live blocks');
  const freeBytes = tier.freeBytes();
  assert.ok(freeBytes >= 0, 'free bytes are not negative');
  if (Number.isFinite(tier.capacityBytes)) {
    assert.ok(freeBytes <= tier.capacityBytes - stats.usedBytes, 'free bytes never exceed capacity minus usage');
  }
}

function sortedScan(tier: Tier): TierEntry[] {
  return tier.scan().sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

function expectedScan(blocks: Iterable<TestBlock>): TierEntry[] {
  return Array.from(blocks, (b) => ({ key: b.key, sizeBytes: b.data.length })).sort((a, b) =>
    a.key < b.key ? -1 : a.key > b.key ? 1 : 0,
  );
}

/** Largest size whose footprint fits in `roomBytes` (footprint is monotone in size). */
function largestFitting(tier: Tier, roomBytes: number): number {
  if (tier.footprintBytes(0) > roomBytes) return -1;
  let lo = 0;
  let hi = roomBytes;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (tier.footprintBytes(mid) <= roomBytes) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** The largest block the tier takes now: by fits() where it has it (room may be in pieces), else by free bytes. */
function largestWritable(tier: Tier): number {
  const fits = tier.fits?.bind(tier);
  if (!fits) return largestFitting(tier, tier.freeBytes());
  let lo = 0;
  let hi = tier.freeBytes();
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

function isFillable(tier: Tier): boolean {
  return Number.isFinite(tier.capacityBytes) && tier.capacityBytes <= CAPACITY_TEST_MAX_BYTES;
}

export function tierConformance(label: string, make: (capacityBytes: number) => Promise<Tier>): void {
  describe(`Tier conformance: ${label}`, function () {
    let opened: Tier[] = [];

    async function fresh(capacityBytes: number = ROOMY_CAPACITY_BYTES): Promise<Tier> {
      const tier = await make(capacityBytes);
      opened.push(tier);
      return tier;
    }

    afterEach(async function () {
      for (const tier of opened) await tier.close(); // close after a test's own close: idempotent
      opened = [];
    });

    /** Write `sizeBytes`-byte blocks while their footprint fits, leaving `reserveBytes` free; returns them. */
    async function fill(tier: Tier, sizeBytes: number, reserveBytes = 0): Promise<TestBlock[]> {
      const written: TestBlock[] = [];
      while (tier.footprintBytes(sizeBytes) + reserveBytes <= tier.freeBytes()) {
        assert.ok(written.length < 100_000, 'fill terminates');
        const block = randomBlock(sizeBytes);
        await tier.write(block.key, block.data);
        written.push(block);
      }
      return written;
    }

    it('starts empty', async function () {
      const tier = await fresh();
      assert.deepEqual(tier.scan(), []);
      assert.equal(tier.stats().blocks, 0);
      assert.equal(tier.stats().usedBytes, 0);
      assert.equal(typeof tier.persistent, 'boolean');
      if (Number.isFinite(tier.capacityBytes)) assert.ok(tier.freeBytes() <= tier.capacityBytes);
      await assertAbsent(tier, randomBlock(10).key);
      assertStatsConsistent(tier);
    });

    it('round-trips blocks of 0, 1, 4095, 4096, 65537 and 3 MiB + 7 bytes byte-exact', async function () {
      const tier = await fresh();
      const blocks = [0, 1, 4095, 4096, 65537, 3 * MiB + 7].map(randomBlock);
      for (const block of blocks) {
        await tier.write(block.key, block.data);
        await assertStored(tier, block);
      }
      // Read everything again once all are written: a later write must not clobber an earlier block.
      for (const block of blocks) await assertStored(tier, block);
      for (const block of blocks) {
        // A larger target is filled up to the block end and no further.
        const target = Buffer.alloc(block.data.length + 100, 0xa5);
        assert.equal(await tier.read(block.key, 0, target), block.data.length);
        assert.ok(target.subarray(0, block.data.length).equals(block.data));
        assert.ok(target.subarray(block.data.length).every((b) => b === 0xa5), 'bytes past the block end untouched');
      }
      assert.deepEqual(sortedScan(tier), expectedScan(blocks));
      assertStatsConsistent(tier);
    });

    it('serves range reads at any offset, across page and extent boundaries, clipped at the end', async function () {
      // Fragment the tier first (fill with small blocks, free every other one) so that a tier with
      // pages has to place the big block in many pieces. The fill leaves some room, so that a tier that
      // reclaims deleted space lazily still has room for the big block.
      const tier = await fresh(SMALL_CAPACITY_BYTES);
      const small = isFillable(tier)
        ? await fill(tier, 4 * KiB, RANGE_TEST_RESERVE_BYTES)
        : await Promise.all(Array.from({ length: 64 }, async () => {
            const block = randomBlock(4 * KiB);
            await tier.write(block.key, block.data);
            return block;
          }));
      const survivors: TestBlock[] = [];
      for (let i = 0; i < small.length; i++) {
        if (i % 2 === 0) await tier.delete(small[i].key);
        else survivors.push(small[i]);
      }
      const bigBytes = isFillable(tier) ? largestWritable(tier) - 3 : 200 * KiB + 123;
      assert.ok(bigBytes > 70 * KiB, `room for a multi-page block after fragmenting (${bigBytes} bytes)`);
      const big = randomBlock(bigBytes);
      await tier.write(big.key, big.data);
      await assertStored(tier, big);
      for (const block of survivors) await assertStored(tier, block);

      const size = big.data.length;
      const ranges: Array<[offsetBytes: number, lengthBytes: number]> = [
        [0, 100], [0, size], [1, 4095], [4090, 20], [4096, 4096], [8191, 2],
        [65530, 20], [65536, 65536 + 7], [size - 10, 100], [size - 1, 1], [size - 4097, 4097],
        [size, 10], [size + 1, 10], [size + MiB, 10], [100, 0], [size, 0],
      ];
      const rng = seededRandom(0xc0ffee);
      for (let i = 0; i < 300; i++) ranges.push([randomInt(rng, 0, size + 10), randomInt(rng, 0, 3 * 4096 + 17)]);
      for (const [offsetBytes, lengthBytes] of ranges) {
        const target = Buffer.alloc(lengthBytes, 0xa5);
        const expectedBytes = Math.max(0, Math.min(lengthBytes, size - offsetBytes));
        const n = await tier.read(big.key, offsetBytes, target);
        assert.equal(n, expectedBytes, `count for [${offsetBytes}, +${lengthBytes})`);
        assert.ok(target.subarray(0, n).equals(big.data.subarray(offsetBytes, offsetBytes + n)), `bytes at [${offsetBytes}, +${n})`);
        assert.ok(target.subarray(n).every((b) => b === 0xa5), `target past ${n} untouched`);
      }

      // A target that is a view into a larger buffer: only the view is written.
      const backing = Buffer.alloc(1000, 0x5a);
      const view = new Uint8Array(backing.buffer, backing.byteOffset + 100, 100);
      assert.equal(await tier.read(big.key, 5000, view), 100);
      assert.ok(Buffer.from(view).equals(big.data.subarray(5000, 5100)));
      assert.ok(backing.subarray(0, 100).every((b) => b === 0x5a) && backing.subarray(200).every((b) => b === 0x5a));
      assertStatsConsistent(tier);
    });

    it('keeps has, sizeOf and scan consistent', async function () {
      const tier = await fresh();
      const blocks = [0, 1, 10, 4096, 5000, 70_000, 123_457].map(randomBlock);
      for (const block of blocks) await tier.write(block.key, block.data);
      assert.deepEqual(sortedScan(tier), expectedScan(blocks));
      for (const block of blocks) {
        assert.equal(tier.has(block.key), true);
        assert.equal(tier.sizeOf(block.key), block.data.length);
      }
      const [gone, kept] = [blocks.filter((_, i) => i % 3 === 0), blocks.filter((_, i) => i % 3 !== 0)];
      for (const block of gone) await tier.delete(block.key);
      assert.deepEqual(sortedScan(tier), expectedScan(kept));
      for (const block of gone) await assertAbsent(tier, block.key);
      for (const block of kept) await assertStored(tier, block);
      assertStatsConsistent(tier);
    });

    it('treats a write of a present key as a no-op', async function () {
      const tier = await fresh();
      const block = randomBlock(10_000);
      await tier.write(block.key, block.data);
      // The arena's prefault thread runs on meanwhile: its progress is no part of what a write changed.
      const state = () => {
        const { prefaultedBytes: _, ...stats } = tier.stats() as { prefaultedBytes?: number };
        return { stats, free: tier.freeBytes(), scan: sortedScan(tier) };
      };
      const before = state();
      await tier.write(block.key, Buffer.from(block.data));
      // Different bytes under the same key are not stored either: the key names the first content.
      await tier.write(block.key, randomBytes(10_000));
      await tier.write(block.key, randomBytes(20_000));
      await tier.write(block.key, Buffer.alloc(0));
      assert.deepEqual(state(), before);
      await assertStored(tier, block);
      assertStatsConsistent(tier);
    });

    it('deletes blocks; deleting an absent key is a no-op', async function () {
      const tier = await fresh();
      const [a, b, empty] = [randomBlock(50_000), randomBlock(7), randomBlock(0)];
      for (const block of [a, b, empty]) await tier.write(block.key, block.data);
      const usedBeforeBytes = tier.stats().usedBytes;
      await tier.delete(a.key);
      await assertAbsent(tier, a.key);
      assert.equal(tier.stats().blocks, 2);
      assert.equal(tier.stats().usedBytes, usedBeforeBytes - tier.footprintBytes(a.data.length));
      await tier.delete(a.key); // twice
      await tier.delete(randomBlock(3).key); // never written
      await tier.delete(empty.key);
      await assertAbsent(tier, empty.key);
      await assertStored(tier, b);
      assert.deepEqual(sortedScan(tier), expectedScan([b]));
      // A deleted key can be written again.
      await tier.write(a.key, a.data);
      await assertStored(tier, a);
      assertStatsConsistent(tier);
    });

    it('keeps 100+ blocks of random sizes exact through interleaved deletes', async function () {
      const tier = await fresh();
      const rng = seededRandom(42);
      const live = new Map<string, TestBlock>();
      const deleted: string[] = [];
      const randomSize = (): number => {
        const r = rng();
        if (r < 0.1) return 0;
        if (r < 0.3) return 4096 * randomInt(rng, 1, 8); // exact page multiples
        return randomInt(rng, 1, 80 * KiB);
      };
      const deleteRandom = async (): Promise<void> => {
        const keys = [...live.keys()];
        const key = keys[randomInt(rng, 0, keys.length - 1)];
        await tier.delete(key);
        live.delete(key);
        deleted.push(key);
      };
      for (let round = 0; round < 2; round++) {
        for (let i = 0; i < (round === 0 ? 100 : 40); i++) {
          const block = randomBlock(randomSize());
          await tier.write(block.key, block.data);
          live.set(block.key, block);
          if (rng() < 0.3) await deleteRandom();
        }
        for (const block of live.values()) await assertStored(tier, block);
        for (const key of deleted) if (!live.has(key)) await assertAbsent(tier, key);
        assert.deepEqual(sortedScan(tier), expectedScan(live.values()));
        assertStatsConsistent(tier);
      }
    });

    it('handles concurrent writes and reads', async function () {
      const tier = await fresh();
      const blocks = Array.from({ length: 24 }, (_, i) => randomBlock(i * 3001));
      await Promise.all(blocks.map((b) => tier.write(b.key, b.data)));
      const stored = await Promise.all(blocks.map((b) => readWhole(tier, b.key)));
      stored.forEach((bytes, i) => assert.ok(bytes.equals(blocks[i].data), `block ${i}`));
      await Promise.all(blocks.filter((_, i) => i % 2 === 0).map((b) => tier.delete(b.key)));
      assert.deepEqual(sortedScan(tier), expectedScan(blocks.filter((_, i) => i % 2 === 1)));
      assertStatsConsistent(tier);
    });

    it('copies on write: the caller may reuse its buffer', async function () {
      const tier = await fresh();
      const block = randomBlock(100_000);
      const scratch = Buffer.from(block.data);
      await tier.write(block.key, scratch);
      scratch.fill(0);
      await assertStored(tier, block);

      // A view with a non-zero byteOffset into a larger buffer: exactly the view's bytes are stored.
      const backing = randomBytes(30_000);
      const view = new Uint8Array(backing.buffer, backing.byteOffset + 1234, 20_000);
      const viewed = { key: sha256Hex(view), data: Buffer.from(view) };
      await tier.write(viewed.key, view);
      backing.fill(7);
      await assertStored(tier, viewed);

      // Nor does mutating a read target reach the stored bytes.
      const target = await readWhole(tier, block.key);
      target.fill(1);
      await assertStored(tier, block);
      assertStatsConsistent(tier);
    });

    it('rejects a write past capacity with ENOSPC and leaves no trace', async function () {
      const tier = await fresh(SMALL_CAPACITY_BYTES);
      if (!isFillable(tier)) this.skip();
      const blockBytes = 100_000; // not a page multiple
      const written = await fill(tier, blockBytes);
      assert.ok(written.length >= 2, 'the small tier holds a few blocks');
      const before = { stats: tier.stats(), free: tier.freeBytes(), scan: sortedScan(tier) };
      assert.ok(tier.footprintBytes(blockBytes) > before.free);

      const refused = randomBlock(blockBytes);
      await rejectsWith(tier.write(refused.key, refused.data), 'ENOSPC');
      await assertAbsent(tier, refused.key);
      const tooBig = randomBlock(tier.capacityBytes + 1);
      await rejectsWith(tier.write(tooBig.key, tooBig.data), 'ENOSPC');
      await assertAbsent(tier, tooBig.key);
      assert.deepEqual({ stats: tier.stats(), free: tier.freeBytes(), scan: sortedScan(tier) }, before);

      // A present key is a no-op even when the tier is full.
      await tier.write(written[0].key, written[0].data);
      for (const block of written) await assertStored(tier, block);
      assertStatsConsistent(tier);
    });

    it('reuses room freed by deletes', async function () {
      const tier = await fresh(SMALL_CAPACITY_BYTES);
      if (!isFillable(tier)) this.skip();
      const blockBytes = 100_000;
      const first = await fill(tier, blockBytes);
      const refused = randomBlock(blockBytes);
      await rejectsWith(tier.write(refused.key, refused.data), 'ENOSPC');
      await tier.delete(first[0].key);
      if (tier.reclaimsOnDelete) {
        await tier.write(refused.key, refused.data);
        await assertStored(tier, refused);
      } else {
        // A log-structured tier reclaims later; the freed room must not show as used meanwhile.
        await tier.sync();
        await tier.write(refused.key, refused.data).catch((e) => assert.ok(isCascadeError(e, 'ENOSPC'), String(e)));
      }

      // Emptied completely, the tier takes as many blocks again: no room leaks.
      for (const block of [...first.slice(1), refused]) await tier.delete(block.key);
      await tier.sync(); // lets a log-structured tier finish dropping its emptied segments
      assert.equal(tier.stats().usedBytes, 0);
      const second = await fill(tier, blockBytes);
      assert.equal(second.length, first.length);
      for (const block of second) await assertStored(tier, block);
      assertStatsConsistent(tier);
    });

    it('stores a block that takes exactly the free room, then refuses one more byte', async function () {
      const tier = await fresh(SMALL_CAPACITY_BYTES);
      if (!isFillable(tier)) this.skip();
      const exactBytes = largestFitting(tier, tier.freeBytes());
      assert.ok(exactBytes > 0);
      const block = randomBlock(exactBytes);
      await tier.write(block.key, block.data);
      await assertStored(tier, block);
      const extra = randomBlock(largestFitting(tier, tier.freeBytes()) + 1);
      await rejectsWith(tier.write(extra.key, extra.data), 'ENOSPC');
      await assertAbsent(tier, extra.key);
      assertStatsConsistent(tier);
    });

    it('syncs, and closes idempotently', async function () {
      const tier = await fresh();
      const block = randomBlock(1000);
      await tier.write(block.key, block.data);
      await tier.sync();
      await assertStored(tier, block);
      await tier.close();
      await tier.close();
    });
  });
}

/**
 * Storage faults injected under the disk tier (store/faults.ts): failed reads, writes (EIO and ENOSPC)
 * and fdatasyncs. Never wrong bytes, never an acknowledged sync that was not durable, the old version
 * intact, and the store usable again once the faults stop. Then a seeded random soak against a model.
 */
import * as assert from 'node:assert/strict';
import { MiB } from '../../store/constants';
import { isCascadeError } from '../../store/errors';
import { FaultyDiskIo, parseFailpoints } from '../../store/faults';
import { Store } from '../../store/store';
import { DiskSegmentTier, realDiskIo } from '../../store/tiers/disk';
import { MemoryTier } from '../../store/tiers/memory';
import { rejectsWith, rmDir, seededBytes, tmpDir } from './helpers';

const BLOCK = 256 * 1024;

describe('storage fault injection', function () {
  this.timeout(60_000);
  let dir: string;
  let store: Store | undefined;
  let io: FaultyDiskIo;

  /** DRAM of `dramBlocks` blocks (in memory), the disk tier over the faulty I/O. */
  async function open(dramBlocks: number, pinQuotaBytes?: number): Promise<Store> {
    io = new FaultyDiskIo(realDiskIo, {}, 7);
    const disk = await DiskSegmentTier.open({ dir, io });
    store = await Store.open({
      dataDir: dir,
      dramCapacityBytes: 0,
      tiers: { dram: new MemoryTier({ name: 'dram', capacityBytes: dramBlocks * BLOCK }), disk },
      dramWatermarks: { low: 0, high: 0 },
      pinQuotaBytes,
      log: () => undefined,
    });
    return store;
  }
  async function reopen(): Promise<Store> {
    await store?.close();
    store = await Store.open({ dataDir: dir, dramCapacityBytes: 16 * MiB, dram: 'memory', log: () => undefined });
    return store;
  }

  beforeEach(() => (dir = tmpDir('faults')));
  afterEach(async () => {
    await store?.close().catch(() => undefined);
    store = undefined;
    rmDir(dir);
  });

  it('parses specs and refuses bad ones', function () {
    assert.deepEqual(parseFailpoints('disk.read=EIO@0.3, disk.fdatasync=EIO#2'), {
      'disk.read': { errno: 'EIO', probability: 0.3, remaining: Infinity },
      'disk.fdatasync': { errno: 'EIO', probability: 1, remaining: 2 },
    });
    for (const bad of ['disk.read', 'disk.read=EIO@0', 'disk.read=EIO@1.5', 'net.read=EIO', 'disk.read=EPERM', 'disk.read=EIO,disk.read=EIO']) {
      assert.throws(() => parseFailpoints(bad), (e: unknown) => isCascadeError(e, 'EINVAL'), bad);
    }
  });

  it('a failed disk read is EIO, never wrong bytes; the next read succeeds', async function () {
    const s = await open(1);
    const blocks = [0, 1, 2, 3].map((i) => seededBytes(i, BLOCK));
    for (let i = 0; i < blocks.length; i++) await s.put(`m/b${i}`, blocks[i]);
    await s.syncAll(); // durable, so b0..b2 may leave DRAM
    io.rules = { 'disk.read': { errno: 'EIO', probability: 1, remaining: 1 } };
    await rejectsWith(() => s.get('m/b0'), 'EIO');
    assert.ok((await s.get('m/b0')).equals(blocks[0]), 'the record was fine: the next read serves it');
    io.rules = { 'disk.read': { errno: 'EIO', probability: 0.5, remaining: Infinity } };
    let failed = 0;
    for (let round = 0; round < 40; round++) {
      const i = round % 3;
      try {
        assert.ok((await s.get(`m/b${i}`)).equals(blocks[i]), 'exact bytes or an error');
      } catch (e) {
        if (!isCascadeError(e, 'EIO')) throw e;
        failed++;
      }
      await s.put(`m/x${round}`, seededBytes(1000 + round, BLOCK)); // keep pushing b0..b2 out of DRAM
      await s.syncAll().catch(() => undefined);
    }
    assert.ok(failed > 0 && io.injected['disk.read'] > 0, `faults reached the reads (${failed})`);
  });

  it('failed writes: the sync is refused (EIO, or ENOSPC from a full filesystem), the old version stays, and a later sync succeeds', async function () {
    const s = await open(8);
    const v1 = seededBytes(10, BLOCK);
    await s.put('m/a', v1);
    await s.sync('m/a');
    for (const errno of ['EIO', 'ENOSPC'] as const) {
      const v2 = seededBytes(errno === 'EIO' ? 11 : 12, BLOCK);
      io.rules = { 'disk.write': { errno, probability: 1, remaining: Infinity } };
      await s.put('m/a', v2); // in DRAM: accepted, not yet durable
      await rejectsWith(() => s.sync('m/a'), errno);
      assert.ok((await s.get('m/a')).equals(v2), 'readers see the new version from DRAM meanwhile');
      assert.ok((await s.get('m/a', { version: 1 })).equals(v1), 'the old version intact');
      io.rules = {};
      await s.sync('m/a');
    }
    const last = seededBytes(12, BLOCK);
    await reopen();
    assert.ok((await store!.get('m/a')).equals(last), 'what was finally synced survives a reopen');
    assert.ok((await store!.get('m/a', { version: 1 })).equals(v1));
  });

  it('a failed fdatasync is never acknowledged: past the one retry, sync fails, and nothing unsynced is half-visible after a reopen', async function () {
    const s = await open(8);
    const keep = seededBytes(20, BLOCK);
    await s.put('m/keep', keep);
    await s.sync('m/keep');
    io.rules = { 'disk.fdatasync': { errno: 'EIO', probability: 1, remaining: 2 } };
    const lost = seededBytes(21, BLOCK);
    await s.put('m/lost', lost);
    await rejectsWith(() => s.sync('m/lost'), 'EIO');
    assert.equal(io.injected['disk.fdatasync'], 2, 'the failure was retried once, elsewhere');
    // The faults are over: the same block is written again and synced.
    await s.sync('m/lost');
    await reopen();
    assert.ok((await store!.get('m/keep')).equals(keep));
    assert.ok((await store!.get('m/lost')).equals(lost));
  });

  it('a put written through to disk (DRAM full) returns only once durable: a failed fdatasync writes it again from the caller\'s buffer, a second fails the put', async function () {
    const s = await open(1, BLOCK);
    const pinned = seededBytes(30, BLOCK);
    await s.put('m/pinned', pinned);
    await s.pin('m/pinned'); // DRAM's one block can never make room
    await s.syncAll();
    const through = seededBytes(31, BLOCK);
    io.rules = { 'disk.fdatasync': { errno: 'EIO', probability: 1, remaining: 1 } };
    const before = (await s.stats()).demotions;
    await s.put('m/through', through);
    assert.equal((await s.stats()).demotions, before + 1, 'the put was written through, not held in DRAM');
    assert.equal(io.injected['disk.fdatasync'], 1, 'its first fdatasync failed');
    await s.sync('m/through'); // was lost for good here: no DRAM copy to write again from
    io.rules = { 'disk.fdatasync': { errno: 'EIO', probability: 1, remaining: 2 } };
    await rejectsWith(() => s.put('m/through', seededBytes(32, BLOCK)), 'EIO');
    assert.equal(io.injected['disk.fdatasync'], 3, 'one retry, then the put failed');
    io.rules = {};
    assert.ok((await s.get('m/through')).equals(through), 'the name keeps the content of the put that succeeded');
    await reopen();
    assert.ok((await store!.get('m/through')).equals(through), 'and it survives a reopen');
    assert.ok((await store!.get('m/pinned')).equals(pinned));
  });

  it('random faults on every disk call (seeded soak): 0 wrong bytes; every acknowledged sync survives a reopen', async function () {
    const s = await open(3);
    io.rules = parseFailpoints('disk.read=EIO@0.15,disk.write=EIO@0.1,disk.fdatasync=EIO@0.1');
    const written = new Map<string, Buffer[]>(); // every content ever put under a name
    const acked = new Map<string, Buffer>(); // the content a successful sync confirmed, while it is the last put
    let rng = 12345;
    const next = (n: number) => {
      rng = (Math.imul(rng, 1103515245) + 12345) >>> 0;
      return rng % n;
    };
    const counts = { puts: 0, putsFailed: 0, syncOk: 0, syncFailed: 0, readsOk: 0, readsFailed: 0 };
    for (let step = 0; step < 300; step++) {
      const name = `m/f${next(6)}`;
      const op = next(10);
      if (op < 4) {
        const data = seededBytes(step + 100, 1 + next(BLOCK));
        try {
          await s.put(name, data); // DRAM full of unsynced blocks: written through, so it can fail
        } catch (e) {
          if (!isCascadeError(e, 'EIO')) throw e;
          counts.putsFailed++; // refused: the name keeps its current content (checked by the reads)
          continue;
        }
        written.set(name, [...(written.get(name) ?? []), data]);
        acked.delete(name);
        counts.puts++;
      } else if (op < 6 && written.has(name)) {
        try {
          await s.sync(name);
          acked.set(name, written.get(name)!.at(-1)!);
          counts.syncOk++;
        } catch (e) {
          if (!isCascadeError(e, 'EIO')) throw e;
          counts.syncFailed++;
        }
      } else if (written.has(name)) {
        try {
          const got = await s.get(name);
          assert.ok(got.equals(written.get(name)!.at(-1)!), `${name}: the current version's exact bytes`);
          counts.readsOk++;
        } catch (e) {
          if (!isCascadeError(e, 'EIO')) throw e;
          counts.readsFailed++;
        }
      }
    }
    assert.ok(counts.syncFailed > 0 && counts.readsFailed > 0 && counts.syncOk > 0, JSON.stringify(counts));
    // Faults still on: every name synced until a sync is acknowledged (a few tries each).
    for (const [name, versions] of written) {
      for (let attempt = 0; attempt < 8 && !acked.has(name); attempt++) {
        try {
          await s.sync(name);
          acked.set(name, versions.at(-1)!);
        } catch (e) {
          if (!isCascadeError(e, 'EIO')) throw e;
        }
      }
    }
    // A put that returned is in DRAM or durable, so every name can be synced once the faults let it.
    assert.equal(acked.size, written.size, `every name acknowledged (${acked.size} of ${written.size})`);
    io.rules = {};
    await reopen();
    for (const [name, data] of acked) assert.ok((await store!.get(name)).equals(data), `${name}: acknowledged, so it survives`);
    for (const [name, versions] of written) {
      // Not acknowledged: any content once written under the name, or gone; never other bytes.
      try {
        const got = await store!.get(name);
        assert.ok(versions.some((v) => v.equals(got)), `${name}: bytes that were written under it`);
      } catch (e) {
        if (!isCascadeError(e, 'ENOENT')) throw e;
      }
    }
    console.log(`      fault soak: ${JSON.stringify({ ...counts, injected: io.injected, acked: acked.size })}`);
  });
});

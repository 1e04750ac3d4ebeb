import { strict as assert } from 'node:assert';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { MiB, RECORD_ALIGN_BYTES } from '../../store/constants';
import { Store, type StoreConfig } from '../../store/store';
import type { Tier } from '../../store/tier';
import { MemoryTier } from '../../store/tiers/memory';
import { DiskSegmentTier, DiskSyncError, realDiskIo, type DiskIo } from '../../store/tiers/disk';
import { NativeArenaTier } from '../../store/tiers/native-dram';
import { rejectsWith, rmDir, seededBytes, sha256, tmpDir } from './helpers';
import { nativeBinding } from '../../native';

const dirs: string[] = [];
after(() => dirs.forEach(rmDir));

function newDir(): string {
  const d = tmpDir('store');
  dirs.push(d);
  return d;
}

async function open(dataDir: string, extra: Partial<StoreConfig> = {}): Promise<Store> {
  return Store.open({ dataDir, dramCapacityBytes: 64 * MiB, prefault: false, ...extra });
}

/** Counts whole-block reads that reach the wrapped tier. */
function countingReads(tier: Tier): { tier: Tier; reads: () => number } {
  let reads = 0;
  const proxy = new Proxy(tier, {
    get(target, prop, receiver) {
      if (prop === 'read') {
        return (key: string, off: number, buf: Uint8Array) => {
          reads++;
          return target.read(key, off, buf);
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { tier: proxy, reads: () => reads };
}

describe('Store', function () {
  this.timeout(120_000);

  it('a block larger than a flush group (20 MiB) reaches disk in pieces, read back exact after a reopen', async () => {
    const dir = newDir();
    const disk = await DiskSegmentTier.open({ dir: path.join(dir, 'disk') });
    const calls = { writeMany: 0, write: 0, pieces: 0 };
    const counted = new Proxy(disk, {
      get(target, prop, receiver) {
        if (prop === 'write') return (key: string, data: Uint8Array) => (calls.write++, target.write(key, data));
        if (prop === 'writeMany') {
          return (blocks: Array<{ key: string; sizeBytes: number }>, fill: (k: string, t: Uint8Array, o: number) => Promise<void>) => (
            calls.writeMany++, target.writeMany(blocks, (k, t, o) => (calls.pieces++, fill(k, t, o)))
          );
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const store = await open(dir, { tiers: { disk: counted } });
    const big = seededBytes(77, 20 * MiB + 4321);
    const small = seededBytes(78, 5000);
    await store.put('m/big', big);
    await store.put('m/small', small);
    await store.syncAll();
    const s = await store.stats();
    assert.equal(s.dirtyBlocks, 0);
    const appended = s.diskAppends.directBytes + s.diskAppends.bufferedBytes;
    assert.equal(appended, 2 * RECORD_ALIGN_BYTES + Math.ceil(big.length / RECORD_ALIGN_BYTES) * RECORD_ALIGN_BYTES + RECORD_ALIGN_BYTES * 2);
    assert.equal(calls.write, 0, 'no block went through write() (a buffer of its own)');
    assert.ok(calls.pieces >= 1 + Math.ceil(big.length / (8 * MiB)), `the large block came in pieces (${calls.pieces} fills for 2 blocks)`);
    await store.close();
    const again = await open(dir, { tiers: { disk: await DiskSegmentTier.open({ dir: path.join(dir, 'disk') }) } });
    assert.ok((await again.get('m/big')).equals(big), 'the large block reads back from disk exact');
    assert.ok((await again.get('m/small')).equals(small));
    await again.close();
  });
  it('retention: 200 unique 1 MiB blocks through 50 MiB of DRAM all read back exact, DRAM within bound', async () => {
    const dir = newDir();
    const store = await open(dir, { dramCapacityBytes: 50 * MiB });
    for (let i = 0; i < 200; i++) await store.put(`m/block-${i}`, seededBytes(i + 1, MiB));
    for (let i = 0; i < 200; i++) {
      const got = await store.get(`m/block-${i}`);
      assert.ok(got.equals(seededBytes(i + 1, MiB)), `block ${i} byte-exact`);
      const dram = store.dram.stats();
      assert.ok(dram.usedBytes <= 50 * MiB, `DRAM ${dram.usedBytes} within 50 MiB`);
    }
    const s = await store.stats();
    assert.ok(s.evictions > 0, 'DRAM evicted to make room');
    assert.ok(s.hits.disk > 0, 'some reads came from disk');
    assert.equal(s.tiers[1].blocks, 200, 'every block reached disk');
    await store.close();
  });

  it('small blocks packed: 4 MiB of DRAM holds 1,024 blocks of 4 KiB (not 64 pages), slots within 2x the bytes, all read back', async function () {
    if (!nativeBinding()) this.skip();
    const store = await open(newDir(), { dramCapacityBytes: 4 * MiB, dram: 'native', dramWatermarks: { low: 0, high: 0 } });
    for (let i = 0; i < 1024; i++) await store.put(`m/small-${i}`, seededBytes(5000 + i, 4096));
    await store.idle();
    let s = await store.stats();
    assert.equal(s.tiers[0].blocks, 1024, 'every block stayed in DRAM');
    assert.equal(s.evictions, 0);
    assert.equal(s.tiers[0].blockBytes, 1024 * 4096);
    assert.equal(s.tiers[0].slotBytes, 1024 * 4096, 'no padding for 4 KiB blocks');
    // Sizes between classes: every slot within 2x its block.
    for (let i = 0; i < 200; i++) await store.put(`m/odd-${i}`, seededBytes(9000 + i, 4097 + i * 97));
    s = await store.stats();
    assert.ok(s.tiers[0].slotBytes! <= 2 * s.tiers[0].blockBytes!, `slots ${s.tiers[0].slotBytes} within 2x ${s.tiers[0].blockBytes}`);
    for (let i = 0; i < 1024; i++) assert.ok((await store.get(`m/small-${i}`)).equals(seededBytes(5000 + i, 4096)));
    for (let i = 0; i < 200; i++) assert.ok((await store.get(`m/odd-${i}`)).equals(seededBytes(9000 + i, 4097 + i * 97)));
    await store.close();
  });

  it('watermarks: a full DRAM is kept at its free watermark in the background, so writes find room', async () => {
    const store = await open(newDir(), { dramCapacityBytes: 32 * MiB, dramWatermarks: { low: 0.2, high: 0.4 } });
    for (let i = 0; i < 96; i++) await store.put(`m/w-${i}`, seededBytes(7000 + i, MiB));
    await store.idle();
    const s = await store.stats();
    assert.ok(store.dram.freeBytes() >= 0.2 * 32 * MiB, `free ${store.dram.freeBytes()} at least the low watermark`);
    assert.ok(s.evictionsAhead > 0 && s.evictionsAhead <= s.evictions, `evictions ahead ${s.evictionsAhead} of ${s.evictions}`);
    for (let i = 0; i < 96; i++) assert.ok((await store.get(`m/w-${i}`)).equals(seededBytes(7000 + i, MiB)), `block ${i}`);
    await store.close();
    await rejectsWith(() => open(newDir(), { dramWatermarks: { low: 0.5, high: 0.2 } }), 'EINVAL');
  });

  it('concurrent puts racing for the last DRAM room all succeed (the loser writes through to disk)', async () => {
    const dir = newDir();
    const store = await open(dir, { tiers: { dram: new MemoryTier({ name: 'dram', capacityBytes: 1 * MiB }) }, dramWatermarks: { low: 0, high: 0 } });
    const blocks = [1, 2, 3, 4].map((i) => seededBytes(500 + i, 1 * MiB));
    // Hashes given: no hashing staggers the puts, so all of them ask for room before any writes.
    await Promise.all(blocks.map((b, i) => store.put(`m/race${i}`, b, sha256(b))));
    for (let i = 0; i < blocks.length; i++) assert.ok((await store.get(`m/race${i}`)).equals(blocks[i]));
    await store.close();
  });

  it('dedup: one 4 MiB content under 50 names is stored once per tier', async () => {
    const store = await open(newDir());
    const data = seededBytes(7, 4 * MiB);
    const models = ['llama', 'mistral'];
    for (let i = 0; i < 50; i++) await store.put(`${models[i % 2]}/sys/prompt-${i}`, data);
    await store.idle();
    const s = await store.stats();
    assert.equal(s.tiers[0].blocks, 1, 'one copy in DRAM');
    assert.equal(s.tiers[1].blocks, 1, 'one copy on disk');
    assert.equal(s.dedup.hits, 49);
    assert.equal(s.dedup.savedBytes, 49 * 4 * MiB);
    assert.equal(s.dedup.uniqueBytes, 4 * MiB);
    assert.equal(s.dedup.logicalBytes, 50 * 4 * MiB);
    assert.ok((await store.get('mistral/sys/prompt-49')).equals(data));
    await store.close();
  });

  it('versions by number and by time; trimming reclaims unreferenced content', async () => {
    let clock = 1_000_000;
    const store = await open(newDir(), { keepVersions: 3, nowMs: () => clock });
    const contents = [1, 2, 3, 4, 5].map((i) => seededBytes(100 + i, 3000 + i));
    for (const c of contents) {
      await store.put('m/a/b', c);
      clock += 1000;
    }
    const vs = await store.versions('m/a/b');
    assert.deepEqual(vs.map((v) => v.version), [3, 4, 5]);
    assert.ok((await store.get('m/a/b')).equals(contents[4]));
    assert.ok((await store.get('m/a/b', { version: 3 })).equals(contents[2]));
    assert.ok((await store.get('m/a/b', { atMs: 1_003_500 })).equals(contents[3]), 'version 4 was current at t+3.5s');
    assert.ok((await store.get('m/a/b', { atMs: 1_002_000 })).equals(contents[2]), 'a commit is current from its own time');
    await rejectsWith(() => store.get('m/a/b', { version: 1 }), 'ENOENT'); // trimmed
    await rejectsWith(() => store.get('m/a/b', { version: 6 }), 'ENOENT');
    await rejectsWith(() => store.get('m/a/b', { atMs: 999_999 }), 'ENOENT');
    await store.idle();
    const s = await store.stats();
    assert.equal(s.tiers[0].blocks, 3, 'trimmed versions left DRAM');
    assert.equal(s.tiers[1].blocks, 3, 'trimmed versions left disk');
    await store.close();
  });

  it('restart: everything persisted is found again, with versions and pins', async () => {
    const dir = newDir();
    let store = await open(dir);
    const blocks = Array.from({ length: 20 }, (_, i) => seededBytes(200 + i, 100_000 + i));
    for (let i = 0; i < 20; i++) await store.put(`m/r/${i}`, blocks[i]);
    await store.put('m/r/0', blocks[1]); // a second version
    await store.pin('m/r/5');
    await store.close();

    store = await open(dir);
    for (let i = 1; i < 20; i++) assert.ok((await store.get(`m/r/${i}`)).equals(blocks[i]), `m/r/${i}`);
    assert.ok((await store.get('m/r/0', { version: 1 })).equals(blocks[0]));
    assert.ok((await store.get('m/r/0')).equals(blocks[1]));
    const info = await store.stat('m/r/5');
    assert.equal(info.pinned, true);
    assert.equal(info.tier, 'dram', 'a pinned block is loaded into DRAM at open');
    assert.equal((await store.list('m/r/')).length, 20);
    await store.close();
  });

  it('concurrent gets of one disk block cause one disk read (single-flight), then it is promoted', async () => {
    const dir = newDir();
    let store = await open(dir);
    const data = seededBytes(9, 8 * MiB);
    await store.put('m/hot', data);
    await store.close();

    const disk = countingReads(await DiskSegmentTier.open({ dir }));
    store = await open(dir, { tiers: { disk: disk.tier } });
    assert.equal((await store.stat('m/hot')).tier, 'disk', 'after restart the block is only on disk');
    const results = await Promise.all(Array.from({ length: 16 }, () => store.get('m/hot')));
    assert.equal(disk.reads(), 1, '16 concurrent readers, one disk read');
    for (const r of results) assert.ok(r.equals(data));
    await store.idle();
    assert.equal((await store.stat('m/hot')).tier, 'dram', 'promoted by the mover after the read');
    await store.get('m/hot');
    assert.equal(disk.reads(), 1, 'later reads are DRAM hits');
    await store.close();
  });

  it('promotion waits for the configured number of disk reads', async () => {
    const dir = newDir();
    let store = await open(dir);
    await store.put('m/x', seededBytes(3, 100_000));
    await store.close();
    store = await open(dir, { promoteAfterReads: 3 });
    for (let i = 1; i <= 3; i++) {
      await store.get('m/x');
      await store.idle();
      assert.equal((await store.stat('m/x')).tier, i < 3 ? 'disk' : 'dram', `after ${i} reads`);
    }
    await store.close();
  });

  it('range reads return the right bytes from DRAM and from disk', async () => {
    const dir = newDir();
    let store = await open(dir);
    const data = seededBytes(11, 3 * MiB + 17);
    await store.put('m/range', data);
    const check = async () => {
      for (const [off, len] of [[0, 10], [MiB - 5, 128 * 1024], [3 * MiB, 100], [3 * MiB + 17, 10]]) {
        const buf = Buffer.alloc(len);
        const n = await store.read('m/range', off, buf);
        const want = data.subarray(off, off + len);
        assert.equal(n, want.length);
        assert.ok(buf.subarray(0, n).equals(want), `range ${off}+${len}`);
      }
    };
    await check();
    await store.close();
    store = await open(dir, { promoteAfterReads: 100 });
    await check();
    await store.close();
  });

  it('pins: quota enforced, pinned blocks survive DRAM pressure, unlink of a pinned name is refused', async () => {
    const store = await open(newDir(), { dramCapacityBytes: 16 * MiB }); // quota: 8 MiB
    await store.put('m/p1', seededBytes(1, 5 * MiB));
    await store.put('m/p2', seededBytes(2, 4 * MiB));
    await store.pin('m/p1');
    await rejectsWith(() => store.pin('m/p2'), 'EDQUOT');
    for (let i = 0; i < 20; i++) await store.put(`m/filler-${i}`, seededBytes(50 + i, MiB));
    await store.idle();
    assert.equal((await store.stat('m/p1')).tier, 'dram', 'pinned block never left DRAM');
    await rejectsWith(() => store.delete('m/p1'), 'EPERM');
    await store.unpin('m/p1');
    await store.pin('m/p2');
    await store.delete('m/p1');
    await rejectsWith(() => store.get('m/p1'), 'ENOENT');
    const s = await store.stats();
    assert.equal(s.pinned.bytes, 4 * MiB);
    await store.close();
  });

  it('bad input gets typed errors and changes nothing', async () => {
    const dir = newDir();
    const store = await open(dir, { dramCapacityBytes: 4 * MiB, diskCapacityBytes: 8 * MiB, maxBlockBytes: 16 * MiB });
    await store.put('m/ok', seededBytes(1, 1000));
    await rejectsWith(() => store.put('nomodel', Buffer.alloc(1)), 'EINVAL');
    await rejectsWith(() => store.put('m//x', Buffer.alloc(1)), 'EINVAL');
    await rejectsWith(() => store.put('m/../x', Buffer.alloc(1)), 'EINVAL');
    await rejectsWith(() => store.put(`m/${'a'.repeat(256)}`, Buffer.alloc(1)), 'ENAMETOOLONG');
    await store.put(`m/${'a'.repeat(255)}`, Buffer.alloc(1)); // exactly at the limit is fine
    await rejectsWith(() => store.put('m/big', Buffer.alloc(17 * MiB)), 'EINVAL');
    await rejectsWith(() => store.get('m/ok', { version: 2 }), 'ENOENT');
    await rejectsWith(() => store.get('m/ok', { version: 0 }), 'EINVAL');
    await rejectsWith(() => store.get('m/missing'), 'ENOENT');
    await rejectsWith(() => store.link('m/l', 'f'.repeat(64)), 'ENOENT');
    await rejectsWith(() => store.link('m/l', 'nothex'), 'EINVAL');
    const before = await store.stats();
    // Over capacity: 9 MiB fits neither DRAM (4 MiB) nor disk (8 MiB).
    await rejectsWith(() => store.put('m/huge', seededBytes(3, 9 * MiB)), 'ENOSPC');
    await rejectsWith(() => store.get('m/huge'), 'ENOENT');
    const after = await store.stats();
    assert.equal(after.versions, before.versions);
    assert.equal(after.tiers[0].usedBytes, before.tiers[0].usedBytes, 'nothing half-written in DRAM');
    await store.idle();
    assert.equal(store.disk.stats().blocks, 2, 'nothing half-written on disk');
    await store.close();
    await rejectsWith(() => store.get('m/ok'), 'EBUSY');
  });

  it('link and rename are atomic and move no data', async () => {
    const store = await open(newDir());
    const data = seededBytes(4, 2 * MiB);
    const v = await store.put('m/src', data);
    await store.link('m/linked', v.sha256);
    assert.ok((await store.get('m/linked')).equals(data));
    await store.put('m/dst', seededBytes(5, 1000));
    const r = await store.rename('m/src', 'm/dst');
    assert.equal(r.version, 2, 'rename over an existing name adds a version there');
    await rejectsWith(() => store.get('m/src'), 'ENOENT');
    assert.ok((await store.get('m/dst')).equals(data));
    await rejectsWith(() => store.rename('m/src', 'm/other'), 'ENOENT');
    const s = await store.stats();
    assert.equal(s.dedup.uniqueBytes, 2 * MiB + 1000);
    await store.close();
  });

  it('write-through to disk when DRAM is full of pinned blocks (demotion), nothing lost', async () => {
    const store = await open(newDir(), { dramCapacityBytes: 4 * MiB, pinQuotaBytes: 4 * MiB });
    await store.put('m/pin', seededBytes(1, 4 * MiB - 64 * 1024));
    await store.pin('m/pin');
    for (let i = 0; i < 5; i++) await store.put(`m/w${i}`, seededBytes(10 + i, MiB));
    const s = await store.stats();
    assert.equal(s.demotions, 5);
    for (let i = 0; i < 5; i++) assert.ok((await store.get(`m/w${i}`)).equals(seededBytes(10 + i, MiB)));
    await store.close();
  });

  it('sync survives an fdatasync failure by writing the block again elsewhere', async () => {
    const dir = newDir();
    let failures = 1;
    const io: DiskIo = {
      ...realDiskIo,
      fdatasync: (fd) =>
        failures-- > 0
          ? Promise.reject(Object.assign(new Error('injected EIO'), { code: 'EIO' }))
          : new Promise((res, rej) => fs.fdatasync(fd, (e) => (e ? rej(e) : res()))),
    };
    const disk = await DiskSegmentTier.open({ dir, io });
    let store = await open(dir, { tiers: { disk }, log: () => undefined });
    const data = seededBytes(21, 700_000);
    await store.put('m/durable', data);
    await store.sync('m/durable');
    assert.equal((await store.stats()).diskSyncFailures, 1);
    await store.close();
    store = await open(dir);
    assert.ok((await store.get('m/durable')).equals(data));
    await store.close();
  });

  it('a failed fdatasync inside a flush (a full segment sealed) loses nothing: blocks flushed earlier in the pass are written again', async () => {
    const dir = newDir();
    const real = await DiskSegmentTier.open({ dir });
    // The seal of a full segment fdatasyncs it; when that fails, the tier drops every unsynced key of
    // the segment, also those of an earlier group of the same flush pass (which the store counts as
    // written), and throws DiskSyncError. Here: the second grouped write since the last sync does that.
    let groupsSinceSync: string[][] = [];
    let injected = 0;
    const disk = new Proxy(real, {
      get(target, prop, receiver) {
        if (prop === 'sync') return () => ((groupsSinceSync = []), target.sync());
        if (prop === 'writeMany') {
          return async (blocks: Array<{ key: string; sizeBytes: number }>, fill: (key: string, t: Uint8Array) => Promise<void>) => {
            if (groupsSinceSync.length > 0 && injected === 0) {
              injected++;
              const lost = groupsSinceSync.flat();
              for (const k of lost) await target.delete(k);
              throw new DiskSyncError(lost, new Error('injected EIO'));
            }
            await target.writeMany(blocks, fill);
            groupsSinceSync.push(blocks.map((b) => b.key));
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    let store = await open(dir, { tiers: { disk }, log: () => undefined, dramCapacityBytes: 64 * MiB });
    const blocks = Array.from({ length: 16 }, (_, i) => seededBytes(4400 + i, MiB));
    // Hashes given: the puts land together, so one flush pass sees them all (4 MiB groups: several).
    await Promise.all(blocks.map((b, i) => store.put(`m/seal${i}`, b, sha256(b))));
    for (let i = 0; i < blocks.length; i++) await store.sync(`m/seal${i}`);
    assert.equal(injected, 1, 'a pass wrote two groups, and the second failed as a seal would');
    assert.ok((await store.stats()).diskSyncFailures >= 1);
    await store.close();
    // Every block sync acknowledged is on disk: a store reopened (DRAM empty) reads them all.
    store = await open(dir, { log: () => undefined });
    for (let i = 0; i < blocks.length; i++) assert.ok((await store.get(`m/seal${i}`)).equals(blocks[i]), `block ${i} survived`);
    await store.close();
  });

  it('never serves wrong bytes: a corrupted disk record gives ECORRUPT', async () => {
    const dir = newDir();
    let store = await open(dir);
    const data = seededBytes(33, 200_000);
    await store.put('m/c', data);
    await store.close();
    const seg = fs.readdirSync(path.join(dir, 'segments')).find((f) => f.endsWith('.log'))!;
    const fd = fs.openSync(path.join(dir, 'segments', seg), 'r+');
    fs.writeSync(fd, Buffer.from([data[5000] ^ 0x40]), 0, 1, RECORD_ALIGN_BYTES + 5000);
    fs.closeSync(fd);
    store = await open(dir, { log: () => undefined });
    await rejectsWith(() => store.get('m/c'), 'ECORRUPT');
    await rejectsWith(() => store.get('m/c'), 'EIO'); // quarantined: in no tier now
    await store.close();
  });

  it('a block the flusher is writing to disk is held from DRAM at once, not after the disk write', async function () {
    if (!nativeBinding()) this.skip();
    const dir = newDir();
    const real = await DiskSegmentTier.open({ dir });
    // The flusher's grouped write waits on a gate this test opens: the block's content lock stays
    // taken by the flush until then.
    let openGate!: () => void;
    const gate = new Promise<void>((r) => (openGate = r));
    let flushStarted!: () => void;
    const started = new Promise<void>((r) => (flushStarted = r));
    const disk = new Proxy(real, {
      get(target, prop, receiver) {
        if (prop === 'writeMany') {
          return async (blocks: Array<{ key: string; sizeBytes: number }>, fill: (key: string, t: Uint8Array, off: number) => Promise<void>) => {
            flushStarted();
            await gate;
            return target.writeMany(blocks, fill);
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const store = await open(dir, { dram: 'native', dramCapacityBytes: 32 * MiB, tiers: { disk }, log: () => undefined });
    try {
      const data = seededBytes(93, 3 * MiB + 5);
      await store.put('m/fresh', data);
      await started; // the flush of m/fresh has its lock and waits on the gate
      const v = await store.resolve('m/fresh');
      const outcome = await Promise.race([
        store.holdInDram(v).then((h) => ({ h })),
        new Promise<'waited'>((r) => setTimeout(() => r('waited'), 2000)),
      ]);
      assert.notEqual(outcome, 'waited', 'the hold did not wait for the disk write');
      const { h } = outcome as { h: Awaited<ReturnType<Store['holdInDram']>> };
      assert.equal(h.version.sha256, v.sha256);
      const arena = (store.dram as NativeArenaTier).arenaBinding()!;
      assert.equal(arena.describe(h.arenaHandle!).sizeBytes, data.length, 'the held block is the whole DRAM copy');
      assert.ok((await store.get('m/fresh')).equals(data), 'byte-exact while the flush waits');
      h.release();
      openGate();
      await store.sync('m/fresh');
    } finally {
      openGate();
      await store.close();
    }
  });

  it('a block loaded from disk into the native arena is read straight into its slot and hashed there; a damaged one is never served', async function () {
    if (!nativeBinding()) this.skip();
    const dir = newDir();
    const native = { dram: 'native' as const, dramCapacityBytes: 32 * MiB, log: () => undefined };
    let store = await open(dir, native);
    const data = seededBytes(91, 5 * MiB + 77);
    const small = seededBytes(92, 3000);
    await store.put('m/big', data);
    await store.put('m/small', small);
    await store.close();
    store = await open(dir, native); // DRAM starts empty: both blocks are on disk only
    const arena = (store.dram as NativeArenaTier).arenaBinding()!;
    let fills = 0;
    const fill = arena.fillRecordAsync.bind(arena);
    // The binding's methods are read-only on its prototype: shadow this one on the instance.
    Object.defineProperty(arena, 'fillRecordAsync', {
      value: (h: number, fd: number, off: number, sha: string, ahead: number) => (fills++, fill(h, fd, off, sha, ahead)),
    });
    for (const [name, bytes] of [['m/big', data], ['m/small', small]] as const) {
      const hits = { ...(await store.stats()).hits };
      // onLoading names the arena block being filled, before the hold (the load) ends.
      const announced: number[] = [];
      const hold = await store.holdInDram(await store.resolve(name), (h) => announced.push(h));
      assert.equal(announced.length, 1, 'the load was announced once');
      assert.equal(arena.describe(announced[0]).sizeBytes, bytes.length, 'with the block that now holds it');
      hold.release();
      assert.deepEqual((await store.stats()).hits, { ...hits, disk: hits.disk + 1 }, 'a hold that loads from disk is one disk hit');
      const again = await store.holdInDram(await store.resolve(name));
      again.release();
      assert.deepEqual((await store.stats()).hits, { ...hits, disk: hits.disk + 1, dram: hits.dram + 1 }, 'a hold of a block in DRAM is one DRAM hit');
      assert.equal((await store.stat(name)).tier, 'dram');
      assert.ok((await store.get(name)).equals(bytes), `${name} byte-exact`);
    }
    assert.equal(fills, 2, 'both loads went straight into the arena');
    await store.close();

    // One flipped payload byte: the load fails its piece's CRC-32C (5 MiB: 256 KiB pieces, the 17th),
    // nothing is kept or served.
    const seg = fs.readdirSync(path.join(dir, 'segments')).find((f) => f.endsWith('.log'))!;
    const fd = fs.openSync(path.join(dir, 'segments', seg), 'r+');
    fs.writeSync(fd, Buffer.from([data[4 * MiB] ^ 0x01]), 0, 1, RECORD_ALIGN_BYTES + 4 * MiB);
    fs.closeSync(fd);
    store = await open(dir, native);
    await assert.rejects(
      async () => (await store.holdInDram(await store.resolve('m/big'))).release(),
      (e: Error & { code?: string }) => e.code === 'ECORRUPT' && /piece 16 \(bytes 4194304-4456448\) fails its CRC-32C/.test(e.message),
    );
    assert.notEqual((await store.stat('m/big')).tier, 'dram');
    await rejectsWith(() => store.get('m/big'), 'EIO'); // quarantined: in no tier now
    assert.ok((await store.get('m/small')).equals(small), 'its neighbour is intact');
    await store.close();

    // A damaged header, its payload intact: header and payload are read at once, and the load is
    // refused all the same.
    const file = path.join(dir, 'segments', seg);
    const bytes = fs.readFileSync(file);
    const at = bytes.indexOf(Buffer.from(sha256(small), 'hex'));
    assert.ok(at > 0 && at % RECORD_ALIGN_BYTES === 16, 'the small block has a record header');
    const fd2 = fs.openSync(file, 'r+');
    fs.writeSync(fd2, Buffer.from([bytes[at] ^ 0x01]), 0, 1, at);
    fs.closeSync(fd2);
    store = await open(dir, native);
    await rejectsWith(async () => (await store.holdInDram(await store.resolve('m/small'))).release(), 'ECORRUPT');
    assert.notEqual((await store.stat('m/small')).tier, 'dram');
    await store.close();
  });

  it('a read of a block being loaded into the native arena waits for that load instead of reading the disk beside it', async function () {
    if (!nativeBinding()) this.skip();
    const dir = newDir();
    const native = { dram: 'native' as const, dramCapacityBytes: 32 * MiB, log: () => undefined };
    let store = await open(dir, native);
    const data = seededBytes(94, 6 * MiB + 5);
    await store.put('m/l', data);
    await store.close();
    store = await open(dir, native); // on disk only
    const v = await store.resolve('m/l');
    const hits = { ...(await store.stats()).hits };
    const target = Buffer.alloc(1 * MiB);
    let read: Promise<number> | undefined;
    // Announced once the fill started and before it ends: the read comes while the block loads.
    const hold = await store.holdInDram(v, () => (read = store.readContent(v, 2 * MiB, target)));
    assert.ok(read !== undefined, 'the read started during the load');
    assert.equal(await read, 1 * MiB);
    assert.ok(target.equals(data.subarray(2 * MiB, 3 * MiB)), 'byte-exact');
    hold.release();
    assert.deepEqual((await store.stats()).hits, { ...hits, disk: hits.disk + 1, dram: hits.dram + 1 }, 'one disk load (the hold), the read from DRAM');
    await store.close();
  });

  it('a record whose piece table is damaged loads whole: its SHA-256 decides, and the load is counted (badPieceTables)', async function () {
    if (!nativeBinding()) this.skip();
    const dir = newDir();
    const native = { dram: 'native' as const, dramCapacityBytes: 32 * MiB, log: () => undefined };
    let store = await open(dir, native);
    const data = seededBytes(93, 3 * MiB + 11);
    await store.put('m/t', data);
    await store.close();
    const seg = path.join(dir, 'segments', fs.readdirSync(path.join(dir, 'segments')).find((f) => f.endsWith('.log'))!);
    const bytes = fs.readFileSync(seg);
    const header = bytes.indexOf(Buffer.from(sha256(data), 'hex')) - 16;
    assert.ok(header >= 0 && bytes[header + 6] === 18, 'a record with a table of 256 KiB pieces');
    const fd = fs.openSync(seg, 'r+');
    fs.writeSync(fd, Buffer.from([bytes[header + 64 + 4] ^ 0x01]), 0, 1, header + 64 + 4); // piece 1's CRC
    fs.closeSync(fd);
    store = await open(dir, native);
    let announced = 0;
    const hold = await store.holdInDram(await store.resolve('m/t'), () => announced++);
    hold.release();
    assert.equal(announced, 1);
    assert.ok((await store.get('m/t')).equals(data), 'byte-exact');
    const dram = (await store.stats()).tiers.find((t) => t.name === 'dram')!;
    assert.equal(dram.badPieceTables, 1);
    assert.equal((await store.stats()).recovery.quarantined, 0, 'the record is not quarantined');
    await store.close();
  });

  it('the shared-memory DRAM tier works end to end (pre-faulted arena)', async () => {
    const store = await open(newDir(), { dram: 'shm', prefault: true, dramCapacityBytes: 8 * MiB });
    const data = seededBytes(77, 3 * MiB);
    await store.put('m/shm', data);
    assert.equal((await store.stat('m/shm')).tier, 'dram');
    assert.ok((await store.get('m/shm')).equals(data));
    assert.equal(sha256(await store.get('m/shm')), (await store.stat('m/shm')).sha256);
    await store.close();
  });
});

import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { crc32 as zlibCrc32 } from 'node:zlib';
import { RECORD_ALIGN_BYTES } from '../../store/constants';
import { APPEND_BATCH_BYTES_MAX, READ_AHEAD_BYTES, DiskSegmentTier, DiskSyncError, realDiskIo, type DiskIo, type QuarantineEvent } from '../../store/tiers/disk';
import { nativeBinding } from '../../native';
import { rejectsWith, rmDir, seededBytes, sha256, tmpDir } from './helpers';
import { tierConformance } from './tier-conformance';

const dirs: string[] = [];

/** CRC-32C, bitwise by table: the test's own, to check the addon's piece tables against. */
const CRC32C_TABLE = Array.from({ length: 256 }, (_, i) => {
  let c = i;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  return c >>> 0;
});
function crc32cReference(data: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < data.length; i++) c = CRC32C_TABLE[(c ^ data[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
after(() => dirs.forEach(rmDir));

tierConformance('DiskSegmentTier', async (capacityBytes) => {
  const dir = tmpDir('disk-conf');
  dirs.push(dir);
  return DiskSegmentTier.open({ dir, capacityBytes, segmentTargetBytes: 1024 * 1024 });
});

function segFiles(dir: string): string[] {
  return fs.readdirSync(path.join(dir, 'segments')).filter((f) => f.endsWith('.log')).sort();
}

async function fill(tier: DiskSegmentTier, count: number, sizeBytes: number, seed = 1): Promise<Map<string, Buffer>> {
  const blocks = new Map<string, Buffer>();
  for (let i = 0; i < count; i++) {
    const data = seededBytes(seed * 1000 + i, sizeBytes + i);
    const key = sha256(data);
    await tier.write(key, data);
    blocks.set(key, data);
  }
  return blocks;
}

async function readAll(tier: DiskSegmentTier, blocks: Map<string, Buffer>): Promise<void> {
  for (const [key, data] of blocks) {
    const out = Buffer.alloc(data.length);
    assert.equal(await tier.read(key, 0, out), data.length);
    assert.ok(out.equals(data), `block ${key} reads back exact`);
  }
}

describe('DiskSegmentTier: segments and recovery', () => {
  let dir: string;
  beforeEach(() => {
    dir = tmpDir('disk');
    dirs.push(dir);
  });

  it('aggregates blocks into few segment files, indexes sealed ones, and finds everything after reopen', async () => {
    const tier = await DiskSegmentTier.open({ dir, segmentTargetBytes: 256 * 1024 });
    const blocks = await fill(tier, 40, 20_000);
    await tier.sync();
    assert.ok(segFiles(dir).length < 10, `40 blocks in ${segFiles(dir).length} segments, not one file each`);
    await tier.close();

    const again = await DiskSegmentTier.open({ dir, segmentTargetBytes: 256 * 1024 });
    assert.equal(again.scan().length, 40);
    assert.equal(again.recovery.indexedRecords, 40, 'a clean close indexed every record: nothing rescanned');
    assert.equal(again.recovery.scannedRecords, 0);
    await readAll(again, blocks);
    await again.close();
  });

  it('re-indexes records past the last index after a crash (no close)', async () => {
    const tier = await DiskSegmentTier.open({ dir, segmentTargetBytes: 64 * 1024 * 1024 });
    const blocks = await fill(tier, 12, 5000);
    await tier.sync();
    // Simulate kill -9: no close, so the active segment has no index.
    const again = await DiskSegmentTier.open({ dir });
    assert.equal(again.recovery.scannedRecords, 12);
    await readAll(again, blocks);
    await again.close();
    await tier.close();
  });

  it('truncates a torn tail and keeps appending after it', async () => {
    const tier = await DiskSegmentTier.open({ dir });
    const blocks = await fill(tier, 5, 10_000);
    await tier.sync();
    const file = path.join(dir, 'segments', segFiles(dir)[0]);
    const goodLength = fs.statSync(file).size;
    const big = seededBytes(99, 1024 * 1024);
    await tier.write(sha256(big), big);
    // Cut the last record inside its payload: a write interrupted by a crash.
    const tornLength = RECORD_ALIGN_BYTES + 100;
    fs.truncateSync(file, goodLength + tornLength);

    const again = await DiskSegmentTier.open({ dir });
    assert.equal(again.recovery.truncatedBytes, tornLength);
    assert.equal(fs.statSync(file).size, goodLength);
    assert.equal(again.has(sha256(big)), false, 'the torn record is not served');
    await readAll(again, blocks);
    const more = await fill(again, 3, 7000, 2);
    await again.sync();
    await readAll(again, more);
    await again.close();
    await tier.close();
  });

  it('quarantines a damaged record in the middle and never serves it', async () => {
    const events: QuarantineEvent[] = [];
    const tier = await DiskSegmentTier.open({ dir });
    const blocks = [...(await fill(tier, 4, 9000))];
    await tier.sync();
    const file = path.join(dir, 'segments', segFiles(dir)[0]);
    // Flip one payload byte of the second record (record 0 spans header + 3 payload units).
    const second = RECORD_ALIGN_BYTES + Math.ceil(9000 / RECORD_ALIGN_BYTES) * RECORD_ALIGN_BYTES;
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.from([0xff ^ blocks[1][1][10]]), 0, 1, second + RECORD_ALIGN_BYTES + 10);
    fs.closeSync(fd);

    const again = await DiskSegmentTier.open({ dir, onQuarantine: (e) => events.push(e) });
    assert.equal(again.recovery.quarantined, 1);
    assert.equal(events.length, 1);
    assert.match(events[0].reason, /SHA-256/);
    assert.equal(again.has(blocks[1][0]), false);
    await rejectsWith(() => again.read(blocks[1][0], 0, Buffer.alloc(10)), 'ENOENT');
    await readAll(again, new Map([blocks[0], blocks[2], blocks[3]]));
    assert.ok(fs.readFileSync(path.join(dir, 'quarantine.log'), 'utf8').includes('SHA-256'));
    await again.close();
    await tier.close();
  });

  it('checks every read: bytes damaged after indexing give ECORRUPT, never wrong bytes', async () => {
    const tier = await DiskSegmentTier.open({ dir });
    const [[key, data]] = [...(await fill(tier, 1, 50_000))];
    await tier.sync();
    const file = path.join(dir, 'segments', segFiles(dir)[0]);
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.from([data[777] ^ 1]), 0, 1, RECORD_ALIGN_BYTES + 777);
    fs.closeSync(fd);
    await rejectsWith(() => tier.read(key, 0, Buffer.alloc(data.length)), 'ECORRUPT');
    await rejectsWith(() => tier.read(key, 100, Buffer.alloc(10)), 'ENOENT'); // dropped after the failed check
    assert.equal(tier.has(key), false);
    await tier.close();
  });

  it('after an fdatasync error: reports the lost keys, never syncs that file again, writes elsewhere', async () => {
    const failing = new Set<number>();
    const synced: number[] = [];
    let failNext = false;
    const io: DiskIo = {
      ...realDiskIo,
      fdatasync: async (fd) => {
        synced.push(fd);
        if (failNext) {
          failNext = false;
          failing.add(fd);
          throw Object.assign(new Error('EIO: injected'), { code: 'EIO' });
        }
      },
    };
    const tier = await DiskSegmentTier.open({ dir, io });
    const first = await fill(tier, 2, 3000, 1);
    await tier.sync();
    const second = await fill(tier, 3, 3000, 2);
    failNext = true;
    let err: unknown;
    await tier.sync().catch((e) => (err = e));
    assert.ok(err instanceof DiskSyncError, 'sync reports the failure');
    assert.deepEqual(new Set(err.lostKeys), new Set(second.keys()));
    for (const k of second.keys()) assert.equal(tier.has(k), false, 'unconfirmed blocks leave the index');
    await readAll(tier, first); // synced before the failure: still good

    const third = await fill(tier, 2, 3000, 3);
    const before = synced.length;
    await tier.sync();
    assert.ok(synced.slice(before).every((fd) => !failing.has(fd)), 'the failed file is never fsynced again');
    assert.equal(segFiles(dir).length, 2, 'new writes went to a new segment');
    await readAll(tier, third);
    await tier.close();
  });

  it('compacts sealed segments once most of their bytes are dead', async () => {
    const tier = await DiskSegmentTier.open({ dir, segmentTargetBytes: 128 * 1024 });
    const blocks = await fill(tier, 60, 12_000);
    await tier.sync();
    const segmentsBefore = segFiles(dir).length;
    const keys = [...blocks.keys()];
    const keep = new Map<string, Buffer>();
    for (let i = 0; i < keys.length; i++) {
      if (i % 5 === 0) keep.set(keys[i], blocks.get(keys[i])!);
      else await tier.delete(keys[i]);
    }
    await tier.sync(); // runs after queued compactions
    assert.ok(tier.compactionCount() > 0, 'compaction ran');
    assert.ok(segFiles(dir).length < segmentsBefore, `${segFiles(dir).length} segments left of ${segmentsBefore}`);
    await readAll(tier, keep);
    await tier.close();
    const again = await DiskSegmentTier.open({ dir, segmentTargetBytes: 128 * 1024 });
    assert.equal(again.scan().length, keep.size);
    await readAll(again, keep);
    await again.close();
  });

  it('ENOSPC past its capacity, with nothing visible', async () => {
    const tier = await DiskSegmentTier.open({ dir, capacityBytes: 64 * 1024 });
    const data = seededBytes(5, 100_000);
    await rejectsWith(() => tier.write(sha256(data), data), 'ENOSPC');
    assert.equal(tier.has(sha256(data)), false);
    assert.equal(tier.stats().usedBytes, 0);
    await tier.close();
  });
  it('writeMany: many records per pwrite, split at segment ends, each readable and recovered after a crash', async () => {
    const writes: number[] = [];
    const io: DiskIo = { ...realDiskIo, write: (fd, buf, off, len, pos) => (writes.push(len), realDiskIo.write(fd, buf, off, len, pos)) };
    const tier = await DiskSegmentTier.open({ dir, io, segmentTargetBytes: 256 * 1024 });
    const blocks = new Map<string, Buffer>();
    for (let i = 0; i < 50; i++) {
      const data = seededBytes(7000 + i, 1 + i * 397); // 1 byte to ~19 KiB: every padding length
      blocks.set(sha256(data), data);
    }
    const list = [...blocks].map(([key, data]) => ({ key, sizeBytes: data.length }));
    await tier.writeMany([...list, list[0]], async (key, target, offsetBytes) => void blocks.get(key)!.copy(target, 0, offsetBytes));
    await tier.sync();
    assert.ok(writes.length < 10, `50 records in ${writes.length} writes`);
    assert.ok(segFiles(dir).length > 1, 'a run never crosses a segment end');
    await readAll(tier, blocks);
    await tier.writeMany(list.slice(0, 3), async () => assert.fail('present keys are not filled again'));
    // No close: the tail of the last segment is scanned, every record's checksum found good.
    const again = await DiskSegmentTier.open({ dir, segmentTargetBytes: 256 * 1024 });
    assert.equal(again.scan().length, blocks.size);
    await readAll(again, blocks);
    await again.close();
    await tier.close();
  });

  /**
   * Whether the tier should append with O_DIRECT in dir: the filesystem opens files so, it is not tmpfs
   * (whose O_DIRECT, Linux 6.6+, still goes through its page cache) and pages are 4 KiB.
   */
  function takesODirect(): boolean {
    if (fs.statfsSync(dir).type === 0x01021994 || nativeBinding()?.pageBytes() !== RECORD_ALIGN_BYTES) return false;
    const probe = path.join(dir, 'direct-probe');
    try {
      fs.closeSync(fs.openSync(probe, fs.constants.O_CREAT | fs.constants.O_WRONLY | fs.constants.O_DIRECT, 0o600));
      return true;
    } catch {
      return false;
    } finally {
      fs.rmSync(probe, { force: true });
    }
  }
  /** Page-cache bytes of a file (util-linux fincore), or null where fincore is missing. */
  function cachedBytes(file: string): number | null {
    const r = spawnSync('fincore', ['--bytes', '--noheadings', '--raw', '--output', 'RES', file], { encoding: 'utf8' });
    return r.status === 0 ? Number(r.stdout.trim()) : null;
  }
  for (const directWrites of [true, false]) {
    it(`writeMany ${directWrites ? 'appends with O_DIRECT: no page-cache copy' : 'with directWrites off goes through the page cache'}; records read back and recover, a large one written in pieces`, async function () {
      const direct = directWrites && takesODirect();
      if (directWrites && !direct) this.skip(); // (the buffered path is the case below)
      const tier = await DiskSegmentTier.open({ dir, directWrites });
      const list = [seededBytes(31, 5000), seededBytes(32, 1024 * 1024), seededBytes(33, APPEND_BATCH_BYTES_MAX + 4096 * 3 + 17)];
      const blocks = new Map(list.map((d) => [sha256(d), d]));
      const runs = [...blocks].map(([key, data]) => ({ key, sizeBytes: data.length }));
      await tier.writeMany(runs, async (key, target, offsetBytes) => void blocks.get(key)!.copy(target, 0, offsetBytes));
      await tier.sync();
      const appended = tier.appendedBytes();
      const total = runs.reduce((n, r) => n + RECORD_ALIGN_BYTES + Math.ceil(r.sizeBytes / RECORD_ALIGN_BYTES) * RECORD_ALIGN_BYTES, 0);
      assert.deepEqual(appended, direct ? { directBytes: total, bufferedBytes: 0 } : { directBytes: 0, bufferedBytes: total });
      const cached = segFiles(dir).map((f) => cachedBytes(path.join(dir, 'segments', f)));
      if (!cached.includes(null)) {
        const sum = (cached as number[]).reduce((a, b) => a + b, 0);
        if (direct) assert.equal(sum, 0, 'O_DIRECT appends leave nothing in the page cache');
        else assert.ok(sum >= total / 2, `buffered appends fill the page cache (${sum} of ${total} bytes)`);
      }
      await readAll(tier, blocks);
      // No close: recovery scans the records (checksums of every piece of the large one).
      const again = await DiskSegmentTier.open({ dir });
      assert.equal(again.scan().length, blocks.size);
      await readAll(again, blocks);
      await again.close();
      await tier.close();
    });
  }
  it('a direct append the filesystem refuses (EINVAL) is written buffered, and so are the appends after it', async function () {
    if (!takesODirect()) this.skip();
    const tier = await DiskSegmentTier.open({ dir });
    const write = realDiskIo.write;
    let refused = 0;
    // The first write is the direct one (the run); later ones go through the buffered descriptor.
    realDiskIo.write = async (...args) => {
      if (refused++ === 0) throw Object.assign(new Error('EINVAL: injected'), { code: 'EINVAL' });
      return write(...args);
    };
    try {
      const list = [seededBytes(41, 70_000), seededBytes(42, 9000)];
      const blocks = new Map(list.map((d) => [sha256(d), d]));
      const runs = [...blocks].map(([key, data]) => ({ key, sizeBytes: data.length }));
      await tier.writeMany(runs.slice(0, 1), async (key, target, offsetBytes) => void blocks.get(key)!.copy(target, 0, offsetBytes));
      await tier.writeMany(runs.slice(1), async (key, target, offsetBytes) => void blocks.get(key)!.copy(target, 0, offsetBytes));
      await tier.sync();
      const total = runs.reduce((n, r) => n + RECORD_ALIGN_BYTES + Math.ceil(r.sizeBytes / RECORD_ALIGN_BYTES) * RECORD_ALIGN_BYTES, 0);
      assert.deepEqual(tier.appendedBytes(), { directBytes: 0, bufferedBytes: total });
      await readAll(tier, blocks);
    } finally {
      realDiskIo.write = write;
    }
    await tier.close();
  });
  it('a large record whose bytes cannot be had midway fails with that error; the segment keeps taking appends', async () => {
    const tier = await DiskSegmentTier.open({ dir });
    const big = seededBytes(43, 2 * APPEND_BATCH_BYTES_MAX + 5);
    const lost = new Error('ENOENT: the block left DRAM');
    await assert.rejects(
      tier.writeMany([{ key: sha256(big), sizeBytes: big.length }], async (_key, target, offsetBytes) => {
        if (offsetBytes > 0) throw lost;
        big.copy(target, 0, offsetBytes);
      }),
      (e) => e === lost,
    );
    assert.equal(tier.has(sha256(big)), false);
    const small = seededBytes(44, 5000);
    await tier.write(sha256(small), small);
    await tier.sync();
    assert.equal(segFiles(dir).length, 1, 'no new segment: the failure was not the file\'s');
    await readAll(tier, new Map([[sha256(small), small]]));
    // No close: recovery scans the segment, quarantines the torn record and keeps the one after it.
    const again = await DiskSegmentTier.open({ dir });
    assert.deepEqual(again.scan().map((e) => e.key), [sha256(small)]);
    assert.equal(again.recovery.quarantined, 1);
    await again.close();
    await tier.close();
  });
  it('records carry a piece table (CRC-32C per piece, the table\'s own CRC in the header), large ones too; records without one read as before', async function () {
    if (!nativeBinding()) this.skip(); // tables need the addon's CRC-32C: without it records have none
    const tier = await DiskSegmentTier.open({ dir });
    const sizes = [600 * 1024 + 5, 1, APPEND_BATCH_BYTES_MAX + 300 * 1024]; // 3 pieces; 1; the large path (header last)
    const all = new Map(sizes.map((n, i) => seededBytes(70 + i, n)).map((d) => [sha256(d), d]));
    await tier.writeMany([...all].map(([key, data]) => ({ key, sizeBytes: data.length })), async (key, target, off) => void all.get(key)!.copy(target, 0, off));
    const plain = seededBytes(80, 700 * 1024); // through write(): its own path
    await tier.write(sha256(plain), plain);
    all.set(sha256(plain), plain);
    await tier.sync();
    const file = path.join(dir, 'segments', segFiles(dir)[0]);
    const bytes = fs.readFileSync(file);
    for (const [key, data] of all) {
      const at = bytes.indexOf(Buffer.from(key, 'hex')) - 16;
      assert.ok(at >= 0 && at % RECORD_ALIGN_BYTES === 0, 'each record has its header');
      const shift = bytes[at + 6];
      assert.equal(shift, 18, `${data.length} bytes: 256 KiB pieces`);
      const n = Math.ceil(data.length / 2 ** shift);
      for (let i = 0; i < n; i++) {
        const want = crc32cReference(data.subarray(i * 2 ** shift, Math.min(data.length, (i + 1) * 2 ** shift)));
        assert.equal(bytes.readUInt32LE(at + 64 + 4 * i), want, `piece ${i} of ${data.length} bytes`);
      }
      assert.equal(bytes.readUInt32LE(at + 48), crc32cReference(bytes.subarray(at + 64, at + 64 + 4 * n)), 'the table\'s own CRC-32C');
      assert.ok(bytes.subarray(at + 64 + 4 * n, at + RECORD_ALIGN_BYTES).every((b) => b === 0), 'the rest of the header page is zero');
    }
    await readAll(tier, all);
    await tier.close();
    // A record without a table (shift 0, as before tables): clear one header's table fields, mend its
    // header CRC-32, and it reads as before after a reopen (scanned: no index written by a crash).
    const [key, data] = [...all][0];
    const at = bytes.indexOf(Buffer.from(key, 'hex')) - 16;
    const header = Buffer.from(bytes.subarray(at, at + RECORD_ALIGN_BYTES));
    header.fill(0, 64);
    header[6] = 0;
    header.writeUInt32LE(0, 48);
    header.writeUInt32LE(zlibCrc32(header.subarray(0, 60)), 60);
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, header, 0, header.length, at);
    fs.closeSync(fd);
    const again = await DiskSegmentTier.open({ dir });
    const out = Buffer.alloc(data.length);
    assert.equal(await again.read(key, 0, out), data.length);
    assert.ok(out.equals(data));
    await again.close();
  });
  it('readWith asks for read-ahead only for loads that follow the previous one in their segment', async () => {
    const tier = await DiskSegmentTier.open({ dir });
    const list = [0, 1, 2, 3, 4].map((i) => seededBytes(50 + i, 1024 * 1024));
    for (const d of list) await tier.write(sha256(d), d); // one record each, in this order
    const keys = list.map((d) => sha256(d));
    const asked: number[] = [];
    const load = (i: number) =>
      tier.readWith(keys[i], async (_fd, _offset, aheadBytes) => {
        asked.push(aheadBytes);
        return keys[i];
      });
    const record = RECORD_ALIGN_BYTES + 1024 * 1024;
    await load(0); // first load of the segment: no guess
    await load(1); // right after it: the rest of the segment (3 records), under READ_AHEAD_BYTES
    await load(3); // forward past one (resident, say): still in order
    await load(0); // backwards: random
    await load(2); // forward from 0's end, within the window
    assert.deepEqual(asked, [0, 3 * record, record, 0, 2 * record]);
    assert.ok(READ_AHEAD_BYTES >= 4 * record);
    // A record larger than the window after 4, then one more: read-ahead stops at the window, and a
    // load that jumps past more than the window is not in order.
    const big = seededBytes(60, READ_AHEAD_BYTES + 4096);
    const last = seededBytes(61, 1024 * 1024);
    await tier.write(sha256(big), big);
    await tier.write(sha256(last), last);
    keys.push(sha256(big), sha256(last));
    asked.length = 0;
    await load(3); // follows 2: the rest of the segment is more than the window
    await load(4); // follows 3: so is the rest from here
    await load(6); // jumps over the large record (more than the window): not in order
    assert.deepEqual(asked, [READ_AHEAD_BYTES, READ_AHEAD_BYTES, 0]);
    await tier.close();
  });
  it('writeMany: a failed append leaves none of its run visible; a record above the staging size goes alone', async () => {
    let failWrites = 1;
    const io: DiskIo = {
      ...realDiskIo,
      write: async (fd, buf, off, len, pos) => {
        if (failWrites-- > 0) throw Object.assign(new Error('EIO: injected'), { code: 'EIO' });
        return realDiskIo.write(fd, buf, off, len, pos);
      },
    };
    const tier = await DiskSegmentTier.open({ dir, io });
    const small = [seededBytes(1, 5000), seededBytes(2, 9000)];
    const big = seededBytes(3, APPEND_BATCH_BYTES_MAX + 1234);
    const all = new Map([...small, big].map((d) => [sha256(d), d]));
    const list = [...all].map(([key, data]) => ({ key, sizeBytes: data.length }));
    const fillFrom = async (key: string, target: Uint8Array, offsetBytes: number) => void all.get(key)!.copy(target, 0, offsetBytes);
    await rejectsWith(() => tier.writeMany(list, fillFrom), 'EIO');
    for (const { key } of list) assert.equal(tier.has(key), false, 'nothing of a failed run is visible');
    await tier.writeMany(list, fillFrom);
    await tier.sync();
    await readAll(tier, all);
    await tier.close();
  });
  it('a compaction that fails midway (a read, or the seal of its full copy segment) leaves every block where it was: nothing durable lost', async () => {
    for (const failing of ['read', 'fdatasync'] as const) {
      let armed = false;
      const injected = () => Object.assign(new Error('EIO: injected'), { code: 'EIO' });
      const io: DiskIo = {
        ...realDiskIo,
        read: async (fd, buf, offset, length, position) => {
          if (armed && failing === 'read') {
            armed = false;
            throw injected();
          }
          return realDiskIo.read(fd, buf, offset, length, position);
        },
        fdatasync: async (fd) => {
          if (armed && failing === 'fdatasync') {
            armed = false;
            throw injected();
          }
          return realDiskIo.fdatasync(fd);
        },
      };
      const d = tmpDir(`disk-compact-${failing}`);
      try {
        const lostReports: string[][] = [];
        // Records of 16 KiB, segments of 8: three full ones, and 4 records in the active one. Compacting
        // the first copies 7, which fill the active segment: it is sealed midway.
        const tier = await DiskSegmentTier.open({ dir: d, io, segmentTargetBytes: 128 * 1024, compactDeadFraction: 0.05, onLost: (k) => lostReports.push(k) });
        const blocks = new Map([...(await fill(tier, 24, 12_000, 3)), ...(await fill(tier, 4, 12_000, 4))]);
        await tier.sync();
        const keys = [...blocks.keys()];
        armed = true;
        await tier.delete(keys[0]); // the first segment is compacted in the background
        await tier.sync().catch(() => undefined); // runs after it
        assert.equal(armed, false, `the ${failing} fault was hit`);
        assert.deepEqual(lostReports.flat(), [], 'nothing durable was reported lost');
        const kept = new Map(keys.slice(1).map((k) => [k, blocks.get(k)!]));
        for (const k of kept.keys()) assert.ok(tier.has(k), 'every block still indexed');
        await readAll(tier, kept);
        await tier.close();
        const again = await DiskSegmentTier.open({ dir: d });
        await readAll(again, kept);
        await again.close();
      } finally {
        rmDir(d);
      }
    }
  });
  it('a background compaction whose fdatasync fails reports the blocks it took with it (onLost); its own moves go back', async () => {
    let failSync = false;
    const io: DiskIo = {
      ...realDiskIo,
      fdatasync: async (fd) => {
        if (failSync) {
          failSync = false;
          throw Object.assign(new Error('EIO: injected'), { code: 'EIO' });
        }
        return realDiskIo.fdatasync(fd);
      },
    };
    const lostReports: string[][] = [];
    const tier = await DiskSegmentTier.open({ dir, io, segmentTargetBytes: 128 * 1024, onLost: (keys) => lostReports.push(keys) });
    const old = await fill(tier, 12, 12_000, 1); // several sealed, synced segments
    await tier.sync();
    const fresh = await fill(tier, 1, 5_000, 2); // appended, not yet synced
    failSync = true;
    const keys = [...old.keys()];
    const kept = keys.filter((_, i) => i % 4 === 0);
    for (const k of keys) if (!kept.includes(k)) await tier.delete(k);
    await tier.sync().catch(() => undefined); // runs after the queued compactions
    const lost = lostReports.flat();
    assert.ok(lost.length > 0, 'the failed compaction reported what it lost');
    for (const k of fresh.keys()) assert.ok(lost.includes(k) || tier.has(k), 'the unsynced block is reported lost or still there');
    for (const k of kept) assert.ok(tier.has(k) && !lost.includes(k), 'a moved block falls back to its original');
    await readAll(tier, new Map(kept.map((k) => [k, old.get(k)!])));
    await tier.close();
  });
});

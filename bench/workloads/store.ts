/**
 * The store suite's workloads: the Store in-process, and the references it is judged against (memcpy,
 * one-core SHA-256), each run in a trial process of its own (trial.ts: a fresh heap, a fresh page-fault
 * history, no JIT state left by another trial).
 *
 * Every block is generated before timing starts, and every timed run works on content that has not been
 * stored before where that matters (content addressing would otherwise make a put a dedup hit).
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DRAM_PAGE_BYTES_DEFAULT, MiB } from '../../store/constants';
import { Store, type StoreConfig } from '../../store/store';
import { ShmArenaTier, type ShmArenaOptions } from '../../store/tiers/dram';
import { clockMs, dropPageCache, residentBytes, sample, sha256Hex } from '../common';
import type { CheckValue, FigureSamples, StoreTrialArgs as TrialArgs } from '../protocol';

/** The store's figures are all GB/s of one block per run. */
type StoreFigure = Omit<FigureSamples, 'unit' | 'opsPerRun'>;

/**
 * `dramHugePages` / `hugePages` are being added to the store; typing them here as optional extras keeps
 * this file compiling whether or not the store's own types have them yet.
 */
type BenchStoreConfig = StoreConfig & { dramHugePages?: boolean };
type BenchArenaOptions = ShmArenaOptions & { hugePages?: boolean };

/** A promotion threshold no trial reaches: disk reads stay disk reads while they are timed. */
const NEVER_PROMOTE_READS = 1_000_000;
/** Room in the arena beyond the blocks themselves (a huge-page arena rounds up to 2 MiB). */
const ARENA_SLACK_BYTES = 4 * MiB;

/*
 * `sample` (common.ts) runs `op` warmups + runs times back to back and keeps the counted runs' times.
 * No forced GC between runs: a caller in a loop pays for the collection of earlier runs' buffers too
 * (forcing it would let malloc hand get() back the same, already faulted, memory every time).
 */

/** Distinct random blocks, fully written (so touched) before any timing. */
function randomBlocks(count: number, sizeBytes: number): Buffer[] {
  return Array.from({ length: count }, () => crypto.randomFillSync(Buffer.allocUnsafe(sizeBytes)));
}

/** Arena bytes that hold `count` blocks of `blockBytes` with the default 64 KiB arena pages. */
function arenaBytesFor(count: number, blockBytes: number): number {
  return count * Math.ceil(blockBytes / DRAM_PAGE_BYTES_DEFAULT) * DRAM_PAGE_BYTES_DEFAULT + ARENA_SLACK_BYTES;
}

function storeConfig(args: TrialArgs, dataDir: string, dramCapacityBytes: number, extra: Pick<StoreConfig, 'promoteAfterReads'> = {}): BenchStoreConfig {
  const config: BenchStoreConfig = { dataDir, dramCapacityBytes, dram: 'shm', prefault: true, ...extra };
  if (args.dramHugePages !== undefined) config.dramHugePages = args.dramHugePages;
  return config;
}

/** Whether the DRAM tier ended up on huge pages (null when the tier does not say). */
function hugePagesInEffect(tier: object): boolean | null {
  const v: unknown = Reflect.get(tier, 'hugePages');
  return typeof v === 'boolean' ? v : null;
}

// ---- page cache control ---------------------------------------------------------------------------

// dropPageCache and residentBytes: common.ts (the mount and peers suites use the same).

function segmentFiles(dataDir: string): string[] {
  const dir = path.join(dataDir, 'segments');
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.log'))
    .map((f) => path.join(dir, f));
}

// ---- trials ---------------------------------------------------------------------------------------

interface TrialOutput {
  figures: StoreFigure[];
  checks: Record<string, CheckValue>;
}

async function memcpyTrial(args: TrialArgs): Promise<TrialOutput> {
  const source = randomBlocks(1, args.blockBytes)[0];
  const target = Buffer.alloc(args.blockBytes); // zero-filled: every page touched before timing
  const timesMs = await sample(args, async () => {
    const t0 = clockMs();
    source.copy(target);
    return clockMs() - t0;
  });
  return {
    figures: [{ figure: 'memcpy', label: 'Buffer.copy between two pre-touched buffers', bytesPerRun: args.blockBytes, timesMs }],
    checks: { copyVerified: source.equals(target) },
  };
}

async function sha256Trial(args: TrialArgs): Promise<TrialOutput> {
  const data = randomBlocks(1, args.blockBytes)[0];
  let digest = '';
  const timesMs = await sample(args, async () => {
    const t0 = clockMs();
    digest = crypto.createHash('sha256').update(data).digest('hex');
    return clockMs() - t0;
  });
  return {
    figures: [{ figure: 'sha256', label: "crypto.createHash('sha256') over the block, one core", bytesPerRun: args.blockBytes, timesMs }],
    checks: { digestLength: digest.length },
  };
}

async function putTrial(args: TrialArgs): Promise<TrialOutput> {
  const count = args.warmups + args.runs;
  // Two sets: one for plain puts, one for put+sync; every put stores new content.
  const blocks = randomBlocks(2 * count, args.blockBytes);
  const dataDir = path.join(args.scratchDir, 'data');
  const store = await Store.open(storeConfig(args, dataDir, arenaBytesFor(2 * count, args.blockBytes)));
  try {
    const putMs = await sample(args, async (run) => {
      const t0 = clockMs();
      await store.put(`bench/put-${run}`, blocks[run]);
      const timeMs = clockMs() - t0;
      // Each put starts on an idle store: the write-back of the previous block is not in its time.
      await store.idle();
      return timeMs;
    });
    const putSyncMs = await sample(args, async (run) => {
      const name = `bench/put-sync-${run}`;
      const t0 = clockMs();
      await store.put(name, blocks[count + run]);
      await store.sync(name);
      const timeMs = clockMs() - t0;
      await store.idle();
      return timeMs;
    });
    const stats = await store.stats();
    const roundTrip = await store.get('bench/put-0');
    return {
      figures: [
        {
          figure: 'put',
          label: 'store.put of new content: SHA-256 + DRAM write + metadata commit; returns before the disk write (write-back)',
          bytesPerRun: args.blockBytes,
          timesMs: putMs,
        },
        {
          figure: 'put+sync',
          label: 'store.put then store.sync(name): also written to the disk segment, fdatasynced, metadata synced',
          bytesPerRun: args.blockBytes,
          timesMs: putSyncMs,
        },
      ],
      checks: {
        contentVerified: roundTrip.equals(blocks[0]),
        dedupHits: stats.dedup.hits,
        demotions: stats.demotions,
        dramHugePagesInEffect: hugePagesInEffect(store.dram),
      },
    };
  } finally {
    await store.close();
  }
}

async function getHotTrial(args: TrialArgs): Promise<TrialOutput> {
  const block = randomBlocks(1, args.blockBytes)[0];
  const dataDir = path.join(args.scratchDir, 'data');
  const store = await Store.open(storeConfig(args, dataDir, arenaBytesFor(1, args.blockBytes)));
  try {
    const name = 'bench/hot';
    await store.put(name, block);
    await store.idle(); // flushed to disk, so no background write competes with the timed reads
    const tier = (await store.stat(name)).tier;
    const target = Buffer.alloc(args.blockBytes); // pre-allocated and touched: the zero-allocation path
    let readBytes = 0;
    const readMs = await sample(args, async () => {
      const t0 = clockMs();
      readBytes = await store.read(name, 0, target);
      return clockMs() - t0;
    });
    const readVerified = readBytes === args.blockBytes && target.equals(block);
    let last: Buffer = Buffer.alloc(0);
    const getMs = await sample(args, async () => {
      const t0 = clockMs();
      last = await store.get(name);
      return clockMs() - t0;
    });
    const stats = await store.stats();
    return {
      figures: [
        {
          figure: 'read',
          label: 'store.read(name, 0, target) into a pre-allocated, pre-touched buffer (DRAM hit)',
          bytesPerRun: args.blockBytes,
          timesMs: readMs,
        },
        {
          figure: 'get',
          label: 'store.get(name): allocates a fresh Buffer per call (DRAM hit)',
          bytesPerRun: args.blockBytes,
          timesMs: getMs,
        },
      ],
      checks: {
        tierBeforeReads: tier,
        readVerified,
        getVerified: last.equals(block),
        dramHits: stats.hits.dram ?? 0,
        diskHits: stats.hits.disk ?? 0,
        dramHugePagesInEffect: hugePagesInEffect(store.dram),
      },
    };
  } finally {
    await store.close();
  }
}

/**
 * Check that dropping works, on the raw file, without the store's own costs in the way: a pread of a
 * dropped range must be slower than the same pread again (now cached). Returns both times.
 */
function rawDropCheck(file: string, lengthBytes: number): { coldMs: number; warmMs: number } {
  const buf = Buffer.alloc(lengthBytes); // touched, so page faults on the buffer are not timed
  const fd = fs.openSync(file, 'r');
  try {
    const timeRead = () => {
      const t0 = clockMs();
      for (let done = 0; done < lengthBytes; ) {
        const n = fs.readSync(fd, buf, done, lengthBytes - done, done);
        if (n === 0) break;
        done += n;
      }
      return clockMs() - t0;
    };
    dropPageCache(file);
    const coldMs = timeRead();
    const warmMs = timeRead();
    return { coldMs, warmMs };
  } finally {
    fs.closeSync(fd);
  }
}

/** Read a whole file (untimed) so that every page of it is in the page cache. */
function readThrough(file: string): void {
  const chunk = Buffer.allocUnsafe(8 * MiB);
  const fd = fs.openSync(file, 'r');
  try {
    for (let pos = 0; ; ) {
      const n = fs.readSync(fd, chunk, 0, chunk.length, pos);
      if (n === 0) break;
      pos += n;
    }
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Disk-tier gets: first with the segments in the page cache (get-disk-warm), then with each segment's
 * cache dropped before every run (get-cold). Warm goes first because the cold phase's drops would
 * leave the blocks it read uncached again, and a "warm" phase after it would read from disk.
 */
async function getColdTrial(args: TrialArgs): Promise<TrialOutput> {
  const count = args.warmups + args.runs;
  const dataDir = path.join(args.scratchDir, 'data');
  // DRAM holds everything at put time; after each reopen it is empty and nothing gets promoted.
  const config = storeConfig(args, dataDir, arenaBytesFor(count, args.blockBytes), { promoteAfterReads: NEVER_PROMOTE_READS });
  // Only the digests are kept: the reader process should not carry count x blockBytes of source blocks.
  const expectedSha: string[] = [];
  const writer = await Store.open(config);
  try {
    for (let i = 0; i < count; i++) {
      const block = randomBlocks(1, args.blockBytes)[0];
      expectedSha.push(sha256Hex(block));
      await writer.put(`bench/cold-${i}`, block);
    }
  } finally {
    await writer.close(); // durable: every segment written and fdatasynced, so no dirty pages remain
  }

  const checks: Record<string, CheckValue> = {};
  let verified = true;
  const verify = (run: number, got: Buffer) => {
    verified &&= sha256Hex(got) === expectedSha[run]; // untimed
  };
  const files = segmentFiles(dataDir);
  checks.segmentFiles = files.length;
  const timedGets = (store: Store, beforeRun: () => void) =>
    sample(args, async (run) => {
      beforeRun();
      const t0 = clockMs();
      const got = await store.get(`bench/cold-${run}`);
      const timeMs = clockMs() - t0;
      verify(run, got);
      return timeMs;
    });

  // Warm: reopen (DRAM empty), segments read through so every page is cached.
  for (const f of files) readThrough(f);
  let minResidentFraction = 1;
  let residencyKnown = true;
  for (const f of files) {
    const res = residentBytes(f);
    if (res === null) residencyKnown = false;
    else minResidentFraction = Math.min(minResidentFraction, res / fs.statSync(f).size);
  }
  checks.minResidentFractionBeforeWarm = residencyKnown ? minResidentFraction : null;
  let store = await Store.open(config);
  let warmMs: number[];
  try {
    checks.tierAfterReopen = (await store.stat('bench/cold-0')).tier;
    warmMs = await timedGets(store, () => undefined);
    const stats = await store.stats();
    checks.warmPromotions = stats.promotions;
    checks.warmDramHits = stats.hits.dram ?? 0;
  } finally {
    await store.close();
  }

  // Cold: reopen again (DRAM empty), every segment's page cache dropped before each run.
  let dropMethod = '';
  let residentAfterDrop = 0;
  store = await Store.open(config);
  let coldMs: number[];
  try {
    coldMs = await timedGets(store, () => {
      // Before every run, not once: readahead of one read must not warm the next block.
      for (const f of files) dropMethod = dropPageCache(f);
      for (const f of files) {
        const res = residentBytes(f);
        if (res === null) residencyKnown = false;
        else residentAfterDrop = Math.max(residentAfterDrop, res);
      }
    });
    const stats = await store.stats();
    checks.coldPromotions = stats.promotions;
    checks.coldDramHits = stats.hits.dram ?? 0;
    checks.tierAfterColdReads = (await store.stat(`bench/cold-${count - 1}`)).tier;
  } finally {
    await store.close();
  }

  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const raw = rawDropCheck(files[0], Math.min(args.blockBytes, fs.statSync(files[0]).size));
  checks.dropMethod = dropMethod;
  checks.maxResidentBytesAfterDrop = residencyKnown ? residentAfterDrop : null;
  checks.rawPreadColdMs = raw.coldMs;
  checks.rawPreadWarmMs = raw.warmMs;
  checks.rawColdOverWarm = raw.coldMs / raw.warmMs;
  checks.storeColdOverWarmMedian = median(coldMs) / median(warmMs);
  // The drop counts as working when it shows: nothing resident after it (where fincore can tell), and a
  // raw pread after a drop slower than the same pread from the page cache.
  checks.dropVerified = raw.coldMs > raw.warmMs && (!residencyKnown || residentAfterDrop === 0);
  checks.contentVerified = verified;
  return {
    figures: [
      {
        figure: 'get-cold',
        label: 'store.get of a block on disk only, page cache of every segment dropped (fadvise DONTNEED) before each run; verified read, no promotion',
        bytesPerRun: args.blockBytes,
        timesMs: coldMs,
      },
      {
        figure: 'get-disk-warm',
        label: 'store.get of a block on disk only (DRAM empty after reopen), every segment page in the page cache; verified read, no promotion',
        bytesPerRun: args.blockBytes,
        timesMs: warmMs,
      },
    ],
    checks,
  };
}

async function promoteTrial(args: TrialArgs): Promise<TrialOutput> {
  const count = args.warmups + args.runs;
  const blocks = randomBlocks(count, args.blockBytes);
  const keys = blocks.map(sha256Hex); // hashed before timing: a promotion has the key already
  const options: BenchArenaOptions = { capacityBytes: arenaBytesFor(count, args.blockBytes), prefault: true };
  if (args.dramHugePages !== undefined) options.hugePages = args.dramHugePages;
  const tier = await ShmArenaTier.open(options);
  try {
    const writeMs = await sample(args, async (run) => {
      const t0 = clockMs();
      await tier.write(keys[run], blocks[run]);
      return clockMs() - t0;
    });
    const check = Buffer.alloc(args.blockBytes);
    await tier.read(keys[0], 0, check);
    return {
      figures: [
        {
          figure: 'promote',
          label: 'ShmArenaTier.write of a new block into a pre-faulted arena (what a promotion costs)',
          bytesPerRun: args.blockBytes,
          timesMs: writeMs,
        },
      ],
      checks: { contentVerified: check.equals(blocks[0]), dramHugePagesInEffect: hugePagesInEffect(tier) },
    };
  } finally {
    await tier.close();
  }
}

const TRIALS: Record<TrialArgs['workload'], (args: TrialArgs) => Promise<TrialOutput>> = {
  memcpy: memcpyTrial,
  sha256: sha256Trial,
  put: putTrial,
  'get-hot': getHotTrial,
  'get-cold': getColdTrial,
  promote: promoteTrial,
};

/** One store-suite trial. */
export async function runStoreTrial(args: TrialArgs): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  try {
    const out = await TRIALS[args.workload](args);
    return { figures: out.figures.map((f) => ({ ...f, unit: 'GB/s', opsPerRun: 1 })), checks: out.checks };
  } finally {
    // The runner removes the scratch dir too; removing it here keeps a standalone run tidy.
    fs.rmSync(path.join(args.scratchDir, 'data'), { recursive: true, force: true });
  }
}

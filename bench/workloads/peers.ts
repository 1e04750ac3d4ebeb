/**
 * The side-by-side (peers) suite's workloads, run in a trial process (trial.ts): the trial starts its
 * system (systems.ts), runs one workload against it and stops it.
 *
 * Every block holds content no other block has (one random buffer with a unique 32-byte head), except in
 * dup-write, which writes one block under many names, and rename-race, which alternates two versions of
 * one file. What is read is checked against what was written, after the timed region (SHA-256; in
 * rename-race byte for byte against both versions).
 */
import { makeUnique, randomContent, sample, sha256Hex } from '../common';
import { checkInterrupted, withSystem } from '../mounts';
import { META_FILE_BYTES, META_OPEN_FILES, type CheckValue, type FigureSamples, type FigureUnit, type PeerTrialArgs, type WorkloadOf } from '../protocol';
import { systemSpec, type PeerSystem } from '../systems';

type Workload = WorkloadOf<'peers'>;

interface TrialOutput {
  figures: FigureSamples[];
  checks: Record<string, CheckValue>;
}

const keyOf = (i: number) => `b-${String(i).padStart(5, '0')}`;
const keys = (n: number, from = 0) => Array.from({ length: n }, (_, i) => keyOf(from + i));

function figure(name: string, label: string, unit: FigureUnit, bytesPerRun: number, opsPerRun: number, timesMs: number[]): FigureSamples {
  return { figure: name, label, unit, bytesPerRun, opsPerRun, timesMs };
}

/** Between runs (untimed): let signal handlers run, stop if one asked to. */
async function betweenRuns(): Promise<void> {
  await new Promise<void>((resolve) => setImmediate(resolve));
  checkInterrupted();
}

const runs = (args: PeerTrialArgs, op: (run: number) => number | Promise<number>) => sample(args, op, betweenRuns);

/** Writes `names` with unique content (untimed); returns each one's SHA-256. */
async function writeUnique(sys: PeerSystem, names: string[], blockBytes: number): Promise<string[]> {
  const content = randomContent(blockBytes);
  const shas: string[] = [];
  for (const [i, k] of names.entries()) {
    shas.push(makeUnique(content, i));
    await sys.write(k, content);
  }
  return shas;
}

/** Reads `key` (timed by the system) and checks it against `sha`; returns the time. */
async function checkedRead(sys: PeerSystem, key: string, blockBytes: number, sha: string, verified: { ok: boolean }): Promise<number> {
  const r = await sys.read(key, blockBytes);
  verified.ok &&= r.bytes === blockBytes && r.sha256 === sha;
  return r.timeMs;
}

/**
 * Hot whole-block reads: blocks written, each read once untimed, then each run reads one (rotating).
 * A run is one block (files: open + whole read + close), so the same runs also give blocks per second.
 */
async function hotRead(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const names = keys(args.blocks);
  const shas = await writeUnique(sys, names, args.blockBytes);
  const settleMs = await sys.settle(args.blocks * args.blockBytes);
  const verified = { ok: true };
  for (const [i, k] of names.entries()) await checkedRead(sys, k, args.blockBytes, shas[i], verified);
  const timesMs = await runs(args, (run) => checkedRead(sys, names[run % names.length], args.blockBytes, shas[run % names.length], verified));
  return {
    figures: [
      figure('read', `whole-block read of a hot block, rotating over ${args.blocks}`, 'GB/s', args.blockBytes, 1, timesMs),
      figure('blocks/s', `hot blocks per second, one block per run (files: open + whole read + close; the same runs as \`read\`)`, 'ops/s', 0, 1, timesMs),
    ],
    checks: { contentVerified: verified.ok, blocks: args.blocks, settleMs: Math.round(settleMs) },
  };
}

/**
 * Cold reads: one block per run, written and made durable, the system restarted; before each run the
 * page cache of every backing file is dropped (posix_fadvise DONTNEED) and its residency checked. Runs
 * read the blocks newest first, so no read-ahead of in-order loads brings the next run's block back.
 */
async function coldRead(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const names = keys(args.warmups + args.runs);
  const shas = await writeUnique(sys, names, args.blockBytes);
  await sys.settle(names.length * args.blockBytes);
  await sys.makeCold(names);
  const verified = { ok: true };
  let maxResident: number | null = 0;
  let backingFiles = 0;
  // Newest first: blocks written one after another lie in order in Cascade's segment, and its disk tier
  // reads ahead when loads come in that order (up to 8 MiB past each record). Read in order, the next
  // run's block was partly back in the page cache after its drop (1-4 MiB resident in 2 MiB runs).
  const timesMs = await runs(args, (run) => {
    const i = names.length - 1 - run;
    const d = sys.dropCache(names[i]);
    backingFiles = d.backingFiles;
    maxResident = d.residentBytes === null || maxResident === null ? null : Math.max(maxResident, d.residentBytes);
    return checkedRead(sys, names[i], args.blockBytes, shas[i], verified);
  });
  return {
    figures: [figure('read', 'whole-block read, first since a restart, page cache of the backing files dropped before each run', 'GB/s', args.blockBytes, 1, timesMs)],
    checks: {
      contentVerified: verified.ok,
      dropMethod: 'posix_fadvise(DONTNEED) via dd iflag=nocache count=0',
      backingFilesDropped: backingFiles,
      maxResidentBytesAfterDrop: maxResident,
    },
  };
}

/** Unique writes: each run writes a new block of new content; the system is idle before each (untimed settle). */
async function uniqueWrite(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const names = keys(args.warmups + args.runs);
  const content = randomContent(args.blockBytes);
  const shas: string[] = [];
  let settleMs = 0;
  const timesMs = await runs(args, async (run) => {
    settleMs += await sys.settle(run * args.blockBytes);
    shas[run] = makeUnique(content, run); // untimed
    return sys.write(names[run], content);
  });
  settleMs += await sys.settle(names.length * args.blockBytes);
  const verified = { ok: true };
  for (const i of [0, names.length - 1]) await checkedRead(sys, names[i], args.blockBytes, shas[i], verified);
  return {
    figures: [figure('write', 'whole-block write of new content (file: create + write + close; Redis SET; h5py new dataset + flush)', 'GB/s', args.blockBytes, 1, timesMs)],
    checks: { contentVerified: verified.ok, settleMs: Math.round(settleMs) },
  };
}

/**
 * Duplicate writes: one system-prompt block written under `blocks` (50) names. The first write stores
 * it (the warm-up); every later one is a duplicate (the counted runs). Bytes stored: after settling,
 * the system's own figure, against before the first write.
 */
async function dupWrite(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const names = keys(args.blocks);
  if (args.warmups + args.runs !== names.length) throw new Error('dup-write: warmups + runs must equal blocks');
  const content = randomContent(args.blockBytes);
  const sha = sha256Hex(content);
  const before = await sys.bytesStored();
  const allMs: number[] = [];
  const timesMs = await runs(args, async (run) => {
    const t = await sys.write(names[run], content);
    allMs.push(t);
    return t;
  });
  await sys.settle(args.blockBytes);
  const after = await sys.bytesStored();
  const verified = { ok: true };
  for (const k of [names[0], names[names.length - 1]]) await checkedRead(sys, k, args.blockBytes, sha, verified);
  const logical = names.length * args.blockBytes;
  const memoryBytes = after.memoryBytes - before.memoryBytes;
  const diskBytes = after.diskBytes - before.diskBytes;
  return {
    figures: [figure('dup-write', `write of the same block under a new name (duplicates 2..${names.length})`, 'GB/s', args.blockBytes, 1, timesMs)],
    checks: {
      contentVerified: verified.ok,
      names: names.length,
      logicalBytes: logical,
      storedMemoryBytes: memoryBytes,
      storedDiskBytes: diskBytes,
      storedMemoryPerLogical: memoryBytes / logical,
      storedHow: after.how,
      totalWriteMsAllNames: allMs.reduce((a, b) => a + b, 0),
      firstWriteMs: allMs[0],
    },
  };
}

/** Contention: `readers` concurrent readers of the same prefix blocks; aggregate throughput. */
async function contention(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const names = keys(args.blocks);
  const shas = await writeUnique(sys, names, args.blockBytes); // unique: one content for all would dedup in Cascade
  await sys.settle(args.blocks * args.blockBytes);
  const verified = { ok: true };
  for (const [i, k] of names.entries()) await checkedRead(sys, k, args.blockBytes, shas[i], verified);
  const perRun = args.readers * args.iterations * args.blocks * args.blockBytes;
  let bytesOk = true;
  const timesMs = await runs(args, async () => {
    const r = await sys.concurrentRead(names, args.blockBytes, args.readers, args.iterations, shas[shas.length - 1]);
    verified.ok &&= r.verified;
    bytesOk &&= r.bytes === perRun;
    return r.timeMs;
  });
  return {
    figures: [
      figure(
        'read',
        `${args.readers} concurrent readers (threads/processes), each reading ${args.blocks} prefix blocks ${args.iterations}x; aggregate throughput, first start to last end`,
        'GB/s',
        perRun,
        args.readers * args.iterations * args.blocks,
        timesMs,
      ),
    ],
    checks: { contentVerified: verified.ok && bytesOk, readers: args.readers, blocks: args.blocks, rounds: args.iterations },
  };
}

/**
 * Capacity overflow: blocks worth 4x the system's memory written (each write timed), then where they
 * are, then passes that read every block in written order (the retained ones where blocks are lost).
 */
async function capacity(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const names = keys(args.blocks);
  const content = randomContent(args.blockBytes);
  const shas: string[] = [];
  const writeMs: number[] = [];
  let refusedWrites = 0;
  let firstRefusal: string | null = null;
  for (const [i, k] of names.entries()) {
    shas.push(makeUnique(content, i));
    try {
      writeMs.push(await sys.write(k, content));
    } catch (e) {
      // Redis answers OOM when it cannot make room (its query buffer counts against maxmemory): a result, not a crash.
      const msg = e instanceof Error ? e.message : String(e);
      if (!/OOM/.test(msg)) throw e;
      refusedWrites++;
      firstRefusal ??= msg.slice(0, 200);
    }
    await betweenRuns();
  }
  const settleMs = await sys.settle(names.length * args.blockBytes);
  const after = await sys.residency(names);
  const verified = { ok: true };
  let missingReads = 0;
  let bytesPerPass = 0;
  const timesMs = await runs(args, async () => {
    let t = 0;
    let bytes = 0;
    for (const [i, k] of names.entries()) {
      try {
        t += await checkedRead(sys, k, args.blockBytes, shas[i], verified);
        bytes += args.blockBytes;
      } catch (e) {
        if (after.missing === 0) throw e;
        missingReads++; // an evicted Redis key
      }
    }
    bytesPerPass = bytes;
    return t;
  });
  const end = await sys.residency(names);
  const figures: FigureSamples[] = [];
  if (writeMs.length > 0) {
    figures.push(figure('write', `whole-block write of new content, ${names.length} blocks = ${args.blocks * args.blockBytes} bytes into ${args.memoryBytes} bytes of memory`, 'GB/s', args.blockBytes, 1, writeMs));
  }
  if (bytesPerPass > 0) {
    figures.push(figure('read', 'a pass reading every block in written order (evicted ones skipped: they are gone); time summed over the reads', 'GB/s', bytesPerPass, Math.round(bytesPerPass / args.blockBytes), timesMs));
  }
  return {
    figures,
    checks: {
      contentVerified: verified.ok,
      blocksWritten: names.length,
      memoryBytes: args.memoryBytes,
      dataBytes: names.length * args.blockBytes,
      inMemoryAfterWrite: after.inMemory,
      elsewhereAfterWrite: after.elsewhere,
      missingAfterWrite: after.missing,
      percentRetainedInMemory: (100 * after.inMemory) / names.length,
      percentReadable: (100 * (names.length - after.missing)) / names.length,
      inMemoryAfterPasses: end.inMemory,
      missingReads,
      refusedWrites,
      firstRefusal,
      settleMs: Math.round(settleMs),
    },
  };
}

/** Metadata: open+close of existing small blocks, and stat of every block once its caches expired. */
async function meta(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const names = keys(args.blocks);
  await writeUnique(sys, names, META_FILE_BYTES);
  const settleMs = await sys.settle(args.blocks * META_FILE_BYTES);
  const openNames = names.slice(0, Math.min(META_OPEN_FILES, names.length));
  const figures: FigureSamples[] = [];
  const probe = await sys.openClose(openNames, 1);
  if (probe !== null) {
    const openMs = await runs(args, async () => (await sys.openClose(openNames, args.iterations)) ?? 0);
    figures.push(figure('open+close', `open + close of an existing ${META_FILE_BYTES}-byte block, ${args.iterations} per run over ${openNames.length}`, 'ops/s', 0, args.iterations, openMs));
  }
  let ok = true;
  const statProbe = await sys.statAll(names.slice(0, 1), META_FILE_BYTES);
  if (statProbe !== null) {
    const statMs = await runs(args, async () => {
      await sys.expireMetadataCaches(); // untimed
      const r = await sys.statAll(names, META_FILE_BYTES);
      if (r === null) throw new Error('statAll: not applicable after all');
      ok &&= r.ok;
      return r.timeMs;
    });
    figures.push(figure('stat-uncached', `size of each of ${names.length} blocks after every metadata cache expired (FUSE: 1.1 s; h5py: file reopened)`, 'ops/s', 0, names.length, statMs));
  }
  // New files (one run: the count is the run), then their listing.
  const createFiles = args.createFiles ?? 0;
  const created = createFiles > 0 ? await sys.createAndScan(createFiles, META_FILE_BYTES) : null;
  if (created !== null) {
    figures.push(figure('create', `create + one write + close of ${createFiles} new ${META_FILE_BYTES}-byte files in one directory, one python3 process`, 'ops/s', 0, createFiles, [created.createMs]));
    figures.push(figure('scandir', `os.scandir + is_file() over those ${createFiles} files (entries/s), metadata caches expired first`, 'ops/s', 0, createFiles, [created.scanMs]));
  }
  return {
    figures,
    checks: {
      sizesVerified: ok,
      blocks: names.length,
      openCloseNotApplicable: probe === null,
      statNotApplicable: statProbe === null,
      settleMs: Math.round(settleMs),
      ...(created !== null ? { createdFilesListed: created.ok } : {}),
    },
  };
}

/**
 * rename-race: `readers` concurrent readers open + read whole + close kv/bench/hot.bin, `iterations`
 * opens per run in all, while a writer writes hot.bin.tmp (two distinct contents, alternately) and
 * renames it over hot.bin. Counted: opens (attempts), ENOENT, reads equal to neither version (short or
 * mixed), other errors. The warm-up runs make a tenth of the opens.
 */
async function renameRace(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const a = randomContent(args.blockBytes);
  const b = Buffer.from(a);
  const shaA = makeUnique(a, 1);
  const shaB = makeUnique(b, 2);
  const t = { opens: 0, enoent: 0, short: 0, mixed: 0, readsOfA: 0, readsOfB: 0, otherErrors: 0, renames: 0 };
  let firstError: string | null = null;
  const timesMs = await runs(args, async (run) => {
    const counted = run >= args.warmups;
    const r = await sys.renameRace([a, b], args.readers, counted ? args.iterations : Math.max(args.readers, Math.ceil(args.iterations / 10)));
    if (counted) {
      for (const k of Object.keys(t) as (keyof typeof t)[]) t[k] += r[k];
      firstError ??= r.firstError;
    }
    return r.timeMs;
  });
  const wrong = t.short + t.mixed;
  return {
    figures: [
      figure(
        'opens',
        `attempted opens of hot.bin by ${args.readers} concurrent readers (each: open + whole read in 1 MiB calls + close; ENOENT counted as an attempt) while a writer writes hot.bin.tmp and renames it over hot.bin`,
        'ops/s',
        0,
        args.iterations,
        timesMs,
      ),
    ],
    checks: {
      contentVerified: wrong === 0,
      readers: args.readers,
      opensPerRun: args.iterations,
      opens: t.opens,
      enoent: t.enoent,
      wrongContent: wrong,
      shortReads: t.short,
      mixedReads: t.mixed,
      readsOfA: t.readsOfA,
      readsOfB: t.readsOfB,
      otherErrors: t.otherErrors,
      firstError,
      renames: t.renames,
      versionSha256A: shaA,
      versionSha256B: shaB,
      compareMethod: 'byte for byte against both versions (Buffer.equals)',
    },
  };
}

const WORKLOAD_RUNNERS: Record<Workload, (args: PeerTrialArgs, sys: PeerSystem) => Promise<TrialOutput>> = {
  'hot-read': hotRead,
  'cold-read': coldRead,
  write: uniqueWrite,
  'dup-write': dupWrite,
  contention,
  capacity,
  meta,
  'rename-race': renameRace,
  'per-file': perFile,
};

/**
 * per-file: SGLang's and LMCache's pattern on one thread (PeerSystem.perFile), `blocks` files a run:
 * store and load rates, and each operation's rate (files per second of that operation's time).
 */
async function perFile(args: PeerTrialArgs, sys: PeerSystem): Promise<TrialOutput> {
  const n = args.blocks;
  const t = { store: [] as number[], load: [] as number[], create: [] as number[], close: [] as number[], rename: [] as number[], exists: [] as number[], open: [] as number[] };
  let ok = true;
  for (let i = 0; i < args.warmups + args.runs; i++) {
    const r = await sys.perFile(n, args.blockBytes);
    if (r === null) throw new Error(`${args.system} has no files for the per-file pattern`);
    ok &&= r.ok;
    if (i >= args.warmups) {
      t.store.push(r.createMs + r.writeMs + r.closeMs + r.renameMs);
      t.load.push(r.openMs + r.readMs + r.readCloseMs);
      t.create.push(r.createMs);
      t.close.push(r.closeMs);
      t.rename.push(r.renameMs);
      t.exists.push(r.existsMs);
      t.open.push(r.openMs);
    }
    await betweenRuns();
  }
  const bytes = n * args.blockBytes;
  return {
    figures: [
      figure('store', `${n} files stored one at a time: create a temp name, one write, close, os.replace (the time of those calls)`, 'GB/s', bytes, n, t.store),
      figure('load', `each loaded: open, readinto into a buffer made beforehand, close`, 'GB/s', bytes, n, t.load),
      figure('create', 'open(O_CREAT|O_TRUNC) of the temp name (files/s of its time)', 'ops/s', 0, n, t.create),
      figure('close-commit', 'close() after the one write (files/s of its time)', 'ops/s', 0, n, t.close),
      figure('rename', 'os.replace over the final name (files/s of its time)', 'ops/s', 0, n, t.rename),
      figure('exists', 'os.path.exists of a stored file (files/s of its time)', 'ops/s', 0, n, t.exists),
      figure('read-open', 'open(O_RDONLY) of a stored file (files/s of its time)', 'ops/s', 0, n, t.open),
    ],
    checks: { contentVerified: ok, files: n },
  };
}

/** One peers-suite trial: open its system, run its workload, close it. */
export function runPeerTrial(args: PeerTrialArgs) {
  const spec = systemSpec(args.system);
  const na = spec.notApplicable[args.workload];
  if (na !== undefined) throw new Error(`${args.system} does not run ${args.workload}: ${na}`);
  return withSystem(args.scratchDir, (layout) => spec.open({ args, layout }), (sys) => WORKLOAD_RUNNERS[args.workload](args, sys));
}

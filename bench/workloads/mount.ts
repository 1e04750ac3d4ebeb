/**
 * The mount suite's workloads, run in a trial process (trial.ts): the trial starts its system (a
 * Cascade daemon with direct_io or --kernel-cache, bindfs over a private tmpfs or over a disk
 * directory, a raw tmpfs or disk directory), runs one workload against it with plain synchronous file
 * I/O and stops the system.
 *
 * The readers and writers are this process; the filesystem daemons are children of it, so a daemon's
 * event loop (which serves FUSE) never competes with the reader's own JS. Reads go into one
 * pre-allocated, pre-touched buffer with 1 MiB read calls; writes are 1 MiB write calls; every file
 * holds content no other file has (Cascade deduplicates identical content).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  clockMs,
  dropPageCache,
  FUSE_CACHE_EXPIRY_MS,
  makeUnique,
  randomContent,
  readMatches,
  readTarget,
  readWhole,
  residentBytes,
  sample as sampleRuns,
  sha256Hex,
  writeWhole,
} from '../common';
import {
  META_FILE_BYTES,
  META_OPEN_FILES,
  type CheckValue,
  type FigureSamples,
  type FigureUnit,
  type MountTrialArgs,
  type SystemOf,
} from '../protocol';

type SystemName = SystemOf<'mount'>;
import {
  cascadeDramBytes,
  CascadeDaemon,
  DRAM_PAGE_BYTES,
  checkInterrupted,
  delay,
  mountTmpfs,
  startBindfsOver,
  withSystem,
  unmountTmpfs,
  type TrialLayout,
} from '../mounts';


/** Between runs (untimed): let signal handlers run, stop if one asked to. */
async function betweenRuns(): Promise<void> {
  await new Promise<void>((resolve) => setImmediate(resolve));
  checkInterrupted();
}

/** Runs `op` warmups + runs times back to back; keeps the counted runs' times (op returns its own). */
function sample(args: MountTrialArgs, op: (run: number) => number | Promise<number>): Promise<number[]> {
  return sampleRuns(args, op, betweenRuns);
}

// ---- file I/O (common.ts) ------------------------------------------------------------------------

const fileName = (dir: string, i: number) => path.join(dir, `f-${String(i).padStart(5, '0')}.bin`);

// ---- systems --------------------------------------------------------------------------------------

interface BenchSystem {
  name: SystemName;
  /** Where the trial's files go (MOUNT/kv/bench for Cascade: files live under kv/<model>/). */
  workDir: string;
  /** A FUSE mount (its kernel entry/attribute caches expire after 1 s). */
  fuse: boolean;
  /**
   * Drops the page cache that a cold read of `file` could be served from: the backing files (disk
   * segments, the source file under bindfs, the file itself) and the file through the mount.
   * Returns the backing files, whose residency is then checked with fincore.
   */
  dropForColdRead(file: string): string[];
  /**
   * Waits (untimed) until background work caused by writing `contentBytes` in total is done (Cascade:
   * the write-back to the disk tier), so that it does not compete with what is timed next. Returns ms.
   */
  settle(contentBytes: number): Promise<number>;
  /** Empties what the system holds in memory itself (Cascade: restart, so DRAM is empty). */
  restart(): Promise<void>;
  /** Store counters etc. (Cascade only). */
  stats(): Promise<Record<string, CheckValue>>;
  facts(): Record<string, CheckValue>;
  close(): Promise<void>;
  /** For the exit handler, when close() could not run. */
  closeNowSync(): void;
}

function cliPath(): string {
  const p = path.join(__dirname, '..', '..', 'mount', 'cli.js');
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: build first (npx tsc -p tsconfig.json)`);
  return p;
}

/** ROOT/kv/bench, created (Cascade keeps files under kv/<model>/; the peers get the same layout). */
function benchDirUnder(root: string): string {
  const dir = path.join(root, 'kv', 'bench');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

async function cascadeSystem(name: SystemName, layout: TrialLayout, dramBytes: number): Promise<BenchSystem> {
  const daemon = new CascadeDaemon(layout, { cliPath: cliPath(), kernelCache: name === 'cascade-kc', dramBytes });
  await daemon.start();
  return {
    name,
    workDir: benchDirUnder(layout.mountDir),
    fuse: true,
    dropForColdRead(file) {
      const segments = daemon.segmentFiles();
      for (const s of segments) dropPageCache(s);
      dropPageCache(file);
      return segments;
    },
    settle: (contentBytes) => daemon.settle(contentBytes),
    async restart() {
      await daemon.stop();
      await daemon.start();
    },
    stats: () => daemon.freshStats(),
    facts: () => daemon.facts(),
    close: () => daemon.stop(),
    closeNowSync: () => daemon.stopNowSync(),
  };
}

async function bindfsSystem(name: SystemName, layout: TrialLayout): Promise<BenchSystem> {
  const onDisk = name === 'bindfs-disk';
  const b = await startBindfsOver(layout, onDisk);
  return {
    name,
    workDir: benchDirUnder(layout.mountDir),
    fuse: true,
    dropForColdRead(file) {
      const backing = path.join(b.sourceDir, path.relative(layout.mountDir, file));
      dropPageCache(backing);
      dropPageCache(file);
      return [backing];
    },
    settle: async () => 0,
    restart: () => b.restart(),
    stats: async () => ({}),
    facts: () => ({ bindfsSource: onDisk ? 'disk directory' : 'private tmpfs' }),
    close: () => b.close(),
    closeNowSync: () => b.closeNowSync(),
  };
}

function rawSystem(name: SystemName, layout: TrialLayout): BenchSystem {
  const onDisk = name === 'disk';
  if (!onDisk) mountTmpfs(layout.tmpfsDir);
  return {
    name,
    workDir: benchDirUnder(onDisk ? layout.diskDir : layout.tmpfsDir),
    fuse: false,
    dropForColdRead(file) {
      dropPageCache(file);
      return [file];
    },
    settle: async () => 0,
    restart: async () => undefined,
    stats: async () => ({}),
    facts: () => ({}),
    close: async () => (onDisk ? undefined : unmountTmpfs(layout.tmpfsDir)),
    closeNowSync: () => (onDisk ? undefined : unmountTmpfs(layout.tmpfsDir)),
  };
}

async function openSystem(args: MountTrialArgs, layout: TrialLayout): Promise<BenchSystem> {
  switch (args.system) {
    case 'cascade':
    case 'cascade-kc':
      return cascadeSystem(args.system, layout, dramBytesFor(args));
    case 'bindfs':
    case 'bindfs-disk':
      return bindfsSystem(args.system, layout);
    case 'tmpfs':
    case 'disk':
      return rawSystem(args.system, layout);
  }
}

/** Bytes of file content the trial keeps in the store at once. */
function workingSetBytes(args: MountTrialArgs): number {
  const footprint = Math.ceil(Math.max(args.blockBytes, META_FILE_BYTES) / DRAM_PAGE_BYTES) * DRAM_PAGE_BYTES;
  switch (args.workload) {
    case 'hot-read':
    case 'blocks':
    case 'meta':
      return args.blocks * footprint;
    case 'cold-read':
      return (args.warmups + args.runs) * footprint;
    case 'write':
      return 2 * (args.warmups + args.runs) * footprint; // two figures, each with its own files
  }
}

/** The DRAM tier holds the whole working set (hot means in DRAM). */
function dramBytesFor(args: MountTrialArgs): number {
  return cascadeDramBytes(workingSetBytes(args));
}

// ---- workloads ------------------------------------------------------------------------------------

interface TrialOutput {
  figures: FigureSamples[];
  checks: Record<string, CheckValue>;
}

function figure(figure: string, label: string, unit: FigureUnit, bytesPerRun: number, opsPerRun: number, timesMs: number[]): FigureSamples {
  return { figure, label, unit, bytesPerRun, opsPerRun, timesMs };
}

/** `args.blocks` files of unique content under workDir/<sub>, written and settled (untimed), and a reader's buffer. */
async function hotFiles(args: MountTrialArgs, sys: BenchSystem, sub: string): Promise<{ dir: string; shas: string[]; settleMs: number; target: Buffer }> {
  const dir = path.join(sys.workDir, sub);
  fs.mkdirSync(dir);
  const shas = writeFiles(dir, args.blocks, args.blockBytes);
  const settleMs = await sys.settle(args.blocks * args.blockBytes);
  return { dir, shas, settleMs, target: readTarget(args.blockBytes) };
}

/** Writes `count` files of unique content under dir; returns their SHA-256s. */
function writeFiles(dir: string, count: number, blockBytes: number, fsync = false): string[] {
  const content = randomContent(blockBytes);
  const shas: string[] = [];
  for (let i = 0; i < count; i++) {
    shas.push(makeUnique(content, i));
    writeWhole(fileName(dir, i), content, fsync);
  }
  return shas;
}

/**
 * Hot whole-block reads: files written, each read twice untimed (Cascade: in DRAM since the write;
 * --kernel-cache and the peers: in the page cache), then each run opens one file (rotating over the
 * set), reads it whole, closes it.
 */
async function hotReadTrial(args: MountTrialArgs, sys: BenchSystem): Promise<TrialOutput> {
  const { dir, shas, settleMs, target } = await hotFiles(args, sys, 'hot');
  let verified = true;
  for (let pass = 0; pass < 2; pass++) {
    for (let i = 0; i < args.blocks; i++) {
      const n = readWhole(fileName(dir, i), target); // read even after a mismatch: the passes warm every file
      verified &&= readMatches(n, target, args.blockBytes, shas[i]);
    }
  }
  const timesMs = await sample(args, (run) => {
    const i = run % args.blocks;
    const t0 = clockMs();
    const n = readWhole(fileName(dir, i), target);
    const t = clockMs() - t0;
    verified &&= readMatches(n, target, args.blockBytes, shas[i]); // untimed
    return t;
  });
  return {
    figures: [
      figure(
        'read',
        `open + read whole file (1 MiB reads into a pre-touched buffer, to EOF) + close, rotating over ${args.blocks} hot files`,
        'GB/s',
        args.blockBytes,
        1,
        timesMs,
      ),
    ],
    checks: { contentVerified: verified, files: args.blocks, settleMs: Math.round(settleMs) },
  };
}

/** Block rate: each run opens, reads whole and closes every one of `files` hot 2 MiB files. */
async function blocksTrial(args: MountTrialArgs, sys: BenchSystem): Promise<TrialOutput> {
  const { dir, shas, settleMs, target } = await hotFiles(args, sys, 'blocks');
  let verified = true;
  for (let pass = 0; pass < 2; pass++) {
    for (let i = 0; i < args.blocks; i++) verified &&= readWhole(fileName(dir, i), target) === args.blockBytes;
  }
  const timesMs = await sample(args, () => {
    let short = 0;
    const t0 = clockMs();
    for (let i = 0; i < args.blocks; i++) if (readWhole(fileName(dir, i), target) !== args.blockBytes) short++;
    const t = clockMs() - t0;
    verified &&= short === 0 && sha256Hex(target.subarray(0, args.blockBytes)) === shas[args.blocks - 1]; // the last file read
    return t;
  });
  return {
    figures: [
      figure('blocks/s', `open + read whole + close of each of ${args.blocks} hot files, back to back`, 'ops/s', args.blocks * args.blockBytes, args.blocks, timesMs),
    ],
    checks: { contentVerified: verified, files: args.blocks, settleMs: Math.round(settleMs) },
  };
}

/**
 * Cold reads: files written (and fsynced), the system restarted (Cascade: DRAM empty, everything on the
 * disk tier), then before each run the page cache of every backing file and of the file through the
 * mount is dropped; each run reads a file not read before.
 */
async function coldReadTrial(args: MountTrialArgs, sys: BenchSystem): Promise<TrialOutput> {
  const dir = path.join(sys.workDir, 'cold');
  fs.mkdirSync(dir);
  const count = args.warmups + args.runs;
  const shas = writeFiles(dir, count, args.blockBytes, true);
  await sys.restart();
  const target = readTarget(args.blockBytes);
  let verified = true;
  let maxResidentAfterDrop = 0;
  let residencyKnown = true;
  let backingFiles = 0;
  const timesMs = await sample(args, (run) => {
    const file = fileName(dir, run);
    const backing = sys.dropForColdRead(file);
    backingFiles = backing.length;
    for (const b of backing) {
      const res = residentBytes(b);
      if (res === null) residencyKnown = false;
      else maxResidentAfterDrop = Math.max(maxResidentAfterDrop, res);
    }
    const t0 = clockMs();
    const n = readWhole(file, target);
    const t = clockMs() - t0;
    verified &&= readMatches(n, target, args.blockBytes, shas[run]);
    return t;
  });
  return {
    figures: [
      figure(
        'read',
        'open + read whole file + close; first read of the file since a restart, page cache of backing files and of the file dropped before each run',
        'GB/s',
        args.blockBytes,
        1,
        timesMs,
      ),
    ],
    checks: {
      contentVerified: verified,
      dropMethod: 'dd iflag=nocache count=0 (posix_fadvise DONTNEED)',
      backingFilesDropped: backingFiles,
      maxResidentBytesAfterDrop: residencyKnown ? maxResidentAfterDrop : null,
    },
  };
}

/**
 * Unique writes: each run creates a new file (open O_WRONLY|O_CREAT|O_TRUNC), writes new content in
 * 1 MiB calls and closes it; close() is where Cascade commits (hash, DRAM), so it is timed.
 * `write`: every run starts with the daemon idle (the previous file's write-back to disk done, untimed),
 * like the store suite's put. `write-stream`: runs back to back, so the write-back of earlier files
 * competes with the next write for the two cores (stricter; what a writer that never pauses sees).
 */
async function writeTrial(args: MountTrialArgs, sys: BenchSystem): Promise<TrialOutput> {
  const dir = path.join(sys.workDir, 'write');
  fs.mkdirSync(dir);
  const content = randomContent(args.blockBytes);
  const shas: string[] = [];
  let settleMs = 0;
  const timedWrite = (i: number) => {
    shas[i] = makeUnique(content, i); // untimed
    const t0 = clockMs();
    writeWhole(fileName(dir, i), content);
    return clockMs() - t0;
  };
  const perFigure = args.warmups + args.runs;
  const idleMs = await sample(args, async (run) => {
    settleMs += await sys.settle(run * args.blockBytes);
    return timedWrite(run);
  });
  settleMs += await sys.settle(perFigure * args.blockBytes);
  const streamMs = await sample(args, (run) => timedWrite(perFigure + run));
  const target = readTarget(args.blockBytes);
  let verified = true;
  for (const i of [0, perFigure - 1, perFigure, shas.length - 1]) {
    const n = readWhole(fileName(dir, i), target);
    verified &&= readMatches(n, target, args.blockBytes, shas[i]);
  }
  const what = 'open(O_WRONLY|O_CREAT|O_TRUNC) of a new file + 1 MiB writes of new content + close (Cascade commits at close)';
  return {
    figures: [
      figure('write', `${what}; daemon idle before each run`, 'GB/s', args.blockBytes, 1, idleMs),
      figure('write-stream', `${what}; back to back, earlier files' write-back running behind`, 'GB/s', args.blockBytes, 1, streamMs),
    ],
    checks: { contentVerified: verified, settleMs: Math.round(settleMs) },
  };
}

/**
 * Metadata: open(O_RDONLY)+close of existing small files (`iterations` per run, cycling over
 * META_OPEN_FILES), then stat of every one of `files` files once its kernel cache has expired
 * (stat-uncached: one LOOKUP each on a FUSE mount) and right away again (stat-cached).
 */
async function metaTrial(args: MountTrialArgs, sys: BenchSystem): Promise<TrialOutput> {
  const dir = path.join(sys.workDir, 'meta');
  fs.mkdirSync(dir);
  writeFiles(dir, args.blocks, META_FILE_BYTES);
  const settleMs = await sys.settle(args.blocks * META_FILE_BYTES);
  const names = Array.from({ length: args.blocks }, (_, i) => fileName(dir, i));
  const openNames = names.slice(0, Math.min(META_OPEN_FILES, names.length));
  const openCloseMs = await sample(args, () => {
    const t0 = clockMs();
    for (let i = 0; i < args.iterations; i++) fs.closeSync(fs.openSync(openNames[i % openNames.length], 'r'));
    return clockMs() - t0;
  });
  const statUncachedMs: number[] = [];
  const statCachedMs: number[] = [];
  let sizesOk = true;
  const statAll = () => {
    const t0 = clockMs();
    for (const n of names) sizesOk &&= fs.statSync(n).size === META_FILE_BYTES;
    return clockMs() - t0;
  };
  for (let run = 0; run < args.warmups + args.runs; run++) {
    if (sys.fuse) await delay(FUSE_CACHE_EXPIRY_MS); // untimed: let every entry and attribute expire
    const uncached = statAll();
    const cached = statAll();
    if (run >= args.warmups) {
      statUncachedMs.push(uncached);
      statCachedMs.push(cached);
    }
    await betweenRuns();
  }
  return {
    figures: [
      figure(
        'open+close',
        `open(O_RDONLY) + close of an existing ${META_FILE_BYTES}-byte file, ${args.iterations} per run over ${openNames.length} files`,
        'ops/s',
        0,
        args.iterations,
        openCloseMs,
      ),
      figure(
        'stat-uncached',
        `stat of each of ${args.blocks} files, ${FUSE_CACHE_EXPIRY_MS} ms after the last access (FUSE entry/attr caches expired; no such cache on tmpfs/disk)`,
        'ops/s',
        0,
        args.blocks,
        statUncachedMs,
      ),
      figure('stat-cached', `stat of each of ${args.blocks} files again right after (within the 1 s FUSE caches)`, 'ops/s', 0, args.blocks, statCachedMs),
    ],
    checks: { sizesVerified: sizesOk, files: args.blocks, openCloseFiles: openNames.length, settleMs: Math.round(settleMs) },
  };
}

const WORKLOADS: Record<MountTrialArgs['workload'], (args: MountTrialArgs, sys: BenchSystem) => Promise<TrialOutput>> = {
  'hot-read': hotReadTrial,
  blocks: blocksTrial,
  'cold-read': coldReadTrial,
  write: writeTrial,
  meta: metaTrial,
};

/** One mount-suite trial: open its system, run its workload, close it. */
export function runMountTrial(args: MountTrialArgs) {
  return withSystem(args.scratchDir, (layout) => openSystem(args, layout), (sys) => WORKLOADS[args.workload](args, sys));
}

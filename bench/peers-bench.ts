/**
 * The side-by-side benchmark (`npm run bench`): Cascade through its mount against real peers, started
 * and stopped by the benchmark itself: raw tmpfs (the physical limit of this box) and a disk directory
 * (the limit for cold reads), bindfs (C FUSE, same libfuse2), Redis (redis-server + ioredis over
 * loopback) and HDF5 through h5py. Cascade runs as three rows: its mount with the native engine
 * (`cascade`), the same mount with the previous fuse-native engine (`cascade-fuse-native`), and reads
 * through its same-node client (`cascade-client`). Workloads: hot reads (also as blocks/s), cold reads,
 * unique writes, duplicate writes, 4 concurrent readers, capacity overflow, metadata, at 2, 64 and
 * 256 MiB blocks (--quick: 2 and 64 MiB), and rename-race (4 readers opening a 2 MiB file that a writer
 * keeps replacing by rename). Trials are data (`trialTable`); each runs in a fresh process
 * (dist/bench/peers-trial.js). Then the full-cache trials (bench/full-cache-bench.ts, in a process of
 * their own; not with --filter unless it names full-cache): their table ends the report.
 * This file computes the statistics and ratios, writes bench/results/<date>-<host>.json, a markdown
 * report (stdout and <date>-<host>.md) and a chart (<date>-<host>.svg).
 *
 *   node dist/bench/peers-bench.js                          full run
 *   node dist/bench/peers-bench.js --quick                  2 and 64 MiB, 5 counted runs (about 3 min)
 *   node dist/bench/peers-bench.js --filter 'hot-read 2MiB,cold-read 2MiB disk' --out /tmp/x.json
 */
import * as crypto from 'node:crypto';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SingleBar } from 'cli-progress';
import { MiB } from '../store/constants';
import { fullCacheTable, type FullCacheDoc } from './full-cache-bench';
import {
  f3,
  filterMatches,
  gitCommit,
  hostEnvironment,
  memoryEnvironment,
  parseOptions,
  rateOf,
  resultsFile,
  resultsHead,
  runMode,
  sizeLabel as mibLabel,
  spread,
  writeResults,
  type HostEnvironment,
  type MemoryEnvironment,
  type Options,
  type Spread,
} from './common';
import { BINDFS_OPTIONS, TMPFS_SOURCE } from './mount-systems';
import { renderChartSvg, type ChartRow } from './peers-chart';
import { META_FILE_BYTES, META_OPEN_FILES, parsePeerTrialResult, WORKLOADS, type CheckValue, type FigureUnit, type PeerTrialArgs, type PeerTrialResult, type SystemName, type Workload } from './peers-protocol';
import { H5PY_PEER_SCRIPT, pythonForH5py, SYSTEMS, systemSpec, type Role } from './peers-systems';
import {
  checkAndFailureLines,
  commandOutput,
  dpkgVersion,
  exitOnProblems,
  installDriverSignalHandlers,
  leftoverSnapshot,
  mountPreflightProblems,
  newLeftovers,
  npmVersion,
  runTrialProcess,
  type TrialProcess,
} from './trial-process';

// ---- configuration --------------------------------------------------------------------------------

const SCRATCH_PREFIX = 'cascade-pbench-';
const WARMUPS = 1;
/** A trial that takes longer than this is stuck (the driver then stops it and sweeps its mounts). */
const TRIAL_TIMEOUT_MS = 10 * 60 * 1000;
/** The full-cache run: about 3 min with --quick and 7 min in full on a 2-core VM. */
const FULL_CACHE_TIMEOUT_MS = 30 * 60 * 1000;
const READERS = 4;
/** One system-prompt block under this many names. */
const DUP_NAMES = 50;
/** Capacity overflow: data = this many times the system's memory. */
const CAPACITY_FACTOR = 4;
/**
 * dup-write keeps every copy on the peers (tmpfs, Redis, h5py): 50 x 256 MiB = 12.5 GiB would not fit
 * beside everything else in this box's 24 GiB, so dup-write stops at this block size.
 */
const DUP_MAX_BLOCK_BYTES = 64 * MiB;
/** rename-race: one file of this size (a KV block; 2+ read calls per open, so a mixed read can show). */
const RENAME_RACE_BYTES = 2 * MiB;
/** The hot-read goal for a Cascade row: 2 MiB blocks (open, whole read, close) per second. */
const GOAL_BLOCKS_PER_S = 8000;

interface Sizing {
  blockSizes: number[];
  /** Counted runs per block size (index as blockSizes). */
  runs: { hot: number[]; cold: number[]; write: number[]; contention: number[]; capacity: number; meta: number };
  hotBlocks: number[];
  contentionBlocks: number[];
  contentionRounds: number[];
  /** Memory of the capacity trial's system, per block size. */
  capacityMemoryBytes: number[];
  metaBlocks: number;
  openCloseIterations: number;
  /** rename-race: counted runs, and opens per run (all readers together). */
  renameRaceRuns: number;
  renameRaceOpens: number;
}

const SIZING_FULL: Sizing = {
  blockSizes: [2 * MiB, 64 * MiB, 256 * MiB],
  runs: { hot: [20, 10, 5], cold: [10, 5, 5], write: [20, 10, 5], contention: [10, 5, 5], capacity: 5, meta: 5 },
  hotBlocks: [16, 2, 2], // 16 x 2 MiB = 32 MiB: more than the last-level cache, so hot means DRAM
  contentionBlocks: [8, 2, 1],
  contentionRounds: [4, 1, 1],
  capacityMemoryBytes: [256 * MiB, 512 * MiB, 1024 * MiB],
  metaBlocks: 2000,
  openCloseIterations: 10_000,
  renameRaceRuns: 5,
  renameRaceOpens: 20_000, // 100,000 counted opens
};

const SIZING_QUICK: Sizing = {
  blockSizes: [2 * MiB, 64 * MiB],
  runs: { hot: [5, 5], cold: [5, 5], write: [5, 5], contention: [5, 5], capacity: 5, meta: 5 },
  hotBlocks: [16, 2],
  contentionBlocks: [8, 2],
  contentionRounds: [2, 1],
  capacityMemoryBytes: [128 * MiB, 256 * MiB],
  metaBlocks: 300,
  openCloseIterations: 3_000,
  renameRaceRuns: 5,
  renameRaceOpens: 2_000, // 10,000 counted opens
};

/** What a trial is given (less its scratch dir), and its name: `<workload> <size> <system>`. */
interface TrialSpec extends Omit<PeerTrialArgs, 'scratchDir'> {
  name: string;
}

/** A workload x size x system that does not run, and why (reported in the table as such). */
interface NotRun {
  name: string;
  workload: Workload;
  blockBytes: number;
  system: SystemName;
  reason: string;
}

const sizeLabel = (sizeBytes: number) => (sizeBytes === 0 ? 'small' : mibLabel(sizeBytes));

function trialTable(options: Options): { trials: TrialSpec[]; notRun: NotRun[] } {
  const z = options.quick ? SIZING_QUICK : SIZING_FULL;
  const trials: TrialSpec[] = [];
  const notRun: NotRun[] = [];
  const add = (workload: Workload, blockBytes: number, fields: Pick<PeerTrialArgs, 'runs' | 'blocks'> & Partial<PeerTrialArgs>, warmups = WARMUPS) => {
    for (const s of SYSTEMS) {
      const name = `${workload} ${sizeLabel(blockBytes)} ${s.name}`;
      const reason = s.notApplicable[workload];
      if (reason !== undefined) {
        notRun.push({ name, workload, blockBytes, system: s.name, reason });
        continue;
      }
      trials.push({ name, workload, system: s.name, blockBytes, warmups, readers: 1, iterations: 0, memoryBytes: 0, ...fields });
    }
  };
  const workloadTrials: Record<Workload, () => void> = {
    'hot-read': () => z.blockSizes.forEach((b, i) => add('hot-read', b, { runs: z.runs.hot[i], blocks: z.hotBlocks[i] })),
    'cold-read': () => z.blockSizes.forEach((b, i) => add('cold-read', b, { runs: z.runs.cold[i], blocks: 1 })),
    write: () => z.blockSizes.forEach((b, i) => add('write', b, { runs: z.runs.write[i], blocks: 1 })),
    'dup-write': () =>
      z.blockSizes.forEach((b) => {
        if (b <= DUP_MAX_BLOCK_BYTES) return add('dup-write', b, { runs: DUP_NAMES - 1, blocks: DUP_NAMES });
        for (const s of SYSTEMS) {
          notRun.push({
            name: `dup-write ${sizeLabel(b)} ${s.name}`,
            workload: 'dup-write',
            blockBytes: b,
            system: s.name,
            reason: `not run: ${DUP_NAMES} copies of ${sizeLabel(b)} (${((DUP_NAMES * b) / 2 ** 30).toFixed(1)} GiB) do not fit in memory on the peers that keep every copy`,
          });
        }
      }),
    contention: () =>
      z.blockSizes.forEach((b, i) => add('contention', b, { runs: z.runs.contention[i], blocks: z.contentionBlocks[i], readers: READERS, iterations: z.contentionRounds[i] })),
    capacity: () =>
      z.blockSizes.forEach((b, i) =>
        add('capacity', b, { runs: z.runs.capacity, blocks: (CAPACITY_FACTOR * z.capacityMemoryBytes[i]) / b, memoryBytes: z.capacityMemoryBytes[i] }),
      ),
    meta: () => add('meta', 0, { runs: z.runs.meta, blocks: z.metaBlocks, iterations: z.openCloseIterations }),
    'rename-race': () => add('rename-race', RENAME_RACE_BYTES, { runs: z.renameRaceRuns, blocks: 1, readers: READERS, iterations: z.renameRaceOpens }),
  };
  for (const w of WORKLOADS) workloadTrials[w]();
  if (options.filter === undefined) return { trials, notRun };
  // Ratios need the limit from the same run: keep the limit's trial of every workload and size still chosen.
  const chosen = trials.filter((t) => filterMatches(options.filter, t.name));
  const key = (t: { workload: Workload; blockBytes: number }) => `${t.workload} ${t.blockBytes}`;
  const keys = new Set(chosen.map(key));
  const limits = SYSTEMS.filter((s) => s.role === 'limit').map((s) => s.name);
  return {
    trials: trials.filter((t) => chosen.includes(t) || (keys.has(key(t)) && limits.includes(t.system))),
    notRun: notRun.filter((n) => filterMatches(options.filter, n.name)),
  };
}

// ---- environment ----------------------------------------------------------------------------------

interface Environment extends HostEnvironment, MemoryEnvironment {
  redisServerVersion: string | null;
  redisServerPackage: string | null;
  ioredis: string | null;
  python: string | null;
  h5py: string | null;
  hdf5: string | null;
  numpy: string | null;
  bindfsVersion: string | null;
  bindfsPackage: string | null;
  bindfsOptions: string;
  libfuse2: string | null;
  fuseNative: string | null;
  vega: string | null;
  vegaLite: string | null;
  gitCommit: string | null;
  loadAverageAtStart: number[];
  /** SHA-256 on one core (OpenSSL through node:crypto), GB/s: the limit of a hashed write. */
  sha256OneCoreGBps: number;
}

/** One-core SHA-256 rate: 64 MiB hashed 4 times, the best pass (the write goal is 0.8x this). */
function sha256OneCoreGBps(): number {
  const data = crypto.randomBytes(64 * MiB);
  let bestMs = Infinity;
  for (let i = 0; i < 4; i++) {
    const t = performance.now();
    crypto.createHash('sha256').update(data).digest();
    bestMs = Math.min(bestMs, performance.now() - t);
  }
  return data.length / (bestMs / 1000) / 1e9;
}

function h5pyVersions(): Record<string, string> {
  const r = spawnSync(pythonForH5py(), ['-c', 'import sys,json,h5py,numpy; print(json.dumps({"python": sys.version.split()[0], "h5py": h5py.version.version, "hdf5": h5py.version.hdf5_version, "numpy": numpy.__version__}))'], {
    encoding: 'utf8',
  });
  if (r.status !== 0) return {};
  try {
    return JSON.parse(r.stdout) as Record<string, string>;
  } catch {
    return {};
  }
}

function environment(): Environment {
  const h5 = h5pyVersions();
  return {
    ...hostEnvironment(),
    redisServerVersion: commandOutput('redis-server', ['--version']),
    redisServerPackage: dpkgVersion('redis-server'),
    ioredis: npmVersion('ioredis'),
    python: h5.python ?? null,
    h5py: h5.h5py ?? null,
    hdf5: h5.hdf5 ?? null,
    numpy: h5.numpy ?? null,
    bindfsVersion: commandOutput('bindfs', ['--version']),
    bindfsPackage: dpkgVersion('bindfs'),
    bindfsOptions: ['-f', ...BINDFS_OPTIONS].join(' '),
    libfuse2: dpkgVersion('libfuse2'),
    fuseNative: npmVersion('fuse-native'),
    vega: npmVersion('vega'),
    vegaLite: npmVersion('vega-lite'),
    ...memoryEnvironment(),
    gitCommit: gitCommit(),
    loadAverageAtStart: os.loadavg(),
    sha256OneCoreGBps: sha256OneCoreGBps(),
  };
}

/** Refuses to start where the trials cannot run, naming what to install. */
function preflight(trials: TrialSpec[]): void {
  const uses = (s: SystemName) => trials.some((t) => t.system === s);
  const missing = (cmd: string, args: string[]) => spawnSync(cmd, args, { stdio: 'ignore' }).error !== undefined;
  const problems = mountPreflightProblems(trials.some((t) => systemSpec(t.system).role === 'cascade'));
  if (missing('fincore', ['--version'])) problems.push('fincore missing: apt-get install util-linux');
  if (uses('bindfs') && missing('bindfs', ['--version'])) problems.push('bindfs missing: apt-get install bindfs (or bash scripts/bench-peers.sh; never fuse3)');
  if (uses('redis') && missing('redis-server', ['--version'])) problems.push('redis-server missing: apt-get install redis-server (or bash scripts/bench-peers.sh)');
  if (uses('h5py')) {
    const r = spawnSync(pythonForH5py(), ['-c', 'import h5py, numpy'], { encoding: 'utf8' });
    if (r.status !== 0) problems.push(`h5py missing for ${pythonForH5py()}: apt-get install python3-h5py python3-numpy (or bash scripts/bench-peers.sh)`);
    if (!fs.existsSync(H5PY_PEER_SCRIPT)) problems.push(`${H5PY_PEER_SCRIPT} is missing`);
  }
  exitOnProblems('peers-bench', problems);
}

// ---- statistics -----------------------------------------------------------------------------------

interface FigureReport {
  figure: string;
  label: string;
  unit: FigureUnit;
  bytesPerRun: number;
  opsPerRun: number;
  latencyMs: Spread;
  /** In `unit`: GB/s (1e9 bytes/s) or ops/s. */
  rate: Spread;
  /** The limit (tmpfs; the disk for cold reads) and the median ratio to it. */
  limit: SystemName | null;
  xLimit: number | null;
  /** The best real peer for this figure (highest median among bindfs, Redis, h5py) and the ratio to it. */
  bestPeer: SystemName | null;
  xBestPeer: number | null;
  timesMs: number[];
}

interface TrialReport {
  name: string;
  workload: Workload;
  system: SystemName;
  role: Role;
  blockBytes: number;
  warmups: number;
  runs: number;
  wallTimeMs: number;
  loadAverage1mAfter: number;
  figures: FigureReport[];
  checks: Record<string, CheckValue>;
  sweep: string[];
}

function summarize(spec: TrialSpec, result: PeerTrialResult, wallTimeMs: number, sweep: string[]): TrialReport {
  return {
    name: spec.name,
    workload: spec.workload,
    system: spec.system,
    role: systemSpec(spec.system).role,
    blockBytes: spec.blockBytes,
    warmups: result.warmups,
    runs: result.runs,
    wallTimeMs,
    loadAverage1mAfter: os.loadavg()[0],
    checks: result.checks,
    sweep,
    figures: result.figures.map((f) => ({
      figure: f.figure,
      label: f.label,
      unit: f.unit,
      bytesPerRun: f.bytesPerRun,
      opsPerRun: f.opsPerRun,
      latencyMs: spread(f.timesMs),
      rate: spread(f.timesMs.map((t) => rateOf(f.unit, f.bytesPerRun, f.opsPerRun, t))),
      limit: null,
      xLimit: null,
      bestPeer: null,
      xBestPeer: null,
      timesMs: f.timesMs,
    })),
  };
}

function attachRatios(reports: TrialReport[]): void {
  for (const r of reports) {
    const same = reports.filter((x) => x.workload === r.workload && x.blockBytes === r.blockBytes);
    for (const f of r.figures) {
      const medianOf = (x: TrialReport) => x.figures.find((g) => g.figure === f.figure)?.rate.median;
      const limit = same.find((x) => x.role === 'limit' && medianOf(x) !== undefined);
      if (limit) {
        f.limit = limit.system;
        f.xLimit = f.rate.median / medianOf(limit)!;
      }
      let best: TrialReport | undefined;
      for (const x of same.filter((y) => y.role === 'peer' && medianOf(y) !== undefined)) if (!best || medianOf(x)! > medianOf(best)!) best = x;
      if (best) {
        f.bestPeer = best.system;
        f.xBestPeer = f.rate.median / medianOf(best)!;
      }
    }
  }
}

// ---- report ---------------------------------------------------------------------------------------

const f2 = (x: number) => x.toFixed(2);
const fRate = (unit: FigureUnit, x: number) => (unit === 'GB/s' ? (x >= 0.1 ? f2(x) : x.toPrecision(2)) : Math.round(x).toLocaleString('en-US'));
const fx = (x: number | null) => (x === null ? '-' : `${x >= 0.1 ? f2(x) : x.toPrecision(2)}x`);
const fBytes = (b: number) => (Math.abs(b) >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / MiB).toFixed(1)} MiB`);
const num = (v: CheckValue | undefined) => (typeof v === 'number' ? v : null);

function markdown(
  date: string,
  env: Environment,
  reports: TrialReport[],
  notRun: NotRun[],
  failures: { trial: string; error: string }[],
  quick: boolean,
  wallTimeMs: number,
  chartFile: string | null,
  leftovers: string[],
): string {
  const lines: string[] = [];
  lines.push(`### Side-by-side benchmark, ${date}, ${env.hostname}${quick ? ' (--quick)' : ''}`);
  lines.push('');
  const disk = env.tmpDirMount ? `${env.tmpDirMount.fsType} (${env.tmpDirMount.source})` : 'unknown';
  lines.push(
    `${String(env.cpuModel)}, ${env.cores} cores, ${(env.memoryBytes / 2 ** 30).toFixed(1)} GiB, kernel ${env.kernel}, Node ${env.node}; ` +
      `redis-server ${String(env.redisServerPackage)} (ioredis ${String(env.ioredis)}); h5py ${String(env.h5py)} / HDF5 ${String(env.hdf5)} / numpy ${String(env.numpy)} (Python ${String(env.python)}); ` +
      `bindfs ${String(env.bindfsPackage)}, libfuse2 ${String(env.libfuse2)}, fuse-native ${String(env.fuseNative)}. Disk: ${disk}. ` +
      `Load average (1 min) at start ${f2(env.loadAverageAtStart[0])}, at end ${f2(os.loadavg()[0])}. ${reports.length} trials, ${(wallTimeMs / 1000).toFixed(1)} s. ` +
      `Left behind in /tmp, /dev/shm, /proc/mounts: ${leftovers.length === 0 ? 'nothing' : leftovers.join(', ')}.`,
  );
  lines.push('');
  lines.push(
    'Medians of the counted runs (after 1 warm-up), with min-max. GB/s = 1e9 bytes/s. `x limit` = median / median of the limit ' +
      '(tmpfs; the disk for cold reads); `x best peer` = median / the best median among bindfs, Redis and h5py for the same figure (named). ' +
      'Hot = in memory (page cache, tmpfs, Redis, Cascade DRAM); cold = page cache of every backing file dropped, system restarted. ' +
      'Cascade rows (each with its own ratios): `cascade` = the mount, native engine; `cascade-fuse-native` = the same mount, fuse-native engine; ' +
      '`cascade-client` = reads through the same-node client (LocalClient: open + copy out of the shared arena + release), writes through the mount. ' +
      '`blocks/s` = the same runs as `read`, one block (open, whole read, close) per run.',
  );
  lines.push('');
  lines.push('| workload | size | figure | system | runs | median | min-max | unit | x limit | x best peer |');
  lines.push('|---|---|---|---|---:|---:|---:|---|---:|---:|');
  const ordered = [...reports.map((r) => ({ r, n: undefined as NotRun | undefined })), ...notRun.map((n) => ({ r: undefined, n }))];
  const order = (w: Workload, b: number, s: SystemName) => WORKLOADS.indexOf(w) * 1e12 + b * 10 + SYSTEMS.findIndex((x) => x.name === s);
  ordered.sort((a, b) => {
    const ka = a.r ? order(a.r.workload, a.r.blockBytes, a.r.system) : order(a.n!.workload, a.n!.blockBytes, a.n!.system);
    const kb = b.r ? order(b.r.workload, b.r.blockBytes, b.r.system) : order(b.n!.workload, b.n!.blockBytes, b.n!.system);
    return ka - kb;
  });
  for (const { r, n } of ordered) {
    if (n) {
      lines.push(`| ${n.workload} | ${sizeLabel(n.blockBytes)} | - | ${n.system} | - | n/a | - | - | - | ${n.reason} |`);
      continue;
    }
    const na = Object.entries(systemSpec(r!.system).figuresNotApplicable ?? {}).filter(
      ([fig]) => r!.workload === 'meta' && !r!.figures.some((f) => f.figure === fig),
    );
    for (const f of r!.figures) {
      const self = (s: SystemName | null) => s === r!.system;
      lines.push(
        `| ${r!.workload} | ${sizeLabel(r!.blockBytes)} | ${f.figure} | ${r!.system} | ${f.timesMs.length} | ${fRate(f.unit, f.rate.median)} | ` +
          `${fRate(f.unit, f.rate.min)}-${fRate(f.unit, f.rate.max)} | ${f.unit} | ${self(f.limit) ? '1.00x' : fx(f.xLimit)} | ` +
          `${self(f.bestPeer) ? '1.00x (best)' : f.xBestPeer === null ? '-' : `${fx(f.xBestPeer)} (${String(f.bestPeer)})`} |`,
      );
    }
    for (const [fig, reason] of na) lines.push(`| ${r!.workload} | ${sizeLabel(r!.blockBytes)} | ${fig} | ${r!.system} | - | n/a | - | - | - | ${reason} |`);
  }
  const dup = reports.filter((r) => r.workload === 'dup-write');
  if (dup.length > 0) {
    lines.push('');
    lines.push(`Duplicate writes: one block under ${DUP_NAMES} names. Bytes stored = the system's own figure after the ${DUP_NAMES} writes minus before (tmpfs/bindfs: statfs; Redis: used_memory; h5py: allocated bytes of the .h5 file; Cascade: DRAM tier bytes, and segment bytes on disk).`);
    lines.push('');
    lines.push('| size | system | logical bytes | stored in memory | stored / logical | stored on disk | time for all names ms | first write ms | median duplicate write ms |');
    lines.push('|---|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const r of dup) {
      const c = r.checks;
      lines.push(
        `| ${sizeLabel(r.blockBytes)} | ${r.system} | ${fBytes(num(c.logicalBytes) ?? 0)} | ${fBytes(num(c.storedMemoryBytes) ?? 0)} | ${f2(num(c.storedMemoryPerLogical) ?? 0)} | ` +
          `${fBytes(num(c.storedDiskBytes) ?? 0)} | ${f3(num(c.totalWriteMsAllNames) ?? 0)} | ${f3(num(c.firstWriteMs) ?? 0)} | ${f3(r.figures[0]?.latencyMs.median ?? 0)} |`,
      );
    }
  }
  const cap = reports.filter((r) => r.workload === 'capacity');
  if (cap.length > 0) {
    lines.push('');
    lines.push(`Capacity overflow: ${CAPACITY_FACTOR}x the system's memory written (Cascade \`--dram\`; Redis \`maxmemory\` + allkeys-lru), then passes reading every block. tmpfs, bindfs and h5py have no eviction (not applicable).`);
    lines.push('');
    lines.push('| size | system | memory | data | in memory after writing | readable | refused writes | read pass GB/s (median) | write GB/s (median) |');
    lines.push('|---|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const r of cap) {
      const c = r.checks;
      const rd = r.figures.find((f) => f.figure === 'read');
      const wr = r.figures.find((f) => f.figure === 'write');
      lines.push(
        `| ${sizeLabel(r.blockBytes)} | ${r.system} | ${fBytes(num(c.memoryBytes) ?? 0)} | ${fBytes(num(c.dataBytes) ?? 0)} | ` +
          `${f2(num(c.percentRetainedInMemory) ?? 0)}% (${String(c.inMemoryAfterWrite)}/${String(c.blocksWritten)}) | ${f2(num(c.percentReadable) ?? 0)}% | ${String(c.refusedWrites ?? 0)} | ` +
          `${rd ? fRate('GB/s', rd.rate.median) : '-'} | ${wr ? fRate('GB/s', wr.rate.median) : '-'} |`,
      );
    }
  }
  const race = reports.filter((r) => r.workload === 'rename-race');
  if (race.length > 0) {
    const c0 = race[0].checks;
    lines.push('');
    lines.push(
      `Rename race: ${String(c0.readers)} concurrent readers (threads) open + read whole (1 MiB calls) + close \`kv/bench/hot.bin\` (${sizeLabel(race[0].blockBytes)}), ` +
        `${Number(c0.opensPerRun).toLocaleString('en-US')} opens per run, while a writer writes \`hot.bin.tmp\` with two distinct contents alternately and renames it over \`hot.bin\`. ` +
        'Every read is compared byte for byte with both versions: a wrong read is short (other length) or mixed (neither version). Counts over the counted runs.',
    );
    lines.push('');
    lines.push('| system | opens | opens/s (median) | ENOENT | wrong content (short + mixed) | other errors | reads of A / B | renames |');
    lines.push('|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const r of race) {
      const c = r.checks;
      const f = r.figures[0];
      const n = (v: CheckValue | undefined) => (num(v) ?? 0).toLocaleString('en-US');
      lines.push(
        `| ${r.system} | ${n(c.opens)} | ${f ? fRate(f.unit, f.rate.median) : '-'} | ${n(c.enoent)} | ${n(c.wrongContent)} (${n(c.shortReads)} + ${n(c.mixedReads)}) | ` +
          `${n(c.otherErrors)}${typeof c.firstError === 'string' ? ` (first: ${c.firstError.replace(/\|/g, '/').slice(0, 120)})` : ''} | ${n(c.readsOfA)} / ${n(c.readsOfB)} | ${n(c.renames)} |`,
      );
    }
  }
  const goal = reports.filter((r) => r.role === 'cascade' && r.workload === 'hot-read' && r.blockBytes === 2 * MiB);
  const fastPath = fastPathGoals(reports, env);
  if (goal.length > 0 || fastPath.length > 0) {
    lines.push('');
    lines.push(`Goals. Issue 12 (native fast path) rows are for the \`cascade\` row (native engine, no passthrough), against figures of the same run; the one-core SHA-256 rate of this machine, measured at the start, is ${env.sha256OneCoreGBps.toFixed(2)} GB/s.`);
    lines.push('');
    lines.push('| goal | trial | measured (median) | target | result |');
    lines.push('|---|---|---:|---:|---|');
    lines.push(...fastPath);
    for (const r of goal) {
      const f = r.figures.find((x) => x.figure === 'blocks/s');
      if (!f) continue;
      lines.push(
        `| >= ${GOAL_BLOCKS_PER_S.toLocaleString('en-US')} hot 2 MiB blocks/s | ${r.name} | ${fRate(f.unit, f.rate.median)} | ${GOAL_BLOCKS_PER_S.toLocaleString('en-US')} | ` +
          `${f.rate.median >= GOAL_BLOCKS_PER_S ? 'PASS' : 'FAIL'} |`,
      );
    }
  }
  lines.push(...checkAndFailureLines(reports.map((r) => ({ name: r.name, cold: r.workload === 'cold-read', checks: r.checks })), failures));
  if (chartFile) {
    lines.push('');
    lines.push(`Chart: [${path.basename(chartFile)}](${path.basename(chartFile)}).`);
  }
  return lines.join('\n') + '\n';
}

/**
 * The native fast path's goals (issue 12), each a ratio of the `cascade` row's median to another
 * system's median in the same run (or to the one-core SHA-256 rate). A figure missing from the run
 * (a --filter, a failed trial) is said, not passed.
 */
function fastPathGoals(reports: TrialReport[], env: Environment): string[] {
  const median = (system: SystemName, workload: Workload, blockBytes: number | undefined, figure: string): number | undefined =>
    reports
      .find((r) => r.system === system && r.workload === workload && (blockBytes === undefined || r.blockBytes === blockBytes))
      ?.figures.find((f) => f.figure === figure)?.rate.median;
  const rows: string[] = [];
  const goal = (what: string, trial: string, unit: FigureUnit, measured: number | undefined, reference: number | undefined, factor: number, refName: string) => {
    if (measured === undefined || reference === undefined) {
      rows.push(`| ${what} | ${trial} | ${measured === undefined ? 'not run' : fRate(unit, measured)} | ${refName} not run | - |`);
      return;
    }
    const target = factor * reference;
    rows.push(`| ${what} | ${trial} | ${fRate(unit, measured)} (${f2(measured / reference)}x ${refName}) | ${fRate(unit, target)} | ${measured >= target ? 'PASS' : 'FAIL'} |`);
  };
  const w64 = median('cascade', 'write', 64 * MiB, 'write');
  goal('write 64 MiB >= 0.8x one-core SHA-256', 'write 64MiB cascade', 'GB/s', w64, env.sha256OneCoreGBps, 0.8, 'SHA-256');
  goal('write 64 MiB >= 3x bindfs', 'write 64MiB cascade', 'GB/s', w64, median('bindfs', 'write', 64 * MiB, 'write'), 3, 'bindfs');
  goal('open+close >= 3x bindfs', 'meta small cascade', 'ops/s', median('cascade', 'meta', undefined, 'open+close'), median('bindfs', 'meta', undefined, 'open+close'), 3, 'bindfs');
  goal('uncached stat >= 1.5x bindfs', 'meta small cascade', 'ops/s', median('cascade', 'meta', undefined, 'stat-uncached'), median('bindfs', 'meta', undefined, 'stat-uncached'), 1.5, 'bindfs');
  for (const size of [2 * MiB, 64 * MiB]) {
    goal(`hot read ${sizeLabel(size)} >= 0.9x tmpfs`, `hot-read ${sizeLabel(size)} cascade`, 'GB/s', median('cascade', 'hot-read', size, 'read'), median('tmpfs', 'hot-read', size, 'read'), 0.9, 'tmpfs');
  }
  goal('cold read 64 MiB >= 0.9x disk', 'cold-read 64MiB cascade', 'GB/s', median('cascade', 'cold-read', 64 * MiB, 'read'), median('disk', 'cold-read', 64 * MiB, 'read'), 0.9, 'disk');
  goal('opens racing rename >= 0.8x tmpfs', 'rename-race 2MiB cascade', 'ops/s', median('cascade', 'rename-race', 2 * MiB, 'opens'), median('tmpfs', 'rename-race', 2 * MiB, 'opens'), 0.8, 'tmpfs');
  return rows;
}

function chartRows(reports: TrialReport[]): ChartRow[] {
  const rows: ChartRow[] = [];
  for (const r of reports) {
    for (const f of r.figures) {
      rows.push({ panel: `${r.workload}: ${f.figure} (${f.unit})`, size: sizeLabel(r.blockBytes), system: r.system, value: f.rate.median });
    }
  }
  return rows;
}

// ---- progress -------------------------------------------------------------------------------------

/** A bar on a terminal; one line per trial otherwise (CI logs, pipes). */
function progress(total: number) {
  const bar = process.stderr.isTTY
    ? new SingleBar({
        stream: process.stderr,
        format: 'bench [{bar}] {value}/{total} trials | {elapsed} | {trial}',
        barsize: 24,
        hideCursor: true,
        fps: 5,
      })
    : undefined;
  const t0 = performance.now();
  const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0)} s`;
  bar?.start(total, 0, { trial: 'starting', elapsed: elapsed() });
  return {
    starting(i: number, name: string) {
      bar?.update(i, { trial: `running ${name}`, elapsed: elapsed() });
    },
    done(i: number, line: string) {
      if (bar) {
        bar.update(i + 1, { trial: line.slice(0, 100), elapsed: elapsed() });
        return;
      }
      process.stderr.write(`[${i + 1}/${total}] ${line} (${elapsed()})\n`);
    },
    /** A line above the bar (failures): the bar is redrawn below it. */
    note(text: string) {
      if (bar) bar.stop();
      process.stderr.write(`${text}\n`);
    },
    stop() {
      bar?.stop();
    },
  };
}

// ---- main -----------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const options = parseOptions('peers-bench.js', process.argv.slice(2));
  const { trials, notRun } = trialTable(options);
  if (trials.length === 0 && !filterMatches(options.filter, FULL_CACHE_NAME)) {
    process.stderr.write(`no trial matches --filter ${String(options.filter)}\n`);
    process.exit(1);
  }
  preflight(trials);
  const bar = progress(trials.length);
  installDriverSignalHandlers('peers-bench', () => bar.stop());
  const startedAt = new Date();
  const t0 = performance.now();
  const daemonPids = new Set<number>();
  const snapshot = () => leftoverSnapshot(SCRATCH_PREFIX, TMPFS_SOURCE, daemonPids);
  const before = new Set(snapshot());
  const env = environment();
  const reports: TrialReport[] = [];
  const failures: { trial: string; error: string }[] = [];
  for (const [i, spec] of trials.entries()) {
    bar.starting(i, spec.name);
    let outcome: TrialProcess<PeerTrialResult>;
    try {
      const { name, ...trialArgs } = spec;
      outcome = await runTrialProcess({
        script: path.join(__dirname, 'peers-trial.js'),
        name,
        trialArgs,
        scratchPrefix: SCRATCH_PREFIX,
        timeoutMs: TRIAL_TIMEOUT_MS,
        parse: parsePeerTrialResult,
        onStderr: () => undefined,
      });
    } catch (e) {
      // One broken trial should not cost the others: it is reported, and its figures are missing.
      const error = e instanceof Error ? e.message : String(e);
      failures.push({ trial: spec.name, error });
      bar.note(`[${i + 1}/${trials.length}] ${spec.name}: FAILED: ${error}`);
      continue;
    }
    const { result, wallTimeMs, sweep } = outcome;
    for (const p of String(result.checks.daemonPids ?? '').split(',')) if (p !== '') daemonPids.add(Number(p));
    const report = summarize(spec, result, wallTimeMs, sweep);
    reports.push(report);
    const brief = report.figures.map((f) => `${f.figure} ${fRate(f.unit, f.rate.median)} ${f.unit}`).join(', ');
    bar.done(i, `${spec.name}: ${brief}; ${(wallTimeMs / 1000).toFixed(1)} s${sweep.length ? `; swept: ${sweep.join('; ')}` : ''}`);
  }
  bar.stop();
  attachRatios(reports);
  const leftovers = await newLeftovers(before, snapshot);
  const wallTimeMs = performance.now() - t0;

  const date = startedAt.toISOString().slice(0, 10);
  const outFile = resultsFile('', date, options);
  const base = outFile.replace(/\.json$/, '');
  let chartFile: string | null = `${base}.svg`;
  let chartError: string | null = null;
  try {
    const svg = await renderChartSvg(
      `Cascade and peers, median throughput (${env.hostname}, ${date}${options.quick ? ', --quick' : ''})`,
      chartRows(reports),
      SYSTEMS.map((s) => s.name),
    );
    fs.mkdirSync(path.dirname(chartFile), { recursive: true });
    fs.writeFileSync(chartFile, svg);
  } catch (e) {
    chartError = e instanceof Error ? e.message : String(e);
    chartFile = null;
  }
  // The full-cache trials (issue 18): creates with DRAM empty and full, tmpfs and bindfs alongside.
  const fullCache = filterMatches(options.filter, FULL_CACHE_NAME) ? runFullCache(options.quick, `${base}-full-cache.json`) : undefined;
  if (fullCache?.error !== undefined) failures.push({ trial: FULL_CACHE_NAME, error: fullCache.error });
  const md =
    markdown(date, env, reports, notRun, failures, options.quick, wallTimeMs, chartFile, leftovers) +
    (fullCache?.doc ? `\n## Full cache: creates with DRAM empty and full\n\n${FULL_CACHE_WHAT}\n\n${fullCacheTable(fullCache.doc.rows)}\n` : '');
  const doc = {
    ...resultsHead('cascade-peers-bench/1', date, startedAt, wallTimeMs, env),
    configuration: {
      ...runMode(options, WARMUPS),
      sizing: options.quick ? SIZING_QUICK : SIZING_FULL,
      readers: READERS,
      dupNames: DUP_NAMES,
      dupMaxBlockBytes: DUP_MAX_BLOCK_BYTES,
      capacityFactor: CAPACITY_FACTOR,
      metaFileBytes: META_FILE_BYTES,
      metaOpenFiles: META_OPEN_FILES,
      systems: SYSTEMS.map((s) => ({ name: s.name, role: s.role, what: s.what, notApplicable: s.notApplicable, figuresNotApplicable: s.figuresNotApplicable ?? {} })),
      trials,
    },
    trials: reports,
    notRun,
    failures,
    fullCache: fullCache?.doc ? { file: path.basename(fullCache.file), rows: fullCache.doc.rows } : null,
    chart: chartFile ? path.basename(chartFile) : null,
    chartError,
    loadAverageAtEnd: os.loadavg(),
    leftovers,
  };
  writeResults(outFile, doc);
  fs.writeFileSync(`${base}.md`, md);
  process.stdout.write(md);
  if (leftovers.length > 0) process.stderr.write(`warning: left behind: ${leftovers.join(', ')}\n`);
  if (chartError) process.stderr.write(`warning: no chart: ${chartError}\n`);
  process.stderr.write(`wrote ${outFile}, ${base}.md${chartFile ? `, ${chartFile}` : ''}; wall time ${(wallTimeMs / 1000).toFixed(1)} s\n`);
  if (failures.length > 0 || leftovers.length > 0) process.exitCode = 1;
}

const FULL_CACHE_NAME = 'full-cache';
const FULL_CACHE_WHAT =
  'One python3 process creates files (open, one write, close) through a fresh native-engine mount per --dram; the working set is 4x what DRAM holds (at least 32,768 files), so the last quarter is written into a full cache. Creates/s while DRAM is empty and while it is full, their ratio, and slot bytes per block byte; tmpfs and bindfs create the same files in the same run. Details: `bench/full-cache-bench.ts`.';

/** Run the full-cache benchmark in a process of its own (as every trial here); its JSON goes to `file`. */
function runFullCache(quick: boolean, file: string): { file: string; doc?: FullCacheDoc; error?: string } {
  process.stderr.write(`${FULL_CACHE_NAME}: ${quick ? '2 sizes' : '3 sizes'} (node dist/bench/full-cache-bench.js${quick ? ' --quick' : ''})\n`);
  const r = spawnSync(process.execPath, [path.join(__dirname, 'full-cache-bench.js'), ...(quick ? ['--quick'] : []), '--out', file], {
    stdio: ['ignore', 'ignore', 'inherit'],
    timeout: FULL_CACHE_TIMEOUT_MS,
  });
  if (r.status !== 0) return { file, error: `full-cache-bench exited ${r.status ?? r.signal}` };
  return { file, doc: JSON.parse(fs.readFileSync(file, 'utf8')) as FullCacheDoc };
}

main().catch((e: unknown) => {
  process.stderr.write(`peers-bench: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exitCode = 1;
});

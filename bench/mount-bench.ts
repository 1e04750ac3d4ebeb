/**
 * Mount benchmark driver: Cascade mounted (direct_io, the default, and --kernel-cache) against bindfs
 * (a C FUSE filesystem on the same libfuse2) over a private tmpfs and against that tmpfs read directly,
 * all in one run. Cold reads compare against bindfs over a disk directory and that directory read
 * directly (tmpfs has no cold state). Trials are data (`trialTable`); each runs in a fresh process
 * (dist/bench/mount-trial.js) that starts and stops its own system and prints one JSON line of raw
 * samples. This file computes the statistics, the ratios, the goals, writes
 * bench/results/mount-<YYYY-MM-DD>-<hostname>.json and prints a markdown report on stdout.
 *
 *   node dist/bench/mount-bench.js             full run
 *   node dist/bench/mount-bench.js --quick     fewer runs and files (about 2-3 min)
 *   node dist/bench/mount-bench.js --filter hot-read --out /tmp/x.json
 */
import { spawnSync } from 'node:child_process';
import * as os from 'node:os';
import * as path from 'node:path';
import { MiB } from '../store/constants';
import {
  f3,
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
import {
  META_FILE_BYTES,
  META_OPEN_FILES,
  parseMountTrialResult,
  type CheckValue,
  type FigureUnit,
  type MountTrialArgs,
  type MountTrialKind,
  type MountTrialResult,
  type SystemName,
} from './mount-protocol';
import { BINDFS_OPTIONS, SCRATCH_PREFIX, TMPFS_SOURCE } from './mount-systems';
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

/** What a trial is given (less its scratch dir, made when it runs), and its name. */
interface TrialSpec extends Omit<MountTrialArgs, 'scratchDir'> {
  /** Unique, and what --filter matches: e.g. 'hot-read 64MiB cascade-kc'. */
  name: string;
}

const WARMUPS = 1;
/** A trial that takes longer than this is stuck (the driver then kills it and sweeps its mounts). */
const TRIAL_TIMEOUT_MS = 10 * 60 * 1000;

/** Systems of the hot, write and metadata trials, and of the cold trials (a disk under the peers). */
const HOT_SYSTEMS: SystemName[] = ['cascade', 'cascade-kc', 'bindfs', 'tmpfs'];
const COLD_SYSTEMS: SystemName[] = ['cascade', 'cascade-kc', 'bindfs-disk', 'disk'];
const CASCADE_SYSTEMS: SystemName[] = ['cascade', 'cascade-kc'];

/** The physical limit and the C FUSE peer each figure is divided by. */
const RAW_PEER: Record<SystemName, SystemName> = {
  cascade: 'tmpfs',
  'cascade-kc': 'tmpfs',
  bindfs: 'tmpfs',
  tmpfs: 'tmpfs',
  'bindfs-disk': 'disk',
  disk: 'disk',
};
const FUSE_PEER: Record<SystemName, SystemName> = {
  cascade: 'bindfs',
  'cascade-kc': 'bindfs',
  bindfs: 'bindfs',
  tmpfs: 'bindfs',
  'bindfs-disk': 'bindfs-disk',
  disk: 'bindfs-disk',
};
/** Cold reads compare against the disk-backed peers. */
const peerOf = (peers: Record<SystemName, SystemName>, kind: MountTrialKind, system: SystemName): SystemName =>
  kind === 'cold-read' ? peers[system === 'cascade' || system === 'cascade-kc' ? 'disk' : system] : peers[system];

interface Sizing {
  runsHot2M: number;
  runsHot64M: number;
  runsCold2M: number;
  runsCold64M: number;
  runsWrite2M: number;
  runsWrite64M: number;
  runsBlocks: number;
  runsMeta: number;
  hotFiles2M: number;
  hotFiles64M: number;
  blockFiles: number;
  metaFiles: number;
  openCloseIterations: number;
}

const SIZING_FULL: Sizing = {
  runsHot2M: 30,
  runsHot64M: 10,
  runsCold2M: 20,
  runsCold64M: 10,
  runsWrite2M: 30,
  runsWrite64M: 10,
  runsBlocks: 5,
  runsMeta: 5,
  hotFiles2M: 16, // 32 MiB: more than the CPU's last-level cache, so "hot" means DRAM, not L3
  hotFiles64M: 2,
  blockFiles: 200,
  metaFiles: 2000,
  openCloseIterations: 10_000,
};

const SIZING_QUICK: Sizing = {
  runsHot2M: 5,
  runsHot64M: 5,
  runsCold2M: 5,
  runsCold64M: 5,
  runsWrite2M: 5,
  runsWrite64M: 5,
  runsBlocks: 5,
  runsMeta: 5,
  hotFiles2M: 16,
  hotFiles64M: 2,
  blockFiles: 100,
  metaFiles: 300,
  openCloseIterations: 5_000,
};

const BLOCK_SIZES = [2 * MiB, 64 * MiB];

// Goals from the issue.
const GOAL_HOT_BLOCK_BYTES = 64 * MiB;
const GOAL_HOT_X_BINDFS = 0.8;
const GOAL_HOT_X_TMPFS = 0.15;
const GOAL_BLOCKS_PER_S = 2000;
const GOAL_WRITE_GBPS = 0.8;
const GOAL_OPEN_CLOSE_PER_S = 25_000;

function sizeLabel(sizeBytes: number): string {
  return sizeBytes === 0 ? 'small' : mibLabel(sizeBytes);
}

function trialTable(options: Options): TrialSpec[] {
  const z = options.quick ? SIZING_QUICK : SIZING_FULL;
  const all: TrialSpec[] = [];
  const add = (kind: MountTrialKind, system: SystemName, blockBytes: number, runs: number, files: number, iterations = 0) => {
    all.push({ name: `${kind} ${sizeLabel(blockBytes)} ${system}`, kind, system, blockBytes, warmups: WARMUPS, runs, files, iterations });
  };
  for (const blockBytes of BLOCK_SIZES) {
    const big = blockBytes === 64 * MiB;
    for (const s of HOT_SYSTEMS) add('hot-read', s, blockBytes, big ? z.runsHot64M : z.runsHot2M, big ? z.hotFiles64M : z.hotFiles2M);
  }
  for (const s of HOT_SYSTEMS) add('blocks', s, 2 * MiB, z.runsBlocks, z.blockFiles);
  for (const blockBytes of BLOCK_SIZES) {
    const big = blockBytes === 64 * MiB;
    for (const s of COLD_SYSTEMS) add('cold-read', s, blockBytes, big ? z.runsCold64M : z.runsCold2M, 1);
  }
  for (const blockBytes of BLOCK_SIZES) {
    const big = blockBytes === 64 * MiB;
    for (const s of HOT_SYSTEMS) add('write', s, blockBytes, big ? z.runsWrite64M : z.runsWrite2M, 1);
  }
  for (const s of HOT_SYSTEMS) add('meta', s, 0, z.runsMeta, z.metaFiles, z.openCloseIterations);
  if (options.filter === undefined) return all;
  const filter = options.filter;
  const chosen = all.filter((t) => t.name.includes(filter));
  // Ratios need their peers from the same run: keep the raw and bindfs trials of every workload still chosen.
  const key = (t: TrialSpec) => `${t.kind} ${t.blockBytes}`;
  const keys = new Set(chosen.map(key));
  const peers = new Set<SystemName>(['tmpfs', 'bindfs', 'disk', 'bindfs-disk']);
  return all.filter((t) => chosen.includes(t) || (keys.has(key(t)) && peers.has(t.system)));
}

// ---- environment ----------------------------------------------------------------------------------

interface Environment extends HostEnvironment, MemoryEnvironment {
  libfuse2: string | null;
  fusePackage: string | null;
  bindfsPackage: string | null;
  bindfsVersion: string | null;
  bindfsFuseVersion: string | null;
  bindfsOptions: string;
  fuseNative: string | null;
  gitCommit: string | null;
  loadAverageAtStart: number[];
}

function environment(): Environment {
  return {
    ...hostEnvironment(),
    libfuse2: dpkgVersion('libfuse2'),
    fusePackage: dpkgVersion('fuse'),
    bindfsPackage: dpkgVersion('bindfs'),
    bindfsVersion: commandOutput('bindfs', ['--version']),
    bindfsFuseVersion: commandOutput('bindfs', ['--fuse-version'])?.split('\n')[0] ?? null,
    bindfsOptions: ['-f', ...BINDFS_OPTIONS].join(' '),
    fuseNative: npmVersion('fuse-native'),
    ...memoryEnvironment(),
    gitCommit: gitCommit(),
    loadAverageAtStart: os.loadavg(),
  };
}

/** Refuses to start where the trials cannot run, saying what is missing. */
function preflight(table: TrialSpec[]): void {
  const problems = mountPreflightProblems(true);
  if (table.some((t) => t.system.startsWith('bindfs')) && spawnSync('bindfs', ['--version'], { stdio: 'ignore' }).error) {
    problems.push('bindfs missing: apt-get install -y bindfs (never fuse3)');
  }
  exitOnProblems('mount-bench', problems);
}

// ---- running trials -------------------------------------------------------------------------------

function runTrial(spec: TrialSpec): Promise<TrialProcess<MountTrialResult>> {
  const trialArgs: Omit<MountTrialArgs, 'scratchDir'> = {
    kind: spec.kind,
    system: spec.system,
    blockBytes: spec.blockBytes,
    warmups: spec.warmups,
    runs: spec.runs,
    files: spec.files,
    iterations: spec.iterations,
  };
  return runTrialProcess({
    script: path.join(__dirname, 'mount-trial.js'),
    name: spec.name,
    trialArgs,
    scratchPrefix: SCRATCH_PREFIX,
    timeoutMs: TRIAL_TIMEOUT_MS,
    parse: parseMountTrialResult,
  });
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
  /** The physical limit (tmpfs, or the raw disk file for cold reads) and its median ratio. */
  rawPeer: SystemName;
  xRaw: number | null;
  /** The C FUSE peer (bindfs over tmpfs, or over the disk for cold reads) and its median ratio. */
  fusePeer: SystemName;
  xFuse: number | null;
  timesMs: number[];
}

interface TrialReport extends Pick<TrialSpec, 'name' | 'kind' | 'system' | 'blockBytes' | 'warmups' | 'runs'> {
  wallTimeMs: number;
  loadAverage1mAfter: number;
  figures: FigureReport[];
  checks: Record<string, CheckValue>;
  sweep: string[];
}

function summarize(spec: TrialSpec, result: MountTrialResult, wallTimeMs: number, sweep: string[]): TrialReport {
  return {
    name: spec.name,
    kind: spec.kind,
    system: spec.system,
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
      rawPeer: peerOf(RAW_PEER, spec.kind, spec.system),
      xRaw: null,
      fusePeer: peerOf(FUSE_PEER, spec.kind, spec.system),
      xFuse: null,
      timesMs: f.timesMs,
    })),
  };
}

function findFigure(reports: TrialReport[], kind: MountTrialKind, blockBytes: number, system: SystemName, figure: string): FigureReport | undefined {
  const r = reports.find((x) => x.kind === kind && x.blockBytes === blockBytes && x.system === system);
  return r?.figures.find((f) => f.figure === figure);
}

function attachRatios(reports: TrialReport[]): void {
  for (const r of reports) {
    for (const f of r.figures) {
      const raw = findFigure(reports, r.kind, r.blockBytes, f.rawPeer, f.figure);
      const fuse = findFigure(reports, r.kind, r.blockBytes, f.fusePeer, f.figure);
      f.xRaw = raw ? f.rate.median / raw.rate.median : null;
      f.xFuse = fuse ? f.rate.median / fuse.rate.median : null;
    }
  }
}

interface GoalReport {
  goal: string;
  trial: string;
  figure: string;
  measured: number | null;
  target: number;
  /** 'x bindfs', 'x tmpfs', 'blocks/s', 'GB/s', 'ops/s'. */
  unit: string;
  pass: boolean | null;
}

function goals(reports: TrialReport[]): GoalReport[] {
  const out: GoalReport[] = [];
  const add = (goal: string, r: TrialReport, figure: string, measured: (f: FigureReport) => number | null, target: number, unit: string) => {
    const f = r.figures.find((x) => x.figure === figure);
    const m = f ? measured(f) : null;
    out.push({ goal, trial: r.name, figure, measured: m, target, unit, pass: m === null ? null : m >= target });
  };
  for (const r of reports.filter((x) => CASCADE_SYSTEMS.includes(x.system))) {
    if (r.kind === 'hot-read' && r.blockBytes === GOAL_HOT_BLOCK_BYTES) {
      add('hot 64 MiB read >= 0.8x bindfs', r, 'read', (f) => f.xFuse, GOAL_HOT_X_BINDFS, 'x bindfs');
      add('hot 64 MiB read >= 0.15x tmpfs', r, 'read', (f) => f.xRaw, GOAL_HOT_X_TMPFS, 'x tmpfs');
    }
    if (r.kind === 'blocks') add('>= 2,000 hot 2 MiB blocks/s', r, 'blocks/s', (f) => f.rate.median, GOAL_BLOCKS_PER_S, 'blocks/s');
    if (r.kind === 'write') {
      add('unique writes >= 0.8 GB/s (daemon idle before each file)', r, 'write', (f) => f.rate.median, GOAL_WRITE_GBPS, 'GB/s');
      add('unique writes >= 0.8 GB/s (stricter: back to back)', r, 'write-stream', (f) => f.rate.median, GOAL_WRITE_GBPS, 'GB/s');
    }
    if (r.kind === 'meta') add('>= 25k open+close/s', r, 'open+close', (f) => f.rate.median, GOAL_OPEN_CLOSE_PER_S, 'ops/s');
  }
  return out;
}

interface KernelCacheRow {
  workload: string;
  figure: string;
  unit: FigureUnit;
  directIo: number;
  kernelCache: number;
  /** kernel cache median / direct_io median. */
  ratio: number;
}

/** The page cache's effect: the same figure with `--kernel-cache` over the default direct_io mount. */
function kernelCacheEffect(reports: TrialReport[]): KernelCacheRow[] {
  const out: KernelCacheRow[] = [];
  for (const r of reports.filter((x) => x.system === 'cascade')) {
    for (const f of r.figures) {
      const kc = findFigure(reports, r.kind, r.blockBytes, 'cascade-kc', f.figure);
      if (!kc) continue;
      out.push({
        workload: `${r.kind} ${sizeLabel(r.blockBytes)}`,
        figure: f.figure,
        unit: f.unit,
        directIo: f.rate.median,
        kernelCache: kc.rate.median,
        ratio: kc.rate.median / f.rate.median,
      });
    }
  }
  return out;
}

// ---- report ---------------------------------------------------------------------------------------

const f2 = (x: number) => x.toFixed(2);
/** Rates: GB/s with 2 decimals, ops/s as whole numbers with thousands separators. */
const fRate = (unit: FigureUnit, x: number) => (unit === 'GB/s' ? f2(x) : Math.round(x).toLocaleString('en-US'));
const fx = (x: number | null) => (x === null ? '-' : `${f2(x)}x`);

function markdown(
  date: string,
  env: Environment,
  reports: TrialReport[],
  goalRows: GoalReport[],
  kcRows: KernelCacheRow[],
  failures: { trial: string; error: string }[],
  quick: boolean,
  wallTimeMs: number,
): string {
  const lines: string[] = [];
  lines.push(`### Mount benchmark, ${date}, ${env.hostname}${quick ? ' (--quick)' : ''}`);
  lines.push('');
  const tmp = env.tmpDirMount ? `${env.tmpDirMount.fsType} (${env.tmpDirMount.source})` : 'unknown';
  lines.push(
    `${String(env.cpuModel)}, ${env.cores} cores, ${(env.memoryBytes / 2 ** 30).toFixed(1)} GiB, kernel ${env.kernel}, Node ${env.node}, ` +
      `libfuse2 ${String(env.libfuse2)}, bindfs ${String(env.bindfsPackage)} (\`bindfs ${env.bindfsOptions}\`), fuse-native ${String(env.fuseNative)}, ` +
      `THP shmem_enabled=${String(env.thpShmemEnabled)}. Disk (data dirs, cold peers) ${tmp}. ` +
      `Load average (1 min) at start ${f2(env.loadAverageAtStart[0])}, at end ${f2(os.loadavg()[0])}. ${reports.length} trials, ${(wallTimeMs / 1000).toFixed(1)} s.`,
  );
  lines.push('');
  lines.push(
    'Medians of the counted runs, with min-max. GB/s = 1e9 bytes/s. `x raw` = median / median of the raw filesystem ' +
      '(tmpfs; the disk file for cold reads); `x bindfs` = median / median of bindfs (over tmpfs; over the disk directory for cold reads). ' +
      '`cascade` = direct_io (default), `cascade-kc` = `--kernel-cache`.',
  );
  lines.push('');
  lines.push('| workload | size | figure | system | runs | median | min-max | unit | ms/run median | x raw | x bindfs |');
  lines.push('|---|---|---|---|---:|---:|---:|---|---:|---:|---:|');
  for (const r of reports) {
    for (const f of r.figures) {
      lines.push(
        `| ${r.kind} | ${sizeLabel(r.blockBytes)} | ${f.figure} | ${r.system} | ${f.timesMs.length} | ${fRate(f.unit, f.rate.median)} | ` +
          `${fRate(f.unit, f.rate.min)}-${fRate(f.unit, f.rate.max)} | ${f.unit} | ${f3(f.latencyMs.median)} | ` +
          `${f.rawPeer === r.system ? '1.00x' : fx(f.xRaw)} | ${f.fusePeer === r.system ? '1.00x' : fx(f.xFuse)} |`,
      );
    }
  }
  lines.push('');
  lines.push('| goal | trial | measured | target | result |');
  lines.push('|---|---|---:|---:|---|');
  for (const g of goalRows) {
    const measured = g.measured === null ? 'n/a' : g.unit.startsWith('x ') ? `${f2(g.measured)}x` : g.unit === 'GB/s' ? f2(g.measured) : Math.round(g.measured).toLocaleString('en-US');
    const target = g.unit.startsWith('x ') ? `>= ${g.target}${g.unit}` : `>= ${g.target.toLocaleString('en-US')} ${g.unit}`;
    lines.push(`| ${g.goal} | ${g.trial} | ${measured} | ${target} | ${g.pass === null ? 'no peer' : g.pass ? 'PASS' : 'FAIL'} |`);
  }
  if (kcRows.length > 0) {
    lines.push('');
    lines.push('Kernel page cache (`--kernel-cache`) against direct_io, same run (medians):');
    lines.push('');
    lines.push('| workload | figure | direct_io | kernel cache | unit | kernel cache / direct_io |');
    lines.push('|---|---|---:|---:|---|---:|');
    for (const k of kcRows) {
      lines.push(`| ${k.workload} | ${k.figure} | ${fRate(k.unit, k.directIo)} | ${fRate(k.unit, k.kernelCache)} | ${k.unit} | ${f2(k.ratio)}x |`);
    }
  }
  const cascadeChecks = reports.filter((r) => CASCADE_SYSTEMS.includes(r.system));
  if (cascadeChecks.length > 0) {
    lines.push('');
    lines.push('Cascade store counters at the end of each trial (from `.cascade/stats.json`): reads served from DRAM / disk (per FUSE read request), promotions, dirty blocks still to be written back, dedup hits, DRAM size.');
    lines.push('');
    lines.push('| trial | DRAM hits | disk hits | promotions | dirty at end | dedup hits | DRAM | daemon start ms | content verified |');
    lines.push('|---|---:|---:|---:|---:|---:|---:|---|---|');
    for (const r of cascadeChecks) {
      const c = r.checks;
      const dram = typeof c.dramBytes === 'number' ? `${Math.round(c.dramBytes / MiB)} MiB` : '-';
      lines.push(
        `| ${r.name} | ${String(c.storeDramHits ?? '-')} | ${String(c.storeDiskHits ?? '-')} | ${String(c.storePromotions ?? '-')} | ` +
          `${String(c.storeDirtyBlocks ?? '-')} | ${String(c.storeDedupHits ?? '-')} | ${dram} | ${String(c.daemonStartMs ?? '-')} | ` +
          `${String(c.contentVerified ?? c.sizesVerified ?? '-')} |`,
      );
    }
  }
  lines.push(...checkAndFailureLines(reports.map((r) => ({ name: r.name, cold: r.kind === 'cold-read', checks: r.checks })), failures));
  return lines.join('\n') + '\n';
}

// ---- main -----------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const options = parseOptions('mount-bench.js', process.argv.slice(2));
  const table = trialTable(options);
  if (table.length === 0) {
    process.stderr.write(`no trial matches --filter ${String(options.filter)}\n`);
    process.exit(1);
  }
  preflight(table);
  installDriverSignalHandlers('mount-bench');
  const startedAt = new Date();
  const t0 = performance.now();
  const snapshot = (pids: ReadonlySet<number>) => leftoverSnapshot(SCRATCH_PREFIX, TMPFS_SOURCE, pids);
  const before = new Set(snapshot(new Set()));
  const env = environment();
  const reports: TrialReport[] = [];
  const daemonPids = new Set<number>();
  const failures: { trial: string; error: string }[] = [];
  for (const [i, spec] of table.entries()) {
    let outcome: TrialProcess<MountTrialResult>;
    try {
      outcome = await runTrial(spec);
    } catch (e) {
      // One broken trial should not cost the others: it is reported, and its figures are missing.
      const error = e instanceof Error ? e.message : String(e);
      failures.push({ trial: spec.name, error });
      process.stderr.write(`[${i + 1}/${table.length}] ${spec.name}: FAILED: ${error}\n`);
      continue;
    }
    const { result, wallTimeMs, sweep } = outcome;
    for (const p of String(result.checks.daemonPids ?? '').split(',')) if (p !== '') daemonPids.add(Number(p));
    const report = summarize(spec, result, wallTimeMs, sweep);
    reports.push(report);
    const brief = report.figures.map((f) => `${f.figure} ${fRate(f.unit, f.rate.median)} ${f.unit} (${f3(f.latencyMs.median)} ms)`).join(', ');
    process.stderr.write(`[${i + 1}/${table.length}] ${spec.name}: ${brief}; ${(wallTimeMs / 1000).toFixed(1)} s${sweep.length ? `; swept: ${sweep.join('; ')}` : ''}\n`);
  }
  attachRatios(reports);
  const goalRows = goals(reports);
  const kcRows = kernelCacheEffect(reports);
  const leftovers = await newLeftovers(before, () => snapshot(daemonPids));
  const wallTimeMs = performance.now() - t0;

  const date = startedAt.toISOString().slice(0, 10);
  const outFile = resultsFile('mount', date, options);
  const doc = {
    ...resultsHead('cascade-mount-bench/1', date, startedAt, wallTimeMs, env),
    configuration: {
      ...runMode(options, WARMUPS),
      sizing: options.quick ? SIZING_QUICK : SIZING_FULL,
      metaFileBytes: META_FILE_BYTES,
      metaOpenFiles: META_OPEN_FILES,
      ioChunkBytes: MiB,
      goals: {
        hotBlockBytes: GOAL_HOT_BLOCK_BYTES,
        hotXBindfs: GOAL_HOT_X_BINDFS,
        hotXTmpfs: GOAL_HOT_X_TMPFS,
        blocksPerS: GOAL_BLOCKS_PER_S,
        writeGBps: GOAL_WRITE_GBPS,
        openClosePerS: GOAL_OPEN_CLOSE_PER_S,
      },
      trials: table,
    },
    trials: reports,
    goals: goalRows,
    kernelCacheEffect: kcRows,
    failures,
    loadAverageAtEnd: os.loadavg(),
    leftovers,
  };
  writeResults(outFile, doc);

  process.stdout.write(markdown(date, env, reports, goalRows, kcRows, failures, options.quick, wallTimeMs));
  if (leftovers.length > 0) process.stderr.write(`warning: left behind: ${leftovers.join(', ')}\n`);
  process.stderr.write(`wrote ${outFile}; wall time ${(wallTimeMs / 1000).toFixed(1)} s\n`);
  if (failures.length > 0) process.exitCode = 1;
}

main().catch((e: unknown) => {
  process.stderr.write(`mount-bench: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exitCode = 1;
});

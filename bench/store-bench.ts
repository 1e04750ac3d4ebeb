/**
 * Store-level benchmark driver. Trials are data (the table in `trialTable`); each one runs in a fresh
 * process (dist/bench/store-trial.js) that prints one JSON line of raw samples. This file computes the
 * statistics, the ratios to the references measured in the same run (memcpy for gets and promotions,
 * single-core SHA-256 for puts), the goals, and the promotion break-even; it writes
 * bench/results/store-<YYYY-MM-DD>-<hostname>.json and prints a markdown report on stdout.
 *
 *   npm run bench                 full run
 *   npm run bench -- --quick      2 MiB and 64 MiB only, fewer runs (< 1 min)
 *   npm run bench -- --filter get-hot --out /tmp/x.json
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  DRAM_PAGE_BYTES_DEFAULT,
  MiB,
  PROMOTE_AFTER_READS_DEFAULT,
  RECORD_ALIGN_BYTES,
  SEGMENT_TARGET_BYTES_DEFAULT,
} from '../store/constants';
import {
  cpuInfo,
  f3,
  gbPerS,
  gitCommit,
  hostEnvironment,
  memoryEnvironment,
  mountOf,
  parseOptions,
  readText,
  resultsFile,
  resultsHead,
  runMode,
  scratchLeftovers,
  singleLine,
  sizeLabel,
  spread,
  writeResults,
  type Options,
  type Spread,
} from './common';
import { parseTrialResult, type CheckValue, type TrialArgs, type TrialKind, type TrialResult } from './protocol';

// ---- configuration --------------------------------------------------------------------------------

interface TrialSpec {
  /** Unique, and what --filter matches: e.g. 'get-hot 64MiB huge=on'. */
  name: string;
  kind: TrialKind;
  blockBytes: number;
  warmups: number;
  runs: number;
  /** Only for the huge-page variants; undefined = the store's default. */
  dramHugePages?: boolean;
}

const WARMUPS = 1;
/** Counted runs per block size. The references are cheap, so they get more runs. */
const RUNS_FULL: Record<number, number> = { [2 * MiB]: 30, [16 * MiB]: 10, [64 * MiB]: 10 };
const RUNS_QUICK = 5;
const REFERENCE_RUN_FACTOR = 3;
const SIZES_FULL = [2 * MiB, 16 * MiB, 64 * MiB];
const SIZES_QUICK = [2 * MiB, 64 * MiB];
/** A trial that takes longer than this is stuck. */
const TRIAL_TIMEOUT_MS = 10 * 60 * 1000;

const GOAL_HOT_GET_BLOCK_BYTES = 64 * MiB;
const GOAL_HOT_GET_X_MEMCPY = 0.5;
const GOAL_PUT_X_SHA256 = 0.8;

/** Which reference each figure is compared with. */
const REFERENCE_OF: Record<string, 'memcpy' | 'sha256'> = {
  memcpy: 'memcpy',
  sha256: 'sha256',
  put: 'sha256',
  'put+sync': 'sha256',
  read: 'memcpy',
  get: 'memcpy',
  'get-cold': 'memcpy',
  'get-disk-warm': 'memcpy',
  promote: 'memcpy',
};

/**
 * Whether the compiled store accepts `dramHugePages`. TypeScript types are gone at run time, so this
 * looks for the option in the store's compiled code (the file that reads it).
 */
function storeHasHugePagesOption(): boolean {
  try {
    return fs.readFileSync(path.join(__dirname, '..', 'store', 'store.js'), 'utf8').includes('dramHugePages');
  } catch {
    return false;
  }
}

function trialTable(options: Options, hugePagesOption: boolean): TrialSpec[] {
  const sizes = options.quick ? SIZES_QUICK : SIZES_FULL;
  // DRAM-bound trials run once per huge-page setting when the store has one.
  const dramVariants: (boolean | undefined)[] = hugePagesOption ? [false, true] : [undefined];
  const all: TrialSpec[] = [];
  for (const blockBytes of sizes) {
    const runs = options.quick ? RUNS_QUICK : RUNS_FULL[blockBytes];
    const add = (kind: TrialKind, runCount: number, dramHugePages?: boolean) => {
      const variant = dramHugePages === undefined ? '' : ` huge=${dramHugePages ? 'on' : 'off'}`;
      all.push({ name: `${kind} ${sizeLabel(blockBytes)}${variant}`, kind, blockBytes, warmups: WARMUPS, runs: runCount, dramHugePages });
    };
    add('memcpy', runs * REFERENCE_RUN_FACTOR);
    add('sha256', runs * REFERENCE_RUN_FACTOR);
    for (const v of dramVariants) add('put', runs, v);
    for (const v of dramVariants) add('get-hot', runs, v);
    for (const v of dramVariants) add('promote', runs, v);
    add('get-cold', runs); // reads come from disk; the DRAM tier's pages do not matter
  }
  if (options.filter === undefined) return all;
  const filter = options.filter;
  const chosen = all.filter((t) => t.name.includes(filter));
  // Ratios need their references from the same run: keep them for every block size still chosen.
  const sizesChosen = new Set(chosen.map((t) => t.blockBytes));
  return all.filter((t) => chosen.includes(t) || ((t.kind === 'memcpy' || t.kind === 'sha256') && sizesChosen.has(t.blockBytes)));
}

// ---- environment ----------------------------------------------------------------------------------

/**
 * Whether a virtio balloon with free page reporting is present (feature bit 5): freed guest memory is
 * handed back to the host, so touching freshly allocated memory can cost a host-side fault.
 */
function balloonFreePageReporting(): boolean | null {
  const root = '/sys/bus/virtio/devices';
  let found: boolean | null = null;
  try {
    for (const d of fs.readdirSync(root)) {
      if (readText(path.join(root, d, 'device'))?.trim() !== '0x0005') continue; // virtio balloon
      found = (readText(path.join(root, d, 'features')) ?? '').charAt(5) === '1';
    }
  } catch {
    return null;
  }
  return found;
}

/** DAMON schemes that are on (e.g. 'pageout' reclaims memory it deems cold, page cache included). */
function damonSchemes(): string[] {
  const root = '/sys/kernel/mm/damon/admin/kdamonds';
  const out: string[] = [];
  try {
    for (const k of fs.readdirSync(root)) {
      if (readText(path.join(root, k, 'state'))?.trim() !== 'on') continue;
      for (const c of fs.readdirSync(path.join(root, k, 'contexts'))) {
        const schemes = path.join(root, k, 'contexts', c, 'schemes');
        for (const sc of fs.readdirSync(schemes)) {
          const action = readText(path.join(schemes, sc, 'action'));
          if (action !== null) out.push(`kdamond ${k}: ${action.trim()}`);
        }
      }
    }
  } catch {
    // no DAMON sysfs interface
  }
  return out;
}

function environment(): Record<string, string | number | boolean | null | object> {
  const { hostname, cpuModel, ...host } = hostEnvironment();
  return {
    hostname,
    cpuModel,
    cpuShaNi: cpuInfo().flags.includes('sha_ni'),
    ...host,
    ...memoryEnvironment(),
    devShmMount: fs.existsSync('/dev/shm') ? mountOf('/dev/shm') : null,
    virtioBalloonFreePageReporting: balloonFreePageReporting(),
    damonSchemesOn: damonSchemes(),
    gitCommit: gitCommit(),
    // Other work on this machine skews figures; the load average tells a reader whether there was any.
    loadAverageAtStart: os.loadavg(),
  };
}

/**
 * What the trials could leave behind: scratch dirs, DRAM arena files (named with the trial's pid),
 * huge-page arena mount points and mounts. Other processes' entries (tests running beside the benchmark)
 * are told apart by name and pid, so only this run's are reported.
 */
function leftoverSnapshot(trialPids: ReadonlySet<number>): string[] {
  const ours = (name: string) => {
    const arena = /^cascade-dram-(\d+)-/.exec(name);
    return name.startsWith('cascade-bench-') || name.startsWith('cascade-arena-') || (arena !== null && trialPids.has(Number(arena[1])));
  };
  const names = scratchLeftovers(ours);
  for (const line of (readText('/proc/mounts') ?? '').split('\n')) if (line.startsWith('cascade-arena')) names.push(`mount: ${line}`);
  return names;
}

// ---- running trials -------------------------------------------------------------------------------

function runTrial(spec: TrialSpec): { result: TrialResult; wallTimeMs: number; pid: number } {
  const scratchDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-bench-'));
  const args: TrialArgs = {
    kind: spec.kind,
    blockBytes: spec.blockBytes,
    warmups: spec.warmups,
    runs: spec.runs,
    scratchDir,
    ...(spec.dramHugePages === undefined ? {} : { dramHugePages: spec.dramHugePages }),
  };
  const t0 = performance.now();
  try {
    const child = spawnSync(process.execPath, [path.join(__dirname, 'store-trial.js'), JSON.stringify(args)], {
      stdio: ['ignore', 'pipe', 'inherit'],
      encoding: 'utf8',
      timeout: TRIAL_TIMEOUT_MS,
    });
    if (child.error) throw new Error(`trial ${spec.name}: ${child.error.message}`);
    if (child.status !== 0) throw new Error(`trial ${spec.name} exited with ${child.status ?? child.signal}`);
    return { result: parseTrialResult(singleLine(spec.name, child.stdout)), wallTimeMs: performance.now() - t0, pid: child.pid ?? 0 };
  } finally {
    fs.rmSync(scratchDir, { recursive: true, force: true });
  }
}

// ---- statistics -----------------------------------------------------------------------------------

interface FigureReport {
  figure: string;
  label: string;
  bytesPerRun: number;
  reference: 'memcpy' | 'sha256' | null;
  latencyMs: Spread;
  throughputGBps: Spread;
  /** Median throughput over the reference's median throughput for the same block size. */
  xReference: number | null;
  timesMs: number[];
}

interface TrialReport {
  name: string;
  kind: TrialKind;
  blockBytes: number;
  dramHugePages: boolean | null;
  warmups: number;
  runs: number;
  wallTimeMs: number;
  /** 1-minute load average when the trial ended (other processes competing for the 2 cores show here). */
  loadAverage1mAfter: number;
  figures: FigureReport[];
  checks: Record<string, CheckValue>;
}

function summarize(spec: TrialSpec, result: TrialResult, wallTimeMs: number): TrialReport {
  return {
    name: spec.name,
    kind: spec.kind,
    blockBytes: spec.blockBytes,
    dramHugePages: spec.dramHugePages ?? null,
    warmups: result.warmups,
    runs: result.runs,
    wallTimeMs,
    loadAverage1mAfter: os.loadavg()[0],
    checks: result.checks,
    figures: result.figures.map((f) => {
      const throughputs = f.timesMs.map((t) => gbPerS(f.bytesPerRun, t));
      return {
        figure: f.figure,
        label: f.label,
        bytesPerRun: f.bytesPerRun,
        reference: REFERENCE_OF[f.figure] ?? null,
        latencyMs: spread(f.timesMs),
        throughputGBps: spread(throughputs),
        xReference: null,
        timesMs: f.timesMs,
      };
    }),
  };
}

function findFigure(reports: TrialReport[], blockBytes: number, figure: string, dramHugePages: boolean | null = null): FigureReport | undefined {
  for (const r of reports) {
    if (r.blockBytes !== blockBytes || r.dramHugePages !== dramHugePages) continue;
    const f = r.figures.find((x) => x.figure === figure);
    if (f) return f;
  }
  return undefined;
}

function attachRatios(reports: TrialReport[]): void {
  for (const r of reports) {
    for (const f of r.figures) {
      if (f.reference === null) continue;
      const ref = findFigure(reports, r.blockBytes, f.reference);
      f.xReference = ref ? f.throughputGBps.median / ref.throughputGBps.median : null;
    }
  }
}

interface GoalReport {
  goal: string;
  trial: string;
  figure: string;
  measuredX: number | null;
  targetX: number;
  reference: 'memcpy' | 'sha256';
  pass: boolean | null;
}

function goals(reports: TrialReport[]): GoalReport[] {
  const out: GoalReport[] = [];
  const add = (goal: string, r: TrialReport, figure: string, targetX: number, reference: 'memcpy' | 'sha256') => {
    const f = r.figures.find((x) => x.figure === figure);
    const measuredX = f?.xReference ?? null;
    out.push({ goal, trial: r.name, figure, measuredX, targetX, reference, pass: measuredX === null ? null : measuredX >= targetX });
  };
  for (const r of reports) {
    if (r.kind === 'get-hot' && r.blockBytes === GOAL_HOT_GET_BLOCK_BYTES) {
      add('hot get of a 64 MiB block >= 0.5x memcpy (read into a caller buffer)', r, 'read', GOAL_HOT_GET_X_MEMCPY, 'memcpy');
      add('hot get of a 64 MiB block >= 0.5x memcpy (get, allocating)', r, 'get', GOAL_HOT_GET_X_MEMCPY, 'memcpy');
    }
    if (r.kind === 'put') {
      add('put >= 0.8x single-core SHA-256 (write-back put)', r, 'put', GOAL_PUT_X_SHA256, 'sha256');
      add('put >= 0.8x single-core SHA-256 (stricter: durable put+sync)', r, 'put+sync', GOAL_PUT_X_SHA256, 'sha256');
    }
  }
  return out;
}

interface BreakEvenReport {
  blockBytes: number;
  dramHugePages: boolean | null;
  diskGetColdMs: number;
  diskGetWarmMs: number;
  promoteMs: number;
  hotGetMs: number;
  /** One promotion costs this many cold disk gets. */
  promoteOverColdGet: number;
  /** Reads after a promotion until the time saved repays it: promote / (disk get - hot get). */
  readsToRepayCold: number;
  readsToRepayWarm: number;
}

/**
 * Promotion pays when the reads it turns from disk reads into DRAM reads save more than it costs. All
 * inputs are medians; the hot side uses store.get, the same call as the disk side.
 */
function breakEven(reports: TrialReport[]): BreakEvenReport[] {
  const out: BreakEvenReport[] = [];
  const sizes = [...new Set(reports.map((r) => r.blockBytes))].sort((a, b) => a - b);
  for (const blockBytes of sizes) {
    const cold = findFigure(reports, blockBytes, 'get-cold');
    const warm = findFigure(reports, blockBytes, 'get-disk-warm');
    if (!cold || !warm) continue;
    const variants = new Set(reports.filter((r) => r.blockBytes === blockBytes && r.kind === 'promote').map((r) => r.dramHugePages));
    for (const v of variants) {
      const promote = findFigure(reports, blockBytes, 'promote', v);
      const hot = findFigure(reports, blockBytes, 'get', v);
      if (!promote || !hot) continue;
      const p = promote.latencyMs.median;
      const h = hot.latencyMs.median;
      out.push({
        blockBytes,
        dramHugePages: v,
        diskGetColdMs: cold.latencyMs.median,
        diskGetWarmMs: warm.latencyMs.median,
        promoteMs: p,
        hotGetMs: h,
        promoteOverColdGet: p / cold.latencyMs.median,
        readsToRepayCold: cold.latencyMs.median > h ? p / (cold.latencyMs.median - h) : Infinity,
        readsToRepayWarm: warm.latencyMs.median > h ? p / (warm.latencyMs.median - h) : Infinity,
      });
    }
  }
  return out;
}

interface PutBreakdown {
  trial: string;
  putMs: number;
  sha256Ms: number;
  dramWriteMs: number;
  /** What the hash and the DRAM copy do not explain: metadata commit, locks, promise hops. */
  restMs: number;
}

/**
 * Where a put's time goes, from medians of separate trials: the SHA-256 reference and the DRAM write
 * (promote trial, same huge-page setting). Both run on the JS thread one after the other inside a put.
 */
function putBreakdown(reports: TrialReport[]): PutBreakdown[] {
  const out: PutBreakdown[] = [];
  for (const r of reports.filter((x) => x.kind === 'put')) {
    const put = r.figures.find((f) => f.figure === 'put');
    const sha = findFigure(reports, r.blockBytes, 'sha256');
    const dram = findFigure(reports, r.blockBytes, 'promote', r.dramHugePages);
    if (!put || !sha || !dram) continue;
    const putMs = put.latencyMs.median;
    const sha256Ms = sha.latencyMs.median;
    const dramWriteMs = dram.latencyMs.median;
    out.push({ trial: r.name, putMs, sha256Ms, dramWriteMs, restMs: putMs - sha256Ms - dramWriteMs });
  }
  return out;
}

// ---- report ---------------------------------------------------------------------------------------

function mountLabel(m: unknown): string {
  if (typeof m !== 'object' || m === null) return 'unknown';
  const fsType: unknown = Reflect.get(m, 'fsType');
  const source: unknown = Reflect.get(m, 'source');
  return `${String(fsType)} (${String(source)})`;
}

const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : 'inf');

function markdown(
  date: string,
  env: ReturnType<typeof environment>,
  reports: TrialReport[],
  goalRows: GoalReport[],
  breakEvenRows: BreakEvenReport[],
  putRows: PutBreakdown[],
  quick: boolean,
): string {
  const lines: string[] = [];
  const loadStart = Array.isArray(env.loadAverageAtStart) ? f2(Number(env.loadAverageAtStart[0])) : '?';
  const loadEnd = f2(os.loadavg()[0]);
  lines.push(`### Store benchmark, ${date}, ${String(env.hostname)}${quick ? ' (--quick)' : ''}`);
  lines.push('');
  lines.push(
    `${String(env.cpuModel)} (sha_ni: ${String(env.cpuShaNi)}), ${String(env.cores)} cores, ` +
      `${(Number(env.memoryBytes) / 2 ** 30).toFixed(1)} GiB, kernel ${String(env.kernel)}, Node ${String(env.node)}, ` +
      `THP shmem_enabled=${String(env.thpShmemEnabled)}. Load average (1 min) at start ${loadStart}, at end ${loadEnd}. ` +
      `Data dir on ${String(mountLabel(env.tmpDirMount))}. Balloon free page reporting: ${String(env.virtioBalloonFreePageReporting)}; ` +
      `DAMON schemes on: ${Array.isArray(env.damonSchemesOn) && env.damonSchemesOn.length > 0 ? env.damonSchemesOn.join(', ') : 'none'}.`,
  );
  lines.push('');
  lines.push(
    'GB/s = 1e9 bytes/s. `x ref` = median throughput / median throughput of the reference for the same block size ' +
      'in this run (memcpy for gets and promotions, single-core SHA-256 for puts). Latency min/median/max in ms.',
  );
  lines.push('');
  lines.push('| trial | figure | runs | GB/s min | GB/s median | GB/s max | ms min | ms median | ms max | x ref |');
  lines.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of reports) {
    for (const f of r.figures) {
      const x = f.xReference === null ? '-' : `${f2(f.xReference)}x ${f.reference}`;
      lines.push(
        `| ${r.name} | ${f.figure} | ${f.timesMs.length} | ${f2(f.throughputGBps.min)} | ${f2(f.throughputGBps.median)} | ` +
          `${f2(f.throughputGBps.max)} | ${f3(f.latencyMs.min)} | ${f3(f.latencyMs.median)} | ${f3(f.latencyMs.max)} | ${x} |`,
      );
    }
  }
  lines.push('');
  lines.push('| goal | trial | measured | target | result |');
  lines.push('|---|---|---:|---:|---|');
  for (const g of goalRows) {
    const measured = g.measuredX === null ? 'n/a' : `${f2(g.measuredX)}x`;
    const result = g.pass === null ? 'no reference' : g.pass ? 'PASS' : 'FAIL';
    lines.push(`| ${g.goal} | ${g.trial} | ${measured} | >= ${g.targetX}x ${g.reference} | ${result} |`);
  }
  if (putRows.length > 0) {
    lines.push('');
    lines.push('Where a put goes (medians from separate trials; SHA-256 and the DRAM write run one after the other on the JS thread):');
    lines.push('');
    lines.push('| put trial | put ms | SHA-256 ms | DRAM write ms | rest ms |');
    lines.push('|---|---:|---:|---:|---:|');
    for (const p of putRows) {
      lines.push(`| ${p.trial} | ${f3(p.putMs)} | ${f3(p.sha256Ms)} | ${f3(p.dramWriteMs)} | ${f3(p.restMs)} |`);
    }
  }
  if (breakEvenRows.length > 0) {
    lines.push('');
    lines.push(
      `Promotion break-even (medians; PROMOTE_AFTER_READS_DEFAULT = ${PROMOTE_AFTER_READS_DEFAULT}). A promotion is one DRAM write ` +
        'of a block already read; it repays itself after `promote / (disk get - hot get)` later reads.',
    );
    lines.push('');
    lines.push('| block | DRAM huge pages | disk get cold ms | disk get warm ms | promotion ms | hot get ms | promotion / cold get | reads to repay (cold) | reads to repay (warm cache) |');
    lines.push('|---|---|---:|---:|---:|---:|---:|---:|---:|');
    for (const b of breakEvenRows) {
      lines.push(
        `| ${sizeLabel(b.blockBytes)} | ${b.dramHugePages === null ? 'default' : b.dramHugePages ? 'on' : 'off'} | ${f3(b.diskGetColdMs)} | ` +
          `${f3(b.diskGetWarmMs)} | ${f3(b.promoteMs)} | ${f3(b.hotGetMs)} | ${f2(b.promoteOverColdGet)} | ${f2(b.readsToRepayCold)} | ${f2(b.readsToRepayWarm)} |`,
      );
    }
    const worst = Math.max(...breakEvenRows.map((b) => b.readsToRepayWarm));
    lines.push('');
    lines.push(
      worst <= 1
        ? `Every promotion here costs less than one later disk read saves (worst: ${f2(worst)} reads, warm cache), so promoting after the first disk read is the cheaper choice for any block read twice.`
        : `The worst case needs ${f2(worst)} later reads (warm cache) to repay a promotion: a block read only twice loses with threshold 1 there.`,
    );
  }
  const cold = reports.filter((r) => r.kind === 'get-cold');
  if (cold.length > 0) {
    lines.push('');
    for (const r of cold) {
      lines.push(
        `Cold-cache check (${r.name}): drop via \`${String(r.checks.dropMethod)}\`; resident bytes after each drop (fincore): ` +
          `${String(r.checks.maxResidentBytesAfterDrop)}; raw pread of a segment after a drop ${f3(Number(r.checks.rawPreadColdMs))} ms ` +
          `vs cached ${f3(Number(r.checks.rawPreadWarmMs))} ms; store get cold/warm median ${f2(Number(r.checks.storeColdOverWarmMedian))}x; ` +
          `drop verified: ${String(r.checks.dropVerified)}; warm phase: fraction of segment bytes cached ${String(r.checks.minResidentFractionBeforeWarm)}.`,
      );
    }
  }
  return lines.join('\n') + '\n';
}

// ---- main -----------------------------------------------------------------------------------------

function main(): void {
  const options = parseOptions('store-bench.js', process.argv.slice(2));
  const startedAt = new Date();
  const t0 = performance.now();
  const hugePagesOption = storeHasHugePagesOption();
  const table = trialTable(options, hugePagesOption);
  if (table.length === 0) {
    process.stderr.write(`no trial matches --filter ${String(options.filter)}\n`);
    process.exit(1);
  }
  const trialPids = new Set<number>();
  const before = new Set(leftoverSnapshot(trialPids));
  const env = environment();
  const reports: TrialReport[] = [];
  for (const [i, spec] of table.entries()) {
    const { result, wallTimeMs, pid } = runTrial(spec);
    trialPids.add(pid);
    const report = summarize(spec, result, wallTimeMs);
    reports.push(report);
    const brief = report.figures.map((f) => `${f.figure} ${f2(f.throughputGBps.median)} GB/s (${f3(f.latencyMs.median)} ms)`).join(', ');
    process.stderr.write(`[${i + 1}/${table.length}] ${spec.name}: ${brief}; ${(wallTimeMs / 1000).toFixed(1)} s\n`);
  }
  attachRatios(reports);
  const goalRows = goals(reports);
  const breakEvenRows = breakEven(reports);
  const putRows = putBreakdown(reports);
  const leftovers = leftoverSnapshot(trialPids).filter((n) => !before.has(n));
  const wallTimeMs = performance.now() - t0;

  const date = startedAt.toISOString().slice(0, 10);
  const outFile = resultsFile('store', date, options);
  const doc = {
    ...resultsHead('cascade-store-bench/1', date, startedAt, wallTimeMs, env),
    configuration: {
      ...runMode(options, WARMUPS),
      forcedGcBetweenRuns: false,
      storeHasDramHugePagesOption: hugePagesOption,
      dramPageBytes: DRAM_PAGE_BYTES_DEFAULT,
      segmentTargetBytes: SEGMENT_TARGET_BYTES_DEFAULT,
      recordAlignBytes: RECORD_ALIGN_BYTES,
      promoteAfterReadsDefault: PROMOTE_AFTER_READS_DEFAULT,
      goals: { hotGetBlockBytes: GOAL_HOT_GET_BLOCK_BYTES, hotGetXMemcpy: GOAL_HOT_GET_X_MEMCPY, putXSha256: GOAL_PUT_X_SHA256 },
      trials: table,
    },
    trials: reports,
    goals: goalRows,
    promotionBreakEven: breakEvenRows.map((b) => ({
      ...b,
      // JSON has no Infinity: a disk get no slower than a hot get never repays a promotion.
      readsToRepayCold: Number.isFinite(b.readsToRepayCold) ? b.readsToRepayCold : null,
      readsToRepayWarm: Number.isFinite(b.readsToRepayWarm) ? b.readsToRepayWarm : null,
    })),
    loadAverageAtEnd: os.loadavg(),
    putBreakdown: putRows,
    leftovers,
  };
  writeResults(outFile, doc);

  process.stdout.write(markdown(date, env, reports, goalRows, breakEvenRows, putRows, options.quick));
  if (leftovers.length > 0) process.stderr.write(`warning: trials left behind: ${leftovers.join(', ')}\n`);
  process.stderr.write(`wrote ${outFile}; wall time ${(wallTimeMs / 1000).toFixed(1)} s\n`);
}

main();

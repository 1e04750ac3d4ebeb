/**
 * The one report of a run, whatever its suites: statistics of every figure (min / median / max of time
 * and rate), the ratios to the limit and the best peer of the same run, the goals, each suite's own
 * tables (the store's put breakdown and promotion break-even, the mount's kernel-cache effect, the
 * side-by-side duplicate writes, capacity and rename race, the full-cache table), and the chart; as
 * JSON (every raw sample), markdown and SVG.
 */
import * as os from 'node:os';
import * as path from 'node:path';
import { MiB, PROMOTE_AFTER_READS_DEFAULT } from '../store/constants';
import { f3, rateOf, spread, type Spread } from './common';
import type { Environment } from './environment';
import { renderChartSvg, type ChartRow } from './chart';
import { SUITES, type CheckValue, type FigureUnit, type Suite, type TrialResult } from './protocol';
import { systemSpec } from './systems';
import { CAPACITY_FACTOR, DUP_NAMES, RATIOS, sameGroup, sizeLabel, type Goal, type NotRun, type Role, type TrialRow } from './trials';

// ---- statistics -----------------------------------------------------------------------------------

export interface FigureReport {
  figure: string;
  label: string;
  unit: FigureUnit;
  bytesPerRun: number;
  opsPerRun: number;
  latencyMs: Spread;
  /** In `unit`: GB/s (1e9 bytes/s) or ops/s. */
  rate: Spread;
  /** The limit of the trial's group (tmpfs; the disk for cold reads; memcpy or SHA-256 for the store) and the median ratio to it. */
  limit: string | null;
  xLimit: number | null;
  /** The best real peer for this figure (highest median among the suite's peers) and the ratio to it. */
  bestPeer: string | null;
  xBestPeer: number | null;
  timesMs: number[];
}

export interface TrialReport {
  name: string;
  suite: Suite;
  workload: string;
  system: string;
  role: Role;
  blockBytes: number;
  dramHugePages: boolean | null;
  warmups: number;
  runs: number;
  wallTimeMs: number;
  /** 1-minute load average when the trial ended (other processes competing for the cores show here). */
  loadAverage1mAfter: number;
  figures: FigureReport[];
  checks: Record<string, CheckValue>;
  /** What the sweep after the trial found and removed (should be empty). */
  sweep: string[];
}

export function summarize(row: TrialRow, result: TrialResult, wallTimeMs: number, sweep: string[]): TrialReport {
  return {
    name: row.name,
    suite: row.suite,
    workload: row.workload,
    system: row.system,
    role: row.role,
    blockBytes: row.blockBytes,
    dramHugePages: row.suite === 'store' ? (row.dramHugePages ?? null) : null,
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

const medianOf = (r: TrialReport, figure: string) => r.figures.find((g) => g.figure === figure)?.rate.median;

/** `x limit` and `x best peer` of every figure, from the trials of its group in the same run. */
export function attachRatios(reports: TrialReport[]): void {
  for (const r of reports) {
    const same = reports.filter((x) => sameGroup(x, r));
    for (const f of r.figures) {
      const limitFigure = RATIOS[r.suite].limitFigure?.[f.figure] ?? f.figure;
      const limit = same.find((x) => x.role === 'limit' && medianOf(x, limitFigure) !== undefined);
      if (limit) {
        // The store's references are named by their figure (memcpy, sha256), the others by system.
        f.limit = RATIOS[r.suite].limitFigure ? limitFigure : limit.system;
        f.xLimit = f.rate.median / medianOf(limit, limitFigure)!;
      }
      let best: TrialReport | undefined;
      for (const x of same.filter((y) => y.role === 'peer' && y.workload === r.workload && medianOf(y, f.figure) !== undefined)) {
        if (!best || medianOf(x, f.figure)! > medianOf(best, f.figure)!) best = x;
      }
      if (best) {
        f.bestPeer = best.system;
        f.xBestPeer = f.rate.median / medianOf(best, f.figure)!;
      }
    }
  }
}

// ---- goals ----------------------------------------------------------------------------------------

export interface GoalReport {
  goal: string;
  trial: string;
  suite: Suite;
  /** The median (or check value) measured, in its unit; null when the trial or its figure is missing. */
  measured: number | null;
  unit: string;
  /** What it was divided by (null: compared as it is) and that reference's name. */
  reference: number | null;
  referenceName: string | null;
  /** measured / reference, or measured. */
  value: number | null;
  target: number;
  atMost: boolean;
  /** null: not judged (a figure or its reference not run: a --filter, a failed trial). */
  pass: boolean | null;
}

function judge(goal: Goal, row: TrialRow, reports: TrialReport[], env: Environment): GoalReport {
  const r = reports.find((x) => x.suite === row.suite && x.name === row.name);
  const figureName = 'figure' in goal.measure ? goal.measure.figure : null;
  const f = figureName === null ? undefined : r?.figures.find((x) => x.figure === figureName);
  const check = 'check' in goal.measure ? r?.checks[goal.measure.check] : undefined;
  const measured = f ? f.rate.median : typeof check === 'number' ? check : null;
  const unit = f ? f.unit : '';
  let reference: number | null = null;
  let referenceName: string | null = null;
  const a = goal.against;
  if (a.kind === 'limit') {
    reference = f && f.xLimit !== null ? f.rate.median / f.xLimit : null;
    referenceName = f?.limit ?? 'limit';
  } else if (a.kind === 'system') {
    const peer = r ? reports.find((x) => sameGroup(x, r) && x.workload === r.workload && x.system === a.system) : undefined;
    reference = (peer && figureName !== null ? medianOf(peer, figureName) : undefined) ?? null;
    referenceName = a.system;
  } else if (a.kind === 'figure') {
    reference = (r ? medianOf(r, a.figure) : undefined) ?? null;
    referenceName = a.figure;
  } else if (a.kind === 'sha256-one-core') {
    reference = env.sha256OneCoreGBps;
    referenceName = 'one-core SHA-256';
  }
  const value = measured === null ? null : a.kind === 'value' ? measured : reference === null ? null : measured / reference;
  const atMost = goal.atMost ?? false;
  const pass = value === null ? null : atMost ? value <= goal.target : value >= goal.target;
  return { goal: goal.goal, trial: row.name, suite: row.suite, measured, unit, reference, referenceName, value, target: goal.target, atMost, pass };
}

export function goals(rows: TrialRow[], reports: TrialReport[], env: Environment): GoalReport[] {
  return rows.flatMap((row) => row.goals.map((g) => judge(g, row, reports, env)));
}

// ---- formatting -----------------------------------------------------------------------------------

const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : 'inf');
const fRate = (unit: FigureUnit | '', x: number) => (unit === 'ops/s' ? Math.round(x).toLocaleString('en-US') : x >= 0.1 || x === 0 ? f2(x) : x.toPrecision(2));
const fx = (x: number | null) => (x === null ? '-' : `${x >= 0.1 ? f2(x) : x.toPrecision(2)}x`);
const fBytes = (b: number) => (Math.abs(b) >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / MiB).toFixed(1)} MiB`);
const num = (v: CheckValue | undefined) => (typeof v === 'number' ? v : null);
/** The system column: the store's huge-page variants are systems of their own there. */
const systemCell = (r: { system: string; dramHugePages: boolean | null }) => (r.dramHugePages === null ? r.system : `${r.system} huge=${r.dramHugePages ? 'on' : 'off'}`);

// ---- the main table -------------------------------------------------------------------------------

function mainTable(suite: Suite, reports: TrialReport[], notRun: NotRun[]): string[] {
  const lines = ['| workload | size | figure | system | runs | median | min-max | unit | ms/run median | x limit | x best peer |', '|---|---|---|---|---:|---:|---:|---|---:|---:|---:|'];
  const workloads: readonly string[] = SUITES[suite].workloads;
  const systems: readonly string[] = SUITES[suite].systems;
  const order = (w: string, b: number, s: string) => workloads.indexOf(w) * 1e13 + b * 10 + systems.indexOf(s);
  const rows = [...reports.map((r) => ({ key: order(r.workload, r.blockBytes, r.system), r, n: undefined })), ...notRun.map((n) => ({ key: order(n.workload, n.blockBytes, n.system), r: undefined, n }))];
  rows.sort((a, b) => a.key - b.key);
  for (const { r, n } of rows) {
    if (n) {
      lines.push(`| ${n.workload} | ${sizeLabel(n.blockBytes)} | - | ${n.system} | - | n/a | - | - | - | - | ${n.reason} |`);
      continue;
    }
    if (!r) continue;
    for (const f of r.figures) {
      const self = (s: string | null) => s === r.system;
      lines.push(
        `| ${r.workload} | ${sizeLabel(r.blockBytes)} | ${f.figure} | ${systemCell(r)} | ${f.timesMs.length} | ${fRate(f.unit, f.rate.median)} | ` +
          `${fRate(f.unit, f.rate.min)}-${fRate(f.unit, f.rate.max)} | ${f.unit} | ${f3(f.latencyMs.median)} | ${self(f.limit) ? '1.00x' : f.limit === null ? '-' : `${fx(f.xLimit)}${r.suite === 'store' ? ` ${f.limit}` : ''}`} | ` +
          `${self(f.bestPeer) ? '1.00x (best)' : f.xBestPeer === null ? '-' : `${fx(f.xBestPeer)} (${String(f.bestPeer)})`} |`,
      );
    }
    if (r.suite === 'peers' && r.workload === 'meta') {
      for (const [fig, reason] of Object.entries(systemSpec(r.system as never).figuresNotApplicable ?? {})) {
        if (!r.figures.some((f) => f.figure === fig)) lines.push(`| ${r.workload} | ${sizeLabel(r.blockBytes)} | ${fig} | ${r.system} | - | n/a | - | - | - | - | ${reason} |`);
      }
    }
  }
  return lines;
}

// ---- each suite's own tables ----------------------------------------------------------------------

const SUITE_TITLES: Record<Suite, string> = {
  store: 'Store (in-process), against memcpy and one-core SHA-256',
  mount: 'Mount: Cascade (direct_io, `cascade-kc` = --kernel-cache) against bindfs and the raw tmpfs / disk',
  peers: 'Side by side: Cascade next to real peers',
  native: 'Native addon: on (`addon`) and off (`ts`, CASCADE_NATIVE=0)',
  'full-cache': 'Full cache: creates with DRAM empty and full',
  cluster: 'Cluster: four nodes and a single-node mount on this machine, against the transport and the single node',
};

const SUITE_NOTES: Record<Suite, string> = {
  store:
    '`x limit` = median throughput / median throughput of the reference for the same block size in this run (memcpy for gets and promotions, single-core SHA-256 for puts).',
  mount:
    '`x limit` = median / median of the raw filesystem (tmpfs; the disk file for cold reads); `x best peer` = median / median of bindfs (over tmpfs; over the disk directory for cold reads).',
  peers:
    '`x limit` = median / median of the limit (tmpfs; the disk for cold reads); `x best peer` = median / the best median among bindfs, Redis and h5py for the same figure (named). ' +
    'Hot = in memory (page cache, tmpfs, Redis, Cascade DRAM); cold = page cache of every backing file dropped, system restarted. ' +
    'Cascade rows (each with its own ratios): `cascade` = the mount, native engine on /dev/fuse; `cascade-uring` = the same over FUSE io_uring (--fuse-uring on); `cascade-passthrough` = the same with --passthrough; `cascade-fuse-native` = the same mount, fuse-native engine; ' +
    '`cascade-client` = reads through the same-node client (LocalClient: open + copy out of the shared arena + release), writes through the mount. ' +
    '`blocks/s` = the same runs as `read`, one block (open, whole read, close) per run.',
  native: 'Whole-block reads, client reads and hashing with the addon on and off, in the same run; warm-ups happen inside each trial.',
  'full-cache':
    'One python3 process creates files (open, one write, close) through a fresh native-engine mount per --dram; the working set is 4x what DRAM holds (at least 32,768 files), so the last quarter is written into a full cache. ' +
    'Creates/s while DRAM is empty and while it is full, their ratio, and slot bytes per block byte; tmpfs and bindfs create the same files in the same run.',
  cluster:
    "Nodes a, b, c with the remote DRAM tier (libfabric tcp;ofi_rxm on loopback; b never keeps what it reads remotely), d with --fabric off; one redis-server, one shared directory. " +
    "Each run writes a new block on a; `remote` = the read on b, `shared-cold` = on d (a's segments dropped from the page cache), `local` = on a; `single-node` = the same block written and read on a single-node mount (no --cluster) beside them; the peers (`segment-read`, `redis-get`, `fi_read`, `iperf3`) in the same trial. " +
    'Whole-file reads through the mounts (open to close) into one buffer that every system reads into, timed in the trial process. `vllm`: bench/vllm_pattern.py (vLLM\'s file-tier pattern, 4 threads) on node a and on the single-node mount, then a fresh process loads the blocks on b and on the single node.',
};

function storeSections(reports: TrialReport[]): { lines: string[]; json: object } {
  const lines: string[] = [];
  const find = (blockBytes: number, figure: string, huge: boolean | null = null) => {
    for (const r of reports) {
      if (r.blockBytes !== blockBytes || r.dramHugePages !== huge) continue;
      const f = r.figures.find((x) => x.figure === figure);
      if (f) return f;
    }
    return undefined;
  };
  // Where a put's time goes: the SHA-256 reference and the DRAM write (promote), one after the other on the JS thread.
  const puts = reports
    .filter((r) => r.workload === 'put')
    .flatMap((r) => {
      const put = r.figures.find((f) => f.figure === 'put');
      const sha = find(r.blockBytes, 'sha256');
      const dram = find(r.blockBytes, 'promote', r.dramHugePages);
      if (!put || !sha || !dram) return [];
      const [putMs, sha256Ms, dramWriteMs] = [put.latencyMs.median, sha.latencyMs.median, dram.latencyMs.median];
      return [{ trial: r.name, putMs, sha256Ms, dramWriteMs, restMs: putMs - sha256Ms - dramWriteMs }];
    });
  if (puts.length > 0) {
    lines.push('', 'Where a put goes (medians from separate trials; SHA-256 and the DRAM write run one after the other on the JS thread):', '');
    lines.push('| put trial | put ms | SHA-256 ms | DRAM write ms | rest ms |', '|---|---:|---:|---:|---:|');
    for (const p of puts) lines.push(`| ${p.trial} | ${f3(p.putMs)} | ${f3(p.sha256Ms)} | ${f3(p.dramWriteMs)} | ${f3(p.restMs)} |`);
  }
  // Promotion pays when the reads it turns from disk reads into DRAM reads save more than it costs.
  const breakEven: { blockBytes: number; dramHugePages: boolean | null; diskGetColdMs: number; diskGetWarmMs: number; promoteMs: number; hotGetMs: number; promoteOverColdGet: number; readsToRepayCold: number | null; readsToRepayWarm: number | null }[] = [];
  for (const blockBytes of [...new Set(reports.map((r) => r.blockBytes))].sort((a, b) => a - b)) {
    const cold = find(blockBytes, 'get-cold');
    const warm = find(blockBytes, 'get-disk-warm');
    if (!cold || !warm) continue;
    for (const v of new Set(reports.filter((r) => r.blockBytes === blockBytes && r.workload === 'promote').map((r) => r.dramHugePages))) {
      const promote = find(blockBytes, 'promote', v);
      const hot = find(blockBytes, 'get', v);
      if (!promote || !hot) continue;
      const [p, h, c, w] = [promote.latencyMs.median, hot.latencyMs.median, cold.latencyMs.median, warm.latencyMs.median];
      // JSON has no Infinity: a disk get no slower than a hot get never repays a promotion (null).
      breakEven.push({ blockBytes, dramHugePages: v, diskGetColdMs: c, diskGetWarmMs: w, promoteMs: p, hotGetMs: h, promoteOverColdGet: p / c, readsToRepayCold: c > h ? p / (c - h) : null, readsToRepayWarm: w > h ? p / (w - h) : null });
    }
  }
  if (breakEven.length > 0) {
    const fr = (x: number | null) => (x === null ? 'never' : f2(x));
    lines.push(
      '',
      `Promotion break-even (medians; PROMOTE_AFTER_READS_DEFAULT = ${PROMOTE_AFTER_READS_DEFAULT}). A promotion is one DRAM write of a block already read; it repays itself after \`promote / (disk get - hot get)\` later reads.`,
      '',
      '| block | DRAM huge pages | disk get cold ms | disk get warm ms | promotion ms | hot get ms | promotion / cold get | reads to repay (cold) | reads to repay (warm cache) |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|',
    );
    for (const b of breakEven) {
      lines.push(
        `| ${sizeLabel(b.blockBytes)} | ${b.dramHugePages === null ? 'default' : b.dramHugePages ? 'on' : 'off'} | ${f3(b.diskGetColdMs)} | ${f3(b.diskGetWarmMs)} | ${f3(b.promoteMs)} | ` +
          `${f3(b.hotGetMs)} | ${f2(b.promoteOverColdGet)} | ${fr(b.readsToRepayCold)} | ${fr(b.readsToRepayWarm)} |`,
      );
    }
    const worst = Math.max(...breakEven.map((b) => b.readsToRepayWarm ?? Infinity));
    lines.push(
      '',
      worst <= 1
        ? `Every promotion here costs less than one later disk read saves (worst: ${f2(worst)} reads, warm cache), so promoting after the first disk read is the cheaper choice for any block read twice.`
        : `The worst case needs ${f2(worst)} later reads (warm cache) to repay a promotion: a block read only twice loses with threshold 1 there.`,
    );
  }
  for (const r of reports.filter((x) => x.workload === 'get-cold')) {
    const c = r.checks;
    lines.push(
      '',
      `Cold-cache check (${r.name}): drop via \`${String(c.dropMethod)}\`; resident bytes after each drop (fincore): ${String(c.maxResidentBytesAfterDrop)}; ` +
        `raw pread of a segment after a drop ${f3(Number(c.rawPreadColdMs))} ms vs cached ${f3(Number(c.rawPreadWarmMs))} ms; store get cold/warm median ${f2(Number(c.storeColdOverWarmMedian))}x; ` +
        `drop verified: ${String(c.dropVerified)}; warm phase: fraction of segment bytes cached ${String(c.minResidentFractionBeforeWarm)}.`,
    );
  }
  return { lines, json: { putBreakdown: puts, promotionBreakEven: breakEven } };
}

function mountSections(reports: TrialReport[]): { lines: string[]; json: object } {
  const lines: string[] = [];
  // The page cache's effect: the same figure with --kernel-cache over the default direct_io mount.
  const kc = reports
    .filter((r) => r.system === 'cascade')
    .flatMap((r) =>
      r.figures.flatMap((f) => {
        const other = reports.find((x) => x.system === 'cascade-kc' && x.workload === r.workload && x.blockBytes === r.blockBytes)?.figures.find((g) => g.figure === f.figure);
        return other ? [{ workload: `${r.workload} ${sizeLabel(r.blockBytes)}`, figure: f.figure, unit: f.unit, directIo: f.rate.median, kernelCache: other.rate.median, ratio: other.rate.median / f.rate.median }] : [];
      }),
    );
  if (kc.length > 0) {
    lines.push('', 'Kernel page cache (`--kernel-cache`) against direct_io, same run (medians):', '');
    lines.push('| workload | figure | direct_io | kernel cache | unit | kernel cache / direct_io |', '|---|---|---:|---:|---|---:|');
    for (const k of kc) lines.push(`| ${k.workload} | ${k.figure} | ${fRate(k.unit, k.directIo)} | ${fRate(k.unit, k.kernelCache)} | ${k.unit} | ${f2(k.ratio)}x |`);
  }
  const cascade = reports.filter((r) => r.role === 'cascade');
  if (cascade.length > 0) {
    lines.push('', 'Cascade store counters at the end of each trial (from `.cascade/stats.json`): reads served from DRAM / disk (per FUSE read request), promotions, dirty blocks still to be written back, dedup hits, DRAM size.', '');
    lines.push('| trial | DRAM hits | disk hits | promotions | dirty at end | dedup hits | DRAM | daemon start ms | content verified |', '|---|---:|---:|---:|---:|---:|---:|---|---|');
    for (const r of cascade) {
      const c = r.checks;
      const dram = typeof c.dramBytes === 'number' ? `${Math.round(c.dramBytes / MiB)} MiB` : '-';
      lines.push(
        `| ${r.name} | ${String(c.storeDramHits ?? '-')} | ${String(c.storeDiskHits ?? '-')} | ${String(c.storePromotions ?? '-')} | ${String(c.storeDirtyBlocks ?? '-')} | ` +
          `${String(c.storeDedupHits ?? '-')} | ${dram} | ${String(c.daemonStartMs ?? '-')} | ${String(c.contentVerified ?? c.sizesVerified ?? '-')} |`,
      );
    }
  }
  return { lines, json: { kernelCacheEffect: kc } };
}

function peerSections(reports: TrialReport[]): { lines: string[]; json: object } {
  const lines: string[] = [];
  const dup = reports.filter((r) => r.workload === 'dup-write');
  if (dup.length > 0) {
    lines.push(
      '',
      `Duplicate writes: one block under ${DUP_NAMES} names. Bytes stored = the system's own figure after the ${DUP_NAMES} writes minus before (tmpfs/bindfs: statfs; Redis: used_memory; h5py: allocated bytes of the .h5 file; Cascade: DRAM tier bytes, and segment bytes on disk).`,
      '',
      '| size | system | logical bytes | stored in memory | stored / logical | stored on disk | time for all names ms | first write ms | median duplicate write ms |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|',
    );
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
    lines.push(
      '',
      `Capacity overflow: ${CAPACITY_FACTOR}x the system's memory written (Cascade \`--dram\`; Redis \`maxmemory\` + allkeys-lru), then passes reading every block. tmpfs, bindfs and h5py have no eviction (not applicable).`,
      '',
      '| size | system | memory | data | in memory after writing | readable | refused writes | read pass GB/s (median) | write GB/s (median) |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|',
    );
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
    lines.push(
      '',
      `Rename race: ${String(c0.readers)} concurrent readers (threads) open + read whole (1 MiB calls) + close \`kv/bench/hot.bin\` (${sizeLabel(race[0].blockBytes)}), ` +
        `${Number(c0.opensPerRun).toLocaleString('en-US')} opens per run, while a writer writes \`hot.bin.tmp\` with two distinct contents alternately and renames it over \`hot.bin\`. ` +
        'Every read is compared byte for byte with both versions: a wrong read is short (other length) or mixed (neither version). Counts over the counted runs.',
      '',
      '| system | opens | opens/s (median) | ENOENT | wrong content (short + mixed) | other errors | reads of A / B | renames |',
      '|---|---:|---:|---:|---:|---:|---:|---:|',
    );
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
  return { lines, json: {} };
}

/** One row per --dram: Cascade empty and full, the goals, and the peers' creates over the same window. */
function fullCacheSections(reports: TrialReport[]): { lines: string[]; json: object } {
  const rows = reports
    .filter((r) => r.system === 'cascade')
    .map((r) => {
      const peer = (system: string) => reports.find((x) => x.system === system && x.blockBytes === r.blockBytes && x.checks.dramBytes === r.checks.dramBytes);
      const full = medianOf(r, 'create') ?? 0;
      const empty = medianOf(r, 'create-empty') ?? 0;
      const slots = num(r.checks.slotOverBlockBytes) ?? 0;
      const tmpfs = peer('tmpfs');
      const bindfs = peer('bindfs');
      return {
        dramBytes: num(r.checks.dramBytes) ?? 0,
        fileBytes: r.blockBytes,
        files: num(r.checks.files) ?? 0,
        dramHoldsFiles: num(r.checks.dramHoldsFiles) ?? 0,
        cascade: { emptyPerS: empty, fullPerS: full, fullOverEmpty: full / empty, slotOverBlockBytes: slots, evictions: num(r.checks.evictions) ?? 0, evictionsAhead: num(r.checks.evictionsAhead) ?? 0 },
        tmpfsPerS: tmpfs ? (medianOf(tmpfs, 'create') ?? null) : null,
        bindfsPerS: bindfs ? (medianOf(bindfs, 'create') ?? null) : null,
        pass: { fullAtLeast0p8xEmpty: full >= 0.8 * empty, slotsAtMost2x: slots <= 2 },
      };
    });
  const lines = [
    '',
    '| --dram | file | files (DRAM holds) | cascade empty /s | cascade full /s | full ÷ empty (goal >= 0.8) | slots ÷ bytes (goal <= 2) | tmpfs /s | bindfs /s | evictions (ahead) |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const perS = (x: number | null) => (x === null ? '-' : x.toFixed(0));
  for (const r of rows) {
    lines.push(
      `| ${r.dramBytes / MiB} MiB | ${r.fileBytes / 1024} KiB | ${r.files} (${r.dramHoldsFiles}) | ${r.cascade.emptyPerS.toFixed(0)} | ${r.cascade.fullPerS.toFixed(0)} | ` +
        `${f3(r.cascade.fullOverEmpty)} ${r.pass.fullAtLeast0p8xEmpty ? 'PASS' : 'FAIL'} | ${f3(r.cascade.slotOverBlockBytes)} ${r.pass.slotsAtMost2x ? 'PASS' : 'FAIL'} | ` +
        `${perS(r.tmpfsPerS)} | ${perS(r.bindfsPerS)} | ${r.cascade.evictions} (${r.cascade.evictionsAhead}) |`,
    );
  }
  return { lines, json: { fullCache: rows } };
}

/** Global dedup and the scaling counts: what the cluster's figures do not say. */
function clusterSections(reports: TrialReport[]): { lines: string[]; json: object } {
  const lines: string[] = [];
  for (const r of reports.filter((x) => x.workload === 'read' && x.checks.remoteReaderCpuSecondsPerGB !== undefined)) {
    const k = r.checks;
    lines.push(
      '',
      `${r.name}: CPU per GB read remotely (medians of the counted runs): reader (b) ${String(k.remoteReaderCpuSecondsPerGB)} s, holder (a) ${String(k.remoteHolderCpuSecondsPerGB)} s ` +
        `(every thread of each daemon, from the remote read's open to b's stats a moment after its close). Redis commands clients sent (a MONITOR connection, one more block after the timed runs; ` +
        `commands inside a script not counted, a heartbeat in the window counted): the write on a (create, write, close) ${String(k.redisCommandsPerWrite)}, the remote read on b (open to close) ${String(k.redisCommandsPerRemoteRead)}, ` +
        `a's read of its own block ${String(k.redisCommandsPerLocalRead)}.`,
    );
  }
  const dedup = reports.find((r) => r.workload === 'dedup');
  const put = dedup?.figures.find((f) => f.figure === 'put-duplicate');
  if (dedup && put) {
    lines.push('', `Global dedup: ${sizeLabel(dedup.blockBytes)} that a stores, written on c in ${put.latencyMs.median.toFixed(0)} ms; c's segments grew ${String(dedup.checks.otherNodeSegmentGrowthBytes)} bytes.`);
  }
  const scaling = reports.find((r) => r.workload === 'scaling');
  const rows = scaling ? [1, 2, 3].map((n) => ({ nodes: n, sharedLoads: num(scaling.checks[`sharedLoads${n}`]), remoteLoads: num(scaling.checks[`remoteLoads${n}`]) })) : [];
  if (scaling) {
    lines.push('', `| nodes reading ${String(scaling.checks.blocks)} prefix blocks (written on d) | loaded from the shared tier | fetched from a peer's DRAM |`, '|---:|---:|---:|');
    for (const r of rows) lines.push(`| ${r.nodes} | ${String(r.sharedLoads)} | ${String(r.remoteLoads)} |`);
  }
  return { lines, json: { scaling: rows } };
}

const SECTIONS: Partial<Record<Suite, (reports: TrialReport[]) => { lines: string[]; json: object }>> = {
  cluster: clusterSections,
  store: storeSections,
  mount: mountSections,
  peers: peerSections,
  'full-cache': fullCacheSections,
};

/** The chosen suites' own tables: markdown lines, and what goes into the JSON beside the trials. */
export function suiteSections(suite: Suite, reports: TrialReport[]): { lines: string[]; json: object } {
  return SECTIONS[suite]?.(reports.filter((r) => r.suite === suite)) ?? { lines: [], json: {} };
}

// ---- markdown -------------------------------------------------------------------------------------

function goalLines(rows: GoalReport[]): string[] {
  if (rows.length === 0) return [];
  const lines = ['', '| goal | trial | measured (median) | target | result |', '|---|---|---:|---:|---|'];
  for (const g of rows) {
    const unit = g.unit === '' ? '' : ` ${g.unit}`;
    const measured =
      g.measured === null ? 'not run' : g.reference === null || g.value === null ? `${fRate(g.unit as FigureUnit, g.measured)}${unit}` : `${fRate(g.unit as FigureUnit, g.measured)}${unit} (${f2(g.value)}x ${g.referenceName})`;
    const cmp = g.atMost ? '<=' : '>=';
    const target = g.referenceName === null ? `${cmp} ${g.target.toLocaleString('en-US')}${unit}` : `${cmp} ${g.target}x ${g.referenceName}`;
    const result = g.pass === null ? (g.measured === null ? '-' : `${g.referenceName} not run`) : g.pass ? 'PASS' : 'FAIL';
    lines.push(`| ${g.goal} | ${g.trial} | ${measured} | ${target} | ${result} |`);
  }
  return lines;
}

/** The end of a report: the cold-read checks, trials whose content check failed, failed trials. */
function checkAndFailureLines(reports: TrialReport[], failures: { trial: string; error: string }[]): string[] {
  const lines: string[] = [];
  const cold = reports.filter((r) => r.workload === 'cold-read');
  if (cold.length > 0) lines.push('');
  for (const r of cold) {
    lines.push(
      `Cold check (${r.name}): ${String(r.checks.backingFilesDropped)} backing file(s) dropped before each run, resident bytes after the drop (fincore, max): ` +
        `${String(r.checks.maxResidentBytesAfterDrop)}; content verified: ${String(r.checks.contentVerified)}.`,
    );
  }
  const unverified = reports.filter((r) => r.checks.contentVerified === false || r.checks.sizesVerified === false || r.checks.readVerified === false);
  if (unverified.length > 0) lines.push('', `**Content check failed in:** ${unverified.map((r) => r.name).join(', ')}.`);
  if (failures.length > 0) {
    lines.push('', '**Trials that failed** (no figures):');
    for (const f of failures) lines.push(`- ${f.trial}: ${f.error.split('\n')[0]}`);
  }
  return lines;
}

export interface RunSummary {
  date: string;
  title: string;
  quick: boolean;
  suites: Suite[];
  wallTimeMs: number;
  env: Environment;
  reports: TrialReport[];
  notRun: NotRun[];
  goals: GoalReport[];
  failures: { trial: string; error: string }[];
  leftovers: string[];
  chartFile: string | null;
}

export function markdown(s: RunSummary): string {
  const { env } = s;
  const lines: string[] = [];
  lines.push(`### ${s.title}, ${s.date}, ${env.hostname}${s.quick ? ' (--quick)' : ''}`, '');
  const disk = env.tmpDirMount ? `${env.tmpDirMount.fsType} (${env.tmpDirMount.source})` : 'unknown';
  lines.push(
    `${String(env.cpuModel)} (sha_ni: ${String(env.cpuShaNi)}), ${env.cores} cores, ${(env.memoryBytes / 2 ** 30).toFixed(1)} GiB, kernel ${env.kernel}, Node ${env.node}; ` +
      `redis-server ${String(env.redisServerPackage)} (ioredis ${String(env.ioredis)}); h5py ${String(env.h5py)} / HDF5 ${String(env.hdf5)} / numpy ${String(env.numpy)} (Python ${String(env.python)}); ` +
      `bindfs ${String(env.bindfsPackage)}, libfuse2 ${String(env.libfuse2)}, fuse-native ${String(env.fuseNative)}. THP shmem_enabled=${String(env.thpShmemEnabled)}. Disk: ${disk}. ` +
      `Load average (1 min) at start ${f2(env.loadAverageAtStart[0])}, at end ${f2(os.loadavg()[0])}. ${s.reports.length} trials, ${(s.wallTimeMs / 1000).toFixed(1)} s. ` +
      `Left behind in /tmp, /dev/shm, /proc/mounts: ${s.leftovers.length === 0 ? 'nothing' : s.leftovers.join(', ')}.`,
  );
  lines.push('', 'Medians of the counted runs (after the warm-ups), with min-max. GB/s = 1e9 bytes/s.');
  for (const suite of s.suites) {
    const reports = s.reports.filter((r) => r.suite === suite);
    const notRun = s.notRun.filter((n) => n.suite === suite);
    if (reports.length === 0 && notRun.length === 0) continue;
    lines.push('', `#### ${SUITE_TITLES[suite]}`, '', SUITE_NOTES[suite]);
    // The full-cache table says it all in one row per --dram (the raw figures are in the JSON).
    if (suite !== 'full-cache') lines.push('', ...mainTable(suite, reports, notRun));
    lines.push(...suiteSections(suite, s.reports).lines);
  }
  if (s.goals.length > 0) {
    lines.push('', `#### Goals`, '', `Each against figures of the same run; this machine's one-core SHA-256 rate, measured at the start, is ${env.sha256OneCoreGBps.toFixed(2)} GB/s.`);
    lines.push(...goalLines(s.goals));
  }
  lines.push(...checkAndFailureLines(s.reports, s.failures));
  if (s.chartFile) lines.push('', `Chart: [${path.basename(s.chartFile)}](${path.basename(s.chartFile)}).`);
  return lines.join('\n') + '\n';
}

// ---- chart ----------------------------------------------------------------------------------------

/** The chart: one panel per suite, workload and figure; one bar per system and size. */
export function chart(title: string, reports: TrialReport[], suites: Suite[]): Promise<string> {
  const rows: ChartRow[] = [];
  for (const r of reports) {
    for (const f of r.figures) {
      const panel = `${r.suite === 'peers' ? '' : `${r.suite} `}${r.workload}: ${f.figure} (${f.unit})`;
      rows.push({ panel, size: sizeLabel(r.blockBytes), system: systemCell(r), value: f.rate.median });
    }
  }
  const systems = [...new Set([...suites.flatMap((s) => SUITES[s].systems as readonly string[]), ...rows.map((r) => r.system)])];
  return renderChartSvg(title, rows, systems);
}

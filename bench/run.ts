/**
 * The one benchmark runner: `node dist/bench/run.js [--suite S,...] [--quick] [--filter F] [--out FILE]
 * [--list]`. It takes the chosen rows of the trial table (trials.ts), runs each in a fresh process
 * (trial.js) with its own scratch directory, sweeps whatever a trial left (mounts, daemons, files) even
 * after a crash, shows progress, and writes one report (report.ts): JSON with every raw sample,
 * markdown (also on stdout) and an SVG chart.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { SingleBar } from 'cli-progress';
import { resultsFile, resultsHead, scratchLeftovers, singleLine, writeResults } from './common';
import { FUSE_URING_PARAM_PATH, readKernelParam } from '../mount/engine/kernel-params';
import { environment } from './environment';
import { killListedPids, mountsUnder, mountTable, removeScratch, SCRATCH_PREFIX, TMPFS_SOURCE, trialLayout, unmountAllUnder } from './mounts';
import { parseTrialResult, type Suite, type TrialResult } from './protocol';
import { attachRatios, chart, goals, markdown, suiteSections, summarize, type TrialReport } from './report';
import { H5PY_PEER_SCRIPT, pythonForH5py, SYSTEMS as PEER_SYSTEMS } from './systems';
import { DEFAULT_SUITES, MOUNT_SIZING, PEER_SIZING, SUITE_NAMES, sizeLabel, trialTable, type TrialRow } from './trials';

/** A trial that takes longer than this is stuck (the runner then stops it and sweeps its mounts). */
const TRIAL_TIMEOUT_MS = 30 * 60 * 1000;

// ---- one trial in a fresh process -----------------------------------------------------------------

let currentChild: ChildProcess | undefined;
let currentScratch: string | undefined;
let stopping = false;

/** After a trial, or after a crash or an interrupt: unmount what is left under its scratch dir, kill its daemons, remove it. */
function sweepScratch(scratchDir: string): string[] {
  const layout = trialLayout(scratchDir);
  const notes = unmountAllUnder(scratchDir).map((m) => `unmounted ${m}`);
  for (const pid of killListedPids(layout.pidFile)) notes.push(`killed daemon ${pid}`);
  if (mountsUnder(scratchDir).length > 0) {
    notes.push(...unmountAllUnder(scratchDir).map((m) => `unmounted ${m} (second try)`));
  }
  if (!removeScratch(scratchDir)) notes.push(`${scratchDir} kept: still mounted below it`);
  return notes;
}

export interface TrialProcess {
  result: TrialResult;
  wallTimeMs: number;
  /** The trial process's pid (the store names its DRAM arena files with it). */
  pid: number | undefined;
  /** What the sweep after the trial found and removed (should be empty). */
  sweep: string[];
}

/**
 * Runs `node trial.js '<row's args + scratchDir JSON>'` in a fresh scratch directory
 * os.tmpdir()/cascade-bench-XXXXXX, parses its one stdout line, then sweeps the directory. stderr is
 * kept (its tail goes into a failure's message). A trial over the timeout gets SIGTERM (mount and peers
 * trials unwind through their cleanup), SIGKILL 60 s later.
 */
function runTrialProcess(row: TrialRow): Promise<TrialProcess> {
  const { name, role: _role, goals: _goals, ...trialArgs } = row;
  const scratchDir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), SCRATCH_PREFIX)));
  currentScratch = scratchDir;
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'trial.js'), JSON.stringify({ ...trialArgs, scratchDir })], { stdio: ['ignore', 'pipe', 'pipe'] });
    currentChild = child;
    let stdout = '';
    let stderrTail = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d: string) => (stderrTail = (stderrTail + d).slice(-4000)));
    let hard: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      child.kill('SIGTERM');
      hard = setTimeout(() => child.kill('SIGKILL'), 60_000);
    }, TRIAL_TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (hard) clearTimeout(hard);
      currentChild = undefined;
      currentScratch = undefined;
      const wallTimeMs = performance.now() - t0;
      const sweep = sweepScratch(scratchDir);
      try {
        if (code !== 0) {
          const why = stderrTail.trim() ? `: ${stderrTail.trim().split('\n').slice(-3).join(' | ')}` : '';
          throw new Error(`trial ${name} exited with ${code ?? signal}${why}${sweep.length ? `; swept: ${sweep.join('; ')}` : ''}`);
        }
        resolve({ result: parseTrialResult(singleLine(name, stdout)), wallTimeMs, pid: child.pid, sweep });
      } catch (e) {
        reject(e);
      }
    });
  });
}

/**
 * Ctrl-C reaches the trial and its daemons too (one process group); a signal sent to the runner alone
 * is passed on. Either way the trial unwinds through its cleanup, then the runner sweeps and exits 130.
 * `beforeExit` runs first (e.g. to stop a progress bar).
 */
function installSignalHandlers(program: string, beforeExit?: () => void): void {
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(s, () => {
      if (stopping) return;
      stopping = true;
      beforeExit?.();
      process.stderr.write(`${program}: ${s}: stopping the current trial and cleaning up\n`);
      const child = currentChild;
      const scratch = currentScratch;
      const finish = () => {
        if (scratch) for (const n of sweepScratch(scratch)) process.stderr.write(`${program}: ${n}\n`);
        process.exit(130);
      };
      if (!child) return finish();
      child.kill('SIGTERM');
      const hard = setTimeout(() => {
        child.kill('SIGKILL');
        finish();
      }, 60_000);
      child.once('close', () => {
        clearTimeout(hard);
        finish();
      });
    });
  }
}

// ---- leftovers ------------------------------------------------------------------------------------

/**
 * A benchmark's own traces in os.tmpdir(), /dev/shm and the mount table: its scratch directories, the
 * store's arena directories, DRAM files of its own daemons, and its tmpfs mounts (other users' are not
 * ours to judge).
 */
function leftoverSnapshot(scratchPrefix: string, tmpfsSource: string, daemonPids: ReadonlySet<number>): string[] {
  const ours = (name: string) => {
    const arena = /^cascade-dram-(\d+)-/.exec(name);
    return name.startsWith(scratchPrefix) || name.startsWith('cascade-arena-') || (arena !== null && daemonPids.has(Number(arena[1])));
  };
  const names = scratchLeftovers(ours);
  for (const m of mountTable()) {
    if (m.source === tmpfsSource || m.source === 'cascade-arena' || m.target.includes(`/${scratchPrefix}`)) names.push(`mount: ${m.fsType} ${m.target}`);
  }
  return names;
}

/**
 * Leftovers that appeared during the run and are still there 3 s later (a daemon's huge-page arena
 * directory exists for a moment while it starts; other users' daemons make them too).
 */
async function newLeftovers(before: ReadonlySet<string>, snapshot: () => string[]): Promise<string[]> {
  let leftovers = snapshot().filter((n) => !before.has(n));
  if (leftovers.length > 0) {
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const again = new Set(snapshot());
    leftovers = leftovers.filter((n) => again.has(n));
  }
  return leftovers;
}

// ---- preflight ------------------------------------------------------------------------------------

/** What every mounting benchmark needs: root, /dev/fuse, fusermount, the built CLI. Returns the problems. */
function mountPreflightProblems(needCascade: boolean): string[] {
  const problems: string[] = [];
  if (process.getuid?.() !== 0) problems.push('run as root (the trials mount tmpfs and FUSE filesystems)');
  if (!fs.existsSync('/dev/fuse')) problems.push('/dev/fuse is missing');
  if (spawnSync('fusermount', ['-V'], { stdio: 'ignore' }).error) problems.push('fusermount missing: apt-get install fuse libfuse2');
  if (needCascade && !fs.existsSync(path.join(__dirname, '..', 'mount', 'cli.js'))) problems.push('dist/mount/cli.js missing: build first (npm run build)');
  return problems;
}

/** Prints the problems and exits 1, if there are any. */
function exitOnProblems(program: string, problems: string[]): void {
  if (problems.length === 0) return;
  process.stderr.write(`${program}: cannot run:\n${problems.map((p) => `  - ${p}`).join('\n')}\n`);
  process.exit(1);
}


/** What the chosen trials need on this machine, besides root and /dev/fuse where they mount. */
function preflight(rows: TrialRow[]): void {
  const uses = (suite: Suite, system?: string) => rows.some((t) => t.suite === suite && (system === undefined || t.system === system));
  const missing = (cmd: string, args: string[]) => spawnSync(cmd, args, { stdio: 'ignore' }).error !== undefined;
  const mounting = rows.some((t) => t.suite !== 'store');
  const problems = mounting ? mountPreflightProblems(rows.some((t) => t.suite !== 'store' && t.role === 'cascade')) : [];
  if (rows.some((t) => t.workload === 'cold-read' || t.workload === 'get-cold') && missing('fincore', ['--version'])) problems.push('fincore missing: apt-get install util-linux');
  if (rows.some((t) => t.system.startsWith('bindfs')) && missing('bindfs', ['--version'])) problems.push('bindfs missing: apt-get install bindfs (or bash scripts/bench-peers.sh; never fuse3)');
  if (uses('peers', 'redis') && missing('redis-server', ['--version'])) problems.push('redis-server missing: apt-get install redis-server (or bash scripts/bench-peers.sh)');
  if (uses('peers', 'h5py')) {
    const r = spawnSync(pythonForH5py(), ['-c', 'import h5py, numpy'], { encoding: 'utf8' });
    if (r.status !== 0) problems.push(`h5py missing for ${pythonForH5py()}: apt-get install python3-h5py python3-numpy (or bash scripts/bench-peers.sh)`);
    if (!fs.existsSync(H5PY_PEER_SCRIPT)) problems.push(`${H5PY_PEER_SCRIPT} is missing`);
  }
  if (uses('full-cache') && missing('python3', ['--version'])) problems.push('python3 missing (the full-cache trials create files from python3)');
  if (uses('cluster') && missing('redis-server', ['--version'])) problems.push('redis-server missing: apt-get install redis-server (or bash scripts/bench-peers.sh)');
  if (rows.some((t) => t.suite === 'cluster' && t.workload === 'read') && missing('iperf3', ['--version'])) problems.push('iperf3 missing: apt-get install iperf3 (or bash scripts/bench-peers.sh)');
  exitOnProblems('bench', problems);
}

// ---- progress -------------------------------------------------------------------------------------

/** A bar on a terminal; one line per trial otherwise (CI logs, pipes). */
function progress(total: number) {
  const bar = process.stderr.isTTY
    ? new SingleBar({ stream: process.stderr, format: 'bench [{bar}] {value}/{total} trials | {elapsed} | {trial}', barsize: 24, hideCursor: true, fps: 5 })
    : undefined;
  const t0 = performance.now();
  const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0)} s`;
  bar?.start(total, 0, { trial: 'starting', elapsed: elapsed() });
  return {
    starting(i: number, name: string) {
      bar?.update(i, { trial: `running ${name}`, elapsed: elapsed() });
    },
    done(i: number, line: string) {
      if (bar) bar.update(i + 1, { trial: line.slice(0, 100), elapsed: elapsed() });
      else process.stderr.write(`[${i + 1}/${total}] ${line} (${elapsed()})\n`);
    },
    /** A line above the bar (failures): the bar is redrawn below it. */
    note(text: string) {
      bar?.stop();
      process.stderr.write(`${text}\n`);
    },
    stop() {
      bar?.stop();
    },
  };
}

// ---- command line ---------------------------------------------------------------------------------

const USAGE = `usage: node dist/bench/run.js [--suite S[,S...]] [--quick] [--filter F[,F...]] [--out FILE.json] [--list] [--help]

  --suite   ${SUITE_NAMES.join(', ')} or all (default: ${DEFAULT_SUITES.join(',')}, what \`npm run bench\` runs)
  --quick   fewer sizes and runs
  --filter  trials whose name contains one of the comma-separated substrings (plus the limits and
            peers their ratios and goals need)
  --out     the results file (the .md and .svg go beside it); default bench/results/[<suites>-]<date>-<host>[-quick].json
            (no prefix for the default suites, "all" for every suite, else the suites joined by +)
  --list    print the chosen trials (suite, workload, system, size, runs, goals) and exit
`;

interface Options {
  suites: Suite[];
  quick: boolean;
  filter: string | undefined;
  outFile: string | undefined;
  list: boolean;
}

function usage(code: number): never {
  (code === 0 ? process.stdout : process.stderr).write(USAGE);
  process.exit(code);
}

function parseOptions(argv: string[]): Options {
  const o: Options = { suites: DEFAULT_SUITES, quick: false, filter: undefined, outFile: undefined, list: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => (i + 1 < argv.length ? argv[++i] : usage(2));
    if (a === '--quick') o.quick = true;
    else if (a === '--list') o.list = true;
    else if (a === '--help' || a === '-h') usage(0);
    else if (a === '--filter') o.filter = value();
    else if (a === '--out') o.outFile = value();
    else if (a === '--suite') {
      const names = value().split(',').map((x) => x.trim());
      if (names.includes('all')) o.suites = [...SUITE_NAMES];
      else if (names.every((n): n is Suite => (SUITE_NAMES as string[]).includes(n))) o.suites = names;
      else usage(2);
    } else usage(2);
  }
  return o;
}

function listTrials(rows: TrialRow[]): void {
  const lines = ['| suite | trial | workload | system | role | size | runs (+ warm-ups) | blocks | goals |', '|---|---|---|---|---|---:|---:|---:|---|'];
  for (const r of rows) {
    lines.push(`| ${r.suite} | ${r.name} | ${r.workload} | ${r.system} | ${r.role} | ${sizeLabel(r.blockBytes)} | ${r.runs} (+${r.warmups}) | ${r.blocks} | ${r.goals.map((g) => g.goal).join('; ') || '-'} |`);
  }
  process.stdout.write(`${lines.join('\n')}\n${rows.length} trials\n`);
}

// ---- main -----------------------------------------------------------------------------------------

/**
 * The fuse module's enable_uring as the run found it, and a function that puts it back: the
 * `cascade-uring` rows turn it on (--fuse-uring on), and a benchmark leaves the machine as it was.
 */
function keepFuseUringParam(): () => void {
  const saved = readKernelParam(FUSE_URING_PARAM_PATH);
  if (saved === undefined) return () => {}; // no such parameter: nothing to put back
  return () => {
    try {
      if (readKernelParam(FUSE_URING_PARAM_PATH) !== saved) fs.writeFileSync(FUSE_URING_PARAM_PATH, saved);
    } catch {
      // not root: the daemon could not have changed it either
    }
  };
}

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  const { trials: rows, notRun } = trialTable(o.suites, o.quick, o.filter);
  if (o.list) return listTrials(rows);
  if (rows.length === 0) {
    process.stderr.write(`no trial of ${o.suites.join(', ')} matches --filter ${String(o.filter)}\n`);
    process.exit(1);
  }
  preflight(rows);
  const bar = progress(rows.length);
  const restoreUringParam = keepFuseUringParam();
  installSignalHandlers('bench', () => {
    bar.stop();
    restoreUringParam();
  });
  const startedAt = new Date();
  const t0 = performance.now();
  const daemonPids = new Set<number>();
  const snapshot = () => leftoverSnapshot(SCRATCH_PREFIX, TMPFS_SOURCE, daemonPids);
  const before = new Set(snapshot());
  const env = environment();
  const reports: TrialReport[] = [];
  const failures: { trial: string; error: string }[] = [];
  for (const [i, row] of rows.entries()) {
    bar.starting(i, row.name);
    let outcome: TrialProcess;
    try {
      outcome = await runTrialProcess(row);
    } catch (e) {
      // One broken trial should not cost the others: it is reported, and its figures are missing.
      const error = e instanceof Error ? e.message : String(e);
      failures.push({ trial: row.name, error });
      bar.note(`[${i + 1}/${rows.length}] ${row.name}: FAILED: ${error}`);
      continue;
    }
    const { result, wallTimeMs, pid, sweep } = outcome;
    if (pid !== undefined) daemonPids.add(pid);
    for (const p of String(result.checks.daemonPids ?? '').split(',')) if (p !== '') daemonPids.add(Number(p));
    const report = summarize(row, result, wallTimeMs, sweep);
    reports.push(report);
    const brief = report.figures.map((f) => `${f.figure} ${f.unit === 'GB/s' ? f.rate.median.toFixed(2) : Math.round(f.rate.median).toLocaleString('en-US')} ${f.unit}`).join(', ');
    bar.done(i, `${row.name}: ${brief}; ${(wallTimeMs / 1000).toFixed(1)} s${sweep.length ? `; swept: ${sweep.join('; ')}` : ''}`);
  }
  bar.stop();
  restoreUringParam();
  attachRatios(reports);
  const goalRows = goals(rows, reports, env);
  const leftovers = await newLeftovers(before, snapshot);
  const wallTimeMs = performance.now() - t0;

  const date = startedAt.toISOString().slice(0, 10);
  const isDefault = o.suites.length === DEFAULT_SUITES.length && o.suites.every((s) => DEFAULT_SUITES.includes(s));
  const isAll = o.suites.length === SUITE_NAMES.length;
  const outFile = resultsFile(isDefault ? '' : isAll ? 'all' : o.suites.join('+'), date, o);
  const base = outFile.replace(/\.json$/, '');
  const title = isDefault ? 'Side-by-side benchmark' : `Benchmark (${o.suites.join(', ')})`;
  let chartFile: string | null = `${base}.svg`;
  let chartError: string | null = null;
  try {
    const svg = await chart(`Cascade and peers, median throughput (${env.hostname}, ${date}${o.quick ? ', --quick' : ''})`, reports, o.suites);
    fs.mkdirSync(path.dirname(chartFile), { recursive: true });
    fs.writeFileSync(chartFile, svg);
  } catch (e) {
    chartError = e instanceof Error ? e.message : String(e);
    chartFile = null;
  }
  const md = markdown({ date, title, quick: o.quick, suites: o.suites, wallTimeMs, env, reports, notRun, goals: goalRows, failures, leftovers, chartFile });
  const doc = {
    ...resultsHead('cascade-bench/2', date, startedAt, wallTimeMs, env),
    configuration: {
      mode: o.quick ? 'quick' : 'full',
      suites: o.suites,
      filter: o.filter ?? null,
      sizing: { mount: o.quick ? MOUNT_SIZING.quick : MOUNT_SIZING.full, peers: o.quick ? PEER_SIZING.quick : PEER_SIZING.full },
      peerSystems: PEER_SYSTEMS.map((s) => ({ name: s.name, role: s.role, what: s.what, notApplicable: s.notApplicable, figuresNotApplicable: s.figuresNotApplicable ?? {} })),
      trials: rows,
    },
    trials: reports,
    notRun,
    goals: goalRows,
    ...Object.fromEntries(o.suites.map((s) => [s, suiteSections(s, reports).json])),
    failures,
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

main().catch((e: unknown) => {
  process.stderr.write(`bench: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exitCode = 1;
});

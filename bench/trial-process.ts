/**
 * The driver side of a benchmark whose trials mount things (mount-bench.ts, peers-bench.ts): run one
 * trial in a fresh process with its own scratch directory, sweep whatever it left (mounts, daemons,
 * files) even after a crash, pass a signal on to the running trial, list leftovers, and the versions of
 * installed packages and tools that the results files record.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { scratchLeftovers, singleLine } from './common';
import { killListedPids, mountsUnder, mountTable, removeScratch, trialLayout, unmountAllUnder } from './mount-systems';

// ---- versions -------------------------------------------------------------------------------------

/** stdout + stderr of a command (version strings), or null when it does not run. */
export function commandOutput(cmd: string, args: string[]): string | null {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.error || (r.status !== 0 && (r.stdout ?? '').trim() === '')) return null;
  return `${r.stdout ?? ''}${r.stderr ?? ''}`.trim() || null;
}

/** The installed version of a Debian package, or null. */
export function dpkgVersion(pkg: string): string | null {
  const r = spawnSync('dpkg-query', ['-W', '-f=${Version}', pkg], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() !== '' ? r.stdout.trim() : null;
}

/** The installed version of an npm package, or null. */
export function npmVersion(pkg: string): string | null {
  try {
    const text = fs.readFileSync(require.resolve(`${pkg}/package.json`), 'utf8');
    const v: unknown = Reflect.get(JSON.parse(text) as object, 'version');
    return typeof v === 'string' ? v : null;
  } catch {
    return null;
  }
}

// ---- one trial in a fresh process -----------------------------------------------------------------

let currentChild: ChildProcess | undefined;
let currentScratch: string | undefined;
let stopping = false;

/** After a trial, or after a crash or an interrupt: unmount what is left under its scratch dir, kill its daemons, remove it. */
export function sweepScratch(scratchDir: string): string[] {
  const layout = trialLayout(scratchDir);
  const notes = unmountAllUnder(scratchDir).map((m) => `unmounted ${m}`);
  for (const pid of killListedPids(layout.pidFile)) notes.push(`killed daemon ${pid}`);
  if (mountsUnder(scratchDir).length > 0) {
    notes.push(...unmountAllUnder(scratchDir).map((m) => `unmounted ${m} (second try)`));
  }
  if (!removeScratch(scratchDir)) notes.push(`${scratchDir} kept: still mounted below it`);
  return notes;
}

export interface TrialProcess<R> {
  result: R;
  wallTimeMs: number;
  /** What the sweep after the trial found and removed (should be empty). */
  sweep: string[];
}

/**
 * Runs `node <script> '<args + scratchDir JSON>'` in a fresh scratch directory os.tmpdir()/<prefix>XXXXXX,
 * parses its one stdout line with `parse`, then sweeps the directory. stderr passes through (or goes
 * to `onStderr`). A trial over timeoutMs gets SIGTERM (it unwinds through its cleanup), SIGKILL 60 s later.
 */
export function runTrialProcess<A extends object, R>(args: {
  script: string;
  name: string;
  trialArgs: A;
  scratchPrefix: string;
  timeoutMs: number;
  parse: (line: string) => R;
  onStderr?: (text: string) => void;
  env?: NodeJS.ProcessEnv;
}): Promise<TrialProcess<R>> {
  const scratchDir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), args.scratchPrefix)));
  currentScratch = scratchDir;
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [args.script, JSON.stringify({ ...args.trialArgs, scratchDir })], {
      stdio: ['ignore', 'pipe', args.onStderr ? 'pipe' : 'inherit'],
      env: args.env ?? process.env,
    });
    currentChild = child;
    let stdout = '';
    let stderrTail = '';
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (d: string) => (stdout += d));
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => {
      stderrTail = (stderrTail + d).slice(-4000);
      args.onStderr?.(d);
    });
    let hard: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => {
      child.kill('SIGTERM');
      hard = setTimeout(() => child.kill('SIGKILL'), 60_000);
    }, args.timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (hard) clearTimeout(hard);
      currentChild = undefined;
      currentScratch = undefined;
      const wallTimeMs = performance.now() - t0;
      const sweep = sweepScratch(scratchDir);
      try {
        if (code !== 0) {
          const why = args.onStderr && stderrTail.trim() ? `: ${stderrTail.trim().split('\n').slice(-3).join(' | ')}` : '';
          throw new Error(`trial ${args.name} exited with ${code ?? signal}${why}${sweep.length ? `; swept: ${sweep.join('; ')}` : ''}`);
        }
        resolve({ result: args.parse(singleLine(args.name, stdout)), wallTimeMs, sweep });
      } catch (e) {
        reject(e);
      }
    });
  });
}

/**
 * Ctrl-C reaches the trial and its daemons too (one process group); a signal sent to the driver alone
 * is passed on. Either way the trial unwinds through its cleanup, then the driver sweeps and exits 130.
 * `beforeExit` runs first (e.g. to stop a progress bar).
 */
export function installDriverSignalHandlers(program: string, beforeExit?: () => void): void {
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
export function leftoverSnapshot(scratchPrefix: string, tmpfsSource: string, daemonPids: ReadonlySet<number>): string[] {
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
export async function newLeftovers(before: ReadonlySet<string>, snapshot: () => string[]): Promise<string[]> {
  let leftovers = snapshot().filter((n) => !before.has(n));
  if (leftovers.length > 0) {
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const again = new Set(snapshot());
    leftovers = leftovers.filter((n) => again.has(n));
  }
  return leftovers;
}

// ---- preflight and report pieces both drivers share ------------------------------------------------

/** What every mounting benchmark needs: root, /dev/fuse, fusermount, the built CLI. Returns the problems. */
export function mountPreflightProblems(needCascade: boolean): string[] {
  const problems: string[] = [];
  if (process.getuid?.() !== 0) problems.push('run as root (the trials mount tmpfs and FUSE filesystems)');
  if (!fs.existsSync('/dev/fuse')) problems.push('/dev/fuse is missing');
  if (spawnSync('fusermount', ['-V'], { stdio: 'ignore' }).error) problems.push('fusermount missing: apt-get install fuse libfuse2');
  if (needCascade && !fs.existsSync(path.join(__dirname, '..', 'mount', 'cli.js'))) problems.push('dist/mount/cli.js missing: build first (npm run build)');
  return problems;
}

/** Prints the problems and exits 1, if there are any. */
export function exitOnProblems(program: string, problems: string[]): void {
  if (problems.length === 0) return;
  process.stderr.write(`${program}: cannot run:\n${problems.map((p) => `  - ${p}`).join('\n')}\n`);
  process.exit(1);
}

/** The end of a markdown report: the cold-read checks, trials whose content check failed, failed trials. */
export function checkAndFailureLines(
  reports: { name: string; cold: boolean; checks: Record<string, unknown> }[],
  failures: { trial: string; error: string }[],
): string[] {
  const lines: string[] = [];
  const cold = reports.filter((r) => r.cold);
  if (cold.length > 0) {
    lines.push('');
    for (const r of cold) {
      lines.push(
        `Cold check (${r.name}): ${String(r.checks.backingFilesDropped)} backing file(s) dropped before each run, resident bytes after the drop (fincore, max): ` +
          `${String(r.checks.maxResidentBytesAfterDrop)}; content verified: ${String(r.checks.contentVerified)}.`,
      );
    }
  }
  const unverified = reports.filter((r) => r.checks.contentVerified === false || r.checks.sizesVerified === false);
  if (unverified.length > 0) {
    lines.push('');
    lines.push(`**Content check failed in:** ${unverified.map((r) => r.name).join(', ')}.`);
  }
  if (failures.length > 0) {
    lines.push('');
    lines.push('**Trials that failed** (no figures):');
    for (const f of failures) lines.push(`- ${f.trial}: ${f.error.split('\n')[0]}`);
  }
  return lines;
}

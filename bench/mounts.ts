/**
 * Starting, stopping and cleaning up what the trials mount: a Cascade daemon (`dist/mount/cli.js
 * mount`, a child process), bindfs (a C FUSE filesystem on the same libfuse2, a child process in the
 * foreground) and a private tmpfs. (Page-cache control for the cold trials is in common.ts.)
 *
 * Everything a trial mounts lives under its scratch directory, so the runner can sweep whatever a
 * crashed trial left (`unmountAllUnder`) before it removes that directory. Nothing here is removed while
 * something is still mounted below it.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { MiB } from '../store/constants';
import { dropPageCache, parseMountTable, type MountRow } from './common';
import type { CheckValue } from './protocol';

// ---- the scratch layout ---------------------------------------------------------------------------

export interface TrialLayout {
  scratchDir: string;
  /** Cascade's data directory (disk tier and metadata): on the disk, under os.tmpdir(). */
  dataDir: string;
  /** Where Cascade or bindfs is mounted. */
  mountDir: string;
  /** A private tmpfs mount (bindfs's source, and the raw tmpfs system). */
  tmpfsDir: string;
  /** A plain directory on the disk (bindfs-disk's source, and the raw disk system). */
  diskDir: string;
  /** stdout + stderr of the Cascade daemon or bindfs. */
  logFile: string;
  /** Pids of every daemon the trial started, one per line: the runner kills any still alive. */
  pidFile: string;
}

export function trialLayout(scratchDir: string): TrialLayout {
  return {
    scratchDir,
    dataDir: path.join(scratchDir, 'data'),
    mountDir: path.join(scratchDir, 'mnt'),
    tmpfsDir: path.join(scratchDir, 'tmpfs'),
    diskDir: path.join(scratchDir, 'disk'),
    logFile: path.join(scratchDir, 'daemon.log'),
    pidFile: path.join(scratchDir, 'daemon.pid'),
  };
}

/** The prefix of every trial's scratch directory (os.tmpdir()/cascade-bench-XXXXXX). */
export const SCRATCH_PREFIX = 'cascade-bench-';

// ---- interrupts -----------------------------------------------------------------------------------

let interruptedBy: string | undefined;

/**
 * SIGINT/SIGTERM/SIGHUP only set a flag: the trial notices it between runs (and while waiting for a
 * daemon) and unwinds through its finally blocks, which unmount everything. Exiting from the handler
 * would skip them.
 */
export function installInterruptHandlers(): void {
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(s, () => {
      interruptedBy ??= s;
    });
  }
}

export class Interrupted extends Error {
  constructor(signal: string) {
    super(`interrupted by ${signal}`);
  }
}

export function wasInterrupted(): boolean {
  return interruptedBy !== undefined;
}

export function checkInterrupted(): void {
  if (interruptedBy !== undefined) throw new Interrupted(interruptedBy);
}

export const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Polls `done` until it holds; throws after timeoutMs (with `what` in the message), or on an interrupt
 * when `interruptible` (cleanup waits are not: they must finish to leave nothing mounted).
 */
export async function waitFor(what: string, done: () => boolean, timeoutMs: number, pollMs = 20, interruptible = true): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (interruptible) checkInterrupted();
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(pollMs);
  }
}

/** A new mount's DRAM arena fills its page tables in the background; trials wait for that. */
const PREFAULT_TIMEOUT_MS = 120_000;

/**
 * Wait until each mount's DRAM arena is prefaulted (stats.json: the dram tier's prefaultedBytes up to
 * its capacity): a mount's first seconds fault in its arena on other threads (about 2.4 s per GiB
 * here), and a trial timed meanwhile measures that, not the path. Returns the milliseconds waited.
 */
export async function waitPrefaulted(mounts: string[]): Promise<number> {
  const t0 = Date.now();
  const done = (mnt: string) => {
    const s = JSON.parse(fs.readFileSync(path.join(mnt, '.cascade', 'stats.json'), 'utf8')) as { tiers: Array<{ name: string; capacityBytes: number; prefaultedBytes?: number }> };
    const dram = s.tiers.find((t) => t.name === 'dram');
    // A DRAM tier that is not a native arena reports none: nothing to wait for (mounts always prefault).
    return dram === undefined || dram.prefaultedBytes === undefined || dram.prefaultedBytes >= dram.capacityBytes;
  };
  await waitFor('the DRAM arenas to be prefaulted', () => mounts.every(done), PREFAULT_TIMEOUT_MS, 100);
  return Date.now() - t0;
}

// ---- mount table ----------------------------------------------------------------------------------

export type { MountRow } from './common';

export function mountTable(): MountRow[] {
  return parseMountTable(fs.readFileSync('/proc/mounts', 'utf8'));
}

export function mountsUnder(dir: string): MountRow[] {
  return mountTable().filter((m) => m.target === dir || m.target.startsWith(`${dir}/`));
}

export function mountedAt(dir: string): MountRow | undefined {
  return mountTable().find((m) => m.target === dir);
}

/**
 * Unmounts everything at or below `dir`, deepest first: FUSE mounts with `fusermount -uz` (lazy: works
 * even when the daemon is dead or hangs), anything else with `umount -l`. Returns what it unmounted.
 */
export function unmountAllUnder(dir: string): string[] {
  const done: string[] = [];
  const rows = mountsUnder(dir).sort((a, b) => b.target.length - a.target.length);
  for (const m of rows) {
    const fuse = m.fsType === 'fuse' || m.fsType.startsWith('fuse.');
    const r = fuse ? spawnSync('fusermount', ['-uz', m.target], { stdio: 'ignore' }) : spawnSync('umount', ['-l', m.target], { stdio: 'ignore' });
    done.push(`${m.fsType} ${m.target}${r.status === 0 ? '' : ' (unmount failed)'}`);
  }
  return done;
}

/** Removes a scratch directory, but never while anything is mounted below it (it would delete through the mount). */
export function removeScratch(dir: string): boolean {
  if (mountsUnder(dir).length > 0) return false;
  fs.rmSync(dir, { recursive: true, force: true });
  return true;
}

// ---- processes ------------------------------------------------------------------------------------

/** Alive and not a zombie (a zombie child has exited; Node reaps it when its event loop runs). */
export function processAlive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** Kills every pid listed in a trial's pid file that is still alive (a daemon whose trial crashed). */
export function killListedPids(pidFile: string): number[] {
  let text = '';
  try {
    text = fs.readFileSync(pidFile, 'utf8');
  } catch {
    return [];
  }
  const killed: number[] = [];
  for (const line of text.split('\n')) {
    const pid = Number(line.trim());
    if (!Number.isSafeInteger(pid) || pid <= 0 || !processAlive(pid)) continue;
    try {
      process.kill(pid, 'SIGKILL');
      killed.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  return killed;
}

function readTail(file: string, maxChars: number): string {
  try {
    const text = fs.readFileSync(file, 'utf8');
    return text.length > maxChars ? text.slice(text.length - maxChars) : text;
  } catch {
    return '';
  }
}

/** A daemon in the foreground as a child, its output appended to the trial's log file. */
export class Daemon {
  private child: ChildProcess | undefined;
  private exited = true;
  exitDescription = '';

  constructor(
    private readonly layout: TrialLayout,
    private readonly what: string,
  ) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return !this.exited;
  }

  spawn(command: string, args: string[], env?: NodeJS.ProcessEnv): void {
    const logFd = fs.openSync(this.layout.logFile, 'a');
    try {
      const child = spawn(command, args, { stdio: ['ignore', logFd, logFd], env: env ?? process.env });
      this.child = child;
      this.exited = false;
      child.on('error', (e) => {
        this.exited = true;
        this.exitDescription = `could not start ${command}: ${e.message}`;
      });
      child.on('exit', (code, signal) => {
        this.exited = true;
        this.exitDescription = `${this.what} exited with ${code ?? signal}`;
      });
      if (child.pid !== undefined) fs.appendFileSync(this.layout.pidFile, `${child.pid}\n`);
    } finally {
      fs.closeSync(logFd); // the child has its own copy
    }
  }

  /** Waits for the child to exit; SIGKILL after timeoutMs. */
  async waitExit(timeoutMs: number): Promise<void> {
    try {
      await waitFor(`${this.what} to exit`, () => this.exited, timeoutMs, 20, false);
    } catch (e) {
      this.kill('SIGKILL');
      await waitFor(`${this.what} to exit after SIGKILL`, () => this.exited, 10_000, 20, false).catch(() => undefined);
      throw e;
    }
  }

  kill(signal: NodeJS.Signals): void {
    if (!this.exited && this.child?.pid !== undefined && processAlive(this.child.pid)) this.child.kill(signal);
  }

  logTail(maxChars = 2000): string {
    return readTail(this.layout.logFile, maxChars);
  }
}

// ---- Cascade --------------------------------------------------------------------------------------

export interface CascadeOptions {
  cliPath: string;
  kernelCache: boolean;
  dramBytes: number;
  /** Disk tier bound (`--disk`), if any. */
  diskBytes?: number;
  /** Variables added to the daemon's environment (e.g. CASCADE_NATIVE=0 for a variant without the addon). */
  env?: Record<string, string>;
}

/** The store's DRAM tier allocates in 64 KiB pages (DRAM_PAGE_BYTES_DEFAULT). */
export const DRAM_PAGE_BYTES = 64 * 1024;
/** DRAM beyond the working set (small files, rounding); prefaulting costs ~0.4 s per GiB here. */
const DRAM_SLACK_BYTES = 192 * MiB;

/**
 * A DRAM tier that holds a working set of `workingSetBytes` (hot means in DRAM), with slack; sized per
 * trial because the daemon prefaults its arena at start (2 GiB took 4.5 s here).
 */
export function cascadeDramBytes(workingSetBytes: number): number {
  const bytes = workingSetBytes * 1.1 + DRAM_SLACK_BYTES;
  return Math.ceil(bytes / (64 * MiB)) * 64 * MiB;
}

/** Clean shutdown persists every dirty block (written and fdatasynced): allow for a slow virtual disk. */
const CASCADE_STOP_TIMEOUT_MS = 180_000;
const CASCADE_START_TIMEOUT_MS = 120_000;
const MOUNTED_MARK = 'cascade: mounted ';
/** Segment sizes unchanged this long (after reaching the bytes written) = write-back done. */
const SETTLE_STABLE_MS = 60;
const SETTLE_TIMEOUT_MS = 180_000;

/** `cascade mount` as a child process (the readers must be another process: the daemon's event loop serves FUSE). */
export class CascadeDaemon {
  private readonly daemon: Daemon;
  /** When the current mount went live (stats.json snapshots are at most 1 s old from then on). */
  mountedAtMs = 0;
  private lastStatsAccessMs = 0;
  readonly startTimesMs: number[] = [];
  /** After each start, until the arena was prefaulted (waitPrefaulted): not part of the start time. */
  readonly prefaultWaitsMs: number[] = [];
  readonly stopTimesMs: number[] = [];
  readonly pids: number[] = [];

  constructor(
    private readonly layout: TrialLayout,
    readonly options: CascadeOptions,
  ) {
    this.daemon = new Daemon(layout, 'cascade daemon');
  }

  async start(): Promise<void> {
    fs.mkdirSync(this.layout.mountDir, { recursive: true });
    fs.mkdirSync(this.layout.dataDir, { recursive: true });
    const marksBefore = this.mountedMarks();
    const t0 = performance.now();
    this.daemon.spawn(process.execPath, [
      this.options.cliPath,
      'mount',
      this.layout.mountDir,
      '--data',
      this.layout.dataDir,
      '--dram',
      `${Math.ceil(this.options.dramBytes / MiB)}M`,
      ...(this.options.kernelCache ? ['--kernel-cache'] : []),
      ...(this.options.diskBytes !== undefined ? ['--disk', `${Math.ceil(this.options.diskBytes / MiB)}M`] : []),
    ], this.options.env ? { ...process.env, ...this.options.env } : undefined);
    if (this.daemon.pid !== undefined) this.pids.push(this.daemon.pid);
    try {
      await waitFor(
        'the cascade daemon to mount',
        () => {
          if (!this.daemon.running) throw new Error(`${this.daemon.exitDescription}; log:\n${this.daemon.logTail()}`);
          return this.mountedMarks() > marksBefore && mountedAt(this.layout.mountDir)?.fsType === 'fuse.cascade';
        },
        CASCADE_START_TIMEOUT_MS,
      );
    } catch (e) {
      await this.stop().catch(() => undefined);
      throw e;
    }
    this.mountedAtMs = Date.now();
    this.startTimesMs.push(performance.now() - t0);
    this.prefaultWaitsMs.push(await waitPrefaulted([this.layout.mountDir]));
  }

  /** SIGTERM: the daemon unmounts, closes the store (persisting everything) and exits. */
  async stop(): Promise<void> {
    const t0 = performance.now();
    try {
      if (this.daemon.running) {
        this.daemon.kill('SIGTERM');
        await this.daemon.waitExit(CASCADE_STOP_TIMEOUT_MS);
      }
    } finally {
      if (mountedAt(this.layout.mountDir)) spawnSync('fusermount', ['-uz', this.layout.mountDir], { stdio: 'ignore' });
    }
    this.stopTimesMs.push(performance.now() - t0);
  }

  /** For an exit handler: no waiting possible. */
  stopNowSync(): void {
    this.daemon.kill('SIGKILL');
    if (mountedAt(this.layout.mountDir)) spawnSync('fusermount', ['-uz', this.layout.mountDir], { stdio: 'ignore' });
  }

  private mountedMarks(): number {
    return readTail(this.layout.logFile, 1 << 20).split(MOUNTED_MARK).length - 1;
  }

  /** What a trial records about its daemon: DRAM, start/stop times, pids, segments, unexpected log lines. */
  facts(): Record<string, CheckValue> {
    const unexpected = this.unexpectedLogLines();
    return {
      dramBytes: this.options.dramBytes,
      kernelCache: this.options.kernelCache,
      cascadeEnv: this.options.env ? JSON.stringify(this.options.env) : null,
      daemonStartMs: this.startTimesMs.map((t) => t.toFixed(0)).join(','),
      prefaultWaitMs: this.prefaultWaitsMs.map((t) => t.toFixed(0)).join(','),
      daemonStopMs: this.stopTimesMs.map((t) => t.toFixed(0)).join(','),
      daemonPids: this.pids.join(','),
      segmentFiles: this.segmentFiles().length,
      daemonLogUnexpectedLines: unexpected.length,
      daemonLogFirstUnexpected: unexpected[0]?.slice(0, 300) ?? null,
    };
  }

  /** Log lines other than the expected mount / shutdown chatter (errors the daemon reported). */
  unexpectedLogLines(): string[] {
    // Lines are `TIME LEVEL cascade: ...` (mount/daemon/log.ts): the mount's life is at INFO.
    const expected = /^(?:\S+ INFO +)?cascade: (mounted |received |unmounted |.*shutting down)/;
    return readTail(this.layout.logFile, 1 << 20)
      .split('\n')
      .filter((l) => l.trim().length > 0 && !expected.test(l));
  }

  /** Segment files of the disk tier (what a cold read reads). */
  segmentFiles(): string[] {
    const dir = path.join(this.layout.dataDir, 'segments');
    try {
      return fs
        .readdirSync(dir)
        .filter((f) => f.endsWith('.log'))
        .map((f) => path.join(dir, f));
    } catch {
      return [];
    }
  }

  /** Bytes in the disk tier's segment files (append-only: they grow as the flusher writes blocks back). */
  segmentBytes(): number {
    let total = 0;
    for (const f of this.segmentFiles()) {
      try {
        total += fs.statSync(f).size;
      } catch {
        // compacted away meanwhile
      }
    }
    return total;
  }

  /**
   * Waits until the write-back is done: the segments hold at least `contentBytes` (every block written
   * so far; records add headers and alignment) and have stopped growing. Polls file sizes, which is
   * cheap, unlike stats.json (a snapshot at most once a second). Returns the time waited.
   */
  async settle(contentBytes: number): Promise<number> {
    const t0 = performance.now();
    let last = -1;
    let stableSinceMs = 0;
    await waitFor(
      'the write-back to disk to finish',
      () => {
        const now = this.segmentBytes();
        if (now !== last) {
          last = now;
          stableSinceMs = Date.now();
          return false;
        }
        return now >= contentBytes && Date.now() - stableSinceMs >= SETTLE_STABLE_MS;
      },
      SETTLE_TIMEOUT_MS,
      10,
    );
    return performance.now() - t0;
  }

  /**
   * The store's counters from MOUNT/.cascade/stats.json, fresh. The file is a snapshot that any access
   * (getattr, open) re-renders in the background when it is over a second old. So: wait until the last
   * access (or the mount) is over a second ago, touch it once to start a refresh, read it again. Its
   * page cache is dropped before each read: a --kernel-cache mount would keep serving old content, and
   * its cached size may cut the new content short (then JSON fails to parse and the read is retried
   * once the attribute cache has expired).
   */
  async freshStats(): Promise<Record<string, CheckValue>> {
    const file = path.join(this.layout.mountDir, '.cascade', 'stats.json');
    const access = () => {
      dropPageCache(file);
      const text = readToEnd(file);
      this.lastStatsAccessMs = Date.now();
      return text;
    };
    const waitMs = Math.max(this.mountedAtMs, this.lastStatsAccessMs) + 1050 - Date.now();
    if (waitMs > 0) await delay(waitMs);
    access();
    await delay(150);
    let parsed: unknown;
    let lastError = '';
    for (let attempt = 0; attempt < 10 && parsed === undefined; attempt++) {
      try {
        parsed = JSON.parse(access());
      } catch (e) {
        lastError = e instanceof Error ? e.message : String(e);
        await delay(300);
      }
    }
    if (parsed === undefined) return { statsError: lastError };
    const num = (...keys: (string | number)[]): number | null => {
      let v: unknown = parsed;
      for (const k of keys) v = typeof v === 'object' && v !== null ? Reflect.get(v, k) : undefined;
      return typeof v === 'number' ? v : null;
    };
    return {
      storeDramHits: num('hits', 'dram'),
      storeDiskHits: num('hits', 'disk'),
      storePromotions: num('promotions'),
      storeEvictions: num('evictions'),
      storeDemotions: num('demotions'),
      storeFlushedBlocks: num('flushedBlocks'),
      storeDirtyBlocks: num('dirtyBlocks'),
      storeDedupHits: num('dedup', 'hits'),
      storeDramBlocks: num('tiers', 0, 'blocks'),
      storeDramUsedBytes: num('tiers', 0, 'usedBytes'),
      storeDiskBlocks: num('tiers', 1, 'blocks'),
    };
  }
}

// ---- bindfs and tmpfs -----------------------------------------------------------------------------

/**
 * bindfs defaults to 4 KiB write requests (no big_writes) on libfuse2; Cascade mounts with big_writes
 * (128 KiB). Giving bindfs the same option compares the filesystems, not a mount option.
 */
export const BINDFS_OPTIONS = ['-o', 'big_writes'];

/** bindfs SOURCE MNT in the foreground (single-threaded, its default), as a child process. */
export class BindfsMount {
  private readonly daemon: Daemon;

  constructor(
    private readonly layout: TrialLayout,
    readonly sourceDir: string,
  ) {
    this.daemon = new Daemon(layout, 'bindfs');
  }

  async start(): Promise<void> {
    fs.mkdirSync(this.layout.mountDir, { recursive: true });
    this.daemon.spawn('bindfs', ['-f', ...BINDFS_OPTIONS, this.sourceDir, this.layout.mountDir]);
    try {
      await waitFor(
        'bindfs to mount',
        () => {
          if (!this.daemon.running) throw new Error(`${this.daemon.exitDescription}; log:\n${this.daemon.logTail()}`);
          const m = mountedAt(this.layout.mountDir);
          return m !== undefined && m.fsType.startsWith('fuse');
        },
        30_000,
      );
    } catch (e) {
      await this.stop().catch(() => undefined);
      throw e;
    }
  }

  /** fusermount -uz ends bindfs's loop; it exits on its own. */
  async stop(): Promise<void> {
    if (mountedAt(this.layout.mountDir)) spawnSync('fusermount', ['-uz', this.layout.mountDir], { stdio: 'ignore' });
    if (this.daemon.running) {
      await this.daemon.waitExit(10_000).catch(() => {
        this.daemon.kill('SIGKILL');
      });
    }
  }

  stopNowSync(): void {
    if (mountedAt(this.layout.mountDir)) spawnSync('fusermount', ['-uz', this.layout.mountDir], { stdio: 'ignore' });
    this.daemon.kill('SIGKILL');
  }
}

/** Room for the largest working set; tmpfs takes memory only as files grow. */
const TMPFS_SIZE_BYTES = 8 * 1024 * MiB;
/** The source name of the benchmarks' private tmpfs mounts in /proc/mounts (how a leftover one is recognised). */
export const TMPFS_SOURCE = 'cascade-bench';

/** A private tmpfs (default options: 4 KiB pages, as any tmpfs a user would read from). */
export function mountTmpfs(dir: string, sizeBytes = TMPFS_SIZE_BYTES): void {
  fs.mkdirSync(dir, { recursive: true });
  const size = `${Math.ceil(sizeBytes / MiB)}m`;
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0700`, TMPFS_SOURCE, dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`mount -t tmpfs ${dir} failed (root needed): ${r.stderr.trim()}`);
}

export function unmountTmpfs(dir: string): void {
  if (!mountedAt(dir)) return;
  const r = spawnSync('umount', [dir], { stdio: 'ignore' });
  if (r.status !== 0) spawnSync('umount', ['-l', dir], { stdio: 'ignore' });
}

/** A file's whole content, read until EOF (not up to the size fstat reports, which a cache may hold stale). */
function readToEnd(file: string): string {
  const chunks: Buffer[] = [];
  const fd = fs.openSync(file, 'r');
  try {
    for (;;) {
      const chunk = Buffer.alloc(64 * 1024);
      const n = fs.readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      chunks.push(chunk.subarray(0, n));
    }
  } finally {
    fs.closeSync(fd);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** bindfs started over a private tmpfs or a disk directory, with what the trials do with it. */
export interface BindfsOverSource {
  /** The directory bindfs exposes (a private tmpfs, or the layout's disk directory). */
  sourceDir: string;
  /** Remounts (empties the mount's own caches). */
  restart(): Promise<void>;
  close(): Promise<void>;
  closeNowSync(): void;
}

/** Mounts the source (a private tmpfs unless `onDisk`) and bindfs over it at the layout's mount dir. */
export async function startBindfsOver(layout: TrialLayout, onDisk: boolean, tmpfsBytes?: number): Promise<BindfsOverSource> {
  const sourceDir = onDisk ? layout.diskDir : layout.tmpfsDir;
  if (onDisk) fs.mkdirSync(sourceDir, { recursive: true });
  else mountTmpfs(sourceDir, tmpfsBytes);
  const bindfs = new BindfsMount(layout, sourceDir);
  try {
    await bindfs.start();
  } catch (e) {
    if (!onDisk) unmountTmpfs(sourceDir);
    throw e;
  }
  return {
    sourceDir,
    async restart() {
      await bindfs.stop();
      await bindfs.start();
    },
    async close() {
      try {
        await bindfs.stop();
      } finally {
        if (!onDisk) unmountTmpfs(sourceDir);
      }
    },
    closeNowSync() {
      bindfs.stopNowSync();
      if (!onDisk) unmountTmpfs(sourceDir);
    },
  };
}

// ---- a trial's system ----------------------------------------------------------------------------

/** What a trial needs from the system it opened, besides its workload's own calls. */
export interface TrialSystem {
  stats(): Promise<Record<string, CheckValue>>;
  facts(): Record<string, CheckValue>;
  close(): Promise<void>;
  /** For the exit handler, when close() could not run. */
  closeNowSync(): void;
}

/**
 * Opens a system in the trial's scratch layout, runs the workload on it, collects its counters and
 * closes it (also on failure, and from an exit handler as a last resort; the runner sweeps too).
 * Checks: the workload's, the system's stats, setup time, then the system's facts after closing.
 */
export async function withSystem<S extends TrialSystem, F>(
  scratchDir: string,
  open: (layout: TrialLayout) => Promise<S>,
  run: (sys: S) => Promise<{ figures: F[]; checks: Record<string, CheckValue> }>,
): Promise<{ figures: F[]; checks: Record<string, CheckValue> }> {
  const layout = trialLayout(scratchDir);
  let sys: S | undefined;
  let closed = false;
  process.on('exit', () => {
    if (sys && !closed) sys.closeNowSync();
  });
  const t0 = performance.now();
  try {
    sys = await open(layout);
    const setupMs = performance.now() - t0;
    const out = await run(sys);
    const stats = await sys.stats();
    const checks: Record<string, CheckValue> = { ...out.checks, ...stats, systemSetupMs: Math.round(setupMs) };
    await sys.close();
    closed = true;
    Object.assign(checks, sys.facts());
    return { figures: out.figures, checks };
  } finally {
    if (sys && !closed) {
      closed = true;
      await sys.close().catch((e: unknown) => {
        process.stderr.write(`trial: closing the system: ${String(e)}\n`);
        sys?.closeNowSync();
      });
    }
  }
}

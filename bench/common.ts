/**
 * What the runner, the report and every suite's workloads share: trial filters, environment capture,
 * statistics, results-file naming, protocol validation helpers, timing, file I/O and page-cache
 * control. One implementation each, so every suite measures and reports alike.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MiB } from '../store/constants';

// ---- trial names --------------------------------------------------------------------------------

/** A trial is chosen when its name contains one of the filter's comma-separated substrings (no filter: all). */
export function filterMatches(filter: string | undefined, name: string): boolean {
  if (filter === undefined) return true;
  return filter
    .split(',')
    .map((f) => f.trim())
    .filter((f) => f.length > 0)
    .some((f) => name.includes(f));
}

export function sizeLabel(sizeBytes: number): string {
  return sizeBytes % MiB === 0 ? `${sizeBytes / MiB}MiB` : `${sizeBytes}B`;
}

// ---- environment ----------------------------------------------------------------------------------

export function readText(file: string): string | null {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

/** The selected value of a sysfs switch such as `always within_size advise [never] deny force`. */
export function selectedSysfsValue(file: string): string | null {
  const text = readText(file);
  if (text === null) return null;
  const m = /\[([^\]]+)\]/.exec(text);
  return m ? m[1] : text.trim();
}

export interface MountRow {
  source: string;
  target: string;
  fsType: string;
}

/** /proc/mounts writes space, tab, newline and backslash as octal escapes. */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

export function parseMountTable(text: string): MountRow[] {
  const rows: MountRow[] = [];
  for (const line of text.split('\n')) {
    const [source, target, fsType] = line.split(' ');
    if (fsType === undefined) continue;
    rows.push({ source: unescapeMountField(source), target: unescapeMountField(target), fsType });
  }
  return rows;
}

export interface MountInfo {
  mountPoint: string;
  fsType: string;
  source: string;
}

/** Filesystem type and source of the mount holding `dir` (longest mount point prefix); null without /proc/mounts. */
export function mountOf(dir: string): MountInfo | null {
  const mounts = readText('/proc/mounts');
  if (mounts === null) return null;
  const real = fs.realpathSync(dir);
  let best: MountInfo | null = null;
  for (const m of parseMountTable(mounts)) {
    if (!(real === m.target || real.startsWith(m.target.endsWith('/') ? m.target : `${m.target}/`))) continue;
    if (best === null || m.target.length >= best.mountPoint.length) best = { mountPoint: m.target, fsType: m.fsType, source: m.source };
  }
  return best;
}

export function gitCommit(): string | null {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { cwd: path.join(__dirname, '..', '..'), stdio: ['ignore', 'pipe', 'ignore'], encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
}

export function cpuInfo(): { model: string | null; flags: string[] } {
  const cpuinfo = readText('/proc/cpuinfo') ?? '';
  return {
    model: /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? os.cpus()[0]?.model ?? null,
    flags: /^flags\s*:\s*(.*)$/m.exec(cpuinfo)?.[1]?.split(' ') ?? [],
  };
}

export interface HostEnvironment {
  hostname: string;
  cpuModel: string | null;
  cores: number;
  memoryBytes: number;
  kernel: string;
  kernelVersion: string;
  node: string;
}

/** The machine: CPU, cores, memory, kernel, Node (the first fields of a results file's `environment`). */
export function hostEnvironment(): HostEnvironment {
  return {
    hostname: os.hostname(),
    cpuModel: cpuInfo().model,
    cores: os.cpus().length,
    memoryBytes: os.totalmem(),
    kernel: os.release(),
    kernelVersion: os.version(),
    node: process.version,
  };
}

export interface MemoryEnvironment {
  thpShmemEnabled: string | null;
  thpEnabled: string | null;
  tmpDir: string;
  tmpDirMount: MountInfo | null;
}

/** Transparent huge pages and where os.tmpdir() (the benchmarks' data directories) lives. */
export function memoryEnvironment(): MemoryEnvironment {
  return {
    thpShmemEnabled: selectedSysfsValue('/sys/kernel/mm/transparent_hugepage/shmem_enabled'),
    thpEnabled: selectedSysfsValue('/sys/kernel/mm/transparent_hugepage/enabled'),
    tmpDir: os.tmpdir(),
    tmpDirMount: mountOf(os.tmpdir()),
  };
}

/** Entries of os.tmpdir() and /dev/shm that `ours` claims (what a run could leave behind). */
export function scratchLeftovers(ours: (name: string) => boolean): string[] {
  const names: string[] = [];
  for (const dir of [os.tmpdir(), '/dev/shm']) {
    try {
      for (const f of fs.readdirSync(dir)) if (ours(f)) names.push(path.join(dir, f));
    } catch {
      // directory absent: nothing to leave behind there
    }
  }
  return names;
}

// ---- trial processes ------------------------------------------------------------------------------

/** The one non-empty line a trial prints on stdout. */
export function singleLine(trialName: string, stdout: string): string {
  const lines = stdout.split('\n').filter((l) => l.trim().length > 0);
  if (lines.length !== 1) throw new Error(`trial ${trialName}: expected one JSON line, got ${lines.length}`);
  return lines[0];
}

// ---- statistics -----------------------------------------------------------------------------------

export interface Spread {
  min: number;
  median: number;
  max: number;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

export function spread(xs: number[]): Spread {
  return { min: Math.min(...xs), median: median(xs), max: Math.max(...xs) };
}

/** GB/s (1e9 bytes per second) from bytes and milliseconds. */
export function gbPerS(bytes: number, timeMs: number): number {
  return bytes / (timeMs * 1e6);
}

/** Milliseconds with 3 significant-ish digits. */
export const f3 = (x: number) => (x >= 100 ? x.toFixed(1) : x >= 10 ? x.toFixed(2) : x.toFixed(3));

// ---- results file ---------------------------------------------------------------------------------

/**
 * `--out`, or bench/results/[<prefix>-]<date>-<hostname>[-quick].json (a quick run never overwrites the
 * day's full results). An empty prefix names the default run's files (`npm run bench`).
 */
export function resultsFile(prefix: string, date: string, options: { quick: boolean; outFile: string | undefined }): string {
  const outName = `${prefix ? `${prefix}-` : ''}${date}-${os.hostname()}${options.quick ? '-quick' : ''}.json`;
  return options.outFile ?? path.join(__dirname, '..', '..', 'bench', 'results', outName);
}

/** The first fields of a results file, and of its `configuration`. */
export function resultsHead<E>(schema: string, date: string, startedAt: Date, wallTimeMs: number, environment: E) {
  return { schema, date, startedAt: startedAt.toISOString(), wallTimeMs, environment };
}

export function writeResults(outFile: string, doc: object): void {
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  fs.writeFileSync(outFile, JSON.stringify(doc, null, 2) + '\n');
}

// ---- protocol validation --------------------------------------------------------------------------

export type CheckValue = string | number | boolean | null;

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** A type guard for the members of a `const` list. */
export function isOneOf<T extends string>(list: readonly T[]): (v: unknown) => v is T {
  return (v: unknown): v is T => typeof v === 'string' && (list as readonly string[]).includes(v);
}

/** Run times: finite and positive. */
export function isTimes(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((t) => typeof t === 'number' && Number.isFinite(t) && t > 0);
}

export type FigureUnit = 'GB/s' | 'ops/s';

/** One measured operation reported as a rate: every timed run, warm-ups excluded. */
export interface RateFigureSamples {
  /** Short id used in tables, e.g. 'read', 'write', 'open+close', 'stat-uncached'. */
  figure: string;
  /** What exactly was timed, in words. */
  label: string;
  /** What the figure is reported in: GB/s (bytesPerRun / time) or ops/s (opsPerRun / time). */
  unit: FigureUnit;
  bytesPerRun: number;
  opsPerRun: number;
  timesMs: number[];
}

export function isRateFigure(v: unknown): v is RateFigureSamples {
  return (
    isRecord(v) &&
    typeof v.figure === 'string' &&
    typeof v.label === 'string' &&
    (v.unit === 'GB/s' || v.unit === 'ops/s') &&
    isCount(v.bytesPerRun) &&
    isCount(v.opsPerRun) &&
    isTimes(v.timesMs) &&
    v.timesMs.length > 0
  );
}

/** A rate in its unit: GB/s (1e9 bytes/s) or ops/s. */
export function rateOf(unit: FigureUnit, bytes: number, ops: number, timeMs: number): number {
  return unit === 'GB/s' ? gbPerS(bytes, timeMs) : ops / (timeMs / 1000);
}

function isCheckValue(v: unknown): v is CheckValue {
  return v === null || typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';
}

/** A trial result's `checks`: an object of scalars. */
export function parseChecks(checks: unknown): Record<string, CheckValue> {
  if (!isRecord(checks)) throw new Error('trial result: bad checks');
  const checked: Record<string, CheckValue> = {};
  for (const [k, c] of Object.entries(checks)) {
    if (!isCheckValue(c)) throw new Error(`trial result: check ${k} is not a scalar`);
    checked[k] = c;
  }
  return checked;
}

// ---- in a trial -----------------------------------------------------------------------------------

export function clockMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export const sha256Hex = (data: Uint8Array) => crypto.createHash('sha256').update(data).digest('hex');

/**
 * libfuse 2's default entry and attribute timeouts are 1 s (fuse-native and bindfs keep them): after
 * this long every stat of a FUSE file goes to the daemon again (LOOKUP).
 */
export const FUSE_CACHE_EXPIRY_MS = 1100;

// ---- file I/O in a trial --------------------------------------------------------------------------

/** One read or write call moves at most this much (what `cp`/`dd bs=1M` would do). */
export const IO_CHUNK_BYTES = 1 * MiB;
/** Bytes at the head of each block that make its content unique (id + random). */
const UNIQUE_HEADER_BYTES = 32;

/**
 * open, read to EOF in 1 MiB calls into `target` (which has IO_CHUNK_BYTES of room past the expected
 * size, so the final zero-byte read fits), close. Returns the bytes read.
 */
export function readWhole(file: string, target: Buffer): number {
  const fd = fs.openSync(file, 'r');
  try {
    let done = 0;
    for (;;) {
      const n = fs.readSync(fd, target, done, Math.min(IO_CHUNK_BYTES, target.length - done), done);
      if (n === 0) return done;
      done += n;
      if (done === target.length) throw new Error(`${file} is larger than the ${target.length - IO_CHUNK_BYTES} bytes expected`);
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** open(O_WRONLY|O_CREAT|O_TRUNC), write in 1 MiB calls, optionally fsync, close. */
export function writeWhole(file: string, data: Buffer, fsync = false): void {
  const fd = fs.openSync(file, 'w');
  try {
    for (let done = 0; done < data.length; ) {
      done += fs.writeSync(fd, data, done, Math.min(IO_CHUNK_BYTES, data.length - done), done);
    }
    if (fsync) fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Makes `content` unique to `id` (in place) and returns its SHA-256: one random buffer serves every block. */
export function makeUnique(content: Buffer, id: number): string {
  content.writeUInt32LE(id, 0);
  crypto.randomFillSync(content, 4, UNIQUE_HEADER_BYTES - 4);
  return sha256Hex(content);
}

export function randomContent(sizeBytes: number): Buffer {
  return crypto.randomFillSync(Buffer.allocUnsafe(sizeBytes));
}

/** A reader's buffer: allocated and touched once (zero-filled), so page faults are never timed. */
export function readTarget(blockBytes: number): Buffer {
  return Buffer.alloc(blockBytes + IO_CHUNK_BYTES);
}

/** Whether a read of `n` bytes into `target` is the whole block: `bytes` long, SHA-256 `sha`. */
export const readMatches = (n: number, target: Buffer, bytes: number, sha: string) => n === bytes && sha256Hex(target.subarray(0, n)) === sha;

/**
 * Runs `op` warmups + runs times back to back and keeps the counted runs' times (`op` returns its own
 * time). `between`, when given, runs (untimed) after every run.
 */
export async function sample(
  args: { warmups: number; runs: number },
  op: (run: number) => number | Promise<number>,
  between?: () => Promise<void>,
): Promise<number[]> {
  const timesMs: number[] = [];
  for (let run = 0; run < args.warmups + args.runs; run++) {
    const timeMs = await op(run);
    if (run >= args.warmups) timesMs.push(timeMs);
    if (between) await between();
  }
  return timesMs;
}

// ---- page cache -----------------------------------------------------------------------------------

/**
 * Drops a file's clean pages from the page cache: posix_fadvise(POSIX_FADV_DONTNEED), which Node lacks.
 * GNU dd does exactly that for `iflag=nocache count=0`; python3's os.posix_fadvise is the fallback.
 * Through a FUSE mount this drops the mount's own page cache of the file.
 */
export function dropPageCache(file: string): string {
  const dd = spawnSync('dd', [`if=${file}`, 'iflag=nocache', 'count=0', 'status=none'], { stdio: ['ignore', 'ignore', 'pipe'] });
  if (dd.status === 0) return 'dd iflag=nocache count=0';
  const py = spawnSync(
    'python3',
    ['-c', 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)', file],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  if (py.status === 0) return 'python3 os.posix_fadvise DONTNEED';
  throw new Error(`cannot drop the page cache of ${file}: dd: ${String(dd.stderr)}; python3: ${String(py.stderr)}`);
}

/** Bytes of `file` in the page cache per util-linux fincore, or null where fincore cannot tell. */
export function residentBytes(file: string): number | null {
  const r = spawnSync('fincore', ['--bytes', '--noheadings', '--raw', '--output', 'RES', file], { encoding: 'utf8' });
  if (r.status !== 0) return null;
  const n = Number(r.stdout.trim());
  return Number.isFinite(n) ? n : null;
}

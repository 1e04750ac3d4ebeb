#!/usr/bin/env node
/**
 * The `cascade` command: `mount` and `unmount` for the FUSE filesystem; stat, versions, pin, unpin,
 * stats and warmup on a mounted Cascade (through files and xattrs only: mount/cli/mounted.ts); direct access
 * to a data directory with --data (put, get, stat, versions, pin, unpin, stats); and `demo`, the main
 * job of the quick start.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
// cli-progress: a widely used, maintained progress bar that redraws in place on a TTY, throttles its
// redraws and sizes itself to the terminal; warmup of many GiB needs one, and a hand-rolled \r line
// gets none of that right.
import { SingleBar } from 'cli-progress';
import yargs, { type Argv } from 'yargs';
import { KEEP_VERSIONS_DEFAULT, MiB } from '../store/constants';
import { REMOTE_PROMOTE_AFTER_READS_DEFAULT } from '../store/cluster/remote';
import { CascadeError, isCascadeError } from '../store/errors';
import { GROUP_COMMIT_DELAY_MS, GROUP_COMMIT_MAX_MS } from '../store/meta/sqlite';
import { Store, type StoreConfig, type StoreStats } from '../store/store';
import {
  asMountFile,
  collectFiles,
  dramShortfalls,
  evictFile,
  findMountRoot,
  listPins,
  listVersions,
  mountRootAt,
  notInMountError,
  readStats,
  resolveTarget,
  setPinned,
  statPath,
  warmupFiles,
  type DramShortfall,
  type EvictResult,
  type MountStats,
  type WarmupProgress,
} from './cli/mounted';
import { defaultDataDir, defaultDramBytes, ENGINES, FUSE_URING_MODES, VERIFY_MODES, type EngineChoice, type FuseUringMode, type VerifyMode } from './daemon/defaults';
import { formatBytes, parseSize } from './cli/size';
import { createDaemonLog, LOG_LEVELS, type LogLevel } from './daemon/log';

/** --data and --dram of the commands that open a data directory themselves. */
interface DirectArgs {
  /** Undefined when not given: then stat, versions, pin, unpin, stats and pins work on a mount. */
  data?: string;
  /** Undefined when not given: DIRECT_DRAM_BYTES. */
  dram?: string;
}

interface CommonArgs extends DirectArgs {
  json: boolean;
}

/** Arguments of the commands that work on a mount or, with --data, on a data directory. */
interface DualArgs extends CommonArgs {
  mount?: string;
}

/** A mistake in how the command was called: exit 2, like the usage errors yargs itself finds. */
class UsageError extends Error {}

/** A size flag's value (`--dram 8G`): a bad one is a usage error (exit 2) that names the flag. */
function sizeArg(text: string, flag: string): number {
  try {
    return parseSize(text);
  } catch (e) {
    throw new UsageError(`--${flag}: ${(e as Error).message.replace(/^EINVAL: /, '')}`);
  }
}

/** A flag's value checked by `parse`: its EINVAL becomes a usage error (exit 2). */
function usageArg<T>(parse: () => T): T {
  try {
    return parse();
  } catch (e) {
    if (isCascadeError(e, 'EINVAL')) throw new UsageError(e.message.replace(/^EINVAL: /, ''));
    throw e;
  }
}

/** How a number flag's value is shown in an error (yargs turns `abc` into NaN). */
function shown(n: number): string {
  return Number.isNaN(n) ? 'something that is not a number' : String(n);
}

/** A command's own exit code when it is not 0 and not an error (fsck's codes). */
let commandExitCode = 0;

/*
 * Options are declared per command (each builder adds its own), so `cascade X --help` lists X's options
 * only, each with its real default: a global option shows up in every command's help, where most
 * commands ignore it (unmount listed mount's --dram).
 */

/** --json, for the commands that print something a script may parse. */
function jsonOption<T>(y: Argv<T>) {
  return y.option('json', { type: 'boolean', default: false, describe: 'print machine-readable JSON' });
}

const DIRECT_DRAM_DESCRIBE = 'DRAM tier size of the data directory opened here, e.g. 512M (filled on demand: the command starts in well under a second)';

/** --data and --dram of put and get, which always open a data directory. */
function directOptions<T>(y: Argv<T>) {
  return y
    .option('data', { type: 'string', describe: 'the data directory (disk tier and metadata) to open', defaultDescription: defaultDataDir() })
    .option('dram', { type: 'string', describe: DIRECT_DRAM_DESCRIBE, defaultDescription: formatSizeArg(DIRECT_DRAM_BYTES) });
}

/** --mount, for the commands that work on a mount. */
function mountOption<T>(y: Argv<T>) {
  return y.option('mount', { type: 'string', describe: 'the mount to use: arguments that are not absolute paths are names under MOUNT/kv/' });
}

/** --mount, --data and --dram of the commands that work on a mount or, with --data, on a data directory. */
function dualOptions<T>(y: Argv<T>) {
  return (
    mountOption(y)
      // No yargs default: whether --data was given picks the mode.
      .option('data', { type: 'string', describe: 'work on this data directory directly, without a mount (arguments are store names <model>/<path...>)' })
      .option('dram', { type: 'string', describe: `with --data: ${DIRECT_DRAM_DESCRIBE}`, defaultDescription: formatSizeArg(DIRECT_DRAM_BYTES) })
      .conflicts('mount', 'data')
      .implies('dram', 'data')
  );
}

function formatSizeArg(bytes: number): string {
  return `${Math.floor(bytes / MiB)}M`;
}

/**
 * DRAM of a command that opens a data directory directly (put, get, stat, ...): small and not
 * pre-faulted, with pinned blocks left on disk, so the command starts at once with a small footprint
 * (a mount sizes its DRAM for serving; these run one operation and exit).
 */
const DIRECT_DRAM_BYTES = 256 * MiB;

/**
 * Open the data directory for one command. Only `put` (and the demo) may create one: a read of a
 * directory that is not there says so, rather than leave an empty store behind.
 */
async function withStore<R>(args: DirectArgs, fn: (store: Store) => Promise<R>, extra: Partial<StoreConfig> = {}, create = false): Promise<R> {
  const dataDir = args.data ?? defaultDataDir();
  if (!create && !fs.existsSync(dataDir)) {
    throw new CascadeError('ENOENT', `no data directory at ${dataDir} (cascade put creates one; a running mount's files are read through the mount)`);
  }
  const store = await Store.open({
    dataDir,
    dramCapacityBytes: args.dram === undefined ? DIRECT_DRAM_BYTES : sizeArg(args.dram, 'dram'),
    prefault: false,
    loadPins: false,
    // One operation per open: the journal has it; a snapshot per command would copy the whole database.
    metaSnapshotOnClose: false,
    ...extra,
  });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

function print(args: { json: boolean }, value: unknown, text: () => string): void {
  process.stdout.write(args.json ? JSON.stringify(value, null, 2) + '\n' : text() + '\n');
}

function formatStats(stats: StoreStats): string {
  return [
    ...stats.tiers.map(
      (t) => `tier ${t.name}: ${t.blocks} blocks, ${formatBytes(t.usedBytes)} of ${Number.isFinite(t.capacityBytes) ? formatBytes(t.capacityBytes) : 'unbounded'}`,
    ),
    `names ${stats.names}, versions ${stats.versions}`,
    `dedup: ${stats.dedup.hits} duplicate puts stored once, saved ${formatBytes(stats.dedup.savedBytes)} (logical ${formatBytes(stats.dedup.logicalBytes)}, stored ${formatBytes(stats.dedup.uniqueBytes)})`,
    `pinned: ${stats.pinned.blocks} block(s), ${formatBytes(stats.pinned.bytes)} of a ${formatBytes(stats.pinned.quotaBytes)} quota`,
    `hits: gpu ${stats.hits.gpu ?? 0}, dram ${stats.hits.dram}, disk ${stats.hits.disk}, misses ${stats.misses}; evictions ${stats.evictions}, promotions ${stats.promotions}, demotions ${stats.demotions}, flushed ${stats.flushedBlocks}`,
    formatGpu(stats.gpu),
  ].join('\n');
}

function formatGpu(g: StoreStats['gpu'] | undefined): string {
  if (!g) return 'gpu: unknown (an older daemon)';
  if (!g.available) return `gpu: unavailable: ${g.reason ?? 'unknown reason'}`;
  const d = g.device;
  return (
    `gpu: ${d ? `${d.name} ${d.uuid}` : 'device'}, ${g.blocks} blocks, ${formatBytes(g.usedBytes)} of ${formatBytes(g.capacityBytes)}; ` +
    `leases ${g.leases}, promotions ${g.promotions}, evictions ${g.evictions} (${g.demotions} copied down to DRAM)`
  );
}

function selector(argv: { version?: number; at?: number }) {
  return { version: argv.version, atMs: argv.at };
}

/** A short tour of the store: KV blocks, a shared system prompt deduplicated, a pin, versions, stats. */
async function demo(args: CommonArgs & { blocks: number; blockSize: string; keep: boolean }): Promise<void> {
  const dataDir = args.keep ? (args.data ?? defaultDataDir()) : fs.mkdtempSync(path.join(os.tmpdir(), 'cascade-demo-'));
  const blockBytes = sizeArg(args.blockSize, 'block-size');
  const log = (line: string) => process.stderr.write(`${line}\n`);
  log(`cascade demo: data directory ${dataDir}${args.keep ? '' : ' (temporary)'}, DRAM ${args.dram}`);
  try {
    await withStore({ ...args, data: dataDir }, async (store) => {
      const prompt = crypto.randomBytes(blockBytes);
      // Generated before timing, so the figure is the store's, not the random generator's.
      const own = Array.from({ length: args.blocks }, () => crypto.randomBytes(blockBytes));
      const progress = process.stderr.isTTY && !args.json;
      const t0 = performance.now();
      for (let i = 0; i < args.blocks; i++) {
        // Every request starts with the same system-prompt block, then its own blocks.
        await store.put(`llama-3-8b/req-${i}/block-000`, prompt);
        await store.put(`llama-3-8b/req-${i}/block-001`, own[i]);
        if (progress) process.stderr.write(`\r  put ${2 * (i + 1)} / ${2 * args.blocks} blocks`);
      }
      const putMs = performance.now() - t0;
      if (progress) process.stderr.write('\n');
      await store.pin('llama-3-8b/req-0/block-000');
      const v1 = await store.put('llama-3-8b/req-0/block-001', crypto.randomBytes(blockBytes));
      await store.sync(v1.name);
      const t1 = performance.now();
      let readBytes = 0;
      for (let i = 0; i < args.blocks; i++) readBytes += (await store.get(`llama-3-8b/req-${i}/block-000`)).length;
      const getMs = performance.now() - t1;
      const versions = await store.versions('llama-3-8b/req-0/block-001');
      const old = await store.get('llama-3-8b/req-0/block-001', { version: 1 });
      await store.idle(); // let the flusher write everything back, so the disk tier shows it
      const stats = await store.stats();
      const summary = {
        dataDir,
        blocksPut: 2 * args.blocks + 1,
        blockBytes,
        putGBps: (2 * args.blocks * blockBytes) / (putMs / 1000) / 1e9,
        getGBps: readBytes / (getMs / 1000) / 1e9,
        versionsOfReq0Block1: versions.map((v) => ({ version: v.version, sha256: v.sha256.slice(0, 12), timeMs: v.timeMs })),
        version1Bytes: old.length,
        pinned: (await store.stat('llama-3-8b/req-0/block-000')).pinned,
        stats,
      };
      print(args, summary, () =>
        [
          `put ${summary.blocksPut} blocks of ${formatBytes(blockBytes)}: ${summary.putGBps.toFixed(2)} GB/s; read ${args.blocks} shared blocks: ${summary.getGBps.toFixed(2)} GB/s`,
          `versions of llama-3-8b/req-0/block-001: ${versions.map((v) => v.version).join(', ')} (version 1 still readable: ${formatBytes(old.length)})`,
          formatStats(stats),
        ].join('\n'),
      );
    }, {}, true);
  } finally {
    if (!args.keep) fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

interface MountArgs extends CommonArgs {
  mountpoint: string;
  background: boolean;
  logFile?: string;
  logLevel: string;
  quiet: boolean;
  pinQuota?: string;
  disk?: string;
  keepVersions?: number;
  metaGroupCommitMs?: number;
  kernelCache: boolean;
  pageCache: boolean;
  diskPageCache: boolean;
  debug: boolean;
  engine: string;
  passthrough: boolean;
  fuseUring: string;
  cluster?: string;
  node?: string;
  shared?: string;
  fabric?: string;
  fabricAddr?: string;
  dramWatermarks?: string;
  remotePromoteAfter?: number;
  verify: string;
  gpu?: string;
  gpuDevice?: number;
  metrics?: string;
}

/** Numeric mount options checked alike from the command line and from a config file. */
const KEEP_VERSIONS_RULE = { ok: (v: unknown) => Number.isInteger(v) && (v as number) >= 1, want: 'a whole number >= 1' };
const GROUP_COMMIT_RULE = {
  ok: (v: unknown) => Number.isInteger(v) && (v as number) >= 0 && (v as number) <= GROUP_COMMIT_MAX_MS,
  want: `a whole number of milliseconds from 0 to ${GROUP_COMMIT_MAX_MS}`,
};

/** Keys a `cascade mount --config FILE` may set: the mount flags, as spelled on the command line. */
const MOUNT_CONFIG_KEYS = [
  'data', 'dram', 'dram-watermarks', 'disk', 'pin-quota', 'keep-versions', 'meta-group-commit-ms', 'kernel-cache', 'page-cache', 'disk-page-cache', 'engine', 'cluster', 'node', 'shared', 'fabric', 'fabric-addr', 'remote-promote-after',
  'verify', 'gpu', 'gpu-device', 'metrics', 'passthrough', 'fuse-uring', 'debug', 'log-level', 'log-file', 'quiet',
] as const;

/**
 * Reads a mount config file for yargs (which lets command-line flags win over it). Accepts the flag
 * spellings and their camelCase forms; anything else is an error rather than silently ignored.
 */
export function loadMountConfig(file: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new CascadeError('EINVAL', `config file ${file}: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new CascadeError('EINVAL', `config file ${file}: expected a JSON object like {"data": "/scratch/cascade", "dram": "8G"}`);
  }
  const out: Record<string, unknown> = {};
  for (const [rawKey, value] of Object.entries(parsed)) {
    const key = rawKey.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
    if (!(MOUNT_CONFIG_KEYS as readonly string[]).includes(key)) {
      throw new CascadeError('EINVAL', `config file ${file}: unknown key "${rawKey}" (known: ${MOUNT_CONFIG_KEYS.join(', ')})`);
    }
    const bad = (want: string) => new CascadeError('EINVAL', `config file ${file}: "${rawKey}" must be ${want}, not ${JSON.stringify(value)}`);
    if ((key === 'data' || key === 'shared') && typeof value !== 'string') throw bad('a directory path');
    if ((key === 'cluster' || key === 'node' || key === 'fabric' || key === 'fabric-addr' || key === 'dram-watermarks' || key === 'metrics') && typeof value !== 'string') throw bad('a string');
    if (key === 'remote-promote-after' && !(Number.isInteger(value) && (value as number) >= 1)) throw bad('a whole number >= 1');
    if (key === 'gpu-device' && !(Number.isInteger(value) && (value as number) >= 0)) throw bad('a device number (0, 1, ...)');
    if ((key === 'dram' || key === 'disk' || key === 'pin-quota' || key === 'gpu') && typeof value !== 'string' && typeof value !== 'number') throw bad('a size such as "8G" or a byte count');
    if (key === 'keep-versions' && !KEEP_VERSIONS_RULE.ok(value)) throw bad(KEEP_VERSIONS_RULE.want);
    if (key === 'meta-group-commit-ms' && !GROUP_COMMIT_RULE.ok(value)) throw bad(GROUP_COMMIT_RULE.want);
    if ((key === 'kernel-cache' || key === 'page-cache' || key === 'disk-page-cache' || key === 'passthrough' || key === 'debug' || key === 'quiet') && typeof value !== 'boolean') throw bad('true or false');
    if (key === 'fuse-uring' && !(FUSE_URING_MODES as readonly unknown[]).includes(value)) throw bad(FUSE_URING_MODES.join(', '));
    if ((key === 'log-level' || key === 'log-file') && typeof value !== 'string') throw bad('a string');
    if (key === 'engine' && !(ENGINES as readonly unknown[]).includes(value)) throw bad(ENGINES.join(', '));
    if (key === 'verify' && !(VERIFY_MODES as readonly unknown[]).includes(value)) throw bad(VERIFY_MODES.join(', '));
    // A relative data directory means relative to the config file, not to wherever mount runs.
    const isDir = key === 'data' || key === 'shared' || key === 'log-file';
    const numeric = key === 'keep-versions' || key === 'meta-group-commit-ms' || key === 'remote-promote-after' || key === 'gpu-device';
    out[key] = isDir ? path.resolve(path.dirname(file), value as string) : typeof value === 'number' && !numeric ? String(value) : value;
  }
  return out;
}

/** yargs reports an error thrown by a config parser as a crash (a YError); the handler throws it instead. */
let mountConfigError: unknown;

function deferMountConfigErrors(file: string): Record<string, unknown> {
  try {
    return loadMountConfig(file);
  } catch (e) {
    mountConfigError = e;
    return {};
  }
}

/**
 * `--metrics`: "HOST:PORT", ":PORT" or "PORT" (host 127.0.0.1); EINVAL otherwise. Parsed here, not in
 * metrics.ts: loading prom-client costs every command ~70 ms.
 */
export function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:(\[[0-9a-fA-F:]+\]|[^:\s]*):)?(\d{1,5})$/.exec(text.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) throw new CascadeError('EINVAL', `--metrics takes HOST:PORT, :PORT or PORT (e.g. 127.0.0.1:9400), not ${JSON.stringify(text)}`);
  const host = m[1] ? m[1].replace(/^\[|\]$/g, '') : '127.0.0.1';
  return { host, port };
}

/** `--dram-watermarks LOW,HIGH` in percent of --dram, e.g. `5,10`; `0,0` turns eviction ahead of need off. */
export function parseWatermarks(text: string): { low: number; high: number } {
  const m = /^\s*(\d+(?:\.\d+)?)\s*,\s*(\d+(?:\.\d+)?)\s*$/.exec(text);
  const low = m ? Number(m[1]) : NaN;
  const high = m ? Number(m[2]) : NaN;
  if (!m || !(low <= high && high < 100)) {
    throw new CascadeError('EINVAL', `--dram-watermarks must be LOW,HIGH in percent of --dram with LOW <= HIGH < 100, e.g. 5,10; not ${JSON.stringify(text)}`);
  }
  return { low: low / 100, high: high / 100 };
}

async function mount(args: MountArgs): Promise<void> {
  if (mountConfigError !== undefined) throw mountConfigError;
  if (args.keepVersions !== undefined && !KEEP_VERSIONS_RULE.ok(args.keepVersions)) {
    throw new UsageError(`--keep-versions must be ${KEEP_VERSIONS_RULE.want}, not ${shown(args.keepVersions)}`);
  }
  if (args.metaGroupCommitMs !== undefined && !GROUP_COMMIT_RULE.ok(args.metaGroupCommitMs)) {
    throw new UsageError(`--meta-group-commit-ms must be ${GROUP_COMMIT_RULE.want}, not ${shown(args.metaGroupCommitMs)}`);
  }
  if (!(ENGINES as readonly string[]).includes(args.engine)) {
    throw new CascadeError('EINVAL', `--engine must be one of ${ENGINES.join(', ')}, not ${JSON.stringify(args.engine)}`);
  }
  if ((args.node ?? args.shared ?? args.fabric ?? args.fabricAddr ?? args.remotePromoteAfter) !== undefined && args.cluster === undefined) {
    throw new CascadeError('EINVAL', '--node, --shared, --fabric, --fabric-addr and --remote-promote-after belong to a cluster: give --cluster redis://HOST:PORT too');
  }
  if (args.remotePromoteAfter !== undefined && !(Number.isInteger(args.remotePromoteAfter) && args.remotePromoteAfter >= 1 && args.remotePromoteAfter <= 1_000_000)) {
    throw new UsageError(`--remote-promote-after must be a whole number in 1..1000000, not ${shown(args.remotePromoteAfter)}`);
  }
  if (args.fabric !== undefined && !/^[A-Za-z0-9_;.-]{1,64}$/.test(args.fabric)) {
    throw new CascadeError('EINVAL', `--fabric must be "off" or a libfabric provider such as "tcp;ofi_rxm", "cxi", "verbs;ofi_rxm", not ${JSON.stringify(args.fabric)}`);
  }
  if (args.cluster !== undefined && args.shared === undefined) {
    throw new CascadeError('EINVAL', '--cluster needs --shared DIR: the directory every node reads (Lustre on a cluster)');
  }
  const cluster =
    args.cluster === undefined
      ? undefined
      : {
          url: args.cluster,
          node: args.node ?? defaultNodeName(),
          sharedDir: path.resolve(args.shared!),
          remote:
            args.fabric === 'off'
              ? (false as const)
              : { provider: args.fabric, address: args.fabricAddr, promoteAfterReads: args.remotePromoteAfter },
        };
  const options = {
    mountpoint: args.mountpoint,
    dataDir: path.resolve(args.data ?? defaultDataDir()),
    dramBytes: args.dram === undefined ? defaultDramBytes() : sizeArg(args.dram, 'dram'),
    pinQuotaBytes: args.pinQuota === undefined ? undefined : sizeArg(args.pinQuota, 'pin-quota'),
    dramWatermarks: args.dramWatermarks === undefined ? undefined : usageArg(() => parseWatermarks(args.dramWatermarks!)),
    diskBytes: args.disk === undefined ? undefined : sizeArg(args.disk, 'disk'),
    gpu: args.gpu === undefined ? undefined : { capacityBytes: sizeArg(args.gpu, 'gpu'), device: args.gpuDevice ?? 0 },
    metrics: args.metrics === undefined ? undefined : usageArg(() => parseListen(args.metrics!)),
    keepVersions: args.keepVersions,
    metaGroupCommitMs: args.metaGroupCommitMs,
    kernelCache: args.kernelCache,
    pageCache: args.pageCache,
    diskPageCache: args.diskPageCache,
    debug: args.debug,
    engine: args.engine as EngineChoice,
    passthrough: args.passthrough,
    fuseUring: args.fuseUring as FuseUringMode,
    verify: args.verify as VerifyMode,
    cluster,
  };
  const level = args.quiet ? 'warn' : args.logLevel;
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')}, not ${JSON.stringify(level)}`);
  // Every argument is checked by now: a mistake fails here, not in the background daemon's log.
  if (args.background) return mountInBackground(args);
  const daemonLog = createDaemonLog(level as LogLevel, args.logFile);
  try {
    // Loaded here, not at the top: only mount/unmount need fuse-native (and the system libfuse).
    const { runMount } = await import('./daemon/main');
    await runMount({ ...options, log: daemonLog.log });
  } finally {
    daemonLog.close();
  }
}

/** `cascade fsck`: check (and with --repair fix) a data directory; exit codes in FSCK_EXIT. */
async function fsckCommand(a: { data?: string; repair: boolean; json: boolean }): Promise<void> {
  const { fsck, FSCK_EXIT } = await import('../store/fsck');
  const dataDir = path.resolve(a.data ?? defaultDataDir());
  const tty = process.stderr.isTTY && !a.json;
  const bar = tty
    ? new SingleBar({ stream: process.stderr, format: 'fsck {phase} [{bar}] {percentage}% | {what}', barsize: 30, hideCursor: true, fps: 10 })
    : undefined;
  let phase = '';
  const report = await fsck({
    dataDir,
    repair: a.repair,
    onProgress: (p) => {
      if (p.phase !== phase) {
        if (bar && phase !== '') bar.stop();
        phase = p.phase;
        if (bar) bar.start(Math.max(1, p.total), 0, { phase, what: '' });
        // Not a terminal: one line per phase, so a log shows where a long run is.
        else process.stderr.write(`cascade fsck: ${phase}${p.phase === 'segments' ? ` (${formatBytes(p.total)})` : ''}\n`);
      }
      bar?.update(Math.min(p.done, Math.max(1, p.total)), { phase, what: p.phase === 'segments' ? `${formatBytes(p.done)} of ${formatBytes(p.total)}` : `${p.done} of ${p.total}` });
    },
  }).finally(() => {
    if (phase !== '') bar?.stop();
  });
  print(a, report, () => {
    const s = report.segments;
    const m = report.metadata;
    const lines = [
      `cascade fsck ${report.dataDir}${report.repair ? ' --repair' : ''}`,
      `segments: ${s.files} file(s), ${formatBytes(s.bytes)}, ${s.records} intact record(s), ${s.damaged} damaged, ${s.unreferenced} unreferenced, ${s.dead} dead (checked in ${(s.durationMs / 1000).toFixed(2)} s, ${(s.bytes / Math.max(1e-3, s.durationMs / 1000) / 1e9).toFixed(2)} GB/s)`,
      `metadata: ${m.state}${m.state === 'ok' ? ` (${m.names} names, ${m.versions} versions, ${m.blocks} blocks, journal at ${m.journalSeq})` : `: ${m.problem}`}`,
      `snapshots: ${report.snapshots.length === 0 ? 'none' : report.snapshots.map((x) => `${path.basename(x.file)} ${x.problem ? `unusable (${x.problem})` : `at ${x.seq}`}`).join(', ')}`,
      `journal: ${report.journal.files} file(s), ${report.journal.entries} entries${report.journal.entries ? ` (${report.journal.firstSeq}..${report.journal.lastSeq})` : ''}`,
    ];
    for (const d of s.damagedList.slice(0, 10)) lines.push(`  damaged: ${d.segment}@${d.offsetBytes}: ${d.reason}${d.sha256 ? ` (block ${d.sha256})` : ''}`);
    for (const v of report.missing.list.slice(0, 10)) lines.push(`  missing content: ${v.name} version ${v.version} (${v.sha256})`);
    for (const r of report.refs.list.slice(0, 10)) lines.push(`  reference count: ${r.sha256} says ${r.refs ?? 'no row'}, ${r.counted} version(s) reference it`);
    const r = report.restore;
    if (r) {
      lines.push(`restored from ${r.from} (at ${r.snapshotSeq}), replayed ${r.replayed} journal entries to ${r.journalSeq}${r.chainComplete ? ' (complete: exact)' : ' (INCOMPLETE)'}`);
      for (const g of r.gaps.slice(0, 10)) lines.push(`  journal gap after ${g.afterSeq} (next ${g.nextSeq})`);
      for (const f of r.failed.slice(0, 10)) lines.push(`  entry ${f.seq} (${f.op}) did not apply: ${f.error}`);
      if (r.lostFound > 0) lines.push(`  ${r.lostFound} block(s) nothing referenced were adopted as lost+found/<sha256>`);
      lines.push(`  the damaged files were moved to ${r.movedAside}`);
    }
    const rep = report.repairs;
    if (report.repair && (rep.refsFixed || rep.forgottenBlocks)) lines.push(`repairs: ${rep.refsFixed} reference count(s) fixed, ${rep.droppedVersions} version(s) of ${rep.forgottenBlocks} lost block(s) dropped`);
    for (const n of report.notes) lines.push(`note: ${n}`);
    const verdict = {
      [FSCK_EXIT.clean]: 'clean',
      [FSCK_EXIT.problems]: `${report.problems.length} kind(s) of problem: ${report.problems.join('; ')}; run with --repair to fix`,
      [FSCK_EXIT.repaired]: `repaired: ${report.problems.join('; ')}`,
      [FSCK_EXIT.repairedWithLoss]: `repaired WITH LOSS: ${report.problems.join('; ')}`,
    }[report.exitCode];
    lines.push(`result: ${verdict} (${(report.durationMs / 1000).toFixed(2)} s; exit ${report.exitCode})`);
    return lines.join('\n');
  });
  commandExitCode = report.exitCode;
}

async function clusterStatus(args: { cluster: string; json: boolean }): Promise<void> {
  const { parseRedisUrl, RedisMeta } = await import('../store/meta/redis');
  const meta = await RedisMeta.connect(parseRedisUrl(args.cluster));
  try {
    const nodes = await meta.nodeStats();
    const totals = await meta.totals();
    print(args, { namespace: meta.namespace, totals, nodes }, () => {
      const lines = [`namespace ${meta.namespace}: ${totals.names} names, ${totals.blocks} blocks, ${formatBytes(totals.uniqueBytes)} stored (${formatBytes(totals.logicalBytes)} before dedup)`];
      if (nodes.length === 0) lines.push('no node has joined');
      for (const { node, live, stats } of nodes) {
        const f = stats as Partial<import('../store/store').NodeFigures> | undefined;
        const tier = (name: string) => f?.tiers?.find((t) => t.name === name);
        const dram = tier('dram');
        const disk = tier('disk');
        lines.push(
          `node ${node}: ${live ? 'live' : 'gone'}` +
            (f?.atMs
              ? ` (${f.host} pid ${f.pid}, ${((Date.now() - f.atMs) / 1000).toFixed(1)} s ago): DRAM ${formatBytes(dram?.usedBytes ?? 0)} of ${formatBytes(dram?.capacityBytes ?? 0)}, ` +
                `disk ${formatBytes(disk?.usedBytes ?? 0)} in ${disk?.blocks ?? 0} blocks; hits dram ${f.hits?.dram ?? 0}, remote ${f.hits?.remote ?? 0}, disk ${f.hits?.disk ?? 0}, shared ${f.hits?.shared ?? 0}; ` +
                `${f.sharedLoads ?? 0} blocks (${formatBytes(f.sharedLoadBytes ?? 0)}) loaded from the shared tier; ` +
                (f.remote
                  ? `remote DRAM (${f.remote.provider}): ${f.remote.loads} blocks (${formatBytes(f.remote.loadBytes)}) fetched, ${f.remote.fallbacks} fallbacks, ${f.remote.promotions} kept, ` +
                    `${f.remote.fabric.holdsGranted} served (${formatBytes(f.remote.fabric.servedBytes)}); `
                  : 'remote DRAM off; ') +
                `promotions ${f.promotions ?? 0}, dedup hits ${f.dedupHits ?? 0}`
              : ' (no figures)'),
        );
      }
      return lines.join('\n');
    });
  } finally {
    await meta.close();
  }
}

function packageVersion(): string {
  try {
    return (JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/** This host's short name, as a node name (letters, digits, _ . -). */
function defaultNodeName(): string {
  return os.hostname().split('.')[0].replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 64) || 'node';
}

/** How long `mount --background` waits for the mount to answer (a large arena takes a while to fill). */
const BACKGROUND_START_TIMEOUT_MS = 600_000;
/** How long `cascade mounts` and `cascade unmount` wait for a mount's stats.json (a hung daemon never answers). */
const STATS_READ_TIMEOUT_MS = 2_000;

/** The default log of a background mount: one file per mountpoint, in the temp directory. */
function backgroundLogFile(mnt: string): string {
  return path.join(os.tmpdir(), `cascade-mount${mnt.replace(/[^A-Za-z0-9_.-]/g, '_')}.log`);
}

/**
 * `mount --background`: the same command, without --background, in a new session with its output in a
 * log file; returns once the mount answers (exit 0), or with the daemon's reason when it could not
 * (exit 1). What a batch job wants: `srun --ntasks-per-node=1 cascade mount -d ...`, then the job.
 */
async function mountInBackground(args: MountArgs): Promise<void> {
  const { mountEntry, resolveMountpoint } = await import('./engine/mounts');
  const mnt = resolveMountpoint(args.mountpoint, false);
  const logFile = path.resolve(args.logFile ?? backgroundLogFile(mnt));
  // The same command in the foreground, writing to stderr, which is the log file.
  const argv: string[] = [];
  const given = process.argv.slice(2);
  for (let i = 0; i < given.length; i++) {
    const a = given[i];
    if (a === '-d' || a === '--background' || a === '--background=true' || a.startsWith('--log-file=')) continue;
    if (a === '--log-file') {
      i++;
      continue;
    }
    argv.push(a);
  }
  const out = fs.openSync(logFile, 'a', 0o600);
  const { spawn } = await import('node:child_process');
  const child = spawn(process.execPath, [...process.execArgv, __filename, ...argv], { detached: true, stdio: ['ignore', out, out] });
  fs.closeSync(out);
  const started = Date.now();
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  let code: number | null | undefined;
  void exited.then((c) => (code = c));
  const tail = () => {
    const text = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : '';
    return text.split('\n').slice(-12).join('\n').trim();
  };
  let said = 0;
  for (;;) {
    await new Promise((r) => setTimeout(r, 100));
    if (code !== undefined) throw new CascadeError('EIO', `the mount failed (daemon exited ${code}); its log, ${logFile}:\n${tail()}`);
    // Up when the kernel lists the mount and it answers as this daemon (the log may be quieter than info).
    const target = resolveMountpoint(args.mountpoint);
    if (mountEntry(target) && ((await readMountStats(target))?.daemon as { pid?: number } | undefined)?.pid === child.pid) break;
    const waitedS = Math.floor((Date.now() - started) / 1000);
    if (waitedS >= 10 && waitedS >= said + 10) {
      said = waitedS;
      process.stderr.write(`cascade: still starting after ${waitedS} s (filling DRAM?); log: ${logFile}\n`);
    }
    if (Date.now() - started > BACKGROUND_START_TIMEOUT_MS) {
      throw new CascadeError('EIO', `the mount did not come up within ${BACKGROUND_START_TIMEOUT_MS / 1000} s (daemon pid ${child.pid} still running); its log, ${logFile}:\n${tail()}`);
    }
  }
  child.unref();
  process.stdout.write(`cascade: mounted ${resolveMountpoint(args.mountpoint)} in the background (daemon pid ${child.pid}, log ${logFile}); stop it with: cascade unmount ${args.mountpoint}\n`);
}

/** A mount's stats.json read by a child with a timeout (a read from a hung FUSE daemon blocks forever). */
async function readMountStats(mnt: string): Promise<Record<string, unknown> | undefined> {
  const { spawnSync } = await import('node:child_process');
  const r = spawnSync('cat', [path.join(mnt, '.cascade', 'stats.json')], { encoding: 'utf8', timeout: STATS_READ_TIMEOUT_MS, killSignal: 'SIGKILL' });
  if (r.status !== 0) return undefined;
  try {
    return JSON.parse(r.stdout) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** `cascade mounts`: the Cascade mounts of this host, their daemons and their DRAM. */
async function listMounts(args: { json: boolean }): Promise<void> {
  const { readMountTable } = await import('./engine/mounts');
  const rows: Array<{ mountpoint: string; answering: boolean; pid?: number; dataDir?: string; mountedAtMs?: number; engine?: string; dram?: { usedBytes: number; capacityBytes: number } }> = [];
  for (const e of readMountTable().filter((m) => m.fsType === 'fuse.cascade')) {
    const s = await readMountStats(e.target);
    const d = s?.daemon as { pid?: number; dataDir?: string; mountedAtMs?: number } | undefined;
    const dram = (s?.tiers as Array<{ name: string; usedBytes: number; capacityBytes: number }> | undefined)?.find((t) => t.name === 'dram');
    rows.push({
      mountpoint: e.target,
      answering: s !== undefined,
      pid: d?.pid,
      dataDir: d?.dataDir,
      mountedAtMs: d?.mountedAtMs,
      engine: (s?.engine as { name?: string } | undefined)?.name,
      dram: dram && { usedBytes: dram.usedBytes, capacityBytes: dram.capacityBytes },
    });
  }
  print(args, rows, () =>
    rows.length === 0
      ? 'no Cascade mounts on this host'
      : rows
          .map((r) =>
            r.answering
              ? `${r.mountpoint}: daemon pid ${r.pid ?? '?'}, engine ${r.engine ?? '?'}, data ${r.dataDir ?? '?'}, since ${r.mountedAtMs ? new Date(r.mountedAtMs).toISOString() : '?'}` +
                (r.dram ? `, DRAM ${formatBytes(r.dram.usedBytes)} of ${formatBytes(r.dram.capacityBytes)}` : '')
              : `${r.mountpoint}: NOT ANSWERING (its daemon is gone or hung: cascade unmount ${r.mountpoint})`,
          )
          .join('\n'),
  );
}

async function unmount(mountpoint: string, wait = true): Promise<void> {
  const { fusermountUnmount, mountEntry, resolveMountpoint } = await import('./engine/mounts');
  // The parent-only form first: stat of the mountpoint itself would hang if its daemon hangs.
  let mnt = resolveMountpoint(mountpoint, false);
  let entry = mountEntry(mnt);
  if (!entry) {
    mnt = resolveMountpoint(mountpoint);
    entry = mountEntry(mnt);
  }
  if (!entry) throw new CascadeError('EINVAL', `${mnt} is not mounted`);
  if (entry.fsType !== 'fuse.cascade') throw new CascadeError('EINVAL', `${mnt} is a ${entry.fsType} mount, not a Cascade (FUSE) mount`);
  const pid = wait ? ((await readMountStats(mnt))?.daemon as { pid?: number } | undefined)?.pid : undefined;
  await fusermountUnmount(mnt);
  if (pid === undefined || !Number.isSafeInteger(pid)) {
    process.stderr.write(`cascade: unmounted ${mnt}; its daemon persists its data and exits\n`);
    return;
  }
  // The daemon persists what it holds, then exits: return once it has (what a job script needs).
  const started = Date.now();
  let said = false;
  while (fs.existsSync(`/proc/${pid}`)) {
    if (!said && Date.now() - started > 2_000) {
      said = true;
      process.stderr.write(`cascade: waiting for daemon pid ${pid} to persist its data...\n`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  process.stderr.write(`cascade: unmounted ${mnt}; its daemon (pid ${pid}) persisted its data and exited\n`);
}

// ---- commands on a mounted Cascade (mount/cli/mounted.ts) ----

/** --mount, for the commands that work on a mount; exclusive with --data, which means direct access. */
function formatTime(timeMs: number): string {
  return new Date(timeMs).toISOString();
}

function statInMount(a: DualArgs & { target: string; version?: number; at?: number }): void {
  if (a.version !== undefined || a.at !== undefined) {
    throw new UsageError('--version and --at apply with --data; in a mount, old versions are files: MOUNT/.cascade/versions/kv/<model>/<name>/<N> (see `cascade versions PATH`)');
  }
  const s = statPath(asMountFile(resolveTarget(a.target, a.mount)));
  print(a, s, () =>
    [`path     ${s.path}`, `name     ${s.name}`, `version  ${s.version}`, `sha256   ${s.sha256}`, `size     ${s.sizeBytes} (${formatBytes(s.sizeBytes)})`, `tier     ${s.tier}`, `pinned   ${s.pinned}`, `time     ${formatTime(s.timeMs)}`].join('\n'),
  );
}

function versionsInMount(a: DualArgs & { target: string }): void {
  const vs = listVersions(asMountFile(resolveTarget(a.target, a.mount)));
  print(a, vs, () =>
    ['VERSION\tTIME\tBYTES\tPATH', ...vs.map((v) => [v.version, formatTime(v.timeMs), v.sizeBytes, v.path, ...(v.current ? [`current sha256 ${v.sha256 ?? '?'}`] : [])].join('\t'))].join('\n'),
  );
}

function pinInMount(a: DualArgs & { targets: string[] }, pinned: boolean): void {
  // Resolve every argument first, so a typo fails the command before anything changed.
  const files = a.targets.map((t) => asMountFile(resolveTarget(t, a.mount)));
  for (const f of files) setPinned(f, pinned);
  // Quiet on success, as chmod is; --json says what changed, for scripts.
  if (a.json) print(a, files.map((f) => ({ path: f.path, pinned })), () => '');
}

function formatMountStats(mount: string, stats: MountStats): string {
  const d = stats.daemon;
  const e = stats.engine;
  const lines = [`mount ${mount}${d ? ` (daemon pid ${d.pid} on ${d.host}, data ${d.dataDir})` : ''}`, formatStats(stats)];
  if (e?.name) {
    const answered = [['lookups', e.servedLookups], ['getattrs', e.servedGetattrs], ['opens', e.servedOpens], ['reads', e.servedReads]].filter(([, n]) => typeof n === 'number');
    lines.push(`engine ${e.name}${answered.length ? `: answered in C++ without JS: ${answered.map(([k, n]) => `${k} ${n}`).join(', ')}` : ''}`);
  }
  if (stats.fs) lines.push(`open files ${stats.fs.openHandles}; being written ${stats.fs.stagingFiles} (${formatBytes(stats.fs.stagingBytes)})`);
  return lines.join('\n');
}

/** The mount a command about a whole mount means: the one holding PATH, else --mount, else the cwd's. */
function mountFor(a: { mount?: string; target?: string }): string {
  let mount: string | undefined;
  if (a.target !== undefined) mount = resolveTarget(a.target, a.mount).mount;
  else if (a.mount !== undefined) mount = mountRootAt(a.mount);
  else mount = findMountRoot(process.cwd());
  if (mount === undefined) throw notInMountError(`the current directory (${process.cwd()})`);
  return mount;
}

async function statsInMount(a: DualArgs & { target?: string }): Promise<void> {
  const root = mountFor(a);
  const stats = await readStats(root);
  print(a, { mount: root, ...stats }, () => formatMountStats(root, stats));
}

/** Pinned files a mount lists (fs/virtual.ts PINS_LISTED_MAX), and `pins --data`, which has them at hand. */
const PINS_MOUNT_LISTED_MAX = 65_536;
const PINS_DIRECT_LISTED_MAX = 1_000_000;

interface PinsOutput {
  mount?: string;
  dataDir?: string;
  pinned: { blocks: number; bytes: number; quotaBytes: number };
  files: Array<{ path?: string; name: string; sizeBytes: number; sha256: string }>;
  total: number;
  truncated: boolean;
}

function formatPins(p: PinsOutput): string {
  const q = p.pinned;
  const share = q.quotaBytes > 0 ? ` (${((100 * q.bytes) / q.quotaBytes).toFixed(1)}%)` : '';
  const lines = [`pinned: ${p.total} file(s), ${q.blocks} block(s), ${formatBytes(q.bytes)} of a ${formatBytes(q.quotaBytes)} quota${share}`];
  if (p.files.length > 0) lines.push(`${p.mount !== undefined ? 'PATH' : 'NAME'}\tBYTES\tSHA256`, ...p.files.map((f) => `${f.path ?? f.name}\t${f.sizeBytes}\t${f.sha256}`));
  if (p.truncated) lines.push(`... and ${p.total - p.files.length} more (the listing stops at ${p.files.length})`);
  return lines.join('\n');
}

async function pinsCommand(a: DualArgs & { target?: string }): Promise<void> {
  if (a.data === undefined) {
    const listing: PinsOutput = await listPins(mountFor(a));
    print(a, listing, () => formatPins(listing));
    return;
  }
  if (a.target !== undefined) throw new UsageError('pins --data DIR takes no PATH');
  await withStore(a, async (store) => {
    const { names, total } = await store.pinnedNames(PINS_DIRECT_LISTED_MAX);
    const { pinned } = await store.stats();
    const listing: PinsOutput = { dataDir: store.dataDir, pinned, files: names, total, truncated: total > names.length };
    print(a, listing, () => formatPins(listing));
  });
}

async function evictInMount(a: { mount?: string; json: boolean; targets: string[] }): Promise<void> {
  // Resolve every argument first, so a typo fails the command before anything changed.
  const files = a.targets.map((t) => asMountFile(resolveTarget(t, a.mount)));
  const out: Array<Partial<EvictResult> & { path: string; error?: { code: string; message: string } }> = [];
  for (const f of files) {
    try {
      out.push(await evictFile(f));
    } catch (e) {
      if (!isCascadeError(e)) throw e;
      // The other files are still evicted; the command exits 1 at the end.
      process.stderr.write(`cascade: ${e.message}\n`);
      out.push({ path: f.path, error: { code: e.code, message: e.message } });
      commandExitCode = 1;
    }
  }
  const done = out.filter((r) => r.error === undefined);
  if (a.json || done.length > 0) {
    print(a, out, () =>
      done.map((r) => (r.evicted ? `evicted ${r.path} (${r.tierBefore} -> ${r.tierAfter})` : `${r.path}: not in DRAM (${r.tierBefore}), nothing to drop`)).join('\n'),
    );
  }
}

/**
 * Limits of a `warmup --from` list: a path is at most PATH_MAX (4096 bytes), and a million paths is
 * far past any one job's KV set; the file is refused past 256 MiB before it is split.
 */
const PATH_LIST_MAX_PATHS = 1_000_000;
const PATH_LIST_LINE_MAX_BYTES = 4096;
const PATH_LIST_MAX_BYTES = 256 * MiB;
const PATH_LIST_READ_BYTES = 1 * MiB;

/** The paths a `--from` file (or '-', standard input) lists, one per line; blank lines skipped. */
export function readPathList(file: string): string[] {
  // yargs hands a lone '-' over as an empty string.
  const stdin = file === '-' || file === '';
  const shownName = stdin ? 'standard input' : file;
  const fd = stdin ? 0 : fs.openSync(file, 'r');
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for (;;) {
      const chunk = Buffer.allocUnsafe(PATH_LIST_READ_BYTES);
      const n = fs.readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      total += n;
      if (total > PATH_LIST_MAX_BYTES) throw new CascadeError('EINVAL', `--from ${shownName}: over ${formatBytes(PATH_LIST_MAX_BYTES)}; split the list`);
      chunks.push(chunk.subarray(0, n));
    }
  } finally {
    if (!stdin) fs.closeSync(fd);
  }
  const paths: string[] = [];
  const lines = Buffer.concat(chunks, total).toString('utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].endsWith('\r') ? lines[i].slice(0, -1) : lines[i];
    if (line.trim() === '') continue;
    if (Buffer.byteLength(line) > PATH_LIST_LINE_MAX_BYTES) throw new CascadeError('EINVAL', `--from ${shownName}: line ${i + 1} is over ${PATH_LIST_LINE_MAX_BYTES} bytes, longer than any path`);
    if (line.includes('\0')) throw new CascadeError('EINVAL', `--from ${shownName}: line ${i + 1} holds a NUL byte`);
    if (paths.length >= PATH_LIST_MAX_PATHS) throw new CascadeError('EINVAL', `--from ${shownName}: more than ${PATH_LIST_MAX_PATHS} paths; split the list`);
    paths.push(line);
  }
  return paths;
}

/** The one line warmup writes before it starts when it would load more than a mount's free DRAM. */
function shortfallWarning(s: DramShortfall): string {
  const free = `${formatBytes(s.freeBytes)} free of ${formatBytes(s.capacityBytes)}`;
  return s.loadBytes === undefined
    ? `cascade: warning: warmup reads ${formatBytes(s.totalBytes)}, more than the whole DRAM tier of ${s.mount} (${free}): other blocks will be evicted and not all of these will stay in DRAM; going on\n`
    : `cascade: warning: warmup loads ${formatBytes(s.loadBytes)} into DRAM, more than ${s.mount} has free (${free}): other blocks will be evicted to make room; going on\n`;
}

async function warmupInMount(a: { mount?: string; json: boolean; targets?: string[]; from?: string }): Promise<void> {
  // yargs gives [undefined] for an optional array positional without a default (which help would show as []).
  const given = (a.targets ?? []).filter((t): t is string => typeof t === 'string');
  if (given.length === 0 && a.from === undefined) throw new UsageError('warmup needs files or directories to load, or --from FILE');
  const args = [...given, ...(a.from !== undefined ? readPathList(a.from) : [])];
  const targets = args.map((t) => resolveTarget(t, a.mount));
  const files = collectFiles(targets);
  for (const s of await dramShortfalls(files)) process.stderr.write(shortfallWarning(s));
  // A bar only for a person watching: not into a pipe or a log, and never mixed with JSON.
  const bar = process.stderr.isTTY && !a.json ? new SingleBar({
    stream: process.stderr,
    format: 'warmup [{bar}] {percentage}% | {done} of {size} | {files}/{totalFiles} files | {rate}',
    barsize: 30,
    hideCursor: true,
    fps: 10,
  }) : undefined;
  const t0 = performance.now();
  let started = false;
  const payload = (p: WarmupProgress) => ({
    done: formatBytes(p.bytes),
    size: formatBytes(p.totalBytes),
    files: p.files,
    totalFiles: p.totalFiles,
    rate: `${(p.bytes / Math.max(1e-3, (performance.now() - t0) / 1000) / 1e9).toFixed(2)} GB/s`,
  });
  const onProgress = (p: WarmupProgress) => {
    if (!bar) return;
    // The bar counts bytes; a set of empty files still needs a total above 0.
    if (!started) bar.start(Math.max(1, p.totalBytes), 0, payload(p));
    started = true;
    bar.update(Math.min(p.bytes, Math.max(1, p.totalBytes)), payload(p));
  };
  const r = await warmupFiles(files, onProgress).finally(() => {
    if (started) bar?.stop();
  });
  print(a, r, () => {
    const others = Object.entries(r.tiers).filter(([t]) => t !== 'dram').map(([t, n]) => `${t} ${n}`);
    const lines = [
      `warmup: ${r.files} files, ${formatBytes(r.bytes)} read in ${r.readSeconds.toFixed(2)} s (${r.GBps.toFixed(2)} GB/s)`,
      `in dram: ${r.inDram} of ${r.files}${others.length ? ` (also: ${others.join(', ')}; DRAM full or blocks too large to promote? see \`cascade stats\`)` : ''}`,
    ];
    for (const p of r.notInDram.slice(0, 10)) lines.push(`  not in dram: ${p}`);
    if (r.files - r.inDram > 10) lines.push(`  ... and ${r.files - r.inDram - 10} more (--json lists up to ${r.notInDram.length})`);
    if (r.vanished > 0) lines.push(`${r.vanished} file(s) were deleted while warming up`);
    return lines.join('\n');
  });
  for (const e of r.errors) process.stderr.write(`cascade: ${e.path}: ${e.message}\n`);
  if (r.errors.length > 0) throw new CascadeError('EIO', `${r.errors.length} file(s) could not be read`);
}

/** Help text shared by the commands that have both modes. */
const MODES_EPILOG =
  'Two modes. On a mount (default): PATH is a file under MOUNT/kv/, found through /proc/self/mounts, or with --mount MNT a name under MNT/kv/; ' +
  'this talks to the running daemon through files and xattrs (needs getfattr/setfattr, Debian package "attr"). ' +
  'Direct (with --data DIR): NAME is a store name <model>/<path...> in that data directory, opened by this process; ' +
  'never point --data at a data directory that a running mount serves.';

export function buildCli(argv: string[]) {
  return yargs(argv)
    .scriptName('cascade')
    .usage('$0 <command> [options]\n\nCascade: a tiered, content-addressed KV-cache store (DRAM in shared memory, disk segments), mounted as a filesystem.')
    .epilog(
      'stat, versions, pin, unpin, pins and stats work on a mounted Cascade (PATH under MOUNT/kv/) or, with --data DIR, directly on a data directory (NAME <model>/<path...>); ' +
        'warmup and evict need a mount; put and get always use a data directory. `cascade <command> --help` for each. ' +
        'Exit codes: 0 ok, 1 a typed error (cascade: CODE: what), 2 bad usage, 70 an internal error; fsck has its own.',
    )
    .command(
      'mount <mountpoint>',
      'mount Cascade at <mountpoint> and serve it in the foreground until Ctrl-C, SIGTERM or `cascade unmount`',
      (y) =>
        y
          .positional('mountpoint', { type: 'string', demandOption: true, describe: 'an empty directory (created if missing; a stale mount there is cleared)' })
          .option('data', { type: 'string', describe: 'data directory: disk tier and metadata', defaultDescription: defaultDataDir() })
          .option('background', { alias: 'd', type: 'boolean', default: false, describe: 'run the daemon in the background: return once the mount answers (exit 0), or exit 1 with its reason' })
          .option('log-file', { type: 'string', describe: `append the daemon's log to this file instead of stderr (with --background, default ${path.join(os.tmpdir(), 'cascade-mount<mountpoint>.log')})` })
          .option('log-level', { type: 'string', choices: LOG_LEVELS, default: 'info', describe: 'error: failures only; warn: also what an operator should know (failed flushes, fallbacks); info: also the mount\'s life (mounted, stopping). Nothing per request at any level' })
          .option('quiet', { alias: 'q', type: 'boolean', default: false, describe: 'the same as --log-level warn' })
          .option('dram', { type: 'string', describe: 'DRAM tier size, e.g. 512M, 8G', defaultDescription: `${formatSizeArg(defaultDramBytes())} (a quarter of memory, at most 8 GiB)` })
          .option('disk', { type: 'string', describe: 'bound on the disk tier, e.g. 500G: past it writes fail with ENOSPC at close (default: the filesystem of --data)' })
          .option('pin-quota', { type: 'string', describe: 'sum of pinned (prefix) block sizes allowed, e.g. 2G', defaultDescription: 'half of --dram' })
          .option('keep-versions', { type: 'number', describe: 'versions kept per file name', defaultDescription: String(KEEP_VERSIONS_DEFAULT) })
          .option('meta-group-commit-ms', {
            type: 'number',
            describe: `closes within this many ms share one metadata commit (saves ~70 us a create); each is in the metadata journal before it returns, so a kill -9 of the daemon loses none of them (the next mount applies them again). 0: each close commits on its own`,
            default: GROUP_COMMIT_DELAY_MS,
          })
          .option('verify', {
            type: 'string',
            choices: VERIFY_MODES,
            default: 'crc32c',
            describe:
              'when a read of a block loading from disk, the shared tier or another node may return its bytes: crc32c, as each 256 KiB piece passes its CRC-32C (the whole SHA-256 is checked beside it and gates only what is kept); sha256, only once the whole block\'s SHA-256 matches',
          })
          .option('disk-page-cache', {
            type: 'boolean',
            default: process.env.CASCADE_DISK_PAGE_CACHE === '1',
            describe:
              'write the disk tier through the kernel page cache (default: O_DIRECT appends where the filesystem allows them, so a written block is neither copied into nor kept twice in memory; the DRAM tier is the cache; default on when CASCADE_DISK_PAGE_CACHE=1)',
          })
          .option('page-cache', { type: 'boolean', default: true, describe: 'native engine: read-only opens of blocks held in DRAM read through the kernel page cache (re-reads at memory speed), one content per file at a time, so a reader still never sees a rewrite it did not open; writers and everything else use direct I/O (--no-page-cache: direct I/O for every open)' })
          .option('kernel-cache', { type: 'boolean', default: false, describe: 'read through the kernel page cache and keep it across opens: much faster re-reads and shared mmap, but readers of a file being overwritten in place may see short or mixed content (default: direct I/O)' })
          .option('debug', { type: 'boolean', default: false, describe: 'trace every FUSE request on stderr (libfuse debug; fuse-native engine only)' })
          .option('engine', {
            type: 'string',
            choices: ENGINES,
            default: process.env.CASCADE_ENGINE ?? 'auto',
            describe:
              'native: Cascade speaks FUSE itself on /dev/fuse (requests up to 4 MiB as fs.fuse.max_pages_limit allows, worker threads, reads served from shared memory without JS; as root through mount(2), otherwise through fusermount); fuse-native: libfuse 2 through fuse-native (128 KiB requests, every request in JS); auto: native where it can run, else fuse-native, and says which (default: $CASCADE_ENGINE, else auto)',
          })
          .option('passthrough', {
            type: 'boolean',
            default: process.env.CASCADE_PASSTHROUGH === '1',
            describe:
              'native engine: FUSE passthrough for reads of committed files, which the kernel then serves from a shared-memory copy without the daemon (memory speed). While a file is open this way, opening it for writing fails with EBUSY: write a temporary file and rename it over (Linux 6.9+; default on when CASCADE_PASSTHROUGH=1)',
          })
          .option('fuse-uring', {
            type: 'string',
            choices: FUSE_URING_MODES,
            default: process.env.CASCADE_FUSE_URING ?? 'auto',
            describe:
              'native engine: take requests through FUSE over io_uring (one queue per CPU, each thread on its CPU) instead of read/write on /dev/fuse. auto: where the kernel offers it (Linux 6.14+ with the fuse module parameter enable_uring=Y); on: also set that parameter (as root: /sys/module/fuse/parameters/enable_uring), and say so when it still cannot be used; off: /dev/fuse only (default: $CASCADE_FUSE_URING, else auto)',
          })
          .option('cluster', {
            type: 'string',
            describe:
              'join a cluster: metadata in Redis at redis://HOST:PORT[/NAMESPACE] (several HOST:PORT, comma-separated, for a Redis Cluster); every node of one Cascade uses the same URL and --shared directory',
          })
          .option('node', { type: 'string', describe: 'this node\'s name in the cluster (default: the host name); one running daemon per name' })
          .option('shared', { type: 'string', describe: 'with --cluster: the shared tier, a directory every node reads (Lustre); this node appends to <shared>/nodes/<node>/' })
          .option('dram-watermarks', {
            type: 'string',
            describe:
              'LOW,HIGH in percent of --dram: when free DRAM falls below LOW, clean blocks are evicted in the background until HIGH is free, so writes into a full cache do not wait for evictions (0,0: off)',
            defaultDescription: '5,10',
          })
          .option('fabric', {
            type: 'string',
            describe:
              'with --cluster: the libfabric provider for the remote DRAM tier (reads of blocks other nodes hold in DRAM): "tcp;ofi_rxm" (Ethernet), "cxi" (Slingshot-11), "verbs;ofi_rxm" (InfiniBand), or "off" (default: $FI_PROVIDER, else tcp;ofi_rxm)',
          })
          .option('fabric-addr', { type: 'string', describe: 'with --cluster: the address this node\'s fabric endpoint binds, reachable by the other nodes (default: the provider\'s first interface)' })
          .option('remote-promote-after', { type: 'number', describe: 'with --cluster: remote reads of a block on this node before it keeps its own DRAM copy', defaultDescription: String(REMOTE_PROMOTE_AFTER_READS_DEFAULT) })
          .option('gpu', {
            type: 'string',
            describe:
              'GPU tier size, e.g. 16G: a pool of GPU memory for pinned prefix blocks and blocks read twice or more, readable through the mount and by same-node GPU processes (user.cascade.cuda_ipc). Needs a CUDA driver at run time; without one the mount runs without the tier and `cascade stats` says why (default: off)',
          })
          .option('gpu-device', { type: 'number', describe: 'with --gpu: the CUDA device number of the pool', defaultDescription: '0' })
          .option('metrics', {
            type: 'string',
            describe:
              'serve Prometheus metrics at http://HOST:PORT/metrics (HOST defaults to 127.0.0.1; port 0 picks a free one, logged): tiers, hits, evictions, promotions, dedup, pins, queues, FUSE request latency by opcode, errors by errno, process figures (default: off)',
          })
          .config('config', 'a JSON file of mount options with the flag names as keys (data, dram, dram-watermarks, pin-quota, keep-versions, meta-group-commit-ms, kernel-cache, page-cache, disk-page-cache, engine, cluster, node, shared, fabric, fabric-addr, remote-promote-after, gpu, gpu-device, metrics, passthrough, fuse-uring, debug, log-level, log-file, quiet); flags on the command line win', deferMountConfigErrors)
          .example('$0 mount /mnt/cascade --data $SCRATCH/cascade --dram 8G', 'serve /mnt/cascade; KV blocks go under /mnt/cascade/kv/<model>/')
          .example('$0 mount /mnt/cascade --config cascade.json --kernel-cache', 'options from a file, plus one flag')
          .example('$0 mount /mnt/cascade --engine fuse-native', 'serve through libfuse 2 (fuse-native) even where the native engine could run')
          .example('srun --ntasks-per-node=1 $0 mount /tmp/cascade --cluster redis://head:6379/job42 --shared $SCRATCH/cascade', 'one daemon per node of a Slurm job, one namespace'),
      (a) => mount(a as unknown as MountArgs),
    )
    .command(
      'unmount <mountpoint>',
      'unmount a Cascade mount (lazily: open files keep working until closed); returns once its daemon has persisted its data and exited',
      (y) =>
        y
          .positional('mountpoint', { type: 'string', demandOption: true })
          .option('wait', { type: 'boolean', default: true, describe: 'return once the daemon has persisted its data and exited (--no-wait: at once)' }),
      (a) => unmount(a.mountpoint, a.wait),
    )
    .command(
      'mounts',
      'list the Cascade mounts of this host: mountpoint, daemon pid, data directory, DRAM in use (and mounts whose daemon no longer answers)',
      (y) => jsonOption(y),
      (a) => listMounts(a),
    )
    .command(
      'demo',
      'run a short tour of the store on a temporary data directory and print what happened',
      (y) =>
        jsonOption(y)
          .option('blocks', { type: 'number', default: 64, describe: 'requests to simulate (2 blocks each)' })
          .option('block-size', { type: 'string', default: '2M', describe: 'KV block size' })
          .option('keep', { type: 'boolean', default: false, describe: 'use --data instead of a temporary directory and keep it' })
          .option('data', { type: 'string', describe: 'with --keep: the data directory to use and keep', defaultDescription: defaultDataDir() })
          .option('dram', { type: 'string', default: '512M', describe: 'DRAM tier size for the demo' }),
      (a) => demo(a as unknown as CommonArgs & { blocks: number; blockSize: string; keep: boolean }),
    )
    .command(
      'put <name> <file>',
      'store a file as a new version of <name> (<model>/<path...>) and make it durable',
      (y) =>
        jsonOption(directOptions(y))
          .positional('name', { type: 'string', demandOption: true })
          .positional('file', { type: 'string', demandOption: true, describe: "a file, or '-' for standard input" }),
      (a) =>
        withStore(a, async (store) => {
          // yargs hands a lone '-' over as an empty string.
          const data = a.file === '-' || a.file === '' ? fs.readFileSync(0) : fs.readFileSync(a.file);
          const v = await store.put(a.name, data);
          await store.sync(a.name);
          print(a, v, () => `${v.name} version ${v.version} sha256 ${v.sha256} ${formatBytes(v.sizeBytes)}`);
        }, {}, true),
    )
    .command(
      'get <name> [file]',
      'write a version of <name> to a file or standard output',
      (y) =>
        directOptions(y)
          .positional('name', { type: 'string', demandOption: true })
          .positional('file', { type: 'string', describe: 'output file', defaultDescription: 'standard output' })
          .option('version', { type: 'number', describe: 'version number' })
          .option('at', { type: 'number', describe: 'the version current at this time (unix ms)' }),
      (a) =>
        withStore(a, async (store) => {
          // A KV block is binary: not onto a terminal (as gzip refuses); `> file`, `| cmd` or FILE.
          if (!a.file && process.stdout.isTTY) throw new UsageError('refusing to write a binary block to a terminal: give FILE, or redirect standard output');
          const data = await store.get(a.name, selector(a));
          if (a.file) fs.writeFileSync(a.file, data);
          else await new Promise<void>((resolve, reject) => process.stdout.write(data, (e) => (e ? reject(e) : resolve())));
        }),
    )
    .command(
      'stat <target>',
      'version, sha256, size, tier and pinned of a file: a PATH in a mount, or a NAME with --data DIR',
      (y) =>
        jsonOption(dualOptions(y))
          .positional('target', { type: 'string', demandOption: true, describe: 'PATH of a file in a mount, or with --data a store name <model>/<path...>' })
          .option('version', { type: 'number', describe: 'with --data: this version number' })
          .option('at', { type: 'number', describe: 'with --data: the version current at this time (unix ms)' })
          .example('$0 stat /mnt/cascade/kv/llama/r0/b0.bin', 'a file in a mount')
          .example('$0 stat llama/r0/b0.bin --data $SCRATCH/cascade --version 1', 'a name in a data directory, no mount')
          .epilog(MODES_EPILOG),
      (a) =>
        a.data === undefined
          ? statInMount(a)
          : withStore(a, async (store) => {
              const s = await store.stat(a.target, selector(a));
              print(a, s, () =>
                [`name     ${s.name}`, `version  ${s.version}`, `sha256   ${s.sha256}`, `size     ${s.sizeBytes} (${formatBytes(s.sizeBytes)})`, `tier     ${s.tier}`, `pinned   ${s.pinned}`, `time     ${formatTime(s.timeMs)}`].join('\n'),
              );
            }),
    )
    .command(
      'versions <target>',
      'list the retained versions of a file: a PATH in a mount, or a NAME with --data DIR',
      (y) =>
        jsonOption(dualOptions(y))
          .positional('target', { type: 'string', demandOption: true, describe: 'PATH of a file in a mount, or with --data a store name' })
          .example('$0 versions /mnt/cascade/kv/llama/r0/b0.bin', 'version, commit time, size, where to read it (MOUNT/.cascade/versions/...)')
          .example('$0 versions llama/r0/b0.bin --data $SCRATCH/cascade', 'version, commit time, sha256, size')
          .epilog(MODES_EPILOG),
      (a) =>
        a.data === undefined
          ? versionsInMount(a)
          : withStore(a, async (store) => {
              const vs = await store.versions(a.target);
              print(a, vs, () => ['VERSION\tTIME\tSHA256\tBYTES', ...vs.map((v) => `${v.version}\t${formatTime(v.timeMs)}\t${v.sha256}\t${v.sizeBytes}`)].join('\n'));
            }),
    )
    .command(
      'pin <targets..>',
      'pin files in DRAM as prefix blocks (never evicted; bounded by the pin quota): PATHs in a mount, or NAMEs with --data DIR',
      (y) =>
        jsonOption(dualOptions(y))
          .positional('targets', { type: 'string', array: true, demandOption: true, default: undefined, describe: 'PATHs of files in a mount, or with --data store names' })
          .example('$0 pin /mnt/cascade/kv/llama/sys/*.bin', 'sets user.cascade.pinned=1 on each')
          .epilog(MODES_EPILOG),
      (a) =>
        a.data === undefined
          ? pinInMount(a as DualArgs & { targets: string[] }, true)
          : withStore(a, async (store) => {
              for (const n of a.targets as string[]) await store.pin(n);
              if (a.json) print(a, (a.targets as string[]).map((name) => ({ name, pinned: true })), () => '');
            }),
    )
    .command(
      'unpin <targets..>',
      'unpin files so their content may be evicted again: PATHs in a mount, or NAMEs with --data DIR',
      (y) =>
        jsonOption(dualOptions(y))
          .positional('targets', { type: 'string', array: true, demandOption: true, default: undefined, describe: 'PATHs of files in a mount, or with --data store names' })
          .epilog(MODES_EPILOG),
      (a) =>
        a.data === undefined
          ? pinInMount(a as DualArgs & { targets: string[] }, false)
          : withStore(a, async (store) => {
              for (const n of a.targets as string[]) await store.unpin(n);
              if (a.json) print(a, (a.targets as string[]).map((name) => ({ name, pinned: false })), () => '');
            }),
    )
    .command(
      'stats [target]',
      'tier occupancy, hits, dedup savings: of the mount holding PATH (default: the current directory, or --mount MNT), or of --data DIR',
      (y) =>
        jsonOption(dualOptions(y))
          .positional('target', { type: 'string', describe: 'any path in a mount', defaultDescription: 'the current directory' })
          .example('$0 stats --mount /mnt/cascade --json', 'MOUNT/.cascade/stats.json, parsed')
          .example('$0 stats --data $SCRATCH/cascade', 'a data directory, no mount')
          .epilog(MODES_EPILOG),
      (a) => {
        if (a.data === undefined) return statsInMount(a);
        if (a.target !== undefined) throw new UsageError('stats --data DIR takes no PATH');
        return withStore(a, async (store) => {
          const stats = await store.stats();
          print(a, stats, () => formatStats(stats));
        });
      },
    )
    .command(
      'fsck',
      'check a data directory (every segment record against its SHA-256, the metadata against the segments) and with --repair restore a missing or corrupt metadata database from its snapshots, journal and segments',
      (y) =>
        jsonOption(y)
          .option('data', { type: 'string', describe: 'the data directory to check (no daemon or command may hold it)', defaultDescription: defaultDataDir() })
          .option('repair', { type: 'boolean', default: false, describe: 'fix what was found: rebuild the metadata from the newest good snapshot and the journal, fix reference counts, drop versions whose content is lost (damaged files are moved aside, never deleted)' })
          .example('$0 fsck --data $SCRATCH/cascade', 'report only; exit 0 when clean, 3 when problems were found')
          .example('$0 fsck --repair --data $SCRATCH/cascade', 'after a mount refused with ECORRUPT')
          .epilog('Refuses (exit 1, EBUSY) while a daemon or command holds the data directory. Exit codes: 0 clean, 1 a typed error, 2 bad usage, 3 problems found (nothing changed), 4 repaired (everything referenced is reachable), 5 repaired with loss (listed). A progress bar goes to stderr on a terminal.'),
      (a) => fsckCommand(a as unknown as { data?: string; repair: boolean; json: boolean }),
    )
    .command(
      'cluster status',
      'the nodes of a cluster: alive or not, their tiers, hits (DRAM, own disk, shared tier from other nodes), promotions and dedup',
      (y) =>
        jsonOption(y)
          .option('cluster', { type: 'string', demandOption: true, describe: 'redis://HOST:PORT[/NAMESPACE], as given to `cascade mount --cluster`' })
          .example('$0 cluster status --cluster redis://head:6379/job42', 'every node of job 42'),
      (a) => clusterStatus(a as unknown as { cluster: string; json: boolean }),
    )
    .command(
      'pins [target]',
      'list the pinned files (path, size, sha256) and how much of the pin quota they use: of the mount holding PATH (default: the current directory, or --mount MNT), or of --data DIR',
      (y) =>
        jsonOption(dualOptions(y))
          .positional('target', { type: 'string', describe: 'a mount, or any path in one', defaultDescription: 'the current directory' })
          .example('$0 pins /mnt/cascade', 'from MOUNT/.cascade/pins.json, which the daemon renders from its pins')
          .example('$0 pins --data $SCRATCH/cascade --json', 'a data directory, no mount')
          .epilog(
            'The quota counts distinct pinned blocks: files with the same content share one. ' +
              `A mount lists at most ${PINS_MOUNT_LISTED_MAX} files and --data at most ${PINS_DIRECT_LISTED_MAX}; past that the total is still counted. ` +
              'With --data DIR, that data directory is opened by this process: never point it at one that a running mount serves.',
          ),
      (a) => pinsCommand(a as DualArgs & { target?: string }),
    )
    .command(
      'evict <targets..>',
      "drop files' blocks from the DRAM of a running mount: they stay on disk, and the next read loads them again",
      (y) =>
        jsonOption(mountOption(y))
          .positional('targets', { type: 'string', array: true, demandOption: true, default: undefined, describe: 'PATHs of files under MOUNT/kv/ (with --mount, names under it)' })
          .example('$0 evict /mnt/cascade/kv/llama/r0/*.bin', 'sets user.cascade.evict=1 on each')
          .epilog(
            'Needs a running mount. Refused, with exit 1 once the other files are done: a pinned file (EPERM: unpin it first) and a file that a reader ' +
              'holds in DRAM (EBUSY: a file open on the native engine, or a same-node client, reads the DRAM copy itself). Content not yet on disk is written down first.',
          ),
      (a) => evictInMount(a as { mount?: string; json: boolean; targets: string[] }),
    )
    .command(
      'warmup [targets..]',
      'load files of a mount into its DRAM tier by reading them whole (directories recursively), then report how many are in DRAM',
      (y) =>
        jsonOption(mountOption(y))
          .positional('targets', { type: 'string', array: true, default: undefined, describe: 'files or directories under MOUNT/kv/ (the mount root means all of MOUNT/kv)' })
          .option('from', { type: 'string', describe: "a file that lists paths to load, one per line ('-': standard input); with or without TARGETS" })
          .example('$0 warmup /mnt/cascade/kv/llama-3-8b', 'before a job starts: its KV blocks come from DRAM, not disk')
          .example("find /mnt/cascade/kv/llama -name 'sys-*' | $0 warmup --from -", 'the files a list names')
          .epilog(
            'Needs a running mount: DRAM belongs to its daemon. Before it reads, one warning line goes to stderr when the files not yet in DRAM exceed ' +
              "the mount's free DRAM (it goes on: other blocks are evicted to make room). A progress bar goes to stderr when it is a terminal and --json is not given. " +
              `--from takes at most ${PATH_LIST_MAX_PATHS} paths of at most ${PATH_LIST_LINE_MAX_BYTES} bytes each (blank lines are skipped). Exit 1 if a file could not be read.`,
          ),
      (a) => warmupInMount(a as { mount?: string; json: boolean; targets?: string[]; from?: string }),
    )
    .version(false) // `--version N` selects a block version; the package version is not a CLI concern
    .demandCommand(1, 'name a command; see --help')
    .strict()
    .help()
    .alias('h', 'help')
    .fail((msg, err) => {
      if (err) throw err;
      process.stderr.write(`cascade: ${msg}\n\nRun 'cascade --help' for usage.\n`);
      process.exit(2);
    });
}

export async function main(argv: string[]): Promise<number> {
  // `--version` of a command selects a block version; alone it is the package's version.
  if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V')) {
    process.stdout.write(`cascade ${packageVersion()}\n`);
    return 0;
  }
  try {
    commandExitCode = 0;
    await buildCli(argv).parseAsync();
    return commandExitCode;
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`cascade: ${e.message}\n\nRun 'cascade --help' for usage.\n`);
      return 2;
    }
    // Typed errors are the user's to fix: say what and exit 1. Anything else is a bug: show the stack.
    if (isCascadeError(e)) {
      process.stderr.write(`cascade: ${e.message}\n`);
      return 1;
    }
    if (e instanceof Error && typeof (e as NodeJS.ErrnoException).syscall === 'string') {
      process.stderr.write(`cascade: ${e.message}\n`); // a file the user named: missing, unreadable, ...
      return 1;
    }
    process.stderr.write(`cascade: unexpected error: ${e instanceof Error ? e.stack : String(e)}\n`);
    return 70;
  }
}

if (require.main === module) {
  // exitCode, not exit(): exit() would cut off output still draining into a pipe.
  main(process.argv.slice(2)).then((code) => (process.exitCode = code));
}

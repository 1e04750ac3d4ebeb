// mount, unmount and mounts: starting a daemon (in the foreground or the background, from flags or a config file), stopping it, listing them.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Argv } from 'yargs';
import { KEEP_VERSIONS_DEFAULT } from '../../store/constants';
import { REMOTE_PROMOTE_AFTER_READS_DEFAULT } from '../../store/cluster/remote';
import { CascadeError } from '../../store/errors';
import { GROUP_COMMIT_DELAY_MS, GROUP_COMMIT_MAX_MS } from '../../store/meta/sqlite';
import { defaultDataDir, defaultDramBytes, ENGINES, FUSE_URING_MODES, VERIFY_MODES, type EngineChoice, type FuseUringMode, type VerifyMode } from '../daemon/defaults';
import { createDaemonLog, LOG_LEVELS, type LogLevel } from '../daemon/log';
import { formatBytes } from './size';
import { formatSizeArg, jsonOption, print, shown, sizeArg, usageArg, UsageError, type CommonArgs } from './common';

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
    const { runMount } = await import('../daemon/main');
    await runMount({ ...options, log: daemonLog.log });
  } finally {
    daemonLog.close();
  }
}

/** This host's short name, as a node name (letters, digits, _ . -). */
function defaultNodeName(): string {
  return os.hostname().split('.')[0].replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 64) || 'node';
}

/** The `cascade` command's entry (dist/mount/cli.js), which `mount --background` runs again in the foreground. */
const CLI_ENTRY = path.join(__dirname, '..', 'cli.js');

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
  const { mountEntry, resolveMountpoint } = await import('../engine/mounts');
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
  const child = spawn(process.execPath, [...process.execArgv, CLI_ENTRY, ...argv], { detached: true, stdio: ['ignore', out, out] });
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
  const { readMountTable } = await import('../engine/mounts');
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
  const { fusermountUnmount, mountEntry, resolveMountpoint } = await import('../engine/mounts');
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

export function mountCommand(y: Argv): Argv {
  return y.command(
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
          describe: `closes, renames and unlinks within this many ms share one metadata commit (saves ~70 us a create, ~100 us a rename); each is in the metadata journal before it returns, so a kill -9 of the daemon loses none of them (the next mount applies them again). 0: each commits on its own`,
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
        .config('config', `a JSON file of mount options with the flag names as keys (${MOUNT_CONFIG_KEYS.join(', ')}); flags on the command line win`, deferMountConfigErrors)
        .example('$0 mount /mnt/cascade --data $SCRATCH/cascade --dram 8G', 'serve /mnt/cascade; KV blocks go under /mnt/cascade/kv/<model>/')
        .example('$0 mount /mnt/cascade --config cascade.json --kernel-cache', 'options from a file, plus one flag')
        .example('$0 mount /mnt/cascade --engine fuse-native', 'serve through libfuse 2 (fuse-native) even where the native engine could run')
        .example('srun --ntasks-per-node=1 $0 mount /tmp/cascade --cluster redis://head:6379/job42 --shared $SCRATCH/cascade', 'one daemon per node of a Slurm job, one namespace'),
    (a) => mount(a as unknown as MountArgs),
  );
}

export function unmountCommand(y: Argv): Argv {
  return y.command(
    'unmount <mountpoint>',
    'unmount a Cascade mount (lazily: open files keep working until closed); returns once its daemon has persisted its data and exited',
    (y) =>
      y
        .positional('mountpoint', { type: 'string', demandOption: true })
        .option('wait', { type: 'boolean', default: true, describe: 'return once the daemon has persisted its data and exited (--no-wait: at once)' }),
    (a) => unmount(a.mountpoint, a.wait),
  );
}

export function mountsCommand(y: Argv): Argv {
  return y.command(
    'mounts',
    'list the Cascade mounts of this host: mountpoint, daemon pid, data directory, DRAM in use (and mounts whose daemon no longer answers)',
    (y) => jsonOption(y),
    (a) => listMounts(a),
  );
}

/**
 * What a results file records about the machine and the software under and beside the benchmark: CPU,
 * memory, kernel, huge pages, the disk, the versions of every peer and library, the git commit, the
 * load, and this machine's one-core SHA-256 rate (the limit of a hashed write).
 */
import { spawnSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MiB } from '../store/constants';
import { FUSE_URING_PARAM_PATH, MAX_PAGES_LIMIT_PATH, readKernelParam } from '../mount/engine/kernel-params';
import { cpuInfo, gitCommit, hostEnvironment, memoryEnvironment, mountOf, readText, type HostEnvironment, type MemoryEnvironment, type MountInfo } from './common';
import { BINDFS_OPTIONS } from './mounts';
import { pythonForH5py } from './systems';

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

/** One-core SHA-256 rate: 64 MiB hashed 4 times, the best pass. */
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

export interface Environment extends HostEnvironment, MemoryEnvironment {
  cpuShaNi: boolean;
  devShmMount: MountInfo | null;
  virtioBalloonFreePageReporting: boolean | null;
  damonSchemesOn: string[];
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
  fusePackage: string | null;
  fuseNative: string | null;
  vega: string | null;
  vegaLite: string | null;
  gitCommit: string | null;
  loadAverageAtStart: number[];
  /** fs.fuse.max_pages_limit (the largest FUSE request, in pages) and the fuse module's enable_uring, as the run found them. */
  fuseMaxPagesLimit: string | null;
  fuseEnableUring: string | null;
  /** SHA-256 on one core (OpenSSL through node:crypto), GB/s: the limit of a hashed write. */
  sha256OneCoreGBps: number;
}

export function environment(): Environment {
  const h5 = h5pyVersions();
  return {
    ...hostEnvironment(),
    cpuShaNi: cpuInfo().flags.includes('sha_ni'),
    ...memoryEnvironment(),
    devShmMount: fs.existsSync('/dev/shm') ? mountOf('/dev/shm') : null,
    virtioBalloonFreePageReporting: balloonFreePageReporting(),
    damonSchemesOn: damonSchemes(),
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
    fusePackage: dpkgVersion('fuse'),
    fuseNative: npmVersion('fuse-native'),
    vega: npmVersion('vega'),
    vegaLite: npmVersion('vega-lite'),
    gitCommit: gitCommit(),
    // Other work on this machine skews figures; the load average tells a reader whether there was any.
    loadAverageAtStart: os.loadavg(),
    fuseMaxPagesLimit: readKernelParam(MAX_PAGES_LIMIT_PATH) ?? null,
    fuseEnableUring: readKernelParam(FUSE_URING_PARAM_PATH) ?? null,
    sha256OneCoreGBps: sha256OneCoreGBps(),
  };
}

/** The embedded default configuration: what a bare `cascade` command uses. */
import * as os from 'node:os';
import * as path from 'node:path';
import { GiB } from '../../store/constants';

/**
 * $SCRATCH (the HPC convention for fast per-user storage) when set, else the home directory; one
 * directory per host, since $SCRATCH is the same path on every node of a job and a data directory
 * belongs to one process: `<base>/.cascade/<host>/data`.
 */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env, host = os.hostname()): string {
  const base = env.SCRATCH && env.SCRATCH.length > 0 ? env.SCRATCH : os.homedir();
  const name = host.split('.')[0].replace(/[^A-Za-z0-9_.-]/g, '_') || 'localhost';
  return path.join(base, '.cascade', name, 'data');
}

/** A quarter of physical memory, at most 8 GiB: room for KV blocks without starving the engine. */
export function defaultDramBytes(): number {
  return Math.min(8 * GiB, Math.floor(os.totalmem() / 4 / (64 * 1024)) * 64 * 1024);
}

/** Mount engines: `auto` picks `native` where it can run (root, the addon, /dev/fuse), else `fuse-native`. */
export const ENGINES = ['auto', 'native', 'fuse-native'] as const;
export type EngineChoice = (typeof ENGINES)[number];

/**
 * FUSE over io_uring on the native engine: `auto` uses it where the kernel offers it (the fuse module
 * parameter enable_uring=Y, Linux 6.14+), `on` also sets that parameter when run as root, `off` never.
 */
export const FUSE_URING_MODES = ['auto', 'on', 'off'] as const;
export type FuseUringMode = (typeof FUSE_URING_MODES)[number];

/** When a loading block's bytes may be read: as each piece passes its CRC-32C, or once its whole SHA-256 does. */
export const VERIFY_MODES = ['crc32c', 'sha256'] as const;
export type VerifyMode = (typeof VERIFY_MODES)[number];

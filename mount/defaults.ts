/** The embedded default configuration: what a bare `cascade` command uses. */
import * as os from 'node:os';
import * as path from 'node:path';
import { GiB } from '../store/constants';

/** $SCRATCH (the HPC convention for fast per-user storage) when set, else the home directory. */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.SCRATCH && env.SCRATCH.length > 0 ? env.SCRATCH : os.homedir();
  return path.join(base, '.cascade', 'data');
}

/** A quarter of physical memory, at most 8 GiB: room for KV blocks without starving the engine. */
export function defaultDramBytes(): number {
  return Math.min(8 * GiB, Math.floor(os.totalmem() / 4 / (64 * 1024)) * 64 * 1024);
}

/** Mount engines: `auto` picks `native` where it can run (root, the addon, /dev/fuse), else `fuse-native`. */
export const ENGINES = ['auto', 'native', 'fuse-native'] as const;
export type EngineChoice = (typeof ENGINES)[number];

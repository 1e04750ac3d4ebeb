// What every command group shares: argument types, usage errors, the option builders, opening a data directory, printing.
import * as fs from 'node:fs';
import type { Argv } from 'yargs';
import { MiB } from '../../store/constants';
import { CascadeError, isCascadeError } from '../../store/errors';
import { Store, type StoreConfig } from '../../store/store';
import { findMountRoot, mountRootAt, notInMountError, resolveTarget } from './mounted';
import { defaultDataDir } from '../daemon/defaults';
import { parseSize } from './size';

/** --data and --dram of the commands that open a data directory themselves. */
export interface DirectArgs {
  /** Undefined when not given: then stat, versions, pin, unpin, stats and pins work on a mount. */
  data?: string;
  /** Undefined when not given: DIRECT_DRAM_BYTES. */
  dram?: string;
}

export interface CommonArgs extends DirectArgs {
  json: boolean;
}

/** Arguments of the commands that work on a mount or, with --data, on a data directory. */
export interface DualArgs extends CommonArgs {
  mount?: string;
}

/** A mistake in how the command was called: exit 2, like the usage errors yargs itself finds. */
export class UsageError extends Error {}

/** A size flag's value (`--dram 8G`): a bad one is a usage error (exit 2) that names the flag. */
export function sizeArg(text: string, flag: string): number {
  try {
    return parseSize(text);
  } catch (e) {
    throw new UsageError(`--${flag}: ${(e as Error).message.replace(/^EINVAL: /, '')}`);
  }
}

/** A flag's value checked by `parse`: its EINVAL becomes a usage error (exit 2). */
export function usageArg<T>(parse: () => T): T {
  try {
    return parse();
  } catch (e) {
    if (isCascadeError(e, 'EINVAL')) throw new UsageError(e.message.replace(/^EINVAL: /, ''));
    throw e;
  }
}

/** How a number flag's value is shown in an error (yargs turns `abc` into NaN). */
export function shown(n: number): string {
  return Number.isNaN(n) ? 'something that is not a number' : String(n);
}

/** A command's own exit code when it is not 0 and not an error (fsck's codes); main() resets and returns it. */
export const commandExit = { code: 0 };

/*
 * Options are declared per command (each builder adds its own), so `cascade X --help` lists X's options
 * only, each with its real default: a global option would show up in every command's help, where most
 * commands ignore it.
 */

/** --json, for the commands that print something a script may parse. */
export function jsonOption<T>(y: Argv<T>) {
  return y.option('json', { type: 'boolean', default: false, describe: 'print machine-readable JSON' });
}

const DIRECT_DRAM_DESCRIBE = 'DRAM tier size of the data directory opened here, e.g. 512M (filled on demand: the command starts in well under a second)';

/** --data and --dram of put and get, which always open a data directory. */
export function directOptions<T>(y: Argv<T>) {
  return y
    .option('data', { type: 'string', describe: 'the data directory (disk tier and metadata) to open', defaultDescription: defaultDataDir() })
    .option('dram', { type: 'string', describe: DIRECT_DRAM_DESCRIBE, defaultDescription: formatSizeArg(DIRECT_DRAM_BYTES) });
}

/** --mount, for the commands that work on a mount. */
export function mountOption<T>(y: Argv<T>) {
  return y.option('mount', { type: 'string', describe: 'the mount to use: arguments that are not absolute paths are names under MOUNT/kv/' });
}

/** --mount, --data and --dram of the commands that work on a mount or, with --data, on a data directory. */
export function dualOptions<T>(y: Argv<T>) {
  return (
    mountOption(y)
      // No yargs default: whether --data was given picks the mode.
      .option('data', { type: 'string', describe: 'work on this data directory directly, without a mount (arguments are store names <model>/<path...>)' })
      .option('dram', { type: 'string', describe: `with --data: ${DIRECT_DRAM_DESCRIBE}`, defaultDescription: formatSizeArg(DIRECT_DRAM_BYTES) })
      .conflicts('mount', 'data')
      .implies('dram', 'data')
  );
}

export function formatSizeArg(bytes: number): string {
  return `${Math.floor(bytes / MiB)}M`;
}

/**
 * DRAM of a command that opens a data directory directly (put, get, stat, ...): small and not
 * pre-faulted, with pinned blocks left on disk, so the command starts at once with a small footprint
 * (a mount sizes its DRAM for serving; these run one operation and exit).
 */
export const DIRECT_DRAM_BYTES = 256 * MiB;

/**
 * Open the data directory for one command. Only `put` (and the demo) may create one: a read of a
 * directory that is not there says so, rather than leave an empty store behind.
 */
export async function withStore<R>(args: DirectArgs, fn: (store: Store) => Promise<R>, extra: Partial<StoreConfig> = {}, create = false): Promise<R> {
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

export function print(args: { json: boolean }, value: unknown, text: () => string): void {
  process.stdout.write(args.json ? JSON.stringify(value, null, 2) + '\n' : text() + '\n');
}

export function formatTime(timeMs: number): string {
  return new Date(timeMs).toISOString();
}

/** The mount a command about a whole mount means: the one holding PATH, else --mount, else the cwd's. */
export function mountFor(a: { mount?: string; target?: string }): string {
  let mount: string | undefined;
  if (a.target !== undefined) mount = resolveTarget(a.target, a.mount).mount;
  else if (a.mount !== undefined) mount = mountRootAt(a.mount);
  else mount = findMountRoot(process.cwd());
  if (mount === undefined) throw notInMountError(`the current directory (${process.cwd()})`);
  return mount;
}

/** Help text shared by the commands that have both modes. */
export const MODES_EPILOG =
  'Two modes. On a mount (default): PATH is a file under MOUNT/kv/, found through /proc/self/mounts, or with --mount MNT a name under MNT/kv/; ' +
  'this talks to the running daemon through files and xattrs (needs getfattr/setfattr, Debian package "attr"). ' +
  'Direct (with --data DIR): NAME is a store name <model>/<path...> in that data directory, opened by this process; ' +
  'never point --data at a data directory that a running mount serves.';

#!/usr/bin/env node
/**
 * The `cascade` command: `mount` and `unmount` for the FUSE filesystem; stat, versions, pin, unpin,
 * stats and warmup on a mounted Cascade (through files and xattrs only: mount/cli/mounted.ts); direct access
 * to a data directory with --data (put, get, stat, versions, pin, unpin, stats); and `demo`, the main
 * job of the quick start. This file is the entry: the command list, exit codes and --version; each
 * group of commands lives in mount/cli/.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import yargs, { type Argv } from 'yargs';
import { isCascadeError } from '../store/errors';
import { commandExit, UsageError } from './cli/common';
import { demoCommand } from './cli/demo';
import { fsckCommand } from './cli/fsck';
import { mountCommand, mountsCommand, unmountCommand } from './cli/lifecycle';
import { getCommand, putCommand, statCommand, versionsCommand } from './cli/names';
import { pinCommand, pinsCommand, unpinCommand } from './cli/pins';
import { clusterStatusCommand, statsCommand } from './cli/stats';
import { evictCommand, warmupCommand } from './cli/warmup';

export { loadMountConfig, parseListen, parseWatermarks } from './cli/lifecycle';
export { readPathList } from './cli/warmup';

/** Every command, in the order `cascade --help` lists them. */
const COMMANDS: Array<(y: Argv) => Argv> = [
  mountCommand,
  unmountCommand,
  mountsCommand,
  demoCommand,
  putCommand,
  getCommand,
  statCommand,
  versionsCommand,
  pinCommand,
  unpinCommand,
  statsCommand,
  fsckCommand,
  clusterStatusCommand,
  pinsCommand,
  evictCommand,
  warmupCommand,
];

export function buildCli(argv: string[]) {
  const cli = yargs(argv)
    .scriptName('cascade')
    .usage('$0 <command> [options]\n\nCascade: a tiered, content-addressed KV-cache store (DRAM in shared memory, disk segments), mounted as a filesystem.')
    .epilog(
      'stat, versions, pin, unpin, pins and stats work on a mounted Cascade (PATH under MOUNT/kv/) or, with --data DIR, directly on a data directory (NAME <model>/<path...>); ' +
        'warmup and evict need a mount; put and get always use a data directory. `cascade <command> --help` for each. ' +
        'Exit codes: 0 ok, 1 a typed error (cascade: CODE: what), 2 bad usage, 70 an internal error; fsck has its own.',
    );
  return COMMANDS.reduce((y, add) => add(y), cli)
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
    commandExit.code = 0;
    await buildCli(argv).parseAsync();
    return commandExit.code;
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

function packageVersion(): string {
  try {
    return (JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

if (require.main === module) {
  // exitCode, not exit(): exit() would cut off output still draining into a pipe.
  main(process.argv.slice(2)).then((code) => (process.exitCode = code));
}

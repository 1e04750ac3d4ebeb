// pin, unpin and pins: keeping prefix blocks in DRAM and listing what is pinned against the quota.
import type { Argv } from 'yargs';
import { asMountFile, listPins, resolveTarget, setPinned } from './mounted';
import { formatBytes } from './size';
import { dualOptions, jsonOption, mountFor, MODES_EPILOG, print, UsageError, withStore, type DualArgs } from './common';

function pinInMount(a: DualArgs & { targets: string[] }, pinned: boolean): void {
  // Resolve every argument first, so a typo fails the command before anything changed.
  const files = a.targets.map((t) => asMountFile(resolveTarget(t, a.mount)));
  for (const f of files) setPinned(f, pinned);
  // Quiet on success, as chmod is; --json says what changed, for scripts.
  if (a.json) print(a, files.map((f) => ({ path: f.path, pinned })), () => '');
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

async function runPins(a: DualArgs & { target?: string }): Promise<void> {
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


export function pinCommand(y: Argv): Argv {
  return y.command(
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
  );
}

export function unpinCommand(y: Argv): Argv {
  return y.command(
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
  );
}

export function pinsCommand(y: Argv): Argv {
  return y.command(
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
    (a) => runPins(a as DualArgs & { target?: string }),
  );
}

// put, get, stat and versions: one file's content and versions, by a PATH in a mount or a NAME in a data directory.
import * as fs from 'node:fs';
import type { Argv } from 'yargs';
import { asMountFile, listVersions, resolveTarget, statPath } from './mounted';
import { formatBytes } from './size';
import { directOptions, dualOptions, formatTime, jsonOption, MODES_EPILOG, print, UsageError, withStore, type DualArgs } from './common';

function selector(argv: { version?: number; at?: number }) {
  return { version: argv.version, atMs: argv.at };
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


export function putCommand(y: Argv): Argv {
  return y.command(
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
  );
}

export function getCommand(y: Argv): Argv {
  return y.command(
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
  );
}

export function statCommand(y: Argv): Argv {
  return y.command(
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
  );
}

export function versionsCommand(y: Argv): Argv {
  return y.command(
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
  );
}

// warmup and evict: loading a mount's files into its DRAM tier and dropping them from it.
import * as fs from 'node:fs';
import { SingleBar } from 'cli-progress';
import type { Argv } from 'yargs';
import { MiB } from '../../store/constants';
import { CascadeError, isCascadeError } from '../../store/errors';
import { asMountFile, collectFiles, dramShortfalls, evictFile, resolveTarget, warmupFiles, type DramShortfall, type EvictResult, type WarmupProgress } from './mounted';
import { formatBytes } from './size';
import { commandExit, jsonOption, mountOption, print, UsageError } from './common';

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
      commandExit.code = 1;
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


export function evictCommand(y: Argv): Argv {
  return y.command(
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
  );
}

export function warmupCommand(y: Argv): Argv {
  return y.command(
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
  );
}

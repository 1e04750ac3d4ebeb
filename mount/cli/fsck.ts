// fsck: checking a data directory and, with --repair, restoring its metadata; its exit codes and report.
import * as path from 'node:path';
import { SingleBar } from 'cli-progress';
import type { Argv } from 'yargs';
import { defaultDataDir } from '../daemon/defaults';
import { formatBytes } from './size';
import { commandExit, jsonOption, print } from './common';

/** `cascade fsck`: check (and with --repair fix) a data directory; exit codes in FSCK_EXIT. */
async function runFsck(a: { data?: string; repair: boolean; json: boolean }): Promise<void> {
  const { fsck, FSCK_EXIT } = await import('../../store/fsck');
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
  commandExit.code = report.exitCode;
}

export function fsckCommand(y: Argv): Argv {
  return y.command(
    'fsck',
    'check a data directory (every segment record against its SHA-256, the metadata against the segments) and with --repair restore a missing or corrupt metadata database from its snapshots, journal and segments',
    (y) =>
      jsonOption(y)
        .option('data', { type: 'string', describe: 'the data directory to check (no daemon or command may hold it)', defaultDescription: defaultDataDir() })
        .option('repair', { type: 'boolean', default: false, describe: 'fix what was found: rebuild the metadata from the newest good snapshot and the journal, fix reference counts, drop versions whose content is lost (damaged files are moved aside, never deleted)' })
        .example('$0 fsck --data $SCRATCH/cascade', 'report only; exit 0 when clean, 3 when problems were found')
        .example('$0 fsck --repair --data $SCRATCH/cascade', 'after a mount refused with ECORRUPT')
        .epilog('Refuses (exit 1, EBUSY) while a daemon or command holds the data directory. Exit codes: 0 clean, 1 a typed error, 2 bad usage, 3 problems found (nothing changed), 4 repaired (everything referenced is reachable), 5 repaired with loss (listed). A progress bar goes to stderr on a terminal.'),
    (a) => runFsck(a as unknown as { data?: string; repair: boolean; json: boolean }),
  );
}

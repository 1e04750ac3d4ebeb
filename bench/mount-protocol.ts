/**
 * What the mount benchmark driver (mount-bench.ts) and one trial process (mount-trial.ts) exchange: the
 * trial's arguments as one JSON argv string, its raw samples as one JSON line on stdout. The driver
 * computes every statistic in one place, as the store benchmark does (protocol.ts).
 */
import { isCount, isOneOf, isRateFigure, isRecord, parseChecks, type RateFigureSamples, type TrialResultOf } from './common';

export type { CheckValue } from './common';

export const MOUNT_TRIAL_KINDS = ['hot-read', 'blocks', 'cold-read', 'write', 'meta'] as const;
export type MountTrialKind = (typeof MOUNT_TRIAL_KINDS)[number];

/**
 * The systems under test. `cascade` mounts with direct_io (the default), `cascade-kc` with
 * `--kernel-cache`. `bindfs` is bindfs over a private tmpfs, `tmpfs` that tmpfs read directly. The cold
 * trials need a disk under the peers: `bindfs-disk` is bindfs over a directory on the disk, `disk` that
 * directory read directly.
 */
export const SYSTEMS = ['cascade', 'cascade-kc', 'bindfs', 'tmpfs', 'bindfs-disk', 'disk'] as const;
export type SystemName = (typeof SYSTEMS)[number];

export interface MountTrialArgs {
  kind: MountTrialKind;
  system: SystemName;
  /** File size of the trial's blocks; 0 for `meta` (small files). */
  blockBytes: number;
  warmups: number;
  runs: number;
  /**
   * Files in the working set: rotated over by hot-read, read per run by blocks, created for meta
   * (stat passes go over all of them, open+close over the first META_OPEN_FILES).
   */
  files: number;
  /** open+close iterations per run (meta only; 0 elsewhere). */
  iterations: number;
  /** A directory the driver created for this trial and removes after it (even if the trial crashes). */
  scratchDir: string;
}

/** Files open+close cycles over in the meta trial. */
export const META_OPEN_FILES = 100;
/** Bytes in each meta trial file (small: the trial measures metadata, not data). */
export const META_FILE_BYTES = 4096;

export type { FigureUnit } from './common';

/** One measured operation: every timed run, warm-ups excluded. */
export type MountFigureSamples = RateFigureSamples;

/** Checks include content verified, store hit counters, ... */
export interface MountTrialResult extends TrialResultOf<MountTrialKind, MountFigureSamples> {
  system: SystemName;
}

const isKind = isOneOf(MOUNT_TRIAL_KINDS);
const isSystem = isOneOf(SYSTEMS);

export function parseMountTrialArgs(text: string): MountTrialArgs {
  const v: unknown = JSON.parse(text);
  if (!isRecord(v)) throw new Error('trial args: expected a JSON object');
  const { kind, system, blockBytes, warmups, runs, files, iterations, scratchDir } = v;
  if (!isKind(kind)) throw new Error(`trial args: unknown kind ${String(kind)}`);
  if (!isSystem(system)) throw new Error(`trial args: unknown system ${String(system)}`);
  if (!isCount(blockBytes) || (kind !== 'meta' && blockBytes === 0)) throw new Error('trial args: blockBytes must be a positive integer');
  if (!isCount(warmups) || !isCount(runs) || runs === 0) throw new Error('trial args: warmups/runs must be counts, runs >= 1');
  if (!isCount(files) || files === 0 || !isCount(iterations)) throw new Error('trial args: files must be >= 1, iterations a count');
  if (typeof scratchDir !== 'string' || scratchDir.length === 0) throw new Error('trial args: scratchDir is required');
  return { kind, system, blockBytes, warmups, runs, files, iterations, scratchDir };
}

export function parseMountTrialResult(line: string): MountTrialResult {
  const v: unknown = JSON.parse(line);
  if (!isRecord(v)) throw new Error('trial result: expected a JSON object');
  const { kind, system, blockBytes, warmups, runs, figures, checks } = v;
  if (!isKind(kind) || !isSystem(system) || !isCount(blockBytes) || !isCount(warmups) || !isCount(runs)) {
    throw new Error('trial result: bad kind/system/blockBytes/warmups/runs');
  }
  if (!Array.isArray(figures) || !figures.every(isRateFigure)) throw new Error('trial result: bad figures');
  return { kind, system, blockBytes, warmups, runs, figures, checks: parseChecks(checks) };
}

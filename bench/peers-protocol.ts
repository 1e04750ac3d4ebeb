/**
 * What the side-by-side benchmark driver (peers-bench.ts) and one trial process (peers-trial.ts)
 * exchange: the trial's arguments as one JSON argv string, its raw samples as one JSON line on stdout.
 * The driver computes every statistic in one place, as the other benchmarks do.
 */
import { isCount, isOneOf, isRateFigure, isRecord, parseChecks, type RateFigureSamples, type TrialResultOf } from './common';

export type { CheckValue, FigureUnit } from './common';

export const WORKLOADS = ['hot-read', 'cold-read', 'write', 'dup-write', 'contention', 'capacity', 'meta', 'rename-race'] as const;
export type Workload = (typeof WORKLOADS)[number];

/**
 * Every system the benchmark knows. The list and each system's role, description and workloads are in
 * peers-systems.ts (`SYSTEMS`, one entry per system); a new system is a name here and an entry there.
 */
export const SYSTEM_NAMES = ['tmpfs', 'disk', 'bindfs', 'redis', 'h5py', 'cascade', 'cascade-passthrough', 'cascade-fuse-native', 'cascade-client'] as const;
export type SystemName = (typeof SYSTEM_NAMES)[number];

export interface PeerTrialArgs {
  workload: Workload;
  system: SystemName;
  /** Size of every block (file, value, dataset); 0 for meta (small files). */
  blockBytes: number;
  warmups: number;
  runs: number;
  /**
   * Blocks in the working set: rotated over by hot-read, the shared prefix of contention, written by
   * capacity, names of dup-write, files of meta.
   */
  blocks: number;
  /** contention, rename-race: concurrent readers; 1 elsewhere. */
  readers: number;
  /**
   * contention: passes over the prefix blocks per reader per run; meta: open+close per run;
   * rename-race: opens per run (all readers together); else 0.
   */
  iterations: number;
  /** capacity: the memory given to the system (Cascade --dram, Redis maxmemory); 0 elsewhere. */
  memoryBytes: number;
  /** A directory the driver created for this trial and removes after it (even if the trial crashes). */
  scratchDir: string;
}

/** Bytes of each meta block (small: the workload measures metadata, not data). */
export const META_FILE_BYTES = 4096;
/** Blocks open+close cycles over in the meta workload. */
export const META_OPEN_FILES = 100;

export type PeerFigureSamples = RateFigureSamples;

/** Checks include content verified, bytes stored, tiers, residency after drops, versions... */
export interface PeerTrialResult extends TrialResultOf<Workload, PeerFigureSamples> {
  system: SystemName;
}

const isWorkload = isOneOf(WORKLOADS);
const isSystem = isOneOf(SYSTEM_NAMES);

export function parsePeerTrialArgs(text: string): PeerTrialArgs {
  const v: unknown = JSON.parse(text);
  if (!isRecord(v)) throw new Error('trial args: expected a JSON object');
  const { workload, system, blockBytes, warmups, runs, blocks, readers, iterations, memoryBytes, scratchDir } = v;
  if (!isWorkload(workload)) throw new Error(`trial args: unknown workload ${String(workload)}`);
  if (!isSystem(system)) throw new Error(`trial args: unknown system ${String(system)}`);
  if (!isCount(blockBytes) || (workload !== 'meta' && blockBytes === 0)) throw new Error('trial args: blockBytes must be a positive integer');
  if (!isCount(warmups) || !isCount(runs) || runs === 0) throw new Error('trial args: warmups/runs must be counts, runs >= 1');
  if (!isCount(blocks) || blocks === 0 || !isCount(readers) || readers === 0) throw new Error('trial args: blocks and readers must be >= 1');
  if (!isCount(iterations) || !isCount(memoryBytes)) throw new Error('trial args: iterations and memoryBytes must be counts');
  if (typeof scratchDir !== 'string' || scratchDir.length === 0) throw new Error('trial args: scratchDir is required');
  return { workload, system, blockBytes, warmups, runs, blocks, readers, iterations, memoryBytes, scratchDir };
}

export function parsePeerTrialResult(line: string): PeerTrialResult {
  const v: unknown = JSON.parse(line);
  if (!isRecord(v)) throw new Error('trial result: expected a JSON object');
  const { kind, system, blockBytes, warmups, runs, figures, checks } = v;
  if (!isWorkload(kind) || !isSystem(system) || !isCount(blockBytes) || !isCount(warmups) || !isCount(runs)) {
    throw new Error('trial result: bad kind/system/blockBytes/warmups/runs');
  }
  if (!Array.isArray(figures) || !figures.every(isRateFigure)) throw new Error('trial result: bad figures');
  return { kind, system, blockBytes, warmups, runs, figures, checks: parseChecks(checks) };
}

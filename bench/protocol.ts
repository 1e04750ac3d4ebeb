/**
 * The one protocol between the runner (run.ts) and a trial process (trial.ts), for every suite: the
 * trial's arguments as one JSON argv string, its raw samples as one JSON line on stdout. Raw samples
 * travel, not summaries, so the runner computes every statistic in one place (report.ts).
 */
import { isCount, isOneOf, isRateFigure, isRecord, parseChecks, type CheckValue, type RateFigureSamples } from './common';

export type { CheckValue, FigureUnit } from './common';

/** Every suite, with its workloads and systems (the trial table, trials.ts, lists which run together). */
export const SUITES = {
  /** The Store in-process, against memcpy and one-core SHA-256 measured in the same run. */
  store: {
    workloads: ['memcpy', 'sha256', 'put', 'get-hot', 'get-cold', 'promote'],
    systems: ['reference', 'store'],
  },
  /** Cascade's mount (direct_io and --kernel-cache) against bindfs and the raw tmpfs / disk under it. */
  mount: {
    workloads: ['hot-read', 'blocks', 'cold-read', 'write', 'meta'],
    systems: ['tmpfs', 'disk', 'bindfs', 'bindfs-disk', 'cascade', 'cascade-kc'],
  },
  /** The side-by-side benchmark: Cascade's engines and client next to real peers (`npm run bench`). */
  peers: {
    workloads: ['hot-read', 'cold-read', 'write', 'dup-write', 'contention', 'capacity', 'meta', 'rename-race', 'per-file'],
    systems: ['tmpfs', 'disk', 'bindfs', 'redis', 'h5py', 'cascade', 'cascade-uring', 'cascade-passthrough', 'cascade-fuse-native', 'cascade-client'],
  },
  /** The native addon on and off (CASCADE_NATIVE=0) through a real mount, the client, hashing. */
  native: {
    workloads: ['fuse-read', 'client-read', 'hash', 'write-1g'],
    systems: ['addon', 'ts'],
  },
  /** File creates with DRAM empty and full (a cache in production is always full), with tmpfs and bindfs. */
  'full-cache': {
    workloads: ['create'],
    systems: ['tmpfs', 'bindfs', 'cascade'],
  },
  /**
   * Four cluster daemons and a single-node mount beside them: reads against the transport's limits
   * and the single node, vLLM's file-tier pattern on both, global dedup, scaling.
   */
  cluster: {
    workloads: ['read', 'vllm', 'dedup', 'scaling'],
    systems: ['cascade'],
  },
} as const;

export type Suite = keyof typeof SUITES;
export const SUITE_NAMES = Object.keys(SUITES) as Suite[];
export type WorkloadOf<S extends Suite> = (typeof SUITES)[S]['workloads'][number];
export type SystemOf<S extends Suite> = (typeof SUITES)[S]['systems'][number];

/** What one trial is given. Fields a workload does not use are 0 (documented per field). */
export interface TrialArgsOf<S extends Suite> {
  suite: S;
  workload: WorkloadOf<S>;
  system: SystemOf<S>;
  /** Size of every block (file, value, dataset); 0 for small-file metadata workloads. */
  blockBytes: number;
  warmups: number;
  runs: number;
  /**
   * Blocks in the working set: rotated over by hot reads, read per run by `blocks`, the prefix of
   * contention, written by capacity, names of dup-write, files of meta and of full-cache.
   */
  blocks: number;
  /** Concurrent readers (contention, rename-race); 1 elsewhere. */
  readers: number;
  /** Passes per reader (contention), open+close per run (meta), opens per run (rename-race); else 0. */
  iterations: number;
  /** Memory given to the system (capacity: --dram / maxmemory; full-cache: --dram); 0 elsewhere. */
  memoryBytes: number;
  /** meta (peers) only: new files created in one directory, then listed, in one extra run; absent = none. */
  createFiles?: number;
  /** Store suite only: the DRAM tier's huge-page setting; absent = the store's default. */
  dramHugePages?: boolean;
  /** A directory the runner made for this trial and removes after it (even if the trial crashes). */
  scratchDir: string;
}

export type TrialArgs = { [S in Suite]: TrialArgsOf<S> }[Suite];
export type StoreTrialArgs = TrialArgsOf<'store'>;
export type MountTrialArgs = TrialArgsOf<'mount'>;
export type PeerTrialArgs = TrialArgsOf<'peers'>;
export type NativeTrialArgs = TrialArgsOf<'native'>;
export type FullCacheTrialArgs = TrialArgsOf<'full-cache'>;
export type ClusterTrialArgs = TrialArgsOf<'cluster'>;

/** One measured operation: every counted run's time, warm-ups excluded. */
export type FigureSamples = RateFigureSamples;

export interface TrialResult {
  suite: Suite;
  workload: string;
  system: string;
  blockBytes: number;
  warmups: number;
  runs: number;
  figures: FigureSamples[];
  /** Sanity checks and facts the trial observed (content verified, tier, store counters...). */
  checks: Record<string, CheckValue>;
}

const isSuite = isOneOf(SUITE_NAMES);

export function isWorkloadOf<S extends Suite>(suite: S, v: unknown): v is WorkloadOf<S> {
  return isOneOf<string>(SUITES[suite].workloads)(v);
}

export function isSystemOf<S extends Suite>(suite: S, v: unknown): v is SystemOf<S> {
  return isOneOf<string>(SUITES[suite].systems)(v);
}

/** Workloads whose trials have no block size (small files). */
const SIZELESS = new Set(['meta']);

export function parseTrialArgs(text: string): TrialArgs {
  const v: unknown = JSON.parse(text);
  if (!isRecord(v)) throw new Error('trial args: expected a JSON object');
  const { suite, workload, system, blockBytes, warmups, runs, blocks, readers, iterations, memoryBytes, dramHugePages, createFiles, scratchDir } = v;
  if (!isSuite(suite)) throw new Error(`trial args: unknown suite ${String(suite)}`);
  if (!isWorkloadOf(suite, workload)) throw new Error(`trial args: suite ${suite} has no workload ${String(workload)}`);
  if (!isSystemOf(suite, system)) throw new Error(`trial args: suite ${suite} has no system ${String(system)}`);
  if (!isCount(blockBytes) || (blockBytes === 0 && !SIZELESS.has(workload))) throw new Error('trial args: blockBytes must be a positive integer');
  if (!isCount(warmups) || !isCount(runs) || runs === 0) throw new Error('trial args: warmups/runs must be counts, runs >= 1');
  if (!isCount(blocks) || blocks === 0 || !isCount(readers) || readers === 0) throw new Error('trial args: blocks and readers must be >= 1');
  if (!isCount(iterations) || !isCount(memoryBytes)) throw new Error('trial args: iterations and memoryBytes must be counts');
  if (dramHugePages !== undefined && (typeof dramHugePages !== 'boolean' || suite !== 'store')) throw new Error('trial args: dramHugePages is a boolean of the store suite');
  if (createFiles !== undefined && (!isCount(createFiles) || workload !== 'meta')) throw new Error('trial args: createFiles is a count of the meta workload');
  if (typeof scratchDir !== 'string' || scratchDir.length === 0) throw new Error('trial args: scratchDir is required');
  const args = { suite, workload, system, blockBytes, warmups, runs, blocks, readers, iterations, memoryBytes, scratchDir } as TrialArgs;
  return { ...args, ...(dramHugePages === undefined ? {} : { dramHugePages }), ...(createFiles === undefined ? {} : { createFiles }) } as TrialArgs;
}

export function parseTrialResult(line: string): TrialResult {
  const v: unknown = JSON.parse(line);
  if (!isRecord(v)) throw new Error('trial result: expected a JSON object');
  const { suite, workload, system, blockBytes, warmups, runs, figures, checks } = v;
  if (!isSuite(suite) || !isWorkloadOf(suite, workload) || !isSystemOf(suite, system)) throw new Error('trial result: bad suite/workload/system');
  if (!isCount(blockBytes) || !isCount(warmups) || !isCount(runs)) throw new Error('trial result: bad blockBytes/warmups/runs');
  if (!Array.isArray(figures) || !figures.every(isRateFigure)) throw new Error('trial result: bad figures');
  return { suite, workload, system, blockBytes, warmups, runs, figures, checks: parseChecks(checks) };
}

/** The one line a trial prints: its arguments' identity, its figures and checks. */
export function trialResultLine(args: TrialArgs, figures: FigureSamples[], checks: Record<string, CheckValue>): string {
  const result: TrialResult = {
    suite: args.suite,
    workload: args.workload,
    system: args.system,
    blockBytes: args.blockBytes,
    warmups: args.warmups,
    runs: args.runs,
    figures,
    checks,
  };
  return JSON.stringify(result);
}

/** Bytes of each small file of the metadata workloads (they measure metadata, not data). */
export const META_FILE_BYTES = 4096;
/** Files the open+close figure cycles over in the metadata workloads. */
export const META_OPEN_FILES = 100;

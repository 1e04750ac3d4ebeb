/**
 * The one trial table: every trial of every suite (store, mount, peers, native, full-cache) as data:
 * suite, workload, system and its role, sizes, runs, and the goals a trial's figures are judged
 * against. The runner (run.ts) runs a selection of it, each row in a trial process of its own.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { MiB } from '../store/constants';
import { filterMatches, sizeLabel as mibLabel } from './common';
import { SUITE_NAMES, SUITES, type Suite, type SystemOf, type TrialArgsOf, type WorkloadOf } from './protocol';
import { SYSTEMS as PEER_SYSTEMS } from './systems';
import { CLUSTER_PREFIX } from './workloads/cluster';
import { slotFor } from './workloads/full-cache';

// ---- roles and ratios -----------------------------------------------------------------------------

/**
 * `limit`: what ratios are taken to (tmpfs, the raw disk for cold reads, memcpy / SHA-256 for the
 * store); `peer`: a real peer (the best one's median gives `x best peer`); `cascade`: under test.
 */
export type Role = 'limit' | 'peer' | 'cascade';

const ROLES: { [S in Suite]: Record<SystemOf<S>, Role> } = {
  store: { reference: 'limit', store: 'cascade' },
  mount: { tmpfs: 'limit', disk: 'limit', bindfs: 'peer', 'bindfs-disk': 'peer', cascade: 'cascade', 'cascade-kc': 'cascade' },
  peers: Object.fromEntries(PEER_SYSTEMS.map((s) => [s.name, s.role])) as Record<SystemOf<'peers'>, Role>,
  native: { addon: 'cascade', ts: 'cascade' },
  'full-cache': { tmpfs: 'limit', bindfs: 'peer', cascade: 'cascade' },
  cluster: { cascade: 'cascade' },
};

export function roleOf(suite: Suite, system: string): Role {
  return (ROLES[suite] as Record<string, Role>)[system];
}

/**
 * Which trials a figure's ratios compare with: the same block size, and the same workload where
 * `byWorkload`; `limitFigure` names the limit's figure when it has another name (the store: a put is
 * judged against the sha256 reference, a read against memcpy).
 */
export const RATIOS: Record<Suite, { byWorkload: boolean; limitFigure?: Record<string, string> }> = {
  store: {
    byWorkload: false,
    limitFigure: { put: 'sha256', 'put+sync': 'sha256', read: 'memcpy', get: 'memcpy', 'get-cold': 'memcpy', 'get-disk-warm': 'memcpy', promote: 'memcpy' },
  },
  mount: { byWorkload: true },
  peers: { byWorkload: true },
  native: { byWorkload: true },
  'full-cache': { byWorkload: true },
  cluster: { byWorkload: true },
};

// ---- goals ----------------------------------------------------------------------------------------

/** What a goal's measurement is divided by (none: the figure's own unit). */
export type GoalAgainst =
  | { kind: 'value' }
  /** The limit's median for the same figure (RATIOS). */
  | { kind: 'limit' }
  /** Another system's median for the same figure, workload and size. */
  | { kind: 'system'; system: string }
  /** Another figure of the same trial. */
  | { kind: 'figure'; figure: string }
  /** This machine's one-core SHA-256 rate, measured by the runner at the start. */
  | { kind: 'sha256-one-core' };

export interface Goal {
  /** In words, e.g. 'hot 64 MiB read >= 0.8x bindfs'. */
  goal: string;
  /** The median of this figure, or the value of this check. */
  measure: { figure: string } | { check: string };
  against: GoalAgainst;
  target: number;
  /** The goal is `measured <= target` (default: >=). */
  atMost?: boolean;
}

// ---- rows -----------------------------------------------------------------------------------------

/** One trial: what it is given (less its scratch dir, made when it runs), its name, role and goals. */
export type TrialRow = { [S in Suite]: Omit<TrialArgsOf<S>, 'scratchDir'> & { name: string; role: Role; goals: Goal[] } }[Suite];

/** A workload x size x system that does not run, and why (reported in the table as such). */
export interface NotRun {
  name: string;
  suite: Suite;
  workload: string;
  blockBytes: number;
  system: string;
  reason: string;
}

export const sizeLabel = (sizeBytes: number) => (sizeBytes === 0 ? 'small' : sizeBytes % MiB === 0 ? mibLabel(sizeBytes) : `${sizeBytes / 1024}KiB`);

const WARMUPS = 1;

interface Table {
  trials: TrialRow[];
  notRun: NotRun[];
}

/** Adds one row: defaults for the fields a workload does not use, its role, no goals unless given. */
function rowOf<S extends Suite>(
  suite: S,
  name: string,
  workload: WorkloadOf<S>,
  system: SystemOf<S>,
  blockBytes: number,
  fields: { runs: number } & Partial<Omit<TrialArgsOf<S>, 'suite' | 'workload' | 'system' | 'blockBytes' | 'scratchDir'>>,
  goals: Goal[] = [],
): TrialRow {
  const row = { suite, name, workload, system, role: roleOf(suite, system), blockBytes, warmups: WARMUPS, blocks: 1, readers: 1, iterations: 0, memoryBytes: 0, goals, ...fields };
  return row as unknown as TrialRow;
}

// ---- store ----------------------------------------------------------------------------------------

const STORE = {
  sizesFull: [2 * MiB, 16 * MiB, 64 * MiB],
  sizesQuick: [2 * MiB, 64 * MiB],
  /** Counted runs per block size; the references are cheap, so they get 3x more. */
  runsFull: { [2 * MiB]: 30, [16 * MiB]: 10, [64 * MiB]: 10 } as Record<number, number>,
  runsQuick: 5,
  referenceRunFactor: 3,
};

/**
 * Whether the compiled store accepts `dramHugePages`. Types are gone at run time, so this looks for the
 * option in the store's compiled code (the file that reads it).
 */
export function storeHasHugePagesOption(): boolean {
  try {
    return fs.readFileSync(path.join(__dirname, '..', 'store', 'store.js'), 'utf8').includes('dramHugePages');
  } catch {
    return false;
  }
}

function storeTrials(quick: boolean): Table {
  const trials: TrialRow[] = [];
  // DRAM-bound trials run once per huge-page setting when the store has one.
  const variants: (boolean | undefined)[] = storeHasHugePagesOption() ? [false, true] : [undefined];
  for (const b of quick ? STORE.sizesQuick : STORE.sizesFull) {
    const runs = quick ? STORE.runsQuick : STORE.runsFull[b];
    const add = (workload: WorkloadOf<'store'>, runCount: number, dramHugePages?: boolean, goals: Goal[] = []) => {
      const variant = dramHugePages === undefined ? '' : ` huge=${dramHugePages ? 'on' : 'off'}`;
      const system = workload === 'memcpy' || workload === 'sha256' ? 'reference' : 'store';
      trials.push(rowOf('store', `${workload} ${sizeLabel(b)}${variant}`, workload, system, b, { runs: runCount, ...(dramHugePages === undefined ? {} : { dramHugePages }) }, goals));
    };
    const x = (goal: string, figure: string, target: number): Goal => ({ goal, measure: { figure }, against: { kind: 'limit' }, target });
    add('memcpy', runs * STORE.referenceRunFactor);
    add('sha256', runs * STORE.referenceRunFactor);
    for (const v of variants) {
      add('put', runs, v, [
        x('put >= 0.8x single-core SHA-256 (write-back put)', 'put', 0.8),
        x('put >= 0.8x single-core SHA-256 (stricter: durable put+sync)', 'put+sync', 0.8),
      ]);
    }
    const hotGoals =
      b === 64 * MiB
        ? [x('hot get of a 64 MiB block >= 0.5x memcpy (read into a caller buffer)', 'read', 0.5), x('hot get of a 64 MiB block >= 0.5x memcpy (get, allocating)', 'get', 0.5)]
        : [];
    for (const v of variants) add('get-hot', runs, v, hotGoals);
    for (const v of variants) add('promote', runs, v);
    add('get-cold', runs); // reads come from disk; the DRAM tier's pages do not matter
  }
  return { trials, notRun: [] };
}

// ---- mount ----------------------------------------------------------------------------------------

export const MOUNT_SIZING = {
  full: {
    runsHot: [30, 10],
    runsCold: [20, 10],
    runsWrite: [30, 10],
    runsBlocks: 5,
    runsMeta: 5,
    hotFiles: [16, 2], // 16 x 2 MiB = 32 MiB: more than the last-level cache, so hot means DRAM, not L3
    blockFiles: 200,
    metaFiles: 2000,
    openCloseIterations: 10_000,
  },
  quick: {
    runsHot: [5, 5],
    runsCold: [5, 5],
    runsWrite: [5, 5],
    runsBlocks: 5,
    runsMeta: 5,
    hotFiles: [16, 2],
    blockFiles: 100,
    metaFiles: 300,
    openCloseIterations: 5_000,
  },
};
const MOUNT_SIZES = [2 * MiB, 64 * MiB];
const MOUNT_HOT: SystemOf<'mount'>[] = ['cascade', 'cascade-kc', 'bindfs', 'tmpfs'];
const MOUNT_COLD: SystemOf<'mount'>[] = ['cascade', 'cascade-kc', 'bindfs-disk', 'disk'];

function mountGoals(workload: WorkloadOf<'mount'>, system: SystemOf<'mount'>, blockBytes: number): Goal[] {
  if (roleOf('mount', system) !== 'cascade') return [];
  const value = (goal: string, figure: string, target: number): Goal => ({ goal, measure: { figure }, against: { kind: 'value' }, target });
  switch (workload) {
    case 'hot-read':
      return blockBytes !== 64 * MiB
        ? []
        : [
            { goal: 'hot 64 MiB read >= 0.8x bindfs', measure: { figure: 'read' }, against: { kind: 'system', system: 'bindfs' }, target: 0.8 },
            { goal: 'hot 64 MiB read >= 0.15x tmpfs', measure: { figure: 'read' }, against: { kind: 'limit' }, target: 0.15 },
          ];
    case 'blocks':
      return [value('>= 2,000 hot 2 MiB blocks/s', 'blocks/s', 2000)];
    case 'write':
      return [value('unique writes >= 0.8 GB/s (daemon idle before each file)', 'write', 0.8), value('unique writes >= 0.8 GB/s (stricter: back to back)', 'write-stream', 0.8)];
    case 'meta':
      return [value('>= 25k open+close/s', 'open+close', 25_000)];
    case 'cold-read':
      return [];
  }
}

function mountTrials(quick: boolean): Table {
  const z = quick ? MOUNT_SIZING.quick : MOUNT_SIZING.full;
  const trials: TrialRow[] = [];
  const add = (workload: WorkloadOf<'mount'>, system: SystemOf<'mount'>, blockBytes: number, runs: number, blocks: number, iterations = 0) =>
    trials.push(rowOf('mount', `${workload} ${sizeLabel(blockBytes)} ${system}`, workload, system, blockBytes, { runs, blocks, iterations }, mountGoals(workload, system, blockBytes)));
  MOUNT_SIZES.forEach((b, i) => MOUNT_HOT.forEach((s) => add('hot-read', s, b, z.runsHot[i], z.hotFiles[i])));
  for (const s of MOUNT_HOT) add('blocks', s, 2 * MiB, z.runsBlocks, z.blockFiles);
  MOUNT_SIZES.forEach((b, i) => MOUNT_COLD.forEach((s) => add('cold-read', s, b, z.runsCold[i], 1)));
  MOUNT_SIZES.forEach((b, i) => MOUNT_HOT.forEach((s) => add('write', s, b, z.runsWrite[i], 1)));
  for (const s of MOUNT_HOT) add('meta', s, 0, z.runsMeta, z.metaFiles, z.openCloseIterations);
  return { trials, notRun: [] };
}

// ---- peers (the side-by-side suite) ---------------------------------------------------------------

export const PEER_READERS = 4;
/** One system-prompt block under this many names. */
export const DUP_NAMES = 50;
/** Capacity overflow: data = this many times the system's memory. */
export const CAPACITY_FACTOR = 4;
/**
 * dup-write keeps every copy on the peers (tmpfs, Redis, h5py): 50 x 256 MiB = 12.5 GiB would not fit
 * beside everything else in this box's 24 GiB, so dup-write stops at this block size.
 */
const DUP_MAX_BLOCK_BYTES = 64 * MiB;
/** rename-race: one file of this size (a KV block; 2+ read calls per open, so a mixed read can show). */
const RENAME_RACE_BYTES = 2 * MiB;

export const PEER_SIZING = {
  full: {
    blockSizes: [2 * MiB, 64 * MiB, 256 * MiB],
    // Hot 2 MiB: a run is one block (about 0.4 ms), so many runs cost little; 5 gave medians that swung
    // 0.49-0.94x tmpfs between runs of one build, each run the first re-read of its block.
    runs: { hot: [64, 10, 5], cold: [10, 5, 5], write: [20, 10, 5], contention: [10, 5, 5], capacity: 5, meta: 5 },
    hotBlocks: [16, 2, 2], // 16 x 2 MiB = 32 MiB: more than the last-level cache, so hot means DRAM
    contentionBlocks: [8, 2, 1],
    contentionRounds: [4, 1, 1],
    capacityMemoryBytes: [256 * MiB, 512 * MiB, 1024 * MiB],
    metaBlocks: 2000,
    openCloseIterations: 10_000,
    createFiles: 20_000, // the create and scandir rows
    renameRaceRuns: 5,
    renameRaceOpens: 20_000, // 100,000 counted opens
    perFileRuns: 5,
  },
  quick: {
    blockSizes: [2 * MiB, 64 * MiB],
    runs: { hot: [32, 5], cold: [5, 5], write: [5, 5], contention: [5, 5], capacity: 5, meta: 5 },
    hotBlocks: [16, 2],
    contentionBlocks: [8, 2],
    contentionRounds: [2, 1],
    capacityMemoryBytes: [128 * MiB, 256 * MiB],
    metaBlocks: 300,
    openCloseIterations: 3_000,
    createFiles: 5_000,
    renameRaceRuns: 5,
    renameRaceOpens: 2_000, // 10,000 counted opens
    perFileRuns: 3,
  },
};

/** The per-file pattern's block sizes (SGLang's pages: 2 MiB; 8 MiB) and files per run. */
const PER_FILE = [
  { blockBytes: 2 * MiB, files: 64 },
  { blockBytes: 8 * MiB, files: 32 },
];

/** The hot-read goal of every Cascade row: 2 MiB blocks (open, whole read, close) per second. */
const GOAL_BLOCKS_PER_S = 8000;

/** The peers suite's goals: every Cascade row's blocks/s; the native fast path's, on the native engine's rows (/dev/fuse and io_uring). */
function peerGoals(workload: WorkloadOf<'peers'>, system: SystemOf<'peers'>, blockBytes: number): Goal[] {
  const goals: Goal[] = [];
  if (roleOf('peers', system) === 'cascade' && workload === 'hot-read' && blockBytes === 2 * MiB) {
    goals.push({ goal: `>= ${GOAL_BLOCKS_PER_S.toLocaleString('en-US')} hot 2 MiB blocks/s`, measure: { figure: 'blocks/s' }, against: { kind: 'value' }, target: GOAL_BLOCKS_PER_S });
  }
  if (system !== 'cascade' && system !== 'cascade-uring') return goals;
  const bindfs: GoalAgainst = { kind: 'system', system: 'bindfs' };
  const limit: GoalAgainst = { kind: 'limit' };
  const g = (goal: string, figure: string, against: GoalAgainst, target: number) => goals.push({ goal, measure: { figure }, against, target });
  if (workload === 'write' && blockBytes === 64 * MiB) {
    g('write 64 MiB >= 0.8x one-core SHA-256', 'write', { kind: 'sha256-one-core' }, 0.8);
    g('write 64 MiB >= 3x bindfs', 'write', bindfs, 3);
  }
  if (workload === 'meta') {
    g('open+close >= 3x bindfs', 'open+close', bindfs, 3);
    g('uncached stat >= 1.5x bindfs', 'stat-uncached', bindfs, 1.5);
    g('creates of new 4 KiB files >= 3x bindfs', 'create', bindfs, 3);
    // "time <= 2x tmpfs's", as entries/s.
    g('scandir + is_file >= 0.5x tmpfs (time <= 2x)', 'scandir', limit, 0.5);
  }
  if (workload === 'hot-read' && (blockBytes === 2 * MiB || blockBytes === 64 * MiB)) g(`hot read ${sizeLabel(blockBytes)} >= 0.9x tmpfs`, 'read', limit, 0.9);
  if (workload === 'cold-read' && blockBytes === 64 * MiB) g('cold read 64 MiB >= 0.9x disk', 'read', limit, 0.9);
  if (workload === 'rename-race') g('opens racing rename >= 0.8x tmpfs', 'opens', limit, 0.8);
  if (workload === 'per-file') {
    const size = sizeLabel(blockBytes);
    g(`per-file ${size} store >= 0.5x tmpfs`, 'store', limit, 0.5);
    g(`per-file ${size} store >= 1.5x bindfs`, 'store', bindfs, 1.5);
    g(`per-file ${size} load >= 0.8x tmpfs`, 'load', limit, 0.8);
    // Latency within 1.5x bindfs's: files/s at least 1/1.5 of its.
    for (const op of ['create', 'rename', 'exists', 'read-open']) g(`per-file ${size} ${op} latency <= 1.5x bindfs (files/s >= 0.67x)`, op, bindfs, 0.67);
    goals.push({ goal: `per-file ${size} close-commit <= 100 us`, measure: { figure: 'close-commit' }, against: { kind: 'value' }, target: 10_000 });
  }
  return goals;
}

function peerTrials(quick: boolean): Table {
  const z = quick ? PEER_SIZING.quick : PEER_SIZING.full;
  const trials: TrialRow[] = [];
  const notRun: NotRun[] = [];
  const add = (workload: WorkloadOf<'peers'>, blockBytes: number, fields: { runs: number; blocks: number } & Partial<TrialArgsOf<'peers'>>) => {
    for (const s of PEER_SYSTEMS) {
      const name = `${workload} ${sizeLabel(blockBytes)} ${s.name}`;
      const reason = s.notApplicable[workload];
      if (reason !== undefined) notRun.push({ name, suite: 'peers', workload, blockBytes, system: s.name, reason });
      else trials.push(rowOf('peers', name, workload, s.name, blockBytes, fields, peerGoals(workload, s.name, blockBytes)));
    }
  };
  const perWorkload: Record<WorkloadOf<'peers'>, () => void> = {
    'hot-read': () => z.blockSizes.forEach((b, i) => add('hot-read', b, { runs: z.runs.hot[i], blocks: z.hotBlocks[i] })),
    'cold-read': () => z.blockSizes.forEach((b, i) => add('cold-read', b, { runs: z.runs.cold[i], blocks: 1 })),
    write: () => z.blockSizes.forEach((b, i) => add('write', b, { runs: z.runs.write[i], blocks: 1 })),
    'dup-write': () =>
      z.blockSizes.forEach((b) => {
        if (b <= DUP_MAX_BLOCK_BYTES) return add('dup-write', b, { runs: DUP_NAMES - 1, blocks: DUP_NAMES });
        const reason = `not run: ${DUP_NAMES} copies of ${sizeLabel(b)} (${((DUP_NAMES * b) / 2 ** 30).toFixed(1)} GiB) do not fit in memory on the peers that keep every copy`;
        for (const s of PEER_SYSTEMS) notRun.push({ name: `dup-write ${sizeLabel(b)} ${s.name}`, suite: 'peers', workload: 'dup-write', blockBytes: b, system: s.name, reason });
      }),
    contention: () =>
      z.blockSizes.forEach((b, i) => add('contention', b, { runs: z.runs.contention[i], blocks: z.contentionBlocks[i], readers: PEER_READERS, iterations: z.contentionRounds[i] })),
    capacity: () =>
      z.blockSizes.forEach((b, i) => add('capacity', b, { runs: z.runs.capacity, blocks: (CAPACITY_FACTOR * z.capacityMemoryBytes[i]) / b, memoryBytes: z.capacityMemoryBytes[i] })),
    meta: () => add('meta', 0, { runs: z.runs.meta, blocks: z.metaBlocks, iterations: z.openCloseIterations, createFiles: z.createFiles }),
    'rename-race': () => add('rename-race', RENAME_RACE_BYTES, { runs: z.renameRaceRuns, blocks: 1, readers: PEER_READERS, iterations: z.renameRaceOpens }),
    'per-file': () => PER_FILE.forEach(({ blockBytes, files }) => add('per-file', blockBytes, { runs: z.perFileRuns, blocks: files })),
  };
  for (const w of SUITES.peers.workloads) perWorkload[w]();
  return { trials, notRun };
}

// ---- native ---------------------------------------------------------------------------------------

function nativeTrials(quick: boolean): Table {
  const runs = quick ? 5 : 10;
  const trials: TrialRow[] = [];
  // Warm-ups are inside the workloads (every block read and checked once before the timed runs).
  const add = (name: string, workload: WorkloadOf<'native'>, system: SystemOf<'native'>, blockBytes: number, runCount: number, goals: Goal[] = []) =>
    trials.push(rowOf('native', name, workload, system, blockBytes, { runs: runCount, warmups: 0 }, goals));
  for (const b of quick ? [64 * MiB] : [2 * MiB, 64 * MiB]) {
    add(`fuse-read ${sizeLabel(b)} addon`, 'fuse-read', 'addon', b, runs, [
      { goal: 'reads through the mount with the addon >= 1.2x without', measure: { figure: 'read' }, against: { kind: 'system', system: 'ts' }, target: 1.2 },
    ]);
    add(`fuse-read ${sizeLabel(b)} ts`, 'fuse-read', 'ts', b, runs);
    add(`client-read ${sizeLabel(b)}`, 'client-read', 'addon', b, runs, [
      { goal: 'client read (views + copy out) >= 0.8x memcpy', measure: { figure: 'client read (views + copy out)' }, against: { kind: 'figure', figure: 'memcpy' }, target: 0.8 },
    ]);
  }
  add('hash 1GiB', 'hash', 'addon', 1024 * MiB, quick ? 3 : 5, [
    { goal: 'streamed SHA-256 on a worker >= 0.9x node:crypto on one core', measure: { figure: 'streamed on a worker' }, against: { kind: 'figure', figure: 'node:crypto one core' }, target: 0.9 },
  ]);
  add('write-1g addon', 'write-1g', 'addon', 1024 * MiB, quick ? 2 : 3, [
    { goal: "the daemon's event loop waits <= 10 ms while 1 GiB is written (worst run)", measure: { check: 'maxLoopDelayMsWorst' }, against: { kind: 'value' }, target: 10, atMost: true },
  ]);
  add('write-1g ts', 'write-1g', 'ts', 1024 * MiB, quick ? 2 : 3);
  return { trials, notRun: [] };
}

// ---- full-cache -----------------------------------------------------------------------------------

const KiB = 1024;
const FULL_CACHE = {
  full: [
    { dramBytes: 64 * MiB, fileBytes: 4 * KiB },
    { dramBytes: 512 * MiB, fileBytes: 64 * KiB },
    { dramBytes: 2048 * MiB, fileBytes: 256 * KiB },
  ],
  quick: [
    { dramBytes: 64 * MiB, fileBytes: 4 * KiB },
    { dramBytes: 512 * MiB, fileBytes: 64 * KiB },
  ],
  minFiles: 32_768,
  /** Working set, in multiples of what DRAM holds. */
  workingSetFactor: 4,
};

function fullCacheTrials(quick: boolean): Table {
  const trials: TrialRow[] = [];
  for (const t of quick ? FULL_CACHE.quick : FULL_CACHE.full) {
    const holds = Math.floor(t.dramBytes / slotFor(t.fileBytes));
    const files = Math.max(FULL_CACHE.minFiles, FULL_CACHE.workingSetFactor * holds);
    for (const s of SUITES['full-cache'].systems) {
      const goals: Goal[] =
        s === 'cascade'
          ? [
              { goal: 'creates with DRAM full >= 0.8x with DRAM empty', measure: { figure: 'create' }, against: { kind: 'figure', figure: 'create-empty' }, target: 0.8 },
              { goal: 'DRAM slot bytes <= 2x block bytes', measure: { check: 'slotOverBlockBytes' }, against: { kind: 'value' }, target: 2, atMost: true },
            ]
          : [];
      const name = `full-cache ${sizeLabel(t.fileBytes)} dram=${sizeLabel(t.dramBytes)} ${s}`;
      trials.push(rowOf('full-cache', name, 'create', s, t.fileBytes, { runs: 1, warmups: 0, blocks: files, memoryBytes: t.dramBytes }, goals));
    }
  }
  return { trials, notRun: [] };
}

// ---- cluster --------------------------------------------------------------------------------------

function clusterTrials(quick: boolean): Table {
  const trials: TrialRow[] = [];
  // Every run reads a block never read before: the first remote read from a peer also sets up the connection, and counts.
  const runs = quick ? 3 : 5;
  for (const b of [2 * MiB, 64 * MiB]) {
    trials.push(
      rowOf('cluster', `read ${sizeLabel(b)}`, 'read', 'cascade', b, { runs, warmups: 0 }, [
        { goal: 'remote DRAM read >= 0.8x the fi_read loop', measure: { figure: 'remote' }, against: { kind: 'figure', figure: 'fi_read' }, target: 0.8 },
        { goal: 'remote DRAM read >= 2x the cold shared-tier read', measure: { figure: 'remote' }, against: { kind: 'figure', figure: 'shared-cold' }, target: 2 },
        { goal: 'local read on a cluster node >= 0.9x the single-node read', measure: { figure: 'local' }, against: { kind: 'figure', figure: 'single-node' }, target: 0.9 },
        { goal: 'shared-tier cold read >= 0.9x the raw segment read', measure: { figure: 'shared-cold' }, against: { kind: 'figure', figure: 'segment-read' }, target: 0.9 },
      ]),
    );
  }
  // vLLM's file tier: 32 blocks of 8 MiB (quick: 16 of 2 MiB), 4 threads, one pass per run.
  const vllmBytes = quick ? 2 * MiB : 8 * MiB;
  trials.push(
    rowOf('cluster', `vllm ${sizeLabel(vllmBytes)}`, 'vllm', 'cascade', vllmBytes, { runs: quick ? 1 : 3, warmups: 0, blocks: quick ? 16 : 32 }, [
      { goal: 'cluster store >= 0.8x single-node store', measure: { figure: 'store cluster' }, against: { kind: 'figure', figure: 'store single' }, target: 0.8 },
      { goal: 'cross-node load >= 0.8x single-node load', measure: { figure: 'load cross-node' }, against: { kind: 'figure', figure: 'load single' }, target: 0.8 },
      { goal: 'existence checks >= 0.8x single-node', measure: { figure: 'exists cluster' }, against: { kind: 'figure', figure: 'exists single' }, target: 0.8 },
    ]),
  );
  trials.push(rowOf('cluster', 'dedup 64MiB', 'dedup', 'cascade', 64 * MiB, { runs: 1, warmups: 0 }));
  trials.push(rowOf('cluster', `scaling ${sizeLabel(CLUSTER_PREFIX.blockBytes)}`, 'scaling', 'cascade', CLUSTER_PREFIX.blockBytes, { runs: 1, warmups: 0, blocks: CLUSTER_PREFIX.blocks }));
  return { trials, notRun: [] };
}

// ---- the table ------------------------------------------------------------------------------------

const SUITE_TABLES: Record<Suite, (quick: boolean) => Table> = {
  store: storeTrials,
  mount: mountTrials,
  peers: peerTrials,
  native: nativeTrials,
  'full-cache': fullCacheTrials,
  cluster: clusterTrials,
};

/** What `npm run bench` runs: the side-by-side table, then the full-cache trials. */
export const DEFAULT_SUITES: Suite[] = ['peers', 'full-cache'];
export { SUITE_NAMES };

/** Trials of the same suite whose figures a trial's ratios are taken from. */
export function sameGroup(a: { suite: Suite; workload: string; blockBytes: number }, b: { suite: Suite; workload: string; blockBytes: number }): boolean {
  return a.suite === b.suite && a.blockBytes === b.blockBytes && (!RATIOS[a.suite].byWorkload || a.workload === b.workload);
}

/**
 * The chosen suites' trials whose name contains one of the filter's comma-separated substrings (no
 * filter: all). Ratios and goals need their references from the same run, so every chosen trial also
 * brings the limit trials of its group and the systems its goals name.
 */
export function trialTable(suites: Suite[], quick: boolean, filter: string | undefined): Table {
  const all: Table = { trials: [], notRun: [] };
  for (const s of suites) {
    const t = SUITE_TABLES[s](quick);
    all.trials.push(...t.trials);
    all.notRun.push(...t.notRun);
  }
  if (filter === undefined) return all;
  const chosen = all.trials.filter((t) => filterMatches(filter, t.name));
  const needed = (t: TrialRow) =>
    chosen.some((c) => sameGroup(c, t) && (t.role === 'limit' || (c.workload === t.workload && c.goals.some((g) => g.against.kind === 'system' && g.against.system === t.system))));
  return { trials: all.trials.filter((t) => chosen.includes(t) || needed(t)), notRun: all.notRun.filter((n) => filterMatches(filter, n.name)) };
}

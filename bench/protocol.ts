/**
 * What the benchmark driver (store-bench.ts) and one trial process (store-trial.ts) exchange: the trial's
 * arguments as one JSON argv string, its results as one JSON line on stdout. Raw samples travel, not
 * summaries, so the driver computes every statistic in one place.
 */
import { isCount, isOneOf, isRecord, isTimes, parseChecks, type TrialResultOf } from './common';

export type { CheckValue } from './common';

export const TRIAL_KINDS = ['memcpy', 'sha256', 'put', 'get-hot', 'get-cold', 'promote'] as const;
export type TrialKind = (typeof TRIAL_KINDS)[number];

export interface TrialArgs {
  kind: TrialKind;
  blockBytes: number;
  warmups: number;
  runs: number;
  /** A directory the driver created for this trial and removes after it (even if the trial crashes). */
  scratchDir: string;
  /** Set only for the huge-page variants (when StoreConfig has `dramHugePages`); absent = store default. */
  dramHugePages?: boolean;
}

/** One measured operation: every timed run, warm-ups excluded. */
export interface FigureSamples {
  /** Short id used in tables, e.g. 'put', 'put+sync', 'read', 'get'. */
  figure: string;
  /** What exactly was timed, in words. */
  label: string;
  /** Bytes moved per run (throughput = bytesPerRun / time). */
  bytesPerRun: number;
  timesMs: number[];
}

/** Checks include content verified, tier, huge pages in effect... */
export type TrialResult = TrialResultOf<TrialKind, FigureSamples>;

const isTrialKind = isOneOf(TRIAL_KINDS);

export function parseTrialArgs(text: string): TrialArgs {
  const v: unknown = JSON.parse(text);
  if (!isRecord(v)) throw new Error('trial args: expected a JSON object');
  const { kind, blockBytes, warmups, runs, scratchDir, dramHugePages } = v;
  if (!isTrialKind(kind)) throw new Error(`trial args: unknown kind ${String(kind)}`);
  if (!isCount(blockBytes) || blockBytes === 0) throw new Error('trial args: blockBytes must be a positive integer');
  if (!isCount(warmups) || !isCount(runs) || runs === 0) throw new Error('trial args: warmups/runs must be counts, runs >= 1');
  if (typeof scratchDir !== 'string' || scratchDir.length === 0) throw new Error('trial args: scratchDir is required');
  if (dramHugePages !== undefined && typeof dramHugePages !== 'boolean') throw new Error('trial args: dramHugePages must be boolean');
  return { kind, blockBytes, warmups, runs, scratchDir, ...(dramHugePages === undefined ? {} : { dramHugePages }) };
}

function isFigure(v: unknown): v is FigureSamples {
  return (
    isRecord(v) &&
    typeof v.figure === 'string' &&
    typeof v.label === 'string' &&
    isCount(v.bytesPerRun) &&
    isTimes(v.timesMs)
  );
}

export function parseTrialResult(line: string): TrialResult {
  const v: unknown = JSON.parse(line);
  if (!isRecord(v)) throw new Error('trial result: expected a JSON object');
  const { kind, blockBytes, warmups, runs, figures, checks } = v;
  if (!isTrialKind(kind) || !isCount(blockBytes) || !isCount(warmups) || !isCount(runs)) {
    throw new Error('trial result: bad kind/blockBytes/warmups/runs');
  }
  if (!Array.isArray(figures) || !figures.every(isFigure)) throw new Error('trial result: bad figures');
  return { kind, blockBytes, warmups, runs, figures, checks: parseChecks(checks) };
}

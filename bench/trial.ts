/**
 * One trial, in a process of its own (a fresh heap, page-fault history and JIT state; its daemons are
 * its children): `node dist/bench/trial.js '<TrialArgs JSON>'` (protocol.ts). It runs the workload of
 * the trial's suite (workloads/) on its system, stops what it started, and prints exactly one JSON line
 * (TrialResult) on stdout; anything else goes to stderr. The runner (run.ts) starts it.
 */
import { installInterruptHandlers, Interrupted, wasInterrupted } from './mounts';
import { parseTrialArgs, trialResultLine, type CheckValue, type FigureSamples, type TrialArgs } from './protocol';
import { runClusterTrial } from './workloads/cluster';
import { runFullCacheTrial } from './workloads/full-cache';
import { runMountTrial } from './workloads/mount';
import { runNativeTrial } from './workloads/native';
import { runPeerTrial } from './workloads/peers';
import { runStoreTrial } from './workloads/store';

function runTrial(args: TrialArgs): Promise<{ figures: FigureSamples[]; checks: Record<string, CheckValue> }> {
  switch (args.suite) {
    case 'store':
      return runStoreTrial(args);
    case 'mount':
      return runMountTrial(args);
    case 'peers':
      return runPeerTrial(args);
    case 'native':
      return runNativeTrial(args);
    case 'full-cache':
      return runFullCacheTrial(args);
    case 'cluster':
      return runClusterTrial(args);
  }
}

async function main(): Promise<void> {
  const text = process.argv[2];
  if (text === undefined) throw new Error("usage: node dist/bench/trial.js '<TrialArgs JSON>' (the runner, run.js, starts trials)");
  const args = parseTrialArgs(text);
  // There a signal only sets a flag: the workload notices it between runs and unwinds through its
  // cleanup. The other suites die of it, and the runner sweeps what they started.
  if (args.suite === 'mount' || args.suite === 'peers') installInterruptHandlers();
  const out = await runTrial(args);
  process.stdout.write(trialResultLine(args, out.figures, out.checks) + '\n');
}

main().catch((e: unknown) => {
  const interrupted = e instanceof Interrupted || wasInterrupted();
  const detail = e instanceof Error ? (interrupted ? e.message : (e.stack ?? e.message)) : String(e);
  process.stderr.write(`trial: ${interrupted ? 'interrupted: ' : ''}${detail}\n`);
  process.exitCode = interrupted ? 130 : 1;
});

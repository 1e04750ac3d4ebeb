/**
 * Mocha's spec reporter plus one closing line in the plain form CI tools read:
 * `N passed, N failed, N skipped`. With CASCADE_TEST_SUMMARY=FILE it also writes the run's counts
 * there as JSON (test/summary.ts reads them for npm test's one closing line over all its parts).
 */
import * as fs from 'node:fs';
import Mocha from 'mocha';
import type { MochaFailure, MochaSummary } from './summary';

// Bounds on what is kept of failures for the closing summary: CI shows only the tail of a long
// log, so the summary repeats each failure briefly there.
const MAX_FAILURES_KEPT = 20;
const MAX_FAILURE_TEXT_CHARS = 1_500;

class SpecWithSummary extends Mocha.reporters.Spec {
  constructor(runner: Mocha.Runner, options?: Mocha.MochaOptions) {
    super(runner, options);
    const failures: MochaFailure[] = [];
    runner.on(Mocha.Runner.constants.EVENT_TEST_FAIL, (test: Mocha.Runnable, err: unknown) => {
      if (failures.length >= MAX_FAILURES_KEPT) return;
      const e = err as { stack?: unknown; message?: unknown } | undefined;
      const text = typeof e?.stack === 'string' ? e.stack : String(e?.message ?? err);
      failures.push({ title: test.fullTitle(), error: text.slice(0, MAX_FAILURE_TEXT_CHARS) });
    });
    runner.once(Mocha.Runner.constants.EVENT_RUN_END, () => {
      const s = runner.stats;
      const summary: MochaSummary = { passes: s?.passes ?? 0, failures: s?.failures ?? 0, pending: s?.pending ?? 0, durationMs: s?.duration ?? 0, failed: failures };
      const file = process.env.CASCADE_TEST_SUMMARY;
      // Written now, synchronously: mocha may exit right after the run ends.
      if (file) fs.writeFileSync(file, JSON.stringify(summary) + '\n');
      // After the spec reporter's own epilogue.
      process.nextTick(() => process.stdout.write(`${summary.passes} passed, ${summary.failures} failed, ${summary.pending} skipped\n`));
    });
  }
}

export = SpecWithSummary;

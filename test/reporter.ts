/**
 * Mocha's spec reporter plus one closing line in the plain form CI tools read:
 * `N passed, N failed, N skipped`.
 */
import Mocha from 'mocha';

class SpecWithSummary extends Mocha.reporters.Spec {
  constructor(runner: Mocha.Runner, options?: Mocha.MochaOptions) {
    super(runner, options);
    runner.once(Mocha.Runner.constants.EVENT_RUN_END, () => {
      const s = runner.stats;
      // After the spec reporter's own epilogue.
      process.nextTick(() => process.stdout.write(`${s?.passes ?? 0} passed, ${s?.failures ?? 0} failed, ${s?.pending ?? 0} skipped\n`));
    });
  }
}

export = SpecWithSummary;

// The spec reporter, plus one closing line in the plain "N passed, N failed" form CI systems read.
const Spec = require('mocha').reporters.Spec;

class SummaryReporter extends Spec {
  constructor(runner, options) {
    super(runner, options);
    runner.once('end', () => {
      const s = runner.stats;
      process.stdout.write(`tests: ${s.passes} passed, ${s.failures} failed, ${s.pending} skipped\n`);
    });
  }
}

module.exports = SummaryReporter;

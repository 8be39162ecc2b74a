import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startBurners } from './burners.js';

/**
 * `npm run test:stress -- [--burners 4] [--runs 1]`: the integration and e2e suites, `runs` times in a
 * row, beside `burners` busy-loop processes (a starved CPU: timers late, event loops stalled). Safety
 * must hold there too; prints one line per run and exits non-zero if any run failed.
 */
const USAGE = 'usage: npm run test:stress -- [--burners 4] [--runs 1]';

function count(name: string, text: string | undefined, fallback: number, min: number): number {
  const n = Number(text ?? fallback);
  if (!Number.isInteger(n) || n < min) {
    process.stderr.write(`test:stress: --${name} must be a whole number ≥ ${min}, got "${text}"\n${USAGE}\n`);
    process.exit(2);
  }
  return n;
}

let values;
try {
  ({ values } = parseArgs({ options: { burners: { type: 'string' }, runs: { type: 'string' } } }));
} catch (err) {
  process.stderr.write(`test:stress: ${(err as Error).message}\n${USAGE}\n`);
  process.exit(2);
}
const burners = count('burners', values.burners, 4, 0);
const runs = count('runs', values.runs, 1, 1);
const root = fileURLToPath(new URL('../..', import.meta.url));
const mocha = fileURLToPath(new URL('../../node_modules/mocha/bin/mocha.js', import.meta.url));

/** One run of both suites; resolves with whether it passed and how long it took. */
function suiteRun(): Promise<{ ok: boolean; ms: number }> {
  const t0 = Date.now();
  const child = spawn(process.execPath, [mocha, '--no-config', '--exit', '--timeout', '120000', 'dist/test/integration/**/*.test.js', 'dist/test/e2e/**/*.test.js'], { cwd: root, stdio: 'inherit' });
  return new Promise((resolve) => child.on('exit', (code) => resolve({ ok: code === 0, ms: Date.now() - t0 })));
}

const hogs = startBurners(burners, 6 * 3_600_000);
const stop = (): void => hogs.forEach((h) => h.kill('SIGKILL'));
// Stopped early, it stops its busy loops too (they would run on for hours).
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.on(signal, () => {
    stop();
    process.exit(code);
  });
}
const results: Array<{ ok: boolean; ms: number }> = [];
try {
  for (let i = 0; i < runs; i++) results.push(await suiteRun());
} finally {
  stop();
}
process.stdout.write(`\ntest:stress: integration + e2e beside ${burners} busy loops (command: npm run test:stress -- ${process.argv.slice(2).join(' ')})\n`);
results.forEach((r, i) => process.stdout.write(`  run ${i + 1}: ${r.ok ? 'passed' : 'FAILED'} in ${(r.ms / 1000).toFixed(0)} s\n`));
const failed = results.filter((r) => !r.ok).length;
process.stdout.write(`  ${results.length - failed} of ${results.length} runs passed\n`);
process.exit(failed === 0 ? 0 : 1);

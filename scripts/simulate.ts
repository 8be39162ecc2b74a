import { parseArgs } from 'node:util';
import { SCENARIOS } from './sim/scenarios.js';
import { simulate, type SimResult } from './sim/run.js';

/**
 * `npm run simulate -- --nodes 20 --scenario NAME|all [--seed N] [--duration S] [--json]`: the fleet
 * simulator. Every node runs the real protocol code over the in-memory bus on a virtual clock, so a
 * run is deterministic for its seed. Prints a table, or with --json one object per scenario per line.
 */
const USAGE = `usage: npm run simulate -- [--nodes 20] [--scenario ${SCENARIOS.map((s) => s.name).join('|')}|all] [--seed 1] [--duration 12] [--json]`;

function fail(message: string): never {
  process.stderr.write(`simulate: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function positiveInt(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) fail(`--${name} must be a whole number ≥ 1, got "${text}"`);
  return n;
}

function main(): void {
  let values;
  try {
    ({ values } = parseArgs({
      options: { nodes: { type: 'string' }, scenario: { type: 'string' }, seed: { type: 'string' }, duration: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean' } },
    }));
  } catch (err) {
    fail((err as Error).message);
  }
  if (values.help) return void process.stdout.write(`${USAGE}\n`);
  const nodes = positiveInt('nodes', values.nodes, 20);
  const seed = positiveInt('seed', values.seed, 1);
  const durationMs = positiveInt('duration', values.duration, 12) * 1000;
  if (durationMs < 4000) fail('--duration must be at least 4 (seconds): two are warm-up');
  const name = values.scenario ?? 'all';
  const chosen = name === 'all' ? SCENARIOS : SCENARIOS.filter((s) => s.name === name);
  if (chosen.length === 0) fail(`unknown scenario "${name}"`);
  const results: SimResult[] = [];
  for (const scenario of chosen) {
    const r = simulate(scenario, { nodes, seed, durationMs, windowMs: 1000, roundMs: 25, latencyMs: 0.2, jitterMs: 0.1, shards: 64 });
    results.push(r);
    if (values.json) process.stdout.write(`${JSON.stringify(r)}\n`);
  }
  if (!values.json) process.stdout.write(render(results, nodes, seed, durationMs));
}

function render(results: SimResult[], nodes: number, seed: number, durationMs: number): string {
  const head = ['scenario', 'windows', 'offered', 'admitted', 'over %', 'under %', 'fast path %', 'rtt p50/p99 ms', 'max outst.', 'self-grants', 'msgs/node/s'];
  const rows = results.map((r) => [r.scenario, r.windows, r.offered, r.admitted, r.overPct, r.underPct, r.fastPathPct, `${r.fastPathRttP50Ms ?? '-'}/${r.fastPathRttP99Ms ?? '-'}`, r.maxOutstandingRatio, r.selfGrants, r.messagesPerNodePerSec].map(String));
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ');
  const notes = results.map((r) => `  ${r.scenario}: ${SCENARIOS.find((s) => s.name === r.scenario)!.description}`);
  return [
    `fleet simulator: ${nodes} nodes, seed ${seed}, ${durationMs / 1000} s virtual (first 2 s warm-up), 1 s windows, T = 25 ms, bus latency 0.2 ms ± 0.1`,
    `command: npm run simulate -- ${process.argv.slice(2).join(' ')}`,
    '',
    line(head),
    ...rows.map(line),
    '',
    ...notes,
    '',
  ].join('\n');
}

main();

import { parseArgs } from 'node:util';
import { TOP_K } from '../lib/owner/fold-age.js';
import type { Allocation } from '../lib/policy.js';
import { renderAllocations } from './sim/compare.js';
import { SCENARIOS } from './sim/scenarios.js';
import { simulate, type SimResult } from './sim/run.js';
import { runStalls, type StallRun } from './sim/stalls.js';
import { grid, meetsTargets, runCell, SHAPES, targetsFor, type CellResult, type Shape, type Tail } from './sim/sweep.js';
import { markdownTable } from './markdown-table.js';

/**
 * `npm run simulate -- --nodes 20 --scenario NAME|all [--seed N] [--duration S] [--json]`: the fleet
 * simulator. Every node runs the real protocol code over the in-memory bus on a virtual clock, so a
 * run is deterministic for its seed. Prints a table, or with --json one object per scenario per line.
 *
 * `npm run simulate -- --sweep [--nodes 3,20,50] [--limits …] [--loads …] [--shapes …] [--window-ms …]
 * [--seeds …] [--json]`: the accuracy envelope, one cell per combination; a table of the worst cells
 * per fleet size and window, or one JSON line per cell. With `--allocations leasing,fixed-share` every
 * cell runs once per allocation, and the table compares them per fleet size, window and shape.
 *
 * `npm run simulate -- --stalls [--seeds 1-200] [--allocations fixed-share] [--json]`: safety under
 * stop-the-world pauses, one random fleet, pause schedule, clock steps and fault mix per seed
 * (`scripts/sim/stalls.ts`), its keys' plans under one allocation (default leasing).
 */
const USAGE = [
  `usage: npm run simulate -- [--nodes 20] [--scenario ${SCENARIOS.map((s) => s.name).join('|')}|all] [--seed 1] [--duration 12] [--json]`,
  `       npm run simulate -- --sweep [--nodes 3,20,50] [--limits 5,10,50,100,1000,10000] [--loads 0.5,0.9,1,1.2,3,10]`,
  `                           [--shapes ${SHAPES.join(',')}] [--window-ms 1000,60000] [--seeds 1] [--tail P:MS]`,
  `                           [--allocations leasing,fixed-share] [--json]`,
  `       npm run simulate -- --stalls [--seeds 1-200] [--allocations leasing|fixed-share] [--json]`,
].join('\n');

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

/** A comma-separated list of positive numbers (whole ones if `whole`), or the default. */
function numbers(name: string, text: string | undefined, fallback: number[], whole: boolean): number[] {
  if (text === undefined) return fallback;
  const out = text.split(',').map((t) => Number(t.trim()));
  for (const [i, n] of out.entries()) {
    if (!Number.isFinite(n) || n <= 0 || (whole && !Number.isInteger(n))) fail(`--${name}: "${text.split(',')[i]}" is not a ${whole ? 'whole number ≥ 1' : 'positive number'}`);
  }
  return out;
}

function main(): void {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        nodes: { type: 'string' },
        scenario: { type: 'string' },
        seed: { type: 'string' },
        duration: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean' },
        sweep: { type: 'boolean' },
        stalls: { type: 'boolean' },
        limits: { type: 'string' },
        loads: { type: 'string' },
        shapes: { type: 'string' },
        'window-ms': { type: 'string' },
        seeds: { type: 'string' },
        tail: { type: 'string' },
        allocations: { type: 'string' },
      },
    }));
  } catch (err) {
    fail((err as Error).message);
  }
  if (values.help) return void process.stdout.write(`${USAGE}\n`);
  if (values.sweep && values.stalls) fail('--sweep and --stalls are two different runs');
  if (values.sweep) return sweep(values);
  if (values.stalls) return stalls(values);
  for (const name of ['limits', 'loads', 'shapes', 'window-ms', 'seeds', 'tail', 'allocations'] as const) if (values[name] !== undefined) fail(`--${name} needs --sweep`);
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

/** `--tail P:MS`: with probability P (0 to 1) a bus message takes up to MS ms more. */
function tailOf(text: string | undefined): Tail | undefined {
  if (text === undefined) return undefined;
  const [p, ms] = text.split(':').map(Number);
  if (!(p !== undefined && p >= 0 && p <= 1 && ms !== undefined && Number.isFinite(ms) && ms > 0)) fail(`--tail must be P:MS with 0 ≤ P ≤ 1 and MS > 0, got "${text}"`);
  return { p, ms };
}

function sweep(values: {
  nodes?: string;
  limits?: string;
  loads?: string;
  shapes?: string;
  'window-ms'?: string;
  seeds?: string;
  tail?: string;
  allocations?: string;
  json?: boolean;
  scenario?: string;
  seed?: string;
  duration?: string;
}): void {
  for (const name of ['scenario', 'seed', 'duration'] as const) if (values[name] !== undefined) fail(`--${name} does not apply to --sweep`);
  const shapes = (values.shapes ?? SHAPES.join(',')).split(',').map((t) => t.trim());
  for (const s of shapes) if (!(SHAPES as readonly string[]).includes(s)) fail(`--shapes: unknown shape "${s}" (known: ${SHAPES.join(', ')})`);
  const allocations = values.allocations?.split(',').map((t) => t.trim());
  checkAllocations(allocations);
  const cells = grid({
    nodes: numbers('nodes', values.nodes, [3, 20, 50], true),
    limits: numbers('limits', values.limits, [5, 10, 50, 100, 1000, 10000], true),
    loads: numbers('loads', values.loads, [0.5, 0.9, 1, 1.2, 3, 10], false),
    shapes: shapes as Shape[],
    windows: numbers('window-ms', values['window-ms'], [1000, 60000], true),
    seeds: numbers('seeds', values.seeds, [1], true),
    ...(allocations === undefined ? {} : { allocations: allocations as Allocation[] }),
  });
  const tail = tailOf(values.tail);
  const results: CellResult[] = [];
  for (const cell of cells) {
    const r = runCell(cell, tail);
    results.push(r);
    if (values.json) process.stdout.write(`${JSON.stringify(r)}\n`);
  }
  if (values.json) return;
  process.stdout.write(allocations === undefined ? renderSweep(results) : renderAllocations(results, `npm run simulate -- ${process.argv.slice(2).join(' ')}`));
}

/** `--seeds A-B` (a range) or a comma-separated list. */
function seedsOf(text: string | undefined, fallback: number[]): number[] {
  const range = /^(\d+)-(\d+)$/.exec(text ?? '');
  if (range === null) return numbers('seeds', text, fallback, true);
  const [from, to] = [Number(range[1]), Number(range[2])];
  if (from < 1 || to < from) fail(`--seeds: "${text}" is not a range A-B with 1 ≤ A ≤ B`);
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

function checkAllocations(allocations: string[] | undefined): void {
  for (const a of allocations ?? []) if (a !== 'leasing' && a !== 'fixed-share') fail(`--allocations: unknown allocation "${a}" (known: leasing, fixed-share)`);
}

function stalls(values: { seeds?: string; json?: boolean; allocations?: string; [other: string]: unknown }): void {
  for (const name of ['scenario', 'seed', 'duration', 'nodes', 'limits', 'loads', 'shapes', 'window-ms', 'tail'] as const) if (values[name] !== undefined) fail(`--${name} does not apply to --stalls`);
  const allocations = values.allocations?.split(',').map((t) => t.trim());
  checkAllocations(allocations);
  if (allocations !== undefined && allocations.length !== 1) fail(`--allocations: --stalls runs one allocation at a time, got "${values.allocations}"`);
  const allocation = allocations?.[0] as Allocation | undefined;
  const runs: StallRun[] = [];
  for (const seed of seedsOf(
    values.seeds,
    Array.from({ length: 200 }, (_, i) => i + 1),
  )) {
    const run = runStalls(seed, allocation);
    runs.push(run);
    if (values.json)
      process.stdout.write(
        `${JSON.stringify({ ...withoutFoldAges(run.result), pauses: run.pauses, clockOffsets: run.clockOffsets, clockSteps: run.clockSteps, loss: run.loss, duplicate: run.duplicate })}\n`,
      );
  }
  if (!values.json) process.stdout.write(renderStalls(runs, allocation));
}

/** A stalls run's result as printed: its fold ages are not among the figures of that run. */
function withoutFoldAges(r: SimResult): Omit<SimResult, 'foldAgeOtherP99Rounds' | 'foldAgeTopP99Rounds'> {
  const { foldAgeOtherP99Rounds: _other, foldAgeTopP99Rounds: _top, ...rest } = r;
  return rest;
}

function renderStalls(runs: StallRun[], allocation: Allocation | undefined): string {
  const worst = (f: (r: StallRun) => number): StallRun => runs.reduce((a, b) => (f(b) > f(a) ? b : a));
  const over = worst((r) => r.result.overPct);
  const overF4 = worst((r) => r.result.overF4Pct);
  const outstanding = worst((r) => r.result.maxOutstandingRatio);
  const under = worst((r) => r.result.underPct);
  const rows: Array<[string, string]> = [
    ['runs', String(runs.length)],
    ['runs with a boundary self-grant', String(runs.filter((r) => r.result.selfGrants > 0).length)],
    ['runs admitting past an allowance', String(runs.filter((r) => r.result.overPct > 0).length)],
    ['worst over % (seed)', `${over.result.overPct} (${over.seed})`],
    ["runs admitting past F4's bound (allowance + self-grants, per window)", String(runs.filter((r) => r.result.overF4Pct > 0).length)],
    ["worst over % past F4's bound (seed)", `${overF4.result.overF4Pct} (${overF4.seed})`],
    ['max outstanding / allowance (seed)', `${outstanding.result.maxOutstandingRatio} (${outstanding.seed})`],
    ['invariant violations', String(runs.reduce((n, r) => n + r.result.invariantViolations, 0))],
    ['worst under % (seed): accuracy, not safety', `${under.result.underPct} (${under.seed})`],
    ['mean under %', (runs.reduce((n, r) => n + r.result.underPct, 0) / runs.length).toFixed(2)],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  return [
    'safety under stalls: 3–10 nodes, 12 keys of 10/100/1000 per 1 s window offered 1.2–3×, 1–4 pauses of 10 ms to 5 s per run, up to 2 % loss and 10 % duplicates,',
    'wall clocks within ±1 round of true time, 0–3 steps per run (monotonic clocks never step)',
    ...(allocation === undefined ? [] : [`allocation: ${allocation}`]),
    `command: npm run simulate -- ${process.argv.slice(2).join(' ')}`,
    '',
    ...rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`),
    '',
  ].join('\n');
}

/** Per fleet size and window: the worst cell for each figure, and how many cells miss their targets. */
function renderSweep(results: CellResult[]): string {
  const head = ['nodes', 'window', 'cells', 'missing targets', 'worst over % (cell)', 'worst under % (cell)', 'worst false-denial % (cell)', 'max fast path %'];
  const name = (r: CellResult): string => `${r.shape} ${r.limit}@${r.load}× s${r.seed}`;
  const worst = (rs: CellResult[], f: (r: CellResult) => number): string => {
    const w = rs.reduce((a, b) => (f(b) > f(a) ? b : a));
    return `${f(w)} (${name(w)})`;
  };
  const groups = new Map<string, CellResult[]>();
  for (const r of results) {
    const k = `${r.nodes}|${r.windowMs}`;
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  const rows = [...groups.values()].map((rs) => {
    const t = targetsFor(rs[0]!.nodes);
    return [
      String(rs[0]!.nodes),
      `${rs[0]!.windowMs / 1000} s`,
      String(rs.length),
      `${rs.filter((r) => !meetsTargets(r)).length} (over ≤ ${t.over}, under ≤ ${t.under}, false ≤ ${t.falseDenial})`,
      worst(rs, (r) => r.overPct),
      worst(rs, (r) => r.underPct),
      worst(rs, (r) => r.falseDenialPct),
      String(Math.max(...rs.map((r) => r.fastPathPct))),
    ];
  });
  return [
    `accuracy sweep: every cell the real protocol over the simulated bus, T = 25 ms, 64 shards, bus latency 0.2 ms ± 0.1${process.argv.includes('--tail') ? ' and a slow tail' : ''}`,
    `command: npm run simulate -- ${process.argv.slice(2).join(' ')}`,
    '',
    ...markdownTable(head, rows),
    '',
  ].join('\n');
}

function render(results: SimResult[], nodes: number, seed: number, durationMs: number): string {
  const head = ['scenario', 'windows', 'offered', 'admitted', 'over %', 'under %', 'fast path %', 'rtt p50/p99 ms', 'fold age p99 other/top', 'max outst.', 'self-grants', 'msgs/node/s'];
  const rows = results.map((r) =>
    [
      r.scenario,
      r.windows,
      r.offered,
      r.admitted,
      r.overPct,
      r.underPct,
      r.fastPathPct,
      `${r.fastPathRttP50Ms ?? '-'}/${r.fastPathRttP99Ms ?? '-'}`,
      `${r.foldAgeOtherP99Rounds ?? '-'}/${r.foldAgeTopP99Rounds ?? '-'}`,
      r.maxOutstandingRatio,
      r.selfGrants,
      r.messagesPerNodePerSec,
    ].map(String),
  );
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
    `  fold age: p99 rounds from a report batch entering the bus to its owner folding a report of it, for keys outside / among each owner's top ${TOP_K} by fold work`,
    ...notes,
    '',
  ].join('\n');
}

main();

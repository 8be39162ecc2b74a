import type { Allocation } from '../../lib/policy.js';
import type { KeyTraffic, Scenario } from './scenarios.js';
import { simulate, type AllocationFigures, type SimResult } from './run.js';

/** Traffic shapes of the sweep: how one key's requests spread over nodes and time. */
export const SHAPES = ['spread', 'pinned', 'zipf', 'ramp', 'churn', 'onoff'] as const;
export type Shape = (typeof SHAPES)[number];

/** One cell of the sweep grid. */
export interface Cell {
  readonly nodes: number;
  /** Allowance per window. */
  readonly limit: number;
  /** Offered load as a multiple of the allowance. */
  readonly load: number;
  readonly shape: Shape;
  readonly windowMs: number;
  readonly seed: number;
  /** How the plan allocates credit (`--allocations`); absent: leasing, and the figures as before. */
  readonly allocation?: Allocation;
}

/** What a cell measured (the simulator's figures, one JSON line each with --json). */
export type CellResult = Cell & Omit<SimResult, 'scenario' | 'nodes' | 'seed' | 'windowMs' | 'foldAgeOtherP99Rounds' | 'foldAgeTopP99Rounds'> & Partial<Omit<AllocationFigures, 'allocation'>>;

/** Requests per window a cell offers at most, over all its keys (keeps every cell a few seconds). */
const REQUESTS_PER_WINDOW = 20_000;
const MAX_KEYS = 20;
/** Complete windows measured per key: 1 s windows after a 2 s warm-up; 60 s windows need fewer. */
const WINDOWS_1S = 8;
const WINDOWS_LONG = 2;

/** Number of keys a cell runs: many for small plans (so rare events show), few for big ones. */
export function keysFor(limit: number, load: number): number {
  return Math.max(1, Math.min(MAX_KEYS, Math.floor(REQUESTS_PER_WINDOW / (limit * Math.max(1, load)))));
}

/** Virtual duration of a cell: the warm-up, the measured windows and one more for phase offsets. */
export function durationFor(windowMs: number): number {
  return 2000 + (windowMs <= 1000 ? WINDOWS_1S + 1 : WINDOWS_LONG + 1) * windowMs;
}

/** Cumulative Zipf (s = 1) weights over the nodes in a random order: a few nodes carry most of a key. */
function zipfWeights(nodes: number, random: () => number): number[] {
  const order = Array.from({ length: nodes }, (_, i) => i);
  for (let i = nodes - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  const w = new Array<number>(nodes).fill(0);
  order.forEach((node, rank) => (w[node] = 1 / (rank + 1)));
  const total = w.reduce((a, b) => a + b, 0);
  let acc = 0;
  return w.map((x) => (acc += x / total));
}

/** The keys of a cell's traffic. */
export function trafficFor(cell: Cell, random: () => number): KeyTraffic[] {
  const { nodes, limit, load, shape, windowMs } = cell;
  const rate = (limit * load * 1000) / windowMs;
  const keys = keysFor(limit, load);
  const one = (i: number): KeyTraffic => {
    switch (shape) {
      case 'spread':
        return { limit, rate, evaluated: true };
      case 'pinned':
        return { limit, rate, pinnedNode: i % nodes, evaluated: true };
      case 'zipf':
        return { limit, rate, nodeWeights: zipfWeights(nodes, random), evaluated: true };
      case 'ramp':
        return { limit, rate, rampMs: 4 * windowMs, evaluated: true };
      case 'onoff':
        return { limit, rate: rate / 0.3, burst: { onMs: 0.3 * windowMs, periodMs: windowMs, phaseMs: Math.floor(random() * windowMs) }, evaluated: true };
      case 'churn':
        throw new Error('churn keys are made below');
    }
  };
  if (shape !== 'churn') return Array.from({ length: keys }, (_, i) => one(i));
  // Churn: `keys` slots, each a succession of keys living about one window and sending at the cell's
  // rate while alive; every key is new to every node when it starts.
  const out: KeyTraffic[] = [];
  const end = durationFor(windowMs);
  for (let slot = 0; slot < keys; slot++) {
    let at = random() * windowMs;
    while (at < end) {
      const life = windowMs * (0.5 + random());
      out.push({ limit, rate, life: { fromMs: at, toMs: at + life }, evaluated: true });
      at += life;
    }
  }
  return out;
}

/** The simulated bus's slow tail: with probability `p` a message takes up to `ms` more. */
export interface Tail {
  readonly p: number;
  readonly ms: number;
}

/**
 * Runs one cell of the sweep: the real protocol over the simulated bus (T = 25 ms, 64 shards, one-way
 * latency 0.2 ms + up to 0.1 ms, and `tail` if given).
 */
export function runCell(cell: Cell, tail?: Tail): CellResult {
  const scenario: Scenario = { name: `${cell.shape}`, description: '', keys: (_nodes, random) => trafficFor(cell, random) };
  const {
    scenario: _scenario,
    nodes: _nodes,
    seed: _seed,
    windowMs: _windowMs,
    foldAgeOtherP99Rounds: _foldAgeOther,
    foldAgeTopP99Rounds: _foldAgeTop,
    ...measured
  } = simulate(scenario, {
    nodes: cell.nodes,
    seed: cell.seed,
    durationMs: durationFor(cell.windowMs),
    windowMs: cell.windowMs,
    roundMs: 25,
    latencyMs: 0.2,
    jitterMs: 0.1,
    shards: 64,
    ...(tail !== undefined ? { tail } : {}),
    ...(cell.allocation !== undefined ? { allocation: cell.allocation } : {}),
  });
  return { ...cell, ...measured };
}

/** Targets per fleet size (Q4, Q5): 20 nodes and below as 20; above 20 as 50. */
export function targetsFor(nodes: number): { over: number; under: number; falseDenial: number } {
  return nodes <= 20 ? { over: 1, under: 1.5, falseDenial: 1 } : { over: 1, under: 3, falseDenial: 2 };
}

/** Whether a cell meets its fleet size's targets. */
export function meetsTargets(r: CellResult): boolean {
  const t = targetsFor(r.nodes);
  return r.overPct <= t.over && r.underPct <= t.under && r.falseDenialPct <= t.falseDenial && r.invariantViolations === 0;
}

/** Every combination of the given values, in a stable order; with `allocations`, each cell once per allocation. */
export function grid(g: { nodes: number[]; limits: number[]; loads: number[]; shapes: Shape[]; windows: number[]; seeds: number[]; allocations?: Allocation[] }): Cell[] {
  const cells: Cell[] = [];
  for (const windowMs of g.windows)
    for (const nodes of g.nodes)
      for (const shape of g.shapes)
        for (const limit of g.limits)
          for (const load of g.loads)
            for (const seed of g.seeds) {
              if (g.allocations === undefined) cells.push({ nodes, limit, load, shape, windowMs, seed });
              else for (const allocation of g.allocations) cells.push({ nodes, limit, load, shape, windowMs, seed, allocation });
            }
  return cells;
}

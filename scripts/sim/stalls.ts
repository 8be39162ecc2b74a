import { SKEW_ROUNDS } from '../../lib/lease-node.js';
import type { Allocation } from '../../lib/policy.js';
import { seededRandom } from './queue.js';
import { simulate, type SimResult } from './run.js';
import type { ClockStep, KeyTraffic, Pause, Scenario } from './scenarios.js';

/** Virtual length of one stall run: the 2 s warm-up, then room for pauses of up to 5 s and recovery. */
const DURATION_MS = 14_000;
const PAUSE_MIN_MS = 10;
const PAUSE_MAX_MS = 5000;
const ROUND_MS = 25;
/** How far a node's wall clock may be from true time: half the skew allowed between two nodes. */
const CLOCK_BOUND_MS = (SKEW_ROUNDS * ROUND_MS) / 2;
const MAX_CLOCK_STEPS = 3;

/** One property run: its fleet, its pauses and faults, and what the real protocol did under them. */
export interface StallRun {
  readonly seed: number;
  readonly nodes: number;
  readonly pauses: readonly Pause[];
  readonly clockOffsets: readonly number[];
  readonly clockSteps: readonly ClockStep[];
  readonly loss: number;
  readonly duplicate: number;
  readonly result: SimResult;
}

/**
 * The situation of seed `seed`: 3 to 10 nodes; 12 keys of 10, 100 or 1,000 a second, offered 1.2 to 3
 * times that, spread over the fleet; one to four stop-the-world pauses of random processes (owners
 * and nodes alike: every process is both), log-uniform from 10 ms to 5 s, some overlapping; up to 2 %
 * of messages lost and 10 % delivered twice, up to 2 ms out of order. Every node's wall clock starts
 * off true time by up to CLOCK_BOUND_MS either way, and zero to three times in a run one node's clock
 * steps (as NTP does), to the other side of true time, still within the bound: any two clocks agree
 * within SKEW_ROUNDS rounds, as the protocol assumes. (Drawn from a stream of their own: a seed's
 * pauses and faults are what they were before clocks were simulated.)
 */
export function stallScenario(seed: number): { scenario: Scenario; nodes: number } {
  const random = seededRandom(seed * 7919 + 17);
  const nodes = 3 + Math.floor(random() * 8);
  const keys: KeyTraffic[] = Array.from({ length: 12 }, () => {
    const limit = [10, 100, 1000][Math.floor(random() * 3)]!;
    return { limit, rate: limit * (1.2 + 1.8 * random()), evaluated: true };
  });
  const pauses: Pause[] = Array.from({ length: 1 + Math.floor(random() * 4) }, () => ({
    node: Math.floor(random() * nodes),
    atMs: 2000 + Math.floor(random() * (DURATION_MS - 4000)),
    ms: Math.round(PAUSE_MIN_MS * Math.pow(PAUSE_MAX_MS / PAUSE_MIN_MS, random())),
  }));
  const clocks = seededRandom(seed * 104_729 + 5);
  const clockOffsets = Array.from({ length: nodes }, () => Math.round((2 * clocks() - 1) * CLOCK_BOUND_MS));
  const offsetNow = [...clockOffsets];
  const clockSteps: ClockStep[] = Array.from({ length: Math.floor(clocks() * (MAX_CLOCK_STEPS + 1)) }, () => ({
    node: Math.floor(clocks() * nodes),
    atMs: 2000 + Math.floor(clocks() * (DURATION_MS - 4000)),
    magnitude: Math.max(1, Math.round(clocks() * CLOCK_BOUND_MS)),
  }))
    .sort((a, b) => a.atMs - b.atMs)
    .map(({ node, atMs, magnitude }) => {
      // To the other side of true time: a step of up to twice the bound, forward or back.
      const toMs = offsetNow[node]! > 0 || (offsetNow[node] === 0 && magnitude % 2 === 0) ? -magnitude : magnitude;
      offsetNow[node] = toMs;
      return { node, atMs, toMs };
    });
  const signed = (ms: number): string => (ms < 0 ? `${ms}` : `+${ms}`);
  const scenario: Scenario = {
    name: `stalls-${seed}`,
    description:
      `${nodes} nodes; pauses ${pauses.map((p) => `n${p.node}@${p.atMs}+${p.ms}ms`).join(', ')}; ` +
      `clocks ${clockOffsets.map(signed).join('/')} ms, ${clockSteps.length ? `steps ${clockSteps.map((c) => `n${c.node}@${c.atMs}→${signed(c.toMs)}ms`).join(', ')}` : 'no steps'}`,
    keys: () => keys,
    pauses,
    clockOffsets,
    clockSteps,
    loss: Math.round(random() * 200) / 10_000,
    duplicate: Math.round(random() * 100) / 1000,
    reorderMs: 2,
  };
  return { scenario, nodes };
}

/**
 * Runs seed `seed`'s stall scenario (T = 25 ms, 64 shards, 1 s windows, bus latency 0.2 ms ± 0.1),
 * its keys' plans under `allocation` when given (absent: leasing, figures as before).
 */
export function runStalls(seed: number, allocation?: Allocation): StallRun {
  const { scenario, nodes } = stallScenario(seed);
  const opts = { nodes, seed, durationMs: DURATION_MS, windowMs: 1000, roundMs: ROUND_MS, latencyMs: 0.2, jitterMs: 0.1, shards: 64 };
  const result = simulate(scenario, allocation === undefined ? opts : { ...opts, allocation });
  return { seed, nodes, pauses: scenario.pauses!, clockOffsets: scenario.clockOffsets!, clockSteps: scenario.clockSteps!, loss: scenario.loss!, duplicate: scenario.duplicate!, result };
}

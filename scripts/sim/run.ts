import type { LeaseNode } from '../../lib/lease-node.js';
import { mergeConcentration } from '../../lib/owner/concentration.js';
import { compilePolicy, type Allocation, type ResolvedLimits } from '../../lib/policy.js';
import { quantile } from '../../lib/quantile.js';
import { phaseOffset, windowIdAt, windowStartMs } from '../../lib/window.js';
import { START, startFleet } from './fleet.js';
import { EventQueue, nextArrival, seededRandom } from './queue.js';
import type { KeyTraffic, Scenario } from './scenarios.js';

/**
 * One simulated run: its options, the traffic of its keys on the fleet (`fleet.ts`), the sampling
 * of outstanding credit, and the accuracy figures it measured.
 */

/** Settings of one simulated run. */
export interface SimOptions {
  readonly nodes: number;
  readonly seed: number;
  readonly durationMs: number;
  readonly windowMs: number;
  readonly roundMs: number;
  /** One-way bus latency and its jitter, ms. */
  readonly latencyMs: number;
  readonly jitterMs: number;
  /** A slow tail of the bus: with probability `p` a message takes up to `ms` more. */
  readonly tail?: { readonly p: number; readonly ms: number };
  readonly shards: number;
  /**
   * How the keys' plans allocate credit; when given (either way) the result also says which, and the
   * concentration the owners measured (`lib/owner/concentration.ts`). Absent: leasing, figures as before.
   */
  readonly allocation?: Allocation;
}

/** What a run with `allocation` set adds: the allocation, and the owners' concentration, merged. */
export interface AllocationFigures {
  allocation: Allocation;
  /** Key windows the owners measured, and the p50 / p95 ratio to uniform (bucket bounds; null: none). */
  concentrationSamples: number;
  concentrationP50: number | null;
  concentrationP95: number | null;
}

/**
 * What one run measured, over every complete window of an evaluated key after the warm-up, each
 * request counted in the window the deciding node charged it to (by its own wall clock, which may be
 * a little off the virtual one): overPct = Σ max(0, admitted − allowance) / Σ allowance; overF4Pct =
 * Σ max(0, admitted − allowance − self-granted) / Σ allowance, past F4's bound: the allowance plus
 * the boundary self-grants made into that window; underPct = Σ max(0, min(offered, allowance) −
 * admitted) / Σ min(offered, allowance); falseDenialPct = requests denied in windows whose offered
 * count was within the allowance, over the requests offered in those windows.
 */
export interface SimResult {
  scenario: string;
  nodes: number;
  seed: number;
  windowMs: number;
  windows: number;
  allowance: number;
  offered: number;
  admitted: number;
  overPct: number;
  overF4Pct: number;
  underPct: number;
  falseDenialPct: number;
  fastPathPct: number;
  fastPathRttP50Ms: number | null;
  fastPathRttP99Ms: number | null;
  /**
   * p99 fold age after the warm-up, in rounds: from a report batch entering the bus to its owner
   * folding each report of it, for the owners' top keys (`TopKeys`) and for every other key.
   */
  foldAgeOtherP99Rounds: number | null;
  foldAgeTopP99Rounds: number | null;
  maxOutstandingRatio: number;
  selfGrants: number;
  messagesPerNodePerSec: number;
  invariantViolations: number;
}

/** Windows that started before this much of the run are warm-up and not counted. */
const WARMUP_MS = 2000;

/** Runs `scenario` on a fleet of `opts.nodes` members in one process, on a virtual clock. */
export function simulate(scenario: Scenario, opts: SimOptions): SimResult & Partial<AllocationFigures> {
  const random = seededRandom(opts.seed);
  const queue = new EventQueue(START);
  const clock = queue.clock;
  const { bus, clocks, members, retired, ages, pausedUntil, paused, pickNode } = startFleet(scenario, opts, queue, random, START + WARMUP_MS);

  // Traffic and accounting.
  const traffic = scenario.keys(opts.nodes, random, { shards: opts.shards, windowMs: opts.windowMs });
  const limits = compileLimits(traffic, opts.windowMs, opts.allocation);
  const keyIds = traffic.map((t, i) => t.keyId ?? `v1:sim${String(i).padStart(19, '0')}`);
  const offsets = keyIds.map((k) => phaseOffset(k, opts.windowMs));
  /** Per key and window id: requests offered and admitted, and the boundary self-grants made into it (F4). */
  const counts = traffic.map(() => new Map<number, { offered: number; admitted: number; selfGranted: number }>());
  let offered = 0;
  let invariantViolations = 0;
  const countsOf = (k: number, wid: number): { offered: number; admitted: number; selfGranted: number } => {
    let c = counts[k]!.get(wid);
    if (c === undefined) counts[k]!.set(wid, (c = { offered: 0, admitted: 0, selfGranted: 0 }));
    return c;
  };
  /** Self-grants counted, per node process: key|window. */
  const selfGrantSeen = new Map<LeaseNode, Set<string>>();
  /**
   * One request of key `k` at node `n`, decided now — or when the node resumes, if it is paused —
   * and counted in the window the node charged it to: its bucket's after the decision.
   */
  const decide = (k: number, n: number): void => {
    if (paused(n)) return void queue.at(pausedUntil[n]!, () => decide(k, n));
    const node = members[n]!.node;
    let admittedHere = false;
    try {
      const r = node.acquire(keyIds[k]!, limits[k]!);
      if (r instanceof Promise) throw new Error('the simulated bus answers synchronously');
      admittedHere = r.admitted;
    } catch (err) {
      if ((err as Error).name === 'InvariantViolation') invariantViolations++;
      else throw err;
    }
    const b = node.buckets.peek(keyIds[k]!)?.buckets[0];
    const c = countsOf(k, b?.windowId ?? windowIdAt(clocks[n]!.now(), opts.windowMs, offsets[k]!));
    c.offered++;
    if (admittedHere) c.admitted++;
    if (b !== undefined && b.selfIssued > 0) {
      let seen = selfGrantSeen.get(node);
      if (seen === undefined) selfGrantSeen.set(node, (seen = new Set()));
      const mark = `${k}|${b.windowId}`;
      if (!seen.has(mark)) {
        seen.add(mark);
        c.selfGranted += b.selfIssued;
      }
    }
  };
  traffic.forEach((t, k) => {
    // A ramp is Poisson at twice the rate, thinned by where in its ramp the request falls.
    const rate = t.rampMs === undefined ? t.rate : 2 * t.rate;
    const arrive = (): void => {
      const now = clock.now();
      if (t.life !== undefined && now >= START + t.life.toMs) return;
      if (t.burst !== undefined) {
        const into = (((now - START - t.burst.phaseMs) % t.burst.periodMs) + t.burst.periodMs) % t.burst.periodMs;
        if (into >= t.burst.onMs) {
          queue.after(t.burst.periodMs - into, arrive);
          return;
        }
      }
      if (t.rampMs !== undefined && random() >= ((now - START) % t.rampMs) / t.rampMs) {
        queue.after(nextArrival(random, rate), arrive);
        return;
      }
      offered++;
      decide(k, pickNode(t));
      queue.after(nextArrival(random, rate), arrive);
    };
    queue.after((t.life?.fromMs ?? 0) + nextArrival(random, rate), arrive);
  });

  // Outstanding credit, sampled each round for the evaluated keys: per window, admitted so far in it
  // plus everything nodes still hold for it — credit of a window their own clocks are still in, and
  // credit granted ahead for their next one — over the allowance (what L2 bounds). With clocks a
  // little apart, two windows of a key can be running at once.
  let maxOutstanding = 0;
  const evaluated = traffic.map((t, k) => (t.evaluated ? k : -1)).filter((k) => k >= 0);
  const sample = (): void => {
    for (const k of evaluated) {
      const held = new Map<number, number>([[windowIdAt(clock.now(), opts.windowMs, offsets[k]!), 0]]);
      members.forEach((m, i) => {
        const b = m.node.buckets.peek(keyIds[k]!)?.buckets[0];
        if (b === undefined) return;
        if (b.windowEnd > clocks[i]!.now() && b.credit > 0) held.set(b.windowId, (held.get(b.windowId) ?? 0) + b.credit);
        if (b.nextWindowId > b.windowId && b.nextIssued > 0) held.set(b.nextWindowId, (held.get(b.nextWindowId) ?? 0) + b.nextIssued);
      });
      for (const [wid, credit] of held) maxOutstanding = Math.max(maxOutstanding, ((counts[k]!.get(wid)?.admitted ?? 0) + credit) / traffic[k]!.limit);
    }
    queue.after(opts.roundMs, sample);
  };
  queue.after(opts.roundMs / 2, sample);

  // Fast-path use is a steady-state figure: count from the end of the warm-up.
  let fastPathAtWarmup = 0;
  let offeredAtWarmup = 0;
  queue.at(START + WARMUP_MS, () => {
    fastPathAtWarmup = members.reduce((n, m) => n + m.node.stats.fastPath, 0);
    offeredAtWarmup = offered;
  });
  queue.runUntil(START + opts.durationMs);

  // Accuracy over the complete windows after the warm-up.
  let allowance = 0;
  let admitted = 0;
  let over = 0;
  let overF4 = 0;
  let under = 0;
  let within = 0;
  let windows = 0;
  let evalOffered = 0;
  let fairOffered = 0;
  let falseDenied = 0;
  for (const k of evaluated) {
    for (const [wid, c] of counts[k]!) {
      const start = windowStartMs(wid, opts.windowMs, offsets[k]!);
      if (start < START + WARMUP_MS || start + opts.windowMs > START + opts.durationMs) continue;
      const limit = traffic[k]!.limit;
      windows++;
      allowance += limit;
      admitted += c.admitted;
      evalOffered += c.offered;
      over += Math.max(0, c.admitted - limit);
      overF4 += Math.max(0, c.admitted - limit - c.selfGranted);
      under += Math.max(0, Math.min(c.offered, limit) - c.admitted);
      within += Math.min(c.offered, limit);
      if (c.offered <= limit) {
        fairOffered += c.offered;
        falseDenied += c.offered - c.admitted;
      }
    }
  }
  const all = [...members, ...retired];
  const fastPath = all.reduce((n, m) => n + m.node.stats.fastPath, 0);
  const rtts = [...bus.stats.fastPathRttMs].sort((a, b) => a - b);
  const pct = (x: number): number => Math.round(x * 10_000) / 10_000;
  const p99 = (xs: number[]): number | null =>
    xs.length
      ? pct(
          quantile(
            xs.sort((a, b) => a - b),
            0.99,
          ),
        )
      : null;
  let extra: AllocationFigures | undefined;
  if (opts.allocation !== undefined) {
    // Every window that has ended measured: the owners' last sweep may be 40 rounds old.
    for (const [i, m] of members.entries()) m.owner.sweep(clocks[i]!.now());
    const c = mergeConcentration(all.map((m) => m.owner.concentration()));
    extra = { allocation: opts.allocation, concentrationSamples: c.samples, concentrationP50: c.p50, concentrationP95: c.p95 };
  }
  const result: SimResult = {
    scenario: scenario.name,
    nodes: opts.nodes,
    seed: opts.seed,
    windowMs: opts.windowMs,
    windows,
    allowance,
    offered: evalOffered,
    admitted,
    overPct: pct((100 * over) / Math.max(1, allowance)),
    overF4Pct: pct((100 * overF4) / Math.max(1, allowance)),
    underPct: pct((100 * under) / Math.max(1, within)),
    falseDenialPct: pct((100 * falseDenied) / Math.max(1, fairOffered)),
    fastPathPct: pct((100 * (fastPath - fastPathAtWarmup)) / Math.max(1, offered - offeredAtWarmup)),
    fastPathRttP50Ms: rtts.length ? pct(quantile(rtts, 0.5)) : null,
    fastPathRttP99Ms: rtts.length ? pct(quantile(rtts, 0.99)) : null,
    foldAgeOtherP99Rounds: p99(ages.other),
    foldAgeTopP99Rounds: p99(ages.top),
    maxOutstandingRatio: pct(maxOutstanding),
    selfGrants: all.reduce((n, m) => n + m.node.stats.selfGrants, 0),
    messagesPerNodePerSec: Math.round(bus.stats.messages / opts.nodes / (opts.durationMs / 1000)),
    invariantViolations,
  };
  return extra === undefined ? result : { ...result, ...extra };
}

/** One single-window plan per distinct limit, resolved once. */
function compileLimits(traffic: readonly KeyTraffic[], windowMs: number, allocation?: Allocation): ResolvedLimits[] {
  const distinct = [...new Set(traffic.map((t) => t.limit))];
  const plans = Object.fromEntries(distinct.map((l) => [`p${l}`, { windows: [{ name: 'w', limit: l, windowMs }], ...(allocation === undefined ? {} : { allocation }) }]));
  const tenants = Object.fromEntries(distinct.map((l) => [`t${l}`, { plan: `p${l}` }]));
  const policy = compilePolicy({ version: 1, plans, tenants, defaultPlan: `p${distinct[0]}`, anonymousPlan: `p${distinct[0]}` });
  return traffic.map((t) => policy.limitsFor('v1:none', `t${t.limit}`));
}

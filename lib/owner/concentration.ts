import type { Lease, Ledger } from '../ledger-store.js';

/*
 * Per-node-per-key concentration: how unevenly one key's traffic falls on the fleet's nodes. The
 * leasing protocol exists for uneven, connection-pinned traffic; if traffic is evenly spread, a fixed
 * 1/fleet share of each window is as accurate and much simpler. This is the measurement that decides
 * between them (the gate: the p95 ratio to uniform within GATE_RATIO → fixed share).
 *
 * Measured by the owner, from what it already folds, when it drops a window's ledger (two rounds after
 * the window ended, its last reports in): per node the requests its leases saw in that window (each
 * report says how many, admitted or not), or spent if that is more.
 * ratio to uniform = fleet size × the busiest node's share of the window's requests: 1 when every node
 * took the same, the fleet size when one node took them all.
 */

/** Upper bounds of the histogram buckets (a ratio r falls in the first bucket whose bound is ≥ r). */
export const RATIO_BOUNDS: readonly number[] = Object.freeze([1.1, 1.2, 1.3, 1.4, 1.5, 1.75, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16, 20, 25, 32, 40, 50, 64, 100, 128, 256, 512, 1024, 4096]);
/** The gate: a p95 ratio to uniform at or below this means traffic is evenly spread (fixed share). */
export const GATE_RATIO = 1.5;
/**
 * A window is sampled only when it had at least this many requests per member of the fleet. Below
 * it chance alone makes evenly spread traffic look concentrated: the busiest of F nodes sharing N
 * requests at random reads about 1 + √(2 ln F · F / N), 1.2 at 3 nodes and 1.35 at 20 with 50 a node.
 */
export const MIN_PER_NODE = 50;
/** Key windows kept (the most recent ones): the memory bound, about 1 KiB. */
export const SAMPLE_CAPACITY = 1024;
/** Samples the gate wants before it gives a verdict. */
export const MIN_SAMPLES = 100;

/** What an owner (or the fleet, merged) measured: the distribution of the ratio to uniform. */
export interface ConcentrationSummary {
  /** Key windows measured (the most recent, at most SAMPLE_CAPACITY per owner). */
  readonly samples: number;
  /** Median and 95th percentile ratio to uniform (upper bounds of their histogram buckets); null without samples. */
  readonly p50: number | null;
  readonly p95: number | null;
  /** [bucket upper bound, key windows] for every bucket that has any, ascending. */
  readonly histogram: ReadonlyArray<readonly [number, number]>;
}

/** The gate's answer: lease (traffic is concentrated), a fixed share suffices, or too few samples yet. */
export type GateVerdict = 'leasing' | 'fixed-share' | 'insufficient';

/** Bucket index of a ratio. */
function bucketOf(ratio: number): number {
  for (let i = 0; i < RATIO_BOUNDS.length; i++) if (ratio <= RATIO_BOUNDS[i]!) return i;
  return RATIO_BOUNDS.length - 1;
}

/**
 * The ratio to uniform of one ended window, or undefined when it is not sampled (fewer than
 * MIN_PER_NODE requests per member). Requests offered, admitted or not: what a node admitted is
 * capped by its credit — under a fixed share, at the share, which would make any traffic look even.
 * Leases of one node (its epochs, its bucket lives) add up; an owner's floats hold no requests of
 * their own (what moved out of them is spent by nodes' leases).
 */
export function ratioToUniform(l: Ledger, fleet: number): number | undefined {
  const f = Math.max(1, fleet);
  // Offered: what the node saw, or what it admitted if more (a release that reports no `seen`).
  const offered = (lease: Lease): number => (lease.float ? 0 : Math.max(lease.seen, lease.spent));
  // Most ended windows are quiet: summed first, so they are dropped before any per-node map is built.
  let total = 0;
  for (const lease of l.leases) total += Math.max(0, offered(lease));
  if (total < MIN_PER_NODE * f) return undefined;
  let busiest = 0;
  const perNode = new Map<string, number>();
  for (const lease of l.leases) {
    const o = offered(lease);
    if (o <= 0) continue;
    const n = (perNode.get(lease.nodeId) ?? 0) + o;
    perNode.set(lease.nodeId, n);
    if (n > busiest) busiest = n;
  }
  return (f * busiest) / total;
}

/**
 * The most recent SAMPLE_CAPACITY ratios an owner measured, kept as bucket indices in a ring with a
 * count per bucket: O(1) per sample, a fixed few KiB, the summary without sorting.
 */
export class Concentration {
  private readonly ring = new Uint8Array(SAMPLE_CAPACITY);
  private readonly counts = new Uint32Array(RATIO_BOUNDS.length);
  private size = 0;
  private next = 0;

  /** Measures an ended window's ledger (if it had requests enough), with the fleet size of now. */
  observe(l: Ledger, fleet: number): void {
    const r = ratioToUniform(l, fleet);
    if (r !== undefined) this.add(r);
  }

  /** Adds one ratio; the oldest drops out once SAMPLE_CAPACITY are held. */
  add(ratio: number): void {
    const b = bucketOf(ratio);
    if (this.size === SAMPLE_CAPACITY) this.counts[this.ring[this.next]!]!--;
    else this.size++;
    this.ring[this.next] = b;
    this.counts[b]!++;
    this.next = (this.next + 1) % SAMPLE_CAPACITY;
  }

  summary(): ConcentrationSummary {
    const histogram: Array<[number, number]> = [];
    this.counts.forEach((n, i) => n > 0 && histogram.push([RATIO_BOUNDS[i]!, n]));
    return summarize(histogram);
  }
}

/** The summary of a histogram ([bound, count], ascending): quantiles by nearest rank, as `lib/quantile.ts`. */
function summarize(histogram: ReadonlyArray<readonly [number, number]>): ConcentrationSummary {
  const samples = histogram.reduce((n, [, c]) => n + c, 0);
  const at = (q: number): number | null => {
    if (samples === 0) return null;
    const rank = Math.min(samples - 1, Math.floor(q * samples));
    let seen = 0;
    for (const [bound, c] of histogram) if ((seen += c) > rank) return bound;
    return histogram[histogram.length - 1]![0];
  };
  return { samples, p50: at(0.5), p95: at(0.95), histogram };
}

/**
 * Several owners' summaries as one (the fleet's): their histograms added bucket by bucket. A bucket
 * bound this release does not know (a peer of another release) is kept as it is, in order.
 */
export function mergeConcentration(parts: ReadonlyArray<ConcentrationSummary | undefined>): ConcentrationSummary {
  const byBound = new Map<number, number>();
  for (const p of parts) {
    // Read from what other processes published: anything not shaped as a histogram is skipped.
    if (!Array.isArray(p?.histogram)) continue;
    for (const entry of p.histogram) {
      if (!Array.isArray(entry)) continue;
      const [bound, count] = entry as unknown[];
      if (typeof bound !== 'number' || typeof count !== 'number') continue;
      if (Number.isFinite(bound) && Number.isSafeInteger(count) && count > 0) byBound.set(bound, (byBound.get(bound) ?? 0) + count);
    }
  }
  return summarize([...byBound].sort((a, b) => a[0] - b[0]));
}

/** The gate over a summary: fixed share when the p95 ratio is within GATE_RATIO, with MIN_SAMPLES at least. */
export function gateVerdict(s: ConcentrationSummary): GateVerdict {
  if (s.samples < MIN_SAMPLES || s.p95 === null) return 'insufficient';
  return s.p95 <= GATE_RATIO ? 'fixed-share' : 'leasing';
}

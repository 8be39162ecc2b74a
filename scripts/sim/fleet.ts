import { MemoryBus } from '../../bus/memory.js';
import { joinFleet } from '../../bus/member.js';
import type { Clock } from '../../lib/clock.js';
import type { FoldOwner } from '../../lib/fold-owner.js';
import type { LeaseNode } from '../../lib/lease-node.js';
import type { EventQueue } from './queue.js';
import type { SimOptions } from './run.js';
import type { KeyTraffic, Scenario } from './scenarios.js';

/**
 * The simulated fleet of one run (`run.ts`): its members on the in-memory bus, their rounds, the
 * scenario's faults (isolations, pauses, clock steps, restarts) and the choice of node for a request.
 */

/** Virtual time at which a run starts, ms. */
export const START = 1_800_000_000_000;

/** One node process: its lease node and its fold owner. */
export interface Member {
  node: LeaseNode;
  owner: FoldOwner;
}

/** What a run reads of its fleet; `members` and `retired` change as nodes restart. */
export interface Fleet {
  readonly bus: MemoryBus;
  /**
   * Each node's wall clock: virtual time plus its offset, which steps (`scenario.clockSteps`); window
   * ids come from it. Its monotonic clock is the virtual one and never steps. The bus keeps the virtual
   * clock (Redis's).
   */
  readonly clocks: readonly Clock[];
  /** Each node's current member; a restart replaces it. */
  readonly members: Member[];
  /** Members replaced by a restart. */
  readonly retired: Member[];
  /** Fold ages of reports folded from `agesFromMs` on, in rounds, per class of key. */
  readonly ages: { readonly top: number[]; readonly other: number[] };
  /** Until when each node's process is paused (virtual ms; in the past when it runs). */
  readonly pausedUntil: readonly number[];
  paused(i: number): boolean;
  /** The node a request of `t` goes to: its pinned node, else a random (or weighted) one, never a drained one. */
  pickNode(t: KeyTraffic): number;
}

/**
 * Joins `opts.nodes` members to a bus with `scenario`'s message faults, and schedules on `queue` every
 * node's rounds, then the scenario's isolations, pauses, clock steps and restarts.
 */
export function startFleet(scenario: Scenario, opts: SimOptions, queue: EventQueue, random: () => number, agesFromMs: number): Fleet {
  const clock = queue.clock;
  const isolated = new Set<string>();
  const drained = new Set<number>();
  const pausedUntil = new Array<number>(opts.nodes).fill(0);
  const paused = (i: number): boolean => pausedUntil[i]! > clock.now();
  const wallOffset = Array.from({ length: opts.nodes }, (_, i) => scenario.clockOffsets?.[i] ?? 0);
  const clocks: Clock[] = wallOffset.map((_, i) => ({ now: () => clock.now() + wallOffset[i]!, monotonic: () => clock.monotonic() }));
  const bus = new MemoryBus({
    shards: opts.shards,
    roundMs: opts.roundMs,
    clock,
    scheduler: queue,
    random,
    logRetentionMs: 2 * opts.windowMs + 4 * opts.roundMs,
    faults: {
      latencyMs: opts.latencyMs,
      jitterMs: opts.jitterMs,
      ...(opts.tail !== undefined ? { tail: opts.tail } : {}),
      loss: scenario.loss ?? 0,
      duplicate: scenario.duplicate ?? 0,
      reorderMs: scenario.reorderMs ?? 0,
      blocked: (from, to) => from !== to && (isolated.has(from) || isolated.has(to)),
      pausedUntil: (id) => pausedUntil[Number(id.slice(1))] ?? 0,
    },
  });
  const settings = (i: number, epoch: number) => ({
    nodeId: `n${i}`,
    nodeEpoch: `n${i}-e${epoch}`,
    shards: opts.shards,
    maxBuckets: 50_000,
    roundMs: opts.roundMs,
    fastPathDeadlineMs: 1,
    headroom: 1.25,
    reserveRatio: 0.02,
    degradedAfterMs: 30_000,
  });
  const ages = { top: [] as number[], other: [] as number[] };
  const join = (i: number, epoch: number): Member => {
    const m = joinFleet(bus, settings(i, epoch), clocks[i]!);
    m.owner.foldAges.watcher = (ms, top) => {
      if (clock.now() >= agesFromMs) (top ? ages.top : ages.other).push(ms / opts.roundMs);
    };
    return m;
  };
  const members: Member[] = [];
  for (let i = 0; i < opts.nodes; i++) members.push(join(i, 1));
  const retired: Member[] = [];

  // Rounds: every node every T, at its own phase.
  for (let i = 0; i < opts.nodes; i++) {
    const tick = (): void => {
      // A paused process's timer fires once, when it resumes.
      if (paused(i)) return void queue.at(pausedUntil[i]!, tick);
      members[i]!.node.endRound();
      if (members[i]!.node.round % 40 === 0) members[i]!.owner.sweep(clocks[i]!.now());
      queue.after(opts.roundMs, tick);
    };
    queue.after(random() * opts.roundMs, tick);
  }

  // Faults.
  for (const iso of scenario.isolations ?? []) {
    queue.at(START + iso.fromMs, () => {
      isolated.add(`n${iso.node}`);
      if (iso.drained) drained.add(iso.node);
    });
    queue.at(START + iso.toMs, () => {
      isolated.delete(`n${iso.node}`);
      drained.delete(iso.node);
    });
  }
  for (const p of scenario.pauses ?? []) {
    queue.at(START + p.atMs, () => {
      pausedUntil[p.node] = Math.max(pausedUntil[p.node]!, START + p.atMs + p.ms);
    });
  }
  for (const c of scenario.clockSteps ?? []) queue.at(START + c.atMs, () => (wallOffset[c.node] = c.toMs));
  for (const r of scenario.restarts ?? []) {
    queue.at(START + r.atMs, () => {
      isolated.add(`n${r.node}`);
      drained.add(r.node);
    });
    queue.at(START + r.atMs + r.downMs, () => {
      retired.push(members[r.node]!);
      members[r.node] = join(r.node, 2);
      isolated.delete(`n${r.node}`);
      drained.delete(r.node);
    });
  }

  const pickNode = (t: KeyTraffic): number => {
    if (t.pinnedNode !== undefined && !drained.has(t.pinnedNode)) return t.pinnedNode;
    for (;;) {
      const n = t.nodeWeights === undefined ? Math.floor(random() * opts.nodes) : weighted(t.nodeWeights, random());
      if (!drained.has(n)) return n;
    }
  };
  return { bus, clocks, members, retired, ages, pausedUntil, paused, pickNode };
}

/** Index of the first cumulative weight above `u`. */
function weighted(cumulative: readonly number[], u: number): number {
  let lo = 0;
  let hi = cumulative.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cumulative[mid]! > u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

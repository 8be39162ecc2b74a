import type { RequestHandler } from 'express';
import { Counter, Gauge, Registry, type Metric } from 'prom-client';
import { ConfigError } from '../lib/errors.js';
import type { LoopStalls } from '../bus/loop-stall.js';
import type { LimitEventStats } from '../bus/limit-event.js';
import type { Bus } from '../bus/types.js';
import type { FoldOwner } from '../lib/fold-owner.js';
import type { Enforcer } from '../lib/node-contract.js';
import { addOwnerMetrics } from './owner-metrics.js';
import { Timings, TimingsHistogram } from './timings.js';
import type { LimiterStats } from './types.js';

/** What the limiter's metrics are read from: its counters, its node and owner, and the bus. */
export interface MetricSources {
  readonly nodeId: string;
  readonly stats: Readonly<LimiterStats>;
  readonly node: Enforcer;
  /** The shard-owner side and the bus: absent in a fleet of one, which counts everything itself. */
  readonly owner: FoldOwner | undefined;
  readonly bus: Bus | undefined;
  /** Credit committed over the windows running, and their allowance (L2: committed ≤ allowance). */
  readonly leases: (nowMs: number) => { committed: number; allowance: number };
  /** This process's event-loop stalls. */
  readonly loop: LoopStalls;
  /** The limit-event log (with Redis): what became of the refusals it was given. */
  readonly events?: { readonly stats: LimitEventStats };
  /** Stored policy and kill-switch records this node refused, by reason (with Redis). */
  readonly policyRejections?: () => Readonly<Record<string, number>> | undefined;
}

/**
 * Decisions made without waiting are timed one in this many, each sample counted this many times:
 * two clock readings would cost about as much as such a decision. Every one that waits is timed.
 */
const SAMPLE = 32;

/** One open limiter as the process's metrics see it. */
export interface Member {
  readonly src: MetricSources;
  readonly decision: Timings;
  readonly fastPath: Timings;
}

/** A metric's collect callback: its series reset, then set afresh from the limiters' counters. */
function scraped<T extends { reset(): void }>(fill: (m: T) => void): (this: T) => void {
  return function (this: T) {
    this.reset();
    fill(this);
  };
}

/** Sets a counter's series of `node` to an absolute value read from a cumulative source at scrape time. */
function mirror(counter: Counter<string>, node: string, value: number, labels: Record<string, string> = {}): void {
  counter.inc({ ...labels, node }, value);
}

/**
 * The metrics of every open limiter in this process: one set of metric objects, each series labelled
 * `node`, read from the limiters' counters when scraped. Each limiter's registry holds these same
 * objects, so registries merge (`Registry.merge`) and any of them serves every open limiter.
 */
class ProcessMetrics {
  readonly members = new Map<string, Member>();
  /** Every metric, by name. */
  readonly all = new Map<string, Metric<string> | TimingsHistogram<Member>>();

  constructor() {
    const members = this.members;
    const each = (f: (src: MetricSources, node: string) => void): void => {
      for (const [node, m] of members) f(m.src, node);
    };
    for (const h of [
      new TimingsHistogram(
        'fleet_ratelimit_decision_seconds',
        `Time from the request reaching the limiter to its decision. Decisions that did not wait for a shard owner are sampled, one in ${SAMPLE} timed and counted ${SAMPLE} times.`,
        (m) => m.decision,
        members,
      ),
      new TimingsHistogram('fleet_ratelimit_fast_path_seconds', 'Decisions that asked a shard owner (fast path): time to the answer or the deadline.', (m) => m.fastPath, members),
    ])
      this.all.set(h.name, h);
    const counter = (name: string, help: string, labelNames: string[], collect: (c: Counter<string>) => void): void => {
      this.all.set(name, new Counter({ name, help, labelNames: ['node', ...labelNames], registers: [], collect: scraped(collect) }));
    };
    const gauge = (name: string, help: string, labelNames: string[], collect: (g: Gauge<string>) => void): void => {
      this.all.set(name, new Gauge({ name, help, labelNames: ['node', ...labelNames], registers: [], collect: scraped(collect) }));
    };
    const fromNode = (name: string, help: string, read: (src: MetricSources) => number): void => counter(name, help, [], (c) => each((src, node) => mirror(c, node, read(src))));
    counter(
      'fleet_ratelimit_decisions_total',
      'Decisions by class: admitted, quota (429), capacity (503), fail_open (admitted on a limiter fault), fail_closed (503), bypassed (kill switch off), shadow (a would-be 429 admitted in shadow mode).',
      ['class'],
      (c) =>
        each(({ stats: s }, node) => {
          for (const [cls, n] of [
            ['admitted', s.admitted],
            ['quota', s.quotaDenied],
            ['capacity', s.capacityDenied],
            ['fail_open', s.failOpen],
            ['fail_closed', s.failClosed],
            ['bypassed', s.bypassed],
            ['shadow', s.shadowDenied],
          ] as const)
            mirror(c, node, n, { class: cls });
        }),
    );
    fromNode(
      'fleet_ratelimit_dual_run_refusals_total',
      'Refusals a plan run in shadow beside the enforced one (a dual run) would have made; those requests were decided by the enforced plan.',
      (src) => src.stats.dualRunDenied,
    );
    fromNode('fleet_ratelimit_skipped_total', 'Requests the skip option let through unlimited (not decisions: neither counted nor refused).', (src) => src.stats.skipped);
    fromNode('fleet_ratelimit_fast_path_total', 'Asks to a shard owner on the request path (first sight, or credit short).', (src) => src.node.stats.fastPath);
    fromNode('fleet_ratelimit_fast_path_timeouts_total', 'Asks that missed the fast-path deadline (their requests were denied).', (src) => src.node.stats.fastPathTimeouts);
    fromNode('fleet_ratelimit_rounds_total', 'Reconciliation rounds this node ended.', (src) => src.node.round);
    fromNode('fleet_ratelimit_reports_total', 'Report batches sent (at most one per shard per round); divide by rounds for reports per round.', (src) => src.node.stats.reports);
    fromNode('fleet_ratelimit_grants_applied_total', 'Grants this node applied.', (src) => src.node.stats.grantsApplied);
    fromNode('fleet_ratelimit_self_grants_total', 'Boundary self-grants without owner contact (F4).', (src) => src.node.stats.selfGrants);
    counter(
      'fleet_ratelimit_events_dropped_total',
      'Refusals (429, 503) counted in no stored limit event: pending (more distinct aggregates than maxPending held in memory) or write (the write to Redis failed).',
      ['reason'],
      (c) =>
        each(({ events: e }, node) => {
          if (e !== undefined)
            for (const [reason, n] of [
              ['pending', e.stats.droppedPending],
              ['write', e.stats.droppedWrite],
            ] as const)
              mirror(c, node, n, { reason });
        }),
    );
    fromNode(
      'fleet_ratelimit_events_written_total',
      'Limit events written to Redis: one per key id, class, window name, route class and window, counting its refusals.',
      (src) => src.events?.stats.written ?? 0,
    );
    fromNode(
      'fleet_ratelimit_events_evicted_total',
      "Stored limit events this node's writes trimmed off the stream to hold its byte budget (redis.events.maxBytes), before their retention age.",
      (src) => src.events?.stats.evicted ?? 0,
    );
    counter(
      'fleet_ratelimit_bus_rejections_total',
      'Bus entries and messages rejected: version, secret, mac, malformed, fold (could not be applied), stale_owner (from a deposed owner).',
      ['reason'],
      (c) =>
        each((src, node) => {
          const bus = src.bus?.counters;
          for (const [reason, n] of Object.entries(bus?.rejected ?? {})) mirror(c, node, n, { reason });
          mirror(c, node, (bus?.staleMessages ?? 0) + src.node.stats.staleOwnerEpoch, { reason: 'stale_owner' });
        }),
    );
    counter(
      'fleet_ratelimit_policy_rejections_total',
      'Stored policy and kill-switch records refused (the last good ones stay in force): unsigned, secret (unknown version), mac (forged), malformed, replay (older than the one in force).',
      ['reason'],
      (c) => each((src, node) => Object.entries(src.policyRejections?.() ?? {}).forEach(([reason, n]) => mirror(c, node, n, { reason }))),
    );
    counter('fleet_ratelimit_fast_path_asks_total', 'Asks sent to remote shard owners, by how they travelled: direct (the TCP channel) or redis (pub/sub, the fallback).', ['transport'], (c) =>
      each((src, node) => {
        const bus = src.bus?.counters;
        if (bus === undefined) return;
        mirror(c, node, bus.asksDirect, { transport: 'direct' });
        mirror(c, node, bus.asksSent - bus.asksDirect, { transport: 'redis' });
      }),
    );
    gauge('fleet_ratelimit_fold_age_seconds', 'Longest silence of any shard owner toward this node: how old the newest fold of its reports may be.', [], (g) =>
      each((src, node) => g.set({ node }, src.node.longestSilenceMs() / 1000)),
    );
    gauge('fleet_ratelimit_event_loop_lag_seconds', "Worst lateness of this process's event loop since the last scrape (its timer, due every 10 ms).", [], (g) =>
      each((src, node) => g.set({ node }, src.loop.takeWorstLag() / 1000)),
    );
    fromNode(
      'fleet_ratelimit_event_loop_stalled_seconds_total',
      "Time this process's event loop was stalled (over 5 ms late): not counted as owner or Redis silence.",
      (src) => src.loop.stalledMs / 1000,
    );
    gauge('fleet_ratelimit_degraded', '1 while this node is degraded (F5): no owner contact for longer than degradedAfterMs.', [], (g) =>
      each((src, node) => g.set({ node }, src.node.degraded ? 1 : 0)),
    );
    gauge('fleet_ratelimit_buckets', 'Buckets held by this node (one per key and window length).', [], (g) => each((src, node) => g.set({ node }, src.node.buckets.size)));
    gauge('fleet_ratelimit_fleet_size', 'Members of the fleet as this node sees them.', [], (g) => each((src, node) => g.set({ node }, src.bus?.fleetSize() ?? 1)));
    addOwnerMetrics({ members, each, gauge, fromNode, histogram: (h) => this.all.set(h.name, h) });
  }

  /** Registers every metric into `registry`; a foreign metric of one of our names is a ConfigError. */
  registerInto(registry: Registry): void {
    const clash = [...this.all].filter(([name, m]) => {
      const there = registry.getSingleMetric(name);
      return there !== undefined && there !== (m as unknown);
    });
    if (clash.length) {
      throw new ConfigError(clash.map(([name]) => ({ path: 'registry', message: `already holds another metric named ${name}` })));
    }
    for (const m of this.all.values()) registry.registerMetric(m as Metric<string>);
  }
}

let processMetrics: ProcessMetrics | undefined;

/**
 * Prometheus metrics of one limiter (O1), every series labelled `node` with its node id. Only the
 * decision timings are touched on the request path (a count, a sampled timing, no allocation); everything else is
 * read from the limiter's counters when scraped.
 */
export class LimiterMetrics {
  readonly registry: Registry;
  private readonly decision = new Timings();
  private readonly fastPath = new Timings();
  private readonly shared: ProcessMetrics;
  private src: MetricSources | undefined;

  /**
   * Registers this process's metrics into `registry` (default: a new one); throws a ConfigError
   * (`registry`) if it holds another metric under one of their names. Series appear once `attach`ed.
   */
  constructor(registry?: Registry) {
    this.shared = processMetrics ??= new ProcessMetrics();
    this.registry = registry ?? new Registry();
    this.shared.registerInto(this.registry);
  }

  /** Adds this limiter's series, labelled `node` with `src.nodeId` (unique among open limiters). */
  attach(src: MetricSources): void {
    this.src = src;
    this.shared.members.set(src.nodeId, { src, decision: this.decision, fastPath: this.fastPath });
  }

  private decisions = 0;

  /** A decision begins: a clock reading for one decision in `SAMPLE`, else NaN (not timed unless it waits). */
  start(): number {
    return (++this.decisions & (SAMPLE - 1)) === 0 ? performance.now() : Number.NaN;
  }

  /** A decision made without waiting for an owner, begun at `started` (from `start()`). */
  decided(started: number): void {
    if (started === started) this.decision.observe((performance.now() - started) / 1000, SAMPLE);
  }

  /** A decision that waited for an owner's answer (the fast path), timed from `since`. */
  waited(since: number): void {
    const seconds = (performance.now() - since) / 1000;
    this.decision.observe(seconds, 1);
    this.fastPath.observe(seconds, 1);
  }

  /** Drops this limiter's series (on close); idempotent. */
  close(): void {
    const src = this.src;
    if (src !== undefined && this.shared.members.get(src.nodeId)?.src === src) this.shared.members.delete(src.nodeId);
  }
}

/** An Express handler serving a registry in the Prometheus text format. */
export function metricsHandler(registry: Registry): RequestHandler {
  return (_req, res, next) => {
    registry.metrics().then((text) => {
      res.setHeader('Content-Type', registry.contentType);
      res.end(text);
    }, next);
  };
}

import type { RequestHandler } from 'express';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { LoopStalls } from '../bus/loop-stall.js';
import type { Bus } from '../bus/types.js';
import type { FoldOwner } from '../lib/fold-owner.js';
import type { LeaseNode } from '../lib/lease-node.js';

/** What the limiter's metrics are read from: its counters, its node and owner, and the bus. */
export interface MetricSources {
  readonly nodeId: string;
  readonly stats: { admitted: number; quotaDenied: number; capacityDenied: number; failOpen: number; failClosed: number; bypassed: number; skipped: number };
  readonly node: LeaseNode;
  readonly owner: FoldOwner;
  readonly bus: Bus;
  /** This process's event-loop stalls. */
  readonly loop: LoopStalls;
  /** The limit-event log (with Redis): its count of events lost to a flood or a failed write. */
  readonly events?: { readonly dropped: number };
  /** Stored policy and kill-switch records this node refused, by reason (with Redis). */
  readonly policyRejections?: () => Readonly<Record<string, number>> | undefined;
}

/** Bus counters some transports keep (the Redis bus does); read if present. */
interface BusStats {
  readonly stats?: { rejected?: Record<string, number>; staleMessages?: number; asksSent?: number; asksDirect?: number; grantsWithheld?: number };
}

/** Seconds, from 1 µs (a decision from held credit) to 25 ms (a fast path that waited). */
const DECISION_BUCKETS = [1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 2.5e-2];

/** Sets a counter to an absolute value read from a cumulative source at scrape time. */
function mirror(counter: Counter<string>, value: number): void {
  counter.reset();
  counter.inc(value);
}

/**
 * Prometheus metrics of one limiter (O1), in their own registry, every series labelled with the
 * node id. Only the decision histogram is touched on the request path; everything else is read from
 * the limiter's counters when scraped.
 */
export class LimiterMetrics {
  readonly registry = new Registry();
  private readonly decision: Histogram<string>;
  private readonly fastPath: Histogram<string>;

  constructor(src: MetricSources) {
    const r = this.registry;
    r.setDefaultLabels({ node: src.nodeId });
    this.decision = new Histogram({ name: 'fleet_ratelimit_decision_seconds', help: 'Time from the request reaching the limiter to its decision.', buckets: DECISION_BUCKETS, registers: [r] });
    this.fastPath = new Histogram({ name: 'fleet_ratelimit_fast_path_seconds', help: 'Decisions that asked a shard owner (fast path): time to the answer or the deadline.', buckets: DECISION_BUCKETS, registers: [r] });
    new Counter({
      name: 'fleet_ratelimit_decisions_total',
      help: 'Decisions by class: admitted, quota (429), capacity (503), fail_open (admitted on a limiter fault), fail_closed (503), bypassed (kill switch off).',
      labelNames: ['class'],
      registers: [r],
      collect() {
        this.reset();
        const s = src.stats;
        for (const [cls, n] of [['admitted', s.admitted], ['quota', s.quotaDenied], ['capacity', s.capacityDenied], ['fail_open', s.failOpen], ['fail_closed', s.failClosed], ['bypassed', s.bypassed]] as const) this.inc({ class: cls }, n);
      },
    });
    const fromNode = (name: string, help: string, read: () => number): Counter<string> =>
      new Counter({ name, help, registers: [r], collect() { mirror(this, read()); } });
    fromNode('fleet_ratelimit_skipped_total', 'Requests the skip option let through unlimited (not decisions: neither counted nor refused).', () => src.stats.skipped);
    fromNode('fleet_ratelimit_fast_path_total', 'Asks to a shard owner on the request path (first sight, or credit short).', () => src.node.stats.fastPath);
    fromNode('fleet_ratelimit_fast_path_timeouts_total', 'Asks that missed the fast-path deadline (their requests were denied).', () => src.node.stats.fastPathTimeouts);
    fromNode('fleet_ratelimit_rounds_total', 'Reconciliation rounds this node ended.', () => src.node.round);
    fromNode('fleet_ratelimit_reports_total', 'Report batches sent (at most one per shard per round); divide by rounds for reports per round.', () => src.node.stats.reports);
    fromNode('fleet_ratelimit_grants_applied_total', 'Grants this node applied.', () => src.node.stats.grantsApplied);
    fromNode('fleet_ratelimit_grants_issued_total', 'Grants this node issued as a shard owner.', () => src.owner.stats.grants);
    fromNode('fleet_ratelimit_float_answers_total', 'As a shard owner: asks answered from its float (credit already on record), without waiting for a log write.', () => src.owner.stats.floatAnswers);
    fromNode('fleet_ratelimit_self_grants_total', 'Boundary self-grants without owner contact (F4).', () => src.node.stats.selfGrants);
    fromNode('fleet_ratelimit_events_dropped_total', 'Limit events not stored: more than 2000 in a quarter second, or a failed write.', () => src.events?.dropped ?? 0);
    new Counter({
      name: 'fleet_ratelimit_bus_rejections_total',
      help: 'Bus entries and messages rejected: version, secret, mac, malformed, fold (could not be applied), stale_owner (from a deposed owner).',
      labelNames: ['reason'],
      registers: [r],
      collect() {
        this.reset();
        const bus = (src.bus as unknown as BusStats).stats;
        for (const [reason, n] of Object.entries(bus?.rejected ?? {})) this.inc({ reason }, n);
        this.inc({ reason: 'stale_owner' }, (bus?.staleMessages ?? 0) + src.node.stats.staleOwnerEpoch);
      },
    });
    new Counter({
      name: 'fleet_ratelimit_policy_rejections_total',
      help: 'Stored policy and kill-switch records refused (the last good ones stay in force): unsigned, secret (unknown version), mac (forged), malformed, replay (older than the one in force).',
      labelNames: ['reason'],
      registers: [r],
      collect() {
        this.reset();
        for (const [reason, n] of Object.entries(src.policyRejections?.() ?? {})) this.inc({ reason }, n);
      },
    });
    new Counter({
      name: 'fleet_ratelimit_fast_path_asks_total',
      help: 'Asks sent to remote shard owners, by how they travelled: direct (the TCP channel) or redis (pub/sub, the fallback).',
      labelNames: ['transport'],
      registers: [r],
      collect() {
        this.reset();
        const bus = (src.bus as unknown as BusStats).stats;
        if (bus?.asksSent === undefined) return;
        this.inc({ transport: 'direct' }, bus.asksDirect ?? 0);
        this.inc({ transport: 'redis' }, bus.asksSent - (bus.asksDirect ?? 0));
      },
    });
    new Counter({
      name: 'fleet_ratelimit_grants_withheld_total',
      help: 'As a shard owner: grants issued but never sent, because their log write failed or the log fence of a later owner refused it (accuracy lost, never safety).',
      registers: [r],
      collect() {
        mirror(this, (src.bus as unknown as BusStats).stats?.grantsWithheld ?? 0);
      },
    });
    new Gauge({
      name: 'fleet_ratelimit_fold_age_seconds',
      help: 'Longest silence of any shard owner toward this node: how old the newest fold of its reports may be.',
      registers: [r],
      collect() {
        this.set(src.node.longestSilenceMs() / 1000);
      },
    });
    new Gauge({
      name: 'fleet_ratelimit_event_loop_lag_seconds',
      help: 'Worst lateness of this process\'s event loop since the last scrape (its timer, due every 10 ms).',
      registers: [r],
      collect() {
        this.set(src.loop.takeWorstLag() / 1000);
      },
    });
    fromNode('fleet_ratelimit_event_loop_stalled_seconds_total', 'Time this process\'s event loop was stalled (over 5 ms late): not counted as owner or Redis silence.', () => src.loop.stalledMs / 1000);
    new Gauge({ name: 'fleet_ratelimit_degraded', help: '1 while this node is degraded (F5): no owner contact for longer than degradedAfterMs.', registers: [r], collect() { this.set(src.node.degraded ? 1 : 0); } });
    new Gauge({
      name: 'fleet_ratelimit_lease_credit',
      help: 'As a shard owner: credit committed on lease (issued + self-granted − released) and the allowance it is bounded by, over the windows running (L2: committed ≤ allowance).',
      labelNames: ['kind'],
      registers: [r],
      collect() {
        const t = src.owner.totals(Date.now());
        this.set({ kind: 'committed' }, t.committed);
        this.set({ kind: 'allowance' }, t.allowance);
      },
    });
    new Gauge({ name: 'fleet_ratelimit_buckets', help: 'Buckets held by this node (one per key and window length).', registers: [r], collect() { this.set(src.node.buckets.size); } });
    new Gauge({ name: 'fleet_ratelimit_fleet_size', help: 'Members of the fleet as this node sees them.', registers: [r], collect() { this.set(src.bus.fleetSize()); } });
  }

  /** Records a decision that took `ms` (and, if it asked an owner, the fast path too). */
  observe(ms: number, askedOwner: boolean): void {
    this.decision.observe(ms / 1000);
    if (askedOwner) this.fastPath.observe(ms / 1000);
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

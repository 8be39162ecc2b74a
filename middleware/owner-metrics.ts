import type { Gauge } from 'prom-client';
import { TOP_K } from '../lib/owner/fold-age.js';
import type { Member, MetricSources } from './metrics.js';
import { TimingsHistogram } from './timings.js';

/** How `metrics.ts` lets a group of metrics be defined: its members, its loop over them, its builders. */
export interface MetricBuilders {
  readonly members: ReadonlyMap<string, Member>;
  readonly each: (f: (src: MetricSources, node: string) => void) => void;
  readonly gauge: (name: string, help: string, labelNames: string[], collect: (g: Gauge<string>) => void) => void;
  readonly fromNode: (name: string, help: string, read: (src: MetricSources) => number) => void;
  readonly histogram: (h: TimingsHistogram<Member>) => void;
}

/**
 * The shard-owner side's metrics: what it issued and withheld, how fresh its folds are, the credit it
 * has on lease against the allowance (L2), and the concentration of keys' traffic it measured.
 * Zero or absent in a fleet of one, which has no owner (except `lease_credit`: its requests counted).
 */
export function addOwnerMetrics({ members, each, gauge, fromNode, histogram }: MetricBuilders): void {
  histogram(
    new TimingsHistogram(
      'fleet_ratelimit_report_fold_age_seconds',
      `As a shard owner: time from a report batch entering the bus to folding each report of it, for the owner's top ${TOP_K} keys by fold work (keys="top") and every other key (keys="other").`,
      (m) =>
        m.src.owner === undefined
          ? []
          : ([
              [{ keys: 'top' }, m.src.owner.foldAges.top],
              [{ keys: 'other' }, m.src.owner.foldAges.other],
            ] as const),
      members,
    ),
  );
  fromNode('fleet_ratelimit_grants_issued_total', 'Grants this node issued as a shard owner.', (src) => src.owner?.stats.grants ?? 0);
  fromNode(
    'fleet_ratelimit_float_answers_total',
    'As a shard owner: asks answered from its float (credit already on record), without waiting for a log write.',
    (src) => src.owner?.stats.floatAnswers ?? 0,
  );
  fromNode(
    'fleet_ratelimit_blanket_floats_total',
    'As a shard owner: windows whose first ask was answered from a float of one credit its shard’s blanket put on record, without a log write.',
    (src) => src.owner?.stats.blanketFloats ?? 0,
  );
  fromNode(
    'fleet_ratelimit_grants_withheld_total',
    'As a shard owner: grants issued but never sent, because their log write failed or the log fence of a later owner refused it (accuracy lost, never safety).',
    (src) => src.bus?.counters?.grantsWithheld ?? 0,
  );
  gauge(
    'fleet_ratelimit_lease_credit',
    'As a shard owner: credit committed on lease (issued + self-granted − released) and the allowance it is bounded by, over the windows running (L2: committed ≤ allowance). In a fleet of one: the requests counted.',
    ['kind'],
    (g) =>
      each((src, node) => {
        const t = src.leases(Date.now());
        g.set({ node, kind: 'committed' }, t.committed);
        g.set({ node, kind: 'allowance' }, t.allowance);
      }),
  );
  const concentration = (src: MetricSources) => src.owner?.concentration();
  gauge('fleet_ratelimit_concentration_ratio', 'As a shard owner: ratio to uniform (fleet × busiest node’s share of a key window) of windows swept lately, p50 and p95.', ['quantile'], (g) =>
    each((src, node) => {
      const c = concentration(src);
      if (c?.p50 == null || c.p95 == null) return;
      g.set({ node, quantile: '0.5' }, c.p50);
      g.set({ node, quantile: '0.95' }, c.p95);
    }),
  );
  gauge('fleet_ratelimit_concentration_windows', 'As a shard owner: key windows its concentration figures are measured over.', [], (g) =>
    each((src, node) => g.set({ node }, concentration(src)?.samples ?? 0)),
  );
}

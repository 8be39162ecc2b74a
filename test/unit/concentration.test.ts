import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { leaseFor, LedgerStore, type Ledger } from '../../lib/ledger-store.js';
import { Concentration, gateVerdict, GATE_RATIO, mergeConcentration, MIN_PER_NODE, MIN_SAMPLES, ratioToUniform, SAMPLE_CAPACITY } from '../../lib/owner/concentration.js';
import { shardOf, type Report, type ReportBatch } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

const KEY = 'v1:CONCENTRATIONCONCENTR';
const W = 1000;
const WID = 1_800_000;

/** A ledger whose nodes spent `spent[i]` (node `n<i>`), one lease each unless `leases` says more. */
function ledger(spent: number[], leases = 1): Ledger {
  const l = new LedgerStore((k, w) => shardOf(k, w, 8)).ledgerFor(KEY, WID, W, 100_000);
  spent.forEach((n, i) => {
    for (let j = 0; j < leases; j++) leaseFor(l, `n${i}`, `n${i}-e${j}`, 1).spent = Math.floor(n / leases) + (j === 0 ? n % leases : 0);
  });
  return l;
}

/** A summary of `n` ratios of `ratio` and `m` of `other`. */
function measured(n: number, ratio: number, m = 0, other = 20): Concentration {
  const c = new Concentration();
  for (let i = 0; i < n; i++) c.add(ratio);
  for (let i = 0; i < m; i++) c.add(other);
  return c;
}

describe('concentration: per-node-per-key share against uniform', () => {
  it('is fleet size × the busiest node’s share of a window: 1 evenly spread, the fleet size pinned', () => {
    expect(ratioToUniform(ledger([100, 100, 100, 100]), 4)).to.equal(1);
    expect(ratioToUniform(ledger([400, 0, 0, 0]), 4)).to.equal(4);
    expect(ratioToUniform(ledger([200, 100, 50, 50]), 4)).to.equal(2);
    // A node's leases (its epochs, its bucket lives) add up: still one node.
    expect(ratioToUniform(ledger([300, 100], 3), 4)).to.equal(3);
    // Nodes the fleet has but that saw none of the key count as members: 20 nodes, 2 busy ones.
    expect(ratioToUniform(ledger([500, 500]), 20)).to.equal(10);
  });

  it('samples only windows with MIN_PER_NODE requests per member, and ignores owners’ floats', () => {
    expect(ratioToUniform(ledger([MIN_PER_NODE * 4 - 1]), 4)).to.equal(undefined);
    expect(ratioToUniform(ledger([MIN_PER_NODE * 4]), 4)).to.equal(4);
    const l = ledger([150, 150]);
    const float = leaseFor(l, 'n0', 'float.n0-e0', 7);
    float.spent = 10_000; // a float never spends; a lease of its name is not a node's traffic
    expect(ratioToUniform(l, 2)).to.equal(1);
  });

  it('measures requests offered (a report’s seen), not only admitted: a node held to its share still shows', () => {
    // A fixed share of 1000 over 4 nodes: every node admitted 250 at most, but n0 saw 2500.
    const l = ledger([250, 250, 250, 250]);
    l.leases[0]!.seen = 2500;
    for (const x of l.leases.slice(1)) x.seen = 100; // saw less than admitted: never counted below it
    expect(ratioToUniform(l, 4)).to.equal((4 * 2500) / (2500 + 3 * 250));
  });

  it('keeps the most recent SAMPLE_CAPACITY windows, in histogram buckets', () => {
    const c = measured(SAMPLE_CAPACITY, 8);
    expect(c.summary()).to.deep.equal({ samples: SAMPLE_CAPACITY, p50: 8, p95: 8, histogram: [[8, SAMPLE_CAPACITY]] });
    for (let i = 0; i < SAMPLE_CAPACITY; i++) c.add(1);
    expect(c.summary()).to.deep.equal({ samples: SAMPLE_CAPACITY, p50: 1.1, p95: 1.1, histogram: [[1.1, SAMPLE_CAPACITY]] });
    // A ratio falls in the first bucket whose bound is at or above it.
    const b = new Concentration();
    for (const r of [1.5, 1.500001, 3.9, 5000]) b.add(r);
    expect(b.summary().histogram).to.deep.equal([
      [1.5, 1],
      [1.75, 1],
      [4, 1],
      [4096, 1],
    ]);
    expect(new Concentration().summary()).to.deep.equal({ samples: 0, p50: null, p95: null, histogram: [] });
  });

  it('gives the gate’s verdict by the p95 (nearest rank): fixed share within 1.5×, leasing above, none on too few', () => {
    expect(GATE_RATIO).to.equal(1.5);
    expect(gateVerdict(measured(96, 1.5, 4).summary())).to.equal('fixed-share');
    const leasing = measured(95, 1.5, 5).summary();
    expect(leasing.p95).to.equal(20);
    expect(leasing.p50).to.equal(1.5);
    expect(gateVerdict(leasing)).to.equal('leasing');
    expect(gateVerdict(measured(MIN_SAMPLES - 1, 1).summary())).to.equal('insufficient');
  });

  it('merges owners’ summaries bucket by bucket into the fleet’s, skipping what is not a count', () => {
    const fleet = mergeConcentration([measured(60, 1.2).summary(), undefined, measured(30, 1.2, 10, 16).summary()]);
    expect(fleet).to.deep.equal({
      samples: 100,
      p50: 1.2,
      p95: 16,
      histogram: [
        [1.2, 90],
        [16, 10],
      ],
    });
    const odd = mergeConcentration([{ samples: 3, p50: 1, p95: 1, histogram: [[1.1, 2], [7, 1] as const, [Number.NaN, 4], [3, -1]] }]);
    expect(odd.histogram).to.deep.equal([
      [1.1, 2],
      [7, 1],
    ]);
  });

  it('is measured by the owner when it sweeps a window’s ledger, from the spend its nodes reported', () => {
    const fleet = new FixedFleet(4);
    const clock = new FakeClock(WID * W + 100);
    const owner = new FoldOwner(ownerConfig(clock, fleet));
    const report = (node: string, spent: number, keyId = KEY): ReportBatch => {
      const r: Report = { keyId, windowId: WID, windowMs: W, limit: 100_000, lease: 1, seq: 1, spent, issued: 0, selfIssued: 0, released: 0, demand: 0, held: 0, selfGrant: false };
      return { shard: 0, nodeId: node, nodeEpoch: `${node}-e1`, round: 1, reports: [r] };
    };
    // Key one pinned to n0; key two spread over the four nodes; key three too quiet to tell.
    owner.onReports(report('n0', 400));
    for (const n of ['n0', 'n1', 'n2', 'n3']) owner.onReports(report(n, 100, 'v1:SPREADSPREADSPREADSPR'));
    owner.onReports(report('n1', 20, 'v1:QUIETQUIETQUIETQUIETQ'));
    owner.sweep(clock.now());
    expect(owner.concentration().samples).to.equal(0); // windows still running
    const end = Math.max(...[KEY, 'v1:SPREADSPREADSPREADSPR'].map((k) => windowEndMs(WID, W, phaseOffset(k, W))));
    clock.advance(end + 2 * 25 + 1000 - clock.now());
    owner.sweep(clock.now());
    expect(owner.concentration()).to.deep.equal({
      samples: 2,
      p50: 4,
      p95: 4,
      histogram: [
        [1.1, 1],
        [4, 1],
      ],
    });
  });
});

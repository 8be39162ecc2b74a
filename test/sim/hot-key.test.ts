import { expect } from 'chai';
import { FoldOwner } from '../../lib/fold-owner.js';
import { SCENARIOS, type Scenario } from '../../scripts/sim/scenarios.js';
import { simulate, type SimOptions } from '../../scripts/sim/run.js';

const BASE: SimOptions = { nodes: 20, seed: 1, durationMs: 6000, windowMs: 1000, roundMs: 25, latencyMs: 0.2, jitterMs: 0.1, shards: 64 };
const storm = SCENARIOS.find((s) => s.name === 'hot-key-storm')!;

/** The storm with the hot key at `times` its limit and its first `coTenants` co-tenants. */
function stormAt(times: number, coTenants: number): Scenario {
  return {
    ...storm,
    keys: (nodes, random, layout) =>
      storm
        .keys(nodes, random, layout)
        .slice(0, coTenants + 1)
        .map((t, i) => (i === 0 ? { ...t, rate: t.limit * times } : t)),
  };
}

/** Units of fold work (reports folded, asks answered) per key over a run: every owner's calls, counted. */
function foldWork(run: () => void): Map<string, number> {
  const work = new Map<string, number>();
  const add = (keyId: string): void => void work.set(keyId, (work.get(keyId) ?? 0) + 1);
  const { onReports, onCreditRequest } = FoldOwner.prototype;
  FoldOwner.prototype.onReports = function (this: FoldOwner, batch, queuedAt) {
    for (const r of batch.reports) add(r.keyId);
    return onReports.call(this, batch, queuedAt);
  };
  FoldOwner.prototype.onCreditRequest = function (this: FoldOwner, req) {
    add(req.keyId);
    return onCreditRequest.call(this, req);
  };
  try {
    run();
  } finally {
    FoldOwner.prototype.onReports = onReports;
    FoldOwner.prototype.onCreditRequest = onCreditRequest;
  }
  return work;
}

describe('hot-key isolation: a hot key on a shared shard does not delay its co-tenants’ folds', function () {
  this.timeout(120_000);

  it('hot-key storm: p99 fold age of the keys outside the owners’ top K stays within 2 rounds; the hot key is held to its allowance', () => {
    const r = simulate(storm, BASE);
    expect(r.foldAgeOtherP99Rounds).to.be.a('number').and.at.most(2);
    expect(r.foldAgeTopP99Rounds).to.be.a('number'); // the hot key is folded as a top key
    expect(r.windows).to.be.above(0);
    expect(r.overPct).to.be.at.most(2);
    expect(r.maxOutstandingRatio).to.be.at.most(1);
    expect(r.invariantViolations).to.equal(0);
  });

  it('a key’s fold work per round is bounded by the fleet, not by its traffic: ten times the requests, about the same work', () => {
    const rounds = BASE.durationMs / BASE.roundMs;
    const hotWork = (times: number): { hot: number; others: number } => {
      const work = foldWork(() => simulate(stormAt(times, 200), BASE));
      const hot = work.get(storm.keys(BASE.nodes, Math.random, BASE)[0]!.keyId!)!;
      const others = [...work.values()].reduce((a, b) => a + b, 0) - hot;
      return { hot: hot / rounds, others: others / rounds };
    };
    const at10 = hotWork(10);
    const at100 = hotWork(100);
    // One report per node per round, an ask now and then: not a hundred times a busy key's work.
    expect(at100.hot).to.be.at.most(2 * BASE.nodes);
    expect(at100.hot).to.be.below(1.5 * at10.hot);
    // The 200 co-tenants at 1 request a second each fold about as much as before.
    expect(at100.others).to.be.closeTo(at10.others, 0.2 * at10.others);
  });
});

import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { LeaseNode, type Denied } from '../../lib/lease-node.js';
import { compilePolicy } from '../../lib/policy.js';
import { shardOf, type Grant, type OwnerMessage } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { grantFor, RecordingLink } from '../support/links.js';
import { FixedFleet, nodeConfig, ownerConfig } from '../support/protocol.js';

const KEY = 'v1:FAILUREFAILUREFAILURE';
const hourly = compilePolicy({
  version: 1,
  defaultPlan: 'p',
  anonymousPlan: 'p',
  plans: { p: { windows: [{ name: 'w', limit: 1000, windowMs: 1000 }] } },
}).limitsFor(KEY, 't');
const offset = phaseOffset(KEY, 1000);
/** The same window, plentiful over the tests' 20 nodes (512 a node, `PLENTIFUL`, × 3): a standing lease. */
const plentiful = compilePolicy({
  version: 1,
  defaultPlan: 'p',
  anonymousPlan: 'p',
  plans: { p: { windows: [{ name: 'w', limit: 512 * 20 * 3, windowMs: 1000 }] } },
}).limitsFor(KEY, 't');

/** A node whose owner grants `grant` credit per ask while `link.up`; the clock starts mid-window. */
function setup(grant = 10) {
  const clock = new FakeClock(1_800_000_000_000);
  clock.set(windowEndMs(windowIdAt(clock.now(), 1000, offset), 1000, offset) + 100); // 100 ms into a window
  let issued = 0;
  let seq = 0;
  const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, (issued += grant), ++seq)));
  link.fleet = 20;
  const node = new LeaseNode(nodeConfig({ degradedAfterMs: 30_000 }), clock, link);
  const acquire = () => node.acquire(KEY, hourly) as Denied | { admitted: true };
  const toBoundary = () => clock.set(windowEndMs(windowIdAt(clock.now(), 1000, offset), 1000, offset));
  return { clock, link, node, acquire, toBoundary, reset: () => ((issued = 0), (seq = 0)) };
}

describe('failure timeline F1–F5, at its exact boundaries', () => {
  it('F1: with the owner gone, held credit keeps admitting and nothing waits', () => {
    const { link, acquire } = setup(10);
    acquire(); // asks once: 10 credit, 1 spent
    link.up = false;
    for (let i = 0; i < 9; i++) expect(acquire()).to.deep.equal({ admitted: true });
    expect(link.requests).to.have.length(1);
  });

  it('F2: the fast path is still tried after 49 ms of silence, not after 50 ms (2 rounds)', () => {
    const { link, acquire, clock, node } = setup(1);
    acquire(); // the one credit, spent
    link.up = false;
    clock.advance(49);
    node.endRound();
    acquire(); // asks (and the link, down, answers nothing)
    expect(link.requests).to.have.length(2);
    clock.advance(1);
    node.endRound();
    const r = acquire() as Denied;
    expect(r.admitted).to.equal(false);
    expect(r.unavailable).to.equal(false);
    expect(link.requests).to.have.length(2); // no ask at 50 ms of silence
  });

  it('F4: at a window boundary without owner contact, self-grants exactly 1/fleet and flags every later report', () => {
    const { link, acquire, node, toBoundary, clock } = setup(10);
    acquire();
    link.up = false;
    clock.advance(50);
    toBoundary();
    const first = acquire();
    expect(first).to.deep.equal({ admitted: true });
    const b = node.buckets.peek(KEY)!.buckets[0]!;
    expect(b.selfIssued).to.equal(50); // 1000 / 20
    expect(b.issued).to.equal(0);
    expect(node.stats.selfGrants).to.equal(1);
    for (let i = 0; i < 60; i++) acquire();
    expect(b.spent).to.equal(50); // never more than the self-grant
    const reports = [node.endRound(), (clock.advance(25), node.endRound())].flat().flatMap((x) => x.reports);
    expect(reports.length).to.be.at.least(2);
    expect(reports.every((r) => r.selfGrant && r.selfIssued === 50)).to.equal(true);
    // Each heartbeat since names the shard it holds the self-grant in, with the round of the first
    // batch that carries it — the one sent right after that heartbeat: what owners wait to fold.
    const shard = shardOf(KEY, b.windowId, 8);
    const batchRound = link.published.at(-2)!.round;
    expect(link.published.at(-2)!.reports.some((r) => r.selfGrant)).to.equal(true);
    expect(link.beats.slice(-2).map((x) => [...x.selfGranted])).to.deep.equal([[[shard, batchRound]], [[shard, batchRound]]]);
  });

  it('F4: no self-grant into a window that began less than eight rounds into the silence (credit may be out already)', () => {
    const { link, acquire, node, toBoundary, clock } = setup(10);
    acquire();
    const end = windowEndMs(windowIdAt(clock.now(), 1000, offset), 1000, offset);
    clock.set(end - 100); // the owner goes quiet 100 ms before the boundary: it may have pre-granted others
    node.endRound();
    link.up = false;
    toBoundary();
    node.endRound();
    for (let i = 0; i < 10; i++) acquire(); // the new window: asks are blocked (F2), nothing granted
    expect(node.stats.selfGrants).to.equal(0);
    expect(node.buckets.peek(KEY)!.buckets[0]!.selfIssued).to.equal(0);
    // The next window began a second into the silence: every owner has held this node's share back.
    clock.advance(1000);
    expect(acquire()).to.deep.equal({ admitted: true });
    expect(node.stats.selfGrants).to.equal(1);
  });

  it('F4: a self-granted bucket is reported every round until its window ends, quiet or not', () => {
    const { link, acquire, node, toBoundary, clock } = setup(10);
    acquire();
    link.up = false;
    clock.advance(50);
    toBoundary();
    acquire(); // self-grants 50, spends 1
    const reports: number[] = [];
    for (let round = 0; round < 39; round++) {
      clock.advance(25);
      reports.push(
        node
          .endRound()
          .flatMap((x) => x.reports)
          .filter((r) => r.keyId === KEY && r.selfGrant).length,
      );
    }
    expect(
      reports.every((n) => n === 1),
      JSON.stringify(reports),
    ).to.equal(true);
  });

  it('F4: a self-granted bucket under a plentiful plan, spending now and then, is in every round too', () => {
    const { link, node, toBoundary, clock } = setup(10);
    node.acquire(KEY, plentiful);
    link.up = false;
    clock.advance(50);
    toBoundary();
    node.acquire(KEY, plentiful); // self-grants 1,536: a standing lease, which would put off reporting its spends
    const reports: number[] = [];
    for (let round = 0; round < 39; round++) {
      clock.advance(25);
      if (round % 4 === 3) node.acquire(KEY, plentiful);
      reports.push(
        node
          .endRound()
          .flatMap((x) => x.reports)
          .filter((r) => r.keyId === KEY && r.selfGrant).length,
      );
    }
    expect(node.buckets.peek(KEY)!.buckets[0]!.selfIssued).to.equal(1536);
    expect(
      reports.every((n) => n === 1),
      JSON.stringify(reports),
    ).to.equal(true);
  });

  it('F4: no self-grant with owner contact (D3: ask instead), nor with a grant already made for the new window', () => {
    const s = setup(10);
    s.acquire();
    s.toBoundary();
    s.acquire();
    expect(s.node.buckets.peek(KEY)!.buckets[0]!.selfIssued).to.equal(0);
    expect(s.node.stats.selfGrants).to.equal(0);
  });

  it('F5: after 30 s without contact, no self-grant, and an empty bucket is "unavailable" (fail-open or 503)', () => {
    const { link, acquire, node, clock, toBoundary } = setup(10);
    acquire();
    link.up = false;
    clock.advance(30_000);
    node.endRound();
    expect(node.degraded).to.equal(false); // exactly 30 s: not yet
    clock.advance(1);
    expect(node.degraded).to.equal(false); // decided at the end of a round
    node.endRound();
    expect(node.degraded).to.equal(true);
    toBoundary();
    const r = acquire() as Denied;
    expect(node.buckets.peek(KEY)!.buckets[0]!.selfIssued).to.equal(0);
    expect(r).to.include({ admitted: false, unavailable: true });
    expect(r.retryAfterMs).to.equal(undefined);
    link.up = true;
    node.endRound(); // contact is re-established at the next round
    expect(node.degraded).to.equal(false);
  });

  it('L4: a grant from an older owner epoch than one already heard from is rejected', () => {
    const { link, acquire, node } = setup(1);
    acquire();
    const req = link.requests[0]![0]!;
    expect(node.onMessage({ ...grantFor(req, 5, 9), ownerEpoch: 3 })).to.equal(true);
    expect(node.onMessage({ ...grantFor(req, 50, 10), ownerEpoch: 2 })).to.equal(false);
    expect(node.stats.staleOwnerEpoch).to.equal(1);
    expect(node.buckets.peek(KEY)!.buckets[0]!.issued).to.equal(5);
  });
});

describe('owner side of F4 and L5', () => {
  const W = 1000;
  const WID = 1_800_000;
  function owner(fleet: FixedFleet, clock = new FakeClock(WID * W + 100)) {
    return { clock, o: new FoldOwner(ownerConfig(clock, fleet)) };
  }
  const req = (node: string, extra: object = {}) => ({
    keyId: KEY,
    windowId: WID,
    windowMs: W,
    limit: 1000,
    nodeId: node,
    nodeEpoch: `${node}-e1`,
    lease: 1,
    spent: 0,
    selfIssued: 0,
    released: 0,
    need: 1,
    demand: 1,
    fastPath: true,
    ...extra,
  });

  it('holds back 1/fleet for every silent node without a lease in the window (its possible self-grant)', () => {
    const fleet = new FixedFleet(20);
    fleet.silentNodes = ['s1', 's2'];
    const { o } = owner(fleet);
    // Pool: 1000 − 20 reserve − 2 × 50 held back = 880; a fleet of 20 shares it, but demand asks for all.
    expect(o.onCreditRequest(req('a', { demand: 10_000 }))!.issued).to.equal(880);
    expect(o.onCreditRequest(req('b', { need: 5 }))!.issued).to.equal(5); // the reserve: what it needs
    expect(o.committed(KEY, W, WID)).to.equal(885); // + 100 held back = 985 ≤ 1000
  });

  it('withholds grants for one round after it first sees a node flag a self-grant, and counts the self-grant', () => {
    const fleet = new FixedFleet(20);
    const { o, clock } = owner(fleet);
    expect(o.onCreditRequest(req('a', { selfIssued: 50 }))).to.equal(undefined);
    expect(o.committed(KEY, W, WID)).to.equal(50);
    clock.advance(24);
    expect(o.onCreditRequest(req('a', { selfIssued: 50, spent: 50 }))).to.equal(undefined);
    clock.advance(1);
    expect(o.onCreditRequest(req('a', { selfIssued: 50, spent: 50 }))).to.not.equal(undefined);
  });

  it('holds a node’s share back in a shard it granted itself credit in until it folds that node’s batch of the heartbeat’s round', () => {
    const fleet = new FixedFleet(20);
    const shard = ownerConfig(new FakeClock(0), fleet).shardOf(KEY, WID);
    // Node s1 states a self-grant in this shard in its heartbeat of round 7 (lib/membership.ts).
    fleet.unsettled = (s, folded) => (s === shard && folded('s1-e1', s) < 7 ? ['s1'] : []);
    const { o } = owner(fleet);
    expect(o.onCreditRequest(req('a', { demand: 10_000 }))!.issued).to.equal(930); // 1000 − 20 reserve − 50
    // Its batch of round 6 (nothing in it for this key) does not settle it; round 7's does.
    const batch = (round: number) => ({ shard, nodeId: 's1', nodeEpoch: 's1-e1', round, reports: [] });
    o.onReports(batch(6));
    expect(o.onCreditRequest(req('b', { demand: 10_000, fastPath: false }))).to.equal(undefined);
    o.onReports({ ...batch(0) }); // a partial batch (a recall's release) settles nothing either
    expect(o.onCreditRequest(req('b', { demand: 10_000, fastPath: false }))).to.equal(undefined);
    o.onReports(batch(7));
    expect(o.onCreditRequest(req('b', { demand: 10_000, fastPath: false }))!.issued).to.equal(50);
  });

  it('withholds grants from a node back after an absence, for one round (L5)', () => {
    const fleet = new FixedFleet(20);
    fleet.rejoiningNodes.add('a');
    const { o } = owner(fleet);
    expect(o.onCreditRequest(req('a'))).to.equal(undefined);
    fleet.rejoiningNodes.clear();
    expect(o.onCreditRequest(req('a'))).to.not.equal(undefined);
  });
  describe('a report that asked for a top-up while its node was withheld (L5)', () => {
    /** Node a's report: it took one credit and spent it, and wants 3 a window. */
    const report = (shard: number, seq: number) => ({
      shard,
      nodeId: 'a',
      nodeEpoch: 'a-e1',
      round: seq,
      reports: [{ keyId: KEY, windowId: WID, windowMs: W, limit: 1000, lease: 1, seq, spent: 1, issued: 1, selfIssued: 0, released: 0, demand: 3, held: 0, selfGrant: false }],
    });
    const grants = (ms: readonly OwnerMessage[]) => ms.filter((m): m is Grant => m.type === 'grant' && m.nodeId === 'a');
    function withheldReport() {
      const fleet = new FixedFleet(20);
      const { o, clock } = owner(fleet);
      const shard = ownerConfig(clock, fleet).shardOf(KEY, WID);
      fleet.rejoiningNodes.add('a');
      expect(grants(o.onReports(report(shard, 1))), 'withheld').to.deep.equal([]);
      return { fleet, o, clock, shard };
    }

    it('is topped up once the node is no longer withheld, not only at its next report', () => {
      const { fleet, o } = withheldReport();
      expect(
        o.topUpWithheld(() => true),
        'still withheld',
      ).to.deep.equal([]);
      fleet.rejoiningNodes.clear();
      const [g] = grants(o.topUpWithheld(() => true));
      expect(g!.issued).to.be.greaterThan(1);
      expect(o.committed(KEY, W, WID)).to.be.at.most(1000);
      expect(
        o.topUpWithheld(() => true),
        'once',
      ).to.deep.equal([]);
    });

    it('waits while the owner does not serve its shard, and is not topped up once its window ended', () => {
      const served = withheldReport();
      served.fleet.rejoiningNodes.clear();
      expect(served.o.topUpWithheld((s) => s !== served.shard)).to.deep.equal([]);
      expect(grants(served.o.topUpWithheld(() => true)), 'served again').to.have.length(1);
      const ended = withheldReport();
      ended.clock.advance(W + 100);
      ended.fleet.rejoiningNodes.clear();
      expect(ended.o.topUpWithheld(() => true)).to.deep.equal([]);
    });
  });
});

describe('regressions found in review', () => {
  it('a cut-off node self-grants once per key and window, even if the key is evicted and reloaded', () => {
    const { link, acquire, node, clock, toBoundary } = setup(10);
    acquire();
    link.up = false;
    clock.advance(50);
    toBoundary();
    let admitted = 0;
    for (let cycle = 0; cycle < 5; cycle++) {
      for (let i = 0; i < 60; i++) if (acquire().admitted) admitted++;
      // Push the key out of the map (the cap is 1000 buckets), a round later so it may go.
      node.endRound();
      for (let k = 0; k < 1100; k++) node.acquire(`v1:filler${cycle}x${String(k).padStart(14, '0')}`, hourly);
      expect(node.buckets.peek(KEY)).to.equal(undefined);
    }
    expect(node.stats.selfGrants).to.be.at.least(1);
    expect(admitted).to.equal(50); // one self-grant of 1000 / 20
  });

  it('after a policy change the old limits are never reported again, so a lower limit holds', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const big = compilePolicy({ version: 1, defaultPlan: 'p', anonymousPlan: 'p', plans: { p: { windows: [{ name: 'w', limit: 100, windowMs: 60_000 }] } } }).limitsFor(KEY, 't');
    const small = compilePolicy({ version: 2, defaultPlan: 'p', anonymousPlan: 'p', plans: { p: { windows: [{ name: 'w', limit: 10, windowMs: 60_000 }] } } }).limitsFor(KEY, 't');
    const fleet = new FixedFleet(1);
    const owner = new FoldOwner(ownerConfig(clock, fleet));
    let node: LeaseNode | undefined;
    const link = new RecordingLink((reqs) => reqs.map((r) => owner.onCreditRequest(r)).filter((g) => g !== undefined));
    link.fleet = 1;
    link.publish = (batch) => {
      for (const m of owner.onReports(batch)) node!.onMessage(m);
      return true;
    };
    node = new LeaseNode(nodeConfig(), clock, link);
    let admitted = 0;
    for (let i = 0; i < 5; i++) if ((node.acquire(KEY, big) as { admitted: boolean }).admitted) admitted++;
    node.endRound();
    for (let round = 0; round < 10; round++) {
      for (let i = 0; i < 10; i++) if ((node.acquire(KEY, small) as { admitted: boolean }).admitted) admitted++;
      clock.advance(25);
      node.endRound();
    }
    expect(admitted).to.equal(10);
  });
});

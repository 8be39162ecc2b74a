import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import type { Adjust, CreditRequest, Grant, OwnerMessage, Report, ReportBatch } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import { seededRandom } from '../../scripts/sim/queue.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

const KEY = 'v1:FIXEDSHAREFIXEDSHARE';
const W = 1000;
const WID = 1_800_000;
const NOW = WID * W + 100;

function setup(fleetSize = 4): { owner: FoldOwner; fleet: FixedFleet; clock: FakeClock } {
  const fleet = new FixedFleet(fleetSize);
  const clock = new FakeClock(NOW);
  return { owner: new FoldOwner(ownerConfig(clock, fleet)), fleet, clock };
}

function ask(node: string, need = 1, demand = 1, o: Partial<CreditRequest> = {}): CreditRequest {
  return {
    keyId: KEY,
    windowId: WID,
    windowMs: W,
    limit: 100,
    nodeId: node,
    nodeEpoch: `${node}-e1`,
    lease: 1,
    spent: 0,
    selfIssued: 0,
    released: 0,
    need,
    demand,
    fastPath: true,
    fixedShare: true,
    ...o,
  };
}

function report(node: string, seq: number, r: Partial<Report> = {}): ReportBatch {
  const rep: Report = {
    keyId: KEY,
    windowId: WID,
    windowMs: W,
    limit: 100,
    lease: 1,
    seq,
    spent: 0,
    issued: 0,
    selfIssued: 0,
    released: 0,
    demand: 4,
    held: 0,
    selfGrant: false,
    fixedShare: true,
    ...r,
  };
  return { shard: 0, nodeId: node, nodeEpoch: `${node}-e1`, round: seq, reports: [rep] };
}

const issued = (g: Grant | OwnerMessage | undefined): number | undefined => (g?.type === 'grant' ? g.issued : undefined);

describe('fixed-share allocation: the owner issues each node ⌊allowance / fleet⌋, plus the reserve', () => {
  it('grants a node its share on its first ask, whatever its demand, and the same again on a repeat', () => {
    const { owner } = setup(4);
    expect(issued(owner.onCreditRequest(ask('a', 1, 0.1)))).to.equal(25);
    // The same ask again (a grant crossed it): the latest grant restated, nothing more.
    const again = owner.onCreditRequest(ask('a', 1, 0.1))!;
    expect([again.issued, again.grantSeq]).to.deep.equal([25, 1]);
    expect(issued(owner.onCreditRequest(ask('b', 1, 500)))).to.equal(25);
  });

  it('caps a pinned node at its share plus the reserve, then tells it the window is spent for it', () => {
    const { owner } = setup(4);
    expect(issued(owner.onCreditRequest(ask('a', 1, 8)))).to.equal(25);
    // Its share spent: the fast path draws on the reserve (2 % of 100), a round of demand at most.
    expect(issued(owner.onCreditRequest(ask('a', 1, 8, { spent: 25 })))).to.equal(27);
    expect(owner.onCreditRequest(ask('a', 1, 8, { spent: 27 }))).to.equal(undefined);
    const notices = owner.takeOutbox().filter((m): m is Adjust => m.type === 'adjust');
    expect(notices.map((m) => [m.nodeId, m.keep, m.exhausted])).to.deep.equal([['a', -1, true]]);
    // The other nodes' shares are still there: no leasing moved them to a.
    for (const n of ['b', 'c']) expect(issued(owner.onCreditRequest(ask(n)))).to.equal(25);
    // The last share leaves the reserve's room, spent already by a: a full 23 (98 − 75) would pass
    // the allowance with it, so d gets what is left.
    expect(issued(owner.onCreditRequest(ask('d')))).to.equal(23);
    expect(owner.committed(KEY, W, WID)).to.equal(100);
  });

  it('serves the reserve only on the fast path, and recalls nothing', () => {
    const { owner } = setup(4);
    owner.onCreditRequest(ask('a'));
    expect(owner.onCreditRequest(ask('a', 1, 1, { spent: 25, fastPath: false }))).to.equal(undefined);
    expect(owner.takeOutbox().some((m) => m.type === 'adjust' && m.keep >= 0)).to.equal(false);
  });

  it('tops a reporting node up to its share, ahead of the window too, never with the reserve', () => {
    const { owner } = setup(5);
    const msgs = owner.onReports(report('a', 1, { demand: 0.5 }));
    expect(msgs.map(issued)).to.deep.equal([20]);
    expect(owner.onReports(report('a', 2, { demand: 9, spent: 20, issued: 20 }))).to.deep.equal([]);
    // A report for the next window, before it starts: its share is granted ahead.
    const ahead = owner.onReports(report('b', 1, { windowId: WID + 1 }));
    expect(ahead.map(issued)).to.deep.equal([20]);
    expect(owner.stats.preGrants).to.equal(1);
    // No demand: nothing.
    expect(owner.onReports(report('c', 1, { demand: 0 }))).to.deep.equal([]);
  });

  it('counts a boundary self-grant (F4) as part of the node’s share', () => {
    const { owner, clock } = setup(4);
    // c granted itself ⌊100 / 4⌋ at the boundary: it is owed nothing more of its share.
    owner.onReports(report('c', 1, { selfIssued: 25, selfGrant: true, demand: 0 }));
    // 20 of its 25 spent and a request needing 6. Within the round after the self-grant is seen,
    // grants to c are withheld (F4) whatever it is owed.
    expect(owner.onCreditRequest(ask('c', 6, 1, { selfIssued: 25, spent: 20 }))).to.equal(undefined);
    // Past that round: only the reserve (2 % of 100) is left for it, not what a share less its
    // spending would owe (5).
    clock.advance(30);
    const g = issued(owner.onCreditRequest(ask('c', 6, 1, { selfIssued: 25, spent: 20 })));
    expect(g).to.be.a('number').and.at.least(1).and.at.most(2);
  });

  it('owes a node again what it gave back: released credit is not counted as had', () => {
    const { owner } = setup(4);
    expect(issued(owner.onCreditRequest(ask('a')))).to.equal(25);
    // Its bucket evicted: the lease gives the 25 back, unspent. A new bucket life (lease 2) asks.
    owner.onReports(report('a', 1, { issued: 25, released: 25, demand: 0 }));
    expect(owner.committed(KEY, W, WID)).to.equal(0);
    expect(issued(owner.onCreditRequest(ask('a', 1, 1, { lease: 2, fastPath: false })))).to.equal(25);
    // Spent beyond what it kept counts as had: 10 spent of 25, 25 released (an overspend of 10).
    const { owner: o2 } = setup(4);
    o2.onCreditRequest(ask('b'));
    o2.onReports(report('b', 1, { issued: 25, spent: 10, released: 25, demand: 0 }));
    expect(issued(o2.onCreditRequest(ask('b', 1, 1, { lease: 2, fastPath: false })))).to.equal(15);
  });

  it('serves the rounding remainder as reserve: every unit of a small plan is reachable (limit 10, 4 nodes)', () => {
    const { owner } = setup(4);
    // Shares of ⌊10 / 4⌋ = 2; 2 % of 10 rounds to 0, so the reserve is the remainder, 10 − 4 × 2 = 2.
    for (const n of ['a', 'b', 'c', 'd']) expect(issued(owner.onCreditRequest(ask(n, 1, 1, { limit: 10 })))).to.equal(2);
    expect(owner.committed(KEY, W, WID)).to.equal(8);
    // a spent its share: the remainder on the fast path, first come, one need at a time.
    expect(issued(owner.onCreditRequest(ask('a', 1, 1, { limit: 10, spent: 2 })))).to.equal(3);
    expect(issued(owner.onCreditRequest(ask('b', 1, 1, { limit: 10, spent: 2 })))).to.equal(3);
    expect(owner.committed(KEY, W, WID)).to.equal(10);
    expect(owner.onCreditRequest(ask('c', 1, 1, { limit: 10, spent: 2 }))).to.equal(undefined);
    const notices = owner.takeOutbox().filter((m): m is Adjust => m.type === 'adjust');
    expect(notices.map((m) => [m.nodeId, m.exhausted])).to.deep.equal([['c', true]]);
  });

  it('serves a plan below the fleet size from the reserve, first come, up to the limit (limit 10, 20 nodes)', () => {
    const { owner } = setup(20);
    // ⌊10 / 20⌋ = 0 a share: the whole allowance is the remainder, served to fast-path asks.
    const got = Array.from({ length: 12 }, (_, i) => issued(owner.onCreditRequest(ask(`n${i}`, 1, 0.5, { limit: 10 }))));
    expect(got).to.deep.equal([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, undefined, undefined]);
    expect(owner.committed(KEY, W, WID)).to.equal(10);
    // Not on the fast path (a background ask): the reserve is not drawn on.
    const { owner: o2 } = setup(20);
    expect(o2.onCreditRequest(ask('a', 1, 0.5, { limit: 10, fastPath: false }))).to.equal(undefined);
  });

  it('never commits past the allowance when the fleet changes size mid-window (L2)', () => {
    const { owner, fleet } = setup(4);
    for (const n of ['a', 'b', 'c', 'd']) owner.onCreditRequest(ask(n));
    expect(owner.committed(KEY, W, WID)).to.equal(98); // 25 + 25 + 25 + 23: the reserve's room is kept
    // A fifth node joins: its share (20) is not there; it gets the reserve on the fast path, then nothing.
    fleet.members = 5;
    expect(issued(owner.onCreditRequest(ask('e', 1, 1)))).to.equal(2);
    expect(owner.onCreditRequest(ask('e', 1, 1, { spent: 2 }))).to.equal(undefined);
    expect(owner.committed(KEY, W, WID)).to.equal(100);
    // Two leave: the shares grow to 33, but nothing is left to issue.
    fleet.members = 3;
    expect(owner.onCreditRequest(ask('a', 1, 1, { spent: 25 }))).to.equal(undefined);
    expect(owner.committed(KEY, W, WID)).to.equal(100);
  });

  it('holds outstanding ≤ allowance through random asks, reports and fleet changes', () => {
    const random = seededRandom(7);
    for (let run = 0; run < 50; run++) {
      const { owner, fleet, clock } = setup(1 + Math.floor(random() * 8));
      const limit = 1 + Math.floor(random() * 300);
      const spent = new Map<string, number>();
      const had = new Map<string, number>();
      const end = windowEndMs(WID, W, phaseOffset(KEY, W));
      let seq = 0;
      for (let step = 0; step < 200 && clock.now() < end; step++) {
        if (random() < 0.05) fleet.members = 1 + Math.floor(random() * 8);
        const node = `n${Math.floor(random() * 8)}`;
        // The node spends what it holds, at most a few requests a step.
        const hold = (had.get(node) ?? 0) - (spent.get(node) ?? 0);
        spent.set(node, (spent.get(node) ?? 0) + Math.min(hold, Math.floor(random() * 5)));
        const s = spent.get(node)!;
        const msgs: Array<OwnerMessage | undefined> =
          random() < 0.5
            ? [owner.onCreditRequest(ask(node, 1, random() * 10, { limit, spent: s, fastPath: random() < 0.7 }))]
            : owner.onReports(report(node, ++seq, { limit, spent: s, issued: had.get(node) ?? 0, demand: random() * 10 }));
        for (const m of msgs) if (m?.type === 'grant') had.set(m.nodeId, Math.max(had.get(m.nodeId) ?? 0, m.issued));
        const out = [...had.values()].reduce((a, b) => a + b, 0);
        expect(out, `run ${run} step ${step}`).to.be.at.most(limit);
        expect(owner.committed(KEY, W, WID)).to.be.at.most(limit);
        clock.advance(Math.floor(random() * 5));
      }
    }
  });

  it('is per window: a leasing window of the same key is sized from demand as before', () => {
    const { owner } = setup(4);
    const g = owner.onCreditRequest({ ...ask('a', 1, 0.1), fixedShare: undefined, windowId: WID });
    expect(issued(g)).to.equal(1); // leasing: a rarely seen key gets its need only
  });
});

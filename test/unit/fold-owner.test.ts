import { expect } from 'chai';
import { FoldOwner } from '../../lib/fold-owner.js';
import { shardOf, type CreditRequest, type Report, type ReportBatch } from '../../lib/protocol/messages.js';
import { FakeClock } from '../../lib/clock.js';
import { leaseTarget } from '../../lib/lease-size.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

const KEY = 'v1:OWNEROWNEROWNEROWNERO';
const W = 1000;
const WID = 1_800_000;
const NOW = WID * W + 100;
/** Rounds from the test clock to the end of window WID, and the lease size for `demand` then. */
const LEFT = (windowEndMs(WID, W, phaseOffset(KEY, W)) - NOW) / 25;
const target = (demand: number): number => leaseTarget(demand, LEFT, 2, 1.25);

function owner(fleet = 4, reserveRatio = 0.02): FoldOwner {
  // The clock stands in the middle of window WID, far from its end (no pre-grants).
  return new FoldOwner(ownerConfig(new FakeClock(NOW), new FixedFleet(fleet), { reserveRatio }));
}

function req(node: string, need: number, demand: number, fastPath = true, limit = 1000): CreditRequest {
  return { keyId: KEY, windowId: WID, windowMs: W, limit, nodeId: node, nodeEpoch: `${node}-e1`, lease: 1, spent: 0, selfIssued: 0, released: 0, need, demand, fastPath };
}

/** A 10-per-window request, for the rationing cases. */
const small = (node: string, need: number, demand: number): CreditRequest => req(node, need, demand, true, 10);

/** x's report on a 10-per-window key: 10 issued, 1 spent, 9 given back, no demand left. */
function xGivesBack(): ReportBatch {
  const r: Report = { keyId: KEY, windowId: WID, windowMs: W, limit: 10, lease: 1, seq: 1, spent: 1, issued: 10, selfIssued: 0, released: 9, demand: 0, held: 0, selfGrant: false };
  return { shard: 0, nodeId: 'x', nodeEpoch: 'x-e1', round: 1, reports: [r] };
}

function batch(node: string, epoch: string, seq: number, spent: number, demand = 0, limit = 1000): ReportBatch {
  const r: Report = { keyId: KEY, windowId: WID, windowMs: W, limit, lease: 1, seq, spent, issued: 0, selfIssued: 0, released: 0, demand, held: 0, selfGrant: false };
  return { shard: 0, nodeId: node, nodeEpoch: epoch, round: seq, reports: [r] };
}

describe('fold owner: the only issuer of credit', () => {
  it('sizes a grant by the lease-size rule: just the need for a rarely seen key, demand-sized for a busy one', () => {
    const o = owner(4);
    const g1 = o.onCreditRequest(req('a', 1, 0.5))!; // 0.5 × 1.25 < one request: no lease, the need only
    expect(g1.issued).to.equal(1);
    expect(g1.ownerEpoch).to.equal(7);
    expect(g1.grantSeq).to.equal(1);
    const g2 = o.onCreditRequest(req('a', 1, 100))!; // holds 1, raised to the target for 100
    expect(target(100)).to.equal(251); // twice 100 × 1.25, and one
    expect(g2.issued).to.equal(251);
    expect(g2.grantSeq).to.equal(2);
    expect(o.onCreditRequest(req('b', 3, 0))!.issued).to.equal(3); // no demand: what the request needs
  });

  it('takes the spend a request carries as fresher than the last report', () => {
    const o = owner(4);
    o.onCreditRequest(req('a', 1, 8)); // target(8) = 21
    const g = o.onCreditRequest({ ...req('a', 1, 8), spent: 21 })!; // holds 0: wants its whole target again
    expect(g.issued).to.equal(2 * target(8));
    expect(o.spent(KEY, W, WID)).to.equal(21);
  });

  it('rations a pool too small for every want: a share in proportion, at least the need and a round of demand', () => {
    const o = owner(4, 0);
    expect(o.onCreditRequest(small('x', 1, 8))!.issued).to.equal(10); // wants 21, all 10 there are
    expect(o.onCreditRequest(small('a', 1, 8))).to.equal(undefined); // nothing left; a's want is known
    expect(o.onCreditRequest(small('b', 1, 8))).to.equal(undefined);
    // x gives back 9 (its demand faded): a, b and now c each want 21. A third of the 9 is 3, but c
    // spends 4 a round: it gets 4, so it does not ask again before its next top-up.
    o.onReports(xGivesBack());
    expect(o.onCreditRequest(small('c', 1, 8))!.issued).to.equal(4);
    // d asks for one request with no demand: a share of what is left would be nothing, the need is 1.
    expect(o.onCreditRequest(small('d', 1, 0))!.issued).to.equal(1);
  });

  it("holds back a silent node's possible self-grant (F4) unless it reported credit applied, not merely a lease", () => {
    const report = (node: string, issued: number): ReportBatch => ({
      shard: 0,
      nodeId: node,
      nodeEpoch: `${node}-e1`,
      round: 1,
      reports: [{ keyId: KEY, windowId: WID, windowMs: W, limit: 1000, lease: 1, seq: 1, spent: 0, issued, selfIssued: 0, released: 0, demand: 0, held: issued, selfGrant: false }],
    });
    // b asked ahead and got nothing (or its grant never arrived): it has a lease, yet it may roll
    // into this window empty-handed and grant itself 1000 / 4 once cut off.
    const fleet = new FixedFleet(4);
    const o = new FoldOwner(ownerConfig(new FakeClock(NOW), fleet, { reserveRatio: 0 }));
    o.onReports(report('b', 0));
    fleet.silentNodes = ['b'];
    expect(o.onCreditRequest(req('a', 1, 10_000))!.issued).to.equal(750);
    // c reported credit it had applied: it cannot have granted itself anything at the boundary.
    const fleet2 = new FixedFleet(4);
    const o2 = new FoldOwner(ownerConfig(new FakeClock(NOW), fleet2, { reserveRatio: 0 }));
    expect(o2.onCreditRequest(req('c', 5, 0))!.issued).to.equal(5);
    o2.onReports(report('c', 5));
    fleet2.silentNodes = ['c'];
    expect(o2.onCreditRequest(req('a', 1, 10_000))!.issued).to.equal(995);
  });

  it('does not announce a window exhausted when only a held-back share is left: it comes back once the node is settled', () => {
    // A notice says the window is spent: its leases stop asking and their callers are told to wait
    // for the window's end (a minute, for a 60 s window). What is held back for a silent node's
    // possible self-grant is not spent: it returns to the pool the round the node is heard from. In
    // a fleet of one that share is the whole allowance, held back while the node's own self-grant
    // (made in a stall of its own process) is not yet folded.
    const fleet = new FixedFleet(1);
    const o = new FoldOwner(ownerConfig(new FakeClock(NOW), fleet, { reserveRatio: 0 }));
    expect(o.onCreditRequest(req('a', 1, 0))!.issued).to.equal(1);
    fleet.silentNodes = ['a'];
    expect(o.onCreditRequest({ ...req('a', 1, 0), spent: 1 })).to.equal(undefined);
    expect(
      o.takeOutbox().filter((m) => m.type === 'adjust' && m.exhausted),
      'no exhaustion notice',
    ).to.deep.equal([]);
    fleet.silentNodes = [];
    expect(o.onCreditRequest({ ...req('a', 1, 0), spent: 1 })!.issued).to.equal(2);
    // Spent for real: then it is announced, even while a share is held back.
    const small = new FixedFleet(4);
    const o2 = new FoldOwner(ownerConfig(new FakeClock(NOW), small, { reserveRatio: 0 }));
    small.silentNodes = ['c'];
    expect(o2.onCreditRequest(req('a', 1, 10_000, true, 8))!.issued).to.equal(6);
    expect(
      o2.takeOutbox().filter((m) => m.type === 'adjust' && m.exhausted),
      'two held back for c',
    ).to.deep.equal([]);
    small.silentNodes = [];
    expect(o2.onCreditRequest({ ...req('b', 2, 0, true, 8) })!.issued).to.equal(2);
    expect(
      o2
        .takeOutbox()
        .filter((m) => m.type === 'adjust' && m.exhausted)
        .map((m) => m.nodeId)
        .sort(),
    ).to.deep.equal(['a', 'b']);
  });

  it('a replayed snapshot is no proof of what a node applied: the new owner still holds its share back', () => {
    const fleet = new FixedFleet(4);
    const o = new FoldOwner(ownerConfig(new FakeClock(NOW), fleet, { reserveRatio: 0 }));
    // n asked ahead with some demand and was granted 8 — a grant that never reached it.
    const ask: Report = { keyId: KEY, windowId: WID, windowMs: W, limit: 1000, lease: 1, seq: 1, spent: 0, issued: 0, selfIssued: 0, released: 0, demand: 4, held: 0, selfGrant: false };
    expect(o.onReports({ shard: 0, nodeId: 'n', nodeEpoch: 'n-e1', round: 1, reports: [ask] })).to.have.length(1);
    const issuedToN = o.issued(KEY, W, WID);
    expect(issuedToN).to.be.above(0);
    // A new owner replays the snapshot (its reports carry the owner's view of issued) while n is silent.
    const fleet2 = new FixedFleet(4);
    const o2 = new FoldOwner(ownerConfig(new FakeClock(NOW), fleet2, { reserveRatio: 0 }));
    o2.replay(o.snapshot(shardOf(KEY, WID, 8)));
    fleet2.silentNodes = ['n'];
    expect(o2.onCreditRequest(req('a', 1, 10_000))!.issued).to.equal(1000 - issuedToN - 250);
  });

  it('counts what a lease spent beyond its credit (a degraded node failing open, charged) as committed: issued again to nobody', () => {
    const o = owner(4, 0);
    expect(o.onCreditRequest(req('a', 1, 1))!.issued).to.be.above(0);
    const issued = o.issued(KEY, W, WID);
    // a spent 600 while cut off, though it held only what it was issued.
    o.onReports({ ...batch('a', 'a-e1', 5, 600), reports: [{ ...batch('a', 'a-e1', 5, 600).reports[0]!, issued }] });
    expect(o.committed(KEY, W, WID)).to.equal(600);
    expect(o.onCreditRequest(req('b', 1, 10_000))!.issued).to.equal(400);
    expect(o.onCreditRequest(req('c', 1, 10_000, false))).to.equal(undefined);
  });

  it('holds back the reserve (R = 2 %) from ordinary grants', () => {
    const o = owner(1);
    expect(o.onCreditRequest(req('a', 1, 1000, false))!.issued).to.equal(980);
    // A request the lease already covers (a retry, a duplicate) restates the grant and adds nothing.
    expect(o.onCreditRequest(req('a', 1, 300, false))).to.include({ issued: 980, grantSeq: 1 });
    expect(o.onCreditRequest({ ...req('a', 1, 1000, false), spent: 980 })).to.equal(undefined);
    expect(o.issued(KEY, W, WID)).to.equal(980);
  });

  it('releases the reserve only on the fast path, at most once per key per window', () => {
    const o = owner(1);
    o.onCreditRequest(req('a', 1, 1000, false));
    expect(o.onCreditRequest(req('b', 5, 0, false))).to.equal(undefined); // not the fast path: no reserve
    const r1 = o.onCreditRequest({ ...req('a', 5, 4), spent: 980 })!;
    expect(r1.issued).to.equal(980 + target(4)); // the reserve is released; this grant takes a's target
    expect(o.stats.reserveReleases).to.equal(1);
    expect(o.onCreditRequest(req('b', 1, 0))!.issued).to.equal(1); // b's need, from what is left
    expect(o.onCreditRequest(req('c', 50, 0))!.issued).to.equal(20 - target(4) - 1); // the rest, short of its need
    expect(o.onCreditRequest(req('d', 1, 0))).to.equal(undefined);
    expect(o.stats.reserveReleases).to.equal(1);
    expect(o.issued(KEY, W, WID)).to.equal(1000);
  });

  it('tells leases it announced exhausted when released credit refills the window', () => {
    const o = owner(1, 0);
    o.onCreditRequest(small('x', 1, 10)); // all 10, which x spends within two rounds: nothing to recall
    o.takeOutbox();
    expect(o.onCreditRequest(small('a', 1, 0))).to.equal(undefined);
    const notices = o.takeOutbox();
    expect(notices.filter((m) => m.type === 'adjust' && m.exhausted && m.nodeId === 'a')).to.have.length(1);
    const out = o.onReports(xGivesBack());
    // a asks per request (no demand): told it may ask again — neither a recall nor exhausted. (So is
    // x, whose demand has faded too.)
    expect(out.filter((m) => m.nodeId === 'a').map((m) => m.type === 'adjust' && [m.keep, m.exhausted])).to.deep.equal([[-1, false]]);
    expect(o.stats.refills).to.equal(2);
    expect(o.onCreditRequest(small('a', 1, 0))!.issued).to.equal(1);
  });

  it('recalls all of a lease whose demand faded below one request, not a last credit of it', () => {
    const o = owner(4, 0);
    expect(o.onCreditRequest(small('x', 1, 8))!.issued).to.equal(10);
    // x spent 2 and its key went quiet: a trace of demand (0.03 × h is far below one request).
    const r: Report = { keyId: KEY, windowId: WID, windowMs: W, limit: 10, lease: 1, seq: 1, spent: 2, issued: 10, selfIssued: 0, released: 0, demand: 0.03, held: 8, selfGrant: false };
    o.onReports({ shard: 0, nodeId: 'x', nodeEpoch: 'x-e1', round: 1, reports: [r] });
    o.takeOutbox();
    expect(o.onCreditRequest(small('a', 1, 0))).to.equal(undefined); // the pool is dry
    const recalls = o.takeOutbox().filter((m) => m.type === 'adjust' && m.nodeId === 'x');
    expect(recalls.map((m) => m.type === 'adjust' && m.keep)).to.deep.equal([0]);
  });

  it('tops a busy lease up by two rounds of its demand beyond the room, not demand × h', () => {
    const o = owner(4, 0);
    // a and b each advertise 20 over the next 2 rounds (demand × h = 25, a busy lease) on a 60 plan.
    // Leases together take half of what is unspent (30); beyond it, two rounds of demand (20) each.
    const topUp = (node: string) => o.onReports(batch(node, `${node}-e1`, 1, 0, 20, 60)).filter((m) => m.type === 'grant');
    expect(topUp('a').map((g) => g.type === 'grant' && g.issued)).to.deep.equal([30]);
    expect(topUp('b').map((g) => g.type === 'grant' && g.issued)).to.deep.equal([20]);
    // The owner still holds 10 for the node that runs dry first.
    expect(o.onCreditRequest(req('c', 1, 0, true, 60))!.issued).to.equal(1);
  });

  it('recalls a busy lease down to two rounds of its demand when an ask finds the pool dry', () => {
    const o = owner(4, 0);
    expect(o.onCreditRequest(req('a', 1, 16, true, 40))!.issued).to.equal(40); // all of it
    o.takeOutbox();
    expect(o.onCreditRequest(req('b', 1, 0, true, 40))).to.equal(undefined);
    const recalls = o.takeOutbox().filter((m) => m.type === 'adjust' && m.nodeId === 'a');
    // Not demand × h (20): a spends about 8 a round, and gives the rest back the moment it hears.
    expect(recalls.map((m) => m.type === 'adjust' && [m.keep, m.exhausted])).to.deep.equal([[16, false]]);
  });

  it('merges reports: max seq wins in an epoch, so duplicates and reorders change nothing (L3)', () => {
    const o = owner();
    o.onReports(batch('a', 'a-e1', 3, 30));
    o.onReports(batch('a', 'a-e1', 3, 30)); // duplicate
    o.onReports(batch('a', 'a-e1', 2, 20)); // reordered, older
    expect(o.spent(KEY, W, WID)).to.equal(30);
    expect(o.stats.reportsStale).to.equal(2);
    o.onReports(batch('a', 'a-e1', 5, 42));
    expect(o.spent(KEY, W, WID)).to.equal(42);
  });

  it("adds a restarted node's lower count from its new epoch instead of losing it (L3)", () => {
    const o = owner();
    o.onReports(batch('a', 'a-e1', 9, 70));
    o.onReports(batch('a', 'a-e2', 0, 5)); // same node id, new process: seq restarts at 0
    expect(o.spent(KEY, W, WID)).to.equal(75);
  });

  it('keeps leases apart: a reloaded bucket (new lease) starts from zero, the old lease still counts', () => {
    const o = owner(1);
    const g1 = o.onCreditRequest(req('a', 1, 1000, false))!;
    expect(g1.lease).to.equal(1);
    o.onReports(batch('a', 'a-e1', 1, 980));
    const g2 = o.onCreditRequest({ ...req('a', 2, 0), lease: 2 })!;
    expect(g2.lease).to.equal(2);
    expect(g2.grantSeq).to.equal(1);
    expect(g2.issued).to.equal(2); // only the reserve is left: released, and this lease takes what it needs
    expect(o.issued(KEY, W, WID)).to.equal(982);
    expect(o.spent(KEY, W, WID)).to.equal(980);
  });

  it('tops up a node whose advertised demand outruns the credit it holds', () => {
    const o = owner(4);
    o.onCreditRequest(req('a', 1, 8)); // target(8) = 21 issued to a-e1
    const grants = o.onReports(batch('a', 'a-e1', 1, 16, 100)); // holds 5, wants target(100)
    expect(grants).to.have.length(1);
    expect(grants[0]).to.include({ type: 'grant', issued: 21 + target(100) - 5 });
  });

  it('refills a lease once it holds less than its demand × h where the allowance is plenty; else after every spend', () => {
    // 10,000 a window over 4 nodes is more than 16 times what each lease of target(8) = 21 could want.
    const plenty = owner(4);
    plenty.onCreditRequest(req('a', 1, 8, true, 10_000)); // 21 issued to a-e1; 8 × 1.25 = 10
    const grants = (o: FoldOwner, seq: number, spent: number, limit: number) => o.onReports(batch('a', 'a-e1', seq, spent, 8, limit)).filter((m) => m.type === 'grant');
    // Spent 11: it holds 10, what its demand alone calls for, rounds of requests in hand: no grant.
    expect(grants(plenty, 1, 11, 10_000)).to.deep.equal([]);
    // Spent 12: it holds 9, below that: refilled to its target in one grant.
    const g = grants(plenty, 2, 12, 10_000);
    expect(g).to.have.length(1);
    expect(g[0]).to.include({ type: 'grant', issued: 21 + 12 });
    // 1,000 a window is not plenty (16 × 4 × 21 = 1,344): every report tops the lease up.
    const tight = owner(4);
    tight.onCreditRequest(req('a', 1, 8));
    expect(grants(tight, 1, 11, 1000)[0]).to.include({ type: 'grant', issued: 21 + 11 });
  });

  it('drops ledgers two rounds after the window ends', () => {
    const o = owner();
    o.onCreditRequest(req('a', 1, 1));
    const end = windowEndMs(WID, W, phaseOffset(KEY, W));
    o.sweep(end + 49);
    expect(o.size).to.equal(1);
    o.sweep(end + 50);
    expect(o.size).to.equal(0);
  });

  it('issues nothing for a window that ended two rounds ago, so a swept ledger never comes back empty', () => {
    const clock = new FakeClock(NOW);
    const o = new FoldOwner(ownerConfig(clock, new FixedFleet(4), { reserveRatio: 0 }));
    const end = windowEndMs(WID, W, phaseOffset(KEY, W));
    expect(o.onCreditRequest(small('a', 10, 0))!.issued).to.equal(10); // the whole allowance
    // Within the skew clocks may be apart (two rounds), a node still in the window is served.
    clock.set(end + 49);
    expect(o.onCreditRequest(small('b', 1, 0))).to.equal(undefined); // nothing left
    expect(o.onCreditRequest({ ...small('b', 1, 0), keyId: 'v1:ANOTHERANOTHERANOTHER', windowId: Math.floor((end + 49 - phaseOffset('v1:ANOTHERANOTHERANOTHER', W)) / W) })).to.not.equal(undefined);
    clock.set(end + 50);
    o.sweep(clock.now());
    expect(o.committed(KEY, W, WID)).to.equal(0); // forgotten
    // A node whose clock stepped back beyond the skew asks, and reports demand: still nothing.
    expect(o.onCreditRequest(small('b', 1, 0))).to.equal(undefined);
    expect(o.onReports(batch('b', 'b-e1', 1, 0, 50, 10)).filter((m) => m.type === 'grant')).to.deep.equal([]);
    expect(o.issued(KEY, W, WID)).to.equal(0);
  });

  describe('L2: issued credit never exceeds the allowance, whatever the schedule', () => {
    for (let seed = 1; seed <= 60; seed++) {
      it(`seed ${seed}`, () => {
        const rand = rng(seed);
        const fleet = 1 + Math.floor(rand() * 20);
        const limit = 1 + Math.floor(rand() * 2000);
        const o = owner(fleet, rand() * 0.05);
        const spent = new Map<string, number>();
        // What each node process was granted: it spends no more (a degraded node's charged
        // fail-open admissions aside, which are not part of this property).
        const granted = new Map<string, number>();
        const note = (msgs: ReadonlyArray<{ type: string; nodeEpoch: string; issued?: number } | undefined>): void => {
          for (const m of msgs) if (m?.type === 'grant') granted.set(m.nodeEpoch, Math.max(granted.get(m.nodeEpoch) ?? 0, m.issued!));
        };
        // Batches held back and delivered later, out of order, some more than once.
        const late: ReportBatch[] = [];
        for (let step = 0; step < 400; step++) {
          const node = `n${Math.floor(rand() * fleet)}`;
          const epoch = `${node}-e${rand() < 0.05 ? 2 : 1}`;
          if (rand() < 0.5) {
            note([o.onCreditRequest({ ...req(node, 1 + Math.floor(rand() * 50), Math.floor(rand() * 300), rand() < 0.5, limit), nodeEpoch: epoch, spent: spent.get(epoch) ?? 0 })]);
          } else {
            const s = Math.min(granted.get(epoch) ?? 0, (spent.get(epoch) ?? 0) + Math.floor(rand() * 20));
            spent.set(epoch, s);
            const b = batch(node, epoch, step, s, Math.floor(rand() * 300), limit);
            if (rand() < 0.3) late.push(b);
            else note(o.onReports(b));
            if (rand() < 0.2) note(o.onReports(b)); // duplicate delivery
          }
          if (late.length && rand() < 0.3) note(o.onReports(late.splice(Math.floor(rand() * late.length), 1)[0]!));
          expect(o.committed(KEY, W, WID)).to.be.at.most(limit);
        }
      });
    }
  });
});

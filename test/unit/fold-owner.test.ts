import { expect } from 'chai';
import { FoldOwner } from '../../lib/fold-owner.js';
import type { CreditRequest, Report, ReportBatch } from '../../lib/protocol/messages.js';
import { FakeClock } from '../../lib/clock.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

const KEY = 'v1:OWNEROWNEROWNEROWNERO';
const W = 1000;
const WID = 1_800_000;

function owner(fleet = 4, reserveRatio = 0.02): FoldOwner {
  // The clock stands in the middle of window WID, far from its end (no pre-grants).
  return new FoldOwner(ownerConfig(new FakeClock(WID * W + 100), new FixedFleet(fleet), { reserveRatio }));
}

function req(node: string, need: number, demand: number, fastPath = true, limit = 1000): CreditRequest {
  return { keyId: KEY, windowId: WID, windowMs: W, limit, nodeId: node, nodeEpoch: `${node}-e1`, lease: 1, spent: 0, selfIssued: 0, released: 0, need, demand, fastPath };
}

function batch(node: string, epoch: string, seq: number, spent: number, demand = 0, limit = 1000): ReportBatch {
  const r: Report = { keyId: KEY, windowId: WID, windowMs: W, limit, lease: 1, seq, spent, issued: 0, selfIssued: 0, released: 0, demand, held: 0, selfGrant: false };
  return { shard: 0, nodeId: node, nodeEpoch: epoch, round: seq, reports: [r] };
}

describe('fold owner: the only issuer of credit', () => {
  it('sizes a requested grant from demand × headroom, at least a fair share of what is left', () => {
    const o = owner(4);
    const g1 = o.onCreditRequest(req('a', 1, 2))!;
    expect(g1.issued).to.equal(245); // (1000 − 20 reserve) / 4
    expect(g1.ownerEpoch).to.equal(7);
    expect(g1.grantSeq).to.equal(1);
    const g2 = o.onCreditRequest(req('a', 1, 400))!; // demand 400 × 1.25 = 500, holds 245 → +255
    expect(g2.issued).to.equal(500);
    expect(g2.grantSeq).to.equal(2);
    const g3 = o.onCreditRequest({ ...req('b', 1, 1), spent: 0 })!; // pool 480 / 4 nodes
    expect(g3.issued).to.equal(120);
  });

  it('takes the spend a request carries as fresher than the last report', () => {
    const o = owner(4);
    o.onCreditRequest(req('a', 1, 1)); // 245
    const g = o.onCreditRequest({ ...req('a', 1, 400), spent: 245 })!; // holds 0: wants the full 500
    expect(g.issued).to.equal(745);
    expect(o.spent(KEY, W, WID)).to.equal(245);
  });

  it('holds back the reserve (R = 2 %) from ordinary grants', () => {
    const o = owner(1);
    expect(o.onCreditRequest(req('a', 1, 1, false))!.issued).to.equal(980);
    // The same request again (a retry, a duplicate) restates the grant and adds nothing.
    expect(o.onCreditRequest(req('a', 1, 1, false))).to.include({ issued: 980, grantSeq: 1 });
    expect(o.onCreditRequest({ ...req('a', 1, 1, false), spent: 980 })).to.equal(undefined);
    expect(o.issued(KEY, W, WID)).to.equal(980);
  });

  it('releases the reserve only on the fast path, at most once per key per window', () => {
    const o = owner(1);
    o.onCreditRequest(req('a', 1, 1, false));
    expect(o.onCreditRequest(req('b', 5, 5, false))).to.equal(undefined); // not the fast path: no reserve
    const r1 = o.onCreditRequest({ ...req('a', 5, 5), spent: 980 })!;
    expect(r1.issued).to.equal(987); // the reserve is released into the pool; this grant takes demand × h
    expect(o.stats.reserveReleases).to.equal(1);
    expect(o.onCreditRequest(req('b', 1, 1))!.issued).to.equal(13); // b's fair share of the rest: all of it
    expect(o.onCreditRequest(req('c', 1, 1))).to.equal(undefined);
    expect(o.stats.reserveReleases).to.equal(1);
    expect(o.issued(KEY, W, WID)).to.equal(1000);
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
    const g1 = o.onCreditRequest(req('a', 1, 1, false))!;
    expect(g1.lease).to.equal(1);
    o.onReports(batch('a', 'a-e1', 1, 980));
    const g2 = o.onCreditRequest({ ...req('a', 1, 1), lease: 2 })!;
    expect(g2.lease).to.equal(2);
    expect(g2.grantSeq).to.equal(1);
    expect(g2.issued).to.equal(2); // only the reserve is left: released, and this lease takes what it asks
    expect(o.issued(KEY, W, WID)).to.equal(982);
    expect(o.spent(KEY, W, WID)).to.equal(980);
  });

  it('tops up a node whose advertised demand outruns the credit it holds', () => {
    const o = owner(4);
    o.onCreditRequest(req('a', 1, 1)); // 245 issued to a-e1
    const grants = o.onReports(batch('a', 'a-e1', 1, 240, 100)); // holds 5, wants 125
    expect(grants).to.have.length(1);
    expect(grants[0]).to.include({ type: 'grant', issued: 245 + 120 });
  });

  it('drops ledgers two rounds after the window ends', () => {
    const o = owner();
    o.onCreditRequest(req('a', 1, 1));
    const end = (o as unknown as { ledgers: Map<string, Array<{ windowEnd: number }>> }).ledgers.get(KEY)![0]!.windowEnd;
    o.sweep(end + 49);
    expect(o.size).to.equal(1);
    o.sweep(end + 50);
    expect(o.size).to.equal(0);
  });

  describe('L2: issued credit never exceeds the allowance, whatever the schedule', () => {
    for (let seed = 1; seed <= 60; seed++) {
      it(`seed ${seed}`, () => {
        const rand = rng(seed);
        const fleet = 1 + Math.floor(rand() * 20);
        const limit = 1 + Math.floor(rand() * 2000);
        const o = owner(fleet, rand() * 0.05);
        const spent = new Map<string, number>();
        // Batches held back and delivered later, out of order, some more than once.
        const late: ReportBatch[] = [];
        for (let step = 0; step < 400; step++) {
          const node = `n${Math.floor(rand() * fleet)}`;
          const epoch = `${node}-e${rand() < 0.05 ? 2 : 1}`;
          if (rand() < 0.5) {
            o.onCreditRequest({ ...req(node, 1 + Math.floor(rand() * 50), Math.floor(rand() * 300), rand() < 0.5, limit), nodeEpoch: epoch, spent: spent.get(epoch) ?? 0 });
          } else {
            const s = (spent.get(epoch) ?? 0) + Math.floor(rand() * 20);
            spent.set(epoch, s);
            const b = batch(node, epoch, step, s, Math.floor(rand() * 300), limit);
            if (rand() < 0.3) late.push(b);
            else o.onReports(b);
            if (rand() < 0.2) o.onReports(b); // duplicate delivery
          }
          if (late.length && rand() < 0.3) o.onReports(late.splice(Math.floor(rand() * late.length), 1)[0]!);
          expect(o.committed(KEY, W, WID)).to.be.at.most(limit);
        }
      });
    }
  });
});

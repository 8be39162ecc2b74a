import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { decodeSighting, fromScore, HOUR_MS, hourOf, parseMember, PeakAggregator, SightingAggregator, type Sighting } from '../../lib/peak-history.js';
import { judgeCandidate, type PeakRecord, type TrafficHistory } from '../../lib/policy-backfill.js';
import { compilePolicy, type PolicyDoc } from '../../lib/policy.js';
import type { ReportBatch } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import { demoPolicy } from '../support/fixtures.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

const A = 'v1:AAAAAAAAAAAAAAAAAAAAAA';
const B = 'v1:BBBBBBBBBBBBBBBBBBBBBB';
const C = 'v1:CCCCCCCCCCCCCCCCCCCCCC';
const H0 = 1_764_000_000_000 - (1_764_000_000_000 % HOUR_MS);

function history(sightings: Record<string, Sighting>, peaks: PeakRecord[]): TrafficHistory {
  return { hoursRead: 720, hoursWithData: new Set(peaks.map((p) => p.hour)).size, firstHour: H0, lastHour: H0 + HOUR_MS, sightings: new Map(Object.entries(sightings)), peaks };
}

const acme: Sighting = { tenant: 'acme', routeClass: '', windowLengths: [1000, 60_000] };
const peak = (keyId: string, windowMs: number, count: number, saturated = false, hour = H0): PeakRecord => ({ keyId, windowMs, hour, count, saturated });
/** The demo policy with the free plan's burst window at `burst` per second. */
const withBurst = (burst: number, extra: Partial<PolicyDoc> = {}): PolicyDoc => {
  const d = demoPolicy(extra);
  return { ...d, plans: { ...d.plans, free: { windows: [{ name: 'burst', limit: burst, windowMs: 1000 }, d.plans.free!.windows[1]!] } } };
};

describe('policy staging: peak history', () => {
  it('keeps per hour and (key, window length) the largest count a window admitted, and whether it used its allowance', () => {
    const p = new PeakAggregator();
    p.add(A, 1000, H0 + 5_000, 7, 10);
    p.add(A, 1000, H0 + 9_000, 10, 10); // saturated
    p.add(A, 1000, H0 + 12_000, 4, 10);
    p.add(A, 60_000, H0 + 60_000, 55, 100);
    p.add(A, 1000, H0 + HOUR_MS + 1, 3, 10); // the next hour
    p.add(B, 1000, H0 + 1, 1, 10); // one request: no limit can refuse it, not kept
    p.add(`${A}/dual`, 1000, H0 + 1, 9, 10); // a dual run's counts are not the key's traffic
    expect(p.size).to.equal(3);
    const rows = p.take(H0 + HOUR_MS + 10).map((e) => ({ hour: e.hour, ...parseMember(e.member)!, ...fromScore(e.score) }));
    expect(rows).to.have.deep.members([
      { hour: H0, keyId: A, windowMs: 1000, count: 10, saturated: true },
      { hour: H0, keyId: A, windowMs: 60_000, count: 55, saturated: false },
      { hour: H0 + HOUR_MS, keyId: A, windowMs: 1000, count: 3, saturated: false },
    ]);
    // The past hour is forgotten once handed over; the current one is kept, and only a rise is handed over again.
    expect(p.size).to.equal(1);
    p.add(A, 1000, H0 + HOUR_MS + 2_000, 3, 10);
    expect(p.take(H0 + HOUR_MS + 20)).to.deep.equal([]);
    p.add(A, 1000, H0 + HOUR_MS + 3_000, 6, 10);
    expect(p.take(H0 + HOUR_MS + 30).map((e) => fromScore(e.score).count)).to.deep.equal([6]);
    expect(p.take(H0 + 2 * HOUR_MS)).to.deep.equal([]);
    expect(p.size).to.equal(0);
    expect(hourOf(H0 + HOUR_MS - 1)).to.equal(H0);
  });

  it('a larger count outranks a saturated smaller one (the score is a max over both)', () => {
    const p = new PeakAggregator();
    p.add(A, 1000, H0 + 1, 5, 5); // saturated under an allowance of 5
    p.add(A, 1000, H0 + 2, 8, 20); // a later, larger allowance, more admitted
    expect(p.take(H0).map((e) => fromScore(e.score))).to.deep.equal([{ count: 8, saturated: false }]);
  });

  it('a node hands over each key once per hour, and again when its tenant or limits change', () => {
    const s = new SightingAggregator();
    const pol = compilePolicy(demoPolicy());
    const free = pol.limitsFor(A, 'acme');
    for (let i = 0; i < 100; i++) s.note(A, 'acme', 'default', free);
    s.note(B, undefined, 'public', pol.anonymousLimitsFor('public'));
    const first = s.take(H0 + 10);
    expect(first.map((r) => [r.hour, r.keyId, decodeSighting(r.value)])).to.deep.equal([
      [H0, A, { tenant: 'acme', routeClass: '', windowLengths: [1000, 60_000] }],
      [H0, B, { tenant: undefined, routeClass: 'public', windowLengths: [1000] }],
    ]);
    s.note(A, 'acme', 'payments', free); // an authenticated caller's route class does not pick its plan
    expect(s.take(H0 + 20)).to.deep.equal([]);
    s.note(A, 'acme', 'default', pol.limitsFor(A, 'globex'));
    s.note(A, 'globex', 'default', pol.limitsFor(A, 'globex'));
    expect(s.take(H0 + HOUR_MS + 5).map((r) => [r.hour, decodeSighting(r.value)?.tenant])).to.deep.equal([[H0, 'globex']]);
    s.note(A, 'globex', 'default', pol.limitsFor(A, 'globex')); // a new hour: handed over again
    expect(s.take(H0 + HOUR_MS + 10).map((r) => r.hour)).to.deep.equal([H0 + HOUR_MS]);
    expect(decodeSighting('not json')).to.equal(undefined);
    expect(decodeSighting('["t", "", [0]]')).to.equal(undefined);
  });

  it("an owner's sweep hands over each dropped window's fleet-wide count (spent, summed over leases and node epochs) and its allowance", () => {
    const key = 'v1:OWNEROWNEROWNEROWNERO';
    const W = 1000;
    const WID = 1_800_000;
    const clock = new FakeClock(WID * W + 100);
    const o = new FoldOwner(ownerConfig(clock, new FixedFleet(2), {}));
    const batch = (node: string, spent: number): ReportBatch => ({
      shard: 0,
      nodeId: node,
      nodeEpoch: `${node}-e1`,
      round: 1,
      reports: [{ keyId: key, windowId: WID, windowMs: W, limit: 50, lease: 1, seq: 1, spent, issued: spent, selfIssued: 0, released: 0, demand: 0, held: 0, selfGrant: false }],
    });
    o.onReports(batch('a', 12));
    o.onReports(batch('b', 9));
    const seen: unknown[] = [];
    const end = windowEndMs(WID, W, phaseOffset(key, W));
    o.sweep(end - 1, (...w) => seen.push(w));
    expect(seen).to.deep.equal([]); // still running
    clock.set(end + 1000);
    o.sweep(end + 1000, (...w) => seen.push(w));
    expect(seen).to.deep.equal([[key, W, end, 21, 50]]);
    expect(o.size).to.equal(0);
  });
});

describe('policy staging: judging a candidate', () => {
  const current = compilePolicy(demoPolicy()); // free: 10/s, 100/min
  const fine = peak(A, 1000, 6);
  const busy = peak(B, 1000, 9); // under today's 10, over a candidate's 5
  const atLimit = peak(C, 1000, 10, true); // used its whole allowance: throttled today

  it('a stricter candidate newly throttles a key under its limit today; one already at its limit is listed apart; one under the new limit is fine', () => {
    const h = history({ [A]: acme, [B]: acme, [C]: acme }, [fine, busy, atLimit, peak(B, 1000, 7, false, H0 + HOUR_MS)]);
    const r = judgeCandidate(current, compilePolicy(withBurst(5)), h);
    expect(r.newlyThrottled.count).to.equal(2);
    expect(r.newlyThrottled.keys).to.deep.equal([
      { keyId: B, window: 'burst', windowMs: 1000, peak: 9, hour: H0, hours: 2, oldLimit: 10, newLimit: 5 },
      { keyId: A, window: 'burst', windowMs: 1000, peak: 6, hour: H0, hours: 1, oldLimit: 10, newLimit: 5 },
    ]);
    expect(r.furtherThrottled.keys).to.deep.equal([{ keyId: C, window: 'burst', windowMs: 1000, peak: 10, hour: H0, hours: 1, oldLimit: 10, newLimit: 5 }]);
    expect(r.unjudged.count).to.equal(0);
    expect(r.keysSeen).to.equal(3);
    expect(r.windowsJudged).to.equal(3);
    expect(r.hoursWithData).to.equal(2);
  });

  it('the policy in force, staged again, throttles nobody newly; a looser one neither', () => {
    const h = history({ [A]: acme, [B]: acme, [C]: acme }, [fine, busy, atLimit]);
    for (const doc of [demoPolicy(), withBurst(50)]) {
      const r = judgeCandidate(current, compilePolicy(doc), h);
      expect([r.newlyThrottled.count, r.furtherThrottled.count, r.unjudged.count]).to.deep.equal([0, 0, 0]);
    }
  });

  it('a key at its limit under a plan in shadow mode today was refused nothing: enforcing the plan newly throttles it', () => {
    const doc = demoPolicy();
    const shadowFree = compilePolicy({ ...doc, plans: { ...doc.plans, free: { ...doc.plans.free!, mode: 'shadow' } } });
    const r = judgeCandidate(shadowFree, compilePolicy(doc), history({ [C]: acme }, [atLimit]));
    expect(r.newlyThrottled.keys).to.deep.equal([{ keyId: C, window: 'burst', windowMs: 1000, peak: 10, hour: H0, hours: 1, oldLimit: null, newLimit: 10 }]);
    expect(r.furtherThrottled.count).to.equal(0);
  });

  it('resolves a key as nodes do: override, then tenant plan, then default; anonymous callers by route class; shadow plans throttle nobody', () => {
    const h = history({ [A]: acme, [B]: { tenant: 'globex', routeClass: '', windowLengths: [1000, 60_000] }, [C]: { tenant: undefined, routeClass: 'public', windowLengths: [1000] } }, [
      peak(A, 1000, 9),
      peak(B, 1000, 9),
      peak(C, 1000, 4),
    ]);
    const doc = withBurst(5, { tenants: { globex: { plan: 'pro' } }, keys: {}, routeClasses: { public: { plan: 'anonymous' } } });
    const cand: PolicyDoc = { ...doc, plans: { ...doc.plans, anonymous: { windows: [{ name: 'burst', limit: 3, windowMs: 1000 }] } } };
    const r = judgeCandidate(current, compilePolicy(cand), h);
    // A: free (5) → throttled; B: tenant globex → pro (100) → fine; C: anonymous on public → 3 → throttled.
    expect(r.newlyThrottled.keys.map((k) => [k.keyId, k.newLimit])).to.have.deep.members([
      [A, 5],
      [C, 3],
    ]);
    const override = judgeCandidate(current, compilePolicy({ ...cand, keys: { [A]: { plan: 'pro' } } }), h);
    expect(override.newlyThrottled.keys.map((k) => k.keyId)).to.deep.equal([C]);
    const shadow = judgeCandidate(current, compilePolicy({ ...cand, plans: { ...cand.plans, free: { ...cand.plans.free!, mode: 'shadow' } } }), h);
    expect(shadow.newlyThrottled.keys.map((k) => k.keyId)).to.deep.equal([C]);
  });

  it('lists what it cannot judge: a candidate window length a key has no record of, and a key with peaks but no known tenant', () => {
    const doc = demoPolicy();
    const cand = { ...doc, plans: { ...doc.plans, free: { windows: [...doc.plans.free!.windows, { name: 'hourly', limit: 500, windowMs: 3_600_000 }] } } };
    const h = history({ [A]: acme }, [peak(A, 1000, 4), peak(B, 60_000, 80)]);
    const r = judgeCandidate(current, compilePolicy(cand), h);
    expect(r.unjudged.keys).to.deep.equal([
      { keyId: A, window: 'hourly', windowMs: 3_600_000, newLimit: 500, reason: 'no recorded history for this window length' },
      { keyId: B, window: 'sustained', windowMs: 60_000, newLimit: 100, reason: 'no node recorded its tenant: its plan is unknown' },
    ]);
    expect(r.newlyThrottled.count).to.equal(0);
  });

  it('with no policy in force yet every count over a candidate limit is newly throttled; the lists are capped, the counts are not', () => {
    const keys = Array.from({ length: 5 }, (_, i) => `v1:KEY${i}KEYKEYKEYKEYKEYKEYK`.slice(0, 25));
    const h = history(
      Object.fromEntries(keys.map((k) => [k, acme])),
      keys.map((k, i) => peak(k, 1000, 6 + i)),
    );
    const r = judgeCandidate(undefined, compilePolicy(withBurst(5)), h, 2);
    expect(r.newlyThrottled.count).to.equal(5);
    expect(r.newlyThrottled.keys.map((k) => [k.peak, k.oldLimit])).to.deep.equal([
      [10, null],
      [9, null],
    ]);
  });
});

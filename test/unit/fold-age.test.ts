import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { FOLD_AGE_BOUNDS, FoldAges, TopKeys, TOP_K } from '../../lib/owner/fold-age.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import type { Report, ReportBatch } from '../../lib/protocol/messages.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

const W = 1000;
const WID = 1_800_000;
const NOW = WID * W + 100;
const HOT = 'v1:HOTHOTHOTHOTHOTHOTHOTH';
const key = (i: number): string => `v1:${String(i).padStart(22, 'q')}`;

function report(keyId: string, seq: number, spent: number, demand = 0, extra: Partial<Report> = {}): Report {
  return { keyId, windowId: WID, windowMs: W, limit: 1000, lease: 1, seq, spent, issued: 0, selfIssued: 0, released: 0, demand, held: 0, selfGrant: false, ...extra };
}

function batch(node: string, round: number, reports: Report[]): ReportBatch {
  return { shard: 0, nodeId: node, nodeEpoch: `${node}-e1`, round, reports };
}

describe('top keys: the keys an owner folds the most for, in bounded memory', () => {
  it('finds a key folded by every node every round among 10,000 keys folded once each, and holds only K names', () => {
    const clock = new FakeClock(NOW);
    const top = new TopKeys(clock);
    let hotTop = 0;
    for (let round = 0; round < 40; round++) {
      for (let n = 0; n < 20; n++) if (top.count(HOT)) hotTop++;
      for (let i = 0; i < 250; i++) top.count(key(round * 250 + i));
      clock.advance(25);
    }
    // From its second round on, every count of the hot key finds it among the top K.
    expect(hotTop).to.be.at.least(39 * 20);
    const list = top.list();
    expect(list).to.have.length(TOP_K);
    expect(list[0]!.keyId).to.equal(HOT);
    expect(list[0]!.work).to.be.above(100);
  });

  it('forgets a key that stopped: counts halve every second, and busier keys take its place', () => {
    const clock = new FakeClock(NOW);
    const top = new TopKeys(clock, 2);
    for (let i = 0; i < 100; i++) top.count(HOT);
    expect(top.has(HOT)).to.equal(true);
    clock.advance(5000); // 100 → ~3
    for (let i = 0; i < 10; i++) {
      top.count(key(1));
      top.count(key(2));
    }
    expect(top.has(HOT)).to.equal(false);
    expect(top.list().map((e) => e.keyId)).to.have.members([key(1), key(2)]);
  });
});

describe('fold ages: from a batch entering the bus to its fold, split by top keys and the others', () => {
  it('counts each observation in its bucket, sums it, and takes a negative age (clocks a little apart) as 0', () => {
    const ages = new FoldAges();
    const seen: Array<[number, boolean]> = [];
    ages.watcher = (ms, top) => seen.push([ms, top]);
    ages.observe(3, false); // 0.003 s: the 0.005 bucket
    ages.observe(60, false); // beyond two rounds: the 0.1 bucket
    ages.observe(-2, true);
    ages.observe(5000, true); // beyond every bound
    expect([...ages.other.counts]).to.deep.equal(FOLD_AGE_BOUNDS.map((b) => (b === 0.005 || b === 0.1 ? 1 : 0)).concat(0));
    expect(ages.other.count).to.equal(2);
    expect(ages.other.sum).to.be.closeTo(0.063, 1e-9);
    expect(ages.top.counts[0]).to.equal(1);
    expect(ages.top.counts[FOLD_AGE_BOUNDS.length]).to.equal(1);
    expect(seen).to.deep.equal([
      [3, false],
      [60, false],
      [0, true],
      [5000, true],
    ]);
  });

  it('an owner measures every report it folds, once: a duplicate changes no ledger and adds no age', () => {
    const clock = new FakeClock(NOW);
    const o = new FoldOwner(ownerConfig(clock, new FixedFleet(4)));
    const ages: number[] = [];
    o.foldAges.watcher = (ms) => ages.push(ms);
    const queued = clock.monotonic();
    clock.advance(30);
    const b = batch('a', 1, [report(key(1), 1, 1), report(key(2), 1, 2)]);
    o.onReports(b, queued);
    o.onReports(b, queued); // delivered twice
    o.onReports(batch('a', 2, [report(key(1), 2, 3)])); // no time known: folded, not measured
    expect(ages).to.deep.equal([30, 30]);
    expect(o.spent(key(1), W, WID)).to.equal(3);
  });

  it('counts a key every node reports every round among the top keys, and its 200 co-tenants among the others', () => {
    const clock = new FakeClock(NOW);
    const o = new FoldOwner(ownerConfig(clock, new FixedFleet(20)));
    const classed = { hot: [] as boolean[], others: [] as boolean[] };
    let folding: boolean[] = classed.others;
    o.foldAges.watcher = (_ms, top) => folding.push(top);
    for (let round = 1; round <= 40; round++) {
      for (let n = 0; n < 20; n++) {
        const queued = clock.monotonic();
        clock.advance(1);
        folding = classed.hot;
        o.onReports(batch(`n${n}`, round, [report(HOT, round, 0, 400)]), queued);
        folding = classed.others;
        o.onReports(
          batch(
            `n${n}`,
            round,
            Array.from({ length: 10 }, (_, i) => report(key(n * 10 + i), round, round, 0.5)),
          ),
          queued,
        );
      }
      clock.advance(5);
    }
    expect(classed.hot).to.have.length(800);
    expect(classed.hot.slice(20).every((top) => top)).to.equal(true);
    expect(classed.others).to.have.length(8000);
    // The top K holds K keys: besides the hot one, K − 1 of the 200 at most, each briefly.
    expect(classed.others.filter((top) => top).length).to.be.below(classed.others.length / 10);
  });
});

describe('fold order changes no ledger: the same reports folded in any order give the same ledgers', () => {
  /** Every lease's figures as a checkpoint states them, over all 8 shards, in a fixed order. */
  const ledgers = (o: FoldOwner): string[] =>
    Array.from({ length: 8 }, (_, s) => o.snapshot(s))
      .flat()
      .flatMap((e: LogEntry) => (e.kind === 'report' ? e.batch.reports.map((r) => JSON.stringify([e.batch.nodeEpoch, r])) : [JSON.stringify(e)]))
      .sort();

  for (let seed = 1; seed <= 40; seed++) {
    it(`seed ${seed}`, () => {
      const rand = rng(seed);
      const nodes = 2 + Math.floor(rand() * 8);
      const keys = Array.from({ length: 1 + Math.floor(rand() * 6) }, (_, i) => key(i));
      // Cumulative counts per (node, key): each batch states them as they stood in its round.
      const batches: ReportBatch[] = [];
      const spent = new Map<string, number>();
      const selfGranted = new Set<string>();
      for (let round = 1; round <= 20; round++) {
        for (let n = 0; n < nodes; n++) {
          const reports = keys
            .filter(() => rand() < 0.6)
            .map((k) => {
              const s = (spent.get(`${n}|${k}`) ?? 0) + Math.floor(rand() * 5);
              spent.set(`${n}|${k}`, s);
              const released = Math.floor(s / 4);
              // Cumulative, as a node reports them: a self-grant once made stays in every later report.
              if (rand() < 0.05) selfGranted.add(`${n}|${k}`);
              const selfIssued = selfGranted.has(`${n}|${k}`) ? 1 : 0;
              return report(k, round, s, 0, { released, issued: s + released, selfIssued, selfGrant: selfIssued > 0 });
            });
          if (reports.length) batches.push(batch(`n${n}`, round, reports));
        }
      }
      // Folded in order; in a shuffled order with duplicates; and with every batch split by key
      // (as an owner folding the hot keys of a batch apart from the rest would).
      const fold = (order: readonly ReportBatch[]): FoldOwner => {
        const o = new FoldOwner(ownerConfig(new FakeClock(NOW), new FixedFleet(nodes)));
        for (const b of order) o.onReports(b);
        return o;
      };
      const inOrder = fold(batches);
      const shuffled = [...batches, ...batches.filter(() => rand() < 0.3)];
      for (let i = shuffled.length - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1));
        [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
      }
      const split = batches.flatMap((b) => b.reports.map((r) => ({ ...b, reports: [r] }))).reverse();
      for (const other of [fold(shuffled), fold(split)]) {
        expect(ledgers(other)).to.deep.equal(ledgers(inOrder));
        for (const k of keys) {
          expect(other.committed(k, W, WID)).to.equal(inOrder.committed(k, W, WID));
          expect(other.spent(k, W, WID)).to.equal(inOrder.spent(k, W, WID));
        }
      }
      // With demand, folds also top leases up, and what each gets depends on what is left when its
      // report comes: the grants may differ by order, never the merged counts, and never L2.
      const busy = (order: readonly ReportBatch[]): FoldOwner => {
        const o = new FoldOwner(ownerConfig(new FakeClock(NOW), new FixedFleet(nodes)));
        for (const b of order) {
          o.onReports({ ...b, reports: b.reports.map((r) => ({ ...r, demand: 1 + (r.spent % 7) })) });
          for (const k of keys) expect(o.committed(k, W, WID)).to.be.at.most(1000);
        }
        return o;
      };
      const [a, b] = [busy(batches), busy(shuffled)];
      expect(a.stats.grants).to.be.above(0);
      for (const k of keys) expect(b.spent(k, W, WID)).to.equal(a.spent(k, W, WID));
    });
  }
});

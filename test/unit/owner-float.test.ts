import { expect } from 'chai';
import { EnvelopeCodec } from '../../bus/codec.js';
import { FakeClock } from '../../lib/clock.js';
import { FLOAT_PREFIX, FoldOwner } from '../../lib/fold-owner.js';
import { shardOf, type CreditRequest, type Grant, type Report, type ReportBatch } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

/**
 * The owner's float: credit it logs as issued to itself so that a remote ask the float covers is
 * answered without waiting for a log write. What must hold: the float is committed from the moment
 * it is made (L2 counts it), usable only once its grant is on record, and a later owner replaying
 * the log counts it whole, whichever of its grants the log kept.
 */
const KEY = 'v1:FLOATFLOATFLOATFLOATF';
const W = 60_000;
const WID = 30_000;
const NOW = WID * W + 100;
const HOLDER = { nodeId: 'h', nodeEpoch: 'h-e1' };
const all = (): boolean => true;

function owner(epoch = { value: 7 }): FoldOwner {
  return new FoldOwner(ownerConfig(new FakeClock(NOW), new FixedFleet(4), { reserveRatio: 0, floatHolder: HOLDER, ownerEpoch: () => epoch.value }));
}

function ask(node: string, need: number, limit = 10, lease = 1): CreditRequest {
  return { keyId: KEY, windowId: WID, windowMs: W, limit, nodeId: node, nodeEpoch: `${node}-e1`, lease, spent: 0, selfIssued: 0, released: 0, need, demand: 0, fastPath: true };
}

/** The owner's floats made and put on record, as the bus does once their log write comes back. */
function refillLogged(o: FoldOwner): Grant[] {
  const floats = o.refillFloats(all);
  o.logged(floats);
  return floats;
}

/** An owner of an 8-per-window key whose pool is spent (b 1, c 5) and whose float holds the last 2, on record. */
function poolSpent(): FoldOwner {
  const o = owner();
  o.refillFloats(all);
  o.logged([o.onCreditRequest(ask('b', 1, 8))!]);
  refillLogged(o);
  o.logged([o.onCreditRequest(ask('c', 5, 8))!]);
  return o;
}

const grants = (gs: readonly Grant[]): LogEntry[] => gs.map((grant) => ({ kind: 'grant', grant }));

describe('owner float: asks answered before their log write, never past the allowance', () => {
  it('is committed from the moment it is made, and usable only once its grant is on record', () => {
    const o = owner();
    o.refillFloats(all); // turns floats on
    const g1 = o.onCreditRequest(ask('b', 1))!; // no float yet: from the pool, waits for its log write
    expect(g1.floated).to.equal(undefined);
    expect(o.onRecord(g1)).to.equal(false);
    const [f] = o.refillFloats(all);
    expect(f).to.deep.include({ nodeId: 'h', nodeEpoch: `${FLOAT_PREFIX}h-e1`, lease: 7, issued: 2 });
    expect(o.committed(KEY, W, WID)).to.equal(3);
    expect(o.float(KEY, W, WID), 'not on record yet').to.equal(0);
    const g2 = o.onCreditRequest(ask('c', 1))!;
    expect(g2.floated).to.equal(undefined);
    o.logged([g1, g2, f!]);
    expect(o.float(KEY, W, WID)).to.equal(2);
    const g3 = o.onCreditRequest(ask('d', 1))!;
    expect(g3).to.deep.include({ issued: 1, floated: 1 });
    expect(o.onRecord(g3), 'all of it was on record as the float').to.equal(true);
    expect(o.committed(KEY, W, WID), 'moving float credit commits nothing more').to.equal(4);
    expect(o.float(KEY, W, WID)).to.equal(1);
    expect(o.issued(KEY, W, WID)).to.equal(3);
  });

  it('makes no float for a window moved to fixed share, nor the next window’s from it', () => {
    const clock = new FakeClock(NOW);
    const o = new FoldOwner(ownerConfig(clock, new FixedFleet(4), { reserveRatio: 0, floatHolder: HOLDER, ownerEpoch: () => 7 }));
    o.refillFloats(all); // turns floats on
    o.onCreditRequest(ask('b', 1, 100)); // leasing: the window is marked for a float
    o.onCreditRequest({ ...ask('c', 1, 100), fixedShare: true }); // a policy change moved it to fixed share
    const before = o.committed(KEY, W, WID);
    expect(o.refillFloats(all)).to.deep.equal([]);
    expect(o.committed(KEY, W, WID)).to.equal(before);
    // In its last two rounds: no float of the next window made from it either.
    clock.advance(windowEndMs(WID, W, phaseOffset(KEY, W)) - 30 - clock.now());
    expect(o.refillFloats(all)).to.deep.equal([]);
    expect(o.committed(KEY, W, WID + 1)).to.equal(0);
  });

  it('makes the next window’s float when another node reports ahead for a key it will ask for, not far ahead', () => {
    // 30 ms before window WID + 1 starts; b tells its owner it will see the key there, too rarely for a lease.
    const start = windowEndMs(WID, W, phaseOffset(KEY, W));
    const near = (): FoldOwner => new FoldOwner(ownerConfig(new FakeClock(start - 30), new FixedFleet(4), { reserveRatio: 0, floatHolder: HOLDER, ownerEpoch: () => 7 }));
    const ahead = (windowId: number, demand: number, node = 'b'): ReportBatch => ({
      shard: 0,
      nodeId: node,
      nodeEpoch: `${node}-e1`,
      round: 1,
      reports: [{ keyId: KEY, windowId, windowMs: W, limit: 10, lease: 1, seq: 1, spent: 0, issued: 0, selfIssued: 0, released: 0, demand, held: 0, selfGrant: false }],
    });
    const o = near();
    o.refillFloats(all);
    o.onReports(ahead(WID + 1, 0.1));
    const [f] = refillLogged(o);
    expect(f).to.deep.include({ windowId: WID + 1, issued: 2 });
    expect(o.float(KEY, W, WID + 1)).to.equal(2);
    // None for: a busy key (it gets a lease), a window far ahead (a buggy member's).
    for (const batch of [ahead(WID + 1, 8), ahead(WID + 2, 0.1)]) {
      const other = near();
      other.refillFloats(all);
      other.onReports(batch);
      expect(other.refillFloats(all), JSON.stringify(batch.reports[0])).to.deep.equal([]);
    }
  });

  it('makes it for this node’s own report ahead too: its own first ask in the window is answered without a log write', () => {
    // This node's asks wait for their grant's log write like any other's (a later owner replays the
    // log): without a float the first ask of each window of a key it sees about once a second did.
    const start = windowEndMs(WID, W, phaseOffset(KEY, W));
    const clock = new FakeClock(start - 30);
    const o = new FoldOwner(ownerConfig(clock, new FixedFleet(1), { reserveRatio: 0, floatHolder: HOLDER, ownerEpoch: () => 7 }));
    o.refillFloats(all);
    o.onReports({
      shard: 0,
      nodeId: 'h',
      nodeEpoch: 'h-e1',
      round: 1,
      reports: [{ keyId: KEY, windowId: WID + 1, windowMs: W, limit: 10, lease: 1, seq: 1, spent: 0, issued: 0, selfIssued: 0, released: 0, demand: 0.1, held: 0, selfGrant: false }],
    });
    expect(refillLogged(o)).to.have.length(1);
    clock.advance(31); // window WID + 1 has begun: this node's first request there asks
    const g = o.onCreditRequest({ ...ask('h', 1), windowId: WID + 1 })!;
    expect(g).to.deep.include({ windowId: WID + 1, issued: 1, floated: 1 });
    expect(o.onRecord(g), 'all of it was on record as the float').to.equal(true);
  });

  it('this node’s own asks, answered in process, take from the float too', () => {
    const o = owner();
    o.refillFloats(all);
    o.logged([o.onCreditRequest(ask('b', 1, 3))!]);
    refillLogged(o); // a float of 1: a quarter of 3, at least 1
    expect(o.onCreditRequest(ask('h', 1, 3))).to.deep.include({ issued: 1, floated: 1 });
    expect(o.committed(KEY, W, WID)).to.equal(2);
  });

  it('refills a settled float again after the next ask, though rounds without asks leave it alone', () => {
    const o = owner();
    o.refillFloats(all);
    o.logged([o.onCreditRequest(ask('b', 1))!]);
    refillLogged(o);
    for (let i = 0; i < 3; i++) expect(o.refillFloats(all)).to.deep.equal([]);
    expect(o.onCreditRequest(ask('c', 1))).to.deep.include({ floated: 1 });
    const [f] = refillLogged(o);
    expect(f).to.deep.include({ issued: 3 });
    expect(o.float(KEY, W, WID)).to.equal(2);
  });

  it('keeps a float whose write is out through rounds it is not served, and writes it again after', () => {
    const o = owner();
    o.refillFloats(all);
    o.logged([o.onCreditRequest(ask('b', 1))!]);
    const [f] = o.refillFloats(all); // its write is lost in a blip
    expect(o.refillFloats(() => false)).to.deep.equal([]); // Redis out of reach: not served
    for (let i = 0; i < 3; i++) expect(o.refillFloats(all)).to.deep.equal([]);
    expect(o.refillFloats(all)).to.deep.equal([f]);
  });

  it('never passes the allowance after a replay that lost a float’s grant but kept what moved out of it', () => {
    // The log kept b's grant (6, all from a float) and c's (3), not the float's grant behind them.
    const fromLost = (node: string, issued: number, floated: number): Grant => ({
      type: 'grant',
      keyId: KEY,
      windowId: WID,
      windowMs: W,
      nodeId: node,
      nodeEpoch: `${node}-e1`,
      lease: 1,
      ownerEpoch: 6,
      grantSeq: 1,
      issued,
      ...(floated > 0 ? { floated } : {}),
    });
    const o = owner();
    o.replay(grants([fromLost('b', 6, 6), fromLost('c', 3, 0)]));
    o.refillFloats(all);
    // Committed reads 9 of 12 (b's 6 counted as the lost float's): new floats must not hide behind that.
    for (let i = 0; i < 6; i++) {
      o.onCreditRequest(ask(`e${i}`, 1, 12));
      refillLogged(o);
      // What nodes hold (b's 6 moved out of the lost float among it) and what the float can give.
      expect(o.issued(KEY, W, WID) + o.float(KEY, W, WID), `round ${i}`).to.be.at.most(12);
    }
    expect(o.float(KEY, W, WID)).to.equal(0);
  });

  it('a grant whose credit beyond the float is not on record yet waits for its log write', () => {
    const o = owner();
    o.refillFloats(all);
    const g1 = o.onCreditRequest(ask('b', 1))!;
    refillLogged(o);
    const g2 = o.onCreditRequest({ ...ask('b', 1), spent: 1 })!; // b spent g1's credit and asks again
    expect(g2).to.deep.include({ issued: 2, floated: 1 });
    expect(o.onRecord(g2), "g1's credit is in it and not on record").to.equal(false);
    o.logged([g1]);
    expect(o.onRecord(g2)).to.equal(true);
  });

  it('a later owner replaying the log counts a float whole, whichever of its grants the log kept', () => {
    const o = owner();
    o.refillFloats(all);
    const g1 = o.onCreditRequest(ask('b', 1))!;
    o.logged([g1]);
    const [f] = refillLogged(o);
    const g2 = o.onCreditRequest({ ...ask('b', 1), spent: 1 })!; // answered from the float
    expect(g2).to.deep.include({ issued: 2, floated: 1 });
    // The owner dies before g2's log write: the log has g1 and the float; b reports what it holds.
    const report: Report = { keyId: KEY, windowId: WID, windowMs: W, limit: 10, lease: 1, seq: 1, spent: 2, issued: 2, selfIssued: 0, released: 0, demand: 0, held: 0, selfGrant: false };
    const next = new FoldOwner(ownerConfig(new FakeClock(NOW), new FixedFleet(4), { reserveRatio: 0, ownerEpoch: () => 8 }));
    next.replay(grants([g1, f!]));
    next.onReports({ shard: 0, nodeId: 'b', nodeEpoch: 'b-e1', round: 1, reports: [report] });
    // Out: b's 2 and what the float may still give (1). The successor counts 2 + 2.
    expect(next.committed(KEY, W, WID)).to.equal(4);
    expect(next.unissued(KEY, W, WID)).to.equal(6);
    // A log that kept g2 but lost the float's grant still counts what moved out of it.
    const other = new FoldOwner(ownerConfig(new FakeClock(NOW), new FixedFleet(4), { reserveRatio: 0, ownerEpoch: () => 8 }));
    other.replay(grants([g2]));
    expect(other.committed(KEY, W, WID)).to.equal(2);
    // And a checkpoint restores the float and what moved out of it exactly.
    const copy = new FoldOwner(ownerConfig(new FakeClock(NOW), new FixedFleet(4), { reserveRatio: 0, ownerEpoch: () => 8 }));
    copy.replay(o.snapshot(shardOf(KEY, WID, 8)));
    expect(copy.committed(KEY, W, WID)).to.equal(o.committed(KEY, W, WID));
  });

  it('a float made under an earlier owner epoch is not this owner’s to use', () => {
    const epoch = { value: 7 };
    const o = owner(epoch);
    o.refillFloats(all);
    o.logged([o.onCreditRequest(ask('b', 1))!]);
    refillLogged(o);
    expect(o.float(KEY, W, WID)).to.equal(2);
    epoch.value = 9; // lost the shard and took it back: a successor may have replayed the log between
    expect(o.float(KEY, W, WID)).to.equal(0);
    expect(o.onCreditRequest(ask('c', 1))!.floated).to.equal(undefined);
    const [f] = refillLogged(o);
    expect(f).to.deep.include({ lease: 9 });
    expect(o.float(KEY, W, WID)).to.equal(2);
  });

  it('gives nothing past the allowance when committed credit is over it (a lower limit mid-window), and does not throw', () => {
    const o = poolSpent();
    // The plan drops to 6: 8 stay committed, and the float's 2 are not the fleet's to give any more.
    expect(o.onCreditRequest(ask('d', 1, 6))).to.equal(undefined);
    expect(o.float(KEY, W, WID)).to.equal(0);
    // Back at 7, one of them is.
    expect(o.onCreditRequest(ask('e', 1, 7))).to.deep.include({ issued: 1, floated: 1 });
    expect(o.onCreditRequest(ask('f', 1, 7))).to.equal(undefined);
  });

  it('knows nothing on record after a change of owner epoch (Redis may have lost the log)', () => {
    const epoch = { value: 7 };
    const o = owner(epoch);
    o.refillFloats(all);
    o.logged([o.onCreditRequest(ask('b', 1))!]);
    epoch.value = 8;
    refillLogged(o);
    const g = o.onCreditRequest({ ...ask('b', 1), spent: 1 })!;
    expect(g).to.deep.include({ issued: 2, floated: 1, ownerEpoch: 8 });
    expect(o.onRecord(g), 'its first credit was on record under epoch 7 only').to.equal(false);
  });

  it('writes a float’s grant again when its log write does not come back, and waits for it meanwhile', () => {
    const o = owner();
    o.refillFloats(all);
    o.logged([o.onCreditRequest(ask('b', 1))!]);
    const [f] = o.refillFloats(all); // its write is lost
    expect(o.refillFloats(all)).to.deep.equal([]);
    expect(o.refillFloats(all)).to.deep.equal([]);
    expect(o.refillFloats(all)).to.deep.equal([]);
    expect(o.refillFloats(all), 'the same cumulative grant again').to.deep.equal([f]);
    expect(o.committed(KEY, W, WID)).to.equal(3);
    o.logged([f!]);
    expect(o.float(KEY, W, WID)).to.equal(2);
  });

  it('tells no lease the window is exhausted while the float still has credit for asks', () => {
    const o = poolSpent();
    expect(o.takeOutbox().filter((m) => m.type === 'adjust' && m.exhausted)).to.have.length(0);
    expect(o.onCreditRequest(ask('d', 1, 8))).to.deep.include({ issued: 1, floated: 1 });
    expect(o.onCreditRequest(ask('e', 1, 8))).to.deep.include({ issued: 1, floated: 1 });
    expect(o.takeOutbox().filter((m) => m.type === 'adjust' && m.exhausted)).to.have.length.above(0);
    expect(o.onCreditRequest(ask('f', 1, 8))).to.equal(undefined);
    expect(o.committed(KEY, W, WID)).to.equal(8);
  });

  it('keeps committed credit within the allowance, and nodes’ credit within it, over 300 random runs', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const rand = rng(seed);
      const limit = 5 + Math.floor(rand() * 40);
      const o = owner();
      o.refillFloats(all);
      const pending: Grant[] = [];
      const held = new Map<string, number>();
      const spent = new Map<string, number>();
      for (let step = 0; step < 200; step++) {
        const r = rand();
        const node = `n${Math.floor(rand() * 5)}`;
        if (r < 0.5) {
          const g = o.onCreditRequest({ ...ask(node, 1 + Math.floor(rand() * 3), limit), spent: spent.get(node) ?? 0 });
          if (g !== undefined) {
            pending.push(g);
            held.set(node, Math.max(held.get(node) ?? 0, g.issued));
          }
        } else if (r < 0.65) pending.push(...o.refillFloats(all));
        else if (r < 0.9 && pending.length > 0) {
          // Log writes come back in any order; some never do.
          const i = Math.floor(rand() * pending.length);
          const [g] = pending.splice(i, 1);
          if (rand() < 0.9) o.logged([g!]);
        } else spent.set(node, held.get(node) ?? 0);
        const out = [...held.values()].reduce((a, b) => a + b, 0);
        expect(o.committed(KEY, W, WID), `seed ${seed} step ${step}`).to.be.at.most(limit);
        expect(out + o.float(KEY, W, WID), `seed ${seed} step ${step}: nodes' credit and the float`).to.be.at.most(limit);
      }
    }
  });

  it('travels in a grant as a trailing field: older grants read as 0, more than issued is refused', () => {
    const codec = new EnvelopeCodec([{ version: 'b1', secret: 'owner-float-test-secret' }]);
    const g: Grant = { type: 'grant', keyId: KEY, windowId: WID, windowMs: W, nodeId: 'b', nodeEpoch: 'b-e1', lease: 1, ownerEpoch: 7, grantSeq: 2, issued: 3, floated: 2 };
    const open = (grant: Grant): Grant => {
      const env = codec.open(codec.seal('grants', { shard: 1, grants: [grant] }));
      return (env.body as { grants: Grant[] }).grants[0]!;
    };
    expect(open(g)).to.deep.equal(g);
    const { floated: _, ...old } = g;
    expect(open(old)).to.deep.equal(old);
    expect(() => open({ ...g, floated: 4 })).to.throw(/grants\[0\]\.floated: must not be more than issued/);
  });
});

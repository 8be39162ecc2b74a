import { expect } from 'chai';
import { EnvelopeCodec } from '../../bus/codec.js';
import { FakeClock } from '../../lib/clock.js';
import { BLANKET_SPAN_MS, type Blanket } from '../../lib/owner/blankets.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import type { Grant } from '../../lib/protocol/messages.js';
import { ALL_SHARDS, DAY, HOLDER, LATER, NOW, W, all, ask, covered, keyAt, owner, stating, type Key } from '../support/blankets.js';
import { FixedFleet } from '../support/protocol.js';

/**
 * Blankets: one log write per shard that lets the owner answer the first ask of any window of it with
 * one credit, before that answer's own log write. What must hold: nothing is answered so before the
 * blanket's write was taken, nor while a member may not count blankets, nor in a window that started
 * before the owner's first blanket; a later owner replaying the log (or a checkpoint) counts the
 * credit in every window the blanket covers — made before or after the replay — so it never issues
 * past the allowance what the earlier owner handed out unlogged; and a blanket retired by an owner
 * that gave its shard up cleanly costs later owners nothing.
 */

const blanketEntries = (bs: readonly Blanket[]): LogEntry[] => bs.map((blanket) => ({ kind: 'blanket', blanket }));
const grantEntries = (gs: readonly Grant[]): LogEntry[] => gs.map((grant) => ({ kind: 'grant', grant }));
/** A retirement (`retireBlanket`) as the log holds it: the grants of its floats, then the retired blanket. */
const retirement = (r: { blanket: Blanket; grants: Grant[] }): LogEntry[] => [...grantEntries(r.grants), { kind: 'blanket', blanket: r.blanket }];
const carried = (entries: readonly LogEntry[]): Blanket[] => entries.flatMap((e) => (e.kind === 'blanket' ? [e.blanket] : []));

describe('owner blankets: a window’s first ask answered before its log write', () => {
  it('answers a first ask from a float of one credit once the blanket is on record, and counts it committed', () => {
    const clock = new FakeClock(NOW);
    const o = owner(clock);
    o.refillFloats(all);
    const due = o.blanketsDue(ALL_SHARDS, all);
    expect(due.map((b) => b.shard)).to.deep.equal(ALL_SHARDS);
    expect(due[0]).to.deep.include({ nodeId: 'h', nodeEpoch: 'h-e1', ownerEpoch: 7, startsAfter: Math.floor(NOW), startsBy: Math.floor(NOW) + BLANKET_SPAN_MS });
    clock.set(LATER);
    const before = o.onCreditRequest(ask(keyAt(1, LATER), 'a'))!;
    expect(o.onRecord(before), 'written, not yet taken: the answer waits for its log write').to.equal(false);
    for (const b of due) o.blanketLogged(b, true);
    const k = keyAt(2, LATER);
    const g = o.onCreditRequest(ask(k, 'a'))!;
    expect(g).to.deep.include({ issued: 1, floated: 1 });
    expect(o.onRecord(g), 'all of it came out of the blanket’s float').to.equal(true);
    expect(o.committed(k.keyId, W, k.windowId)).to.equal(1);
    expect(o.stats.blanketFloats).to.equal(1);
    // The window's next ask finds the float empty until a refill is on record: it waits for the log.
    const g2 = o.onCreditRequest(ask(k, 'b'))!;
    expect(g2.floated).to.equal(undefined);
    expect(o.onRecord(g2)).to.equal(false);
    expect(o.stats.blanketFloats, 'one blanket credit per window').to.equal(1);
  });

  it('covers no window that started before the owner’s first blanket, nor one starting after the blanket’s time', () => {
    const clock = new FakeClock(NOW);
    const o = owner(clock);
    const [b] = covered(o);
    const before = keyAt(3, NOW);
    expect(before.start).to.be.at.most(b!.startsAfter);
    expect(o.onCreditRequest(ask(before, 'a'))!.floated).to.equal(undefined);
    const day = keyAt(3, NOW, DAY);
    expect(o.onCreditRequest(ask(day, 'a'))!.floated).to.equal(undefined);
    const after = keyAt(4, NOW + 2 * BLANKET_SPAN_MS);
    expect(after.start).to.be.greaterThan(b!.startsBy);
    clock.set(after.start + 1);
    expect(o.onCreditRequest(ask(after, 'a'))!.floated).to.equal(undefined);
    expect(o.stats.blanketFloats).to.equal(0);
  });

  it('writes none while a member may not count them, and uses none taken before that', () => {
    const clock = new FakeClock(NOW);
    const fleet = new FixedFleet(3);
    const o = owner(clock, 7, HOLDER, fleet);
    covered(o);
    fleet.blanketsCounted = false;
    clock.set(LATER);
    expect(o.blanketsDue(ALL_SHARDS, all)).to.deep.equal([]);
    expect(o.onCreditRequest(ask(keyAt(5, LATER), 'a'))!.floated).to.equal(undefined);
    expect(o.stats.blanketFloats).to.equal(0);
  });

  it('is written again half a span on, or at once after a write that did not come back; not for shards it does not serve', () => {
    const clock = new FakeClock(NOW);
    const o = owner(clock);
    o.refillFloats(all);
    const [b0] = o.blanketsDue([0, 1], (s) => s === 0);
    expect(b0!.shard).to.equal(0);
    expect(o.blanketsDue([0], all), 'written, still ahead').to.deep.equal([]);
    o.blanketLogged(b0!, false);
    const [again] = o.blanketsDue([0], all);
    expect(again).to.deep.include({ startsAfter: b0!.startsAfter, startsBy: b0!.startsBy });
    o.blanketLogged(again!, true);
    clock.advance(BLANKET_SPAN_MS / 2 - 1);
    expect(o.blanketsDue([0], all)).to.deep.equal([]);
    clock.advance(1);
    const [next] = o.blanketsDue([0], all);
    expect(next).to.deep.include({ startsAfter: b0!.startsAfter, startsBy: b0!.startsBy + BLANKET_SPAN_MS / 2 });
  });

  it('a later owner counts the credit in every window the blanket covers, made in its replay or after', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    const blankets = covered(a);
    clock.set(LATER);
    const k = keyAt(6, LATER);
    expect(a.onCreditRequest(ask(k, 'n', 5))!.floated).to.equal(1);
    // `a` dies before the answer's grant reaches the log: the log holds its blankets only.
    const b = owner(clock, 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
    b.replay(blanketEntries(blankets));
    let issued = 0;
    for (let i = 0; i < 10; i++) issued += b.onCreditRequest(ask(k, `m${i}`, 5, 1, false))?.issued ?? 0;
    expect(issued, 'the allowance of 5 less the blanket’s credit').to.equal(4);
    expect(b.committed(k.keyId, W, k.windowId)).to.equal(5);
    // A window made in the replay (a grant of it logged) counts it as well.
    const k2 = keyAt(7, LATER);
    const other = a.onCreditRequest(ask(k2, 'n', 5))!;
    const c = owner(clock, 9, { nodeId: 'h3', nodeEpoch: 'h3-e1' });
    c.replay([...grantEntries([{ ...other, floated: undefined, issued: 0, grantSeq: 1 }]), ...blanketEntries(blankets)]);
    expect(c.committed(k2.keyId, W, k2.windowId)).to.equal(1);
  });

  it('a later owner counts once the credit a lost answer took from the blanket: its node states it came from a float', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    const blankets = covered(a);
    clock.set(LATER);
    const k = keyAt(8, LATER);
    const first = a.onCreditRequest(ask(k, 'n1', 10, 4, false))!;
    a.logged([first]);
    const answer = a.onCreditRequest(ask(k, 'n2', 10))!;
    expect(answer).to.deep.include({ issued: 1, floated: 1 });
    // `a` dies with that answer's grant out: the log holds its blankets and n1's grant of 4. Its
    // successor hears n2 state its credit by a report or an ask, having answered n3 from its own
    // float first, or not.
    for (const says of ['report', 'ask']) {
      for (const own of [false, true]) {
        const b = owner(clock, 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
        b.replay([...blanketEntries(blankets), ...grantEntries([first])]);
        expect(b.committed(k.keyId, W, k.windowId)).to.equal(5);
        if (own) {
          // n3's first ask is answered after its write and marks the window for a float; its next,
          // from the float once that is on record.
          b.refillFloats(all);
          b.logged([b.onCreditRequest(ask(k, 'n3', 10))!]);
          b.logged(b.refillFloats(all));
          expect(b.onCreditRequest({ ...ask(k, 'n3', 10), spent: 1, issued: 1 })).to.deep.include({ issued: 2, floated: 1 });
        }
        if (says === 'report') b.onReports(stating(k, 'n2', 10, 1, 1));
        else {
          // An ask whose need its credit covers (one in flight, as far as the owner knows): nothing issued.
          expect(b.onCreditRequest({ ...ask(k, 'n2', 10, 1, false), issued: 1, floated: 1 })).to.equal(undefined);
        }
        // n1's 4, n2's 1 (a's blanket's) and, with n3, its 2 and b's float's other 1.
        const want = own ? 8 : 5;
        expect(b.committed(k.keyId, W, k.windowId), `after n2's ${says}${own ? ', n3 answered' : ''}: ${want}, not ${want + 1}`).to.equal(want);
      }
    }
  });

  it('counts a float part a node states against earlier owners’ floats it knows only: after a takeover that lost the log, it is the node’s', () => {
    const clock = new FakeClock(NOW);
    // A blind takeover: Redis lost the log, nothing is replayed, nodes' reports are all there is.
    const b = owner(clock, 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
    covered(b);
    clock.set(LATER);
    const k = keyAt(9, LATER);
    expect(b.onCreditRequest(ask(k, 'n1', 20))).to.deep.include({ issued: 1, floated: 1 });
    const refill = b.refillFloats(all);
    b.logged(refill);
    expect(b.committed(k.keyId, W, k.windowId), 'n1’s 1 and the float’s 2 left').to.equal(3);
    // n2 took 1 out of a float of the owner before, whose record Redis lost.
    b.onReports(stating(k, 'n2', 20, 1, 1));
    expect(b.committed(k.keyId, W, k.windowId), 'not counted against this owner’s own float').to.equal(4);
  });

  it('costs a window nothing after owners that gave the shard up cleanly, nor one that started before them', () => {
    const clock = new FakeClock(NOW);
    const TEN_MIN = 600_000;
    /** A key whose 10-minute window starts in `b`'s range. */
    const startingIn = (b: Blanket): Key => {
      for (let i = 0; i < 1_000_000; i++) {
        const k = keyAt(i, b.startsBy, TEN_MIN);
        if (k.start > b.startsAfter) return k;
      }
      throw new Error('no key');
    };
    let log: LogEntry[] = [];
    const started: Key[] = [];
    for (const [epoch, id] of [
      [7, 'a'],
      [8, 'b'],
    ] as const) {
      const o = owner(clock, epoch, { nodeId: id, nodeEpoch: `${id}-e1` });
      o.replay(log);
      const written = covered(o);
      log = [...log, ...blanketEntries(written)];
      started.push(startingIn(written[0]!));
      // Given up cleanly (b), or failed (a): b's blankets are retired, a's still count.
      if (id === 'b') log.push(...ALL_SHARDS.flatMap((s) => retirement(o.retireBlanket(s)!)));
      clock.advance(60_000);
    }
    const c = owner(clock, 9, { nodeId: 'c', nodeEpoch: 'c-e1' });
    c.replay(log);
    const [inA, inB] = started;
    expect(c.onCreditRequest(ask(inA!, 'n', 2, 2, false))!.issued, 'started in the failed owner’s time: one credit counted').to.equal(1);
    expect(c.onCreditRequest(ask(inB!, 'n', 2, 2, false))!.issued, 'started in the retired owner’s time').to.equal(2);
    const day = keyAt(8, NOW, DAY);
    expect(c.onCreditRequest(ask(day, 'n', 2, 2, false))!.issued, 'started before either').to.equal(2);
  });

  it('a blanket retired later in the log counts in no window, whichever entries of it came between', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    const written = covered(a);
    clock.set(LATER);
    const k = keyAt(12, LATER);
    // An ask off the fast path: from the pool, its grant logged before the answer; no float made.
    const g = a.onCreditRequest(ask(k, 'n', 2, 1, false))!;
    const retired = a.retireBlanket(k.shard)!;
    const log = [...blanketEntries(written), ...grantEntries([g]), ...retirement(retired)];
    const b = owner(clock, 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
    b.replay(log);
    expect(b.committed(k.keyId, W, k.windowId), 'what was granted, and no more').to.equal(1);
    expect(b.onCreditRequest(ask(k, 'm', 2, 1, false))!.issued).to.equal(1);
  });

  it('a retirement logs the floats made under the blanket: what moved out of them is theirs, not another earlier float’s', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    const ofA = covered(a);
    clock.advance(100);
    // b takes the shards over (a, deposed, does not know yet) and writes its own blankets.
    const b = owner(clock, 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
    b.replay(blanketEntries(ofA));
    const ofB = covered(b);
    clock.set(LATER);
    const k = keyAt(14, LATER);
    // a answers x from its blanket's float; that grant's write is refused by b's fence: lost.
    expect(a.onCreditRequest(ask(k, 'x', 2))).to.deep.include({ issued: 1, floated: 1 });
    // b answers y from its own blanket's float, logs it, and gives the shard up cleanly.
    const y = b.onCreditRequest(ask(k, 'y', 2))!;
    expect(y).to.deep.include({ issued: 1, floated: 1 });
    b.logged([y]);
    const retired = b.retireBlanket(k.shard)!;
    expect(retired.grants.map((g) => [g.nodeEpoch, g.issued])).to.deep.equal([['float.h2-e1', 1]]);
    const c = owner(clock, 9, { nodeId: 'h3', nodeEpoch: 'h3-e1' });
    c.replay([...blanketEntries(ofA), ...blanketEntries(ofB), ...grantEntries([y]), ...retirement(retired)]);
    expect(c.committed(k.keyId, W, k.windowId), 'x’s 1 (a’s blanket) and y’s 1 (b’s float)').to.equal(2);
    expect(c.onCreditRequest(ask(k, 'z', 2, 1, false))).to.equal(undefined);
  });

  it('a float made under a blanket it retires gives nothing until a grant of it is on record', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    covered(a);
    clock.set(LATER);
    const k = keyAt(13, LATER);
    // Wanting two: more than the blanket's float holds, so it is made and left unused.
    expect(a.onCreditRequest(ask(k, 'n', 10, 2))!.floated).to.equal(undefined);
    expect(a.float(k.keyId, W, k.windowId)).to.equal(1);
    expect(a.retireBlanket(k.shard)!.grants, 'a float that gave nothing: no grant relies on it').to.deep.equal([]);
    expect(a.float(k.keyId, W, k.windowId)).to.equal(0);
    // Its grant, written again a few rounds on (cumulative, the blanket's credit included), back
    // from the log: usable again.
    for (let round = 0; round < 4; round++) a.logged(a.refillFloats(all));
    expect(a.float(k.keyId, W, k.windowId)).to.be.at.least(1);
  });

  it('retires nothing once a grant with float credit was not taken by the log', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    covered(a);
    clock.set(LATER);
    const k = keyAt(10, LATER);
    const g = a.onCreditRequest(ask(k, 'n', 5))!;
    expect(g.floated).to.equal(1);
    a.logged([g], false);
    expect(a.retireBlanket(k.shard)).to.equal(undefined);
    const other = ALL_SHARDS.find((s) => s !== k.shard)!;
    expect(a.retireBlanket(other)?.blanket).to.deep.include({ shard: other, retired: true });
  });

  it('a checkpoint carries the latest blanket written, whatever came back in what order', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    a.refillFloats(all);
    const [b1] = a.blanketsDue([0], all);
    a.blanketLogged(b1!, true);
    clock.advance(BLANKET_SPAN_MS / 2);
    const [b2] = a.blanketsDue([0], all); // its reply is slow
    clock.advance(BLANKET_SPAN_MS / 2);
    const [b3] = a.blanketsDue([0], all);
    a.blanketLogged(b3!, false);
    a.blanketLogged(b2!, true);
    expect(carried(a.snapshot(0)).map((b) => b.startsBy)).to.deep.equal([b3!.startsBy]);
  });

  it('a checkpoint carries the blankets, its own and those it replayed', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    const blankets = covered(a);
    const b = owner(clock, 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
    b.replay(blanketEntries(blankets));
    covered(b);
    clock.set(LATER);
    const k = keyAt(11, LATER);
    const snap = b.snapshot(k.shard);
    expect(carried(snap).map((x) => [x.nodeId, x.ownerEpoch])).to.have.deep.members([
      ['h', 7],
      ['h2', 8],
    ]);
    // Through the codec, as a checkpoint travels.
    const codec = new EnvelopeCodec([{ version: 'b1', secret: 'owner-blanket-test-secret' }]);
    const opened = codec.open(codec.seal('snapshot', { shard: k.shard, entries: snap, epoch: 8 }));
    const c = owner(clock, 9, { nodeId: 'h3', nodeEpoch: 'h3-e1' });
    c.replay(opened.t === 'snapshot' ? opened.body.entries : []);
    const g = c.onCreditRequest(ask(k, 'z', 5, 5, false))!;
    expect(g.issued, 'the allowance of 5 less both earlier owners’ blanket credit').to.equal(3);
    expect(c.committed(k.keyId, W, k.windowId)).to.equal(5);
  });
});

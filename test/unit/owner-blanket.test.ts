import { expect } from 'chai';
import { EnvelopeCodec } from '../../bus/codec.js';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { BLANKET_SPAN_MS, type Blanket } from '../../lib/owner/blankets.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import { shardOf, type CreditRequest, type Grant } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

/**
 * Blankets: one log write per shard that lets the owner answer the first ask of any window of it with
 * one credit, before that answer's own log write. What must hold: nothing is answered so before the
 * blanket's write was taken, nor while a member may not count blankets; and a later owner replaying
 * the log (or a checkpoint) counts the credit in every window the blanket covers — made before or
 * after the replay — so it never issues past the allowance what the earlier owner handed out unlogged.
 */
const W = 1000;
const HOLDER = { nodeId: 'h', nodeEpoch: 'h-e1' };
const SHARDS = 8;
const all = (): boolean => true;
const ALL_SHARDS = [0, 1, 2, 3, 4, 5, 6, 7];

/** A key id (22 base64url characters after `v1:`) and the id of its window running at `now`. */
function keyAt(i: number, now: number): { keyId: string; windowId: number; shard: number; start: number } {
  const keyId = `v1:BLANKETBLANKET${String(i).padStart(6, '0')}`;
  const windowId = Math.floor((now - phaseOffset(keyId, W)) / W);
  return { keyId, windowId, shard: shardOf(keyId, windowId, SHARDS), start: windowEndMs(windowId, W, phaseOffset(keyId, W)) - W };
}

function owner(clock: FakeClock, fleet = new FixedFleet(3), epoch = 7, holder = HOLDER): FoldOwner {
  return new FoldOwner(ownerConfig(clock, fleet, { reserveRatio: 0, floatHolder: holder, ownerEpoch: () => epoch }));
}

function ask(k: { keyId: string; windowId: number }, node: string, limit = 10, need = 1): CreditRequest {
  return { keyId: k.keyId, windowId: k.windowId, windowMs: W, limit, nodeId: node, nodeEpoch: `${node}-e1`, lease: 1, spent: 0, selfIssued: 0, released: 0, need, demand: 0, fastPath: true };
}

/** Floats turned on (the bus's first round) and every shard's blanket written and taken. */
function covered(o: FoldOwner): Blanket[] {
  o.refillFloats(all);
  const due = o.blanketsDue(ALL_SHARDS, all);
  for (const b of due) o.blanketLogged(b, true);
  return due;
}

const blanketEntries = (bs: readonly Blanket[]): LogEntry[] => bs.map((blanket) => ({ kind: 'blanket', blanket }));
const grantEntries = (gs: readonly Grant[]): LogEntry[] => gs.map((grant) => ({ kind: 'grant', grant }));

describe('owner blankets: a window’s first ask answered before its log write', () => {
  const NOW = 5_000_000_123;

  it('answers a first ask from a float of one credit once the blanket is on record, and counts it committed', () => {
    const clock = new FakeClock(NOW);
    const o = owner(clock);
    o.refillFloats(all);
    const due = o.blanketsDue(ALL_SHARDS, all);
    expect(due.map((b) => b.shard)).to.deep.equal(ALL_SHARDS);
    expect(due[0]).to.deep.include({ nodeId: 'h', nodeEpoch: 'h-e1', ownerEpoch: 7, startsBy: Math.floor(NOW) + BLANKET_SPAN_MS });
    const k = keyAt(1, NOW);
    const before = o.onCreditRequest(ask(k, 'a'))!;
    expect(o.onRecord(before), 'written, not yet taken: the answer waits for its log write').to.equal(false);
    for (const b of due) o.blanketLogged(b, true);
    const k2 = keyAt(2, NOW);
    const g = o.onCreditRequest(ask(k2, 'a'))!;
    expect(g).to.deep.include({ issued: 1, floated: 1 });
    expect(o.onRecord(g), 'all of it came out of the blanket’s float').to.equal(true);
    expect(o.committed(k2.keyId, W, k2.windowId)).to.equal(1);
    expect(o.stats.blanketFloats).to.equal(1);
    // The window's next ask finds the float empty until a refill is on record: it waits for the log.
    const g2 = o.onCreditRequest(ask(k2, 'b'))!;
    expect(g2.floated).to.equal(undefined);
    expect(o.onRecord(g2)).to.equal(false);
    expect(o.stats.blanketFloats, 'one blanket credit per window').to.equal(1);
  });

  it('writes none while a member may not count them, and uses none taken before that', () => {
    const clock = new FakeClock(NOW);
    const fleet = new FixedFleet(3);
    const o = owner(clock, fleet);
    covered(o);
    fleet.blanketsCounted = false;
    clock.advance(BLANKET_SPAN_MS);
    expect(o.blanketsDue(ALL_SHARDS, all)).to.deep.equal([]);
    // Still within the blanket taken before, but no longer used.
    const g = o.onCreditRequest(ask(keyAt(3, clock.now()), 'a'))!;
    expect(g.floated).to.equal(undefined);
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
    expect(again!.startsBy).to.equal(b0!.startsBy);
    o.blanketLogged(again!, true);
    clock.advance(BLANKET_SPAN_MS / 2 - 1);
    expect(o.blanketsDue([0], all)).to.deep.equal([]);
    clock.advance(1);
    expect(o.blanketsDue([0], all)).to.have.length(1);
  });

  it('covers no window that starts after the blanket’s time', () => {
    const clock = new FakeClock(NOW);
    const o = owner(clock);
    const [b] = covered(o).filter((x) => x.shard === keyAt(4, NOW + 2 * BLANKET_SPAN_MS).shard);
    const later = keyAt(4, NOW + 2 * BLANKET_SPAN_MS);
    expect(later.start).to.be.greaterThan(b!.startsBy);
    clock.set(later.start + 1);
    const g = o.onCreditRequest(ask(later, 'a'))!;
    expect(g.floated).to.equal(undefined);
  });

  it('a later owner counts the credit in every window the blanket covers, made in its replay or after', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    const blankets = covered(a);
    const k = keyAt(5, NOW);
    const g = a.onCreditRequest(ask(k, 'n', 5))!;
    expect(g.floated).to.equal(1);
    // `a` dies before the answer's grant reaches the log: the log holds its blankets only.
    const b = owner(clock, new FixedFleet(3), 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
    b.replay(blanketEntries(blankets));
    let issued = 0;
    for (let i = 0; i < 10; i++) issued += b.onCreditRequest({ ...ask(k, `m${i}`, 5), fastPath: false })?.issued ?? 0;
    expect(issued, 'the allowance of 5 less the blanket’s credit').to.equal(4);
    expect(b.committed(k.keyId, W, k.windowId)).to.equal(5);
    // A window made in the replay (a grant of it logged) counts it as well.
    const k2 = keyAt(6, NOW);
    const c = owner(clock, new FixedFleet(3), 9, { nodeId: 'h3', nodeEpoch: 'h3-e1' });
    const other = a.onCreditRequest(ask(k2, 'n', 5))!;
    c.replay([...grantEntries([{ ...other, floated: undefined, issued: 0, grantSeq: 1 }]), ...blanketEntries(blankets)]);
    expect(c.committed(k2.keyId, W, k2.windowId)).to.be.at.least(1);
  });

  it('a checkpoint carries the blankets, its own and those it replayed', () => {
    const clock = new FakeClock(NOW);
    const a = owner(clock);
    const blankets = covered(a);
    const k = keyAt(7, NOW);
    const s = k.shard;
    const b = owner(clock, new FixedFleet(3), 8, { nodeId: 'h2', nodeEpoch: 'h2-e1' });
    b.replay(blanketEntries(blankets));
    covered(b);
    const snap = b.snapshot(s);
    const carried = snap.filter((e) => e.kind === 'blanket').map((e) => (e.kind === 'blanket' ? e.blanket : undefined));
    expect(carried.map((x) => [x!.nodeId, x!.ownerEpoch])).to.have.deep.members([
      ['h', 7],
      ['h2', 8],
    ]);
    // Through the codec, as a checkpoint travels.
    const codec = new EnvelopeCodec([{ version: 'b1', secret: 'owner-blanket-test-secret' }]);
    const opened = codec.open(codec.seal('snapshot', { shard: s, entries: snap, epoch: 8 }));
    const c = owner(clock, new FixedFleet(3), 9, { nodeId: 'h3', nodeEpoch: 'h3-e1' });
    c.replay(opened.t === 'snapshot' ? opened.body.entries : []);
    const g = c.onCreditRequest({ ...ask(k, 'z', 5, 5), fastPath: false })!;
    expect(g.issued, 'the allowance of 5 less both earlier owners’ blanket credit').to.equal(3);
    expect(c.committed(k.keyId, W, k.windowId)).to.equal(5);
  });
});

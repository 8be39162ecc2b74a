import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import type { FoldOwner } from '../../lib/fold-owner.js';
import { BLANKET_SPAN_MS } from '../../lib/owner/blankets.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import type { Grant } from '../../lib/protocol/messages.js';
import { ALL_SHARDS, HOLDER, LATER, NOW, W, all, ask, covered, keyAt, owner, stating, type Key } from '../support/blankets.js';
import { FixedFleet } from '../support/protocol.js';

/**
 * Members' credit under blankets (`lib/owner/held.ts`): a member a blanket lists takes credit itself,
 * with no ask and no grant, in a window the blanket covers. What must hold: every owner counts that
 * credit committed in every such window whose allowance is large enough, taken or not — the writer
 * before the write goes out (windows already there counted first, or left out), later owners from the
 * log or a checkpoint, even once the blanket is retired — and a member's statement of what it took
 * counts once.
 */
const LIMIT = 1000;
const MIN = 1000;

function holding(...nodes: string[]): FixedFleet {
  const fleet = new FixedFleet(nodes.length + 1);
  fleet.holding = nodes.map((nodeId) => ({ nodeId, nodeEpoch: `${nodeId}-e1` }));
  return fleet;
}

const heldOwner = (clock: FakeClock, fleet: FixedFleet, epoch = 7): FoldOwner => owner(clock, epoch, undefined, fleet, { heldMinAllowance: MIN });

/** An owner listing n1 and n2, every shard's blanket on record, and the clock at LATER. */
function coveredAtLater(): { clock: FakeClock; o: FoldOwner } {
  const clock = new FakeClock(NOW);
  const o = heldOwner(clock, holding('n1', 'n2'));
  covered(o);
  clock.set(LATER);
  return { clock, o };
}

/** What `o` counts committed in `k`'s window once a report of nothing made its ledger, at `limit`. */
function countedIn(o: FoldOwner, k: Key, limit = LIMIT): number {
  o.onReports(stating(k, 'n9', limit, 0, 0));
  return o.committed(k.keyId, k.windowMs, k.windowId);
}

/** The first key after `from` whose window running at `at` is on `shard`, and its index. */
function keyOn(shard: number, at: number, from = 100): Key & { i: number } {
  for (let i = from; ; i++) {
    const k = keyAt(i, at);
    if (k.shard === shard) return { ...k, i };
  }
}

describe('members’ credit under blankets', () => {
  it('counts every listed member’s credit in each window the blanket covers, taken or not, before any grant', () => {
    const clock = new FakeClock(NOW);
    const o = heldOwner(clock, holding('n1', 'n2'));
    const [b] = covered(o);
    expect(b!.held?.holders.map((h) => [h.nodeEpoch, h.since])).to.deep.equal([
      ['n1-e1', NOW],
      ['n2-e1', NOW],
    ]);
    clock.set(LATER);
    const k = keyAt(1, LATER);
    expect(countedIn(o, k)).to.equal(2);
    expect(o.unissued(k.keyId, W, k.windowId)).to.equal(LIMIT - 2);
    // A window that started before the owner's first blanket holds none.
    expect(countedIn(o, keyAt(2, NOW))).to.equal(0);
  });

  it('counts none in a window whose allowance is below the least, and counts it once the allowance grows to it', () => {
    const { o } = coveredAtLater();
    const k = keyAt(3, LATER);
    expect(countedIn(o, k, MIN - 1)).to.equal(0);
    expect(countedIn(o, k, MIN)).to.equal(2);
    // Never uncounted: a smaller allowance again leaves it.
    expect(countedIn(o, k, MIN - 1)).to.equal(2);
  });

  it('counts a member’s credit once, whether its lease’s issued holds it or a grant that did not know of it absorbed it', () => {
    const { o } = coveredAtLater();
    const k = keyAt(4, LATER);
    // n1 took its 1 and says so: nothing more is committed.
    o.onReports(stating(k, 'n1', LIMIT, 1, 0, 1));
    expect(o.committed(k.keyId, W, k.windowId)).to.equal(2);
    // It asks for more, stating what it holds: the grant adds only what it gives.
    const g = o.onCreditRequest({ ...ask(k, 'n1', LIMIT, 5, false), issued: 1, blanketed: 1 })!;
    expect(g.issued - 1).to.equal(o.committed(k.keyId, W, k.windowId) - 2);
    // n2 asked without saying (an ask of an older release): its grant counts from 0; the node applies
    // the larger of its own 1 and the grant's issued, and says it took 1.
    const g2 = o.onCreditRequest(ask(k, 'n2', LIMIT, 3, false))!;
    o.onReports(stating(k, 'n2', LIMIT, g2.issued, 0, 1));
    expect(o.committed(k.keyId, W, k.windowId)).to.equal(g.issued + g2.issued);
  });

  it('counts the members’ credit in windows already there before a new part of the blanket is written, and ends it before one with no room', () => {
    const clock = new FakeClock(NOW);
    const o = heldOwner(clock, holding('n1', 'n2'));
    const [first] = covered(o).filter((b) => b.shard === keyAt(100, NOW + 3001).shard);
    // Two windows of one shard that start after the blanket's end: one with room, one (later) whose
    // allowance an earlier owner's grant, stated by its node, took whole.
    const a = keyOn(first!.shard, NOW + 3001);
    let full = keyOn(first!.shard, NOW + 3001, a.i + 1);
    while (full.start <= a.start) full = keyOn(first!.shard, NOW + 3001, full.i + 1);
    expect(a.start).to.be.above(first!.startsBy);
    o.onReports(stating(a, 'n3', LIMIT, 0, 0));
    o.onReports(stating(full, 'n3', LIMIT, LIMIT, 0));
    clock.set(first!.startsBy - BLANKET_SPAN_MS / 2);
    const next = o.blanketsDue(ALL_SHARDS, all).find((b) => b.shard === first!.shard)!;
    // The held part ends before the full window; the blanket's own range (its float's) goes on.
    expect(next.held?.startsBy).to.equal(full.start - 1);
    expect(next.startsBy).to.equal(first!.startsBy + BLANKET_SPAN_MS / 2);
    expect(o.committed(a.keyId, W, a.windowId)).to.equal(2);
    expect(o.committed(full.keyId, W, full.windowId)).to.equal(LIMIT);
  });

  it('lists a new member from the blanket’s last end on, and ends one that left there', () => {
    const clock = new FakeClock(NOW);
    const fleet = holding('n1');
    const o = heldOwner(clock, fleet);
    const [b] = covered(o);
    fleet.holding = [{ nodeId: 'n2', nodeEpoch: 'n2-e1' }];
    clock.set(b!.startsBy - BLANKET_SPAN_MS / 2);
    const next = o.blanketsDue([b!.shard], all)[0]!;
    expect(next.held?.holders).to.deep.equal([
      { nodeId: 'n1', nodeEpoch: 'n1-e1', since: NOW, until: b!.startsBy },
      { nodeId: 'n2', nodeEpoch: 'n2-e1', since: b!.startsBy },
    ]);
    o.blanketLogged(next, true);
    // A window of the shard starting by the old end holds n1's credit; one after it, n2's.
    const before = keyOn(b!.shard, b!.startsBy);
    let after = keyOn(b!.shard, next.startsBy);
    while (after.start <= b!.startsBy) after = keyOn(b!.shard, next.startsBy, after.i + 1);
    clock.set(after.start);
    o.onReports(stating(before, 'n1', LIMIT, 1, 0, 1));
    o.onReports(stating(after, 'n2', LIMIT, 1, 0, 1));
    o.onReports(stating(after, 'n1', LIMIT, 1, 0, 1));
    expect(o.committed(before.keyId, W, before.windowId), 'n1 took its own').to.equal(1);
    expect(o.committed(after.keyId, W, after.windowId), 'n2 took its own; n1’s is its lease’s').to.equal(2);
  });

  it('a later owner counts the members’ credit from the log, and from a checkpoint, even once the blanket is retired', () => {
    const clock = new FakeClock(NOW);
    const a = heldOwner(clock, holding('n1', 'n2'));
    const k = keyAt(5, LATER);
    const [b] = covered(a).filter((x) => x.shard === k.shard);
    const retired = a.retireBlanket(k.shard)!;
    expect(retired.blanket.retired).to.equal(true);
    const log: LogEntry[] = [
      { kind: 'blanket', blanket: b! },
      { kind: 'blanket', blanket: retired.blanket },
    ];
    clock.set(LATER);
    const s = heldOwner(clock, holding(), 8);
    s.replay(log);
    expect(countedIn(s, k)).to.equal(2);
    const c = heldOwner(clock, holding(), 9);
    c.replay(s.snapshot(k.shard));
    expect(c.committed(k.keyId, W, k.windowId)).to.equal(2);
    // A window made after the replay too.
    expect(countedIn(c, keyOn(k.shard, LATER, 6))).to.equal(2);
  });

  it('keeps counting the last owner epoch’s members when the shard stays with this process under a new one', () => {
    const clock = new FakeClock(NOW);
    let epoch = 7;
    const o = owner(clock, epoch, undefined, holding('n1', 'n2'), { heldMinAllowance: MIN, ownerEpoch: () => epoch });
    const k = keyAt(7, LATER);
    covered(o);
    // The new epoch's first blanket covers nothing that starts by now: only the last one's members count.
    epoch = 8;
    clock.set(k.start);
    o.blanketsDue([k.shard], all);
    expect(countedIn(o, k)).to.equal(2);
  });

  it('answers a member that took its credit at once from the float: the blanket is that credit’s record', () => {
    const { clock, o } = coveredAtLater();
    const k = keyAt(8, LATER);
    // n1 spent the credit it took and asks, stating it: the window's first ask, answered from the
    // blanket's float of one.
    const g = o.onCreditRequest({ ...ask(k, 'n1', LIMIT), spent: 1, issued: 1, blanketed: 1 })!;
    expect(g.floated, 'from the float').to.be.above(0);
    expect(o.onRecord(g), 'nothing but the float and what n1 took').to.equal(true);
    // Without the blanket's record, the 1 it says it took waits for the grant's write.
    const other = keyAt(9, LATER);
    const p = heldOwner(clock, holding());
    covered(p);
    expect(p.onRecord(p.onCreditRequest({ ...ask(other, 'n1', LIMIT), spent: 1, issued: 1, blanketed: 1 })!)).to.equal(false);
  });

  it('counts a blanket’s float again when its owner takes the shard back under the epoch it retired it in', () => {
    const clock = new FakeClock(NOW);
    const a = heldOwner(clock, holding('n1'));
    const k = keyAt(10, LATER);
    const [b] = covered(a).filter((x) => x.shard === k.shard);
    const retired = a.retireBlanket(k.shard)!.blanket;
    // Back under the same epoch: a first blanket again, then one covering the window.
    clock.set(k.start - 1);
    const again = a.blanketsDue([k.shard], all)[0]!;
    const log: LogEntry[] = [b!, retired, again].map((blanket) => ({ kind: 'blanket', blanket }));
    const s = heldOwner(clock, holding(), 8);
    s.replay(log);
    clock.set(LATER);
    // n1's credit and the float's one: the later record is not retired.
    expect(countedIn(s, k)).to.equal(2);
  });

  it('counts at most one credit per node epoch as the blanket’s: a node stating more keeps the rest its lease’s', () => {
    const { o } = coveredAtLater();
    const k = keyAt(11, LATER);
    o.onReports(stating(k, 'n1', LIMIT, 2, 0, 2));
    expect(o.committed(k.keyId, W, k.windowId)).to.equal(3);
    const g = o.onCreditRequest({ ...ask(k, 'n1', LIMIT), spent: 2, issued: 2, blanketed: 2 })!;
    expect(g.issued - 2 - (g.floated ?? 0), 'direct credit beyond what it took').to.equal(0);
    expect(o.onRecord(g), 'its second credit is on record nowhere').to.equal(false);
  });

  it('counts the members’ credit in a window a replay made in a shard of its own blanket', () => {
    const { o } = coveredAtLater();
    const k = keyAt(12, LATER);
    o.replay([{ kind: 'report', batch: stating(k, 'n9', LIMIT, 0, 0) }]);
    expect(o.committed(k.keyId, W, k.windowId)).to.equal(2);
  });

  it('takes what is held back for a node that may have granted itself credit as no room for a new part', () => {
    const clock = new FakeClock(NOW);
    const fleet = holding('n1', 'n2');
    const o = heldOwner(clock, fleet);
    const [first] = covered(o).filter((b) => b.shard === keyAt(100, NOW + 3001).shard);
    const a = keyOn(first!.shard, NOW + 3001);
    // Room for both members' credit, but not once a silent node's self-grant (a third) is held back.
    o.onReports(stating(a, 'n3', LIMIT, LIMIT - Math.ceil(LIMIT / 3) - 1, 0));
    fleet.silentNodes = ['n4'];
    clock.set(first!.startsBy - BLANKET_SPAN_MS / 2);
    const next = o.blanketsDue([first!.shard], all)[0]!;
    expect(next.held?.startsBy).to.equal(a.start - 1);
  });

  it('says an answer stating what a node took is on record only as far as the blanket’s write was taken', () => {
    const clock = new FakeClock(NOW);
    const o = heldOwner(clock, holding('n1', 'n2'));
    o.refillFloats(all);
    const [b] = o.blanketsDue(ALL_SHARDS, all);
    clock.set(LATER);
    const k = keyOn(b!.shard, LATER);
    o.onReports(stating(k, 'n1', LIMIT, 1, 0, 1));
    // A grant stating only what n1 took: written, not taken, the blanket counts it but is no record.
    const g: Grant = { type: 'grant', keyId: k.keyId, windowId: k.windowId, windowMs: W, nodeId: 'n1', nodeEpoch: 'n1-e1', lease: 1, ownerEpoch: 7, grantSeq: 1, issued: 1 };
    expect(o.committed(k.keyId, W, k.windowId)).to.equal(2);
    expect(o.onRecord(g)).to.equal(false);
    o.blanketLogged(b!, true);
    expect(o.onRecord(g)).to.equal(true);
    expect(o.onRecord({ ...g, issued: 2 }), 'a second credit').to.equal(false);
  });

  it('counts a member a later record ended only to that end in a replay, and lists at most 1,024', () => {
    const clock = new FakeClock(NOW);
    const fleet = holding('n1');
    const o = heldOwner(clock, fleet);
    const [b] = covered(o);
    fleet.holding = [];
    clock.set(b!.startsBy - BLANKET_SPAN_MS / 2);
    const next = o.blanketsDue([b!.shard], all)[0]!;
    const s = heldOwner(clock, holding(), 8);
    s.replay([b!, next].map((blanket) => ({ kind: 'blanket', blanket })));
    let after = keyOn(b!.shard, next.startsBy);
    while (after.start <= b!.startsBy) after = keyOn(b!.shard, next.startsBy, after.i + 1);
    clock.set(after.start);
    expect(countedIn(s, after), 'the blanket’s float credit; n1 left before this window').to.equal(1);

    // Its own process among them: listed like any other (its node too takes its credit itself).
    const many = holding(HOLDER.nodeId, ...Array.from({ length: 1100 }, (_, i) => `m${i}`));
    const p = heldOwner(new FakeClock(NOW), many);
    const [c] = covered(p);
    expect(c!.held?.holders).to.have.length(1024);
    expect(c!.held?.holders[0]!.nodeEpoch).to.equal(HOLDER.nodeEpoch);
  });

  it('carries what nodes took in a checkpoint: counted once after it too', () => {
    const { clock, o } = coveredAtLater();
    const k = keyAt(13, LATER);
    o.onReports(stating(k, 'n1', LIMIT, 1, 0, 1));
    const s = heldOwner(clock, holding(), 8);
    s.replay(o.snapshot(k.shard));
    // Both members' credit and the blanket's float credit (its writer failed): n1's 1 not again.
    expect(s.committed(k.keyId, W, k.windowId)).to.equal(3);
  });

  it('merges what the oldest of too many earlier blankets let members hold into the next: still counted', () => {
    const clock = new FakeClock(NOW);
    const k = keyAt(14, LATER);
    const holders = [{ nodeId: 'n1', nodeEpoch: 'n1-e1', since: NOW - 1 }];
    const oldest = { shard: k.shard, nodeId: 'h', nodeEpoch: 'h-e1', ownerEpoch: 1, startsAfter: NOW - 1, startsBy: k.start, retired: true, held: { min: MIN, startsBy: k.start, holders } };
    const later = Array.from({ length: 512 }, (_, i) => ({
      ...oldest,
      ownerEpoch: 2 + i,
      startsAfter: k.start + i,
      startsBy: k.start + 1 + i,
      held: { ...oldest.held, startsBy: k.start + 1 + i, holders: [] },
    }));
    const s = heldOwner(clock, holding(), 600);
    s.replay([oldest, ...later].map((blanket) => ({ kind: 'blanket', blanket })));
    clock.set(LATER);
    expect(countedIn(s, k)).to.equal(1);
  });
});

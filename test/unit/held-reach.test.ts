import { expect } from 'chai';
import { heldStatementRec, blanketRec } from '../../bus/lease-records.js';
import { heldRanges } from '../../bus/held-ranges.js';
import { FakeClock } from '../../lib/clock.js';
import type { FoldOwner } from '../../lib/fold-owner.js';
import { BLANKET_SPAN_MS } from '../../lib/owner/blankets.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import { ALL_SHARDS, DAY, NOW, W, all, ask, covered, keyAt, owner, stating, type Key } from '../support/blankets.js';
import { FixedFleet } from '../support/protocol.js';

/**
 * A held part reaching back over running windows (`Held.reach`): members take their credit
 * themselves in windows that started before the blanket (a new fleet's first minute, a member's first
 * window after it is listed, a shard's first under a new owner) if they end after the reach. What
 * must hold: every owner counts that credit in every such window before any member may take it — the
 * writer in the ledgers already there before the write, and in those made later when made; a later
 * owner from the log or a checkpoint — and no ended window, none without room for it, none whose
 * allowance is not stated yet, and none an ended mark covers is reached.
 */
const LIMIT = 1000;
const MIN = 1000;

function reaching(...nodes: string[]): FixedFleet {
  const fleet = new FixedFleet(nodes.length + 1);
  fleet.holding = nodes.map((nodeId) => ({ nodeId, nodeEpoch: `${nodeId}-e1` }));
  fleet.reachCounted = true;
  return fleet;
}

const heldOwner = (clock: FakeClock, fleet: FixedFleet, epoch = 7): FoldOwner => owner(clock, epoch, undefined, fleet, { heldMinAllowance: MIN });

/** What `o` counts committed in `k`'s window once a report of nothing made its ledger, at `limit`. */
function countedIn(o: FoldOwner, k: Key, limit = LIMIT): number {
  o.onReports(stating(k, 'n9', limit, 0, 0));
  return o.committed(k.keyId, k.windowMs, k.windowId);
}

/** The first key from index `from` on whose window running at `at` is what `ok` wants. */
function keyWhere(at: number, ok: (k: Key) => boolean, from = 100, windowMs = W): Key & { i: number } {
  for (let i = from; i < from + 100_000; i++) {
    const k = keyAt(i, at, windowMs);
    if (ok(k)) return { ...k, i };
  }
  throw new Error('no such key');
}

const end = (k: Key): number => k.start + k.windowMs;
const MINUTE = 60_000;

/** The reach `o` states to members in `shard`, if any. */
const statedIn = (o: FoldOwner, shard: number): number | undefined => o.heldStatement(all).shards.find((x) => x.shard === shard)?.reach;

describe('members’ credit reaching back over running windows', () => {
  it('counts every member’s credit in windows running when the first blanket is written, there already or made later, and in no ended one', () => {
    const clock = new FakeClock(NOW);
    const o = heldOwner(clock, reaching('n1', 'n2'));
    const there = keyAt(1, NOW);
    expect(there.start).to.be.below(NOW);
    expect(countedIn(o, there)).to.equal(0);
    const [b] = covered(o).filter((x) => x.shard === there.shard);
    expect(b!.held?.reach).to.equal(NOW);
    expect(statedIn(o, there.shard)).to.equal(NOW);
    expect(o.committed(there.keyId, W, there.windowId), 'counted before the write').to.equal(2);
    expect(countedIn(o, keyAt(2, NOW)), 'a ledger made later').to.equal(2);
    // A window that ended by the write: its ledger may have been dropped with the allowance spent.
    const ended = keyWhere(NOW - 999, (k) => end(k) <= NOW, 3);
    expect(countedIn(o, ended)).to.equal(0);
  });

  it('writes no reach while a member may not count it, and keeps counting one written once it may not', () => {
    const clock = new FakeClock(NOW);
    const fleet = reaching('n1', 'n2');
    fleet.reachCounted = false;
    const o = heldOwner(clock, fleet);
    expect(covered(o).every((b) => b.held !== undefined && b.held.reach === undefined)).to.equal(true);
    expect(countedIn(o, keyAt(1, NOW))).to.equal(0);
    expect(o.heldStatement(all).shards.every((x) => x.reach === undefined)).to.equal(true);

    const both = reaching('n1', 'n2');
    const r = heldOwner(clock, both, 8);
    covered(r);
    // A member of an older release joins: no member takes by a reach from now on, but one may still
    // take by the last statement: the record keeps its reach, and a window made later counts it.
    both.reachCounted = false;
    clock.set(NOW + BLANKET_SPAN_MS / 2 + 1);
    const next = r.blanketsDue(ALL_SHARDS, all);
    expect(next.every((b) => b.held?.reach === NOW)).to.equal(true);
    expect(r.heldStatement(all).shards.every((x) => x.reach === undefined)).to.equal(true);
    const k = keyWhere(NOW, (x) => end(x) > NOW + BLANKET_SPAN_MS / 2 + 1, 10, MINUTE);
    expect(countedIn(r, k)).to.equal(2);
  });
  it('states a reach past a running window with no room for the credit, and none while one’s allowance is not stated yet', () => {
    const clock = new FakeClock(NOW);
    const o = heldOwner(clock, reaching('n1', 'n2'));
    const full = keyAt(1, NOW);
    o.onReports(stating(full, 'n3', LIMIT, LIMIT, 0));
    const short = keyWhere(NOW, (k) => k.shard === full.shard && end(k) > NOW && end(k) < end(full));
    o.onReports(stating(short, 'n9', LIMIT, 0, 0));
    const [b] = covered(o).filter((x) => x.shard === full.shard);
    // Members take in neither window; every owner counts by the record's reach all the same.
    expect(statedIn(o, full.shard)).to.equal(end(full));
    expect(b!.held?.reach).to.equal(NOW);
    expect(o.committed(full.keyId, W, full.windowId)).to.equal(LIMIT);
    expect(o.committed(short.keyId, W, short.windowId), 'nobody may take there').to.equal(0);
    // Another shard's reach is its own.
    const other = keyWhere(NOW, (k) => k.shard !== full.shard && end(k) > NOW);
    expect(statedIn(o, other.shard)).to.equal(NOW);
    expect(countedIn(o, other)).to.equal(2);

    // A replay made a ledger from a grant alone: its allowance is not known, so it may be spent to it.
    // No reach is stated until a node states it; then the window, with room, is reached over.
    const s = heldOwner(clock, reaching('n1', 'n2'), 8);
    const k = keyWhere(NOW, (x) => end(x) > NOW + 5000, 3000, MINUTE);
    s.replay([{ kind: 'grant', grant: { type: 'grant', keyId: k.keyId, windowId: k.windowId, windowMs: MINUTE, nodeId: 'n3', nodeEpoch: 'n3-e1', lease: 1, issued: 5, grantSeq: 1, ownerEpoch: 7 } }]);
    covered(s);
    expect(statedIn(s, k.shard)).to.equal(undefined);
    s.onReports(stating(k, 'n3', LIMIT, 5, 0));
    clock.step(BLANKET_SPAN_MS / 2 + 1);
    for (const x of s.blanketsDue(ALL_SHARDS, all)) s.blanketLogged(x, true);
    expect(statedIn(s, k.shard)).to.be.below(end(k));
    expect(s.committed(k.keyId, MINUTE, k.windowId)).to.equal(7);
  });

  it('states no reach over a window an ended mark covers: a clock stepped forward dropped it early', () => {
    const clock = new FakeClock(NOW + 5000);
    const o = heldOwner(clock, reaching('n1', 'n2'));
    const swept = keyAt(1, NOW);
    o.onReports(stating(swept, 'n3', LIMIT, LIMIT, 0));
    o.sweep(NOW + 5000);
    clock.step(-5000);
    covered(o);
    expect(statedIn(o, swept.shard)).to.be.at.least(end(swept));
  });

  it('counts a window a member may take in by a reach stated before, made after the reach stated went past it', () => {
    const clock = new FakeClock(NOW);
    const fleet = reaching('n1');
    const o = heldOwner(clock, fleet);
    const full = keyAt(1, NOW, DAY);
    covered(o);
    expect(statedIn(o, full.shard)).to.equal(NOW);
    // A day-long window runs out of room; a member joins, so the next record's back pass finds it.
    o.onReports(stating(full, 'n3', LIMIT, LIMIT - 1, 0));
    fleet.holding = [...fleet.holding, { nodeId: 'n2', nodeEpoch: 'n2-e1' }];
    clock.set(NOW + BLANKET_SPAN_MS / 2 + 1);
    for (const b of o.blanketsDue(ALL_SHARDS, all)) o.blanketLogged(b, true);
    expect(statedIn(o, full.shard)).to.equal(end(full));
    // n1 still takes by the reach it was told (NOW), in a window running then whose ledger comes later.
    const k = keyWhere(NOW, (x) => x.shard === full.shard && x.start < NOW && end(x) > NOW + BLANKET_SPAN_MS, 10, MINUTE);
    expect(countedIn(o, k)).to.equal(2);
    // So does an owner replaying a checkpoint taken before that window's ledger was made.
    const c = heldOwner(clock, reaching(), 9);
    c.replay(o.snapshot(k.shard));
    expect(
      countedIn(
        c,
        keyWhere(NOW, (x) => x.shard === full.shard && x.start < NOW && end(x) > NOW + BLANKET_SPAN_MS, k.i + 1, MINUTE),
      ),
    ).to.equal(2);
  });

  it('a later owner reaches over no window the one before kept members out of: its count by the record’s reach is no room', () => {
    const clock = new FakeClock(NOW);
    const fleet = reaching('n1');
    const a = heldOwner(clock, fleet);
    const full = keyAt(1, NOW, DAY);
    const log: LogEntry[] = [];
    for (const b of covered(a)) if (b.shard === full.shard) log.push({ kind: 'blanket', blanket: b });
    // n1's credit is counted in a day-long window; a grant to n3 takes the rest.
    a.onReports(stating(full, 'n3', LIMIT, 0, 0));
    const g = a.onCreditRequest({ ...ask(full, 'n3', LIMIT, LIMIT - 1, false), demand: 0 })!;
    expect(g.issued).to.equal(LIMIT - 1);
    log.push({ kind: 'grant', grant: g });
    // n2 is listed: no room for it there, so the reach stated goes past the window.
    fleet.holding = [...fleet.holding, { nodeId: 'n2', nodeEpoch: 'n2-e1' }];
    clock.set(NOW + BLANKET_SPAN_MS / 2 + 1);
    for (const b of a.blanketsDue(ALL_SHARDS, all)) {
      a.blanketLogged(b, true);
      if (b.shard === full.shard) log.push({ kind: 'blanket', blanket: b });
    }
    expect(statedIn(a, full.shard)).to.equal(end(full));
    // A later owner from a checkpoint counts n2 there by the record's reach, with no room for it: it
    // must not read that as room set aside.
    const c = heldOwner(clock, reaching('n1', 'n2'), 8);
    c.replay(a.snapshot(full.shard));
    expect(c.committed(full.keyId, DAY, full.windowId)).to.equal(LIMIT + 1);
    clock.step(200);
    covered(c);
    expect(statedIn(c, full.shard)).to.equal(end(full));
    // From the log, the window's allowance is not stated yet: no reach is stated until a node states
    // it, and then none over the window.
    const s = heldOwner(clock, reaching('n1', 'n2'), 9);
    s.replay(log);
    clock.step(200);
    covered(s);
    expect(statedIn(s, full.shard)).to.equal(undefined);
    s.onReports(stating(full, 'n3', LIMIT, LIMIT - 1, 0));
    clock.step(BLANKET_SPAN_MS);
    for (const b of s.blanketsDue(ALL_SHARDS, all)) s.blanketLogged(b, true);
    expect(statedIn(s, full.shard)).to.equal(end(full));
  });

  it('a later owner ends the part ahead before a replayed window whose allowance may be given out already', () => {
    for (const reachCounted of [false, true]) {
      const clock = new FakeClock(NOW);
      // A minute window starting within the blanket's next span, given out whole ahead by the first
      // owner, which lists nobody yet.
      const w = keyWhere(NOW + 1500, (x) => x.start > NOW + 100 && x.start <= NOW + 1500, 10, MINUTE);
      const fleet = reaching();
      fleet.reachCounted = reachCounted;
      const a = heldOwner(clock, fleet);
      const log: LogEntry[] = covered(a).map((blanket) => ({ kind: 'blanket', blanket }));
      const g = a.onCreditRequest({ ...ask(w, 'n3', LIMIT, LIMIT, false), demand: 0 })!;
      expect(g.issued).to.equal(LIMIT);
      log.push({ kind: 'grant', grant: g });
      // It fails; the next lists n1 and n2: the replay knows the grant, not the window's allowance.
      clock.step(10);
      const s = heldOwner(clock, reaching('n1', 'n2'), 8);
      fleet.reachCounted = reachCounted;
      s.replay(log);
      const b = covered(s).find((x) => x.shard === w.shard)!;
      expect(b.held?.startsBy, `reach ${reachCounted}`).to.be.below(w.start);
    }
  });

  it('raises the stated reach past a window the credit held back for a silent member fills, and brings it down once heard again', () => {
    const clock = new FakeClock(NOW);
    const fleet = reaching('n1', 'n2', 'n3', 'n4');
    const o = heldOwner(clock, fleet);
    const day = keyAt(1, NOW, DAY);
    o.onReports(stating(day, 'n1', LIMIT, 800, 0));
    covered(o);
    expect(statedIn(o, day.shard)).to.equal(NOW);
    // n4 falls silent (its share is held back: it may grant itself that much) and is no longer listed.
    fleet.silentNodes = ['n4'];
    fleet.holding = fleet.holding.filter((h) => h.nodeId !== 'n4');
    clock.step(BLANKET_SPAN_MS / 2 + 1);
    for (const b of o.blanketsDue(ALL_SHARDS, all)) o.blanketLogged(b, true);
    expect(statedIn(o, day.shard)).to.equal(end(day));
    // Heard again: the next record's back pass brings the reach down.
    fleet.silentNodes = [];
    clock.step(BLANKET_SPAN_MS / 2 + 1);
    for (const b of o.blanketsDue(ALL_SHARDS, all)) o.blanketLogged(b, true);
    expect(statedIn(o, day.shard)).to.equal(clock.now());
  });

  it('a later owner reaches over no window its count by the record’s reach fills past what is held back for a silent member', () => {
    const clock = new FakeClock(NOW);
    const fleet = reaching('n1', 'n2', 'n3', 'n4');
    fleet.silentNodes = ['n4'];
    const a = heldOwner(clock, fleet);
    const w = keyAt(1, NOW, DAY);
    a.onReports(stating(w, 'n3', LIMIT, 0, 0));
    // All but n4's share (which it may grant itself) goes to n3: no room for the members' credit.
    expect(a.onCreditRequest({ ...ask(w, 'n3', LIMIT, LIMIT, false), demand: 0 })!.issued).to.equal(LIMIT - 200);
    covered(a);
    expect(statedIn(a, w.shard)).to.equal(end(w));
    const b = heldOwner(clock, fleet, 8);
    b.replay(a.snapshot(w.shard));
    clock.step(200);
    covered(b);
    expect(statedIn(b, w.shard)).to.equal(end(w));
  });

  it('counts a member listed later in the windows running when the next record of each shard is written', () => {
    const clock = new FakeClock(NOW);
    const fleet = reaching('n1');
    const o = heldOwner(clock, fleet);
    const k = keyAt(1, NOW + 1200, 60_000);
    covered(o);
    clock.set(NOW + 1200);
    expect(countedIn(o, k)).to.equal(1);
    fleet.holding = [...fleet.holding, { nodeId: 'n2', nodeEpoch: 'n2-e1' }];
    const b = o.blanketsDue(ALL_SHARDS, all).find((x) => x.shard === k.shard)!;
    const n2 = b.held!.holders.find((h) => h.nodeEpoch === 'n2-e1')!;
    expect(k.start).to.be.below(n2.since);
    expect(o.committed(k.keyId, k.windowMs, k.windowId), 'counted before the write').to.equal(2);
  });

  it('states no reach for members listed while a member could not count one, until a back pass counts them', () => {
    const clock = new FakeClock(NOW);
    const fleet = reaching('n1');
    const o = heldOwner(clock, fleet);
    const k = keyWhere(NOW, (x) => x.start < NOW && end(x) > NOW + 3 * BLANKET_SPAN_MS, 10, MINUTE);
    covered(o);
    expect(countedIn(o, k)).to.equal(1);
    // A member of an older release joins, n2 is listed, and the record listing it is taken.
    fleet.reachCounted = false;
    fleet.holding = [...fleet.holding, { nodeId: 'n2', nodeEpoch: 'n2-e1' }];
    clock.step(BLANKET_SPAN_MS / 2 + 1);
    for (const b of o.blanketsDue(ALL_SHARDS, all)) o.blanketLogged(b, true);
    expect(o.committed(k.keyId, MINUTE, k.windowId), 'no back pass').to.equal(1);
    // It leaves: no reach is stated in a shard until its next record's back pass counted n2.
    fleet.reachCounted = true;
    o.blanketsDue([], all);
    expect(statedIn(o, k.shard)).to.equal(undefined);
    clock.step(BLANKET_SPAN_MS / 2 + 1);
    for (const b of o.blanketsDue(ALL_SHARDS, all)) o.blanketLogged(b, true);
    expect(o.committed(k.keyId, MINUTE, k.windowId)).to.equal(2);
    expect(statedIn(o, k.shard)).to.be.below(end(k));
  });

  it('states a reach once a record with one was taken, raised with the clock; the record’s stays', () => {
    const clock = new FakeClock(NOW);
    const o = heldOwner(clock, reaching('n1', 'n2'));
    o.refillFloats(all);
    const first = o.blanketsDue(ALL_SHARDS, all);
    const shard = first[0]!.shard;
    expect(statedIn(o, shard)).to.equal(undefined);
    o.blanketLogged(first[0]!, true);
    expect(statedIn(o, shard)).to.equal(NOW);
    clock.set(NOW + BLANKET_SPAN_MS / 2 + 7);
    const next = o.blanketsDue([shard], all)[0]!;
    expect(next.held?.reach).to.equal(NOW);
    expect(statedIn(o, shard)).to.equal(NOW + BLANKET_SPAN_MS / 2 + 7);
  });

  it('a later owner counts the reach from the log and from a checkpoint, in ledgers made later too', () => {
    const clock = new FakeClock(NOW);
    const a = heldOwner(clock, reaching('n1', 'n2'));
    const k = keyAt(5, NOW);
    const [b] = covered(a).filter((x) => x.shard === k.shard);
    const s = heldOwner(clock, reaching(), 8);
    s.replay([{ kind: 'blanket', blanket: b! }]);
    expect(countedIn(s, k)).to.equal(2);
    const c = heldOwner(clock, reaching(), 9);
    c.replay(s.snapshot(k.shard));
    expect(c.committed(k.keyId, W, k.windowId)).to.equal(2);
    expect(
      countedIn(
        c,
        keyWhere(NOW, (x) => x.shard === k.shard && end(x) > NOW, 6),
      ),
    ).to.equal(2);
  });

  it('carries the reach in records and statements, and reads those without one as before', () => {
    const rest = { shard: 3, nodeId: 'h', nodeEpoch: 'h-e1', ownerEpoch: 7, startsAfter: NOW, startsBy: NOW + 2000, retired: false };
    const held = { min: MIN, startsBy: NOW + 2000, holders: [{ nodeId: 'n1', nodeEpoch: 'n1-e1', since: NOW }], reach: NOW + 5 };
    const b = { ...rest, held };
    expect(blanketRec.decode(JSON.parse(JSON.stringify(blanketRec.encode(b))), 'b')).to.deep.equal(b);
    const plain = { min: held.min, startsBy: held.startsBy, holders: held.holders };
    expect(blanketRec.decode(blanketRec.encode({ ...rest, held: plain }), 'b')).to.deep.equal({ ...rest, held: plain });
    expect(() => blanketRec.decode([...blanketRec.encode(b).slice(0, 7), [MIN, NOW + 2000, [], -1]], 'b')).to.throw(/b\.held\.reach/);
    const st = { holders: [{ nodeEpoch: 'n1-e1', since: NOW }], shards: [{ shard: 3, ownerEpoch: 7, startsAfter: NOW, startsBy: NOW + 2000, min: MIN, reach: NOW + 5 }] };
    expect(heldStatementRec.decode(heldStatementRec.encode(st), 'h')).to.deep.equal(st);
  });

  it('lets a node take by the reach only once a record listing it was taken', () => {
    const table = [{ owner: 'o', ownerProcess: 'o-e1', epoch: 7 }];
    const statement = (since: number, startsBy: number) => ({
      holders: [{ nodeEpoch: 'n1-e1', since }],
      shards: new Map([[0, { shard: 0, ownerEpoch: 7, startsAfter: NOW, startsBy, min: MIN, reach: NOW + 5 }]]),
    });
    const members = (since: number, startsBy: number) => new Map([['o', { epoch: 'o-e1', verified: true, beat: { held: statement(since, startsBy) } }]]);
    const me = { nodeId: 'n1', nodeEpoch: 'n1-e1' };
    const ranges = (since: number, startsBy: number) => heldRanges(table as never, members(since, startsBy) as never, me);
    expect(ranges(NOW + 2000, NOW + 2000)[0], 'listed after what was taken').to.equal(undefined);
    expect(ranges(NOW + 2000, NOW + 3000)[0]).to.deep.equal({ after: NOW + 2000, by: NOW + 3000, min: MIN, reach: NOW + 5 });
  });
});

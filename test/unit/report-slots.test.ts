import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { LeaseNode, type Denied } from '../../lib/lease-node.js';
import { AHEAD_ROUNDS, ASK_AHEAD_ROUNDS, SKEW_ROUNDS, SLOT_ROUNDS } from '../../lib/lease-node/boundary.js';
import { PLENTIFUL } from '../../lib/lease-node/demand.js';
import { RESYNC_ROUNDS } from '../../lib/lease-node/reports.js';
import { SILENT_ROUNDS } from '../../lib/membership.js';
import { compilePolicy } from '../../lib/policy.js';
import { shardOf, type ReportBatch } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { grantFor, RecordingLink } from '../support/links.js';
import { nodeConfig } from '../support/protocol.js';

/*
 * A report that can wait goes out in its shard's slot, one round in SLOT_ROUNDS, or with a batch its
 * shard gets anyway (`NodeRound.endRound`). What never waits: a plan short of plentiful, a fixed
 * share, a bucket without credit for the slot's rounds, a window's last rounds, a self-grant, a
 * resync. Under a plentiful plan a node asks ahead in the next window's shard's slot, and again in
 * the last round only while nothing is granted ahead.
 */
const SHARDS = nodeConfig().shards;
const R = nodeConfig().roundMs;
/** The recording link's fleet is 4 nodes: plentiful from PLENTIFUL × 4 a window. */
const FLEET = 4;
const KEY = 'v1:SLOTSLOTSLOTSLOTSLOTSL';

/** A clock `before` ms before the end of one of KEY's windows of `windowMs`, and that end. */
function clockBefore(before: number, windowMs: number): { clock: FakeClock; end: number } {
  const clock = new FakeClock(1_800_000_000_000);
  const off = phaseOffset(KEY, windowMs);
  let end = windowEndMs(windowIdAt(clock.now(), windowMs, off), windowMs, off);
  if (end - before < clock.now()) end += windowMs;
  clock.set(end - before);
  return { clock, end };
}

/** One window of `limit` per `windowMs` (a fixed share with `fixed`). */
function plan(limit: number, windowMs = 60_000, fixed = false) {
  const p = { windows: [{ name: 'w', windowMs, limit }], ...(fixed ? { allocation: 'fixed-share' } : {}) };
  return compilePolicy({ version: 1, plans: { p }, defaultPlan: 'p', anonymousPlan: 'p' });
}
const plentiful = plan(PLENTIFUL * FLEET * 100);

/**
 * A node whose owner answers each ask with `grant` credit; its clock `before` ms before KEY's 60 s
 * window ends; `shard`, that window's. `notSlot` ends a round first if the first round is that
 * shard's slot (round 0 is the slot of shards ≡ 0 mod SLOT_ROUNDS), so the next is not.
 */
function setup(grant = 10, before = 30_000, notSlot = false) {
  const { clock } = clockBefore(before, 60_000);
  const off = phaseOffset(KEY, 60_000);
  let seq = 0;
  /** The owner epoch its grants come from. */
  const owner = { epoch: 1 };
  const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, grant, ++seq, owner.epoch)));
  const node = new LeaseNode(nodeConfig(), clock, link);
  const shard = shardOf(KEY, windowIdAt(clock.now(), 60_000, off), SHARDS);
  if (notSlot && shard % SLOT_ROUNDS === 0) rounds(node, clock, 1);
  return { clock, link, node, shard, owner };
}

/** The rounds (batch `round`, from 1) in which `key`'s reports went out, of window `windowId` if given. */
const roundsOf = (batches: readonly ReportBatch[], key: string, windowId?: number): number[] =>
  batches.filter((b) => b.reports.some((r) => r.keyId === key && (windowId === undefined || r.windowId === windowId))).map((b) => b.round);

/** KEY's reports in the batches of the round `node` ends now. */
const keyReports = (node: LeaseNode) =>
  node
    .endRound()
    .flatMap((x) => x.reports)
    .filter((r) => r.keyId === KEY);

/** A recall of KEY's 60 s bucket down to `keep`, from its owner of epoch 1: whether it applied. */
function recall(node: LeaseNode, keep: number): boolean {
  const b = node.buckets.peek(KEY)!.buckets[0]!;
  return node.applyAdjust({ type: 'adjust', keyId: KEY, windowId: b.windowId, windowMs: 60_000, nodeId: 'n1', nodeEpoch: 'e1', lease: b.lease, grantSeq: 1, ownerEpoch: 1, keep, exhausted: false });
}

/** Ends `n` rounds, `R` ms apart. */
function rounds(node: LeaseNode, clock: FakeClock, n: number): void {
  for (let i = 0; i < n; i++) {
    node.endRound();
    clock.advance(R);
  }
}

describe("report slots: a report that can wait goes in its shard's slot", () => {
  for (let phase = 0; phase < SLOT_ROUNDS; phase++) {
    it(`a spend it holds credit for is reported in its shard's slot, not before (from round ${phase})`, () => {
      const { clock, link, node } = setup();
      rounds(node, clock, phase);
      expect(node.acquire(KEY, plentiful.limitsFor(KEY, 't'))).to.deep.equal({ admitted: true }); // granted 10, holds 9
      const b = node.buckets.peek(KEY)!.buckets[0]!;
      const shard = shardOf(KEY, b.windowId, SHARDS);
      rounds(node, clock, SLOT_ROUNDS);
      const sent = roundsOf(link.published, KEY);
      expect(sent).to.have.length(1);
      // Batch rounds count from 1: the round whose number is r − 1.
      expect((sent[0]! - 1 + shard) % SLOT_ROUNDS).to.equal(0);
      expect(sent[0]!).to.be.within(phase + 1, phase + SLOT_ROUNDS);
      expect(link.published.find((x) => x.round === sent[0])!.reports.find((r) => r.keyId === KEY)!.spent).to.equal(1);
    });
  }

  it('goes at once with a batch its shard sends anyway', () => {
    const { clock, node, shard } = setup(10, 30_000, true);
    node.acquire(KEY, plentiful.limitsFor(KEY, 't'));
    // Another key in the same shard under a plan short of plentiful: its report never waits.
    const small = plan(PLENTIFUL * FLEET - 1);
    let other = '';
    for (let i = 0; other === ''; i++) {
      const k = `v1:OTHER${String(i).padStart(17, '0')}`;
      if (shardOf(k, windowIdAt(clock.now(), 60_000, phaseOffset(k, 60_000)), SHARDS) === shard) other = k;
    }
    node.acquire(other, small.limitsFor(other, 't'));
    const batches = node.endRound().filter((x) => x.shard === shard);
    expect(batches).to.have.length(1);
    expect(batches[0]!.reports.map((r) => r.keyId).sort()).to.deep.equal([KEY, other].sort());
  });

  it('one batch per shard in SLOT_ROUNDS rounds for keys that each spent once, where every round had one', () => {
    const { clock, link, node } = setup();
    const limits = (k: string) => plentiful.limitsFor(k, 't');
    const keys = Array.from({ length: 64 }, (_, i) => `v1:MANY${String(i).padStart(18, '0')}`);
    for (const k of keys) node.acquire(k, limits(k));
    rounds(node, clock, SLOT_ROUNDS);
    const shards = new Set(keys.map((k) => shardOf(k, node.buckets.peek(k)!.buckets[0]!.windowId, SHARDS)));
    expect(link.published).to.have.length(shards.size);
    for (const x of link.published) expect((x.round - 1 + x.shard) % SLOT_ROUNDS).to.equal(0);
    expect(link.published.flatMap((x) => x.reports.map((r) => r.keyId)).sort()).to.deep.equal([...keys].sort());
  });

  describe('never waits', () => {
    /** KEY's reports in the first round after a request under `limits` (a round that is not its shard's slot). */
    function nextRound(limits: ReturnType<typeof plentiful.limitsFor>, grant = 10, before = 30_000): number[] {
      const { node } = setup(grant, before, true);
      expect(node.acquire(KEY, limits)).to.deep.equal({ admitted: true });
      return roundsOf(node.endRound(), KEY, node.buckets.peek(KEY)!.buckets[0]!.windowId);
    }

    it('a plan short of plentiful', () => {
      expect(nextRound(plan(PLENTIFUL * FLEET - 1).limitsFor(KEY, 't'))).to.have.length(1);
    });

    it('a plan allocating a fixed share per node', () => {
      expect(nextRound(plan(PLENTIFUL * FLEET * 100, 60_000, true).limitsFor(KEY, 't'))).to.have.length(1);
    });

    it('a bucket left without credit', () => {
      expect(nextRound(plentiful.limitsFor(KEY, 't'), 1)).to.have.length(1);
    });

    it("in its window's last rounds", () => {
      expect(nextRound(plentiful.limitsFor(KEY, 't'), 10, 3 * R)).to.have.length(1);
      // Four rounds from the end it waits.
      expect(nextRound(plentiful.limitsFor(KEY, 't'), 10, 5 * R)).to.have.length(0);
    });

    it('credit given back (a recall), even to an owner in its own process, whose release waits for the round', () => {
      const { link, node } = setup(10, 30_000, true);
      (link as RecordingLink & { local: () => boolean }).local = () => true;
      node.acquire(KEY, plentiful.limitsFor(KEY, 't'));
      expect(recall(node, 2)).to.equal(true);
      expect(keyReports(node).map((r) => [r.released, r.held])).to.deep.equal([[7, 2]]);
    });

    it('credit given back whose report the link could not send', () => {
      const { clock, link, node, shard } = setup(10);
      (link as RecordingLink & { local: () => boolean }).local = () => true;
      // Rounds so that the next two are not the shard's slot (rounds count from 0 here).
      rounds(node, clock, (SLOT_ROUNDS + 1 - (shard % SLOT_ROUNDS)) % SLOT_ROUNDS);
      node.acquire(KEY, plentiful.limitsFor(KEY, 't'));
      recall(node, 2);
      const publish = link.publish.bind(link);
      link.publish = (x) => (publish(x), false);
      expect(roundsOf(node.endRound(), KEY)).to.have.length(1); // made, not sent
      link.publish = publish;
      clock.advance(R);
      expect(keyReports(node).map((r) => r.released)).to.deep.equal([7]);
    });

    it('a resync of its shard, for what it holds and spent', () => {
      const { node, shard } = setup(10, 30_000, true);
      node.acquire(KEY, plentiful.limitsFor(KEY, 't'));
      node.resync(new Set([shard]));
      expect(keyReports(node).map((r) => [r.spent, r.held])).to.deep.equal([[1, 9]]);
    });
  });

  describe('after a resync (an owner that may have had no log)', () => {
    /** `n` keys whose 60 s window now is in `shard`: a first request of each is a report that can wait. */
    const keysIn = (clock: FakeClock, shard: number, n: number): string[] => {
      const out: string[] = [];
      for (let i = 0; out.length < n; i++) {
        const k = `v1:SHARD${String(i).padStart(17, '0')}`;
        if (shardOf(k, windowIdAt(clock.now(), 60_000, phaseOffset(k, 60_000)), SHARDS) === shard) out.push(k);
      }
      return out;
    };

    /** Rounds of `node` with a new key of `keys` each: for each, whether `shard` sent a batch, and whether it was its slot. */
    function sends(node: LeaseNode, clock: FakeClock, shard: number, keys: string[]): Array<[boolean, boolean]> {
      return keys.map((k) => {
        node.acquire(k, plentiful.limitsFor(k, 't'));
        const round = node.endRound().find((x) => x.shard === shard)?.round;
        clock.advance(R);
        return [round !== undefined, round !== undefined && (round - 1 + shard) % SLOT_ROUNDS === 0];
      });
    }

    it(`nothing of its shard waits for ${RESYNC_ROUNDS} rounds, then (a newer owner heard) reports wait again`, () => {
      const { clock, node, shard } = setup(10, 30_000, true);
      const keys = keysIn(clock, shard, RESYNC_ROUNDS + 2 * SLOT_ROUNDS);
      node.resync(new Set([shard]));
      const at = sends(node, clock, shard, keys);
      // Every round while the resync's rounds last; then only in its slots.
      expect(at.slice(0, RESYNC_ROUNDS).every(([sent]) => sent)).to.equal(true);
      expect(at.slice(RESYNC_ROUNDS).map(([sent, slot]) => sent === slot)).to.deep.equal(Array(2 * SLOT_ROUNDS).fill(true));
      expect(at.slice(RESYNC_ROUNDS).filter(([sent]) => sent)).to.have.length(2);
    });

    it('nothing of its shard waits until it hears from an owner there newer than it had, however long', () => {
      const { clock, node, shard, owner } = setup(10, 30_000, true);
      const keys = keysIn(clock, shard, 1 + 2 * RESYNC_ROUNDS + 2 * SLOT_ROUNDS);
      sends(node, clock, shard, keys.slice(0, 1)); // heard from the owner of epoch 1 there
      node.resync(new Set([shard]));
      // Its grants still come from that owner (a deposed one's, in flight): every round.
      expect(sends(node, clock, shard, keys.slice(1, 1 + 2 * RESYNC_ROUNDS)).every(([sent]) => sent)).to.equal(true);
      owner.epoch = 2; // the new owner answers, in the first of these rounds
      const after = sends(node, clock, shard, keys.slice(1 + 2 * RESYNC_ROUNDS));
      expect(after.slice(1).map(([sent, slot]) => sent === slot)).to.deep.equal(Array(2 * SLOT_ROUNDS - 1).fill(true));
    });

    it('a resync batch the link could not send does not end them', () => {
      const { clock, link, node, shard } = setup(10, 30_000, true);
      const keys = keysIn(clock, shard, RESYNC_ROUNDS + SLOT_ROUNDS);
      let failing = 0;
      const publish = link.publish.bind(link);
      link.publish = (b) => (publish(b), failing-- <= 0);
      node.resync(new Set([shard]));
      sends(node, clock, shard, keys.slice(0, RESYNC_ROUNDS - 1));
      failing = 1; // the last of the resync's rounds: its batch is not sent
      sends(node, clock, shard, keys.slice(RESYNC_ROUNDS - 1, RESYNC_ROUNDS));
      // Every one of the next rounds sends, slot or not.
      expect(sends(node, clock, shard, keys.slice(RESYNC_ROUNDS)).map(([sent]) => sent)).to.deep.equal(Array(SLOT_ROUNDS).fill(true));
    });

    it('credit granted ahead that lands after a resync of the next shard is restated every round to the end', () => {
      const { clock, end } = clockBefore(200, 1000);
      const off = phaseOffset(KEY, 1000);
      const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 10, 1)));
      const node = new LeaseNode(nodeConfig(), clock, link);
      const limits = plan(PLENTIFUL * FLEET * 100, 1000).limitsFor(KEY, 't');
      const next = windowIdAt(end - 1, 1000, off) + 1;
      node.acquire(KEY, limits);
      rounds(node, clock, 8 - SLOT_ROUNDS); // SLOT_ROUNDS rounds left
      node.resync(new Set([shardOf(KEY, next, SHARDS)]));
      const lease = node.buckets.peek(KEY)!.buckets[0]!.lease;
      const told: number[] = [];
      for (let i = 0; i < SLOT_ROUNDS; i++) {
        const r = node
          .endRound()
          .flatMap((x) => x.reports)
          .find((y) => y.keyId === KEY && y.windowId === next);
        told.push(r?.issued ?? -1);
        // The grant of the owner it asked before lands after the first of these rounds.
        if (i === 0) node.applyGrant({ type: 'grant', keyId: KEY, windowId: next, windowMs: 1000, nodeId: 'n1', nodeEpoch: 'e1', lease, grantSeq: 1, ownerEpoch: 1, issued: 3 });
        clock.advance(R);
      }
      expect(told).to.deep.equal([0, 3, 3, 3]);
    });
  });

  it("a report left waiting when its window ends before its slot (late rounds) is its window's final report", () => {
    const { clock, end } = clockBefore(5 * R, 1000);
    const off = phaseOffset(KEY, 1000);
    const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 10, 1)));
    const node = new LeaseNode(nodeConfig(), clock, link);
    const shard = shardOf(KEY, windowIdAt(clock.now(), 1000, off), SHARDS);
    if (shard % SLOT_ROUNDS === 0) rounds(node, clock, 1);
    const limits = plan(PLENTIFUL * FLEET * 100, 1000).limitsFor(KEY, 't');
    node.acquire(KEY, limits);
    const id = node.buckets.peek(KEY)!.buckets[0]!.windowId;
    expect(roundsOf(node.endRound(), KEY, id)).to.have.length(0); // waits
    clock.set(end + 3 * R); // the next round comes late, after the window's end
    const final = node
      .endRound()
      .flatMap((x) => x.reports)
      .filter((r) => r.keyId === KEY && r.windowId === id);
    expect(final.map((r) => r.spent)).to.deep.equal([1]);
  });

  describe('asking ahead under a plentiful plan', () => {
    /** A node that holds a lease of KEY's 1 s window and goes through its last rounds: the rounds it asked ahead in. */
    function lastRounds(grantAhead: boolean) {
      const { clock, end } = clockBefore(400, 1000);
      const off = phaseOffset(KEY, 1000);
      let seq = 0;
      const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 10, ++seq)));
      const node = new LeaseNode(nodeConfig(), clock, link);
      const limits = plan(PLENTIFUL * FLEET * 100, 1000).limitsFor(KEY, 't');
      // A request every 100 ms keeps its demand up to the window's end.
      const asked: number[] = [];
      const next = windowIdAt(end - 1, 1000, off) + 1;
      for (let t = end - 400; t < end; t += R) {
        clock.set(t);
        if ((end - t) % 100 === 0) node.acquire(KEY, limits);
        for (const x of node.endRound()) {
          const r = x.reports.find((y) => y.keyId === KEY && y.windowId === next);
          if (r === undefined) continue;
          asked.push(Math.round((end - t) / R));
          if (grantAhead) node.applyGrant({ type: 'grant', keyId: KEY, windowId: next, windowMs: 1000, nodeId: 'n1', nodeEpoch: 'e1', lease: r.lease, grantSeq: ++seq, ownerEpoch: 1, issued: 3 });
        }
      }
      return { asked, shard: shardOf(KEY, next, SHARDS) };
    }

    /**
     * The next shard's slot, in rounds before the window's end, if it falls before the last
     * AHEAD_ROUNDS: `lastRounds` ends its rounds 0 to 15 at 16 to 1 rounds before the end.
     */
    const slotBefore = (shard: number): number | undefined => {
      for (let k = SLOT_ROUNDS; k > AHEAD_ROUNDS; k--) if ((16 - k + shard) % SLOT_ROUNDS === 0) return k;
      return undefined;
    };

    it("asks once, in the next window's shard's slot among its last SLOT_ROUNDS rounds or in the first of its last AHEAD_ROUNDS, when that brings credit ahead", () => {
      const { asked, shard } = lastRounds(true);
      expect(asked).to.deep.equal([slotBefore(shard) ?? AHEAD_ROUNDS]);
    });

    it('asks in each of its last AHEAD_ROUNDS while nothing is granted ahead', () => {
      const { asked, shard } = lastRounds(false);
      const slot = slotBefore(shard);
      expect(asked).to.deep.equal([...(slot === undefined ? [] : [slot]), ...Array.from({ length: AHEAD_ROUNDS }, (_, i) => AHEAD_ROUNDS - i)]);
    });

    it('asks ahead as many rounds earlier as its rounds come late, so that a late next round cannot miss the window', () => {
      /** Whether the round 3 rounds before the end asks ahead, after rounds on time to the one before it or a gap of 5 rounds. */
      const asksAt3 = (late: boolean): boolean => {
        const { clock, end } = clockBefore(500, 1000);
        const next = windowIdAt(end - 1, 1000, phaseOffset(KEY, 1000)) + 1;
        const shard = shardOf(KEY, next, SHARDS);
        const node = new LeaseNode(nodeConfig(), clock, new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 10, 1))));
        const limits = plan(PLENTIFUL * FLEET * 100, 1000).limitsFor(KEY, 't');
        const times: number[] = [];
        for (let t = end - 475; t <= end - (late ? 8 : 4) * R; t += R) times.push(t);
        // Not in the next shard's slot (the round's number is the rounds before it), where it asks anyway.
        if ((times.length + shard) % SLOT_ROUNDS === 0) times.unshift(end - 500);
        for (const t of times) {
          clock.set(t);
          if ((end - t) % 100 === 0) node.acquire(KEY, limits);
          node.endRound();
        }
        clock.set(end - 3 * R);
        return node.endRound().some((x) => x.reports.some((r) => r.keyId === KEY && r.windowId === next));
      };
      expect(asksAt3(false), 'rounds on time: it asks in the last AHEAD_ROUNDS').to.equal(false);
      expect(asksAt3(true)).to.equal(true);
    });
  });

  /**
   * Silence from `ms` before the start of a 1 s window of `limit` (a fleet of 20): whether the node
   * grants itself credit there (F4), and the node.
   */
  function selfGrant(ms: number, limit = 1000) {
    const { clock, end } = clockBefore(ms + 100, 1000);
    const limits = plan(limit, 1000).limitsFor(KEY, 't');
    const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 1, 1)));
    link.fleet = 20;
    const node = new LeaseNode(nodeConfig({ degradedAfterMs: 30_000 }), clock, link);
    node.acquire(KEY, limits);
    clock.set(end - ms);
    node.endRound(); // the last contact
    link.up = false;
    clock.set(end);
    const r = node.acquire(KEY, limits) as Denied | { admitted: true };
    return { granted: r.admitted && node.stats.selfGrants === 1, node, clock };
  }

  it('never waits: a self-grant, reported every round (F4), under a plentiful plan too', () => {
    const { granted, node, clock } = selfGrant(1000, PLENTIFUL * 20 * 100);
    expect(granted).to.equal(true);
    for (let i = 0; i < 2 * SLOT_ROUNDS; i++) {
      clock.advance(R);
      expect(
        node
          .endRound()
          .flatMap((x) => x.reports)
          .filter((r) => r.keyId === KEY && r.selfGrant),
      ).to.have.length(1);
    }
  });

  describe('F4 counts the earliest ask ahead', () => {
    // Under any plan: another node may see the limit (a policy change) or the fleet that makes it plentiful.
    for (const limit of [PLENTIFUL, PLENTIFUL - 1]) {
      it(`under a plan of ${limit}: only into a window that began ${ASK_AHEAD_ROUNDS + SILENT_ROUNDS + SKEW_ROUNDS} rounds or more into the silence`, () => {
        const rounds = ASK_AHEAD_ROUNDS + SILENT_ROUNDS + SKEW_ROUNDS;
        expect(selfGrant(rounds * R, limit).granted).to.equal(true);
        expect(selfGrant(rounds * R - 1, limit).granted).to.equal(false);
      });
    }
  });
});

import { expect } from 'chai';
import { MemoryBus } from '../../bus/memory.js';
import type { Bucket } from '../../lib/bucket.js';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { LeaseNode } from '../../lib/lease-node.js';
import { compilePolicy } from '../../lib/policy.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { seededRandom } from '../../scripts/sim/queue.js';
import { nodeConfig, ownerConfig } from '../support/protocol.js';

/*
 * A subject whose buckets have nothing to do for a while is passed over at the rounds' ends (its
 * `quiet` rounds). That must change nothing a round sends or a request meets: the same traffic through a
 * node that goes through every subject every round gives the same batches, answers and buckets.
 */
const SHARDS = 4;
const R = 25;
/**
 * A plan plentiful enough for standing leases (what goes quiet); one that is so only while the fleet
 * has one node (its standing budget, limit / (512 × fleet), falls from 5 to 2 with a second); one too
 * small for them; two with a small window (1 s, 10 s) beside a plentiful one; and one whose two
 * plentiful windows have standing budgets of 2 and thousands.
 */
const doc = {
  version: 1,
  defaultPlan: 'big',
  anonymousPlan: 'small',
  tenants: { mid: { plan: 'mid' }, mixed: { plan: 'mixed' }, ten: { plan: 'ten' }, two: { plan: 'two' } },
  plans: {
    big: {
      windows: [
        { name: 'burst', windowMs: 1000, limit: 1_000_000 },
        { name: 'minute', windowMs: 60_000, limit: 20_000_000 },
      ],
    },
    mid: { windows: [{ name: 'burst', windowMs: 1000, limit: 3000 }] },
    small: { windows: [{ name: 'burst', windowMs: 1000, limit: 50 }] },
    mixed: {
      windows: [
        { name: 'burst', windowMs: 1000, limit: 20 },
        { name: 'minute', windowMs: 60_000, limit: 20_000_000 },
      ],
    },
    ten: {
      windows: [
        { name: 'ten', windowMs: 10_000, limit: 20 },
        { name: 'minute', windowMs: 60_000, limit: 20_000_000 },
      ],
    },
    two: {
      windows: [
        { name: 'burst', windowMs: 1000, limit: 1100 },
        { name: 'minute', windowMs: 60_000, limit: 20_000_000 },
      ],
    },
  },
};
/** The same plans compiled twice: a key moved from one to the other gets a new subject keeping its buckets. */
const policies = [compilePolicy(doc), compilePolicy(doc)];

/** The same node with nothing ever passed over: every subject gone through every round, as before. */
class EveryRound extends LeaseNode {
  protected override quietRounds(): number {
    return 0;
  }
}

function fleetOfOne(clock: FakeClock, make: (link: ReturnType<MemoryBus['connectNode']>) => LeaseNode): { node: LeaseNode; bus: MemoryBus } {
  const bus = new MemoryBus({ shards: SHARDS, roundMs: R, clock });
  const id = { nodeId: 'solo', nodeEpoch: 'solo-1' };
  let node: LeaseNode | undefined;
  const link = bus.connectNode(id, (m) => node!.onMessage(m));
  node = make(link);
  bus.serveOwner(id, new FoldOwner(ownerConfig(clock, bus.fleetView(id), { shardOf: (k, w) => shardOf(k, w, SHARDS) })));
  return { node, bus };
}

const state = (b: Bucket): unknown => ({ ...b, windowEnd: b.windowEnd, credit: b.credit });

/**
 * A quiet node and one going through every subject every round, each the one member of its own fleet,
 * on one clock starting `start` ms after a round second. `step` runs `f` on both, then a round on
 * both, keeping what each sent, then moves the clock a round on; `grow` has a second member join both.
 */
function sideBySide(start: number, maxBuckets = 1000) {
  const clock = new FakeClock(1_800_000_000_000 + start);
  const cfg = nodeConfig({ nodeId: 'solo', nodeEpoch: 'solo-1', shards: SHARDS, maxBuckets, demandRounds: 3 });
  const fleets = [fleetOfOne(clock, (link) => new LeaseNode(cfg, clock, link)), fleetOfOne(clock, (link) => new EveryRound(cfg, clock, link))];
  const sent: unknown[][] = [[], []];
  const step = (f: (node: LeaseNode) => void = () => undefined): void => {
    fleets.forEach(({ node }, i) => {
      f(node);
      sent[i]!.push(node.endRound());
    });
    clock.advance(R);
  };
  const grow = (): void => {
    for (const f of fleets) f.bus.connectNode({ nodeId: 'second', nodeEpoch: 'second-1' }, () => undefined);
  };
  return { clock, quiet: fleets[0]!.node, every: fleets[1]!.node, sent, step, grow };
}

/** As if most of its asks across the network had missed their deadline: demands hedge (`NodeDemand.demandOf`). */
const hedging = (node: LeaseNode): void => {
  (node as unknown as { missed256: number }).missed256 = 200;
};

describe('quiet subjects: passed over at the rounds’ ends, with nothing changed', () => {
  it('a quiet subject evicted right after the fleet grew reports the demand it would have had', () => {
    const { quiet, sent, step, grow } = sideBySide(0, 1);
    const [a, b] = ['v1:QUIETA00000000000000000', 'v1:QUIETB00000000000000000'];
    const mid = policies[0]!.limitsFor(a, 'mid');
    // Two requests a round: it goes quiet as soon as its rate falls below one a round (STANDING's worth).
    for (let r = 0; r < 30; r++) step((node) => [1, 2].forEach(() => node.acquire(a, mid)));
    const subject = quiet.buckets.peek(a)!;
    for (let r = 0; r < 40 && subject.quiet === 0; r++) step();
    for (let r = 0; r < 10; r++) step();
    expect(subject.quiet, 'passed over these 10 rounds').to.not.equal(0);
    grow(); // the plan's standing budget falls below STANDING before any round sees it
    step((node) => node.acquire(b, mid)); // evicts A: its final report
    expect(sent[0]).to.deep.equal(sent[1]);
  });

  it('a quiet subject charged after a stall and a fleet change reports the demand it would have had', () => {
    let setups = 0;
    // Start phases in the key's 1 s window: the case needs a lease that put its report off.
    for (let start = 0; start < 1000; start += 100) {
      const { clock, quiet, sent, step, grow } = sideBySide(start);
      const key = 'v1:QUIETA00000000000000000';
      const mid = policies[0]!.limitsFor(key, 'mid');
      for (let r = 0; r < 30; r++) step((node) => node.acquire(key, mid));
      const subject = quiet.buckets.peek(key)!;
      for (let r = 0; r < 46 && (subject.quiet === 0 || r < 6); r++) step();
      if (subject.quiet === 0 || !subject.buckets[0]!.unreported) continue;
      setups++;
      grow();
      clock.advance(1000); // a stall: the window ends before the next round does
      step((node) => node.charge(key, mid)); // rolls the bucket: its final report of the window before
      expect(sent[0], `start ${start}`).to.deep.equal(sent[1]);
    }
    expect(setups, 'phases with a quiet lease holding a report back').to.be.above(0);
  });

  for (let seed = 1; seed <= 12; seed++) {
    it(`seed ${seed}: the same batches, answers and buckets as going through every subject every round`, () => {
      const rand = seededRandom(seed);
      // Fewer bucket slots than keys × windows in some seeds: evictions give credit back meanwhile.
      const { clock, quiet, every, grow } = sideBySide(Math.floor(rand() * 60_000), seed % 3 === 0 ? 50 : 1000);
      // In even seeds, nodes whose asks miss their deadline.
      if (seed % 2 === 0) [quiet, every].forEach(hedging);
      // Keys seen from every round to once in a few seconds, over the plans.
      const keys = Array.from({ length: 40 }, (_, i) => ({ id: `v1:QUIET${String(i).padStart(17, '0')}`, p: 0.002 + rand() * rand() * 0.6, plan: i % 7, policy: 0 }));
      const tenants = ['', 'mid', 'mixed', 't', 'ten', 'two', 't'];
      let passedOver = 0;
      for (let round = 0; round < 2400; round++) {
        // Half-way, in odd seeds, a second node joins: the mid plan's standing leases are no more.
        if (round === 1200 && seed % 2 === 1) grow();
        for (const k of keys) {
          if (rand() >= k.p) continue;
          // Now and then a key's policy changes (a reload): a new subject, the same buckets.
          if (rand() < 0.02) k.policy = 1 - k.policy;
          const policy = policies[k.policy]!;
          const limits = k.plan === 0 ? policy.anonymousLimitsFor('any') : policy.limitsFor(k.id, tenants[k.plan]);
          // Some requests admitted failing open (charged), as a degraded node does.
          if (rand() < 0.05) {
            quiet.charge(k.id, limits);
            every.charge(k.id, limits);
            continue;
          }
          const a = quiet.acquire(k.id, limits);
          const b = every.acquire(k.id, limits);
          expect(a instanceof Promise || b instanceof Promise, 'a local owner answers at once').to.equal(false);
          expect(a, `round ${round}, ${k.id}`).to.deep.equal(b);
        }
        // Rounds mostly on time, some late (a busy loop), a few wall-clock steps either way.
        const late = rand() < 0.1 ? Math.floor(rand() * 60) : 0;
        clock.advance(R + late);
        if (rand() < 0.01) clock.step(Math.floor((rand() - 0.5) * 160));
        expect(quiet.endRound(), `round ${round}`).to.deep.equal(every.endRound());
        for (const k of keys) if ((quiet.buckets.peek(k.id)?.quiet ?? 0) !== 0) passedOver++;
      }
      expect(quiet.stats).to.deep.equal(every.stats);
      for (const k of keys) {
        const a = quiet.buckets.peek(k.id);
        const b = every.buckets.peek(k.id);
        // A quiet subject's rates are brought up to date when it is next gone through or woken.
        if (a !== undefined) (quiet as unknown as { wake(s: unknown): void }).wake(a);
        expect(a?.buckets.map(state), k.id).to.deep.equal(b?.buckets.map(state));
      }
      expect(passedOver, 'subjects were passed over').to.be.above(1000);
    });
  }
});

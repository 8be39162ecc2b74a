import { expect } from 'chai';
import { MemoryBus } from '../../bus/memory.js';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { LeaseNode } from '../../lib/lease-node.js';
import { compilePolicy } from '../../lib/policy.js';
import { windowIdAt } from '../../lib/window.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { demoPolicy } from '../support/fixtures.js';
import { nodeConfig, ownerConfig } from '../support/protocol.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';

/** A fleet of one over the in-memory bus, driven on a virtual clock. */
function fleetOfOne(clock: FakeClock, maxBuckets = 10_000) {
  const bus = new MemoryBus({ shards: 16, roundMs: 25, clock });
  const id = { nodeId: 'solo', nodeEpoch: 'solo-1' };
  let node: LeaseNode | undefined;
  const link = bus.connectNode(id, (m) => node!.onMessage(m));
  node = new LeaseNode(nodeConfig({ ...id, shards: 16, maxBuckets }), clock, link);
  const owner = new FoldOwner(ownerConfig(clock, bus.fleetView(id), { shardOf: (k, w) => shardOf(k, w, 16) }));
  bus.serveOwner(id, owner);
  return { node, owner };
}

describe('standalone mode: the protocol as a fleet of one', () => {
  const policy = compilePolicy(demoPolicy());

  for (let seed = 1; seed <= 12; seed++) {
    it(`seed ${seed}: never admits more than any window allows, and L2 holds at every step`, () => {
      const rand = rng(seed);
      const clock = new FakeClock(1_800_000_000_000 + Math.floor(rand() * 60_000));
      const { node, owner } = fleetOfOne(clock, 64 + Math.floor(rand() * 200));
      const keys = Array.from({ length: 40 }, (_, i) => `v1:seed${seed}key${String(i).padStart(12, '0')}`);
      const admitted = new Map<string, number>();
      let nextRound = clock.monotonic() + 25;
      for (let step = 0; step < 6000; step++) {
        clock.advance(Math.floor(rand() * 4));
        while (clock.monotonic() >= nextRound) {
          node.endRound();
          nextRound += 25;
        }
        const key = keys[Math.floor(Math.pow(rand(), 2) * keys.length)]!;
        const limits = policy.limitsFor(key, rand() < 0.5 ? 'a' : 'b');
        const r = node.acquire(key, limits);
        if (r instanceof Promise) expect.fail('a local owner answers synchronously');
        for (const w of limits.windows) {
          const wid = windowIdAt(clock.now(), w.windowMs, node.buckets.peek(key)!.buckets[w.index]!.offset);
          const k = `${key}|${w.windowMs}|${wid}`;
          if (r.admitted) admitted.set(k, (admitted.get(k) ?? 0) + 1);
          expect(admitted.get(k) ?? 0, k).to.be.at.most(w.limit);
          expect(owner.committed(key, w.windowMs, wid)).to.be.at.most(w.limit);
        }
      }
      expect([...admitted.values()].reduce((a, b) => a + b, 0)).to.be.above(1000);
    });
  }

  it('gives a key its whole allowance across rounds: 100 of 100 in a sustained window', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const { node } = fleetOfOne(clock);
    const key = 'v1:WHOLEALLOWANCEWHOLEALL';
    const limits = compilePolicy(
      demoPolicy({ plans: { free: { windows: [{ name: 'sustained', limit: 100, windowMs: 60_000 }] }, anonymous: { windows: [{ name: 'a', limit: 1, windowMs: 1000 }] } } }),
    ).limitsFor(key, 't');
    const offset = node.buckets.get(key, limits, clock.now()).buckets[0]!.offset;
    clock.set((windowIdAt(clock.now(), 60_000, offset) + 1) * 60_000 + offset);
    let ok = 0;
    for (let i = 0; i < 150; i++) {
      const r = node.acquire(key, limits);
      if (!(r instanceof Promise) && r.admitted) ok++;
      if (i % 10 === 9) {
        node.endRound();
        clock.advance(25);
      }
    }
    expect(ok).to.equal(100);
  });
});

import { expect } from 'chai';
import { MemoryBus } from '../../bus/memory.js';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { LeaseNode } from '../../lib/lease-node.js';
import { compilePolicy } from '../../lib/policy.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { phaseOffset, windowIdAt, windowStartMs } from '../../lib/window.js';
import { nodeConfig, ownerConfig } from '../support/protocol.js';

/*
 * Wall clocks step (NTP) while monotonic time does not. Window ids come from the wall clock, so a step
 * back of a few milliseconds just after a boundary puts a node's clock in the window before again.
 */
const KEY = 'v1:CLOCKSTEPCLOCKSTEPCLO';
const LIMIT = 100;
const W = 1000;
const R = 25;
const limits = compilePolicy({ version: 1, defaultPlan: 'p', anonymousPlan: 'p', plans: { p: { windows: [{ name: 'w', limit: LIMIT, windowMs: W }] } } }).limitsFor(KEY, 't');
const offset = phaseOffset(KEY, W);

/** A node and the owner of its one shard, in one process (every exchange a synchronous call). */
function fleetOfOne(clock: FakeClock) {
  const bus = new MemoryBus({ shards: 1, roundMs: R, clock });
  const id = { nodeId: 'solo', nodeEpoch: 'solo-1' };
  let node: LeaseNode | undefined;
  const link = bus.connectNode(id, (m) => node!.onMessage(m));
  node = new LeaseNode(nodeConfig({ ...id, shards: 1 }), clock, link);
  const owner = new FoldOwner(ownerConfig(clock, bus.fleetView(id), { shardOf: (k, w) => shardOf(k, w, 1) }));
  bus.serveOwner(id, owner);
  return { node, owner };
}

describe('wall clock steps within the allowed skew', () => {
  it('a step back over a window boundary never rolls a bucket back: what it spent in the later window stays spent', () => {
    const w1 = windowIdAt(1_800_000_003_000, W, offset);
    const clock = new FakeClock(windowStartMs(w1, W, offset) - 400);
    const { node, owner } = fleetOfOne(clock);
    // Two requests a round for the last 400 ms of the window before w1: the key holds a lease, and
    // the owner grants it credit ahead for w1.
    const tick = (ms: number): void => {
      for (let i = 0; i < ms; i++) {
        clock.advance(1);
        if (clock.monotonic() % R === 0) node.endRound();
      }
    };
    while (windowIdAt(clock.now(), W, offset) < w1) {
      node.acquire(KEY, limits);
      tick(12);
    }
    /** Admissions charged to w1: made while the key's bucket was in it. */
    let admitted = 0;
    const request = (): void => {
      const r = node.acquire(KEY, limits);
      if (r instanceof Promise) expect.fail('a local owner answers synchronously');
      if (r.admitted && node.buckets.peek(KEY)!.buckets[0]!.windowId === w1) admitted++;
    };
    tick(5);
    for (let i = 0; i < 3; i++) request();
    const bucket = node.buckets.peek(KEY)!.buckets[0]!;
    expect(bucket.windowId).to.equal(w1);
    expect(bucket.credit, 'the lease holds more than it spent').to.be.above(0);
    node.endRound(); // the owner learns what was spent
    // 20 ms back, before w1's start: less than the two rounds (50 ms) clocks may be apart.
    clock.step(-20);
    expect(windowIdAt(clock.now(), W, offset)).to.equal(w1 - 1);
    request(); // charged to w1, whose credit the node still holds
    tick(R);
    // Back past w1's start: requests well past the allowance, with rounds in between.
    for (let i = 0; i < 5 * LIMIT && windowIdAt(clock.now(), W, offset) === w1; i++) {
      request();
      if (i % 4 === 3) tick(1);
    }
    expect(admitted, `admitted in w1 (the owner's ledger says ${owner.spent(KEY, W, w1)} spent)`).to.be.at.most(LIMIT);
    expect(owner.committed(KEY, W, w1)).to.be.at.most(LIMIT);
  });
});

import { expect } from 'chai';
import { MemoryBus } from '../../bus/memory.js';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { LeaseNode } from '../../lib/lease-node.js';
import { PLENTIFUL } from '../../lib/lease-node/demand.js';
import { compilePolicy } from '../../lib/policy.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { nodeConfig, ownerConfig } from '../support/protocol.js';

/*
 * Under a plentiful plan a bucket whose demand fades keeps one credit for a caller back in the same
 * window (`NodeDemand.shed`). That credit must never cost a caller under the limit elsewhere: its
 * owner hears the demand is gone and recalls it when the window runs short.
 */

const SHARDS = 4;
const ROUND = 25;
const KEY = 'v1:KEPTCREDITKEPTCREDITKE';
const FLEET = ['A', 'B', 'C'];

/**
 * Three nodes on the memory bus, C owning every shard, one 60 s window of `limit`, 1 s into it.
 * `hedged`: A's and B's asks count as missing their deadline (a busy host), so their buckets hedge
 * (`NodeDemand.demandOf`) and fade holding more than the one credit kept.
 */
function fleet(limit: number, hedged = false, maxBuckets = 1000) {
  const limits = compilePolicy({ version: 1, plans: { p: { windows: [{ name: 'minute', windowMs: 60_000, limit }] } }, defaultPlan: 'p', anonymousPlan: 'p' }).limitsFor(KEY, 't');
  const clock = new FakeClock(1_800_000_000_000);
  const off = phaseOffset(KEY, 60_000);
  clock.set(windowEndMs(windowIdAt(clock.now(), 60_000, off), 60_000, off) + 1000);
  const bus = new MemoryBus({ shards: SHARDS, roundMs: ROUND, clock });
  const nodes = new Map<string, LeaseNode>();
  for (const id of FLEET) {
    const ident = { nodeId: id, nodeEpoch: `${id}-1` };
    const link = bus.connectNode(ident, (m) => nodes.get(id)!.onMessage(m));
    nodes.set(id, new LeaseNode(nodeConfig({ ...ident, shards: SHARDS, demandRounds: 3, maxBuckets }), clock, link));
  }
  const owner = new FoldOwner(ownerConfig(clock, bus.fleetView({ nodeId: 'C', nodeEpoch: 'C-1' }), { shardOf: (k, w) => shardOf(k, w, SHARDS), demandRounds: 3 }));
  bus.serveOwner({ nodeId: 'C', nodeEpoch: 'C-1' }, owner);
  const round = (): void => {
    if (hedged) for (const id of ['A', 'B']) (nodes.get(id) as unknown as { missed256: number }).missed256 = 200;
    for (const n of nodes.values()) n.endRound();
    clock.advance(ROUND);
  };
  const node = (id: string): LeaseNode => nodes.get(id)!;
  return { limits, clock, round, node };
}

describe('credit a faded bucket keeps under a plentiful plan', () => {
  // Standing budgets of 1, 2 and 3 requests over 3 nodes.
  for (const [budget, hedged] of [
    [1, false],
    [2, false],
    [3, false],
    [1, true],
    [2, true],
  ] as const) {
    const limit = PLENTIFUL * 3 * budget;
    it(`a plan of ${limit}${hedged ? ', asks missing their deadline' : ''}: A and B keep credit after a pause; C, using the rest of the window, is refused nothing`, async () => {
      const { limits, clock, round, node } = fleet(limit, hedged);
      let admitted = 0;
      let denied = 0;
      const request = async (id: string): Promise<void> => {
        if ((await node(id).acquire(KEY, limits)).admitted) admitted++;
        else denied++;
      };
      for (let i = 0; i < 4; i++) {
        await request('A');
        await request('B');
        for (let r = 0; r < 4; r++) round();
      }
      for (let r = 0; r < 200; r++) round(); // 5 s without a request: both fade
      const [a, b] = ['A', 'B'].map((id) => node(id).buckets.peek(KEY)!.buckets[0]!);
      expect([a!.rate, b!.rate]).to.deep.equal([0, 0]);
      // Hedged, each holds what its hedge was granted; otherwise the one credit kept.
      if (hedged) expect(Math.min(a!.credit, b!.credit)).to.be.greaterThan(0);
      else expect([a!.credit, b!.credit]).to.deep.equal([1, 1]);
      // C takes everything else, 20 a round, until the window's last second.
      while (clock.now() < a!.windowEnd - 1000) {
        for (let j = 0; j < 20 && admitted + denied < limit; j++) await request('C');
        round();
      }
      expect({ admitted, denied }).to.deep.equal({ admitted: limit, denied: 0 });
      expect([a!.credit, b!.credit]).to.deep.equal([0, 0]); // recalled for C
    });
  }

  it('a key seen once keeps a credit too, but none while the bucket map is more than three quarters full', async () => {
    for (const [others, kept] of [
      [0, 1],
      [12, 0],
    ] as const) {
      const { limits, clock, round, node } = fleet(PLENTIFUL * 3 * 3, false, 16);
      // Other keys fill the map: 13 of its 16 buckets, past three quarters.
      for (let i = 0; i < others; i++) await node('A').acquire(`v1:OTHERKEY${String(i).padStart(15, '0')}`, limits);
      expect((await node('A').acquire(KEY, limits)).admitted).to.equal(true);
      for (let r = 0; r < 200; r++) round();
      const s = node('A').buckets.peek(KEY)!;
      expect([s.buckets[0]!.rate, s.buckets[0]!.credit]).to.deep.equal([0, kept]);
      // Crowded, it fades with nothing to give back: evictable without a report.
      expect(s.evictable(clock.now())).to.equal(kept === 0);
    }
  });
});

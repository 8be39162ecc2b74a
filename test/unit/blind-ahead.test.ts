import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { LeaseNode } from '../../lib/lease-node.js';
import { compilePolicy } from '../../lib/policy.js';
import type { OwnerMessage } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { RecordingLink } from '../support/links.js';
import { FixedFleet, nodeConfig, ownerConfig } from '../support/protocol.js';

const KEY = 'v1:AHEADAHEADAHEADAHEADA';
const LIMIT = 100;
const plan = compilePolicy({
  version: 1,
  defaultPlan: 'p',
  anonymousPlan: 'p',
  plans: { p: { windows: [{ name: 'w', limit: LIMIT, windowMs: 1000 }] } },
}).limitsFor(KEY, 't');
const offset = phaseOffset(KEY, 1000);
const SHARDS = 8;

/**
 * Two nodes and the owner of every shard, wired in process. Redis loses the log: a second owner takes
 * every shard over blind (epoch 2, no log to replay) while node a holds — or is about to be sent —
 * credit the first granted ahead for the next window. What both nodes admit in that window must stay
 * within its allowance whichever way the first owner's grant lands: before the takeover (the node's
 * resync states it), or after the node restated what it held, in the window's last round (only the
 * repeated ask ahead states it before the window begins). Then a is cut off from the bus, so its
 * reports in the new window come too late to help.
 */
function takeoverAhead(late: boolean): { admitted: number } {
  const clock = new FakeClock(1_800_000_000_000);
  const endOf = (): number => windowEndMs(windowIdAt(clock.now(), 1000, offset), 1000, offset);
  clock.set(endOf() + 5); // 5 ms into the next window: rounds fall 45 and 20 ms before its end
  const end = endOf();
  const fleet = new FixedFleet(2);
  let owner = new FoldOwner(ownerConfig(clock, fleet, { ownerEpoch: () => 1 }));
  const held: OwnerMessage[] = [];
  let holding = false;
  const nodes = new Map<string, LeaseNode>();
  /** Nodes cut off from the bus (Redis), whose reports are lost. */
  const cut = new Set<string>();
  const deliver = (ms: readonly OwnerMessage[]): void => {
    for (const m of ms) nodes.get(m.nodeId)?.onMessage(m);
  };
  const member = (nodeId: string): LeaseNode => {
    const link = new RecordingLink((reqs) => reqs.map((r) => owner.onCreditRequest(r)).filter((g) => g !== undefined));
    link.fleet = 2;
    link.publish = (batch) => {
      if (cut.has(nodeId)) return true; // lost on the way
      const out = [...owner.onReports(batch), ...owner.takeOutbox()];
      if (holding) held.push(...out);
      else deliver(out);
      return true;
    };
    const n = new LeaseNode(nodeConfig({ nodeId, nodeEpoch: `${nodeId}-1`, shards: SHARDS }), clock, link);
    nodes.set(nodeId, n);
    return n;
  };
  const [a, b] = [member('a'), member('b')] as [LeaseNode, LeaseNode];
  const round = (): void => {
    for (const n of nodes.values()) n.endRound();
    clock.advance(25);
  };
  // a is busy in this window: it holds a lease, and asks ahead for the next in the last two rounds.
  while (end - clock.now() > 50) {
    a.acquire(KEY, plan);
    round();
  }
  holding = late;
  round(); // the first ask ahead: granted (the grant held back when `late`)
  expect(held.length > 0 || a.buckets.peek(KEY)!.buckets[0]!.nextIssued > 0, 'credit granted ahead').to.equal(true);
  // Redis lost everything: a new owner, blind, takes every shard; the nodes see the owners change.
  owner = new FoldOwner(ownerConfig(clock, fleet, { ownerEpoch: () => 2 }));
  owner.replay(Array.from({ length: SHARDS }, (_, shard) => ({ kind: 'unmarked' as const, shard })));
  holding = false;
  const shards = new Set(Array.from({ length: SHARDS }, (_, shard) => shard));
  for (const n of nodes.values()) n.resync(shards);
  deliver(held.splice(0)); // the deposed owner's grant, late: after the node restated what it held
  round();
  // Now 5 ms into the next window. a spends what it holds on the request path, then is cut off
  // from the bus: its reports are lost. b takes all the new owner will give.
  expect(clock.now()).to.equal(end + 5);
  const take = (n: LeaseNode): boolean => (n.acquire(KEY, plan) as { admitted: boolean }).admitted;
  let admitted = 0;
  while (a.buckets.peek(KEY)!.buckets[0]!.credit > 0 && take(a)) admitted++;
  cut.add('a');
  for (let r = 0; r < 10; r++) {
    for (let i = 0; i < 20; i++) if (take(b)) admitted++;
    round();
  }
  return { admitted };
}

describe('credit granted ahead across a blind takeover', () => {
  it('granted and landed before the takeover: stated to the new owner before the window begins, and the window holds', () => {
    const { admitted } = takeoverAhead(false);
    expect(admitted).to.be.at.most(LIMIT);
    expect(admitted).to.be.at.least(LIMIT - 10);
  });

  it('granted by the deposed owner, landing after resync: the repeated ask ahead states it, and the window holds', () => {
    const { admitted } = takeoverAhead(true);
    expect(admitted).to.be.at.most(LIMIT);
    expect(admitted).to.be.at.least(LIMIT - 10);
  });
});

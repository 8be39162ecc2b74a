import type { Clock } from '../lib/clock.js';
import { FoldOwner } from '../lib/fold-owner.js';
import { LeaseNode, type LeaseNodeConfig } from '../lib/lease-node.js';
import { shardOf } from '../lib/protocol/messages.js';
import type { Bus } from './types.js';

/** Protocol settings of one fleet member (the spec's defaults live in the middleware's options). */
export type MemberSettings = Omit<LeaseNodeConfig, 'demandRounds' | 'missedRoundsLimit'> & {
  /** Reserve R as a fraction of each window's allowance. */
  readonly reserveRatio: number;
};

/** Rounds of demand a node asks for: a grant must last until the next round's top-up lands. */
export const DEMAND_ROUNDS = 3;
/** Missed rounds after which a node stops the fast path and may self-grant at a boundary (F2, F4). */
export const MISSED_ROUNDS = 2;

/**
 * Joins a bus as one fleet member: the node side (buckets, fast path, rounds) and the owner side for
 * the shards the bus assigns to it. The middleware and the simulator both wire members this way.
 */
export function joinFleet(bus: Bus, s: MemberSettings, clock: Clock): { node: LeaseNode; owner: FoldOwner } {
  const identity = { nodeId: s.nodeId, nodeEpoch: s.nodeEpoch };
  // The node must exist before messages can be delivered to it; none are sent before serveOwner.
  let node: LeaseNode | undefined;
  const link = bus.connectNode(
    identity,
    (m) => node?.onMessage(m),
    (shards) => node?.resync(shards),
  );
  node = new LeaseNode({ ...s, demandRounds: DEMAND_ROUNDS, missedRoundsLimit: MISSED_ROUNDS }, clock, link);
  const owner = new FoldOwner({
    ownerEpoch: (shard) => bus.ownerEpoch(shard),
    shardOf: (keyId, windowId) => shardOf(keyId, windowId, s.shards),
    headroom: s.headroom,
    demandRounds: DEMAND_ROUNDS,
    reserveRatio: s.reserveRatio,
    roundMs: s.roundMs,
    fleet: bus.fleetView(identity),
    clock,
    floatHolder: identity,
  });
  bus.serveOwner(identity, owner);
  return { node, owner };
}

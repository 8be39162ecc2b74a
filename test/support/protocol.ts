import type { Clock } from '../../lib/clock.js';
import type { FleetView, FoldOwnerConfig } from '../../lib/fold-owner.js';
import type { LeaseNodeConfig } from '../../lib/lease-node.js';
import { shardOf } from '../../lib/protocol/messages.js';

/** Node settings with the spec's defaults, for tests. */
export function nodeConfig(overrides: Partial<LeaseNodeConfig> = {}): LeaseNodeConfig {
  return {
    nodeId: 'n1',
    nodeEpoch: 'e1',
    shards: 8,
    maxBuckets: 1000,
    roundMs: 25,
    fastPathDeadlineMs: 1,
    demandRounds: 2,
    headroom: 1.25,
    missedRoundsLimit: 2,
    degradedAfterMs: 30_000,
    ...overrides,
  };
}

/** A fleet view the test sets by hand. */
export class FixedFleet implements FleetView {
  silentNodes: string[] = [];
  rejoiningNodes = new Set<string>();
  constructor(public members: number) {}
  size(): number {
    return this.members;
  }
  /** Silent and rejoining nodes, whatever the shard; a test may replace it with its own rule. */
  unsettled(_shard: number, _folded: (nodeEpoch: string, shard: number) => number): readonly string[] {
    return [...this.silentNodes, ...this.rejoiningNodes];
  }
  rejoining(nodeId: string): boolean {
    return this.rejoiningNodes.has(nodeId);
  }
  /** Whether every member counts blankets: yes unless a test says otherwise. */
  blanketsCounted = true;
  countsBlankets(): boolean {
    return this.blanketsCounted;
  }
  /** Members that take credit themselves under blankets: none unless a test lists them. */
  holding: { nodeId: string; nodeEpoch: string }[] = [];
  holders(): readonly { nodeId: string; nodeEpoch: string }[] {
    return this.holding;
  }
  /** Whether every member counts a held part's reach back: no unless a test says so. */
  reachCounted = false;
  countsReach(): boolean {
    return this.reachCounted;
  }
}

/** Owner settings with the spec's defaults, for tests. */
export function ownerConfig(clock: Clock, fleet: FleetView, overrides: Partial<FoldOwnerConfig> = {}): FoldOwnerConfig {
  return {
    ownerEpoch: () => 7,
    shardOf: (keyId, windowId) => shardOf(keyId, windowId, 8),
    headroom: 1.25,
    demandRounds: 2,
    reserveRatio: 0.02,
    roundMs: 25,
    fleet,
    clock,
    ...overrides,
  };
}

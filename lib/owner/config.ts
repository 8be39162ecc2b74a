import type { Clock } from '../clock.js';

/** What an owner knows of the fleet, from the transport's heartbeats. */
export interface FleetView {
  /** Number of members (live or silent, not yet expired). */
  size(): number;
  /**
   * Members that may hold a boundary self-grant (F4) in `shard` this owner has not heard of yet, or
   * be about to grant themselves one (`lib/membership.ts`). `folded(nodeEpoch, shard)`: the latest
   * round of that process's report batches for the shard this owner has folded.
   */
  unsettled(shard: number, folded: (nodeEpoch: string, shard: number) => number): readonly string[];
  /**
   * Whether `nodeId` reappeared less than a round ago: no grants to its process `nodeEpoch` yet (L5).
   * Never this owner's own process: it hears its own node in process, not through heartbeats.
   */
  rejoining(nodeId: string, nodeEpoch: string): boolean;
  /**
   * Whether every member states that it counts blankets (`lib/owner/blankets.ts`) when it replays a
   * shard's log: until then no owner writes or uses one, since an older release taking a shard over
   * would not count the credit they let its owner issue. Absent: no.
   */
  countsBlankets?(): boolean;
  /**
   * Members that may take credit themselves under blankets (`lib/owner/held.ts`): only while every
   * member states that it counts what blankets' members may hold. Absent or empty: none.
   */
  holders?(): readonly { readonly nodeId: string; readonly nodeEpoch: string }[];
  /**
   * Whether every member states that it counts a held part's reach back over running windows
   * (`Held.reach`) when it replays a shard's log: until then none is written. Absent: no.
   */
  countsReach?(): boolean;
}

/** Settings of the owner side of the protocol. */
export interface FoldOwnerConfig {
  /** Fencing token of this owner for a shard; grants carry it. */
  readonly ownerEpoch: (shard: number) => number;
  readonly shardOf: (keyId: string, windowId: number) => number;
  /** Headroom h applied to advertised demand. */
  readonly headroom: number;
  /** Rounds of requests a node's advertised demand covers. */
  readonly demandRounds: number;
  /** Reserve R as a fraction of the allowance, released once per key per window, fast path only. */
  readonly reserveRatio: number;
  /** Round length T; ledgers live until window end + 2 rounds; pre-grants start 2 rounds before the end. */
  readonly roundMs: number;
  readonly fleet: FleetView;
  readonly clock: Clock;
  /**
   * This process, as the holder of its floats (`refillFloats`): credit it logs as issued to itself,
   * so an ask the float covers is answered without waiting for a log write.
   */
  readonly floatHolder?: { readonly nodeId: string; readonly nodeEpoch: string };
  /** The least allowance of a window in which members take credit themselves (`HELD_MIN_ALLOWANCE`). */
  readonly heldMinAllowance?: number;
}

/** Counters of the owner side. */
export interface FoldOwnerStats {
  grants: number;
  preGrants: number;
  recalls: number;
  exhaustedNotices: number;
  /** Leases told that a window announced exhausted has credit again. */
  refills: number;
  withheld: number;
  /** Refills of floats, and asks answered from a float (no wait for a log write). */
  floatRefills: number;
  floatAnswers: number;
  /** Floats of one credit made under a blanket, for a window's first ask. */
  blanketFloats: number;
  reportsMerged: number;
  reportsStale: number;
  reserveReleases: number;
}

/** Counters of a new owner: all zero. */
export function newStats(): FoldOwnerStats {
  return {
    grants: 0,
    preGrants: 0,
    recalls: 0,
    exhaustedNotices: 0,
    refills: 0,
    withheld: 0,
    floatRefills: 0,
    floatAnswers: 0,
    blanketFloats: 0,
    reportsMerged: 0,
    reportsStale: 0,
    reserveReleases: 0,
  };
}

/** The current round number (owner's monotonic clock): recalls, notices and grants are stamped with it. */
export function roundNow(cfg: FoldOwnerConfig): number {
  return Math.floor(cfg.clock.monotonic() / cfg.roundMs);
}

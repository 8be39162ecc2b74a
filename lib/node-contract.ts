import type { NodeBeat } from './membership.js';
import type { ResolvedLimits } from './policy.js';
import type { CreditRequest, Grant, ReportBatch } from './protocol/messages.js';

/*
 * The node side's contracts: what it needs from a transport (OwnerLink), how it is configured, and
 * what a decision returns. Kept apart from the state machine (lease-node.ts and its layers in lease-node/).
 */

/**
 * The node's view of the credit authority (the bus toward the shard owners). Implemented in `bus/`.
 */
export interface OwnerLink {
  /**
   * Asks the owners for credit. Grants come back synchronously when the owner is in this process,
   * as a promise otherwise that settles with undefined once `deadlineMs` has passed (the hard
   * fast-path deadline); undefined at once means no owner can be reached. The caller applies them;
   * late grants also arrive through `onMessage`.
   */
  requestCredit(requests: readonly CreditRequest[], deadlineMs: number): readonly Grant[] | undefined | Promise<readonly Grant[] | undefined>;
  /**
   * Sends one round's batch for one shard. Never blocks. False when it could not even be sent (the
   * transport is out of reach or backed up): the node then reports those buckets again next round.
   */
  publish(batch: ReportBatch): boolean;
  /** Tells the fleet this node is alive, and what owners must know of it (`NodeBeat`); once per round. */
  heartbeat(beat: NodeBeat): void;
  /** Whether the owner of `shard` answered recently (the transport's heartbeat). */
  reachable(shard: number): boolean;
  /**
   * A boundary self-grant was just made in `shard`, first reported in the batch of `round`: for an
   * owner side in this process, which learns of it at once rather than from the next heartbeat.
   */
  selfGranted?(shard: number, round: number): void;
  /** Live fleet size, for the boundary self-grant (F4). */
  fleetSize(): number;
  /**
   * Whether the owner of `shard` answers in this process (no network; at once, or once its round
   * reply is in): such asks are free, so D2's once per bucket per round does not apply to them, and
   * one that misses its deadline says nothing about the network. Absent means never.
   */
  local?(shard: number): boolean;
  /**
   * What the current owner of `shard` lets this node take itself, by a blanket whose write was taken
   * that lists this process (`lib/owner/held.ts`): `HELD` credit in a window starting after `after`
   * and by `by` whose limit is at least `min`. Absent or undefined: nothing.
   */
  held?(shard: number): HeldRange | undefined;
}

/**
 * What a node may take itself in a shard (`OwnerLink.held`): in a window starting by `by` and after
 * `after`, or ending after `reach` (`Held.reach`), of a limit at least `min`.
 */
export interface HeldRange {
  readonly after: number;
  readonly by: number;
  readonly min: number;
  readonly reach?: number;
}

/** Settings of the node side of the protocol. */
export interface LeaseNodeConfig {
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly shards: number;
  readonly maxBuckets: number;
  readonly roundMs: number;
  readonly fastPathDeadlineMs: number;
  /** Rounds of demand a request advertises (grants must last until the next top-up lands). */
  readonly demandRounds: number;
  /** Headroom h on demand, as the owner applies it: credit held above twice that is given back. */
  readonly headroom: number;
  /** Rounds without owner contact after which the fast path stops and self-grants may start (F2). */
  readonly missedRoundsLimit: number;
  /** Milliseconds without owner contact after which the node is degraded (F5). */
  readonly degradedAfterMs: number;
}

/** A request was admitted: the one shared instance, so the common path allocates nothing. */
export const ADMITTED = Object.freeze({ admitted: true as const });

/** A request was denied for lack of credit in at least one window. */
export interface Denied {
  readonly admitted: false;
  /** Name of the denying window (the one with the latest boundary among those without credit). */
  readonly window: string;
  /** Wait until the latest boundary among windows without credit, or undefined if unknown. */
  readonly retryAfterMs: number | undefined;
  /**
   * True when the node could not decide: out of credit while degraded (F5). The middleware then
   * treats it as a limiter fault (fail-open, or 503 on a fail-closed route) and the backstop binds.
   */
  readonly unavailable: boolean;
}

/** Outcome of `acquire`. */
export type Acquired = typeof ADMITTED | Denied;

/** Counters of the node side, read by metrics, the simulator and the benchmark. */
export interface LeaseNodeStats {
  fastPath: number;
  fastPathTimeouts: number;
  grantsApplied: number;
  grantsIgnored: number;
  /** Grants or adjustments from an owner older than one already heard from for that shard (L4). */
  staleOwnerEpoch: number;
  adjustsApplied: number;
  selfGrants: number;
  /** Credit taken under a blanket at first sight of a window (`HELD` each). */
  heldTaken: number;
  reports: number;
  /** Requests admitted without credit (fail-open while degraded) charged to their windows. */
  charged: number;
}

/** Node counters, all zero. */
export function newNodeStats(): LeaseNodeStats {
  return { fastPath: 0, fastPathTimeouts: 0, grantsApplied: 0, grantsIgnored: 0, staleOwnerEpoch: 0, adjustsApplied: 0, selfGrants: 0, heldTaken: 0, reports: 0, charged: 0 };
}

/** What a key can still admit in one of its windows, as far as this process knows, and when that window ends. */
export interface WindowQuota {
  /** Requests left: exact in a fleet of one; in a fleet a lower bound (other nodes hold credit too). */
  readonly left: number;
  /** Wall-clock end of the window, ms. */
  readonly end: number;
}

/**
 * The decision side as the middleware uses it: `LeaseNode` in a fleet (leased credit, asks to shard
 * owners), `LocalCounters` in a fleet of one (a count per key and window in this process).
 */
export interface Enforcer {
  /** Takes `cost` from every window of `limits` or from none; a promise only when an owner across the network is asked. */
  acquire(keyId: string, limits: ResolvedLimits, cost?: number): Acquired | Promise<Acquired>;
  /** Counts a request admitted without a decision (failing open while degraded) in every window of `limits`. */
  charge(keyId: string, limits: ResolvedLimits, cost?: number): void;
  /** True while some shard's owner has been out of reach for longer than `degradedAfterMs` (F5). */
  readonly degraded: boolean;
  /** Rounds ended. */
  readonly round: number;
  readonly stats: LeaseNodeStats;
  /** Buckets held (one per key and window length), and insertions that found the cap full of credit. */
  readonly buckets: { readonly size: number; readonly overCap: number };
  /** Ends a round (the caller's timer, every `roundMs`). */
  endRound(): void;
  /** The longest silence of any shard's owner toward this node, ms. */
  longestSilenceMs(): number;
}

/** Where a caller's own quota is read from (`req.rateLimit`, the RateLimit header). */
export interface QuotaSource {
  /** Window `i` of `keyId` under `limits` as held here; undefined when nothing is held for the key. */
  windowQuota(keyId: string, limits: ResolvedLimits, i: number): WindowQuota | undefined;
}

import { fnv1a32 } from '../hash.js';

/**
 * Messages of the leasing protocol. A lease is one node epoch's bucket for one (key id, window id),
 * named by `lease`, a number unique within the node epoch: a bucket evicted and reloaded gets a new
 * lease, so a late or duplicate grant for the old one can never credit the new one. Counts are
 * cumulative per lease, never deltas, so a duplicate or reordered message never adds anything twice.
 */

/** A node asks a shard's owner for credit (first sight of a key in a window, or the fast path). */
export interface CreditRequest {
  readonly keyId: string;
  readonly windowId: number;
  readonly windowMs: number;
  /** The window's allowance as the node's policy states it. */
  readonly limit: number;
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly lease: number;
  /** Cumulative admissions on this lease (fresher than the last report). */
  readonly spent: number;
  /** Boundary self-grant (F4) and released credit of this lease, as in a report. */
  readonly selfIssued: number;
  readonly released: number;
  /**
   * Credit issued on this lease and the part of it out of a float, as in a report: an owner that
   * replayed a log which lost a grant counts what it said before it answers. Absent from older releases.
   */
  readonly issued?: number;
  readonly floated?: number;
  /** Part of `issued` the node took itself under its owner's blanket, as in a report. */
  readonly blanketed?: number;
  /** Credit needed now to admit the waiting request. */
  readonly need: number;
  /** Requests the node expects for this bucket over the next rounds. */
  readonly demand: number;
  /** True on the fast path: only such requests may draw on the reserve. */
  readonly fastPath: boolean;
  /** The window's plan allocates a fixed share per node (`allocation: fixed-share`); absent: leasing. */
  readonly fixedShare?: boolean;
}

/** Which lease, in which window, an owner's message is about. */
export interface LeaseRef {
  readonly keyId: string;
  readonly windowId: number;
  readonly windowMs: number;
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly lease: number;
  /** Fencing token of the owner that sent it; a message from an older owner is rejected. */
  readonly ownerEpoch: number;
}

/** Credit issued by a shard owner. `issued` is the cumulative credit issued on this lease. */
export interface Grant extends LeaseRef {
  readonly type: 'grant';
  /** Grows with every grant on this lease; applied at most once. */
  readonly grantSeq: number;
  readonly issued: number;
  /**
   * Part of `issued` that came out of an owner's float (credit it logged as issued to itself ahead of
   * asks): committed already, so a replay counts it once. Absent means 0.
   */
  readonly floated?: number;
  /**
   * 1 when the owner keeps complete ended marks for the window (`lib/owner/ended.ts`): it never
   * issues for it once any owner dropped its ledger, so a node may spend this credit for a request
   * that came in the window even if it lands after the window ended. Absent (an older release, or a
   * shard an older release owned lately): credit that lands after the window ended covers nothing.
   */
  readonly late?: 1;
}

/**
 * An owner's instruction that never adds credit: release what is held above `keep` (rebalancing,
 * L1), and/or stop asking because the window has nothing left for this lease (`exhausted`).
 */
export interface Adjust extends LeaseRef {
  readonly type: 'adjust';
  /**
   * Credit the lease may keep; -1 for no recall. With -1 and not `exhausted`: the window announced
   * exhausted has credit again (released elsewhere), so the lease may ask when short.
   */
  readonly keep: number;
  readonly exhausted: boolean;
  /** The lease's last grant seq when this was sent: only a later grant lifts the exhaustion. */
  readonly grantSeq: number;
}

/** Anything an owner sends to a node. */
export type OwnerMessage = Grant | Adjust;

/** One bucket's state as a node reports it each round. */
export interface Report {
  readonly keyId: string;
  readonly windowId: number;
  readonly windowMs: number;
  readonly limit: number;
  readonly lease: number;
  /** Monotonic within a node epoch; the highest wins when reports are merged. */
  readonly seq: number;
  /** Cumulative admissions on this lease. */
  readonly spent: number;
  /** Cumulative credit the owner issued on this lease, as applied by the node. */
  readonly issued: number;
  /** Credit the node granted itself at a window boundary without owner contact (F4). */
  readonly selfIssued: number;
  /** Cumulative credit the node gave back (after a recall). */
  readonly released: number;
  readonly demand: number;
  /** Credit the node holds and has not spent: issued + selfIssued − spent − released. */
  readonly held: number;
  /** Set in every report of a bucket that self-granted in this window. */
  readonly selfGrant: boolean;
  /** The window's plan allocates a fixed share per node (`allocation: fixed-share`); absent: leasing. */
  readonly fixedShare?: boolean;
  /**
   * Requests the node has seen for this lease in the window, admitted or not, up to its last round
   * (absent from releases before it was reported: the owner falls back to `spent`).
   */
  readonly seen?: number;
  /**
   * Part of `issued` that came out of an owner's float, as the grants applied say (`Grant.floated`):
   * an owner replaying a log that lost the grant counts it once, as the float's. Absent means 0.
   */
  readonly floated?: number;
  /**
   * Part of `issued` the node took itself, with no ask and no grant, under a blanket of its owner that
   * lists it (`lib/owner/blankets.ts`, `HELD`): the blanket counts it already. Absent means 0.
   */
  readonly blanketed?: number;
}

/** Everything one node reports for one shard in one round: one bus entry. */
export interface ReportBatch {
  readonly shard: number;
  readonly nodeId: string;
  readonly nodeEpoch: string;
  /**
   * The node's round: the batch follows that round's heartbeat and carries everything it has to say
   * for the shard up to it (self-grants included). 0 for a partial batch (a recall's release at once).
   */
  readonly round: number;
  readonly reports: readonly Report[];
}

/** Shard of a bucket: `hash(keyId, windowId) mod shards`, the same on every node. */
export function shardOf(keyId: string, windowId: number, shards: number): number {
  return ((fnv1a32(keyId) ^ Math.imul(windowId | 0, 0x9e3779b1)) >>> 0) % shards;
}

/**
 * A node's state for one (key id, window id). Credit is what the owner issued minus what this node
 * spent; both only grow within a window, so applying a grant twice or out of order changes nothing.
 */
export class Bucket {
  /** Window id this state belongs to; a new window resets the counters. */
  windowId = Number.NaN;
  /** Wall-clock end of that window. */
  windowEnd = 0;
  /** Lease number of this bucket's current life (new at every window and every reload). */
  lease = 0;
  /** Cumulative credit issued to this node epoch by the owner (highest grant applied). */
  issued = 0;
  /** Cumulative admissions in this window. */
  spent = 0;
  /** Highest grant seq applied. */
  grantSeq = 0;
  /** Requests seen in the current round (admitted or not): the demand advertised to the owner. */
  roundDemand = 0;
  /** Requests seen in the previous round. */
  lastDemand = 0;
  /** Round in which the fast path was last taken (at most once per round). */
  fastRound = -1;

  /** Phase offset of this key for this window length (fixed for the bucket's life). */
  constructor(readonly offset: number) {}

  /** Credit available to the request path. */
  get credit(): number {
    return this.issued - this.spent;
  }

  /** Moves the bucket to a new window and lease: nothing carries over (a past window's credit is void). */
  roll(windowId: number, windowEnd: number, lease: number): void {
    this.windowId = windowId;
    this.windowEnd = windowEnd;
    this.lease = lease;
    this.issued = 0;
    this.spent = 0;
    this.grantSeq = 0;
    this.roundDemand = 0;
    this.lastDemand = 0;
    this.fastRound = -1;
  }

  /** Whether the bucket could be dropped without losing usable credit. */
  evictable(nowMs: number): boolean {
    return this.credit <= 0 || this.windowEnd <= nowMs;
  }
}

import { windowEndMs } from './window.js';

/** Why a bucket stopped asking its owner (a small integer, so the bucket stays compact). */
export const enum Exhaustion {
  None = 0,
  /** The owner said the window has nothing left for this lease. */
  Spent = 2,
}

/**
 * One request per round in `Bucket.rate`'s fixed point. Fine enough that one request's trace decays
 * smoothly, over seconds, instead of to nothing within the smoothing horizon.
 */
export const RATE_ONE = 65536;

/**
 * `rate` (in RATE_ONE) after a round that saw `requests`: smoothed over about sixteen rounds (400 ms),
 * so one request is not a rate of one per round, and a lull of a few rounds is not the end of a key's
 * traffic on a node. With none, it loses ⌈rate / 16⌉.
 */
export function smoothed(rate: number, requests: number): number {
  return rate + Math.floor((requests * RATE_ONE - rate) / 16);
}

/** `Bucket.flags` bits. */
const DIRTY = 1;
const UNREPORTED = 2;
const LATE_UNSURE = 4;
const BLANKETED = 8;
const TOOK_BEFORE = 16;
const GAVE_BACK = 32;

/**
 * A node's state for one key and one window length, across its windows. Credit is what the owner
 * issued plus any boundary self-grant, minus what was spent and released; every count only grows
 * within a window, so applying a grant twice or out of order changes nothing.
 */
export class Bucket {
  /**
   * Window id the counters belong to; a new window resets them. −1 before the first: a small integer,
   * as every window id is, so V8 keeps it unboxed (NaN would box every bucket's window id).
   */
  windowId = -1;
  /** Cumulative credit issued by the owner on this lease in this window (highest grant applied). */
  issued = 0;
  /** Part of `issued` that came out of an owner's float, as its grants said (`Grant.floated`). */
  floated = 0;
  /** Credit granted to itself at the window boundary without owner contact (F4). */
  selfIssued = 0;
  /** Cumulative admissions in this window. */
  spent = 0;
  /** Cumulative credit given back to the owner after a recall. */
  released = 0;
  /** Highest grant seq applied in this window. */
  grantSeq = 0;
  /** Credit already granted for the next window (the owner pre-grants before a rollover). */
  nextWindowId = -1;
  nextIssued = 0;
  nextFloated = 0;
  nextGrantSeq = 0;
  /** Requests seen in the current round (admitted or not). */
  roundDemand = 0;
  /**
   * Requests seen in this window (admitted or not) up to the last round's end: what the owner measures
   * concentration on (`lib/owner/concentration.ts`), offered rather than admitted traffic.
   */
  seen = 0;
  /**
   * Smoothed requests per round, in units of `RATE_ONE` (fixed point: a small integer stays unboxed in
   * V8, a fractional double would cost a heap number per bucket; small up to 2^30, over 16,000
   * requests a round on one node). The demand advertised to the owner.
   */
  rate = 0;
  /** Last round in which the bucket was reported with requests. */
  reportedRound = -1;
  /** The demand its last report advertised (`demandMark`): a quiet bucket whose demand stays there says nothing new. */
  reportedDemand = -1;
  /** No remote fast path before the round after this one (an ask unanswered or answered with nothing, D2). */
  fastRound = -1;
  /**
   * No fast path until a later grant arrives: the owner said this window has nothing left for us
   * (`Exhaustion.Spent`, which names the window in denials).
   */
  exhausted: Exhaustion = Exhaustion.None;
  /** Grant seq the exhaustion notice was sent after. */
  exhaustedSeq = 0;
  /** `dirty`, `unreported`, `lateUnsure`, `blanketed`, `tookBefore` and `gaveBack` as bits: one small integer field. */
  private flags = 0;

  /**
   * @param offset phase offset of this key for this window length
   * @param lease lease number: unique within the node epoch, kept across windows, new after eviction
   */
  constructor(
    readonly offset: number,
    readonly lease: number,
    /** The window length. */
    readonly windowMs: number,
  ) {}

  /**
   * Wall-clock end of the bucket's window (before its first window, a time long past). Computed, not
   * kept: a millisecond timestamp is no small integer, so a field would hold a boxed number per bucket.
   */
  get windowEnd(): number {
    return windowEndMs(this.windowId, this.windowMs, this.offset);
  }

  /** Must be reported at the end of the round even without requests (recall, self-grant). */
  get dirty(): boolean {
    return (this.flags & DIRTY) !== 0;
  }
  set dirty(v: boolean) {
    this.setFlag(DIRTY, v);
  }

  /** Spent since its last report, which a standing lease put off (`NodeDemand.mayWait`). */
  get unreported(): boolean {
    return (this.flags & UNREPORTED) !== 0;
  }
  set unreported(v: boolean) {
    this.setFlag(UNREPORTED, v);
  }

  /**
   * A grant that raised this window's credit landed after the window ended without saying `late`
   * (`Grant.late`): its owner may have issued it for a window whose record it lost, so once the
   * window has ended the bucket's credit covers nothing (`NodeAsks.usable`).
   */
  get lateUnsure(): boolean {
    return (this.flags & LATE_UNSURE) !== 0;
  }
  set lateUnsure(v: boolean) {
    this.setFlag(LATE_UNSURE, v);
  }

  /**
   * `HELD` of `issued` is credit the node took itself under its owner's blanket, with no grant
   * (`NodeBoundary.takeHeld`): stated in every report and ask of the window (`Report.blanketed`).
   */
  get blanketed(): boolean {
    return (this.flags & BLANKETED) !== 0;
  }
  set blanketed(v: boolean) {
    this.setFlag(BLANKETED, v);
  }

  /** It took credit under a blanket in the window it last rolled out of (`BucketMap` remembers it when dropped). */
  get tookBefore(): boolean {
    return (this.flags & TOOK_BEFORE) !== 0;
  }

  /** It gave credit back since its last report (`giveBack`): that report never waits for its shard's slot. */
  get gaveBack(): boolean {
    return (this.flags & GAVE_BACK) !== 0;
  }

  /** Gives `n` of its credit back to the owner: reported at the round's end (released). */
  giveBack(n: number): void {
    this.released += n;
    this.flags |= DIRTY | GAVE_BACK;
  }

  /** Its report is made: what it gave back is told. */
  reported(): void {
    this.flags &= ~(UNREPORTED | GAVE_BACK);
  }

  private setFlag(bit: number, v: boolean): void {
    this.flags = v ? this.flags | bit : this.flags & ~bit;
  }

  /** Credit available to the request path. */
  get credit(): number {
    return this.issued + this.selfIssued - this.spent - this.released;
  }

  /** Moves the bucket to a new window: a past window's credit is void; a pre-grant for this one applies. */
  roll(windowId: number): void {
    const pre = this.nextWindowId === windowId;
    this.flags = (this.blanketed ? (this.flags | TOOK_BEFORE) & ~BLANKETED : this.flags & ~TOOK_BEFORE) & ~GAVE_BACK;
    this.windowId = windowId;
    this.issued = pre ? this.nextIssued : 0;
    this.floated = pre ? this.nextFloated : 0;
    this.grantSeq = pre ? this.nextGrantSeq : 0;
    this.nextWindowId = -1;
    this.nextIssued = 0;
    this.nextFloated = 0;
    this.nextGrantSeq = 0;
    this.selfIssued = 0;
    this.spent = 0;
    this.released = 0;
    this.fastRound = -1;
    this.exhausted = Exhaustion.None;
    this.exhaustedSeq = 0;
    this.lateUnsure = false;
    this.seen = 0;
    // Its last report went to the past window's owner.
    this.reportedDemand = -1;
    this.unreported = false;
  }

  /** Whether the bucket could be dropped without losing usable credit. */
  evictable(nowMs: number): boolean {
    return (this.credit <= 0 || this.windowEnd <= nowMs) && this.nextIssued === 0;
  }
}

import { RATE_ONE, type Bucket } from '../bucket.js';
import { leaseTarget, recallKeep } from '../lease-size.js';
import { NodeState } from './state.js';

/**
 * Share of remote asks missing their deadline (× 256, smoothed over about 16 asks) above which the
 * fast path counts as unreliable: 26/256 ≈ 10 %, two misses close together. One miss alone (16) is
 * not enough: hedged leases strand credit, which a key using its whole allowance then misses.
 */
const UNRELIABLE_256 = 26;
/** Most requests' worth a key seen rarely on a node asks for while the fast path is unreliable. */
const HEDGE_MAX = 3;
/**
 * Below this smoothed rate a quiet bucket drops out of the reports: 1/256 request a round, about a
 * second after a request; under a plentiful plan 1/4096, about two seconds (`fadeRate`).
 */
const MIN_RATE = RATE_ONE / 256;
const MIN_RATE_PLENTIFUL = RATE_ONE / 4096;
/**
 * A plan allowing at least this many requests per window for each live node is plentiful: a key seen
 * rarely holds a lease there, and what a node may strand of it is under 1 % of its share.
 */
export const PLENTIFUL = 512;
/**
 * Requests' worth a key seen lately asks for at least under a plentiful plan: a lease of 3 to 9,
 * below a busy lease (`BUSY` in `lib/owner/sizing.ts`), so the owner's room bounds its top-ups. A
 * constant, not a multiple of its rate: the rate of a key seen every few dozen rounds swings
 * tenfold between two requests, and a lease sized from it would be topped up and given back in turn.
 */
export const STANDING = 3;

const DEMAND_SCALE = 1024;

/**
 * A demand as a bucket keeps it to compare (`Bucket.reportedDemand`): in 1/1024 of a request, a small
 * integer, so the bucket holds no boxed number.
 */
export function demandMark(demand: number): number {
  return Math.min(0x3fffffff, Math.round(demand * DEMAND_SCALE));
}

/** The demand a mark stands for (`demandMark`'s inverse, to its 1/1024 of a request). */
const markedDemand = (mark: number): number => mark / DEMAND_SCALE;

/**
 * The demand a node advertises for a bucket (what it expects to spend over the next rounds, from its
 * smoothed rate), and the credit it gives back: above what the lease-size rule allows that demand
 * (L1), or above what a lowered limit still allows. Tracks how often remote asks miss their deadline:
 * while they often do, a key seen lately asks for a little more than one request needs.
 */
export abstract class NodeDemand extends NodeState {
  /** Share of recent remote asks that missed their deadline, × 256. */
  private missed256 = 0;

  /**
   * Requests this bucket expects over the next `demandRounds`, from its smoothed rate. A key this node
   * sees less than about once a round asks for what each request needs and holds no lease here
   * (`lib/lease-size.ts`), unless its plan is plentiful; a busy key new to this node asks per
   * request until its rate shows.
   */
  protected demandOf(b: Bucket, limit: number): number {
    const perRound = b.rate / RATE_ONE;
    let demand = perRound * this.cfg.demandRounds;
    if (b.rate === 0) return demand;
    // Under a plentiful plan a key this node served lately asks for STANDING requests at least (at
    // most its stranding budget, limit / (PLENTIFUL × fleet)): its requests, the first of the next
    // window's included (asked ahead), find credit here instead of each asking an owner across the
    // network with a hard deadline. What may strand is a lease of up to 2.5 × that budget + 1, under
    // 1 % of the allowance over the fleet; the owner's room rule still bounds top-ups at a window's
    // tail, and a recall leaves 2. A bucket fading out of the reports gives all but one credit back
    // first (its rate is below `fadeRate` here a round before `endRound` drops it; `shed`).
    const budget = this.standingBudget(limit);
    if (budget >= 1 && b.rate >= MIN_RATE_PLENTIFUL) demand = Math.max(demand, Math.min(budget, STANDING));
    if (this.missed256 <= UNRELIABLE_256) return demand;
    // While remote asks often miss their deadline (a busy host, a slow bus), a key this node served
    // lately asks for what its rate says it will spend by the window's end — at least one request,
    // at most HEDGE_MAX, below a busy lease so the owner's room bounds it — instead of asking per
    // request: a little credit may strand rather than most such requests being refused.
    const untilEnd = (perRound * Math.max(0, b.windowEnd - this.clock.now())) / this.cfg.roundMs;
    return Math.max(demand, Math.min(HEDGE_MAX, Math.max(1, untilEnd)));
  }

  /** Whether `demand` is the standing floor of a plentiful plan (its rate alone asks for no more): a standing lease. */
  private standing(limit: number, demand: number): boolean {
    const budget = this.standingBudget(limit);
    return budget >= 1 && demand === Math.min(budget, STANDING);
  }

  /**
   * Whether a bucket that spent this round, advertising `demand` (`demandOf`), may put its report
   * off: a standing lease whose owner has its demand already and would not top it up yet, as it holds
   * at least ⌊demand × h⌋ (below which an owner refills a lease while its pool is plentiful: `topUp`
   * in `lib/fold-owner.ts`), and more than a recall would leave it (or the owner, counting it as
   * holding more than it does, would recall for nothing). Counts are cumulative, so the report it
   * sends once its credit runs low, its window ends or its rate fades says it all; one per request
   * would cost a batch, a seal and a write each way for a key seen every second or so, and a top-up
   * of one. Safety does not hang on it: an owner issues only what it has not issued, and counts what
   * it does not know was spent as held.
   */
  protected mayWait(b: Bucket, limit: number, demand: number): boolean {
    if (b.selfIssued > 0) return false;
    const h = this.cfg.headroom;
    return this.standing(limit, demand) && demandMark(demand) === b.reportedDemand && b.credit > Math.max(Math.floor(demand * h) - 1, recallKeep(demand, this.cfg.demandRounds, h));
  }

  /**
   * Whether `demand` of a window of `limit` stays where it is while its bucket sees no request, until
   * its rate fades (`fadeRate`): a standing lease at STANDING, which hedging never raises (HEDGE_MAX),
   * and which its rate, only falling, never passes.
   */
  protected steady(limit: number, demand: number): boolean {
    return demand === STANDING && this.standingBudget(limit) >= STANDING;
  }

  /** Requests' worth a node may strand of a window of `limit`: limit / (PLENTIFUL × fleet); plentiful from 1. */
  private standingBudget(limit: number): number {
    return Math.floor(limit / (PLENTIFUL * Math.max(1, this.link.fleetSize())));
  }

  /** Whether a window of `limit` is plentiful for this fleet (`standingBudget` of 1 at least). */
  protected plentiful(limit: number): boolean {
    return this.standingBudget(limit) >= 1;
  }

  /**
   * Whether the report of `b` may wait for its shard's slot (`SLOT_ROUNDS`): under a plentiful plan,
   * with no self-grant (F4: in every batch), while it holds credit for twice the slot's rounds at its
   * rate, one request at least, so no request here asks for want of the top-up it would bring; never
   * one telling of credit given back (`Bucket.gaveBack`): another node may be refused for want of it.
   * What waits is a spend it had credit for or a new demand, news to the owner a few rounds later.
   * Safety does not hang on it, as on no report's timing: an owner counts what it has not heard was
   * spent as held.
   */
  protected canWait(b: Bucket, limit: number, rounds: number): boolean {
    return b.selfIssued === 0 && !b.gaveBack && this.plentiful(limit) && b.credit >= Math.max(1, Math.ceil((2 * rounds * b.rate) / RATE_ONE));
  }

  /**
   * The smoothed rate below which a quiet bucket of a window of `limit` drops out of the reports.
   * Under a plentiful plan a key seen every second or two keeps its standing lease between requests
   * (one request's trace fades below 1/4096 over about 86 rounds, below 1/256 over 43).
   */
  protected fadeRate(limit: number): number {
    return this.plentiful(limit) ? MIN_RATE_PLENTIFUL : MIN_RATE;
  }

  /** A remote ask answered by its deadline: the share of misses moves a sixteenth of the way to none. */
  protected askAnswered(): void {
    this.missed256 += (0 - this.missed256) >> 4;
  }

  /** A remote ask that missed its deadline or found no owner: the share moves a sixteenth of the way to all. */
  protected askMissed(): void {
    this.missed256 += (256 - this.missed256) >> 4;
  }

  /**
   * Gives back credit this node is not going to need (L1): above twice what the lease-size rule
   * (`lib/lease-size.ts`) gives its `demand` now (`demandOf`), down to that. The owner sees the
   * release in this round's report and can issue it where requests are. A standing lease keeps its
   * whole size (no more) to its window's end: what it may strand is within its plan's budget already,
   * and shedding part of it late in each window would cost a report and a top-up per key for credit
   * nobody is short of. Under a plentiful plan a bucket keeps one credit whatever its demand, to its
   * window's end or a recall (its owner hears the demand is gone as it fades: `recallSpares`): a
   * caller back after a quiet spell in the same window finds it here, where it would otherwise ask an
   * owner across the network under the hard deadline (the bench's fleet member, its load pausing 50 s
   * between runs, refused 26 of 45,000 requests so on a busy host). One credit per node is below the
   * standing lease the plan's budget allows already. Not while the bucket map is crowded
   * (`BucketMap.roomy`): a bucket holding credit is evicted only by giving it back in a report, which
   * churning one-shot keys would pay each.
   */
  protected shed(b: Bucket, limit: number, demand: number, now: number): void {
    if (b.credit <= 0) return;
    const standing = this.standing(limit, demand);
    const keep = leaseTarget(demand, standing ? Infinity : (b.windowEnd - now) / this.cfg.roundMs, this.cfg.demandRounds, this.cfg.headroom);
    const kept = Math.max(keep, this.buckets.roomy && this.plentiful(limit) ? 1 : 0);
    if (b.credit > (standing ? keep : 2 * keep) && b.credit > kept) {
      b.giveBack(b.credit - kept);
    }
  }

  /**
   * Whether `b`'s owner, by the demand it last heard from it, would leave it credit on a recall. A
   * bucket fading out of the reports with credit (kept by `shed`, or hedged) tells it first that its
   * demand is gone, or that credit could strand there while a caller under the limit is refused
   * elsewhere (a standing lease of one request fades holding it, with nothing given back to report).
   */
  protected recallSpares(b: Bucket): boolean {
    return b.reportedDemand > 0 && recallKeep(markedDemand(b.reportedDemand), this.cfg.demandRounds, this.cfg.headroom) > 0;
  }

  /** Gives back credit above what `limit` still allows in the window (reported as released). */
  protected trim(b: Bucket, limit: number): void {
    const excess = b.credit - Math.max(0, limit - b.spent);
    if (excess > 0) {
      b.giveBack(excess);
    }
  }
}

import { RATE_ONE, type Bucket } from '../bucket.js';
import { leaseTarget } from '../lease-size.js';
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
   * (`lib/lease-size.ts`); a busy key new to this node asks per request until its rate shows.
   */
  protected demandOf(b: Bucket): number {
    const demand = (b.rate / RATE_ONE) * this.cfg.demandRounds;
    if (b.rate === 0 || this.missed256 <= UNRELIABLE_256) return demand;
    // While remote asks often miss their deadline (a busy host, a slow bus), a key this node served
    // lately asks for what its rate says it will spend by the window's end — at least one request,
    // at most HEDGE_MAX, below a busy lease so the owner's room bounds it — instead of asking per
    // request: a little credit may strand rather than most such requests being refused.
    const untilEnd = ((b.rate / RATE_ONE) * Math.max(0, b.windowEnd - this.clock.now())) / this.cfg.roundMs;
    return Math.max(demand, Math.min(HEDGE_MAX, Math.max(1, untilEnd)));
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
   * (`lib/lease-size.ts`) gives its demand now, down to that. The owner sees the release in this
   * round's report and can issue it where requests are.
   */
  protected shed(b: Bucket, now: number): void {
    if (b.credit <= 0) return;
    const keep = leaseTarget(this.demandOf(b), (b.windowEnd - now) / this.cfg.roundMs, this.cfg.demandRounds, this.cfg.headroom);
    if (b.credit > 2 * keep) {
      b.released += b.credit - keep;
      b.dirty = true;
    }
  }

  /** Gives back credit above what `limit` still allows in the window (reported as released). */
  protected trim(b: Bucket, limit: number): void {
    const excess = b.credit - Math.max(0, limit - b.spent);
    if (excess > 0) {
      b.released += excess;
      b.dirty = true;
    }
  }
}

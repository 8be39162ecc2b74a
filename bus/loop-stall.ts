import { systemClock, type Clock } from '../lib/clock.js';

/** How often the monitor's timer is due, ms. */
const TICK_MS = 10;
/** Lateness of the timer under which the loop counts as running (timer granularity, a short callback). */
const STALL_MIN_MS = 5;
/** Stalls remembered; older ones are forgotten, which only makes a silence look longer. */
const KEPT = 64;

/**
 * This process's own event-loop stalls: spans in which its timer, due every TICK_MS, did not run (a
 * GC pause, a starved or throttled CPU, SIGSTOP, a burst of requests that kept the loop busy). The
 * node judges its owners' silence net of them: while its own loop could not run, it could not have
 * heard them either. Only the node side discounts stalls (whether an owner is worth asking, F2, and
 * when it is degraded, F5); what an owner may issue, and how it judges members' silence, run on the
 * full time, so safety never rests on this (`lib/membership.ts`).
 */
export class LoopStalls {
  private readonly starts = new Float64Array(KEPT);
  private readonly ends = new Float64Array(KEPT);
  private count = 0;
  private due: number;
  private timer: NodeJS.Timeout | undefined;
  /** Longest lateness since the last `takeWorstLag()`, ms. */
  private worst = 0;
  /** Total stalled time, ms. */
  stalledMs = 0;

  constructor(private readonly clock: Clock) {
    this.due = clock.monotonic() + TICK_MS;
  }

  /**
   * A monitor measuring with `clock`, started if that is the process clock. Another clock (a test's
   * fake one) moves by steps no timer sees: it is never started, so it records no stall.
   */
  static started(clock: Clock): LoopStalls {
    const loop = new LoopStalls(clock);
    return clock === systemClock ? loop.start() : loop;
  }

  start(): this {
    if (this.timer === undefined) {
      this.due = this.clock.monotonic() + TICK_MS;
      // One repeating timer: node re-arms it from when each callback starts, as a new timeout set
      // there would be, without a Timeout object (and its async id) made a hundred times a second.
      this.timer = setInterval(() => this.tick(), TICK_MS);
      this.timer.unref();
    }
    return this;
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Milliseconds from `since` to now less the stalls in between (the current one included). */
  awakeSince(since: number): number {
    const now = this.clock.monotonic();
    let stalled = 0;
    for (let i = Math.max(0, this.count - KEPT); i < this.count; i++) {
      const k = i % KEPT;
      stalled += Math.max(0, this.ends[k]! - Math.max(this.starts[k]!, since));
    }
    // Overdue now: the loop has been busy since the tick was due (this very call may be what keeps it).
    if (this.timer !== undefined && now - this.due > STALL_MIN_MS) stalled += now - Math.max(this.due, since);
    return Math.max(0, now - since - stalled);
  }

  /** The longest lateness of the loop since the last call, ms (for a gauge read at each scrape). */
  takeWorstLag(): number {
    const now = this.clock.monotonic();
    const w = Math.max(this.worst, this.timer === undefined ? 0 : now - this.due);
    this.worst = 0;
    return Math.max(0, w);
  }

  private tick(): void {
    const now = this.clock.monotonic();
    const late = now - this.due;
    this.worst = Math.max(this.worst, late);
    if (late > STALL_MIN_MS) {
      const k = this.count++ % KEPT;
      this.starts[k] = this.due;
      this.ends[k] = now;
      this.stalledMs += late;
    }
    this.due = now + TICK_MS;
  }
}

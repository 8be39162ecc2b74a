import { ErrorCode, RateLimiterError } from './errors.js';

/**
 * Time source for the limiter. Window ids come from the wall clock (every node must agree on
 * them); intervals such as rounds, deadlines and outage timers come from the monotonic clock.
 */
export interface Clock {
  /** Wall-clock milliseconds since the Unix epoch. */
  now(): number;
  /** Monotonic milliseconds, only meaningful as a difference between two readings. */
  monotonic(): number;
}

/** The process clock: `Date.now()` and `performance.now()`. */
export const systemClock: Clock = Object.freeze({
  now: () => Date.now(),
  monotonic: () => performance.now(),
});

/** A clock that only moves when told to; used by tests and the simulator. */
export class FakeClock implements Clock {
  private wall: number;
  private mono = 0;

  constructor(startWallMs = 1_700_000_000_000) {
    this.wall = startWallMs;
  }

  now(): number {
    return this.wall;
  }

  monotonic(): number {
    return this.mono;
  }

  /** Moves both clocks forward by `ms`. */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RateLimiterError(ErrorCode.CONFIG, 'FakeClock.advance: ms must be >= 0');
    this.wall += ms;
    this.mono += ms;
  }

  /**
   * Steps the wall clock by `ms`, forward or back, as NTP does; the monotonic clock does not move.
   * Window ids come from the wall clock, so a step can move a node into another window.
   */
  step(ms: number): void {
    if (!Number.isFinite(ms)) throw new RateLimiterError(ErrorCode.CONFIG, 'FakeClock.step: ms must be finite');
    this.wall += ms;
  }

  /** Sets the wall clock (for example to a window boundary); the monotonic clock moves by the same step. */
  set(wallMs: number): void {
    if (wallMs < this.wall) throw new RateLimiterError(ErrorCode.CONFIG, 'FakeClock.set: the clock never goes back (step() does)');
    this.advance(wallMs - this.wall);
  }
}

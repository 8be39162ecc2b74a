/**
 * One 429 or 503, or a refusal counted but not enforced: what happened, to which key id (never the raw
 * key), where.
 */
export interface LimitEvent {
  /** Wall-clock ms. */
  readonly at: number;
  readonly keyId: string;
  /**
   * `quota` (429), `capacity` (503), `fail_closed` (503 on a limiter fault), `shadow` (a would-be 429
   * admitted in shadow mode) or `dual_run` (a request the enforced plan admitted that the plan run
   * beside it would have refused).
   */
  readonly class: 'quota' | 'capacity' | 'fail_closed' | 'shadow' | 'dual_run';
  /** What the caller was sent: 429 or 503; 200 for `shadow` and `dual_run`. */
  readonly status: number;
  /** The denying window's name (quota, shadow and dual_run). */
  readonly window: string;
  readonly routeClass: string;
  readonly correlationId: string;
  readonly node: string;
}

/**
 * Where a limiter records its limit events: the Redis event log (`EventLog`, with `redis`), or none.
 * Declared apart from it so the middleware's types need no Redis client's.
 */
export interface LimitEventSink {
  /** Buffers an event; never blocks, never throws. */
  record(e: LimitEvent): void;
  /** Writes what is buffered. */
  flush(): Promise<void>;
  /** Events not stored (a flood, or a failed write). */
  readonly dropped: number;
}

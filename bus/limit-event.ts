/** One 429 or 503: what happened, to which key id (never the raw key), where. */
export interface LimitEvent {
  /** Wall-clock ms. */
  readonly at: number;
  readonly keyId: string;
  /** `quota` (429), `capacity` (503) or `fail_closed` (503 on a limiter fault). */
  readonly class: 'quota' | 'capacity' | 'fail_closed';
  readonly status: number;
  /** The denying window's name (quota only). */
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

/**
 * Why a request was refused: `quota` (429), `capacity` (503) or `fail_closed` (503 on a limiter
 * fault); or refused only on paper: `shadow` (a would-be 429 admitted in shadow mode) or `dual_run` (a
 * request the enforced plan admitted that the plan run beside it would have refused), both status 200.
 */
export type LimitClass = 'quota' | 'capacity' | 'fail_closed' | 'shadow' | 'dual_run';

/** One 429 or 503 (or a refusal counted only) as the limiter saw it, handed to `record`: to which key id (never the raw key), where. */
export interface LimitRefusal {
  /** Wall-clock ms. */
  readonly at: number;
  readonly keyId: string;
  readonly class: LimitClass;
  readonly status: number;
  /** The denying window's name (quota, shadow, dual_run; '' otherwise). */
  readonly window: string;
  /** When the denying window ends (wall-clock ms), if known: its aggregate is written no later. */
  readonly windowEndsAt?: number;
  readonly routeClass: string;
  readonly correlationId: string;
  readonly node: string;
}

/**
 * A stored limit event: the refusals of one key id, class, window and route class on one node, within
 * one window (or at most `flushMs` of it), counted as one entry rather than one per request.
 */
export interface LimitEvent {
  readonly keyId: string;
  readonly class: LimitClass;
  readonly status: number;
  /** The denying window's name (quota only; '' otherwise). */
  readonly window: string;
  readonly routeClass: string;
  readonly node: string;
  /** Wall-clock ms of the first and the last refusal it counts. */
  readonly first: number;
  readonly last: number;
  /** Refusals it counts (at least 1). */
  readonly count: number;
  /** Correlation ids of the first and the last refusal. */
  readonly firstCorrelationId: string;
  readonly lastCorrelationId: string;
}

/** What became of the refusals a sink was given, since it was made. */
export interface LimitEventStats {
  /** Refusals recorded (every one handed to `record`). */
  readonly refusals: number;
  /** Limit events (aggregates) written to the stream. */
  readonly written: number;
  /** Refusals not kept: they would have opened an aggregate beyond `maxPending`. */
  readonly droppedPending: number;
  /** Refusals lost with a write that failed (Redis down, say); never retried. */
  readonly droppedWrite: number;
  /** Stored events this node's writes trimmed off the stream to hold its byte budget (`maxBytes`). */
  readonly evicted: number;
}

/** How the Redis event log bounds itself; part of `rateLimiter({ redis: { events } })`. */
export interface LimitEventOptions {
  /**
   * Byte budget of the event stream in Redis: its length is capped at `maxBytes` divided by the bound
   * on one entry's size (`MAX_ENTRY_BYTES`), the oldest events trimmed first. @default 268435456 (256 MiB)
   */
  maxBytes?: number;
  /** Longest an aggregate waits before it is written, if its window has not ended sooner (ms). @default 60000 */
  flushMs?: number;
  /** Aggregates held in memory awaiting their write; a refusal that would open one more is dropped and counted. @default 10000 */
  maxPending?: number;
}

/**
 * Where a limiter records its limit events: the Redis event log (`EventLog`, with `redis`), or none.
 * Declared apart from it so the middleware's types need no Redis client's.
 */
export interface LimitEventSink {
  /** Counts a refusal into its aggregate; never blocks, never throws. */
  record(r: LimitRefusal): void;
  /** Writes the aggregates whose window ended or that waited `flushMs`; every one with `all`. */
  flush(all?: boolean): Promise<void>;
  /** Refusals not stored: dropped over `maxPending`, or lost with a failed write. */
  readonly dropped: number;
  readonly stats: LimitEventStats;
}

/** How a wait under one second is written in Retry-After. */
export type SubSecondMode = 'zero' | 'round-up';

/** Header values for a denial's wait. */
export interface RetryHeaders {
  /** Retry-After in whole seconds. */
  readonly retryAfter: string;
  /** X-RateLimit-Reset-Ms, present when the wait is under one second. */
  readonly resetMs: string | undefined;
}

/**
 * Retry-After for a wait of `waitMs`. Under one second: `0` plus the exact milliseconds in
 * X-RateLimit-Reset-Ms (`zero`, the default), or `1` (`round-up`) for clients that treat 0 as "now".
 * Otherwise whole seconds rounded up, at least 1. Undefined (header omitted) when the wait is unknown.
 */
export function retryHeaders(waitMs: number | undefined, mode: SubSecondMode): RetryHeaders | undefined {
  if (waitMs === undefined || !Number.isFinite(waitMs) || waitMs < 0) return undefined;
  if (waitMs < 1000) {
    return { retryAfter: mode === 'zero' ? '0' : '1', resetMs: String(Math.min(1000, Math.max(1, Math.ceil(waitMs)))) };
  }
  return { retryAfter: String(Math.max(1, Math.ceil(waitMs / 1000))), resetMs: undefined };
}

/**
 * Error classes with stable codes. Being rate limited is a Decision, never an exception:
 * these are for misuse (bad options, bad policy) and internal faults.
 */

/** Stable error codes; listed in the README. */
export const ErrorCode = Object.freeze({
  CONFIG: 'RL_CONFIG',
  POLICY: 'RL_POLICY',
  IDENTITY: 'RL_IDENTITY',
  DEGRADED: 'RL_DEGRADED',
  INTERNAL: 'RL_INTERNAL',
  /** A bus entry, message or stored record refused: malformed, unknown secret version, forged, replayed. */
  REFUSED: 'RL_REFUSED',
  /** The stored policy changed between a writer's read and its write. */
  CONFLICT: 'RL_CONFLICT',
  /** An admin API request or a maintenance job that cannot be carried out as given. */
  REQUEST: 'RL_REQUEST',
  /** The limiter or its bus was closed. */
  CLOSED: 'RL_CLOSED',
} as const);

/** Stable codes of the warnings a limiter logs (the `code` field of the log line); listed in the README. */
export const WarningCode = Object.freeze({
  /** X-Forwarded-For arrived but nothing trusts it: anonymous callers behind a proxy share its address. */
  FORWARDED_UNTRUSTED: 'RL_FORWARDED_UNTRUSTED',
} as const);

export type ErrorCodeValue = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Base class of every error this library throws. */
export class RateLimiterError extends Error {
  readonly code: ErrorCodeValue;

  constructor(code: ErrorCodeValue, message: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

/** One problem found while validating input: the field's path and what is wrong with it. */
export interface Problem {
  readonly path: string;
  readonly message: string;
}

/** Base for validation errors: carries every problem found, not just the first. */
export class ValidationError extends RateLimiterError {
  readonly problems: readonly Problem[];

  constructor(code: ErrorCodeValue, what: string, problems: readonly Problem[]) {
    super(code, `${what}: ${problems.map((p) => `${p.path}: ${p.message}`).join('; ')}`);
    this.problems = Object.freeze([...problems]);
  }
}

/** Invalid limiter options; thrown by `rateLimiter()` and `backstop()` at construction. */
export class ConfigError extends ValidationError {
  constructor(problems: readonly Problem[], what = 'invalid rate limiter options') {
    super(ErrorCode.CONFIG, what, problems);
  }
}

/** Invalid policy document; the previous policy (if any) stays in force. */
export class PolicyError extends ValidationError {
  constructor(problems: readonly Problem[], what = 'invalid policy') {
    super(ErrorCode.POLICY, what, problems);
  }
}

/**
 * The response catalog: every code a caller can see, its HTTP status and its RFC 9457 problem type.
 * 429 means "your own quota"; 503 means "shared capacity or the limiter itself", so clients can tell a
 * personal throttle from a provider problem.
 */
export const PROBLEM_QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
export const PROBLEM_REDUCED_CAPACITY = 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity';

/** One entry of the catalog. */
export interface CatalogEntry {
  readonly code: string;
  readonly status: 429 | 503;
  readonly type: string;
  readonly title: string;
}

/**
 * The JSON body of a denial (`Content-Type: application/problem+json`, RFC 9457): the catalog entry's
 * `type`, `title`, `status` and code (`error`), the denying window on a 429, and the correlation id.
 */
export interface ProblemBody {
  readonly type: string;
  readonly title: string;
  readonly status: 429 | 503;
  /** The catalog code, e.g. `RL_QUOTA_EXCEEDED`. */
  readonly error: string;
  /** Name of the window that denied (429 from the limiter only). */
  readonly window?: string;
  readonly correlation_id: string;
}

const entry = (code: string, status: 429 | 503, type: string, title: string): CatalogEntry => Object.freeze({ code, status, type, title });

/** Every caller-visible denial. */
export const Catalog = Object.freeze({
  /** The caller's own quota is spent in at least one window. */
  quotaExceeded: entry('RL_QUOTA_EXCEEDED', 429, PROBLEM_QUOTA_EXCEEDED, 'Quota exceeded'),
  /** The caller's tenant has taken its share of this node's shared admission capacity. */
  tenantShare: entry('RL_CAPACITY_TENANT_SHARE', 503, PROBLEM_REDUCED_CAPACITY, 'Temporarily reduced capacity'),
  /** This node has admitted all it accepts this second. */
  nodeCapacity: entry('RL_CAPACITY_NODE', 503, PROBLEM_REDUCED_CAPACITY, 'Temporarily reduced capacity'),
  /** The limiter failed on a fail-closed route class. */
  limiterUnavailable: entry('RL_LIMITER_UNAVAILABLE', 503, PROBLEM_REDUCED_CAPACITY, 'Temporarily reduced capacity'),
  /** The backstop's coarse per-key cap (a generous multiple of the plan) was hit. */
  backstopKey: entry('RL_BACKSTOP_KEY', 429, PROBLEM_QUOTA_EXCEEDED, 'Quota exceeded'),
  /** The backstop's aggregate node ceiling was hit. */
  backstopCeiling: entry('RL_BACKSTOP_CEILING', 503, PROBLEM_REDUCED_CAPACITY, 'Temporarily reduced capacity'),
});

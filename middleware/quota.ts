import type { Response } from 'express';
import type { Clock } from '../lib/clock.js';
import type { FoldOwner } from '../lib/fold-owner.js';
import type { Denied, LeaseNode } from '../lib/lease-node.js';
import type { QuotaSource } from '../lib/node-contract.js';
import type { ResolvedLimits } from '../lib/policy.js';

/**
 * The caller's own quota after its request, in its binding window (the one with the least left): what
 * `req.rateLimit` holds for the route handler. It names no key (raw or hashed) and nothing of any
 * other caller or tenant.
 */
export interface RateLimitInfo {
  /** Requests the binding window allows. */
  readonly limit: number;
  /** Requests left in it: exact in a fleet of one; in a fleet a lower bound (other nodes hold credit too). */
  readonly remaining: number;
  /** `limit - remaining`. */
  readonly used: number;
  /** Milliseconds until the binding window ends and its allowance is whole again. */
  readonly resetMs: number;
  /** Name of the binding window, as in the policy (the denying window on a refusal). */
  readonly window: string;
  /** The caller's plan; undefined when a per-key override gives the key windows of its own. */
  readonly plan: string | undefined;
}

/** What `onLimited` is told about a refused caller: its own quota, and when to try again. */
export interface LimitedInfo extends RateLimitInfo {
  /** Milliseconds until the denying window has credit again; undefined when unknown. */
  readonly retryAfterMs: number | undefined;
  /** Correlation id of the refusal, as in X-Correlation-Id and the limit event. */
  readonly correlationId: string;
}

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /**
       * The caller's own quota, set by `rateLimiter()` on requests it admitted or refused for quota
       * (not on skipped ones, limiter faults, capacity 503s or with the kill switch off).
       */
      rateLimit?: RateLimitInfo;
    }
  }
}

/** Plan names by compiled limits, so a request reads its plan without slicing a string. */
const plans = new WeakMap<ResolvedLimits, string | undefined>();

function planOf(limits: ResolvedLimits): string | undefined {
  let plan = plans.get(limits);
  if (plan === undefined && !plans.has(limits)) {
    plan = limits.id.startsWith('plan:') ? limits.id.slice(5) : undefined;
    plans.set(limits, plan);
  }
  return plan;
}

/**
 * `req.rateLimit` after an admission: read from the buckets when first touched, then kept. Reading a
 * fleet-of-one owner's ledger costs about as much as the decision itself, so a request whose handler
 * never looks pays only this object. `JSON.stringify` gives the plain fields.
 */
class QuotaView implements RateLimitInfo {
  #reader: QuotaReader | undefined;
  #info: RateLimitInfo | undefined;
  readonly #keyId: string;
  readonly #limits: ResolvedLimits;

  constructor(reader: QuotaReader, keyId: string, limits: ResolvedLimits) {
    this.#reader = reader;
    this.#keyId = keyId;
    this.#limits = limits;
  }

  #read(): RateLimitInfo {
    if (this.#reader !== undefined) {
      this.#info = this.#reader.read(this.#keyId, this.#limits) ?? this.#reader.spent(this.#limits);
      this.#reader = undefined;
    }
    return this.#info!;
  }

  get limit(): number {
    return this.#read().limit;
  }
  get remaining(): number {
    return this.#read().remaining;
  }
  get used(): number {
    return this.#read().used;
  }
  get resetMs(): number {
    return this.#read().resetMs;
  }
  get window(): string {
    return this.#read().window;
  }
  get plan(): string | undefined {
    return this.#read().plan;
  }
  toJSON(): RateLimitInfo {
    return this.#read();
  }
}

/** A fleet node's view of a key's quota: the credit it holds plus what its owner side has not issued. */
export function fleetQuota(node: LeaseNode, owner: FoldOwner): QuotaSource {
  return {
    windowQuota(keyId, limits, i) {
      const b = node.buckets.peek(keyId)?.buckets[i];
      if (b === undefined) return undefined;
      return { left: Math.max(0, b.credit) + owner.unissued(keyId, limits.windows[i]!.windowMs, b.windowId), end: b.windowEnd };
    },
  };
}

/**
 * Reads a caller's own quota: in a fleet, what this node holds and, as a shard owner, has not issued
 * (a lower bound: other nodes hold and spend credit too); in a fleet of one, exactly.
 */
export class QuotaReader {
  constructor(
    private readonly source: QuotaSource,
    private readonly clock: Clock,
  ) {}

  /** `req.rateLimit` after an admission of `keyId`: read when first touched. */
  view(keyId: string, limits: ResolvedLimits): RateLimitInfo {
    return new QuotaView(this, keyId, limits);
  }

  /** The quota after an admission: the binding window's. Undefined when the key holds no buckets. */
  read(keyId: string, limits: ResolvedLimits): RateLimitInfo | undefined {
    let at = -1;
    let remaining = Infinity;
    let end = 0;
    for (let i = 0; i < limits.windows.length; i++) {
      const q = this.source.windowQuota(keyId, limits, i);
      if (q === undefined) continue;
      const r = Math.min(limits.windows[i]!.limit, q.left);
      if (r < remaining) {
        at = i;
        remaining = r;
        end = q.end;
      }
    }
    if (at < 0) return undefined;
    return this.info(limits, at, remaining, end - this.clock.now());
  }

  /** The quota after a refusal: the denying window's, nothing left in it. */
  limited(keyId: string, limits: ResolvedLimits, denied: Denied): RateLimitInfo {
    let at = 0;
    for (let i = 0; i < limits.windows.length; i++) if (limits.windows[i]!.name === denied.window) at = i;
    const q = this.source.windowQuota(keyId, limits, at);
    return this.info(limits, at, 0, q !== undefined ? q.end - this.clock.now() : (denied.retryAfterMs ?? 0));
  }

  /** The quota of a key whose buckets are gone (evicted or past): nothing known left, its first window. */
  spent(limits: ResolvedLimits): RateLimitInfo {
    return this.info(limits, 0, 0, 0);
  }

  private info(limits: ResolvedLimits, at: number, remaining: number, resetMs: number): RateLimitInfo {
    const w = limits.windows[at]!;
    return { limit: w.limit, remaining, used: w.limit - remaining, resetMs: Math.max(0, Math.ceil(resetMs)), window: w.name, plan: planOf(limits) };
  }

  /**
   * draft-ietf-httpapi-ratelimit-headers-10, about the caller's own quota only: exact in a fleet of
   * one; in a fleet what this node holds plus what its owner side has not issued (a lower bound).
   */
  headers(res: Response, keyId: string, limits: ResolvedLimits): void {
    const now = this.clock.now();
    const items: string[] = [];
    for (let i = 0; i < limits.windows.length; i++) {
      const q = this.source.windowQuota(keyId, limits, i);
      if (q === undefined) return;
      items.push(`"${limits.windows[i]!.name}";r=${q.left};t=${Math.max(0, Math.ceil((q.end - now) / 1000))}`);
    }
    res.setHeader('RateLimit-Policy', limits.policyHeader);
    res.setHeader('RateLimit', items.join(', '));
  }
}

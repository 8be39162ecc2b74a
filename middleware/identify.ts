import type { Request } from 'express';
import type { Logger } from '../lib/logger.js';
import { ErrorCode, RateLimiterError, WarningCode } from '../lib/errors.js';
import type { KeyHasher } from '../lib/key-id.js';
import { clientAddress, networkRange } from '../lib/network.js';
import type { CompiledPolicy, ResolvedLimits } from '../lib/policy.js';
import type { Identity } from './options.js';

/** Tenant-fairness slot of unauthenticated callers: a class name no tenant id can take (NUL). */
export const ANONYMOUS = '\u0000anonymous';

/** Who a request is charged to: its key id (never the raw key), its tenant and its limits. */
export interface Caller {
  readonly keyId: string;
  readonly tenant: string;
  readonly limits: ResolvedLimits;
}

/** The options that decide who a caller is. */
export interface CallerSettings {
  readonly identify: (req: Request) => Identity | undefined | null | false;
  /** Explicit X-Forwarded-For hops to trust; undefined: Express's `trust proxy` decides (`req.ip`). */
  readonly trustedProxyHops: number | undefined;
  readonly ipv4Prefix: number;
  readonly ipv6Prefix: number;
}

/**
 * Turns a request into the caller it is charged to: the authenticated principal (hashed), or for an
 * unauthenticated caller its network range and route class. The range comes from `req.ip`, so
 * Express's `trust proxy` setting is honoured; `trustedProxyHops`, when set, overrides it.
 */
export class CallerResolver {
  private warned = false;

  constructor(
    private readonly s: CallerSettings,
    private readonly hasher: KeyHasher,
    private readonly logger: Logger,
  ) {}

  resolve(req: Request, routeClass: string, policy: CompiledPolicy): Caller {
    const who = this.s.identify(req);
    if (!who) {
      // An unparseable forwarded address falls back to the socket peer, never to one shared bucket.
      const range = networkRange(this.address(req), this.s.ipv4Prefix, this.s.ipv6Prefix) ?? networkRange(req.socket?.remoteAddress, this.s.ipv4Prefix, this.s.ipv6Prefix);
      return { keyId: this.hasher.hash(`anonymous\u0000${range ?? 'unknown'}\u0000${routeClass}`), tenant: ANONYMOUS, limits: policy.anonymousLimitsFor(routeClass) };
    }
    const principal = identityField(who, 'principal');
    const tenant = identityField(who, 'tenant');
    const keyId = this.hasher.hash(principal);
    return { keyId, tenant, limits: policy.limitsFor(keyId, tenant) };
  }

  /** The address an anonymous caller is known by. */
  private address(req: Request): string | undefined {
    const hops = this.s.trustedProxyHops;
    if (hops !== undefined) return clientAddress(req.socket?.remoteAddress, req.headers['x-forwarded-for'], hops);
    // `trust proxy` off and a forwarded address present: everyone behind that proxy is one caller.
    if (!this.warned && req.headers['x-forwarded-for'] !== undefined && !req.app?.get('trust proxy')) {
      this.warned = true;
      this.logger.warn(
        { code: WarningCode.FORWARDED_UNTRUSTED },
        "X-Forwarded-For is present but trusted by nothing: anonymous callers are keyed by the socket address. Behind a proxy, set app.set('trust proxy', …) or trustedProxyHops; with none, set trustedProxyHops: 0 (logged once)",
      );
    }
    return req.ip ?? req.socket?.remoteAddress;
  }
}

/**
 * A field of what identify() returned: a non-empty string (a finite number is taken as its decimal
 * form, since account ids often are numbers). Anything else is a limiter fault (RL_IDENTITY).
 */
function identityField(who: Identity, field: 'principal' | 'tenant'): string {
  const v: unknown = who[field];
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  if (typeof v !== 'string' || v.length === 0 || v.includes('\u0000')) {
    throw new RateLimiterError(ErrorCode.IDENTITY, `identify() returned an identity whose ${field} is not a non-empty string`);
  }
  return v;
}

import { randomBytes } from 'node:crypto';
import Joi from 'joi';
import type { Request } from 'express';
import type { Logger } from '../lib/logger.js';
import type { Registry } from 'prom-client';
import { secretKeys } from '../bus/codec.js';
import { eventOptionsSchema } from '../bus/event-entry.js';
import type { RedisConnectionOptions } from '../bus/redis-options.js';
import type { Bus } from '../bus/types.js';
import { systemClock, type Clock } from '../lib/clock.js';
import { ConfigError, PolicyError, type Problem } from '../lib/errors.js';
import { KeyHasher, type HashKeyVersion } from '../lib/key-id.js';
import { CompiledPolicy, compilePolicy, type PolicyDoc } from '../lib/policy.js';
import type { SubSecondMode } from '../lib/retry-after.js';
import { joiProblems } from '../lib/validate.js';
import type { OnLimited, SkipFn } from './hooks.js';
import { defaultNodeId } from './instances.js';

/** The authenticated caller as the application's auth layer established it. */
export interface Identity {
  /** The API key or authenticated principal (a number is taken as its decimal form); hashed at once, never stored. */
  readonly principal: string | number;
  /** The caller's tenant (account); used for plan lookup and tenant fairness, never shown to others. */
  readonly tenant: string | number;
}

/** Options of `rateLimiter()`. */
export interface RateLimiterOptions {
  /** Plans, per-key overrides, route classes and capacity; a document (validated here) or a compiled policy. */
  policy: PolicyDoc | CompiledPolicy;
  /**
   * Returns the caller the auth layer authenticated, or a falsy value (undefined, null, false) for an
   * unauthenticated caller, who is limited in the anonymous class (network range + route class).
   */
  identify: (req: Request) => Identity | undefined | null | false;
  /** Route class of a request: a name or a function. @default 'default' */
  routeClass?: string | ((req: Request) => string);
  /**
   * Secrets for key ids (HMAC). Required when the bus is shared between nodes, since every node must
   * derive the same key id. @default a random secret for this process (standalone only)
   */
  keyHash?: { versions: HashKeyVersion[]; current?: string };
  /**
   * Name of this node in reports, logs, health and the `node` label of its metrics; unique among the
   * open limiters of a process (a second limiter with a taken one is a ConfigError), and across a fleet.
   * @default `${hostname}-${pid}`, then `${hostname}-${pid}-2`, `-3`… for further limiters in the process
   */
  nodeId?: string;
  /** Bus between nodes and shard owners. @default an in-memory bus: a fleet of one */
  bus?: Bus;
  /**
   * Join a fleet over Redis (Streams, pub/sub, one Lua script) instead: the limiter creates the bus,
   * waits for it in `ready()`, and closes it in `close()`. Exclusive with `bus`; needs `keyHash`.
   */
  redis?: RedisConnectionOptions;
  /** Number of key shards (one bus stream each). @default 64 */
  shards?: number;
  /** Bucket map cap per node. @default 50000 */
  maxBuckets?: number;
  /** Reconciliation round T in ms. @default 25 */
  roundMs?: number;
  /** Hard deadline of the fast path in ms. @default 1 */
  fastPathDeadlineMs?: number;
  /** Headroom h on advertised demand. @default 1.25 */
  headroom?: number;
  /** Reserve R as a fraction of each window's allowance. @default 0.02 */
  reserveRatio?: number;
  /** Owner silence (ms) after which the node is degraded. @default 30000 */
  degradedAfterMs?: number;
  /** Retry-After under one second: `zero` (plus X-RateLimit-Reset-Ms) or `round-up` to 1. @default 'zero' */
  subSecondRetryAfter?: SubSecondMode;
  /** Send draft-10 `RateLimit` / `RateLimit-Policy` headers about the caller's own quota. @default false */
  rateLimitHeaders?: boolean;
  /**
   * Proxies in front of this app whose X-Forwarded-For entries are trusted for the anonymous class;
   * overrides Express's `trust proxy`. @default unset: the anonymous class is keyed by `req.ip`, so
   * Express's `trust proxy` setting decides
   */
  trustedProxyHops?: number;
  /** Prefix length an anonymous IPv4 caller is keyed by (8–32). @default 32 (one address) */
  ipv4Prefix?: number;
  /** Prefix length an anonymous IPv6 caller is keyed by (32–128). @default 56 (a typical customer site) */
  ipv6Prefix?: number;
  /**
   * Requests it answers truthy are let through unlimited: neither counted nor refused (`stats.skipped`).
   * Synchronous, or a Promise (awaited only when one is returned). If it throws, a limiter fault.
   * @default none
   */
  skip?: SkipFn;
  /**
   * Writes the 429 for a request refused for its own quota, in place of the problem+json body; told
   * only the caller's own quota (`LimitedInfo`). @default the RFC 9457 problem response
   */
  onLimited?: OnLimited;
  /**
   * Property of `req` that receives the caller's own quota (`RateLimitInfo`) for the route handler;
   * `false` sets none. Offered by an accessor on the request's prototype, not as its own property
   * (see the README). @default 'rateLimit'
   */
  requestPropertyName?: string | false;
  /**
   * A prom-client registry to register this limiter's metrics into as well (the app's, so one
   * `/metrics` serves both); `limiter.metrics` is then that registry. @default a registry of its own
   */
  registry?: Registry;
  /** A pino logger, or any with pino's debug/info/warn/error(fields, msg). @default pino at LOG_LEVEL (info) on stdout, or the same JSON lines without pino installed */
  logger?: Logger;
  /** Time source. @default the system clock */
  clock?: Clock;
}

/** Options after validation: every default filled in, frozen. */
export interface Config {
  readonly policy: CompiledPolicy;
  readonly identify: (req: Request) => Identity | undefined | null | false;
  readonly routeClass: string | ((req: Request) => string);
  readonly keyHash: { readonly versions: readonly HashKeyVersion[]; readonly current?: string };
  readonly nodeId: string;
  readonly bus: Bus | undefined;
  readonly redis: RedisConnectionOptions | undefined;
  readonly shards: number;
  readonly maxBuckets: number;
  readonly roundMs: number;
  readonly fastPathDeadlineMs: number;
  readonly headroom: number;
  readonly reserveRatio: number;
  readonly degradedAfterMs: number;
  readonly subSecondRetryAfter: SubSecondMode;
  readonly rateLimitHeaders: boolean;
  readonly trustedProxyHops: number | undefined;
  readonly ipv4Prefix: number;
  readonly ipv6Prefix: number;
  readonly skip: SkipFn | undefined;
  readonly onLimited: OnLimited | undefined;
  readonly requestPropertyName: string | false;
  readonly registry: Registry | undefined;
  readonly logger: Logger | undefined;
  readonly clock: Clock;
}

/** A versioned secret: the key hash's, the bus's, the policy store's. */
const secretSchema = Joi.object({
  versions: Joi.array()
    .items(Joi.object({ version: Joi.string().required(), secret: Joi.alternatives(Joi.string(), Joi.binary()).required() }))
    .min(1)
    .required(),
  current: Joi.string(),
});

const schema = Joi.object({
  policy: Joi.object().required(),
  identify: Joi.func().required(),
  routeClass: Joi.alternatives(Joi.string().pattern(/^[A-Za-z0-9_.-]{1,64}$/), Joi.func()).default('default'),
  keyHash: secretSchema,
  nodeId: Joi.string().pattern(/^[A-Za-z0-9_.:-]{1,128}$/),
  bus: Joi.object(),
  redis: Joi.object({
    url: Joi.string().uri({ scheme: ['redis', 'rediss'] }),
    clusterNodes: Joi.array()
      .items(Joi.string().uri({ scheme: ['redis', 'rediss'] }))
      .min(1),
    username: Joi.string(),
    password: Joi.string(),
    tls: Joi.alternatives(Joi.boolean(), Joi.object()),
    prefix: Joi.string().pattern(/^[A-Za-z0-9_.:-]{1,64}$/),
    busSecret: secretSchema.required(),
    policySecret: secretSchema,
    snapshotMs: Joi.number().integer().min(100).max(60_000),
    maxStreamLength: Joi.number().integer().min(1000),
    fastPath: Joi.object({
      host: Joi.string().hostname(),
      port: Joi.number().integer().min(0).max(65535),
      advertise: Joi.string().pattern(/^[A-Za-z0-9_.:-]{1,128}$/),
    }).allow(false),
    events: eventOptionsSchema,
  }).oxor('url', 'clusterNodes'),
  shards: Joi.number().integer().min(1).max(4096).default(64),
  maxBuckets: Joi.number().integer().min(16).default(50_000),
  roundMs: Joi.number().integer().min(5).max(1000).default(25),
  fastPathDeadlineMs: Joi.number().min(0.1).max(100).default(1),
  headroom: Joi.number().min(1).max(10).default(1.25),
  reserveRatio: Joi.number().min(0).max(0.2).default(0.02),
  degradedAfterMs: Joi.number().integer().min(100).default(30_000),
  subSecondRetryAfter: Joi.string().valid('zero', 'round-up').default('zero'),
  rateLimitHeaders: Joi.boolean().default(false),
  trustedProxyHops: Joi.number().integer().min(0).max(16),
  ipv4Prefix: Joi.number().integer().min(8).max(32).default(32),
  ipv6Prefix: Joi.number().integer().min(32).max(128).default(56),
  skip: Joi.func(),
  onLimited: Joi.func().maxArity(4),
  requestPropertyName: Joi.alternatives(
    Joi.string()
      .pattern(/^[A-Za-z_$][A-Za-z0-9_$]{0,63}$/)
      .invalid('__proto__', 'constructor'),
    Joi.valid(false),
  ).default('rateLimit'),
  registry: Joi.object().custom((v: { registerMetric?: unknown; getSingleMetric?: unknown }) => {
    // Duck-typed: the app's prom-client may be another copy than ours.
    if (typeof v.registerMetric !== 'function' || typeof v.getSingleMetric !== 'function') throw new Error('must be a prom-client Registry');
    return v;
  }),
  logger: Joi.object(),
  clock: Joi.object({ now: Joi.func().required(), monotonic: Joi.func().required() }).unknown(true),
}).oxor('bus', 'redis');

/**
 * Validates options once into a frozen `Config`. Throws a `ConfigError` listing every problem,
 * including those of the policy document (paths prefixed `policy.`).
 */
export function parseOptions(options: unknown): Config {
  const { error, value } = schema.validate(options ?? {}, { abortEarly: false });
  const problems: Problem[] = error ? joiProblems(error) : [];
  let policy: CompiledPolicy | undefined;
  const rawPolicy = (options as { policy?: unknown } | undefined)?.policy;
  if (rawPolicy instanceof CompiledPolicy) policy = rawPolicy;
  else if (rawPolicy !== undefined) {
    try {
      policy = compilePolicy(rawPolicy);
    } catch (err) {
      if (!(err instanceof PolicyError)) throw err;
      problems.push(...err.problems.map((p) => ({ path: `policy.${p.path}`, message: p.message })));
    }
  }
  if ((value?.bus !== undefined || value?.redis !== undefined) && value?.keyHash === undefined) {
    problems.push({ path: 'keyHash', message: 'is required with a shared bus: every node must derive the same key ids' });
  }
  const redis = (options as { redis?: Record<'busSecret' | 'policySecret', { versions?: unknown; current?: string } | undefined> } | undefined)?.redis;
  for (const name of ['busSecret', 'policySecret'] as const) {
    const secret = redis?.[name];
    if (!Array.isArray(secret?.versions) || error?.details.some((d) => d.path[0] === 'redis')) continue;
    try {
      secretKeys(secret.versions as [], secret.current, name);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(...err.problems.map((p) => ({ path: `redis.${p.path}`, message: p.message })));
    }
  }
  const keyHash = (options as { keyHash?: { versions?: unknown; current?: string } } | undefined)?.keyHash;
  if (Array.isArray(keyHash?.versions)) {
    try {
      new KeyHasher(keyHash.versions as HashKeyVersion[], keyHash.current);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(...err.problems);
    }
  }
  if (problems.length || policy === undefined) throw new ConfigError(problems);
  const o = options as RateLimiterOptions;
  return Object.freeze({
    ...value,
    policy,
    // joi copies objects it validates; services and callbacks are kept as the caller passed them.
    identify: o.identify,
    routeClass: o.routeClass ?? value.routeClass,
    bus: o.bus,
    redis: o.redis,
    logger: o.logger,
    skip: o.skip,
    onLimited: o.onLimited,
    registry: o.registry,
    nodeId: value.nodeId ?? defaultNodeId(),
    clock: o.clock ?? systemClock,
    keyHash: o.keyHash ?? { versions: [{ version: 'v1', secret: randomBytes(32) }] },
  }) as Config;
}

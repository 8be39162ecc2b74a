import { randomUUID } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from '../lib/logger.js';
import { defaultLogger } from './default-logger.js';
import type { PolicyFeed } from '../bus/policy-feed.js';
import { EventLog } from '../bus/events.js';
import { LoopStalls } from '../bus/loop-stall.js';
import { connect } from '../bus/redis-connection.js';
import { RedisBus } from '../bus/redis.js';
import { AdmissionCapacity, CapacityVerdict } from '../lib/capacity.js';
import { Catalog } from '../lib/catalog.js';
import { ErrorCode, PolicyError, RateLimiterError } from '../lib/errors.js';
import { compilePolicy, CompiledPolicy, type PolicyDoc } from '../lib/policy.js';
import { KeyHasher } from '../lib/key-id.js';
import type { Acquired, Denied } from '../lib/lease-node.js';
import { LocalCounters } from '../lib/local-counters.js';
import type { Enforcer } from '../lib/node-contract.js';
import type { Bus } from '../bus/types.js';
import { joinFleet } from '../bus/member.js';
import { retryHeaders } from '../lib/retry-after.js';
import { callOnLimited, withSkip } from './hooks.js';
import { CallerResolver, type Caller } from './identify.js';
import { claimNodeId } from './instances.js';
import { followStore } from './live-policy.js';
import { parseOptions, type RateLimiterOptions } from './options.js';
import { LimiterMetrics } from './metrics.js';
import { fleetQuota, QuotaReader } from './quota.js';
import { correlationIdOf, denialHeaders, sendProblem } from './responses.js';
import type { LimiterStats, RateLimiterMiddleware } from './types.js';

export type { LimiterStats, RateLimiterMiddleware } from './types.js';

/**
 * Per-API-key rate limiting for Express, mounted after authentication:
 * `app.use(rateLimiter({ policy, identify }))`. The decision is a memory read of leased credit; the
 * owner of each key shard is asked when the credit held cannot cover a request (1 ms deadline; keys a
 * node sees rarely hold none, so each of their requests asks). Any fault inside fails open for that request, unless its route class is fail-closed.
 */
export function rateLimiter(options: RateLimiterOptions): RateLimiterMiddleware {
  const cfg = parseOptions(options);
  const clock = cfg.clock;
  const logger: Logger = cfg.logger ?? defaultLogger('fleet-ratelimit');
  const hasher = new KeyHasher(cfg.keyHash.versions, cfg.keyHash.current);
  // Checked before anything is started: a taken node id, a registry holding other metrics of our names.
  const releaseNodeId = claimNodeId(cfg.nodeId);
  let metrics: LimiterMetrics;
  try {
    metrics = new LimiterMetrics(cfg.registry);
  } catch (err) {
    releaseNodeId();
    throw err;
  }
  const ownBus = cfg.bus === undefined;
  // This process's own stalls: exported, and not taken for owner silence.
  const loop = LoopStalls.started(clock);
  // A fleet of one (no Redis, no bus given) decides against counts of its own: nothing to lease.
  const bus: Bus | undefined =
    cfg.bus ?? (cfg.redis !== undefined ? new RedisBus({ ...cfg.redis, shards: cfg.shards, roundMs: cfg.roundMs, degradedAfterMs: cfg.degradedAfterMs, clock, logger, loop }) : undefined);
  const { nodeId, shards, maxBuckets, roundMs, fastPathDeadlineMs, headroom, reserveRatio, degradedAfterMs } = cfg;
  const member = { nodeId, nodeEpoch: randomUUID(), shards, maxBuckets, roundMs, fastPathDeadlineMs, headroom, reserveRatio, degradedAfterMs };
  const fleet = bus === undefined ? undefined : joinFleet(bus, member, clock);
  const local = fleet === undefined ? new LocalCounters(clock) : undefined;
  const node: Enforcer = fleet?.node ?? local!;
  const owner = fleet?.owner;
  const leases = (now: number): { ledgers: number; committed: number; allowance: number } => (owner ?? local!).totals(now);
  const capacity = new AdmissionCapacity(clock);
  const callers = new CallerResolver(cfg, hasher, logger);
  const quota = new QuotaReader(fleet === undefined ? local! : fleetQuota(fleet.node, fleet.owner), clock);
  const stats: LimiterStats = { admitted: 0, quotaDenied: 0, capacityDenied: 0, failOpen: 0, failClosed: 0, bypassed: 0, skipped: 0 };
  let policy = cfg.policy;
  let enforcing = true;
  // With Redis, every 429 and 503 is recorded as a limit event, written off the request path.
  const eventsRedis = cfg.redis === undefined ? undefined : connect(cfg.redis, { commandTimeout: 2000 });
  eventsRedis?.on('error', () => undefined); // a lost flush is counted in events.dropped
  const events = eventsRedis === undefined ? undefined : new EventLog(eventsRedis, cfg.redis!.prefix);
  const flushTimer = events === undefined ? undefined : setInterval(() => void events.flush(), 250);
  flushTimer?.unref();
  // With Redis, the live policy and the kill switch come from the store (P4).
  const feed: PolicyFeed | undefined =
    cfg.redis === undefined
      ? undefined
      : followStore(cfg.redis, { setPolicy: (p) => (policy = p), get enforcing() { return enforcing; }, setEnforcing: (on) => (enforcing = on) }, logger);
  metrics.attach({ nodeId, stats, node, owner, bus, leases, loop, ...(events ? { events } : {}), policyRejections: () => feed?.rejected });

  let sweepAt = 0;
  const timer = setInterval(() => {
    try {
      node.endRound();
      const now = clock.now();
      if (now >= sweepAt) {
        owner?.sweep(now);
        sweepAt = now + 1000;
        if (bus instanceof RedisBus) bus.publishStatus(status(now));
      }
    } catch (err) {
      logger.error({ err }, 'reconciliation round failed');
    }
  }, cfg.roundMs);
  timer.unref();

  /** What the admin API's health view shows of this node (A2). */
  function status(now: number): object {
    return { degraded: node.degraded, foldAgeMs: node.longestSilenceMs(), enforcing, policyVersion: policy.version, buckets: node.buckets.size, leases: leases(now), eventsDropped: events?.dropped ?? 0 };
  }

  const fixedClass = cfg.routeClass;
  const routeClassOf: (req: Request) => string = typeof fixedClass === 'string' ? () => fixedClass : fixedClass;
  const property = cfg.requestPropertyName;

  function limit(req: Request, res: Response, next: NextFunction): void {
    if (!enforcing) {
      // The break-glass kill switch: enforcement is off fleet-wide (the backstop still binds).
      stats.bypassed++;
      next();
      return;
    }
    const started = metrics.start();
    let keyId: string | undefined;
    let routeClass = 'default';
    try {
      routeClass = routeClassOf(req);
      const caller = callers.resolve(req, routeClass, policy);
      keyId = caller.keyId;
      const cap = policy.doc.capacity;
      if (cap !== undefined) {
        const verdict = capacity.check(caller.tenant, cap.nodeAdmissionsPerSecond, policy.tenantShare(caller.tenant) as number);
        if (verdict !== CapacityVerdict.Ok) {
          stats.capacityDenied++;
          metrics.decided(started);
          const entry = verdict === CapacityVerdict.NodeFull ? Catalog.nodeCapacity : Catalog.tenantShare;
          const correlationId = correlationIdOf(req);
          logger.debug({ keyId, correlationId, routeClass, code: entry.code }, 'capacity denied');
          events?.record({ at: clock.now(), keyId, class: 'capacity', status: 503, window: '', routeClass, correlationId, node: nodeId });
          commonHeaders(res);
          sendProblem(res, entry, correlationId);
          return;
        }
      }
      const result = node.acquire(keyId, caller.limits);
      if (result instanceof Promise) {
        const since = Number.isNaN(started) ? performance.now() : started;
        result.then(
          (r) => {
            metrics.waited(since);
            decide(req, res, next, r, caller, routeClass);
          },
          (err: unknown) => fault(req, res, next, err, caller.keyId, routeClass),
        );
      } else {
        metrics.decided(started);
        decide(req, res, next, result, caller, routeClass);
      }
    } catch (err) {
      metrics.decided(started);
      fault(req, res, next, err, keyId, routeClass);
    }
  }

  function decide(req: Request, res: Response, next: NextFunction, result: Acquired, caller: Caller, routeClass: string): void {
    const { keyId, limits } = caller;
    try {
      commonHeaders(res);
      if (cfg.rateLimitHeaders) quota.headers(res, keyId, limits);
      if (result.admitted) {
        stats.admitted++;
        if (policy.doc.capacity !== undefined) capacity.record(caller.tenant);
        if (property !== false) (req as unknown as Record<string, unknown>)[property] = quota.view(keyId, limits);
        next();
        return;
      }
      if (result.unavailable) {
        // Degraded and out of credit (F5): the limiter cannot decide; fail open (or closed) and let
        // the backstop bind. What fails open is charged to the windows, reported once owners are back.
        fault(req, res, next, new RateLimiterError(ErrorCode.DEGRADED, 'degraded: no owner contact and no credit held'), keyId, routeClass, () => node.charge(keyId, limits));
        return;
      }
      limited(req, res, next, result, caller, routeClass);
    } catch (err) {
      fault(req, res, next, err, keyId, routeClass);
    }
  }

  /** A refusal for the caller's own quota: 429, written by `onLimited` when given. */
  function limited(req: Request, res: Response, next: NextFunction, result: Denied, caller: Caller, routeClass: string): void {
    const keyId = caller.keyId;
    stats.quotaDenied++;
    const correlationId = correlationIdOf(req);
    logger.debug({ keyId, correlationId, routeClass, window: result.window, code: Catalog.quotaExceeded.code }, 'rate limited');
    events?.record({ at: clock.now(), keyId, class: 'quota', status: 429, window: result.window, routeClass, correlationId, node: nodeId });
    const retry = retryHeaders(result.retryAfterMs, cfg.subSecondRetryAfter);
    const send = (): void => sendProblem(res, Catalog.quotaExceeded, correlationId, result.window, retry);
    const info = property !== false || cfg.onLimited !== undefined ? quota.limited(keyId, caller.limits, result) : undefined;
    if (property !== false) (req as unknown as Record<string, unknown>)[property] = info;
    if (cfg.onLimited === undefined) return send();
    denialHeaders(res, Catalog.quotaExceeded, correlationId, retry);
    callOnLimited(cfg.onLimited, req, res, next, { ...info!, retryAfterMs: result.retryAfterMs, correlationId }, send, logger);
  }

  /** A limiter fault: 503 on a fail-closed route, else admitted (`admitted` runs first, if given). */
  function fault(req: Request, res: Response, next: NextFunction, err: unknown, keyId: string | undefined, routeClass: string, admitted?: () => void): void {
    const correlationId = correlationIdOf(req);
    if (!res.headersSent) commonHeaders(res);
    let closed = false;
    try {
      closed = policy.failClosed(routeClass);
    } catch {
      // An unreadable policy leaves the default: fail open.
    }
    if (closed) {
      stats.failClosed++;
      logger.error({ err, keyId, correlationId, routeClass }, 'limiter fault on a fail-closed route: 503');
      if (keyId !== undefined) events?.record({ at: clock.now(), keyId, class: 'fail_closed', status: 503, window: '', routeClass, correlationId, node: nodeId });
      if (!res.headersSent) sendProblem(res, Catalog.limiterUnavailable, correlationId);
      return;
    }
    stats.failOpen++;
    logger.warn({ err, keyId, correlationId, routeClass }, 'limiter fault: request admitted (fail-open)');
    try {
      admitted?.();
    } catch (chargeErr) {
      logger.error({ err: chargeErr, keyId, correlationId }, 'fail-open admission not charged to its window');
    }
    next();
  }

  function commonHeaders(res: Response): void {
    if (node.degraded) res.setHeader('X-RateLimit-Degraded', 'true');
  }

  /** A `skip` that threw: a fault on the request's route class (the default one if that throws too). */
  function skipFailed(req: Request, res: Response, next: NextFunction, err: unknown): void {
    let routeClass = 'default';
    try {
      routeClass = routeClassOf(req);
    } catch {
      // fault() decides on the default class.
    }
    fault(req, res, next, err, undefined, routeClass);
  }

  const skipped = (_req: Request, _res: Response, next: NextFunction): void => {
    stats.skipped++;
    next();
  };
  const middleware = withSkip(cfg.skip, limit, skipped, skipFailed) as RateLimiterMiddleware;
  let closing: Promise<void> | undefined;
  Object.assign(middleware, {
    node,
    hasher,
    stats,
    events,
    nodeId,
    metrics: metrics.registry,
    bus,
    ready: () => bus?.ready?.() ?? Promise.resolve(),
    policy: () => policy,
    updatePolicy(doc: PolicyDoc | CompiledPolicy): void {
      const next = doc instanceof CompiledPolicy ? doc : compilePolicy(doc);
      if (next.version <= policy.version) {
        throw new PolicyError([{ path: 'version', message: `must be above the current version ${policy.version}, got ${next.version}` }], 'policy not applied');
      }
      policy = next;
      logger.info({ version: next.version }, 'policy updated');
    },
    close(): Promise<void> {
      closing ??= (async () => {
        clearInterval(timer);
        clearInterval(flushTimer);
        loop.stop();
        metrics.close();
        try {
          await feed?.close();
          await events?.flush();
          await eventsRedis?.quit().catch(() => eventsRedis.disconnect());
          if (ownBus) await bus?.close();
        } finally {
          releaseNodeId();
        }
      })();
      return closing;
    },
  });
  Object.defineProperty(middleware, 'enforcing', { get: () => enforcing, enumerable: true });
  return middleware;
}

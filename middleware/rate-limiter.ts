import type { NextFunction, Request, Response } from 'express';
import type { Logger } from '../lib/logger.js';
import { defaultLogger } from './default-logger.js';
import { AdmissionCapacity, CapacityVerdict } from '../lib/capacity.js';
import { Catalog } from '../lib/catalog.js';
import { ErrorCode, PolicyError, RateLimiterError } from '../lib/errors.js';
import { compilePolicy, CompiledPolicy, type PolicyDoc, type ResolvedLimits } from '../lib/policy.js';
import { KeyHasher } from '../lib/key-id.js';
import type { Acquired, Denied } from '../lib/lease-node.js';
import { retryHeaders } from '../lib/retry-after.js';
import { runningWindowEndMs } from '../lib/window.js';
import { callOnLimited, withSkip } from './hooks.js';
import { ANONYMOUS, CallerResolver, type Caller } from './identify.js';
import { claimNodeId } from './instances.js';
import { parseOptions, type RateLimiterOptions } from './options.js';
import { Runtime } from './runtime.js';
import { LimiterMetrics } from './metrics.js';
import { correlationIdOf, denialHeaders, sendProblem } from './responses.js';
import { RequestProperty } from './request-property.js';
import type { LimiterStats, RateLimiterMiddleware } from './types.js';

export type { LimiterStats, RateLimiterMiddleware } from './types.js';

/** Appended to a key id for the counts of the plan run beside its enforced one. */
const DUAL_RUN_SUFFIX = '/dual';

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
  const stats: LimiterStats = { admitted: 0, quotaDenied: 0, capacityDenied: 0, failOpen: 0, failClosed: 0, bypassed: 0, skipped: 0, shadowDenied: 0, dualRunDenied: 0 };
  let policy = cfg.policy;
  let enforcing = true;
  let metrics: LimiterMetrics;
  let runtime: Runtime;
  try {
    metrics = new LimiterMetrics(cfg.registry);
    runtime = new Runtime(cfg, logger, {
      setPolicy: (p) => (policy = p),
      get enforcing() {
        return enforcing;
      },
      setEnforcing: (on) => (enforcing = on),
      get policyVersion() {
        return policy.version;
      },
    });
  } catch (err) {
    releaseNodeId();
    throw err;
  }
  const { node, quota, bus, events, history } = runtime;
  const { nodeId } = cfg;
  const capacity = new AdmissionCapacity(clock);
  const callers = new CallerResolver(cfg, hasher, logger);
  const feed = runtime.feed;
  metrics.attach({ nodeId, stats, node, owner: runtime.owner, bus, leases: (now) => runtime.leases(now), loop: runtime.loop, ...(events ? { events } : {}), policyRejections: () => feed?.rejected });

  const fixedClass = cfg.routeClass;
  const routeClassOf: (req: Request) => string = typeof fixedClass === 'string' ? () => fixedClass : fixedClass;
  const property = cfg.requestPropertyName === false ? undefined : RequestProperty.named(cfg.requestPropertyName);

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
      history?.sightings.note(keyId, caller.tenant === ANONYMOUS ? undefined : caller.tenant, routeClass, caller.limits);
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
      // In shadow mode the caller sees nothing of the limit: no headers to throttle itself by.
      const shadow = limits.shadow || policy.shadowRoute(routeClass);
      if (cfg.rateLimitHeaders && !shadow) quota.headers(res, keyId, limits);
      if (result.admitted) {
        stats.admitted++;
        if (limits.beside !== undefined) dualRun(req, keyId, limits.beside, routeClass);
        if (policy.doc.capacity !== undefined) capacity.record(caller.tenant);
        property?.set(req, quota.view(keyId, limits));
        next();
        return;
      }
      if (result.unavailable) {
        // Degraded and out of credit (F5): the limiter cannot decide; fail open (or closed) and let
        // the backstop bind. What fails open is charged to the windows, reported once owners are back.
        fault(req, res, next, new RateLimiterError(ErrorCode.DEGRADED, 'degraded: no owner contact and no credit held'), keyId, routeClass, () => node.charge(keyId, limits));
        return;
      }
      if (shadow) {
        stats.shadowDenied++;
        recordRefusal(keyId, limits, result.window, 'shadow', routeClass, correlationIdOf(req));
        next();
        return;
      }
      limited(req, res, next, result, caller, routeClass);
    } catch (err) {
      fault(req, res, next, err, keyId, routeClass);
    }
  }

  /**
   * The plan beside the enforced one (a dual run): decided on counts of its own (the key id with a
   * suffix, so its own windows and shard) over the requests the enforced plan admits, without waiting;
   * a refusal is only counted.
   */
  function dualRun(req: Request, keyId: string, beside: ResolvedLimits, routeClass: string): void {
    const counted = (r: Acquired): void => {
      if (r.admitted || r.unavailable) return;
      stats.dualRunDenied++;
      recordRefusal(keyId, beside, r.window, 'dual_run', routeClass, correlationIdOf(req));
    };
    const failed = (err: unknown): void => logger.debug({ err, keyId }, 'dual run not decided');
    // Never a fault of the request the enforced plan decided.
    try {
      const r = node.acquire(`${keyId}${DUAL_RUN_SUFFIX}`, beside);
      if (r instanceof Promise) r.then(counted, failed);
      else counted(r);
    } catch (err) {
      failed(err);
    }
  }

  /**
   * A limit event for a refusal by `window` of `limits` (sent as a 429, or counted only in shadow and
   * dual runs); its aggregate collects the key's refusals until that window ends.
   */
  function recordRefusal(keyId: string, limits: ResolvedLimits, window: string, cls: 'quota' | 'shadow' | 'dual_run', routeClass: string, correlationId: string): void {
    if (events === undefined) return;
    const at = clock.now();
    // A dual run's counts are its own key's: its windows end on that key's phase.
    const subject = cls === 'dual_run' ? `${keyId}${DUAL_RUN_SUFFIX}` : keyId;
    const windowMs = limits.windows.find((w) => w.name === window)?.windowMs;
    const windowEndsAt = windowMs === undefined ? undefined : runningWindowEndMs(subject, at, windowMs);
    events.record({ at, keyId, class: cls, status: cls === 'quota' ? 429 : 200, window, ...(windowEndsAt === undefined ? {} : { windowEndsAt }), routeClass, correlationId, node: nodeId });
  }

  /** A refusal for the caller's own quota: 429, written by `onLimited` when given. */
  function limited(req: Request, res: Response, next: NextFunction, result: Denied, caller: Caller, routeClass: string): void {
    const keyId = caller.keyId;
    stats.quotaDenied++;
    const correlationId = correlationIdOf(req);
    logger.debug({ keyId, correlationId, routeClass, window: result.window, code: Catalog.quotaExceeded.code }, 'rate limited');
    recordRefusal(keyId, caller.limits, result.window, 'quota', routeClass, correlationId);
    const retry = retryHeaders(result.retryAfterMs, cfg.subSecondRetryAfter);
    const send = (): void => sendProblem(res, Catalog.quotaExceeded, correlationId, result.window, retry);
    const info = property !== undefined || cfg.onLimited !== undefined ? quota.limited(keyId, caller.limits, result) : undefined;
    property?.set(req, info);
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
        metrics.close();
        try {
          await runtime.close();
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

import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type { Logger } from 'pino';
import type { RedisConnectionOptions } from '../bus/redis-options.js';
import type { Clock } from '../lib/clock.js';
import type { HashKeyVersion } from '../lib/key-id.js';
import { KeyHasher } from '../lib/key-id.js';
import { backstop } from '../middleware/backstop.js';
import { metricsHandler } from '../middleware/metrics.js';
import type { Identity } from '../middleware/options.js';
import { rateLimiter, type RateLimiterMiddleware } from '../middleware/rate-limiter.js';
import { loadDemoConfig } from './config.js';

/** Inputs of the demo gateway. */
export interface DemoOptions {
  /** Path of the demo configuration file (keys, policy, backstop). */
  configFile: string;
  /** Key-hash secret versions shared by every node of a cluster. */
  keyHash: { versions: HashKeyVersion[]; current?: string };
  logger?: Logger;
  clock?: Clock;
  nodeId?: string;
  /** Adds draft-10 RateLimit headers. */
  rateLimitHeaders?: boolean;
  /** Join a fleet over Redis; without it the gateway is a fleet of one in memory. */
  redis?: RedisConnectionOptions;
  /** Owner silence before degraded mode (F5), ms. */
  degradedAfterMs?: number;
  /** The fast path's deadline, ms. */
  fastPathDeadlineMs?: number;
}

/** Route class of a demo request: `/public/*` anonymous, `/api/payments*` fail-closed, else default. */
export function demoRouteClass(req: Request): string {
  if (req.path.startsWith('/public')) return 'public';
  if (req.path.startsWith('/api/payments')) return 'payments';
  return 'default';
}

/**
 * The demo gateway: health check, backstop, a toy auth layer (x-api-key against the demo key table,
 * 401 for unknown keys before the limiter), the limiter, and JSON routes under /api and /public.
 */
export function createDemoApp(opts: DemoOptions): { app: Express; limiter: RateLimiterMiddleware } {
  const hasher = new KeyHasher(opts.keyHash.versions, opts.keyHash.current);
  const config = loadDemoConfig(opts.configFile, hasher);
  const identities = new WeakMap<Request, Identity>();

  const limiter = rateLimiter({
    policy: config.policy,
    identify: (req) => identities.get(req),
    routeClass: demoRouteClass,
    keyHash: opts.keyHash,
    rateLimitHeaders: opts.rateLimitHeaders ?? false,
    ...(opts.logger ? { logger: opts.logger } : {}),
    ...(opts.clock ? { clock: opts.clock } : {}),
    ...(opts.nodeId ? { nodeId: opts.nodeId } : {}),
    ...(opts.redis ? { redis: opts.redis } : {}),
    ...(opts.degradedAfterMs ? { degradedAfterMs: opts.degradedAfterMs } : {}),
    ...(opts.fastPathDeadlineMs !== undefined ? { fastPathDeadlineMs: opts.fastPathDeadlineMs } : {}),
  });

  const app = express();
  app.disable('x-powered-by');
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok', degraded: limiter.node.degraded });
  });
  app.get('/metrics', metricsHandler(limiter.metrics));
  app.use(
    backstop({
      key: (req) => header(req, 'x-api-key'),
      perKeyLimit: config.backstop.perKeyLimit,
      perKeyWindowMs: config.backstop.perKeyWindowMs,
      nodeCeilingPerSecond: config.backstop.nodeCeilingPerSecond,
    }),
  );
  app.use((req: Request, res: Response, next: NextFunction) => {
    if (req.path.startsWith('/public')) return next();
    const raw = header(req, 'x-api-key');
    const key = raw === undefined ? undefined : config.keys.get(raw);
    if (key === undefined) {
      res
        .status(401)
        .type('application/problem+json')
        .send(JSON.stringify({ type: 'about:blank', title: 'Unauthorized', status: 401, error: 'UNAUTHORIZED' }));
      return;
    }
    identities.set(req, { principal: raw as string, tenant: key.tenant });
    next();
  });
  app.use(limiter);
  app.use('/api', (req, res) => {
    res.json({ ok: true, path: `/api${req.path}`, tenant: identities.get(req)?.tenant });
  });
  app.use('/public', (req, res) => {
    res.json({ ok: true, path: `/public${req.path}` });
  });
  app.use((_req, res) => {
    res.status(404).json({ error: 'NOT_FOUND' });
  });
  return { app, limiter };
}

function header(req: Request, name: string): string | undefined {
  const v = req.headers[name];
  return typeof v === 'string' && v.length > 0 ? v : undefined;
}

import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { collectDefaultMetrics, Counter, Registry } from 'prom-client';
import { metricsHandler } from '../middleware/metrics.js';
import { AdminContext, problem, type AdminOptions } from './context.js';
import { healthRouter } from './health-route.js';
import { operationsRouter } from './operations-routes.js';
import { policyRouter } from './policy-routes.js';
import { stageRouter } from './stage-routes.js';
import { uiRouter } from './ui-route.js';

export type { AdminOptions } from './context.js';

/** What body-parser's errors mean to a client: each names what it got wrong. */
const BODY_ERRORS: Readonly<Record<string, { status: number; error: string; title: string; path: string; message: string }>> = {
  'entity.too.large': { status: 413, error: 'BODY_TOO_LARGE', title: 'The body is over 1 MB', path: '(body)', message: 'is over 1 MB' },
  'charset.unsupported': { status: 415, error: 'UNSUPPORTED_MEDIA_TYPE', title: 'The body must be JSON in UTF-8', path: 'content-type', message: 'charset must be utf-8' },
  'encoding.unsupported': {
    status: 415,
    error: 'UNSUPPORTED_MEDIA_TYPE',
    title: 'The body’s content encoding is not supported',
    path: 'content-encoding',
    message: 'must be identity, gzip, deflate or br',
  },
  'request.size.invalid': { status: 400, error: 'INVALID_REQUEST', title: 'The body’s length does not match Content-Length', path: 'content-length', message: 'does not match the body' },
  'request.aborted': { status: 400, error: 'INVALID_REQUEST', title: 'The body was cut short', path: '(body)', message: 'ended early' },
};

/**
 * The admin API (A1) under `/admin/v1`: its own Express app with helmet, joi on every body, query
 * and parameter (400 listing every problem; nothing changes), bearer-token auth (401 without a token,
 * 403 with a wrong one or the wrong role), every change audited with its principal and reason. Raw
 * API keys are hashed on arrival and never stored, logged or echoed.
 */
export function createAdminApp(o: AdminOptions): Express {
  const app = express();
  app.disable('x-powered-by');
  app.use(helmet());
  // Prometheus, unauthenticated like the gateways' (no secrets in it): process metrics and requests.
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({ name: 'fleet_ratelimit_admin_requests_total', help: 'Admin API requests by route and status.', labelNames: ['method', 'route', 'status'], registers: [registry] });
  app.use((req, res, next) => {
    res.on('finish', () => requests.inc({ method: req.method, route: (req.route as { path?: string } | undefined)?.path ?? 'unmatched', status: String(res.statusCode) }));
    next();
  });
  app.get('/metrics', metricsHandler(registry));
  // Liveness for the container healthcheck; says nothing about the fleet (that is /admin/v1/health).
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.use(express.json({ limit: '1mb' }));

  const ctx = new AdminContext(o);
  app.use('/admin/v1', policyRouter(ctx), stageRouter(ctx, o.stageHours), healthRouter(ctx), operationsRouter(ctx));
  app.use('/admin', uiRouter(ctx));
  app.use((_req, res) => problem(res, 404, 'NOT_FOUND', 'No such endpoint'));
  // Errors before a route answers (reading the body, before authentication) as problems, never an
  // HTML page with a stack trace.
  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const e = err as { type?: string; status?: number; message?: string };
    if (e.type === 'entity.parse.failed') return problem(res, 400, 'INVALID_REQUEST', 'The body is not JSON; nothing was changed', { problems: [{ path: '(body)', message: 'is not JSON' }] });
    const body = BODY_ERRORS[e.type ?? ''];
    if (body !== undefined) return problem(res, body.status, body.error, `${body.title}; nothing was changed`, { problems: [{ path: body.path, message: body.message }] });
    o.logger?.error({ err, path: req.path }, 'admin request failed');
    problem(res, 500, 'INTERNAL', 'The request failed');
  });
  return app;
}

import { expect } from 'chai';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import request from 'supertest';
import { FakeClock } from '../../lib/clock.js';
import { ConfigError } from '../../lib/errors.js';
import type { RateLimiterOptions } from '../../middleware/options.js';
import type { LimitedInfo, RateLimitInfo } from '../../middleware/quota.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { captureLogger } from '../support/logs.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';

const RAW_KEY = 'sk_live_hooks_raw_key';
const opened: RateLimiterMiddleware[] = [];

/** Every request is RAW_KEY of tenant acme (plan free: burst 10/s); the route answers with req.rateLimit. */
function appWith(options: Partial<RateLimiterOptions>) {
  const logs = captureLogger();
  const limiter = rateLimiter({
    policy: demoPolicy(),
    identify: () => ({ principal: RAW_KEY, tenant: 'acme' }),
    routeClass: (req: Request) => (req.path.startsWith('/pay') ? 'payments' : 'default'),
    keyHash: TEST_KEY_HASH,
    clock: new FakeClock(1_800_000_000_000),
    logger: logs.logger,
    ...options,
  });
  opened.push(limiter);
  const app = express();
  app.use(limiter);
  app.use((req, res) => {
    res.json({ quota: req.rateLimit ?? null });
  });
  return { app, limiter, logs };
}

async function statuses(app: Express, n: number, headers: Record<string, string> = {}, path = '/x'): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await request(app).get(path).set(headers)).status);
  return out;
}

describe('hooks: skip, onLimited and req.rateLimit', () => {
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((l) => l.close()));
  });

  it('skip: skipped requests are neither counted nor refused; the rest are limited as before', async () => {
    const { app, limiter } = appWith({ skip: (req) => req.headers['x-internal'] === 'yes' });
    expect(await statuses(app, 20, { 'x-internal': 'yes' })).to.deep.equal(Array(20).fill(200));
    expect(await statuses(app, 11)).to.deep.equal([...Array(10).fill(200), 429]);
    expect(await statuses(app, 3, { 'x-internal': 'yes' })).to.deep.equal([200, 200, 200]);
    expect(limiter.stats.skipped).to.equal(23);
    expect(limiter.stats.admitted).to.equal(10);
    expect(limiter.stats.quotaDenied).to.equal(1);
    // A skipped request carries no quota: the limiter never decided it.
    expect((await request(app).get('/x').set('x-internal', 'yes')).body.quota).to.equal(null);
  });

  it('skip may return a Promise: it is awaited, and a rejection is a limiter fault (open, or 503 on a fail-closed route)', async () => {
    const { app, limiter } = appWith({
      skip: async (req) => {
        await new Promise((r) => setImmediate(r));
        if (req.headers['x-internal'] === 'boom') throw new Error('allowlist unreachable');
        return req.headers['x-internal'] === 'yes';
      },
    });
    expect(await statuses(app, 5, { 'x-internal': 'yes' })).to.deep.equal(Array(5).fill(200));
    expect(await statuses(app, 11)).to.deep.equal([...Array(10).fill(200), 429]);
    expect(limiter.stats.skipped).to.equal(5);
    expect(await statuses(app, 1, { 'x-internal': 'boom' })).to.deep.equal([200]);
    expect(limiter.stats.failOpen).to.equal(1);
    const closed = await request(app).get('/pay').set('x-internal', 'boom');
    expect(closed.status).to.equal(503);
    expect(closed.body.error).to.equal('RL_LIMITER_UNAVAILABLE');
    expect(limiter.stats.failClosed).to.equal(1);
  });

  it('sets req.rateLimit to the caller’s own quota in its binding window (read when first touched), without its key', async () => {
    const { app } = appWith({});
    const first = (await request(app).get('/x')).body.quota as RateLimitInfo;
    expect(first).to.deep.include({ limit: 10, remaining: 9, used: 1, window: 'burst', plan: 'free' });
    expect(first.resetMs).to.be.within(0, 1000);
    expect(Object.keys(first).sort()).to.deep.equal(['limit', 'plan', 'remaining', 'resetMs', 'used', 'window']);
    await statuses(app, 2);
    const fourth = (await request(app).get('/x')).body.quota as RateLimitInfo;
    expect(fourth).to.deep.include({ limit: 10, remaining: 6, used: 4 });
    const text = JSON.stringify(fourth);
    expect(text).to.not.include(RAW_KEY);
    expect(text).to.not.include('v1:');
  });

  it('requestPropertyName moves req.rateLimit elsewhere, or (false) sets nothing', async () => {
    const seen: unknown[] = [];
    for (const requestPropertyName of ['quota', false] as const) {
      const limiter = rateLimiter({ policy: demoPolicy(), identify: () => ({ principal: RAW_KEY, tenant: 'acme' }), keyHash: TEST_KEY_HASH, logger: captureLogger().logger, requestPropertyName });
      opened.push(limiter);
      const app = express()
        .use(limiter)
        .use((req, res) => {
          const quota = (req as unknown as { quota?: RateLimitInfo }).quota;
          seen.push([req.rateLimit, quota?.limit, quota?.remaining, quota?.window]);
          res.end();
        });
      await request(app).get('/x').expect(200);
    }
    expect(seen).to.deep.equal([
      [undefined, 10, 9, 'burst'],
      [undefined, undefined, undefined, undefined],
    ]);
  });

  it('onLimited writes the 429, told only the caller’s own quota; status and Retry-After are set for it', async () => {
    const told: LimitedInfo[] = [];
    const { app, limiter } = appWith({
      onLimited: (req, res, _next, info) => {
        told.push(info);
        expect(req.rateLimit).to.deep.include({ remaining: 0, window: 'burst' });
        res.json({ message: `slow down: ${info.limit} per second`, retryInMs: info.retryAfterMs });
      },
    });
    await statuses(app, 10);
    const res = await request(app).get('/x').set('x-request-id', 'req-42');
    expect(res.status).to.equal(429);
    expect(res.body).to.deep.equal({ message: 'slow down: 10 per second', retryInMs: told[0]!.retryAfterMs });
    expect(res.headers['retry-after']).to.equal('0');
    expect(Number(res.headers['x-ratelimit-reset-ms'])).to.be.within(1, 1000);
    expect(res.headers['x-correlation-id']).to.equal('req-42');
    expect(res.headers['cache-control']).to.equal('no-store');
    expect(told).to.have.length(1);
    const info = told[0]!;
    expect(info).to.deep.include({ limit: 10, remaining: 0, used: 10, window: 'burst', plan: 'free', correlationId: 'req-42' });
    expect(info.retryAfterMs).to.be.within(1, 1000);
    expect(Object.keys(info).sort()).to.deep.equal(['correlationId', 'limit', 'plan', 'remaining', 'resetMs', 'retryAfterMs', 'used', 'window']);
    expect(JSON.stringify(info)).to.not.include(RAW_KEY);
    expect(JSON.stringify(info)).to.not.include('v1:');
    expect(limiter.stats.quotaDenied).to.equal(1);
  });

  it('an onLimited that throws or rejects: the default problem response is sent and the failure logged', async () => {
    for (const onLimited of [
      () => {
        throw new Error('template missing');
      },
      async (_req: Request, _res: Response, _next: NextFunction) => {
        await new Promise((r) => setImmediate(r));
        throw new Error('template missing');
      },
    ]) {
      const { app, logs } = appWith({ onLimited });
      await statuses(app, 10);
      const res = await request(app).get('/x');
      expect(res.status).to.equal(429);
      expect(res.headers['content-type']).to.match(/application\/problem\+json/);
      expect(res.body.error).to.equal('RL_QUOTA_EXCEEDED');
      expect(logs.lines.filter((l) => l.msg === 'onLimited failed: the default 429 response is sent')).to.have.length(1);
      await Promise.all(opened.splice(0).map((l) => l.close()));
    }
  });

  it('rejects hooks of the wrong type, naming each option', () => {
    try {
      rateLimiter({ policy: demoPolicy(), identify: () => undefined, skip: true, onLimited: 'json', requestPropertyName: '1st', registry: {} } as unknown as RateLimiterOptions);
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as ConfigError).code).to.equal('RL_CONFIG');
      expect((err as ConfigError).problems.map((p) => p.path)).to.have.members(['skip', 'onLimited', 'requestPropertyName', 'registry']);
    }
  });
});

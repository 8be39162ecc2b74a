import { expect } from 'chai';
import express, { type Request } from 'express';
import request from 'supertest';
import { ConfigError } from '../../lib/errors.js';
import { backstop, type BackstopOptions } from '../../middleware/backstop.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { captureLogger } from '../support/logs.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';

describe('backstop (F6): a floor that survives the limiter', () => {
  let limiter: RateLimiterMiddleware;
  let now: number;

  function app(opts: Partial<BackstopOptions>) {
    now = 1_800_000_000_400;
    // A limiter that throws on every request, so it always fails open.
    limiter = rateLimiter({
      policy: demoPolicy(),
      identify: () => {
        throw new Error('limiter crash loop');
      },
      keyHash: TEST_KEY_HASH,
      logger: captureLogger().logger,
    });
    const a = express();
    a.use(backstop({ key: (req: Request) => req.headers['x-api-key'] as string | undefined, perKeyLimit: 3, nodeCeilingPerSecond: 100, now: () => now, ...opts }));
    a.use(limiter);
    a.use((_req, res) => {
      res.json({ ok: true });
    });
    return a;
  }

  afterEach(() => limiter.close());

  it('caps a key even though the limiter admits everything (fail-open)', async () => {
    const a = app({});
    const codes: number[] = [];
    for (let i = 0; i < 5; i++) codes.push((await request(a).get('/').set('x-api-key', 'k1')).status);
    expect(codes).to.deep.equal([200, 200, 200, 429, 429]);
    expect(limiter.stats.failOpen).to.equal(3);
    const res = await request(a).get('/').set('x-api-key', 'k1');
    expect(JSON.parse(res.text).error).to.equal('RL_BACKSTOP_KEY');
    expect(res.headers['retry-after']).to.equal('0');
    expect(Number(res.headers['x-ratelimit-reset-ms'])).to.be.within(1, 1000);
    expect(res.text).to.not.include('k1');
    // Another key is unaffected; the next window resets the floor.
    expect((await request(a).get('/').set('x-api-key', 'k2')).status).to.equal(200);
    now += 1000;
    expect((await request(a).get('/').set('x-api-key', 'k1')).status).to.equal(200);
  });

  it('enforces the aggregate node ceiling across keys', async () => {
    const a = app({ perKeyLimit: 100, nodeCeilingPerSecond: 4 });
    const codes: number[] = [];
    for (let i = 0; i < 6; i++) codes.push((await request(a).get('/').set('x-api-key', `key-${i}`)).status);
    expect(codes).to.deep.equal([200, 200, 200, 200, 503, 503]);
    const res = await request(a).get('/').set('x-api-key', 'key-x');
    expect(JSON.parse(res.text).error).to.equal('RL_BACKSTOP_CEILING');
    expect(res.headers['retry-after']).to.equal(undefined);
    now += 1000;
    expect((await request(a).get('/').set('x-api-key', 'key-9')).status).to.equal(200);
  });

  it('stops tracking new keys past its cap, so junk keys cannot grow memory', async () => {
    const a = app({ perKeyLimit: 1, maxTrackedKeys: 2 });
    for (const k of ['a', 'b', 'c', 'c', 'c']) await request(a).get('/').set('x-api-key', k);
    expect((await request(a).get('/').set('x-api-key', 'a')).status).to.equal(429);
    expect((await request(a).get('/').set('x-api-key', 'c')).status).to.equal(200); // untracked: only the ceiling holds it
  });

  it('rejects bad options naming every field', () => {
    try {
      backstop({ key: 'x', perKeyLimit: 0 } as unknown as BackstopOptions);
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as ConfigError).problems.map((p) => p.path)).to.have.members(['key', 'perKeyLimit', 'nodeCeilingPerSecond']);
    }
  });
});

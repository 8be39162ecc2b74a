import { expect } from 'chai';
import express, { type Express } from 'express';
import request from 'supertest';
import { ConfigError } from '../../lib/errors.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { captureLogger } from '../support/logs.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { BUS_SECRET, fleetSuite, until, windowLeftMs } from '../support/redis-members.js';

const HOUR = 3_600_000;

describe('two Redis-backed limiters in one process (real redis-server)', function () {
  this.timeout(60_000);
  const ctx = fleetSuite('two');
  const opened: RateLimiterMiddleware[] = [];
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((l) => l.close()));
  });

  /** A limiter with default options but for the fleet: no nodeId given. */
  function limiter(extra: { nodeId?: string } = {}): RateLimiterMiddleware {
    const policy = demoPolicy({ plans: { ...demoPolicy().plans, free: { windows: [{ name: 'hourly', limit: 20, windowMs: HOUR }] } } });
    const l = rateLimiter({
      policy,
      identify: (req) => ({ principal: String(req.headers['x-key']), tenant: 'acme' }),
      keyHash: TEST_KEY_HASH,
      logger: captureLogger().logger,
      redis: { url: ctx.redis.url, prefix: ctx.prefix, busSecret: BUS_SECRET },
      shards: 8,
      ...extra,
    });
    opened.push(l);
    return l;
  }

  const appOf = (l: RateLimiterMiddleware): Express =>
    express()
      .use(l)
      .use((_req, res) => {
        res.json({ ok: true });
      });

  it('with default options and one prefix: distinct node ids, both ready, one allowance shared and never exceeded', async () => {
    const a = limiter();
    const b = limiter();
    expect(a.nodeId).to.not.equal(b.nodeId);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        Promise.all([a.ready(), b.ready()]),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error('ready() did not settle within 20 s')), 20_000);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
    await until(() => a.bus!.fleetSize() === 2 && b.bus!.fleetSize() === 2, 'each sees a fleet of two', 10_000);
    // A key with most of its hour ahead, so every request counts in one window.
    let key = 'sk_two_limiters_0';
    for (let i = 1; windowLeftMs(a.hasher.hash(key), HOUR) < 5 * 60_000; i++) key = `sk_two_limiters_${i}`;
    const apps = [appOf(a), appOf(b)];
    const codes: number[] = [];
    for (let i = 0; i < 80; i++)
      codes.push(
        (
          await request(apps[i % 2]!)
            .get('/x')
            .set('x-key', key)
        ).status,
      );
    const admitted = codes.filter((c) => c === 200).length;
    expect(admitted, codes.join()).to.equal(20);
    expect(a.stats.admitted + b.stats.admitted).to.equal(20);
    expect(a.stats.admitted, 'the first limiter admitted some').to.be.above(0);
    expect(b.stats.admitted, 'the second limiter admitted some').to.be.above(0);
    expect(codes.slice(-20), 'nothing admitted once the allowance is spent').to.deep.equal(Array(20).fill(429));
  });

  it('refuses a second open limiter with the same node id, naming nodeId, before it connects; free again after close', async () => {
    const first = limiter({ nodeId: 'gateway-7' });
    await first.ready();
    try {
      limiter({ nodeId: 'gateway-7' });
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as ConfigError).code).to.equal('RL_CONFIG');
      expect((err as ConfigError).problems.map((p) => p.path)).to.deep.equal(['nodeId']);
    }
    await first.close();
    const again = limiter({ nodeId: 'gateway-7' });
    await again.ready();
    expect(again.nodeId).to.equal('gateway-7');
  });
});

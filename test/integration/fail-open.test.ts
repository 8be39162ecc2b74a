import { expect } from 'chai';
import express from 'express';
import request from 'supertest';
import { demoPolicy } from '../support/fixtures.js';
import { fleetSuite, redisLimiter, until } from '../support/redis-members.js';

describe('fail-open while degraded is charged (real redis-server)', function () {
  this.timeout(30_000);
  const ctx = fleetSuite('fo');

  it('what a degraded node admits failing open during a Redis outage is spent in the window: after recovery it admits nothing more there', async function () {
    if (ctx.redis.external) this.skip();
    // 100 an hour, and degraded 300 ms into an outage (30 s by default).
    const policy = demoPolicy({ plans: { ...demoPolicy().plans, free: { windows: [{ name: 'hourly', limit: 100, windowMs: 3_600_000 }] } } });
    const limiter = redisLimiter(ctx.redis.url, ctx.prefix, 'fail-open-node', 'fail-open-key', { policy, degradedAfterMs: 300, shards: 8 });
    try {
      await limiter.ready();
      const app = express()
        .use(limiter)
        .use((_req, res) => {
          res.json({ ok: true });
        });
      const send = async (n: number): Promise<number[]> => {
        const out: number[] = [];
        for (let i = 0; i < n; i++) out.push((await request(app).get('/x')).status);
        return out;
      };
      // 30 admitted first (a first sight on a busy machine may miss its deadline: asked again).
      let admitted = 0;
      for (let i = 0; i < 60 && admitted < 30; i++) if ((await send(1))[0] === 200) admitted++;
      expect(admitted).to.equal(30);
      ctx.redis.pause();
      let during: number[];
      try {
        await until(() => limiter.node.degraded, 'degraded mode', 3000);
        // Held credit first, then what nothing covers: admitted failing open (the backstop's to bound).
        during = await send(100);
      } finally {
        ctx.redis.resume();
      }
      expect(
        during.every((s) => s === 200),
        during.join(),
      ).to.equal(true);
      expect(limiter.stats.failOpen).to.be.above(0);
      expect(limiter.node.stats.charged).to.equal(limiter.stats.failOpen);
      await until(() => !limiter.node.degraded, 'contact back', 5000);
      // 130 admitted against 100: the window is spent, and stays so.
      const after = await send(40);
      expect(after.filter((s) => s === 200).length, after.join()).to.equal(0);
    } finally {
      await limiter.close();
    }
  });
});

import { expect } from 'chai';
import express, { type Express } from 'express';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createAdminApp } from '../../admin/app.js';
import type { FleetHealth } from '../../admin/fleet-health.js';
import { PolicyStore } from '../../bus/policy-store.js';
import { KeyHasher } from '../../lib/key-id.js';
import type { PolicyDoc } from '../../lib/policy.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import type { RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import type { RedisProcess } from '../../scripts/redis-server.js';
import { TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';
import { redisSuite } from '../support/redis-suite.js';
import { POLICY_SIGNER, redisLimiter, until } from '../support/redis-members.js';

const ADMIN = 'admin-token-0123456789abcdef';
const GLASS = 'glass-token-0123456789abcdef';

/** One plan for every caller: `limit` per `windowMs`, allocated as given. */
function policy(limit: number, windowMs: number, allocation?: 'fixed-share'): PolicyDoc {
  const plan = { windows: [{ name: 'w', limit, windowMs }], ...(allocation ? { allocation } : {}) };
  return { version: 1, plans: { p: plan }, defaultPlan: 'p', anonymousPlan: 'p' };
}

describe('concentration and fixed share over a real redis-server', function () {
  this.timeout(60_000);
  let redis: RedisProcess;
  let raw: Redis;
  let prefix: string;
  const limiters: RateLimiterMiddleware[] = [];

  redisSuite('conc', (s) => ({ redis, raw, prefix } = s));
  afterEach(async () => {
    await Promise.all(limiters.splice(0).map((l) => l.close()));
  });

  /** Two gateways (n1, n2) under `doc`, the caller named by its x-key header; both see a fleet of two. */
  async function twoNodes(doc: PolicyDoc): Promise<Express[]> {
    const apps: Express[] = [];
    for (const id of ['n1', 'n2']) {
      const limiter = redisLimiter(redis.url, prefix, id, 'unused', { shards: 8, policy: doc, identify: (req) => ({ principal: String(req.headers['x-key']), tenant: 't' }) });
      limiters.push(limiter);
      apps.push(
        express()
          .use(limiter)
          .use((_req, res) => void res.json({ ok: true })),
      );
    }
    await Promise.all(limiters.map((l) => l.ready()));
    await until(() => limiters.every((l) => l.bus?.fleetSize() === 2), 'both nodes to see a fleet of two', 10_000);
    return apps;
  }

  it('health shows the owners’ concentration: a key pinned to one node reads 2× uniform, one spread evenly about 1×', async () => {
    const [a, b] = await twoNodes(policy(100_000, 5000));
    const store = new PolicyStore(raw, POLICY_SIGNER, prefix);
    const admin = createAdminApp({ store, redis: raw, prefix, adminToken: ADMIN, breakGlassToken: GLASS, keyHash: TEST_KEY_HASH, logger: captureLogger().logger });
    let h = {} as FleetHealth;
    // Each round of the loop: 40 requests of `pinned` to n1, and 40 of `spread` alternating n1, n2. A
    // 5 s window with at least 100 of a key (50 per member) is measured once its owner sweeps it.
    await until(
      async () => {
        for (let i = 0; i < 40; i++) {
          await Promise.all([
            request(a!).get('/').set('x-key', 'pinned'),
            request(i % 2 === 0 ? a! : b!)
              .get('/')
              .set('x-key', 'spread'),
          ]);
        }
        h = (await request(admin).get('/admin/v1/health').set('Authorization', `Bearer ${ADMIN}`).expect(200)).body as FleetHealth;
        const bounds = h.concentration.histogram.map(([bound]) => bound);
        return bounds.includes(2) && bounds.includes(1.1);
      },
      'a window of each key measured',
      45_000,
    );
    // Pinned: 2 × all of it on one node. Spread: at most one request more on one node than on the other.
    expect(
      h.concentration.histogram.every(([bound]) => bound === 2 || bound === 1.1),
      JSON.stringify(h.concentration),
    ).to.equal(true);
    expect(h.concentration.samples).to.be.at.least(2);
    expect(h.concentration.p95).to.equal(2);
    expect(h.concentration.verdict).to.equal('insufficient'); // far fewer than 100 windows
    expect(h.concentration.gateRatio).to.equal(1.5);
    // Each owner publishes its own part; the fleet's is their sum.
    const parts = h.nodes.map((x) => x.status?.concentration?.samples ?? 0);
    expect(parts.reduce((s, x) => s + x, 0)).to.equal(h.concentration.samples);
    // Informative only: it never makes the fleet not ok.
    expect(h.problems).to.deep.equal(['No policy is stored']);
  });

  it('a fixed-share plan holds a pinned caller to its share plus the reserve, and the other node keeps its share', async () => {
    const doc = policy(100, 60_000, 'fixed-share');
    // The key's 60 s window must not end mid-test: wait for the next one if it is close.
    const keyId = new KeyHasher(TEST_KEY_HASH.versions).hash('caller');
    const offset = phaseOffset(keyId, 60_000);
    const left = windowEndMs(windowIdAt(Date.now(), 60_000, offset), 60_000, offset) - Date.now();
    if (left < 30_000) await new Promise((r) => setTimeout(r, left + 100));
    const [a, b] = await twoNodes(doc);
    // A new fleet's owners take their shards over blind and issue nothing for some rounds (longer on a
    // busy host): requests before the first admission are not counted, then `times` more are.
    const send = async (app: Express, times: number): Promise<number> => {
      const admitted = async (): Promise<boolean> => (await request(app).get('/').set('x-key', 'caller')).status === 200;
      await until(admitted, 'a first admission', 20_000);
      let ok = 1;
      for (let i = 1; i < times; i++) if (await admitted()) ok++;
      return ok;
    };
    const first = await send(a!, 80);
    // ⌊100 / 2⌋ = 50, and the reserve (2) on the fast path — a fast-path answer late on a busy host
    // may cost one of those, never add any.
    expect(first).to.be.within(48, 52);
    const second = await send(b!, 80);
    expect(first + second).to.be.at.most(100);
    expect(second).to.be.at.least(40);
  });
});

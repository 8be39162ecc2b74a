import { expect } from 'chai';
import express, { type Express, type Request } from 'express';
import express4 from 'express4';
import request from 'supertest';
import type { Bus } from '../../bus/types.js';
import { MemoryBus } from '../../bus/memory.js';
import { FakeClock } from '../../lib/clock.js';
import type { LeaseNode } from '../../lib/lease-node.js';
import { ConfigError } from '../../lib/errors.js';
import { PolicyError } from '../../lib/errors.js';
import type { PolicyDoc } from '../../lib/policy.js';
import type { RateLimiterOptions } from '../../middleware/options.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { captureLogger } from '../support/logs.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';

const opened: RateLimiterMiddleware[] = [];

/** An app that authenticates from x-key / x-tenant headers, then runs the limiter, then answers 200. */
function appWith(options: Partial<RateLimiterOptions> & { policy?: PolicyDoc }, make: () => Express = express): { app: Express; limiter: RateLimiterMiddleware } {
  const limiter = rateLimiter({
    policy: demoPolicy(),
    identify: (req: Request) => {
      const principal = req.headers['x-key'];
      return typeof principal === 'string' ? { principal, tenant: String(req.headers['x-tenant'] ?? 'acme') } : undefined;
    },
    routeClass: (req: Request) => (req.path.startsWith('/pay') ? 'payments' : 'default'),
    keyHash: TEST_KEY_HASH,
    clock: new FakeClock(1_800_000_000_000),
    logger: captureLogger().logger,
    ...options,
  });
  opened.push(limiter);
  const app = make();
  app.use(limiter);
  app.use((_req, res) => {
    res.json({ ok: true });
  });
  return { app, limiter };
}

async function statuses(app: Express, n: number, headers: Record<string, string>, path = '/x'): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await request(app).get(path).set(headers)).status);
  return out;
}

describe('rateLimiter middleware', () => {
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((l) => l.close()));
  });

  it('rejects bad options at construction, listing every problem', () => {
    try {
      rateLimiter({ policy: { ...demoPolicy(), defaultPlan: 'gold' }, identify: 5, shards: 0, subSecondRetryAfter: 'later', bus: {} } as unknown as RateLimiterOptions);
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as ConfigError).code).to.equal('RL_CONFIG');
      const paths = (err as ConfigError).problems.map((p) => p.path);
      expect(paths).to.include.members(['identify', 'shards', 'subSecondRetryAfter', 'policy.defaultPlan', 'keyHash']);
    }
    try {
      rateLimiter({ policy: demoPolicy(), identify: () => undefined, shards: 0, keyHash: { versions: [{ version: 'v1', secret: 'short' }] } });
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as ConfigError).code).to.equal('RL_CONFIG');
      const paths = (err as ConfigError).problems.map((p) => p.path);
      expect(paths).to.have.members(['shards', 'keyHash.versions.0.secret']);
    }
    // Redis options: checked before any connection is made, every problem named.
    try {
      rateLimiter({
        policy: demoPolicy(),
        identify: () => undefined,
        bus: {} as never,
        redis: { url: 'http://127.0.0.1:6379', prefix: 'has space', busSecret: { versions: [{ version: 'b1', secret: 'short' }] } },
      });
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      const paths = (err as ConfigError).problems.map((p) => p.path);
      expect(paths).to.include.members(['redis.url', 'redis.prefix', 'keyHash']);
      expect((err as ConfigError).message).to.match(/bus.*redis|redis.*bus/);
    }
    try {
      rateLimiter({
        policy: demoPolicy(),
        identify: () => undefined,
        keyHash: TEST_KEY_HASH,
        redis: { busSecret: { versions: [{ version: 'b1', secret: 'short' }] }, policySecret: { versions: [{ version: 'p1', secret: 'sixteen-bytes-or-more' }], current: 'p2' } },
      });
      expect.fail('should throw');
    } catch (err) {
      expect((err as ConfigError).problems.map((p) => p.path)).to.deep.equal(['redis.busSecret.versions[0].secret', 'redis.policySecret.current']);
    }
    try {
      const fastPath = { host: 'not a host', port: 70_000, advertise: 'gw 1' };
      rateLimiter({ policy: demoPolicy(), identify: () => undefined, keyHash: TEST_KEY_HASH, redis: { busSecret: { versions: [{ version: 'b1', secret: 'sixteen-bytes-or-more' }] }, fastPath } });
      expect.fail('should throw');
    } catch (err) {
      expect((err as ConfigError).problems.map((p) => p.path)).to.have.members(['redis.fastPath.host', 'redis.fastPath.port', 'redis.fastPath.advertise']);
    }
  });

  it('takes numeric account ids, and a falsy identity as an anonymous caller', async () => {
    const numeric = appWith({ identify: () => ({ principal: 12345, tenant: 678 }) });
    expect(await statuses(numeric.app, 11, {})).to.deep.equal([...Array(10).fill(200), 429]);
    expect(numeric.limiter.stats.failOpen).to.equal(0);
    const none = appWith({ identify: () => false });
    expect(await statuses(none.app, 6, {})).to.deep.equal([200, 200, 200, 200, 200, 429]); // anonymous: 5/s
  });

  it('503 capacity class once a tenant has taken its share; its neighbour still gets through, and learns nothing', async () => {
    const { app, limiter } = appWith({ policy: demoPolicy({ capacity: { nodeAdmissionsPerSecond: 10, tenantShare: 0.3 } }) });
    expect(await statuses(app, 4, { 'x-key': 'noisy-key-1', 'x-tenant': 'noisy-co' })).to.deep.equal([200, 200, 200, 503]);
    const res = await request(app).get('/x').set({ 'x-key': 'noisy-key-1', 'x-tenant': 'noisy-co' });
    expect(res.status).to.equal(503);
    expect(res.headers['retry-after']).to.equal(undefined);
    const body = JSON.parse(res.text);
    expect(body.error).to.equal('RL_CAPACITY_TENANT_SHARE');
    expect(body.type).to.equal('https://iana.org/assignments/http-problem-types#temporary-reduced-capacity');
    expect(Object.keys(body).sort()).to.deep.equal(['correlation_id', 'error', 'status', 'title', 'type']);
    expect(await statuses(app, 3, { 'x-key': 'quiet-key-1', 'x-tenant': 'quiet-co' })).to.deep.equal([200, 200, 200]);
    // A neighbour's 503 names neither tenant.
    const n = await request(app).get('/x').set({ 'x-key': 'quiet-key-1', 'x-tenant': 'quiet-co' });
    expect(n.status).to.equal(503);
    expect(n.text).to.not.include('noisy');
    expect(n.text).to.not.include('quiet');
    expect(limiter.stats.capacityDenied).to.equal(3);
  });

  it('503 node capacity when the node has admitted its capacity this second', async () => {
    const { app } = appWith({ policy: demoPolicy({ capacity: { nodeAdmissionsPerSecond: 4, tenantShare: 1 } }) });
    await statuses(app, 2, { 'x-key': 'k-aaaaaaaa', 'x-tenant': 'a' });
    await statuses(app, 2, { 'x-key': 'k-bbbbbbbb', 'x-tenant': 'b' });
    const res = await request(app).get('/x').set({ 'x-key': 'k-cccccccc', 'x-tenant': 'c' });
    expect(res.status).to.equal(503);
    expect(JSON.parse(res.text).error).to.equal('RL_CAPACITY_NODE');
  });

  it('fails open on an exception inside the limiter: admits, counts, logs (D6)', async () => {
    const logs = captureLogger();
    const { app, limiter } = appWith({
      identify: () => {
        throw new Error('identity service exploded');
      },
      logger: logs.logger,
    });
    expect(await statuses(app, 3, { 'x-key': 'k-12345678' })).to.deep.equal([200, 200, 200]);
    expect(limiter.stats.failOpen).to.equal(3);
    const line = logs.lines.find((l) => l.msg === 'limiter fault: request admitted (fail-open)');
    expect(line?.correlationId).to.be.a('string');
  });

  it('fails closed with 503 on a fail-closed route class', async () => {
    const { app, limiter } = appWith({
      identify: () => {
        throw new Error('boom');
      },
    });
    const res = await request(app).get('/pay/now').set({ 'x-key': 'k-12345678' });
    expect(res.status).to.equal(503);
    expect(JSON.parse(res.text).error).to.equal('RL_LIMITER_UNAVAILABLE');
    expect(res.headers['retry-after']).to.equal(undefined);
    expect(limiter.stats.failClosed).to.equal(1);
  });

  it('treats a malformed identity as a limiter fault (fail-open), never as a shared anonymous bucket', async () => {
    const logs = captureLogger();
    const { app, limiter } = appWith({ identify: () => ({ principal: '', tenant: 't' }), logger: logs.logger });
    expect(await statuses(app, 2, {})).to.deep.equal([200, 200]);
    expect(limiter.stats.failOpen).to.equal(2);
    expect((logs.lines[0]!.err as { code: string }).code).to.equal('RL_IDENTITY');
  });

  it('falls back to the anonymous class (network range + route class) without identity', async () => {
    const { app } = appWith({ trustedProxyHops: 1, ipv4Prefix: 24 });
    const from = (ip: string) => ({ 'x-forwarded-for': ip });
    // anonymous plan: 5 per second, shared by the /24 (ipv4Prefix: 24).
    expect(await statuses(app, 3, from('203.0.113.7'))).to.deep.equal([200, 200, 200]);
    expect(await statuses(app, 3, from('203.0.113.200'))).to.deep.equal([200, 200, 429]);
    expect(await statuses(app, 1, from('203.0.114.1'))).to.deep.equal([200]);
    expect(await statuses(app, 1, from('2001:db8:1:2::1'))).to.deep.equal([200]);
  });

  it('ignores X-Forwarded-For unless proxies are trusted', async () => {
    const { app } = appWith({});
    expect(await statuses(app, 5, { 'x-forwarded-for': '198.51.100.1' })).to.deep.equal([200, 200, 200, 200, 200]);
    expect(await statuses(app, 1, { 'x-forwarded-for': '192.0.2.1' })).to.deep.equal([429]);
  });

  it('sends draft-10 RateLimit headers only when opted in, about the caller only', async () => {
    const off = appWith({});
    const r1 = await request(off.app).get('/x').set({ 'x-key': 'k-12345678' });
    expect(r1.headers['ratelimit']).to.equal(undefined);
    expect(r1.headers['ratelimit-policy']).to.equal(undefined);
    const on = appWith({ rateLimitHeaders: true });
    const r2 = await request(on.app).get('/x').set({ 'x-key': 'k-12345678' });
    expect(r2.headers['ratelimit-policy']).to.equal('"burst";q=10;w=1, "sustained";q=100;w=60');
    expect(r2.headers['ratelimit']).to.match(/^"burst";r=9;t=[01], "sustained";r=\d+;t=\d+$/);
  });

  it('rounds sub-second waits up to Retry-After: 1 when asked', async () => {
    const { app } = appWith({ subSecondRetryAfter: 'round-up' });
    await statuses(app, 10, { 'x-key': 'k-12345678' });
    const res = await request(app).get('/x').set({ 'x-key': 'k-12345678' });
    expect(res.status).to.equal(429);
    expect(res.headers['retry-after']).to.equal('1');
    expect(Number(res.headers['x-ratelimit-reset-ms'])).to.be.within(1, 1000);
  });

  it('marks every response X-RateLimit-Degraded once the owner has been silent too long (H4)', async () => {
    const clock = new FakeClock(1_800_000_000_000);
    const inner = new MemoryBus({ shards: 64, roundMs: 25, clock });
    let up = true;
    const bus: Bus = {
      connectNode: (n, onMessage) => {
        // A partition: nothing crosses while `up` is false.
        const link = inner.connectNode(n, (m) => up && onMessage(m));
        return {
          requestCredit: (reqs, deadline) => (up ? link.requestCredit(reqs, deadline) : undefined),
          publish: (batch) => up && link.publish(batch),
          heartbeat: (beat) => up && link.heartbeat(beat),
          reachable: (shard) => up && link.reachable(shard),
          fleetSize: () => link.fleetSize(),
        };
      },
      serveOwner: (n, o) => inner.serveOwner(n, o),
      fleetView: (n) => inner.fleetView(n),
      ownerEpoch: (s) => inner.ownerEpoch(s),
      fleetSize: () => inner.fleetSize(),
      close: () => inner.close(),
    };
    const { app, limiter } = appWith({ bus, clock, degradedAfterMs: 1000 });
    expect((await request(app).get('/x').set({ 'x-key': 'k-12345678' })).headers['x-ratelimit-degraded']).to.equal(undefined);
    up = false;
    clock.advance(1001);
    limiter.node.endRound(); // decided at the end of a round
    const res = await request(app).get('/x').set({ 'x-key': 'k-12345678' });
    expect(res.headers['x-ratelimit-degraded']).to.equal('true');
    expect(limiter.node.degraded).to.equal(true);
    // Nothing held for the new burst window: admitted failing open, and charged to both windows.
    expect(res.status).to.equal(200);
    expect(limiter.stats.failOpen).to.equal(1);
    expect(limiter.node.stats.charged).to.equal(1);
    expect((limiter.node as LeaseNode).buckets.peek(limiter.hasher.hash('k-12345678'))!.buckets.map((b) => b.spent)).to.deep.equal([1, 2]);
    up = true;
    limiter.node.endRound();
    expect((await request(app).get('/x').set({ 'x-key': 'k-12345678' })).headers['x-ratelimit-degraded']).to.equal(undefined);
  });

  it('takes a new policy without restart; an invalid or older one changes nothing (P4)', async () => {
    const { app, limiter } = appWith({});
    expect(await statuses(app, 11, { 'x-key': 'k-12345678' })).to.include(429);
    const bigger = demoPolicy({ version: 2, defaultPlan: 'pro' });
    expect(() => limiter.updatePolicy({ ...bigger, defaultPlan: 'nope' })).to.throw(PolicyError);
    expect(() => limiter.updatePolicy(demoPolicy({ version: 1, defaultPlan: 'pro' }))).to.throw(PolicyError, /version: must be above the current version 1/);
    expect(limiter.policy().version).to.equal(1);
    limiter.updatePolicy(bigger);
    expect(limiter.policy().version).to.equal(2);
    expect(await statuses(app, 20, { 'x-key': 'k-12345678' })).to.deep.equal(Array(20).fill(200));
  });

  it('a lower limit takes effect mid-window: credit above it is given back at once', async () => {
    const { app, limiter } = appWith({ policy: demoPolicy({ defaultPlan: 'hour' }) });
    expect(await statuses(app, 5, { 'x-key': 'k-12345678' })).to.deep.equal(Array(5).fill(200));
    const lower = demoPolicy({ version: 2, defaultPlan: 'hour' });
    limiter.updatePolicy({ ...lower, plans: { ...lower.plans, hour: { windows: [{ name: 'hourly', limit: 10, windowMs: 3_600_000 }] } } });
    expect(await statuses(app, 8, { 'x-key': 'k-12345678' })).to.deep.equal([200, 200, 200, 200, 200, 429, 429, 429]);
  });

  it('works unchanged on Express 4', async () => {
    const { app } = appWith({}, express4);
    const codes = await statuses(app, 11, { 'x-key': 'k-12345678' });
    expect(codes).to.deep.equal([...Array(10).fill(200), 429]);
    const res = await request(app).get('/x').set({ 'x-key': 'k-12345678' });
    expect(res.headers['retry-after']).to.equal('0');
    expect(JSON.parse(res.text).window).to.equal('burst');
  });
});

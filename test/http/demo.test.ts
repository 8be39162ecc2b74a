import { expect } from 'chai';
import { fileURLToPath } from 'node:url';
import request from 'supertest';
import { createDemoApp } from '../../demo/app.js';
import { FakeClock } from '../../lib/clock.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { captureLogger } from '../support/logs.js';
import { TEST_KEY_HASH } from '../support/fixtures.js';

const CONFIG = fileURLToPath(new URL('../../../demo/policy.json', import.meta.url));

describe('demo gateway (standalone, fleet of one)', () => {
  let clock: FakeClock;
  let demo: ReturnType<typeof createDemoApp>;
  let logs: ReturnType<typeof captureLogger>;

  beforeEach(() => {
    clock = new FakeClock(1_800_000_000_000);
    logs = captureLogger();
    demo = createDemoApp({ configFile: CONFIG, keyHash: TEST_KEY_HASH, clock, logger: logs.logger });
  });
  afterEach(() => demo.limiter.close());

  it('12 quick requests with demo-free: exactly 10 × 200, then 429 naming window burst', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await request(demo.app).get('/api/hello').set('x-api-key', 'demo-free');
      codes.push(res.status);
      expect(res.body).to.deep.equal({ ok: true, path: '/api/hello', tenant: 'acme' });
    }
    expect(codes).to.deep.equal(Array(10).fill(200));
    for (let i = 0; i < 2; i++) {
      const res = await request(demo.app).get('/api/hello').set('x-api-key', 'demo-free').set('x-correlation-id', `corr-${i}`);
      expect(res.status).to.equal(429);
      expect(res.headers['content-type']).to.match(/^application\/problem\+json/);
      expect(res.headers['retry-after']).to.equal('0');
      const resetMs = Number(res.headers['x-ratelimit-reset-ms']);
      expect(resetMs).to.be.within(1, 1000);
      expect(res.headers['x-ratelimit-degraded']).to.equal(undefined);
      const body = JSON.parse(res.text);
      expect(body).to.deep.equal({
        type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
        title: 'Quota exceeded',
        status: 429,
        error: 'RL_QUOTA_EXCEEDED',
        window: 'burst',
        correlation_id: `corr-${i}`,
      });
      // Never the limit (10 or 100) or any other count.
      expect(res.text).to.not.match(/\b(10|100|90)\b/);
    }
    expect(demo.limiter.stats).to.include({ admitted: 10, quotaDenied: 2 });
  });

  it('the next burst window admits again until the sustained window (100/60 s) binds', async () => {
    // Start at the key's own sustained boundary so the 12 s below stay inside one sustained window.
    const offset = phaseOffset(demo.limiter.hasher.hash('demo-free'), 60_000);
    clock.set(windowEndMs(windowIdAt(clock.now(), 60_000, offset), 60_000, offset));
    let admitted = 0;
    let last: request.Response | undefined;
    for (let s = 0; s < 12; s++) {
      for (let i = 0; i < 12; i++) {
        const res = await request(demo.app).get('/api/x').set('x-api-key', 'demo-free');
        if (res.status === 200) admitted++;
        else last = res;
      }
      clock.advance(1000);
    }
    expect(admitted).to.equal(100);
    const res = await request(demo.app).get('/api/x').set('x-api-key', 'demo-free');
    expect(res.status).to.equal(429);
    expect(JSON.parse(res.text).window).to.equal('sustained');
    const retryAfter = Number(res.headers['retry-after']);
    expect(retryAfter).to.be.within(1, 60);
    expect(res.headers['x-ratelimit-reset-ms']).to.equal(undefined);
    expect(last?.status).to.equal(429);
  });

  it('answers 401 for an unknown key before the limiter is reached', async () => {
    const res = await request(demo.app).get('/api/hello').set('x-api-key', 'nope-nope-nope');
    expect(res.status).to.equal(401);
    expect(demo.limiter.node.buckets.size).to.equal(0);
    expect(demo.limiter.stats).to.include({ admitted: 0, quotaDenied: 0 });
  });

  it('does not limit /healthz', async () => {
    for (let i = 0; i < 30; i++) expect((await request(demo.app).get('/healthz')).status).to.equal(200);
    expect(demo.limiter.stats.admitted).to.equal(0);
  });

  it('limits /public by client address and route class, not by tenant', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 7; i++) codes.push((await request(demo.app).get('/public/info')).status);
    expect(codes).to.deep.equal([200, 200, 200, 200, 200, 429, 429]);
  });

  it('different keys have independent quotas (demo-pro 100/s beside an exhausted demo-free)', async () => {
    for (let i = 0; i < 11; i++) await request(demo.app).get('/api/a').set('x-api-key', 'demo-free');
    let ok = 0;
    for (let i = 0; i < 30; i++) if ((await request(demo.app).get('/api/a').set('x-api-key', 'demo-pro')).status === 200) ok++;
    expect(ok).to.equal(30);
  });

  it('logs a denial with the key id and correlation id, never the raw key', async () => {
    for (let i = 0; i < 11; i++) await request(demo.app).get('/api/a').set('x-api-key', 'demo-free').set('x-request-id', 'req-77');
    const denial = logs.lines.find((l) => l.msg === 'rate limited');
    expect(denial).to.not.equal(undefined);
    expect(denial!.keyId).to.equal(demo.limiter.hasher.hash('demo-free'));
    expect(denial!.correlationId).to.equal('req-77');
    expect(denial!.window).to.equal('burst');
    expect(logs.text()).to.not.include('demo-free');
  });
});

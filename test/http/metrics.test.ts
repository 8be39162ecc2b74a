import { expect } from 'chai';
import express, { type Request } from 'express';
import request from 'supertest';
import { FakeClock } from '../../lib/clock.js';
import { metricsHandler } from '../../middleware/metrics.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';

/** Parses the Prometheus text format into `name{labels}` → value (comments skipped). */
function parse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m === null) throw new Error(`not a sample line: ${line}`);
    out.set(`${m[1]}${m[2] ?? ''}`, Number(m[3]));
  }
  return out;
}

describe('Prometheus metrics (O1)', () => {
  let limiter: RateLimiterMiddleware;
  afterEach(async () => {
    await limiter?.close();
  });

  it('serves the limiter’s metrics in the text format; counters and the decision histogram move with traffic', async () => {
    limiter = rateLimiter({
      policy: demoPolicy(),
      identify: (req: Request) => ({ principal: String(req.headers['x-key']), tenant: 'acme' }),
      keyHash: TEST_KEY_HASH,
      nodeId: 'metrics-node',
      clock: new FakeClock(1_800_000_000_000),
      logger: captureLogger().logger,
    });
    const app = express();
    app.get('/metrics', metricsHandler(limiter.metrics));
    app.use(limiter);
    app.use((_req, res) => {
      res.json({ ok: true });
    });

    const before = parse((await request(app).get('/metrics').expect(200).expect('content-type', /text\/plain/)).text);
    expect(before.get('fleet_ratelimit_decisions_total{class="admitted",node="metrics-node"}')).to.equal(0);
    for (let i = 0; i < 12; i++) await request(app).get('/x').set('x-key', 'k1'); // demo plan: 10 per second
    const after = parse((await request(app).get('/metrics').expect(200)).text);
    expect(after.get('fleet_ratelimit_decisions_total{class="admitted",node="metrics-node"}')).to.equal(10);
    expect(after.get('fleet_ratelimit_decisions_total{class="quota",node="metrics-node"}')).to.equal(2);
    expect(after.get('fleet_ratelimit_decision_seconds_count{node="metrics-node"}')).to.equal(12);
    expect(after.get('fleet_ratelimit_decision_seconds_bucket{le="+Inf",node="metrics-node"}')).to.equal(12);
    expect(after.get('fleet_ratelimit_fast_path_total{node="metrics-node"}')).to.be.at.least(1); // the first sight asked
    expect(after.get('fleet_ratelimit_grants_issued_total{node="metrics-node"}')).to.be.at.least(1);
    expect(after.get('fleet_ratelimit_degraded{node="metrics-node"}')).to.equal(0);
    expect(after.get('fleet_ratelimit_buckets{node="metrics-node"}')).to.equal(2);
    expect(after.get('fleet_ratelimit_fleet_size{node="metrics-node"}')).to.equal(1);
    expect(after.has('fleet_ratelimit_fold_age_seconds{node="metrics-node"}')).to.equal(true);
    expect(after.get('fleet_ratelimit_bus_rejections_total{reason="stale_owner",node="metrics-node"}')).to.equal(0);
    // The metrics never name a key, raw or hashed.
    expect((await request(app).get('/metrics')).text).to.not.match(/k1|v1:/);
  });
});

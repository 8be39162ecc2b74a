import { expect } from 'chai';
import express, { type Express, type Request } from 'express';
import { Counter, Registry } from 'prom-client';
import request from 'supertest';
import { FakeClock } from '../../lib/clock.js';
import { metricsHandler } from '../../middleware/metrics.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { ConfigError } from '../../lib/errors.js';
import type { RateLimiterOptions } from '../../middleware/options.js';
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

    const before = parse(
      (
        await request(app)
          .get('/metrics')
          .expect(200)
          .expect('content-type', /text\/plain/)
      ).text,
    );
    expect(before.get('fleet_ratelimit_decisions_total{class="admitted",node="metrics-node"}')).to.equal(0);
    for (let i = 0; i < 64; i++) await request(app).get('/x').set('x-key', 'k1'); // demo plan: 10 per second
    const after = parse((await request(app).get('/metrics').expect(200)).text);
    expect(after.get('fleet_ratelimit_decisions_total{class="admitted",node="metrics-node"}')).to.equal(10);
    expect(after.get('fleet_ratelimit_decisions_total{class="quota",node="metrics-node"}')).to.equal(54);
    // Decisions that do not wait are timed one in 32, each sample counted 32 times: the 32nd and the 64th.
    expect(after.get('fleet_ratelimit_decision_seconds_count{node="metrics-node"}')).to.equal(64);
    expect(after.get('fleet_ratelimit_decision_seconds_bucket{le="+Inf",node="metrics-node"}')).to.equal(64);
    // A fleet of one counts for itself: no owner asked, no grant issued.
    expect(after.get('fleet_ratelimit_fast_path_total{node="metrics-node"}')).to.equal(0);
    expect(after.get('fleet_ratelimit_grants_issued_total{node="metrics-node"}')).to.equal(0);
    // Nor a report sent: the alert on missing reports leaves out a fleet of size 1 (deploy/prometheus).
    expect(after.get('fleet_ratelimit_reports_total{node="metrics-node"}')).to.equal(0);
    expect(after.get('fleet_ratelimit_lease_credit{node="metrics-node",kind="committed"}')).to.equal(20); // 10 in each window
    expect(after.get('fleet_ratelimit_lease_credit{node="metrics-node",kind="allowance"}')).to.be.above(20);
    expect(after.get('fleet_ratelimit_degraded{node="metrics-node"}')).to.equal(0);
    expect(after.get('fleet_ratelimit_buckets{node="metrics-node"}')).to.equal(2);
    expect(after.get('fleet_ratelimit_fleet_size{node="metrics-node"}')).to.equal(1);
    expect(after.has('fleet_ratelimit_fold_age_seconds{node="metrics-node"}')).to.equal(true);
    expect(after.get('fleet_ratelimit_bus_rejections_total{reason="stale_owner",node="metrics-node"}')).to.equal(0);
    // The metrics never name a key, raw or hashed.
    expect((await request(app).get('/metrics')).text).to.not.match(/k1|v1:/);
  });

  describe('several limiters in one process', () => {
    const opened: RateLimiterMiddleware[] = [];
    afterEach(async () => {
      await Promise.all(opened.splice(0).map((l) => l.close()));
    });
    const make = (options: Partial<RateLimiterOptions>): { limiter: RateLimiterMiddleware; app: Express } => {
      const l = rateLimiter({
        policy: demoPolicy(),
        identify: (req: Request) => ({ principal: String(req.headers['x-key']), tenant: 'acme' }),
        keyHash: TEST_KEY_HASH,
        clock: new FakeClock(1_800_000_000_000),
        logger: captureLogger().logger,
        ...options,
      });
      opened.push(l);
      const app = express()
        .use(l)
        .use((_req, res) => {
          res.json({ ok: true });
        });
      return { limiter: l, app };
    };
    const send = async (app: Express, n: number): Promise<void> => {
      for (let i = 0; i < n; i++) await request(app).get('/x').set('x-key', 'k1');
    };

    it('their registries merge with each other and with the app’s; every series keeps its node label', async () => {
      const a = make({ nodeId: 'gw-a' });
      const b = make({ nodeId: 'gw-b' });
      await send(a.app, 3);
      await send(b.app, 32);
      const app = new Registry();
      new Counter({ name: 'app_requests_total', help: 'the app’s own', registers: [app] }).inc(7);
      const merged = Registry.merge([a.limiter.metrics, b.limiter.metrics, app]);
      const m = parse(await merged.metrics());
      expect(m.get('app_requests_total')).to.equal(7);
      expect(m.get('fleet_ratelimit_decisions_total{class="admitted",node="gw-a"}')).to.equal(3);
      expect(m.get('fleet_ratelimit_decisions_total{class="admitted",node="gw-b"}')).to.equal(10);
      expect(m.get('fleet_ratelimit_decisions_total{class="quota",node="gw-b"}')).to.equal(22);
      expect(m.get('fleet_ratelimit_decision_seconds_count{node="gw-a"}')).to.equal(0); // none of 3 sampled yet
      expect(m.get('fleet_ratelimit_decision_seconds_bucket{le="+Inf",node="gw-b"}')).to.equal(32);
      // With the app's registry alone, the node label is still on every limiter series.
      const withApp = await Registry.merge([app, a.limiter.metrics]).metrics();
      const series = withApp.split('\n').filter((l) => l.startsWith('fleet_ratelimit_'));
      expect(series.length).to.be.above(20);
      for (const line of series) expect(line, line).to.match(/[{,]node="gw-[ab]"/);
      // A closed limiter's series are gone.
      await a.limiter.close();
      const after = parse(await b.limiter.metrics.metrics());
      expect(after.has('fleet_ratelimit_decisions_total{class="admitted",node="gw-a"}')).to.equal(false);
      expect(after.get('fleet_ratelimit_decisions_total{class="admitted",node="gw-b"}')).to.equal(10);
    });

    it('registry: both register into the app’s registry, served from one /metrics', async () => {
      const registry = new Registry();
      new Counter({ name: 'app_requests_total', help: 'the app’s own', registers: [registry] }).inc(1);
      const a = make({ nodeId: 'gw-a', registry });
      const b = make({ nodeId: 'gw-b', registry });
      expect(a.limiter.metrics).to.equal(registry);
      expect(b.limiter.metrics).to.equal(registry);
      await send(a.app, 1);
      await send(b.app, 2);
      const served = express().get('/metrics', metricsHandler(registry));
      const m = parse((await request(served).get('/metrics').expect(200)).text);
      expect(m.get('app_requests_total')).to.equal(1);
      expect(m.get('fleet_ratelimit_decisions_total{class="admitted",node="gw-a"}')).to.equal(1);
      expect(m.get('fleet_ratelimit_decisions_total{class="admitted",node="gw-b"}')).to.equal(2);
      expect(m.get('fleet_ratelimit_skipped_total{node="gw-b"}')).to.equal(0);
    });

    it('refuses a registry that already holds another metric of one of its names, and a node id taken in the process', () => {
      const registry = new Registry();
      new Counter({ name: 'fleet_ratelimit_rounds_total', help: 'someone else’s', registers: [registry] });
      try {
        make({ nodeId: 'gw-x', registry });
        expect.fail('should throw');
      } catch (err) {
        expect(err).to.be.instanceOf(ConfigError);
        expect((err as ConfigError).problems).to.deep.equal([{ path: 'registry', message: 'already holds another metric named fleet_ratelimit_rounds_total' }]);
      }
      // The refused limiter left its node id free.
      make({ nodeId: 'gw-x' });
      expect(() => make({ nodeId: 'gw-x' }))
        .to.throw(ConfigError)
        .with.property('problems')
        .that.satisfies((p: Array<{ path: string }>) => p.length === 1 && p[0]!.path === 'nodeId');
    });

    it('limiters given no node id get distinct ones: hostname-pid, then hostname-pid-2…', () => {
      const ids = [make({}), make({}), make({})].map((x) => x.limiter.nodeId);
      expect(new Set(ids).size).to.equal(3);
      for (const id of ids) expect(id).to.match(new RegExp(`-${process.pid}(-\\d+)?$`));
    });
  });
});

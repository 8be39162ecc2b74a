import { expect } from 'chai';
import express, { type Request } from 'express';
import request from 'supertest';
import { MemoryBus } from '../../bus/memory.js';
import type { Bus } from '../../bus/types.js';
import { FakeClock } from '../../lib/clock.js';
import { PolicyError } from '../../lib/errors.js';
import { compilePolicy, type PolicyDoc } from '../../lib/policy.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';
import { until } from '../support/redis-members.js';

const opened: RateLimiterMiddleware[] = [];
const CLOCK = new FakeClock(1_800_000_000_000);

/** A limiter on `policy` for one key of tenant acme, in a fleet of one; `/shadow…` is the `trial` route class. */
function appWith(policy: PolicyDoc, bus?: Bus) {
  const limiter = rateLimiter({
    policy,
    ...(bus === undefined ? {} : { bus }),
    identify: () => ({ principal: 'sk_live_shadow_raw_key', tenant: 'acme' }),
    routeClass: (req: Request) => (req.path.startsWith('/shadow') ? 'trial' : 'default'),
    keyHash: TEST_KEY_HASH,
    clock: CLOCK,
    logger: captureLogger().logger,
    rateLimitHeaders: true,
  });
  opened.push(limiter);
  const app = express()
    .use(limiter)
    .use((_req, res) => {
      res.json({ ok: true });
    });
  return { app, limiter };
}

async function send(app: express.Express, n: number, path = '/x'): Promise<Array<{ status: number; limited: boolean }>> {
  const out = [];
  for (let i = 0; i < n; i++) {
    const res = await request(app).get(path);
    out.push({ status: res.status, limited: res.headers.ratelimit !== undefined });
  }
  return out;
}

/** Reads `fleet_ratelimit_<name>` from the limiter's registry. */
async function metric(limiter: RateLimiterMiddleware, name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = (await limiter.metrics.getMetricsAsJSON()).find((x) => x.name === `fleet_ratelimit_${name}`);
  const v = m?.values.find((x) => Object.entries(labels).every(([k, want]) => x.labels[k] === want));
  return v?.value ?? 0;
}

describe('shadow mode and dual runs: every decision computed, refusals counted, nothing refused', () => {
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((l) => l.close()));
    CLOCK.advance(60_000); // each test in windows of its own
  });

  it('a plan in shadow mode admits every request, sends no limit headers, and counts each would-be 429', async () => {
    const policy = demoPolicy({ plans: { ...demoPolicy().plans, free: { mode: 'shadow', windows: [{ name: 'burst', limit: 3, windowMs: 1000 }] } } });
    const { app, limiter } = appWith(policy);
    const answers = await send(app, 8);
    expect(answers.map((a) => a.status)).to.deep.equal(Array(8).fill(200));
    expect(answers.some((a) => a.limited)).to.equal(false);
    expect(limiter.stats.admitted).to.equal(3);
    expect(limiter.stats.shadowDenied).to.equal(5);
    expect(limiter.stats.quotaDenied).to.equal(0);
    expect(await metric(limiter, 'decisions_total', { class: 'shadow' })).to.equal(5);
  });

  it('a route class in shadow mode counts refusals there while the same plan is enforced elsewhere', async () => {
    const base = demoPolicy();
    const { app, limiter } = appWith({ ...base, routeClasses: { ...base.routeClasses, trial: { mode: 'shadow' } } });
    // The free plan's 10 per second are shared by the key's requests on both route classes.
    expect((await send(app, 12, '/shadow')).map((a) => a.status)).to.deep.equal(Array(12).fill(200));
    expect(limiter.stats.shadowDenied).to.equal(2);
    expect((await send(app, 2, '/x')).map((a) => a.status)).to.deep.equal([429, 429]);
    expect(limiter.stats.quotaDenied).to.equal(2);
  });

  it('a dual run: the enforced plan decides and sends its headers; the plan beside it counts what it would refuse', async () => {
    const base = demoPolicy();
    const policy = demoPolicy({
      plans: { ...base.plans, free: { windows: [{ name: 'burst', limit: 6, windowMs: 1000 }], shadow: 'candidate' }, candidate: { windows: [{ name: 'tight', limit: 4, windowMs: 1000 }] } },
    });
    const { app, limiter } = appWith(policy);
    const answers = await send(app, 8);
    expect(answers.map((a) => a.status)).to.deep.equal([200, 200, 200, 200, 200, 200, 429, 429]);
    expect(answers[0]!.limited).to.equal(true);
    // Of the 6 the enforced plan admitted, the candidate (4 a second) would have refused 2.
    expect(limiter.stats.dualRunDenied).to.equal(2);
    expect(limiter.stats.admitted).to.equal(6);
    expect(await metric(limiter, 'dual_run_refusals_total')).to.equal(2);
  });

  it('a dual run in a fleet (the lease protocol over the in-memory bus): the plan beside has leases of its own', async () => {
    const base = demoPolicy();
    const policy = demoPolicy({
      plans: { ...base.plans, free: { windows: [{ name: 'burst', limit: 6, windowMs: 1000 }], shadow: 'candidate' }, candidate: { windows: [{ name: 'tight', limit: 4, windowMs: 1000 }] } },
    });
    const { app, limiter } = appWith(policy, new MemoryBus({ shards: 64, roundMs: 25, clock: CLOCK }));
    const answers = await send(app, 8);
    expect(answers.map((a) => a.status)).to.deep.equal([200, 200, 200, 200, 200, 200, 429, 429]);
    await until(() => limiter.stats.dualRunDenied === 2, 'the plan beside to count its 2 refusals', 2000);
  });

  it('rejects a shadow plan that does not exist or is the plan itself, and an unknown mode, naming the field', () => {
    const base = demoPolicy();
    const problems = (doc: PolicyDoc): string[] => {
      try {
        compilePolicy(doc);
        return [];
      } catch (err) {
        expect(err).to.be.instanceOf(PolicyError);
        return (err as PolicyError).problems.map((p) => p.path);
      }
    };
    expect(problems({ ...base, plans: { ...base.plans, free: { ...base.plans.free!, shadow: 'nope' } } })).to.deep.equal(['plans.free.shadow']);
    expect(problems({ ...base, plans: { ...base.plans, free: { ...base.plans.free!, shadow: 'free' } } })).to.deep.equal(['plans.free.shadow']);
    expect(problems({ ...base, plans: { ...base.plans, free: { ...base.plans.free!, mode: 'observe' as 'shadow' } } })).to.deep.equal(['plans.free.mode']);
    expect(problems({ ...base, routeClasses: { trial: { mode: 'off' as 'shadow' } } })).to.deep.equal(['routeClasses.trial.mode']);
  });
});

import { expect } from 'chai';
import express, { type Express } from 'express';
import express4 from 'express4';
import request from 'supertest';
import { FakeClock } from '../../lib/clock.js';
import { ConfigError } from '../../lib/errors.js';
import type { RateLimiterOptions } from '../../middleware/options.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { captureLogger } from '../support/logs.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';

const opened: RateLimiterMiddleware[] = [];

/** An app of anonymous callers only (anonymous plan: 5 per second), its limiter and its log lines. */
function anonymousApp(trustProxy: unknown, options: Partial<RateLimiterOptions> = {}, make: () => Express = express) {
  const logs = captureLogger();
  const limiter = rateLimiter({ policy: demoPolicy(), identify: () => undefined, keyHash: TEST_KEY_HASH, clock: new FakeClock(1_800_000_000_000), logger: logs.logger, ...options });
  opened.push(limiter);
  const app = make();
  if (trustProxy !== undefined) app.set('trust proxy', trustProxy);
  app.use(limiter);
  app.use((_req, res) => {
    res.json({ ok: true });
  });
  return { app, limiter, warnings: () => logs.lines.filter((l) => l.code === 'RL_FORWARDED_UNTRUSTED') };
}

async function statuses(app: Express, n: number, forwardedFor?: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++)
    out.push(
      (
        await request(app)
          .get('/x')
          .set(forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor })
      ).status,
    );
  return out;
}

describe('anonymous callers: req.ip, trust proxy and prefix lengths', () => {
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((l) => l.close()));
  });

  it("honours Express's trust proxy: 30 forwarded addresses are 30 callers, and nothing is warned", async () => {
    const { app, limiter, warnings } = anonymousApp(1);
    for (let i = 1; i <= 30; i++) expect(await statuses(app, 6, `198.51.100.${i}`), `caller ${i}`).to.deep.equal([200, 200, 200, 200, 200, 429]);
    expect(limiter.stats.admitted).to.equal(150);
    expect(limiter.stats.quotaDenied).to.equal(30);
    expect(warnings()).to.have.length(0);
  });

  it('without trust proxy: 30 forwarded addresses are one caller (the proxy), and one coded warning says so', async () => {
    const { app, warnings } = anonymousApp(undefined);
    const codes: number[] = [];
    for (let i = 1; i <= 30; i++) codes.push(...(await statuses(app, 1, `198.51.100.${i}`)));
    expect(codes).to.deep.equal([...Array(5).fill(200), ...Array(25).fill(429)]);
    expect(warnings()).to.have.length(1);
    expect(warnings()[0]!.level).to.equal(40);
    expect(String(warnings()[0]!.msg)).to.match(/trust proxy/);
    expect(JSON.stringify(warnings()[0])).to.not.include('198.51.100');
  });

  it('warns once per limiter, only when a forwarded address arrives, and not when trustedProxyHops: 0 says there is no proxy', async () => {
    const quiet = anonymousApp(undefined);
    await statuses(quiet.app, 3);
    expect(quiet.warnings()).to.have.length(0);
    const second = anonymousApp(undefined);
    await statuses(second.app, 1, '192.0.2.1');
    expect(second.warnings()).to.have.length(1);
    const none = anonymousApp(undefined, { trustedProxyHops: 0 });
    expect(await statuses(none.app, 6, '192.0.2.1')).to.deep.equal([200, 200, 200, 200, 200, 429]);
    expect(none.warnings()).to.have.length(0);
  });

  it('trustedProxyHops wins over trust proxy: the hop it names is the caller, whatever is forged before it', async () => {
    // trust proxy true would take the left-most (forgeable) address; one trusted hop takes the last.
    const { app } = anonymousApp(true, { trustedProxyHops: 1 });
    const codes: number[] = [];
    for (let i = 1; i <= 6; i++) codes.push(...(await statuses(app, 1, `10.9.9.${i}, 203.0.113.50`)));
    expect(codes).to.deep.equal([200, 200, 200, 200, 200, 429]);
    const trustAll = anonymousApp(true);
    for (let i = 1; i <= 6; i++) expect(await statuses(trustAll.app, 1, `10.9.9.${i}, 203.0.113.50`)).to.deep.equal([200]);
  });

  it('keys IPv4 by the whole address and IPv6 by its /56 by default; both prefix lengths are options', async () => {
    const byDefault = anonymousApp(1);
    expect(await statuses(byDefault.app, 5, '203.0.113.1')).to.deep.equal(Array(5).fill(200));
    expect(await statuses(byDefault.app, 1, '203.0.113.2')).to.deep.equal([200]);
    // 2001:db8:0:100:: and 2001:db8:0:1ff:: share a /56; 2001:db8:0:200:: is the next one.
    expect(await statuses(byDefault.app, 5, '2001:db8:0:100::1')).to.deep.equal(Array(5).fill(200));
    expect(await statuses(byDefault.app, 1, '2001:db8:0:1ff:ffff::9')).to.deep.equal([429]);
    expect(await statuses(byDefault.app, 1, '2001:db8:0:200::1')).to.deep.equal([200]);
    const wide = anonymousApp(1, { ipv4Prefix: 24, ipv6Prefix: 64 });
    expect(await statuses(wide.app, 5, '203.0.113.1')).to.deep.equal(Array(5).fill(200));
    expect(await statuses(wide.app, 1, '203.0.113.200')).to.deep.equal([429]);
    expect(await statuses(wide.app, 5, '2001:db8:0:100::1')).to.deep.equal(Array(5).fill(200));
    expect(await statuses(wide.app, 1, '2001:db8:0:101::1')).to.deep.equal([200]);
  });

  it('rejects prefix lengths out of range, naming each option', () => {
    for (const [opts, paths] of [
      [{ ipv4Prefix: 33, ipv6Prefix: 16 }, ['ipv4Prefix', 'ipv6Prefix']],
      [{ ipv4Prefix: 24.5 }, ['ipv4Prefix']],
      [{ ipv6Prefix: 129, trustedProxyHops: -1 }, ['ipv6Prefix', 'trustedProxyHops']],
    ] as const) {
      try {
        rateLimiter({ policy: demoPolicy(), identify: () => undefined, ...opts });
        expect.fail('should throw');
      } catch (err) {
        expect(err).to.be.instanceOf(ConfigError);
        expect((err as ConfigError).problems.map((p) => p.path)).to.have.members([...paths]);
        expect((err as ConfigError).message).to.include(paths[0]);
      }
    }
  });

  it('works the same on Express 4', async () => {
    const trusted = anonymousApp(1, {}, express4);
    for (let i = 1; i <= 3; i++) expect(await statuses(trusted.app, 6, `198.51.100.${i}`)).to.deep.equal([200, 200, 200, 200, 200, 429]);
    const untrusted = anonymousApp(undefined, {}, express4);
    expect(await statuses(untrusted.app, 3, '198.51.100.1')).to.deep.equal([200, 200, 200]);
    expect(await statuses(untrusted.app, 3, '198.51.100.2')).to.deep.equal([200, 200, 429]);
    expect(untrusted.warnings()).to.have.length(1);
  });
});

import { expect } from 'chai';
import express, { type Express } from 'express';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createAdminApp } from '../../admin/app.js';
import { KeySchema } from '../../bus/keys.js';
import { SCHEMA_VERSION } from '../../bus/codec.js';
import { PolicyStore } from '../../bus/policy-store.js';
import type { RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { RELEASE } from '../../middleware/release.js';
import type { RedisProcess } from '../../scripts/redis-server.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';
import { redisSuite } from '../support/redis-suite.js';
import { POLICY_SIGNER, redisLimiter, until } from '../support/redis-members.js';

const ADMIN = 'admin-token-0123456789-0123456789';
const GLASS = 'break-glass-token-0123456789-01234';

describe('admin enforcement-health page (real redis-server): sign-in, what it shows, escaping', function () {
  this.timeout(30_000);
  let redis: RedisProcess;
  let raw: Redis;
  let app: Express;
  let prefix: string;
  const limiters: RateLimiterMiddleware[] = [];

  redisSuite('ui', (s) => ({ redis, raw, prefix } = s));
  beforeEach(() => {
    app = createAdminApp({ store: new PolicyStore(raw, POLICY_SIGNER, prefix), redis: raw, prefix, adminToken: ADMIN, breakGlassToken: GLASS, keyHash: TEST_KEY_HASH, logger: captureLogger().logger });
  });
  afterEach(async () => {
    await Promise.all(limiters.splice(0).map((l) => l.close()));
  });

  const as = (token: string) => ({ Authorization: `Bearer ${token}` });

  it('shows only a sign-in form without the admin token; the break-glass token does not open it', async () => {
    for (const headers of [{}, as(GLASS), as('not-the-token')]) {
      const res = await request(app).get('/admin/ui').set(headers);
      expect(res.status).to.equal(401);
      expect(res.type).to.equal('text/html');
      expect(res.text).to.include('<form method="post" action="/admin/ui/login">');
      expect(res.text).to.not.include('Policy version');
    }
  });

  it('signs in with the admin token for a session cookie (HttpOnly, SameSite=Strict, no token in it) and signs out', async () => {
    const wrong = await request(app).post('/admin/ui/login').type('form').send({ token: GLASS });
    expect(wrong.status).to.equal(401);
    expect(wrong.text).to.include('That is not the admin token');
    expect(wrong.headers['set-cookie']).to.equal(undefined);

    const login = await request(app).post('/admin/ui/login').type('form').send({ token: ADMIN });
    expect(login.status).to.equal(303);
    expect(login.headers.location).to.equal('/admin/ui');
    const set = String(login.headers['set-cookie']);
    expect(set).to.match(/^frl_admin_ui=[A-Za-z0-9_-]{43}; HttpOnly; SameSite=Strict; Path=\/admin\/ui; Max-Age=28800$/);
    expect(set).to.not.include(ADMIN);
    const session = set.split(';')[0]!;

    const page = await request(app).get('/admin/ui').set('Cookie', session);
    expect(page.status).to.equal(200);
    expect(page.headers['cache-control']).to.equal('no-store');
    expect(page.text).to.include('<meta http-equiv="refresh" content="5">');
    expect(page.text).to.include('Policy version');
    // A forged cookie is a stranger.
    expect((await request(app).get('/admin/ui').set('Cookie', 'frl_admin_ui=forged')).status).to.equal(401);

    await request(app).post('/admin/ui/logout').set('Cookie', session).expect(303);
    expect((await request(app).get('/admin/ui').set('Cookie', session)).status).to.equal(401);
  });

  it('shows one verdict and every node’s policy version, switch, degraded flag, fold age, shards and credit', async () => {
    const limiter = redisLimiter(redis.url, prefix, 'ui-node', 'ui-check-key', { shards: 8 });
    limiters.push(limiter);
    await limiter.ready();
    const empty = (await request(app).get('/admin/ui').set(as(ADMIN)).expect(200)).text;
    expect(empty).to.include('data-ok="false"');
    expect(empty).to.include('No policy is stored');

    await request(app).put('/admin/v1/policy').set(as(ADMIN)).send({ policy: demoPolicy(), reason: 'ui check policy' }).expect(200);
    const gateway = express()
      .use(limiter)
      .use((_req, res) => {
        res.json({ ok: true });
      });
    let page = '';
    await until(
      async () => {
        await request(gateway).get('/x');
        page = (await request(app).get('/admin/ui').set(as(ADMIN)).expect(200)).text;
        return page.includes('data-ok="true"') && !/Credit leased \/ allowance<\/dt><dd>0 \//.test(page);
      },
      'the page to show the fleet ok with credit leased',
      10_000,
    );
    expect(page).to.include('Every node is enforcing the stored policy');
    expect(page).to.match(/<dt>Policy version<\/dt><dd>1<\/dd>/);
    expect(page).to.match(/<dt>Shards owned<\/dt><dd>8 \/ 8<\/dd>/);
    // The node's row: id, release, policy 1, enforcing, not degraded, a fold age, 8 shards.
    expect(page).to.include(`<tr><td>ui-node</td><td>${RELEASE} (schema ${SCHEMA_VERSION})</td><td>1</td><td>yes</td><td>no</td>`);
    expect(page).to.match(/<td>no<\/td><td>\d+ ms<\/td><td>8<\/td>/);
    // Concentration: a column per node, the fleet's figure and the gate's verdict (none yet: no busy window ended).
    expect(page).to.include('<th>Concentration p50 / p95 (windows)</th>');
    expect(page).to.include('<dd data-verdict="insufficient">-: too few busy key windows measured yet (gate: p95 ≤ 1.5× uniform, ≥ 100 windows)</dd>');

    // A member speaking another bus schema (its envelopes and ours refuse each other): not ok.
    const keys = new KeySchema(prefix);
    const status = {
      degraded: false,
      foldAgeMs: 0,
      enforcing: true,
      policyVersion: 1,
      buckets: 0,
      leases: { ledgers: 0, committed: 0, allowance: 0 },
      eventsDropped: 0,
      release: '9.0.0',
      schemaVersion: SCHEMA_VERSION + 1,
      nodeEpoch: 'e-next',
      ownedShards: 0,
      at: Date.now(),
    };
    await raw.multi().zadd(keys.ctl('members'), Date.now(), 'next-node').hset(keys.ctl('epochs'), 'next-node', 'e-next').hset(keys.ctl('status'), 'next-node', JSON.stringify(status)).exec();
    const health = (await request(app).get('/admin/v1/health').set(as(ADMIN)).expect(200)).body as { ok: boolean; releases: Array<{ release: string; schemaVersion: number; nodes: string[] }> };
    expect(health.ok).to.equal(false);
    expect(health.releases).to.deep.equal([
      { release: RELEASE, schemaVersion: SCHEMA_VERSION, nodes: ['ui-node'] },
      { release: '9.0.0', schemaVersion: SCHEMA_VERSION + 1, nodes: ['next-node'] },
    ]);
    page = (await request(app).get('/admin/ui').set(as(ADMIN)).expect(200)).text;
    expect(page).to.include('Nodes speak different bus schema versions');
    // Its status, of a release before concentration was published, has none: buckets 0, '-', events dropped 0.
    expect(page).to.match(/<tr><td>next-node<\/td>.*<td>0<\/td><td>-<\/td><td>0<\/td>/);
    await raw.zrem(keys.ctl('members'), 'next-node');

    await request(app).post('/admin/v1/kill-switch').set(as(GLASS)).send({ enforce: false, reason: 'ui check: switch off' }).expect(200);
    page = (await request(app).get('/admin/ui').set(as(ADMIN)).expect(200)).text;
    expect(page).to.include('data-ok="false"');
    expect(page).to.include('The kill switch has enforcement off');
    expect(page).to.include('<dt>Kill switch</dt><dd>enforcement off</dd>');
  });

  it('escapes what members wrote: a node id is text, never markup', async () => {
    const keys = new KeySchema(prefix);
    await raw.zadd(keys.ctl('members'), Date.now(), '<script>alert(1)</script>');
    const page = (await request(app).get('/admin/ui').set(as(ADMIN)).expect(200)).text;
    expect(page).to.include('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(page).to.not.include('<script>');
    expect(page).to.include('no status from this process yet');
  });
});

import { expect } from 'chai';
import express, { type Express } from 'express';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createAdminApp } from '../../admin/app.js';
import { HISTORY_RETENTION_MS, retention } from '../../admin/jobs.js';
import { PolicyStore } from '../../bus/policy-store.js';
import { HistoryKeys, HistoryWriter, readHistory } from '../../bus/traffic-history.js';
import { systemClock } from '../../lib/clock.js';
import { KeyHasher } from '../../lib/key-id.js';
import { HOUR_MS, hourOf } from '../../lib/peak-history.js';
import { compilePolicy, type PolicyDoc } from '../../lib/policy.js';
import type { RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import type { RedisProcess } from '../../scripts/redis-server.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';
import { redisSuite } from '../support/redis-suite.js';
import { POLICY_SIGNER, redisLimiter, until, windowLeftMs } from '../support/redis-members.js';

const ADMIN = 'admin-token-0123456789';
const GLASS = 'break-glass-token-0123456789';
const hasher = new KeyHasher(TEST_KEY_HASH.versions);
const KEY = hasher.hash('staged-key');
const OTHER = hasher.hash('quiet-key');
const DAY = 86_400_000;

/** The demo policy with the free plan's burst window at `burst` per `windowMs` (1 s). */
function withBurst(burst: number, windowMs = 1000): Omit<PolicyDoc, 'version'> {
  const { version: _v, ...d } = demoPolicy();
  return { ...d, plans: { ...d.plans, free: { windows: [{ name: 'burst', limit: burst, windowMs }, d.plans.free!.windows[1]!] } } };
}

/** Sends GETs as `key` to `apps` in turn until `n` were admitted; a 429 (an ask that missed its deadline on a busy machine) is retried. */
async function admit(apps: readonly Express[], key: string, n: number): Promise<void> {
  for (let i = 0, ok = 0, tries = 0; ok < n; i++) {
    const status = (
      await request(apps[i % apps.length]!)
        .get('/')
        .set('x-key', key)
    ).status;
    if (status === 200) ok++;
    else if (status !== 429 || ++tries > 200) throw new Error(`${key}: status ${status} after ${ok} admitted`);
    else await new Promise((r) => setTimeout(r, 10));
  }
}

describe('policy staging (real redis-server): traffic history, stage, activate, retention', function () {
  this.timeout(60_000);
  let redis: RedisProcess;
  let raw: Redis;
  let store: PolicyStore;
  let app: Express;
  let prefix: string;
  const limiters: RateLimiterMiddleware[] = [];

  redisSuite('stg', (s) => ({ redis, raw, prefix } = s));
  beforeEach(() => {
    store = new PolicyStore(raw, POLICY_SIGNER, prefix);
    app = createAdminApp({ store, redis: raw, prefix, adminToken: ADMIN, breakGlassToken: GLASS, keyHash: TEST_KEY_HASH, logger: captureLogger().logger });
  });
  afterEach(async () => {
    await Promise.all(limiters.splice(0).map((l) => l.close()));
  });

  const as = { Authorization: `Bearer ${ADMIN}` };
  const stage = (policy: object, extra: object = {}) =>
    request(app)
      .post('/admin/v1/policy/stage')
      .set(as)
      .send({ policy, reason: 'tighten burst', ...extra });
  const activate = (body: object) => request(app).post('/admin/v1/policy/activate').set(as).send(body);

  /** History as two owners and a node would write it: a peak of `count` for KEY's 1 s window, in the hour of `at`. */
  async function record(at: number, count: number, allowance = 10, keyId = KEY): Promise<void> {
    const owner1 = new HistoryWriter(raw, prefix, { now: () => at } as typeof systemClock);
    const owner2 = new HistoryWriter(raw, prefix, { now: () => at } as typeof systemClock);
    owner1.peaks.add(keyId, 1000, at, count, allowance);
    owner2.peaks.add(keyId, 1000, at + 1000, Math.max(2, count - 3), allowance); // a smaller window elsewhere: the max stays
    owner2.sightings.note(keyId, 'acme', 'default', compilePolicy(demoPolicy()).limitsFor(keyId, 'acme'));
    await owner1.flush();
    await owner2.flush();
  }

  it('peaks from several writers merge as a max per hour; the history reads back with sightings, and skips counts no limit can refuse', async () => {
    const now = Date.now();
    await record(now, 9);
    await record(now, 7); // lower: changes nothing
    await record(now - 2 * HOUR_MS, 4);
    const h = await readHistory(raw, prefix, now, 720);
    expect(h.hoursWithData).to.equal(2);
    expect(h.firstHour).to.equal(hourOf(now - 2 * HOUR_MS));
    expect(h.peaks.filter((p) => p.keyId === KEY).map((p) => [p.hour, p.count, p.saturated])).to.have.deep.members([
      [hourOf(now), 9, false],
      [hourOf(now - 2 * HOUR_MS), 4, false],
    ]);
    expect(h.sightings.get(KEY)).to.deep.equal({ tenant: 'acme', routeClass: '', windowLengths: [1000, 60_000] });
    // Read with a floor of 5 (the smallest candidate limit): the 4 cannot be throttled, it is not read.
    expect((await readHistory(raw, prefix, now, 720, 5)).peaks.map((p) => p.count)).to.deep.equal([9]);
    // What the history holds, per hour: key ids only.
    const keys = new HistoryKeys(prefix);
    expect(await raw.zrange(keys.peaks(hourOf(now)), 0, -1)).to.deep.equal([`${KEY} 1000`]);
    expect(Object.keys(await raw.hgetall(keys.seen(hourOf(now))))).to.deep.equal([KEY]);
  });

  it('stage → activate: the candidate is judged, stored signed and audited; activation stores it as the next version; a stale stage is refused', async () => {
    await request(app).put('/admin/v1/policy').set(as).send({ policy: demoPolicy(), reason: 'initial limits' }).expect(200);
    await record(Date.now(), 9);
    const staged = await stage(withBurst(5)).expect(201);
    expect(staged.body.baseVersion).to.equal(1);
    expect(staged.body.version).to.equal(2);
    const report = staged.body.report;
    expect(report.newlyThrottled.count).to.equal(1);
    expect(report.newlyThrottled.keys[0]).to.include({ keyId: KEY, window: 'burst', windowMs: 1000, peak: 9, oldLimit: 10, newLimit: 5 });
    expect(report.hoursWithData).to.equal(1);
    expect(report.unjudged.count).to.equal(0);
    // Stored signed; the review copy reads back.
    const rec = JSON.parse((await raw.hget(`${prefix}:{pol}:staged`, staged.body.id))!) as { json: string; kid: string; mac: string };
    expect(() => POLICY_SIGNER.verify('stage', rec.json, rec.kid, rec.mac)).not.to.throw();
    const review = await request(app).get(`/admin/v1/policy/staged/${staged.body.id}`).set(as).expect(200);
    expect(review.body.policy.plans.free.windows[0].limit).to.equal(5);
    expect(review.body.report).to.deep.equal(report);
    // Nothing is in force yet.
    expect((await store.current())!.version).to.equal(1);
    // It would newly throttle a key: activation says so, names the field and changes nothing.
    const refused = await activate({ id: staged.body.id, reason: 'go ahead' }).expect(400);
    expect(refused.headers['content-type']).to.match(/application\/problem\+json/);
    expect(refused.body.problems.map((p: { path: string }) => p.path)).to.deep.equal(['acceptThrottled']);
    const done = await activate({ id: staged.body.id, reason: 'reviewed: key 1 moves to pro', acceptThrottled: true }).expect(200);
    expect(done.body).to.deep.equal({ id: staged.body.id, version: 2 });
    const current = (await store.current())!;
    expect(current.version).to.equal(2);
    expect(current.policy.plans.free!.windows[0]!.limit).to.equal(5);
    const audit = await store.auditLog(10);
    expect(audit.slice(0, 2).map((e) => [e.action, e.reason])).to.deep.equal([
      ['policy.activate', 'reviewed: key 1 moves to pro'],
      ['policy.stage', 'tighten burst'],
    ]);
    expect(audit[0]!.detail).to.contain(`stage ${staged.body.id}`);
    expect(audit[1]!.detail).to.contain('1 newly throttled');
    // Activated once: the version it was staged over is gone, so again is stale.
    const again = await activate({ id: staged.body.id, reason: 'twice', acceptThrottled: true }).expect(409);
    expect(again.body).to.include({ error: 'STALE_STAGE', baseVersion: 1, currentVersion: 2 });
    // A stage overtaken by another change is stale too.
    const next = await stage(withBurst(20)).expect(201);
    expect(next.body.report.newlyThrottled.count).to.equal(0);
    await request(app)
      .put('/admin/v1/plans/gold')
      .set(as)
      .send({ windows: [{ name: 'burst', limit: 500, windowMs: 1000 }], reason: 'gold plan' })
      .expect(200);
    const stale = await activate({ id: next.body.id, reason: 'late' }).expect(409);
    expect(stale.body.error).to.equal('STALE_STAGE');
    expect(stale.body.title).to.match(/staged over version 2, and version 3 is in force/);
    expect((await store.current())!.version).to.equal(3);
  });

  it('a stage record changed without the policy secret is refused at activation; bad bodies are problems naming the field', async () => {
    await request(app).put('/admin/v1/policy').set(as).send({ policy: demoPolicy(), reason: 'initial limits' }).expect(200);
    const staged = await stage(withBurst(20)).expect(201);
    const key = `${prefix}:{pol}:staged`;
    const rec = JSON.parse((await raw.hget(key, staged.body.id))!) as { json: string; kid: string; mac: string };
    await raw.hset(key, staged.body.id, JSON.stringify({ ...rec, json: rec.json.replace('"limit":20', '"limit":2000') }));
    const forged = await activate({ id: staged.body.id, reason: 'go ahead' }).expect(409);
    expect(forged.body.error).to.equal('STORE_RECORD_REFUSED');
    expect((await store.current())!.version).to.equal(1);
    const paths = async (res: request.Response): Promise<string[]> => {
      expect(res.status).to.equal(400);
      expect(res.headers['content-type']).to.match(/application\/problem\+json/);
      return (res.body.problems as Array<{ path: string }>).map((p) => p.path);
    };
    expect(await paths(await request(app).post('/admin/v1/policy/stage').set(as).send({ reason: 'x' }))).to.have.members(['policy', 'reason']);
    expect(await paths(await stage(withBurst(5), { hours: 0 }))).to.deep.equal(['hours']);
    expect(await paths(await stage({ ...withBurst(5), defaultPlan: 'nope' }))).to.deep.equal(['policy.defaultPlan']);
    expect(await paths(await activate({ reason: 'go ahead' }))).to.deep.equal(['id']);
    expect(await paths(await activate({ id: 'bad id!', reason: 'go ahead', acceptThrottled: 'yes' }))).to.have.members(['id', 'acceptThrottled']);
    expect((await activate({ id: 'nosuchstage', reason: 'go ahead' }).expect(404)).body.error).to.equal('NO_SUCH_STAGE');
    expect((await request(app).post('/admin/v1/policy/stage').send({ policy: {}, reason: 'x' })).status).to.equal(401);
    // Nothing bad was staged or audited.
    expect(await raw.hlen(key)).to.equal(1);
    expect((await store.auditLog(10)).filter((e) => e.action === 'policy.stage')).to.have.length(1);
  });

  it('retention deletes the traffic history past 30 days (configurable), keeps the rest, audits the run, and is idempotent', async () => {
    const now = Date.now();
    await record(now - HISTORY_RETENTION_MS - DAY, 9);
    await record(now - HISTORY_RETENTION_MS - 2 * HOUR_MS, 8);
    await record(now - HISTORY_RETENTION_MS + DAY, 7);
    await record(now, 6);
    expect((await readHistory(raw, prefix, now, 24 * 40)).hoursWithData).to.equal(4);
    expect(await retention(raw, store, prefix, now)).to.deep.equal({ eventsDeleted: 0, auditDeleted: 0, historyHoursDeleted: 2 });
    const left = await readHistory(raw, prefix, now, 24 * 40);
    expect(left.peaks.map((p) => p.count).sort()).to.deep.equal([6, 7]);
    expect(await raw.exists(new HistoryKeys(prefix).peaks(hourOf(now - HISTORY_RETENTION_MS - DAY)))).to.equal(0);
    const audit = await store.auditLog(5);
    expect(audit.map((e) => e.action)).to.deep.equal(['retention']);
    expect(audit[0]!.detail).to.contain('2 hours of traffic history');
    expect(await retention(raw, store, prefix, now)).to.deep.equal({ eventsDeleted: 0, auditDeleted: 0, historyHoursDeleted: 0 });
    // Kept a week only: the 29-day-old hour goes too.
    expect((await retention(raw, store, prefix, now, { historyRetentionMs: 7 * DAY })).historyHoursDeleted).to.equal(1);
  });

  it('a fleet of two records the traffic it served; a stricter candidate reports the key that sent it, a quiet key is fine', async () => {
    const W = 3000;
    const policy = { ...withBurst(40, W), version: 1 } as PolicyDoc;
    const apps = ['stg-a', 'stg-b'].map((nodeId) => {
      const limiter = redisLimiter(redis.url, prefix, nodeId, '', { policy, identify: (req) => ({ principal: String(req.headers['x-key']), tenant: 'acme' }) });
      limiters.push(limiter);
      const a = express();
      a.use(limiter);
      a.get('/', (_req, res) => void res.send('ok'));
      return a;
    });
    await Promise.all(limiters.map((l) => l.ready()));
    await request(app).put('/admin/v1/policy').set(as).send({ policy, reason: 'initial limits' }).expect(200);
    await until(() => limiters.every((l) => l.policy().version === 1), 'both nodes on version 1');
    // 20 admissions of KEY inside one 3 s window (the peak of 20 below says none fell in the next), across both nodes; 2 of the quiet key.
    await until(() => windowLeftMs(KEY, W) > 2500, 'a fresh window for the key', 4000);
    await admit(apps, 'staged-key', 20);
    await admit(apps, 'quiet-key', 2);
    // The window ends, its owner sweeps it (once a second) and writes its peak (every 5 s).
    await until(async () => (await readHistory(raw, prefix, Date.now(), 2)).peaks.some((p) => p.keyId === KEY && p.windowMs === W), 'the key’s 3 s peak in the history', 20_000);
    const h = await readHistory(raw, prefix, Date.now(), 2);
    const peak = h.peaks.find((p) => p.keyId === KEY && p.windowMs === W)!;
    expect(peak.count).to.equal(20);
    expect(h.sightings.get(KEY)).to.deep.equal({ tenant: 'acme', routeClass: '', windowLengths: [W, 60_000] });
    expect(h.sightings.get(OTHER)?.tenant).to.equal('acme');
    const staged = await stage(withBurst(10, W)).expect(201);
    expect(staged.body.report.newlyThrottled.keys).to.deep.equal([{ keyId: KEY, window: 'burst', windowMs: W, peak: 20, hour: peak.hour, hours: 1, oldLimit: 40, newLimit: 10 }]);
    expect(staged.body.report.keysSeen).to.equal(2);
    // Looser than what was sent: nobody. A 1 s burst window instead: no history of that length.
    expect((await stage(withBurst(25, W)).expect(201)).body.report.newlyThrottled.count).to.equal(0);
    const other = (await stage(withBurst(10)).expect(201)).body.report;
    expect(other.unjudged.keys.map((k: { keyId: string; windowMs: number }) => [k.keyId, k.windowMs])).to.have.deep.members([
      [KEY, 1000],
      [OTHER, 1000],
    ]);
    // Activated, every node applies it.
    await activate({ id: staged.body.id, reason: 'reviewed', acceptThrottled: true }).expect(200);
    await until(() => limiters.every((l) => l.policy().version === 2 && l.policy().limitsFor(KEY, 'acme').windows[0]!.limit === 10), 'both nodes on the activated version', 10_000);
  });
});

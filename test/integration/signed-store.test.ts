import { expect } from 'chai';
import express, { type Express } from 'express';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createAdminApp } from '../../admin/app.js';
import { PolicyStore } from '../../bus/policy-store.js';
import { KeyHasher } from '../../lib/key-id.js';
import type { RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import type { RedisProcess } from '../../scripts/redis-server.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';
import { redisSuite } from '../support/redis-suite.js';
import { POLICY_SIGNER, redisLimiter, until } from '../support/redis-members.js';

const ADMIN = 'admin-token-0123456789';
const GLASS = 'break-glass-token-0123456789';
const as = (token: string) => ({ Authorization: `Bearer ${token}` });

/** The free plan's burst limit as a node resolves it for some key. */
function freeBurst(limiter: RateLimiterMiddleware): number {
  return limiter.policy().limitsFor(new KeyHasher(TEST_KEY_HASH.versions).hash('someone'), 'acme').windows[0]!.limit;
}

/** `fleet_ratelimit_policy_rejections_total` of one limiter, by reason. */
async function rejections(limiter: RateLimiterMiddleware): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const m of (await limiter.metrics.metrics()).matchAll(/^fleet_ratelimit_policy_rejections_total\{reason="(\w+)"[^}]*\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

describe('the policy store is signed (real redis-server): what a Redis writer without the secret can change', function () {
  this.timeout(30_000);
  let redis: RedisProcess;
  let raw: Redis;
  let app: Express;
  let store: PolicyStore;
  let prefix: string;
  let limiter: RateLimiterMiddleware;
  let logs: ReturnType<typeof captureLogger>;

  // A minute's window, so the exhausted key stays exhausted however long a loaded machine takes.
  const free = (limit: number) => ({ ...demoPolicy(), plans: { ...demoPolicy().plans, free: { windows: [{ name: 'burst', limit, windowMs: 60_000 }] } } });
  const putPolicy = (policy: object, reason: string) => request(app).put('/admin/v1/policy').set(as(ADMIN)).send({ policy, reason });
  const health = async () =>
    (await request(app).get('/admin/v1/health').set(as(ADMIN)).expect(200)).body as {
      ok: boolean;
      policyVersion: number | null;
      enforcing: boolean;
      refusedRecords: Array<{ record: string; refused: string }>;
    };

  redisSuite('sig', (s) => ({ redis, raw, prefix } = s));
  beforeEach(async () => {
    store = new PolicyStore(raw, POLICY_SIGNER, prefix);
    app = createAdminApp({ store, redis: raw, prefix, adminToken: ADMIN, breakGlassToken: GLASS, keyHash: TEST_KEY_HASH, logger: captureLogger().logger });
    logs = captureLogger();
    limiter = redisLimiter(redis.url, prefix, 'signed-node', 'signed-store-key', { logger: logs.logger, shards: 8 });
    await limiter.ready();
    expect((await putPolicy(free(3), 'tight free plan')).status).to.equal(200);
    await until(() => freeBurst(limiter) === 3, 'the node to take version 1', 3000);
  });
  afterEach(async () => {
    await limiter.close();
  });

  it('a kill switch written into Redis without the secret is refused and counted: the exhausted key stays at 429', async () => {
    const gateway = express()
      .use(limiter)
      .use((_req, res) => {
        res.json({ ok: true });
      });
    const before: number[] = [];
    for (let i = 0; i < 8; i++) before.push((await request(gateway).get('/x')).status);
    expect(before, before.join()).to.include(429);
    // Unsigned, then with a made-up MAC, then under an unknown secret version.
    for (const extra of [[], ['kid', 'b1', 'mac', 'AAAA'], ['kid', 'b9', 'mac', 'AAAA']]) {
      await raw.hset(`${prefix}:{pol}:switch`, 'enforce', '0', 'at', String(Date.now()), 'by', 'intruder', 'reason', 'free traffic', ...extra);
      await raw.publish(`${prefix}:policy`, 'switch');
      await until(async () => Object.values(await rejections(limiter)).reduce((a, b) => a + b, 0) >= (extra.length === 0 ? 1 : extra[1] === 'b1' ? 2 : 3), 'the refusal', 3000);
    }
    expect(limiter.enforcing).to.equal(true);
    expect((await request(gateway).get('/x')).status).to.equal(429);
    expect(await rejections(limiter)).to.deep.include({ unsigned: 1, mac: 1, secret: 1 });
    expect(logs.text()).to.include('stored record refused');
    // The admin API sees it too, and the break-glass credential replaces it with a signed switch.
    const h = await health();
    expect(h.ok).to.equal(false);
    expect(h.refusedRecords.map((r) => `${r.record}:${r.refused}`)).to.deep.equal(['switch:secret']);
    await request(app).post('/admin/v1/kill-switch').set(as(GLASS)).send({ enforce: true, reason: 'replace the forged switch' }).expect(200);
    expect((await health()).refusedRecords).to.deep.equal([]);
  });

  it('a forged policy of version 2^53−1 is refused; the next admin change builds on the last signed version and reaches the node', async () => {
    const forged = JSON.stringify({ version: Number.MAX_SAFE_INTEGER, policy: { ...free(3000), version: Number.MAX_SAFE_INTEGER }, at: Date.now(), by: 'intruder', reason: 'x' });
    // Over version 1's record: its kid and mac stay, and do not match the forged JSON.
    await raw.hset(`${prefix}:{pol}:current`, 'version', String(Number.MAX_SAFE_INTEGER), 'json', forged);
    await raw.publish(`${prefix}:policy`, String(Number.MAX_SAFE_INTEGER));
    await until(async () => (await rejections(limiter)).mac === 1, 'the refusal', 3000);
    expect(freeBurst(limiter)).to.equal(3);
    expect((await request(app).get('/admin/v1/policy').set(as(ADMIN))).status).to.equal(409);
    expect((await health()).policyVersion).to.equal(null);
    // Not stuck: the next change is version 2, over the forged record, and says so in the audit.
    const put = await putPolicy(free(5), 'replace the forged policy');
    expect(put.status, JSON.stringify(put.body)).to.equal(200);
    expect(put.body.version).to.equal(2);
    await until(() => freeBurst(limiter) === 5, 'the node to take version 2', 3000);
    const audit = (await store.auditLog(1))[0]!;
    expect(audit.detail).to.equal('version 2 over a refused current record (mac)');
    expect(
      (
        await request(app)
          .put('/admin/v1/plans/free')
          .set(as(ADMIN))
          .send({ windows: [{ name: 'burst', limit: 6, windowMs: 1000 }], reason: 'then as usual' })
      ).body.version,
    ).to.equal(3);
  });

  it('an older signed record written back (a replay) is refused; after Redis lost the store, the policy applied again from version 1 is taken', async () => {
    await putPolicy(free(4), 'version 2');
    await until(() => freeBurst(limiter) === 4, 'version 2', 3000);
    // Version 1's signed record, copied back from the history.
    const v1 = JSON.parse((await raw.hget(`${prefix}:{pol}:versions`, '1'))!) as { json: string; kid: string; mac: string };
    await raw.hset(`${prefix}:{pol}:current`, 'version', '1', 'json', v1.json, 'kid', v1.kid, 'mac', v1.mac);
    await raw.publish(`${prefix}:policy`, '1');
    await until(async () => (await rejections(limiter)).replay === 1, 'the replay refused', 3000);
    expect(freeBurst(limiter)).to.equal(4);
    // An old signed "off" is a replay too.
    await request(app).post('/admin/v1/kill-switch').set(as(GLASS)).send({ enforce: false, reason: 'drill' }).expect(200);
    await until(() => !limiter.enforcing, 'enforcement off', 3000);
    const off = await raw.hgetall(`${prefix}:{pol}:switch`);
    await request(app).post('/admin/v1/kill-switch').set(as(GLASS)).send({ enforce: true, reason: 'drill over' }).expect(200);
    await until(() => limiter.enforcing, 'enforcement on', 3000);
    await raw.hset(`${prefix}:{pol}:switch`, off);
    await raw.publish(`${prefix}:policy`, 'switch');
    await until(async () => (await rejections(limiter)).replay === 2, 'the old switch refused', 3000);
    expect(limiter.enforcing).to.equal(true);

    // Redis loses everything under the prefix; the RUNBOOK's recovery applies the policy again.
    const keys = await raw.keys(`${prefix}:*`);
    await raw.del(...keys);
    expect((await health()).ok).to.equal(false); // no stored policy
    await new Promise((r) => setTimeout(r, 5)); // fixed: the clock must move on, for a later `at` than version 2's
    expect((await putPolicy(free(2), 'restore after data loss')).body.version).to.equal(1);
    await until(() => freeBurst(limiter) === 2, 'the node to take the new version 1', 3000);
    expect(logs.text()).to.include('policy store was reset');
    await until(async () => (await health()).policyVersion === 1, 'the health view', 3000);
  });
});

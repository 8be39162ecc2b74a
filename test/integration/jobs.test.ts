import { expect } from 'chai';
import express from 'express';
import { Redis } from 'ioredis';
import request from 'supertest';
import { createAdminApp } from '../../admin/app.js';
import { AUDIT_RETENTION_MS, EVENTS_RETENTION_MS, reap, retention, startWorker } from '../../admin/jobs.js';
import { EventLog, type LimitEvent, type LimitRefusal } from '../../bus/events.js';
import { PolicyStore } from '../../bus/policy-store.js';
import { KeyHasher } from '../../lib/key-id.js';
import type { RedisProcess } from '../../scripts/redis-server.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';
import { redisSuite } from '../support/redis-suite.js';
import { POLICY_SIGNER, redisLimiter, SHARDS, until } from '../support/redis-members.js';

const ADMIN = 'admin-token-0123456789';
const hasher = new KeyHasher(TEST_KEY_HASH.versions);
const DAY = 86_400_000;

function refusal(keyId: string, at: number): LimitRefusal {
  return { at, keyId, class: 'quota', status: 429, window: 'burst', routeClass: 'default', correlationId: `c-${at}`, node: 'n1' };
}

describe('maintenance jobs (BullMQ), limit events, subject access and erasure (real redis-server)', function () {
  this.timeout(30_000);
  let redis: RedisProcess;
  let raw: Redis;
  let prefix: string;
  const cleanup: Array<() => Promise<unknown>> = [];

  redisSuite('job', (s) => ({ redis, raw, prefix } = s));
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  it('the reaper claims a dead process’s pending entries for the shard’s owner and removes its consumer and membership; a second run finds nothing', async () => {
    const now = Date.now();
    // A live owner process of shard 0 ("a"), and a process ("ghost") that read two reports of the
    // shard and died without acking, over an hour ago.
    await raw.zadd(`${prefix}:{ctl}:members`, now, 'a', now - 2 * 3_600_000, 'ghost');
    await raw.hset(`${prefix}:{ctl}:epochs`, 'a', 'ea', 'ghost', 'e0');
    await raw.hset(`${prefix}:{ctl}:owners`, '0', `a/ea|7|${now + 60_000}`);
    const stream = `${prefix}:{s0}:reports`;
    await raw.xgroup('CREATE', stream, 'owners', '0', 'MKSTREAM');
    await raw.xadd(stream, '*', 'v', '1');
    await raw.xadd(stream, '*', 'v', '1');
    await raw.xreadgroup('GROUP', 'owners', 'ghost:e0', 'STREAMS', stream, '>');

    const first = await reap(raw, prefix, SHARDS, now, { consumerIdleMs: 0 }); // (its idle time is real; the dead member's age is injected)
    expect(first).to.deep.equal({ deadConsumers: 1, claimedEntries: 2, removedConsumers: 1, removedMembers: 1, trimmedEntries: 0 });
    const consumers = ((await raw.call('XINFO', 'CONSUMERS', stream, 'owners')) as string[][]).map((c) => [c[1], Number(c[3])]);
    expect(consumers).to.deep.equal([['a:ea', 2]]); // the owner holds them now; it folds them on its next sweep
    expect(await raw.zscore(`${prefix}:{ctl}:members`, 'ghost')).to.equal(null);
    expect(await raw.hget(`${prefix}:{ctl}:epochs`, 'ghost')).to.equal(null);
    // Twice more, at once: nothing left to do, nothing lost.
    const again = await Promise.all([reap(raw, prefix, SHARDS, now, { consumerIdleMs: 0 }), reap(raw, prefix, SHARDS, now, { consumerIdleMs: 0 })]);
    for (const r of again) expect(r).to.deep.equal({ deadConsumers: 0, claimedEntries: 0, removedConsumers: 0, removedMembers: 0, trimmedEntries: 0 });
    expect(((await raw.xpending(stream, 'owners')) as [number])[0]).to.equal(2);
  });

  it('retention deletes only what is past its age (events 30 days, audit 13 months), audits the run, and is safe to run twice', async () => {
    const now = Date.now();
    const store = new PolicyStore(raw, POLICY_SIGNER, prefix);
    const events = `${prefix}:{ev}:events`;
    const audit = `${prefix}:{pol}:audit`;
    await raw.xadd(events, `${now - EVENTS_RETENTION_MS - DAY}-0`, 'keyId', 'v1:old');
    await raw.xadd(events, `${now - EVENTS_RETENTION_MS + DAY}-0`, 'keyId', 'v1:recent');
    await raw.xadd(audit, `${now - AUDIT_RETENTION_MS - DAY}-0`, 'action', 'ancient');
    await raw.xadd(audit, `${now - AUDIT_RETENTION_MS + DAY}-0`, 'action', 'kept');
    expect(await retention(raw, store, prefix, now)).to.deep.equal({ eventsDeleted: 1, auditDeleted: 1, historyHoursDeleted: 0 });
    expect((await raw.xrange(events, '-', '+')).map(([, f]) => f[1])).to.deep.equal(['v1:recent']);
    const actions = (await store.auditLog(10)).map((e) => e.action);
    expect(actions).to.deep.equal(['retention', 'kept']);
    expect(await retention(raw, store, prefix, now)).to.deep.equal({ eventsDeleted: 0, auditDeleted: 0, historyHoursDeleted: 0 });
    expect((await store.auditLog(10)).length).to.equal(2);
  });

  it('a node records its 429s as limit events, one per window with their count (key id, window, class, correlation ids; never the raw key)', async () => {
    // Ten a minute: the twelve requests share one window however slowly a loaded machine sends them.
    const policy = demoPolicy({
      plans: {
        ...demoPolicy().plans,
        free: {
          windows: [
            { name: 'burst', limit: 10, windowMs: 60_000 },
            { name: 'sustained', limit: 100, windowMs: 3_600_000 },
          ],
        },
      },
    });
    const limiter = redisLimiter(redis.url, prefix, 'events-node', 'sk_live_customer_one', { policy });
    cleanup.push(() => limiter.close());
    await limiter.ready();
    const app = express()
      .use(limiter)
      .use((_req, res) => {
        res.json({ ok: true });
      });
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => request(app).get('/x').set('x-correlation-id', `corr-${i}`)));
    const statuses = answers.map((r) => r.status);
    // The window each 429 named: burst, or — on a machine so busy that a first ask came back with
    // little — the sustained window, short here for a round. The event must name the same one.
    const named = new Map(answers.flatMap((r, i) => (r.status === 429 ? [[`corr-${i}` as string, (r.body as { window: string }).window] as const] : [])));
    const denied = named.size;
    expect(denied).to.be.at.least(1);
    const keyId = hasher.hash('sk_live_customer_one');
    const stream = new EventLog(raw, prefix);
    // The aggregates wait for their window's end (or flushMs, a minute by default); closing writes them.
    await limiter.close();
    const found = await stream.find([keyId]);
    const count = (pairs: Iterable<readonly [string, number]>): Array<[string, number]> => {
      const by = new Map<string, number>();
      for (const [w, n] of pairs) by.set(w, (by.get(w) ?? 0) + n);
      return [...by].sort();
    };
    // One event per window (two if a window rolled over mid-run), counting every 429 it named.
    expect(found.length, `answers ${statuses.join(' ')}`).to.be.within(1, 2 * new Set(named.values()).size);
    expect(count(found.map((e) => [e.window, e.count] as const))).to.deep.equal(count([...named.values()].map((w) => [w, 1] as const)));
    const odd = found.filter(
      (e) =>
        !(
          e.class === 'quota' &&
          e.status === 429 &&
          named.get(e.firstCorrelationId) === e.window &&
          named.get(e.lastCorrelationId) === e.window &&
          e.first <= e.last &&
          e.node === 'events-node' &&
          e.routeClass === 'default'
        ),
    );
    expect(odd, `answers ${statuses.join(' ')}`).to.deep.equal([]);
    const stored = JSON.stringify(await raw.xrange(`${prefix}:{ev}:events`, '-', '+'));
    expect(stored).to.not.include('sk_live_customer_one');
  });

  it('subject access and erasure by raw key: exactly the subject’s events, under every retained hash-key version, audited', async () => {
    const store = new PolicyStore(raw, POLICY_SIGNER, prefix);
    const log = new EventLog(raw, prefix);
    const versions = [
      { version: 'v1', secret: 'old-secret-0123456789' },
      { version: 'v2', secret: 'new-secret-0123456789' },
    ];
    const rotated = new KeyHasher(versions, 'v2');
    const subject = 'sk_live_subject_key';
    const [v1Id, v2Id] = ['v1', 'v2'].map((v) => new KeyHasher(versions, v).hash(subject)) as [string, string];
    const other = rotated.hash('sk_live_someone_else');
    for (const [id, at] of [
      [v1Id, 1],
      [v2Id, 2],
      [other, 3],
    ] as const)
      log.record(refusal(id, Date.now() - at));
    await log.flush(true);
    const app = createAdminApp({
      store,
      redis: raw,
      prefix,
      adminToken: ADMIN,
      breakGlassToken: 'break-glass-token-0123456789',
      keyHash: { versions, current: 'v2' },
      events: log,
      logger: captureLogger().logger,
    });
    const auth = { Authorization: `Bearer ${ADMIN}` };

    const access = await request(app)
      .post('/admin/v1/subjects/events')
      .set(auth)
      .send({ keys: [subject], reason: 'subject access request 7' })
      .expect(200);
    expect((access.body as { events: LimitEvent[] }).events.map((e) => [e.keyId, e.count]).sort()).to.deep.equal(
      [
        [v1Id, 1],
        [v2Id, 1],
      ].sort(),
    );
    expect(access.body.refusals).to.equal(2);
    expect(access.text).to.not.include(subject);
    const erase = await request(app)
      .post('/admin/v1/subjects/erase')
      .set(auth)
      .send({ keys: [subject], reason: 'erasure request 7' })
      .expect(200);
    expect(erase.body.erased).to.equal(2);
    expect((await log.find([other])).length).to.equal(1);
    expect((await log.find([v1Id, v2Id])).length).to.equal(0);
    const audit = await store.auditLog(5);
    expect(audit.map((e) => [e.action, e.reason, e.detail])).to.deep.equal([
      ['subject.erase', 'erasure request 7', '2 events erased'],
      ['subject.erase.start', 'erasure request 7', ''],
      ['subject.access', 'subject access request 7', '2 events, 2 refusals'],
    ]);
    expect(JSON.stringify(audit)).to.not.include(subject);
  });

  it('runs a reap on demand through the admin API and the BullMQ worker: 202 with an id, then the job’s state and result', async () => {
    const store = new PolicyStore(raw, POLICY_SIGNER, prefix);
    const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const { worker, queue } = await startWorker({ connection, redis: raw, store, prefix, shards: SHARDS });
    cleanup.push(async () => {
      await worker.close();
      await queue.close();
      connection.disconnect();
    });
    const app = createAdminApp({ store, redis: raw, prefix, adminToken: ADMIN, breakGlassToken: 'break-glass-token-0123456789', keyHash: TEST_KEY_HASH, queue, logger: captureLogger().logger });
    const auth = { Authorization: `Bearer ${ADMIN}` };
    expect((await request(app).post('/admin/v1/jobs/compact').set(auth).send({ reason: 'try' })).status).to.equal(400);
    const started = await request(app).post('/admin/v1/jobs/reap').set(auth).send({ reason: 'after node-3 died' }).expect(202);
    const id = (started.body as { id: string }).id;
    let job: { state: string; result: unknown } = { state: '', result: null };
    await until(
      async () => {
        job = (await request(app).get(`/admin/v1/jobs/${id}`).set(auth)).body as typeof job;
        return job.state === 'completed';
      },
      'the job to complete',
      10_000,
    );
    expect(job.result).to.deep.equal({ deadConsumers: 0, claimedEntries: 0, removedConsumers: 0, removedMembers: 0, trimmedEntries: 0 });
    expect((await store.auditLog(1))[0]).to.deep.include({ action: 'job.run', target: 'reap', reason: 'after node-3 died' });
    expect((await request(app).get('/admin/v1/jobs/nope').set(auth)).status).to.equal(404);
  });
});

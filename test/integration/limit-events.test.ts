import { expect } from 'chai';
import express from 'express';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import request from 'supertest';
import { MAX_ENTRY_BYTES, maxEntries } from '../../bus/event-entry.js';
import { EventLog, type LimitRefusal } from '../../bus/events.js';
import { FakeClock } from '../../lib/clock.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { freePort } from '../../scripts/free-port.js';
import type { RedisProcess } from '../../scripts/redis-server.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';
import { redisSuite } from '../support/redis-suite.js';
import { BUS_SECRET } from '../support/redis-members.js';

const KEY = 'v1:AAAAAAAAAAAAAAAAAAAAAA';

/** Bytes Redis holds for `key`, every stream node counted. */
async function memoryUsage(raw: Redis, key: string): Promise<number> {
  return Number(await raw.call('MEMORY', 'USAGE', key, 'SAMPLES', '0'));
}

/** Parses the Prometheus text format into `name{labels}` → value. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

describe('limit events over a real redis-server: aggregated, and bounded in memory and in Redis', function () {
  this.timeout(60_000);
  let redis: RedisProcess;
  let raw: Redis;
  let prefix: string;
  const cleanup: Array<() => Promise<unknown> | void> = [];

  redisSuite('lev', (s) => ({ redis, raw, prefix } = s));
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  function limiter(extra: Record<string, unknown>, identify: (req: express.Request) => { principal: string; tenant: string } | undefined): RateLimiterMiddleware {
    const events = (extra.events ?? {}) as Record<string, unknown>;
    const l = rateLimiter({
      policy: demoPolicy(),
      identify,
      keyHash: TEST_KEY_HASH,
      nodeId: `${prefix}-node`,
      logger: captureLogger().logger,
      redis: { url: redis.url, prefix, busSecret: BUS_SECRET, events },
      ...(extra.policy ? { policy: extra.policy as never } : {}),
    });
    cleanup.push(() => l.close());
    return l;
  }

  it('an anonymous flood from one address writes one event per 1 s window, not one per refusal, and counts every refusal', async () => {
    const l = limiter({}, () => undefined);
    await l.ready();
    const app = express()
      .use(l)
      .get('/x', (_req, res) => void res.json({ ok: true }));
    const server = app.listen(0, '127.0.0.1');
    cleanup.push(() => void server.close());
    await new Promise((r) => server.once('listening', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/x`;
    const started = Date.now();
    let refused = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (Date.now() - started < 3000) {
          const res = await fetch(url);
          await res.arrayBuffer();
          if (res.status === 429) refused++;
        }
      }),
    );
    const windows = Math.ceil((Date.now() - started) / 1000) + 1;
    await l.close();
    const stream = `${prefix}:{ev}:events`;
    const entries = await raw.xrange(stream, '-', '+');
    const events = await new EventLog(raw, prefix).find([...new Set(entries.map(([, f]) => f[1]!))]);
    const counted = events.reduce((s, e) => s + e.count, 0);
    const detail = `${refused} refusals in ${windows - 1} s: ${entries.length} entries, ${await memoryUsage(raw, stream)} bytes`;
    expect(refused, detail).to.be.at.least(50);
    expect(l.stats.quotaDenied, detail).to.equal(refused);
    expect(counted, detail).to.equal(refused);
    expect(events.length, detail).to.be.within(1, windows);
    expect(new Set(events.map((e) => e.keyId)).size).to.equal(1);
    for (const e of events) expect([e.class, e.status, e.window, e.routeClass, e.first <= e.last, e.last - e.first < 1000]).to.deep.equal(['quota', 429, 'burst', 'default', true, true]);
  });

  it('shadow mode and dual runs record their would-be refusals as events of their own class, status 200', async () => {
    const base = demoPolicy();
    const policy = demoPolicy({
      plans: {
        ...base.plans,
        free: { windows: [{ name: 'burst', limit: 6, windowMs: 60_000 }], shadow: 'candidate' },
        candidate: { windows: [{ name: 'tight', limit: 4, windowMs: 60_000 }] },
        trial: { mode: 'shadow', windows: [{ name: 'burst', limit: 2, windowMs: 60_000 }] },
      },
    });
    const l = limiter({ policy }, (req) => ({ principal: String(req.headers['x-key']), tenant: 'acme' }));
    await l.ready();
    l.updatePolicy({ ...policy, version: 2, keys: { [l.hasher.hash('trial-key')]: { plan: 'trial' } } });
    const app = express()
      .use(l)
      .get('/x', (_req, res) => void res.json({ ok: true }));
    const codes = { free: [] as number[], trial: [] as number[] };
    for (let i = 0; i < 8; i++) {
      codes.free.push((await request(app).get('/x').set('x-key', 'free-key')).status);
      codes.trial.push((await request(app).get('/x').set('x-key', 'trial-key')).status);
    }
    // A first-sight ask that misses its deadline on a loaded machine changes how many are refused, not
    // whether the events match the limiter's own counts.
    expect(codes.trial).to.deep.equal(Array(8).fill(200));
    await l.close();
    const entries = await raw.xrange(`${prefix}:{ev}:events`, '-', '+');
    const events = await new EventLog(raw, prefix).find([...new Set(entries.map(([, f]) => f[1]!))]);
    const of = (cls: string) => events.filter((e) => e.class === cls);
    // One aggregate, or more when a starved machine spaced the refusals past the flush interval.
    expect([...new Set(of('shadow').map((e) => JSON.stringify([e.keyId, e.status, e.window])))]).to.deep.equal([JSON.stringify([l.hasher.hash('trial-key'), 200, 'burst'])]);
    expect(of('shadow').reduce((n, e) => n + e.count, 0)).to.equal(l.stats.shadowDenied);
    expect(l.stats.shadowDenied).to.be.at.least(1);
    expect(
      of('dual_run')
        .map((e) => [e.keyId, e.status, e.window])
        .slice(0, 1),
    ).to.deep.equal(l.stats.dualRunDenied > 0 ? [[l.hasher.hash('free-key'), 200, 'tight']] : []);
    expect(of('dual_run').reduce((n, e) => n + e.count, 0)).to.equal(l.stats.dualRunDenied);
    expect(of('quota').reduce((n, e) => n + e.count, 0)).to.equal(l.stats.quotaDenied);
  });

  for (const maxBytes of [65_536, 1_048_576]) {
    it(`holds the stream to its byte budget (${maxBytes} bytes) with the largest entries, counting what it evicts`, async () => {
      const log = new EventLog(raw, prefix, { maxBytes });
      const long = 'x'.repeat(500);
      const total = 3 * maxEntries(maxBytes);
      for (let i = 0; i < total; i++) {
        log.record({ at: Date.now(), keyId: `v1:${String(i).padStart(22, '0')}`, class: 'fail_closed', status: 503, window: long, routeClass: long, correlationId: long, node: long });
        if (i % 500 === 499) await log.flush(true);
      }
      await log.flush(true);
      const stream = `${prefix}:{ev}:events`;
      const bytes = await memoryUsage(raw, stream);
      expect(log.maxLength).to.equal(Math.floor(maxBytes / MAX_ENTRY_BYTES));
      expect(await raw.xlen(stream)).to.equal(log.maxLength);
      expect(bytes, `${bytes} bytes for ${log.maxLength} entries`).to.be.at.most(maxBytes);
      expect(log.stats).to.deep.equal({ refusals: total, written: total, droppedPending: 0, droppedWrite: 0, evicted: total - log.maxLength });
      // The oldest went first: the newest maxLength are kept.
      const [first] = await raw.xrange(stream, '-', '+', 'COUNT', 1);
      expect(first![1][1]).to.equal(`v1:${String(total - log.maxLength).padStart(22, '0')}`);
    });
  }

  it('holds at most maxPending aggregates; the rest are dropped and counted in the metric with the node label', async () => {
    const policy = demoPolicy({ defaultPlan: 'one', plans: { ...demoPolicy().plans, one: { windows: [{ name: 'hourly', limit: 1, windowMs: 3_600_000 }] } } });
    const l = limiter({ policy, events: { maxPending: 2 } }, (req) => ({ principal: String(req.headers['x-key']), tenant: 'acme' }));
    await l.ready();
    const app = express()
      .use(l)
      .get('/x', (_req, res) => void res.json({ ok: true }));
    for (let k = 0; k < 5; k++) for (let i = 0; i < 3; i++) await request(app).get('/x').set('x-key', `key-${k}`);
    const denied = l.stats.quotaDenied;
    expect(denied).to.be.at.least(10);
    const stats = l.events!.stats;
    expect(stats.refusals).to.equal(denied);
    const scraped = samples(await l.metrics.metrics());
    const node = `${prefix}-node`;
    expect(scraped.get(`fleet_ratelimit_events_dropped_total{reason="pending",node="${node}"}`)).to.equal(stats.droppedPending);
    expect(scraped.get(`fleet_ratelimit_events_dropped_total{reason="write",node="${node}"}`)).to.equal(0);
    await l.close();
    const events = await new EventLog(raw, prefix).find([...(await raw.xrange(`${prefix}:{ev}:events`, '-', '+')).map(([, f]) => f[1]!)]);
    expect(events.length).to.equal(2);
    expect(stats.droppedPending + events.reduce((s, e) => s + e.count, 0)).to.equal(denied);
    expect(stats.droppedPending).to.be.at.least(6);
  });

  it('counts the refusals of a write that fails, and logs drops at most once a minute', async () => {
    const closed = await freePort();
    const dead = new Redis(`redis://127.0.0.1:${closed}`, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
    dead.on('error', () => undefined);
    cleanup.push(() => dead.disconnect());
    const clock = new FakeClock(Date.now());
    const logs = captureLogger();
    const log = new EventLog(dead, prefix, { clock, logger: logs.logger });
    const refusal = (keyId: string): LimitRefusal => ({ at: clock.now(), keyId, class: 'quota', status: 429, window: 'burst', routeClass: 'default', correlationId: 'c', node: 'n' });
    for (let i = 0; i < 5; i++) log.record(refusal(KEY));
    for (let i = 0; i < 3; i++) log.record(refusal('v1:BBBBBBBBBBBBBBBBBBBBBB'));
    await log.flush(true);
    expect(log.stats).to.deep.include({ refusals: 8, written: 0, droppedWrite: 8 });
    log.record(refusal(KEY));
    clock.advance(30_000);
    await log.flush(true);
    expect(log.dropped).to.equal(9);
    const warned = (): Array<Record<string, unknown>> => logs.lines.filter((l) => l.msg === 'limit events dropped or evicted');
    expect(warned().map((l) => l.droppedWrite)).to.deep.equal([8]);
    clock.advance(30_000);
    await log.flush(true);
    expect(warned().map((l) => l.droppedWrite)).to.deep.equal([8, 1]);
    expect(logs.text()).to.not.include('sk_');
  });
});

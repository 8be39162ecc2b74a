import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import request from 'supertest';
import { createAdminApp } from '../../admin/app.js';
import { PolicyStore } from '../../bus/policy-store.js';
import { StoreSigner } from '../../bus/store-signature.js';
import { KeyHasher } from '../../lib/key-id.js';
import type { PolicyDoc } from '../../lib/policy.js';
import { phaseOffset } from '../../lib/window.js';
import { startFleet, type Fleet, type GatewayNode } from '../../scripts/fleet.js';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';
import { drive, hourKey, writeHourPolicy, type HourKey } from '../support/hour-keys.js';
import { statusAfterRetries } from '../support/http.js';
import { waitFor } from '../support/wait.js';

const KEY_HASH_SECRET = 'cluster-e2e-key-hash-secret';
const SCENARIOS = ['pinned', 'round-robin', 'kill', 'restart', 'stall', 'outage', 'after'] as const;
const hasher = new KeyHasher([{ version: 'v1', secret: KEY_HASH_SECRET }]);
const keyFor = (scenario: (typeof SCENARIOS)[number]): HourKey => hourKey(hasher, scenario);

/** GET `url` as `key`: its status, whether it said degraded, and how long it took. */
async function probe(url: string, key: string): Promise<{ status: number; degraded: boolean; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/api/hello`, { headers: { 'x-api-key': key }, signal: AbortSignal.timeout(5000) });
  await res.body?.cancel();
  return { status: res.status, degraded: res.headers.get('x-ratelimit-degraded') === 'true', ms: performance.now() - t0 };
}

describe('a fleet of three gateway processes on one Redis (demo-hour: 1000 per hour)', function () {
  this.timeout(120_000);
  let redis: RedisProcess;
  let fleet: Fleet;
  let raw: Redis;
  let dir: string;
  let policyPath: string;

  before(async () => {
    redis = await startRedis();
    raw = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    dir = mkdtempSync(join(tmpdir(), 'frl-cluster-'));
    policyPath = writeHourPolicy(dir, SCENARIOS);
    fleet = await startFleet({ nodes: 3, redisUrl: redis.url, env: { KEY_HASH_SECRET, POLICY_FILE: policyPath, DEGRADED_AFTER_MS: '3000' } });
  });
  after(async () => {
    await fleet?.stop();
    raw?.disconnect();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The node that owns `shard` now, from the ownership table. */
  async function ownerOf(shard: number): Promise<{ node: GatewayNode; epoch: number }> {
    const v = (await raw.hget('frl:{ctl}:owners', String(shard))) ?? '';
    const [token = '', epoch = '0'] = v.split('|');
    const node = fleet.nodes.find((n) => n.nodeId === token.split('/')[0]);
    if (node === undefined) throw new Error(`shard ${shard} has no owner in the fleet: "${v}"`);
    return { node, epoch: Number(epoch) };
  }

  it('1500 requests all to one node (pinned): admitted within 970..1020', async () => {
    const { key } = keyFor('pinned');
    const counts = await drive(fleet.nodes, key, 1500, () => 0);
    expect(counts[200]).to.be.within(970, 1020);
    expect((counts[200] ?? 0) + (counts[429] ?? 0)).to.equal(1500);
  });

  it('1500 requests round-robin over the three nodes: admitted within 970..1020', async () => {
    const { key } = keyFor('round-robin');
    const counts = await drive(fleet.nodes, key, 1500, (i) => i);
    expect(counts[200]).to.be.within(970, 1020);
    expect((counts[200] ?? 0) + (counts[429] ?? 0)).to.equal(1500);
  });

  it('demo-free at half its limit, round robin (5/s for 4 s): never told its window is spent', async () => {
    // 10 per second spread over three nodes is a key each sees less than once a round: every request
    // asks its owner. On a loaded machine some asks miss their 1 ms over Redis; such a refusal says
    // "retry in a round", never "spent" (the figure for an idle machine is the benchmark's to show).
    const refusals: Array<{ retryAfter: string | null; resetMs: number }> = [];
    let admitted = 0;
    for (let i = 0; i < 20; i++) {
      const t0 = Date.now();
      const res = await fetch(`${fleet.nodes[i % 3]!.url}/api/hello`, { headers: { 'x-api-key': 'demo-free' } });
      await res.body?.cancel();
      if (res.status === 200) admitted++;
      else refusals.push({ retryAfter: res.headers.get('retry-after'), resetMs: Number(res.headers.get('x-ratelimit-reset-ms')) });
      await new Promise((r) => setTimeout(r, Math.max(0, 200 - (Date.now() - t0)))); // fixed pacing: 5 a second
    }
    for (const r of refusals) expect(r.retryAfter === '0' && r.resetMs <= 25, JSON.stringify(r)).to.equal(true);
    // A floor only: beside busy processes a third of these asks can miss (14 of 20 admitted here).
    expect(admitted).to.be.at.least(5);
  });

  it('kill -9 of the owner of the key’s shard mid-window: another node takes over and keeps enforcing, admitted ≤ 1020', async () => {
    const { key, shard } = keyFor('kill');
    const before = await drive(fleet.nodes, key, 500, (i) => i);
    const { node: victim, epoch } = await ownerOf(shard);
    await victim.kill('SIGKILL');
    const survivors = fleet.nodes.filter((n) => n !== victim);
    const after = await drive(survivors, key, 1000, (i) => i);
    const admitted = (before[200] ?? 0) + (after[200] ?? 0);
    expect(admitted).to.be.at.most(1020);
    expect(admitted).to.be.at.least(500);
    const now = await ownerOf(shard);
    expect(now.node).to.not.equal(victim);
    expect(now.epoch).to.be.above(epoch);
    await victim.restart();
  });

  it('a node restarted mid-window comes back under a new epoch: over-admission 0, under-admission ≤ 1/fleet', async () => {
    const { key } = keyFor('restart');
    const first = await drive(fleet.nodes, key, 600, (i) => i);
    await fleet.nodes[1]!.kill('SIGKILL');
    await fleet.nodes[1]!.restart();
    const second = await drive(fleet.nodes, key, 900, (i) => i);
    const admitted = (first[200] ?? 0) + (second[200] ?? 0);
    expect(admitted).to.be.at.most(1000);
    expect(admitted).to.be.at.least(1000 - Math.ceil(1000 / 3));
  });

  it('SIGSTOP of the key’s shard owner (50 ms, 1 s, 4 s) and of another node (2 s) under round-robin load: never past the allowance', async () => {
    const { key, shard } = keyFor('stall');
    const counts: Record<number, number> = {};
    const add = (c: Record<number, number>): void => {
      for (const [status, n] of Object.entries(c)) counts[Number(status)] = (counts[Number(status)] ?? 0) + n;
    };
    for (const [who, ms] of [
      ['owner', 50],
      ['owner', 1000],
      ['other', 2000],
      ['owner', 4000],
    ] as const) {
      const { node: owner } = await ownerOf(shard);
      const victim = who === 'owner' ? owner : fleet.nodes.find((n) => n !== owner)!;
      const paused = victim.pause(ms);
      // Requests sent to the stopped process wait for it, as a load balancer's would.
      add(await drive(fleet.nodes, key, 300, (i) => i));
      await paused;
    }
    add(await drive(fleet.nodes, key, 600, (i) => i));
    // No window boundary in this test (an hourly key with minutes left): no self-grant is allowed, so
    // not one request past the allowance. Credit a stopped process held is lost to the window. A
    // request whose connection was reset (0) may have been admitted: it counts toward the bound.
    expect((counts[200] ?? 0) + (counts[0] ?? 0), JSON.stringify(counts)).to.be.at.most(1000);
    expect(counts[200] ?? 0, JSON.stringify(counts)).to.be.at.least(500);
    expect((counts[200] ?? 0) + (counts[429] ?? 0) + (counts[0] ?? 0)).to.equal(1800);
  });

  it('a policy change through the admin API reaches every running node process without a restart', async () => {
    const file = JSON.parse(readFileSync(policyPath, 'utf8')) as { demoKeys: Record<string, { plan: string }>; policy: PolicyDoc };
    const keys = Object.fromEntries(Object.entries(file.demoKeys).map(([k, v]) => [hasher.hash(k), { plan: v.plan }]));
    const admin = createAdminApp({
      store: new PolicyStore(raw, new StoreSigner([{ version: 'p1', secret: fleet.env.POLICY_SECRET! }])),
      redis: raw,
      adminToken: 'admin-token-0123456789',
      breakGlassToken: 'break-glass-token-0123456789',
      keyHash: { versions: [{ version: 'v1', secret: KEY_HASH_SECRET }] },
    });
    const auth = { Authorization: 'Bearer admin-token-0123456789' };
    await request(admin)
      .put('/admin/v1/policy')
      .set(auth)
      .send({ policy: { ...file.policy, keys }, reason: 'the demo policy, stored' })
      .expect(200);
    // policy-probe moves from 1000 per hour to the free plan (10 per second).
    await request(admin).put('/admin/v1/overrides').set(auth).send({ key: 'policy-probe', plan: 'free', reason: 'e2e: live change' }).expect(200);
    // The announcement crosses Redis: a node has taken it once it answers under the free plan's windows.
    for (const n of fleet.nodes) {
      await waitFor(
        async () => {
          const res = await fetch(`${n.url}/api/hello`, { headers: { 'x-api-key': 'policy-probe' }, signal: AbortSignal.timeout(5000) });
          await res.body?.cancel();
          return res.headers.get('ratelimit-policy')?.includes('"burst"') === true;
        },
        { what: `${n.nodeId} to take the override`, timeoutMs: 10_000, intervalMs: 50 },
      );
    }
    for (const n of fleet.nodes) {
      // Start just after the key's own burst boundary, so the twelve share one window.
      const offset = phaseOffset(hasher.hash('policy-probe'), 1000);
      await new Promise((r) => setTimeout(r, (offset - (Date.now() % 1000) + 1000 + 5) % 1000)); // computed: to that boundary
      const statuses: number[] = [];
      for (let i = 0; i < 12; i++) statuses.push((await probe(n.url, 'policy-probe')).status);
      // Ten a second now (a first sight that misses its 1 ms ask admits fewer, never more).
      expect(statuses.filter((st) => st === 200).length, `${n.nodeId}: ${statuses.join()}`).to.be.at.most(10);
    }
  });

  it('Redis frozen 2 s, then past the degraded limit, then restarted empty: every request answered from memory, none waits on Redis; the fleet reconverges', async function () {
    if (redis.external) this.skip();
    const { key } = keyFor('outage');
    await drive(fleet.nodes, key, 300, (i) => i);
    const during: Array<{ status: number; degraded: boolean; ms: number }> = [];
    const serve = async (ms: number): Promise<void> => {
      for (const end = Date.now() + ms; Date.now() < end;) {
        for (const n of fleet.nodes) during.push(await probe(n.url, key));
        await new Promise((r) => setTimeout(r, 50)); // fixed pacing: requests through the span
      }
    };
    redis.pause();
    try {
      await serve(2000);
    } finally {
      redis.resume();
    }
    expect(during.every((r) => r.status === 200 || r.status === 429)).to.equal(true);
    expect(during.some((r) => r.degraded)).to.equal(false);
    await serve(500);

    // Past DEGRADED_AFTER_MS (3 s): degraded mode and its header on every node (H4, F5).
    during.length = 0;
    redis.pause();
    try {
      await serve(3800);
    } finally {
      redis.resume();
    }
    const late = during.slice(-3);
    expect(
      late.every((r) => r.degraded),
      JSON.stringify(late),
    ).to.equal(true);
    expect(during.every((r) => r.status === 200 || r.status === 429)).to.equal(true);
    for (let i = 0; i < 100 && (await probe(fleet.nodes[0]!.url, key)).degraded; i++) await new Promise((r) => setTimeout(r, 50));
    expect((await probe(fleet.nodes[0]!.url, key)).degraded).to.equal(false);

    // Restarted empty: requests keep being answered while it is down and after.
    during.length = 0;
    const restarting = redis.restart({ empty: true });
    await serve(500);
    await restarting;
    await serve(500);
    expect(during.every((r) => r.status === 200 || r.status === 429)).to.equal(true);
    const slowest = Math.max(...during.map((r) => r.ms));
    expect(slowest, 'no request waits on Redis').to.be.below(1000);
    const fresh = keyFor('after').key;
    for (const n of fleet.nodes) expect(await statusAfterRetries(`${n.url}/api/hello`, fresh)).to.equal(200);
    for (let i = 0; i < 100 && (await raw.hlen('frl:{ctl}:owners')) < 64; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await raw.hlen('frl:{ctl}:owners')).to.equal(64);
  });
});

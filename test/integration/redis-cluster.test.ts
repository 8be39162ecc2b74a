import { expect } from 'chai';
import { Cluster } from 'ioredis';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { startRedisCluster, type RedisClusterProcess } from '../../scripts/redis-cluster.js';
import { joinRedisFleet, limits, SHARDS, until, type Member } from '../support/redis-members.js';

describe('Redis bus on a Redis Cluster of three masters (B5)', function () {
  this.timeout(60_000);
  let cluster: RedisClusterProcess;
  const members: Member[] = [];

  before(async () => {
    cluster = await startRedisCluster(3);
  });
  after(async () => {
    await Promise.all(members.map((m) => m.stop()));
    await cluster?.stop();
  });

  it('spreads shard streams over the masters and shares one allowance between two members', async () => {
    const seeds = cluster.nodes.map((n) => `redis://${n.host}:${n.port}`);
    const a = joinRedisFleet(seeds, 'c', 'a');
    const b = joinRedisFleet(seeds, 'c', 'b');
    members.push(a, b);
    await Promise.all([a.bus.ready(), b.bus.ready()]);
    await until(() => a.bus.ownedShards().length > 0 && b.bus.ownedShards().length > 0 && a.bus.ownedShards().length + b.bus.ownedShards().length === SHARDS, 'the shards to split', 10_000);

    // A key whose shard b owns, spent from both members: one allowance of 100, in a window with 30 s
    // left at least, so that the test (seconds on a starved machine) never crosses into the next one.
    let keyId = '';
    for (let i = 0; keyId === ''; i++) {
      const k = `v1:${String(i).padStart(22, 'c')}`;
      const id = windowIdAt(Date.now(), 60_000, phaseOffset(k, 60_000));
      if (b.bus.owners()[shardOf(k, id, SHARDS)]?.owner === 'b' && windowEndMs(id, 60_000, phaseOffset(k, 60_000)) - Date.now() >= 30_000) keyId = k;
    }
    const plan = limits(100);
    let admitted = 0;
    for (let i = 0; i < 300; i++) {
      const r = await (i % 2 === 0 ? a : b).node.acquire(keyId, plan);
      if (r.admitted) admitted++;
      if (i % 20 === 19) await new Promise((r) => setTimeout(r, 30)); // fixed pacing: lets rounds run (reports, top-ups) between bursts
    }
    expect(admitted).to.be.within(97, 100);

    // Reports crossed the bus (a's went to b's shard stream), and the streams live on several masters.
    await until(() => b.bus.stats.entriesFolded > 0, 'b to fold a report from a');
    const probe = new Cluster(cluster.nodes.map((n) => ({ host: n.host, port: n.port })));
    try {
      await new Promise((r) => probe.once('ready', r));
      const perMaster = await Promise.all(probe.nodes('master').map(async (m) => (await m.keys('c:{s*}:*')).length));
      expect(perMaster.filter((n) => n > 0).length, `stream keys per master: ${perMaster.join(', ')}`).to.be.at.least(2);
      expect(await probe.hlen('c:{ctl}:owners')).to.equal(SHARDS);
    } finally {
      probe.disconnect();
    }
  });
});

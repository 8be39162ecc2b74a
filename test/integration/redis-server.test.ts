import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { Cluster, Redis } from 'ioredis';
import { slotRanges, startRedisCluster, type RedisClusterProcess } from '../../scripts/redis-cluster.js';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';

/** A client that fails fast: no reconnect loop, no offline queue, `commandTimeout` as given. */
function client(url: string, commandTimeout?: number): Redis {
  const redis = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null, ...(commandTimeout ? { commandTimeout } : {}) });
  redis.on('error', () => {}); // commands reject with the cause
  return redis;
}

/** True when something accepts TCP connections on 127.0.0.1:`port`. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
}

/** True once nothing listens on `port` any more (checked for up to 1 s: a killed process takes a moment to go). */
async function stopsListening(port: number): Promise<boolean> {
  for (let i = 0; i < 20; i++) {
    if (!(await listening(port))) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

describe('test support: private redis-server', function () {
  let redis: RedisProcess | undefined;
  const clients: Array<Redis | Cluster> = [];

  afterEach(async () => {
    for (const c of clients.splice(0)) c.disconnect();
    await redis?.stop();
    redis = undefined;
  });

  it('starts one that answers PING and round-trips SET/GET', async () => {
    redis = await startRedis();
    expect(redis.url).to.equal(redis.external ? process.env.REDIS_URL : `redis://127.0.0.1:${redis.port}`);
    const c = client(redis.url);
    clients.push(c);
    expect(await c.ping()).to.equal('PONG');
    await c.set('rl-test:support:k', 'v1');
    expect(await c.get('rl-test:support:k')).to.equal('v1');
    await c.del('rl-test:support:k');
  });

  it('pause() makes commands time out and resume() makes them work again', async function () {
    redis = await startRedis();
    if (redis.external) this.skip();
    const c = client(redis.url, 200);
    clients.push(c);
    expect(await c.ping()).to.equal('PONG');
    redis.pause();
    const err = await c.ping().then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.match(/timed out/i);
    redis.resume();
    expect(await c.ping()).to.equal('PONG');
  });

  it('restart({ empty: true }) comes back on the same port with the data gone', async function () {
    redis = await startRedis();
    if (redis.external) this.skip();
    const port = redis.port;
    const before = client(redis.url);
    clients.push(before);
    await before.set('k', 'v');
    await redis.restart({ empty: true });
    expect(redis.port).to.equal(port);
    const after = client(redis.url);
    clients.push(after);
    expect(await after.get('k')).to.equal(null);
    expect(await after.dbsize()).to.equal(0);
  });

  it('stop() is idempotent, frees the port and makes pause/restart fail clearly', async function () {
    redis = await startRedis();
    if (redis.external) this.skip();
    const { port } = redis;
    await Promise.all([redis.stop(), redis.stop()]);
    expect(await stopsListening(port)).to.equal(true);
    expect(() => redis!.pause()).to.throw(/not running/);
    const err = await redis.restart().then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.match(/was stopped/);
  });

  it('kills what it started when the Node process exits without stopping it', function () {
    if (process.env.REDIS_URL) this.skip();
    const support = new URL('../../scripts/redis-server.js', import.meta.url).href;
    const run = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', `const m = await import(${JSON.stringify(support)}); const r = await m.startRedis(); console.log(r.port); process.exit(0);`],
      { encoding: 'utf8', timeout: 10_000 },
    );
    expect(run.status, run.stderr).to.equal(0);
    const port = Number(run.stdout.trim());
    expect(port).to.be.greaterThan(0);
    return stopsListening(port).then((gone) => expect(gone, `redis-server on ${port} survived its parent`).to.equal(true));
  });

  it('reports a redis-server that cannot start, with its output', async function () {
    if (process.env.REDIS_URL) this.skip();
    const err = await startRedis({ args: ['--no-such-directive', 'x'] }).then(
      (r) => ((redis = r), undefined),
      (e: Error) => e,
    );
    expect(err?.message).to.match(/exited .* before answering PING/);
    expect(err?.message).to.include('no-such-directive');
  });
});

describe('test support: private Redis Cluster', function () {
  let cluster: RedisClusterProcess | undefined;
  let rc: Cluster | undefined;

  afterEach(async () => {
    rc?.disconnect();
    rc = undefined;
    await cluster?.stop();
    cluster = undefined;
  });

  /** Checks CLUSTER INFO on every node and a SET/GET of keys in three different slots through ioredis' Cluster. */
  async function exercise(c: RedisClusterProcess): Promise<void> {
    for (const node of c.nodes) {
      const direct = client(`redis://${node.host}:${node.port}`);
      try {
        expect(String(await direct.call('CLUSTER', 'INFO'))).to.include('cluster_state:ok');
      } finally {
        direct.disconnect();
      }
    }
    rc = new Cluster([...c.nodes], { clusterRetryStrategy: () => null });
    for (const key of ['{a}x', '{b}y', '{c}z']) await rc.set(key, `value of ${key}`);
    for (const key of ['{a}x', '{b}y', '{c}z']) expect(await rc.get(key)).to.equal(`value of ${key}`);
  }

  it('startRedisCluster(3) forms a cluster that ioredis Cluster can use', async () => {
    cluster = await startRedisCluster(3);
    expect(cluster.nodes).to.have.length(3);
    await exercise(cluster);
  });

  it("forms one with CLUSTER ADDSLOTSRANGE / MEET when redis-cli is not used (here with 2 masters, below redis-cli's minimum)", async () => {
    cluster = await startRedisCluster(2, { via: 'commands' });
    expect(cluster.nodes).to.have.length(2);
    await exercise(cluster);
  });

  it('splits the slots evenly and completely', () => {
    expect(slotRanges(3)).to.deep.equal([
      [0, 5460],
      [5461, 10921],
      [10922, 16383],
    ]);
    expect(slotRanges(1)).to.deep.equal([[0, 16383]]);
  });
});

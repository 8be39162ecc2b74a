import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkRedis } from '../../bus/redis-connection.js';
import { RedisBus } from '../../bus/redis.js';
import { freePort } from '../../scripts/free-port.js';
import { startRedisCluster } from '../../scripts/redis-cluster.js';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';
import { PolicyStore } from '../../bus/policy-store.js';
import { BUS_SECRET, joinRedisFleet, POLICY_SIGNER, redisLimiter, ROUND_MS, SHARDS, until } from '../support/redis-members.js';

/** A throwaway CA and a server certificate for 127.0.0.1, or undefined without openssl. */
function certificates(dir: string): { ca: string; cert: string; key: string } | undefined {
  const ssl = (...args: string[]): void => {
    execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  };
  try {
    ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '1', '-subj', '/CN=frl-test-ca');
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
    writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1\n');
    ssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.crt', '-days', '1', '-extfile', 'san.ext');
  } catch {
    return undefined;
  }
  return { ca: join(dir, 'ca.crt'), cert: join(dir, 'server.crt'), key: join(dir, 'server.key') };
}

describe('Redis bus connection options: ACL user, TLS', function () {
  this.timeout(30_000);
  let dir: string;
  const started: RedisProcess[] = [];
  const stops: Array<() => Promise<void>> = [];

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'frl-tls-'));
  });
  afterEach(async () => {
    await Promise.all(stops.splice(0).map((s) => s()));
    await Promise.all(started.splice(0).map((r) => r.stop()));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('runs as an ACL user confined to its key prefix and channels; a wrong password never gets ready', async function () {
    const redis = await startRedis();
    started.push(redis);
    if (redis.external) this.skip();
    const admin = new (await import('ioredis')).Redis(redis.url);
    await admin.call('ACL', 'SETUSER', 'gateway', 'on', '>gateway-password', '~acl:*', '&acl:*', '+@all', '-@admin', '-@dangerous', '+info');
    admin.disconnect();
    const url = `redis://gateway:gateway-password@127.0.0.1:${redis.port}`;
    const m = joinRedisFleet(url, 'acl', 'a');
    stops.push(m.stop);
    await m.bus.ready();
    expect(m.bus.ownedShards()).to.have.length(SHARDS);

    const wrong = new RedisBus({ url, password: 'not-the-password', prefix: 'acl', busSecret: BUS_SECRET, shards: SHARDS, roundMs: ROUND_MS, degradedAfterMs: 30_000 });
    stops.push(() => wrong.close());
    // Fixed: proves ready() does not settle within half a second (there is nothing to wait for).
    const outcome = await Promise.race([wrong.ready().then(() => 'ready'), new Promise((r) => setTimeout(() => r('not ready'), 500))]);
    expect(outcome).to.equal('not ready');
  });

  it('a limiter holds four connections: its event log and policy feed share the bus’s, one subscriber serves both channels', async () => {
    const redis = await startRedis();
    started.push(redis);
    const admin = new (await import('ioredis')).Redis(redis.url);
    stops.push(async () => void admin.disconnect());
    const limiter = redisLimiter(redis.url, 'conn', 'conn-node', 'conn-key', { shards: SHARDS });
    stops.push(() => limiter.close());
    await limiter.ready();
    const own = Number(await admin.call('CLIENT', 'ID'));
    const clients = async (): Promise<Array<{ id: number; sub: number }>> =>
      String(await admin.call('CLIENT', 'LIST'))
        .trim()
        .split('\n')
        .map((line) => ({ id: Number(/\bid=(\d+)/.exec(line)?.[1]), sub: Number(/\bsub=(\d+)/.exec(line)?.[1]) }))
        .filter((c) => c.id !== own);
    // The bus's command, blocking-read, subscriber and fast-path connections; nothing else.
    await until(async () => (await clients()).some((c) => c.sub === 2), 'one connection subscribed to the node’s and the policy channel', 5000);
    const list = await clients();
    expect(list, JSON.stringify(list)).to.have.length(4);
    expect(
      list.filter((c) => c.sub > 0),
      JSON.stringify(list),
    ).to.have.length(1);
    // The shared subscriber hands each channel its own messages: a kill switch still reaches the node.
    const store = new PolicyStore(admin, POLICY_SIGNER, 'conn');
    await store.setSwitch(false, 'test', 'shared subscriber check');
    await until(() => !limiter.enforcing, 'the kill switch to reach the limiter', 5000);
    await limiter.close();
    expect(await clients()).to.deep.equal([]);
  });

  it('connects over TLS (rediss://) to a server with a private CA', async function () {
    const certs = certificates(dir);
    if (certs === undefined) this.skip();
    const tlsPort = await freePort();
    const redis = await startRedis({
      args: ['--tls-port', String(tlsPort), '--tls-cert-file', certs!.cert, '--tls-key-file', certs!.key, '--tls-ca-cert-file', certs!.ca, '--tls-auth-clients', 'no'],
    });
    started.push(redis);
    if (redis.external) this.skip();
    const m = joinRedisFleet(`rediss://127.0.0.1:${tlsPort}`, 'tls', 'a', 30_000, { tls: { ca: readFileSync(certs!.ca) } });
    stops.push(m.stop);
    await m.bus.ready();
    await until(() => m.bus.ownedShards().length === SHARDS, 'every shard');
  });

  it('the startup check passes a live server and a live cluster, and names the address (never the password) and the reason otherwise', async function () {
    const redis = await startRedis();
    started.push(redis);
    if (redis.external) this.skip();
    await checkRedis({ url: redis.url }, 2000);
    const admin = new (await import('ioredis')).Redis(redis.url);
    await admin.call('ACL', 'SETUSER', 'checker', 'on', '>checker-password', '~chk:*', '+@all');
    admin.disconnect();
    await checkRedis({ url: `redis://checker:checker-password@127.0.0.1:${redis.port}` }, 2000);
    const wrong = await checkRedis({ url: `redis://checker:not-the-password@127.0.0.1:${redis.port}` }, 2000).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(wrong?.message).to.match(new RegExp(`^cannot connect to Redis at 127\\.0\\.0\\.1:${redis.port}: WRONGPASS`));
    expect(wrong?.message).to.not.include('not-the-password');
    const closed = await freePort();
    const refused = await checkRedis({ url: `redis://127.0.0.1:${closed}` }, 2000).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(refused?.message).to.equal(`cannot connect to Redis at 127.0.0.1:${closed}: connect ECONNREFUSED 127.0.0.1:${closed}`);
    const cluster = await startRedisCluster(3);
    stops.push(() => cluster.stop());
    await checkRedis({ clusterNodes: cluster.nodes.map((n) => `redis://${n.host}:${n.port}`) }, 5000);
    // A port free now: the one above was free before the cluster started, which may have taken it.
    const gone = await freePort();
    const deadCluster = await checkRedis({ clusterNodes: [`redis://127.0.0.1:${gone}`] }, 1000).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(deadCluster?.message).to.match(new RegExp(`^cannot connect to Redis at 127\\.0\\.0\\.1:${gone}: `));
  });
});

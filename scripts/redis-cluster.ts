import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort } from './free-port.js';
import { HOST, startPrivate, type PrivateRedis, type RedisProcess } from './redis-server.js';

/**
 * Private Redis Clusters for tests: masters started as private redis-servers (see ./redis-server.ts,
 * which also kills them and removes their dirs when this Node process exits), every slot assigned,
 * no replicas.
 */

/** A Redis Cluster of private masters with all 16384 slots assigned and `cluster_state:ok` on every node. */
export interface RedisClusterProcess {
  /** Seed nodes for `new Cluster(nodes)`. */
  readonly nodes: ReadonlyArray<{ host: string; port: number }>;
  /** The masters themselves, for fault tests (pause one, restart one…). */
  readonly processes: readonly RedisProcess[];
  /** Stops every node and removes their dirs; idempotent. */
  stop(): Promise<void>;
}

const CLUSTER_TIMEOUT_MS = 20_000;

/** True when an executable called `name` is on PATH. */
function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** A short-lived ioredis connection to one node that fails fast instead of retrying. */
async function withNode<T>(port: number, fn: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis({ host: HOST, port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000 });
  redis.on('error', () => {}); // the command's rejection carries the cause
  try {
    await redis.connect();
    return await fn(redis);
  } finally {
    redis.disconnect();
  }
}

/** Runs `redis-cli --cluster create` over `ports` with no replicas; rejects with its output on failure. */
function createWithRedisCli(ports: readonly number[]): Promise<void> {
  const child = spawn('redis-cli', ['--cluster', 'create', ...ports.map((p) => `${HOST}:${p}`), '--cluster-replicas', '0', '--cluster-yes'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), CLUSTER_TIMEOUT_MS);
    child.once('error', (err) => reject(new Error(`could not run redis-cli: ${err.message}`)));
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`redis-cli --cluster create failed (code ${code}, signal ${signal}):\n${out}`));
    });
  });
}

/** Splits the 16384 slots into `n` contiguous ranges, as evenly as possible. */
export function slotRanges(n: number): Array<[number, number]> {
  return Array.from({ length: n }, (_, i) => [Math.floor((i * 16384) / n), Math.floor(((i + 1) * 16384) / n) - 1]);
}

/** Forms the cluster by hand: each node takes a slot range (ADDSLOTSRANGE), then the first MEETs the rest. */
async function createWithCommands(nodes: ReadonlyArray<{ port: number; busPort: number }>): Promise<void> {
  const ranges = slotRanges(nodes.length);
  await Promise.all(nodes.map((n, i) => withNode(n.port, (r) => r.call('CLUSTER', 'ADDSLOTSRANGE', ranges[i]![0], ranges[i]![1]))));
  await withNode(nodes[0]!.port, async (r) => {
    for (const n of nodes.slice(1)) await r.call('CLUSTER', 'MEET', HOST, n.port, n.busPort);
  });
}

/** Resolves once every node reports `cluster_state:ok` and knows all `ports.length` nodes. */
async function waitClusterOk(ports: readonly number[]): Promise<void> {
  const deadline = Date.now() + CLUSTER_TIMEOUT_MS;
  for (;;) {
    const infos = await Promise.all(ports.map((p) => withNode(p, (r) => r.call('CLUSTER', 'INFO')).then(String, (err: Error) => `error: ${err.message}`)));
    const ok = (info: string): boolean => info.includes('cluster_state:ok') && info.includes(`cluster_known_nodes:${ports.length}\r\n`);
    if (infos.every(ok)) return;
    const last = infos.map((info, i) => `port ${ports[i]}: ${info.split('\r\n').slice(0, 3).join(' ')}`).join('\n');
    if (Date.now() > deadline) throw new Error(`the cluster did not reach cluster_state:ok within ${CLUSTER_TIMEOUT_MS / 1000} s:\n${last}`);
    await sleep(100);
  }
}

/**
 * Starts `masters` private redis-servers in cluster mode, each in its own temp dir with its own
 * cluster-bus port (so the client port need not be ≤ 55535), assigns all slots with no replicas and
 * resolves once `CLUSTER INFO` says `cluster_state:ok` on every node. Uses `redis-cli --cluster create`
 * when redis-cli is on PATH and there are at least 3 masters (its minimum); otherwise, or with
 * `via: 'commands'`, CLUSTER ADDSLOTSRANGE and CLUSTER MEET. Ignores REDIS_URL.
 */
export async function startRedisCluster(masters = 3, opts: { via?: 'redis-cli' | 'commands' } = {}): Promise<RedisClusterProcess> {
  if (!Number.isInteger(masters) || masters < 1) throw new Error(`startRedisCluster: masters must be a whole number ≥ 1, got ${masters}`);
  const argsFor = async (port: number): Promise<string[]> => {
    let busPort = await freePort();
    while (busPort === port) busPort = await freePort();
    return ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '2000', '--cluster-port', String(busPort)];
  };
  const started = await Promise.allSettled(Array.from({ length: masters }, () => startPrivate(argsFor)));
  const processes = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const stop = async (): Promise<void> => void (await Promise.all(processes.map((p) => p.stop())));
  try {
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    const ports = processes.map((p) => p.port);
    const useCli = (opts.via ?? 'redis-cli') === 'redis-cli' && masters >= 3 && onPath('redis-cli');
    if (useCli) await createWithRedisCli(ports);
    else await createWithCommands(processes.map((p) => ({ port: p.port, busPort: busPortOf(p) })));
    await waitClusterOk(ports);
  } catch (err) {
    await stop();
    throw err;
  }
  return { nodes: processes.map((p) => ({ host: HOST, port: p.port })), processes, stop };
}

/** The cluster-bus port `p` was started with (the value after `--cluster-port` in its args). */
function busPortOf(p: PrivateRedis): number {
  return Number(p.args[p.args.indexOf('--cluster-port') + 1]);
}

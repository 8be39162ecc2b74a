import { createRequire } from 'node:module';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { ConfigError } from '../lib/errors.js';
import type { RedisConnectionOptions } from './redis-options.js';

/** A client for a standalone Redis or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

export type { RedisConnectionOptions };

const requireHere = createRequire(import.meta.url);

/**
 * ioredis, loaded the first time something connects: a fleet of one never does, so ioredis is an
 * optional peer dependency and a standalone install goes without it.
 */
function ioredis(): typeof import('ioredis') {
  try {
    return requireHere('ioredis') as typeof import('ioredis');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw err;
    throw new ConfigError([{ path: 'redis', message: 'needs the ioredis package: npm install ioredis' }], 'ioredis is not installed');
  }
}

/** An ioredis client (or Cluster client) for these connection options. */
export function connect(o: Pick<RedisConnectionOptions, 'url' | 'clusterNodes' | 'username' | 'password' | 'tls'>, extra: RedisOptions): RedisClient {
  const tls = o.tls === true ? {} : o.tls === false ? undefined : o.tls;
  const common: RedisOptions = {
    ...(o.username !== undefined ? { username: o.username } : {}),
    ...(o.password !== undefined ? { password: o.password } : {}),
    ...(tls !== undefined ? { tls } : {}),
    maxRetriesPerRequest: 1,
    retryStrategy: (n: number) => Math.min(50 * n, 500),
    ...extra,
  };
  const { Cluster, Redis } = ioredis();
  if (o.clusterNodes !== undefined) {
    const nodes = o.clusterNodes.map((u) => {
      const url = new URL(u);
      return { host: url.hostname, port: Number(url.port || 6379) };
    });
    return new Cluster(nodes, {
      redisOptions: common,
      lazyConnect: extra.lazyConnect ?? false,
      enableAutoPipelining: extra.enableAutoPipelining ?? false,
      clusterRetryStrategy: (n: number) => Math.min(50 * n, 500),
    });
  }
  return new Redis(o.url ?? 'redis://127.0.0.1:6379', common);
}

/** How long an entry point waits for Redis at startup before it gives up. */
export const STARTUP_REDIS_TIMEOUT_MS = 5000;

/** Where these options point, for a message: host:port (or the cluster's seeds), never a password. */
export function redisAddress(o: Pick<RedisConnectionOptions, 'url' | 'clusterNodes'>): string {
  const hostOf = (u: string): string => {
    try {
      const url = new URL(u);
      return `${url.hostname}:${url.port || 6379}`;
    } catch {
      return 'an unparsable URL';
    }
  };
  return o.clusterNodes !== undefined ? o.clusterNodes.map(hostOf).join(',') : hostOf(o.url ?? 'redis://127.0.0.1:6379');
}

/**
 * Resolves once Redis answers PING within `timeoutMs`; else rejects with a one-line reason naming
 * where (never the password) and why. Entry points call it first, so a wrong or dead Redis stops
 * them at once with a message instead of a client retrying forever.
 */
export async function checkRedis(o: Pick<RedisConnectionOptions, 'url' | 'clusterNodes' | 'username' | 'password' | 'tls'>, timeoutMs = STARTUP_REDIS_TIMEOUT_MS): Promise<void> {
  const client = connect(o, { lazyConnect: true, connectTimeout: timeoutMs, maxRetriesPerRequest: 0, retryStrategy: () => null, enableReadyCheck: false });
  let seen: Error | undefined;
  client.on('error', (err: Error) => (seen ??= err));
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs);
  });
  try {
    await Promise.race([client.connect().then(() => client.ping()), timeout]);
  } catch (err) {
    const why = (seen ?? (err as Error)).message.split('\n')[0];
    throw new Error(`cannot connect to Redis at ${redisAddress(o)}: ${why}`, { cause: err });
  } finally {
    clearTimeout(timer);
    client.disconnect();
  }
}

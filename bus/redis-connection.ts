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
    return new Cluster(nodes, { redisOptions: common, enableAutoPipelining: extra.enableAutoPipelining ?? false, clusterRetryStrategy: (n: number) => Math.min(50 * n, 500) });
  }
  return new Redis(o.url ?? 'redis://127.0.0.1:6379', common);
}

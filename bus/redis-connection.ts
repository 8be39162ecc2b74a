import type { ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { BusSecretVersion } from './codec.js';

/** A client for a standalone Redis or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/** How to reach Redis, and the bus's shared settings. Part of `rateLimiter({ redis })`. */
export interface RedisConnectionOptions {
  /** `redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS. */
  url?: string;
  /** Seed nodes of a Redis Cluster (URLs); instead of `url`. */
  clusterNodes?: string[];
  /** ACL user and password (override those in the URL). */
  username?: string;
  password?: string;
  /** TLS: `true` for the defaults, or Node TLS options (CA, client certificate, servername). */
  tls?: boolean | ConnectionOptions;
  /** Prefix of every key and channel. @default 'frl' */
  prefix?: string;
  /** Versioned secret that authenticates every bus entry (HMAC); the same on every node. */
  busSecret: { versions: BusSecretVersion[]; current?: string };
  /**
   * Versioned secret under which the admin API signs the stored policy and kill switch; a node applies
   * only records that verify. @default busSecret (give the admin API the same)
   */
  policySecret?: { versions: BusSecretVersion[]; current?: string };
  /** How often an owner checkpoints a shard it owns, so the log behind it can be trimmed. @default 1000 */
  snapshotMs?: number;
  /** Cap on a shard stream's length, a safety net behind trimming by age. @default 100000 */
  maxStreamLength?: number;
  /**
   * The fast path's direct channel: each process listens on `host:port` (port 0: any free one) and
   * advertises `advertise:<port>` in Redis; the others send it their asks over TCP, HMAC-sealed like
   * the bus. `false`: asks go over Redis pub/sub only. The Redis channel is also the fallback while
   * a connection is not up. @default { host: '127.0.0.1', port: 0, advertise: host (or the machine's hostname when host is 0.0.0.0 or ::) }
   */
  fastPath?: false | { host?: string; port?: number; advertise?: string };
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
  if (o.clusterNodes !== undefined) {
    const nodes = o.clusterNodes.map((u) => {
      const url = new URL(u);
      return { host: url.hostname, port: Number(url.port || 6379) };
    });
    return new Cluster(nodes, { redisOptions: common, enableAutoPipelining: extra.enableAutoPipelining ?? false, clusterRetryStrategy: (n: number) => Math.min(50 * n, 500) });
  }
  return new Redis(o.url ?? 'redis://127.0.0.1:6379', common);
}

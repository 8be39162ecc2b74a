import type { ConnectionOptions } from 'node:tls';
import type { BusSecretVersion } from './codec.js';
import type { LimitEventOptions } from './limit-event.js';

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
  /**
   * Bounds of the limit-event log: its byte budget in Redis (`maxBytes`), how long an aggregate waits
   * before it is written (`flushMs`) and how many are held in memory (`maxPending`).
   * @default { maxBytes: 268435456, flushMs: 60000, maxPending: 10000 }
   */
  events?: LimitEventOptions;
}

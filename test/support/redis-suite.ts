import { Redis } from 'ioredis';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';

/** What the tests of a suite over a private redis-server share. */
export interface RedisSuite {
  /** The suite's redis-server, started before its first test. */
  redis: RedisProcess;
  /** A plain client of it, for what a test reads or plants in Redis itself. */
  raw: Redis;
  /** The current test's key prefix (`<tag><n>`): each test has a fleet of its own. */
  prefix: string;
}

/**
 * Registers, in the calling `describe`, the hooks of a suite over a private redis-server: the server
 * and a client, started once and stopped after the last test, and a fresh key prefix for every test.
 * `bind` is handed them once started and again as each test's prefix is set (before the suite's own
 * `beforeEach` hooks, which may use them).
 */
export function redisSuite(tag: string, bind: (suite: RedisSuite) => void): void {
  let suite: RedisSuite | undefined;
  let n = 0;
  before(async () => {
    const redis = await startRedis();
    suite = { redis, raw: new Redis(redis.url), prefix: '' };
    bind(suite);
  });
  beforeEach(() => {
    suite!.prefix = `${tag}${++n}`;
    bind(suite!);
  });
  after(async () => {
    suite?.raw.disconnect();
    await suite?.redis.stop();
  });
}

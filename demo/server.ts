import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { checkRedis } from '../bus/redis-connection.js';
import type { RedisConnectionOptions } from '../bus/redis-options.js';
import { ConfigError } from '../lib/errors.js';
import { createDemoApp } from './app.js';

/**
 * `npm start`: the demo gateway. Without REDIS_URL, a fleet of one in memory. With REDIS_URL (or
 * REDIS_CLUSTER_NODES), one node of a fleet sharing every allowance over Redis; then KEY_HASH_SECRET
 * and BUS_SECRET must be set, the same on every node, and POLICY_SECRET as the admin API's (BUS_SECRET
 * if unset: the stored policy and kill switch must be signed under it). Environment: PORT (3000), NODE_ID
 * (hostname-pid), POLICY_FILE (demo/policy.json), REDIS_PREFIX (frl), DEGRADED_AFTER_MS (30000),
 * LOG_LEVEL (info), and for the fast path's direct channel FAST_PATH_HOST (127.0.0.1), FAST_PATH_PORT
 * (0: any free port), FAST_PATH_ADVERTISE (the host others dial), or FAST_PATH=off for Redis pub/sub
 * only; FAST_PATH_DEADLINE_MS (1). The server listens once the node reaches every shard's owner; it
 * exits 1 if Redis does not answer within 5 s, no owner is reached within 15 s, or the port is taken.
 */
const env = process.env;
const logger = pino({ name: 'demo-gateway', level: env.LOG_LEVEL ?? 'info' });
const port = Number(env.PORT ?? 3000);
const configFile = env.POLICY_FILE ?? fileURLToPath(new URL('../../demo/policy.json', import.meta.url));
const clusterNodes = env.REDIS_CLUSTER_NODES ? env.REDIS_CLUSTER_NODES.split(',').map((u) => u.trim()) : undefined;
const shared = env.REDIS_URL !== undefined || clusterNodes !== undefined;

function fail(message: string): never {
  process.stderr.write(`demo gateway: ${message}\n`);
  process.exit(1);
}

if (shared && !env.KEY_HASH_SECRET) fail('KEY_HASH_SECRET must be set (the same on every node) when REDIS_URL is set');
if (shared && !env.BUS_SECRET) fail('BUS_SECRET must be set (the same on every node) when REDIS_URL is set');
const secret = env.KEY_HASH_SECRET ?? randomBytes(32).toString('base64url');
const redis: RedisConnectionOptions | undefined = shared
  ? {
      ...(clusterNodes ? { clusterNodes } : { url: env.REDIS_URL as string }),
      ...(env.REDIS_PREFIX ? { prefix: env.REDIS_PREFIX } : {}),
      busSecret: { versions: [{ version: 'b1', secret: env.BUS_SECRET as string }] },
      policySecret: { versions: [{ version: 'p1', secret: (env.POLICY_SECRET || env.BUS_SECRET) as string }] },
      fastPath:
        env.FAST_PATH === 'off'
          ? false
          : {
              ...(env.FAST_PATH_HOST ? { host: env.FAST_PATH_HOST } : {}),
              ...(env.FAST_PATH_PORT ? { port: Number(env.FAST_PATH_PORT) } : {}),
              ...(env.FAST_PATH_ADVERTISE ? { advertise: env.FAST_PATH_ADVERTISE } : {}),
            },
    }
  : undefined;

// A wrong or dead Redis stops it here, in a few seconds, before it joins the fleet.
if (redis !== undefined) await checkRedis(redis).catch((err: Error) => fail(err.message));

try {
  const { app, limiter } = createDemoApp({
    configFile,
    keyHash: { versions: [{ version: 'v1', secret }] },
    logger,
    rateLimitHeaders: true,
    ...(env.NODE_ID ? { nodeId: env.NODE_ID } : {}),
    ...(redis ? { redis } : {}),
    ...(env.DEGRADED_AFTER_MS ? { degradedAfterMs: Number(env.DEGRADED_AFTER_MS) } : {}),
    ...(env.FAST_PATH_DEADLINE_MS ? { fastPathDeadlineMs: Number(env.FAST_PATH_DEADLINE_MS) } : {}),
  });
  const timeout = setTimeout(() => fail('could not reach every shard owner over Redis within 15 s; is REDIS_URL right?'), 15_000);
  await limiter.ready();
  clearTimeout(timeout);
  const server = app.listen(port, (err?: Error) => {
    // Port taken, say: leave the fleet cleanly rather than hold shards without serving.
    if (err) return void limiter.close().finally(() => fail(`cannot listen on port ${port}: ${err.message}`));
    logger.info({ port, configFile, fleet: shared ? 'redis' : 'memory' }, `demo gateway listening on http://127.0.0.1:${port}`);
    process.stdout.write(`\n  Demo gateway: http://127.0.0.1:${port}\n  Try: curl -i -H 'x-api-key: demo-free' http://127.0.0.1:${port}/api/hello\n\n`);
  });
  const stop = (): void => {
    server.close();
    void limiter.close().then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
} catch (err) {
  if (err instanceof ConfigError) fail(`invalid configuration (${configFile}):\n${err.problems.map((p) => `  - ${p.path}: ${p.message}`).join('\n')}`);
  throw err;
}

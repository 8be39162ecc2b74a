#!/usr/bin/env node
import { pino } from 'pino';
import { PolicyStore } from '../bus/policy-store.js';
import { StoreSigner } from '../bus/store-signature.js';
import { checkRedis, connect } from '../bus/redis-connection.js';
import { EventLog } from '../bus/events.js';
import { createAdminApp } from './app.js';
import { maintenanceQueue } from './jobs.js';

/**
 * `npm run admin`: the admin API on its own port. Environment: REDIS_URL (required), ADMIN_PORT (3001),
 * ADMIN_TOKEN and BREAK_GLASS_TOKEN (required, at least 32 characters, different), KEY_HASH_SECRET
 * (required: the gateways' secret, so raw keys given here hash to their key ids), POLICY_SECRET (the
 * gateways' `policySecret`; BUS_SECRET when they use that), REDIS_PREFIX (frl), LOG_LEVEL (info). It
 * refuses to start without them, and exits 1 if Redis does not answer within 5 s or the port is taken.
 */
const env = process.env;
const where = env.REDIS_CLUSTER_NODES ? { clusterNodes: env.REDIS_CLUSTER_NODES.split(',').map((u) => u.trim()) } : { url: env.REDIS_URL ?? '' };
const logger = pino({ name: 'admin-api', level: env.LOG_LEVEL ?? 'info' });
const problems: string[] = [];
if (!env.REDIS_URL && !env.REDIS_CLUSTER_NODES) problems.push('REDIS_URL (or REDIS_CLUSTER_NODES) must be set');
// Bearer tokens guard every change to enforcement: long enough that guessing is hopeless.
for (const [name, min] of [
  ['ADMIN_TOKEN', 32],
  ['BREAK_GLASS_TOKEN', 32],
  ['KEY_HASH_SECRET', 16],
] as const) {
  if (!env[name] || env[name]!.length < min) problems.push(`${name} must be set, at least ${min} characters`);
}
const policySecret = env.POLICY_SECRET || env.BUS_SECRET;
if (!policySecret || policySecret.length < 16) problems.push("POLICY_SECRET (or BUS_SECRET, the gateways' secret the policy is signed under) must be set, at least 16 characters");
if (env.ADMIN_TOKEN && env.ADMIN_TOKEN === env.BREAK_GLASS_TOKEN) problems.push('BREAK_GLASS_TOKEN must differ from ADMIN_TOKEN');
for (const name of ['ADMIN_TOKEN', 'BREAK_GLASS_TOKEN', 'KEY_HASH_SECRET', 'POLICY_SECRET', 'BUS_SECRET'] as const) {
  if (env[name]?.startsWith('replace-with-')) problems.push(`${name} still holds the .env.example placeholder: replace it with a secret of your own`);
}
const port = Number(env.ADMIN_PORT ?? 3001);
if (!Number.isInteger(port) || port < 0 || port > 65535) problems.push(`ADMIN_PORT must be a port number, got "${env.ADMIN_PORT}"`);
if (problems.length) {
  process.stderr.write(`admin API: refusing to start:\n${problems.map((p) => `  - ${p}`).join('\n')}\n`);
  process.exit(1);
}

// A wrong or dead Redis stops it here, in a few seconds, rather than serving errors forever.
await checkRedis(where).catch((err: Error) => {
  process.stderr.write(`admin API: ${err.message}\n`);
  process.exit(1);
});
const redis = connect(where, { commandTimeout: 2000 });
redis.on('error', (err: Error) => logger.warn({ err }, 'redis connection error'));
const store = new PolicyStore(redis, new StoreSigner([{ version: 'p1', secret: policySecret! }]), env.REDIS_PREFIX);
// BullMQ wants its own connection, with maxRetriesPerRequest: null.
const queue = maintenanceQueue(connect(where, { maxRetriesPerRequest: null }), env.REDIS_PREFIX ?? 'frl');
const app = createAdminApp({
  store,
  redis,
  ...(env.REDIS_PREFIX ? { prefix: env.REDIS_PREFIX } : {}),
  adminToken: env.ADMIN_TOKEN!,
  breakGlassToken: env.BREAK_GLASS_TOKEN!,
  keyHash: { versions: [{ version: 'v1', secret: env.KEY_HASH_SECRET! }] },
  logger,
  queue,
  events: new EventLog(redis, env.REDIS_PREFIX),
});
const server = app.listen(port, (err?: Error) => {
  if (err) {
    process.stderr.write(`admin API: cannot listen on port ${port}: ${err.message}\n`);
    void Promise.all([queue.close(), redis.quit()]).finally(() => process.exit(1));
    return;
  }
  logger.info({ port }, `admin API listening on http://127.0.0.1:${port}/admin/v1`);
});
const stop = (): void => {
  server.close();
  void Promise.all([queue.close(), redis.quit()]).finally(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);

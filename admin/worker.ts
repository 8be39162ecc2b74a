#!/usr/bin/env node
import { pino } from 'pino';
import { appendAudit } from '../bus/policy-store.js';
import { checkRedis, connect } from '../bus/redis-connection.js';
import { startWorker } from './jobs.js';

/**
 * `npm run worker`: the BullMQ worker for the epoch reaper (every minute) and retention (every hour),
 * and for runs the admin API asks for. Environment: REDIS_URL (required), REDIS_PREFIX (frl), SHARDS
 * (64, as the gateways), HISTORY_RETENTION_DAYS (30: the traffic history policy staging reads), LOG_LEVEL
 * (info). It exits 1 if Redis does not answer within 5 s.
 */
const env = process.env;
const logger = pino({ name: 'maintenance-worker', level: env.LOG_LEVEL ?? 'info' });
const shards = Number(env.SHARDS ?? 64);
const historyDays = Number(env.HISTORY_RETENTION_DAYS ?? 30);
const where = env.REDIS_CLUSTER_NODES ? { clusterNodes: env.REDIS_CLUSTER_NODES.split(',').map((u) => u.trim()) } : { url: env.REDIS_URL ?? '' };
const badDays = !(historyDays > 0 && historyDays <= 400);
if ((!env.REDIS_URL && !env.REDIS_CLUSTER_NODES) || !Number.isInteger(shards) || shards < 1 || badDays) {
  process.stderr.write(
    `maintenance worker: refusing to start:\n${!env.REDIS_URL && !env.REDIS_CLUSTER_NODES ? '  - REDIS_URL (or REDIS_CLUSTER_NODES) must be set\n' : ''}${!Number.isInteger(shards) || shards < 1 ? `  - SHARDS must be a whole number ≥ 1, got "${env.SHARDS}"\n` : ''}${badDays ? `  - HISTORY_RETENTION_DAYS must be a number of days above 0, at most 400, got "${env.HISTORY_RETENTION_DAYS}"\n` : ''}`,
  );
  process.exit(1);
}
const prefix = env.REDIS_PREFIX ?? 'frl';
// A wrong or dead Redis stops it here, in a few seconds, rather than BullMQ retrying forever.
await checkRedis(where).catch((err: Error) => {
  process.stderr.write(`maintenance worker: ${err.message}\n`);
  process.exit(1);
});
// BullMQ's blocking connection needs maxRetriesPerRequest: null.
const connection = connect(where, { maxRetriesPerRequest: null });
const redis = connect(where, { commandTimeout: 10_000 });
const { worker, queue } = await startWorker({ connection, redis, store: { audit: (...entry) => appendAudit(redis, prefix, ...entry) }, prefix, shards, historyRetentionMs: historyDays * 86_400_000 });
worker.on('completed', (job, result) => logger.info({ job: job.name, id: job.id, result }, 'job done'));
worker.on('failed', (job, err) => logger.error({ job: job?.name, id: job?.id, err }, 'job failed'));
const stop = (): void => {
  void Promise.all([worker.close(), queue.close()]).finally(() => {
    connection.disconnect();
    redis.disconnect();
    process.exit(0);
  });
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
// Announced once a SIGTERM stops it cleanly: a supervisor may send one the moment it reads this.
logger.info({ prefix, shards, historyDays }, 'maintenance worker running');

import { Queue, Worker, type ConnectionOptions, type Job } from 'bullmq';
import type { Cluster, Redis } from 'ioredis';
import { EventLog } from '../bus/events.js';
import { consumerName, GROUP, KeySchema, parseOwnerEntry } from '../bus/keys.js';
import { trimHistory } from '../bus/traffic-history.js';
import type { AuditWriter } from '../bus/policy-store.js';
import { ErrorCode, RateLimiterError } from '../lib/errors.js';

type Client = Redis | Cluster;

/** A member unheard of this long is dead: its consumers are reaped (matches the bus's own pruning). */
export const DEAD_AFTER_MS = 3_600_000;
/** A consumer is only touched once it has been idle this long: a process that just joined may not be listed yet. */
export const CONSUMER_IDLE_MS = 60_000;
/** Report entries older than the longest window a policy allows (a day) plus a minute are useless. */
export const REPORTS_MAX_AGE_MS = 86_400_000 + 60_000;
/** J2: limit events are kept 30 days, the audit trail 13 months. */
export const EVENTS_RETENTION_MS = 30 * 86_400_000;
export const AUDIT_RETENTION_MS = 395 * 86_400_000;
/** The traffic history policy staging judges candidates by: 30 days unless configured. */
export const HISTORY_RETENTION_MS = 30 * 86_400_000;

export interface ReapResult {
  deadConsumers: number;
  claimedEntries: number;
  removedConsumers: number;
  removedMembers: number;
  trimmedEntries: number;
}

export interface RetentionResult {
  eventsDeleted: number;
  auditDeleted: number;
  /** Hours of traffic history deleted. */
  historyHoursDeleted: number;
}

/**
 * J1, the epoch reaper: for every shard stream, the consumers of processes that are not live members
 * any more have their pending entries claimed by the shard's current owner (which folds them on its
 * next sweep) and are then removed; members unheard for an hour leave the member list; report entries
 * older than any window are trimmed. Idempotent: a second run (or two at once) finds nothing to do.
 */
export async function reap(redis: Client, prefix: string, shards: number, now: number, { consumerIdleMs = CONSUMER_IDLE_MS } = {}): Promise<ReapResult> {
  const result: ReapResult = { deadConsumers: 0, claimedEntries: 0, removedConsumers: 0, removedMembers: 0, trimmedEntries: 0 };
  const keys = new KeySchema(prefix);
  const members = keys.ctl('members');
  const epochsKey = keys.ctl('epochs');
  const gone = await redis.zrangebyscore(members, '-inf', now - DEAD_AFTER_MS);
  if (gone.length > 0) {
    result.removedMembers = await redis.zrem(members, ...gone);
    await redis.hdel(epochsKey, ...gone);
    await redis.hdel(keys.ctl('status'), ...gone);
    await redis.hdel(keys.ctl('beats'), ...gone);
  }
  const epochs = await redis.hgetall(epochsKey);
  const live = new Set((await redis.zrangebyscore(members, now - DEAD_AFTER_MS, '+inf')).map((id) => consumerName(id, epochs[id] ?? '')));
  for (let s = 0; s < shards; s++) {
    const key = keys.shard(s, 'reports');
    let consumers: unknown[];
    try {
      consumers = (await redis.call('XINFO', 'CONSUMERS', key, GROUP)) as unknown[];
    } catch (err) {
      if (/no such key|NOGROUP/i.test(String((err as Error).message))) continue; // nothing to reap
      throw err;
    }
    // Read per shard: the owner may have changed while the reaper went through the others.
    const owner = parseOwnerEntry((await redis.hget(keys.ctl('owners'), String(s))) ?? '');
    const ownerConsumer = owner.node ? consumerName(owner.node, owner.nodeEpoch) : undefined;
    for (const c of consumers as string[][]) {
      const info: Record<string, string> = {};
      for (let i = 0; i + 1 < c.length; i += 2) info[c[i]!] = String(c[i + 1]);
      const name = info.name ?? '';
      // A recently active consumer is never touched, listed as a member or not.
      if (live.has(name) || name === ownerConsumer || Number(info.idle) < consumerIdleMs) continue;
      result.deadConsumers++;
      if (Number(info.pending) > 0) {
        if (ownerConsumer === undefined || !live.has(ownerConsumer)) continue; // kept for a future owner
        const pending = (await redis.call('XPENDING', key, GROUP, '-', '+', '10000', name)) as Array<[string]>;
        const ids = pending.map(([id]) => id);
        if (ids.length > 0) result.claimedEntries += ((await redis.call('XCLAIM', key, GROUP, ownerConsumer, String(consumerIdleMs), ...ids, 'JUSTID')) as string[]).length;
        if (ids.length < Number(info.pending)) continue; // the rest next run: a consumer goes only once it holds nothing
      }
      await redis.call('XGROUP', 'DELCONSUMER', key, GROUP, name);
      result.removedConsumers++;
    }
    result.trimmedEntries += Number(await redis.call('XTRIM', key, 'MINID', String(now - REPORTS_MAX_AGE_MS)));
  }
  return result;
}

/**
 * J2, retention: limit events older than 30 days, audit entries older than 13 months and hours of
 * traffic history older than `historyRetentionMs` (30 days) are deleted; a run that deleted anything
 * is itself audited. Idempotent: trimming by age twice deletes nothing more.
 */
export async function retention(redis: Client, store: AuditWriter, prefix: string, now: number, { historyRetentionMs = HISTORY_RETENTION_MS } = {}): Promise<RetentionResult> {
  const eventsDeleted = await new EventLog(redis, prefix).trimBefore(now - EVENTS_RETENTION_MS);
  const auditDeleted = Number(await redis.call('XTRIM', `${prefix}:{pol}:audit`, 'MINID', String(Math.max(0, now - AUDIT_RETENTION_MS))));
  const historyHoursDeleted = await trimHistory(redis, prefix, now - historyRetentionMs);
  if (eventsDeleted + auditDeleted + historyHoursDeleted > 0) {
    const days = Math.round((historyRetentionMs / 86_400_000) * 100) / 100;
    await store.audit(
      'retention-job',
      'retention',
      'events, audit, traffic history',
      `scheduled retention (30 days, 13 months, ${days} days)`,
      `${eventsDeleted} events, ${auditDeleted} audit entries, ${historyHoursDeleted} hours of traffic history deleted`,
    );
  }
  return { eventsDeleted, auditDeleted, historyHoursDeleted };
}

/** The maintenance queue's name under a prefix. */
export function queueName(prefix: string): string {
  return `${prefix}-maintenance`;
}

/** BullMQ's key prefix: one hash tag, so its multi-key scripts work on a Redis Cluster. */
const BULL_PREFIX = '{frl-jobs}';

/** The queue the admin API adds on-demand runs to (and the worker schedules repeats on). */
export function maintenanceQueue(connection: ConnectionOptions, prefix: string): Queue {
  return new Queue(queueName(prefix), { connection, prefix: BULL_PREFIX, defaultJobOptions: { removeOnComplete: { age: 7 * 86_400, count: 1000 }, removeOnFail: { age: 30 * 86_400 } } });
}

/**
 * The worker behind `npm run worker`: runs reaps and retention, on demand and on a schedule (reap
 * every minute, retention every hour). Several workers may run: each job is idempotent.
 */
export async function startWorker(o: {
  connection: ConnectionOptions;
  redis: Client;
  store: AuditWriter;
  prefix: string;
  shards: number;
  now?: () => number;
  /** How long the traffic history is kept (30 days). */
  historyRetentionMs?: number;
}): Promise<{ worker: Worker; queue: Queue }> {
  const now = o.now ?? Date.now;
  const queue = maintenanceQueue(o.connection, o.prefix);
  await queue.upsertJobScheduler('reap-every-minute', { every: 60_000 }, { name: 'reap' });
  await queue.upsertJobScheduler('retention-every-hour', { every: 3_600_000 }, { name: 'retention' });
  const worker = new Worker(
    queueName(o.prefix),
    async (job: Job) => {
      if (job.name === 'reap') return reap(o.redis, o.prefix, o.shards, now());
      if (job.name === 'retention') return retention(o.redis, o.store, o.prefix, now(), o.historyRetentionMs === undefined ? {} : { historyRetentionMs: o.historyRetentionMs });
      throw new RateLimiterError(ErrorCode.REQUEST, `unknown job "${job.name}"`);
    },
    { connection: o.connection, prefix: BULL_PREFIX, concurrency: 1 },
  );
  return { worker, queue };
}

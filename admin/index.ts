/**
 * `fleet-ratelimit/admin`: the operator's side — the admin API, the BullMQ maintenance queue and its
 * worker. Kept off the main entry point so a gateway installs none of it: it needs the optional peers
 * `express`, `helmet` and `bullmq`.
 */
export { createAdminApp, type AdminOptions } from './app.js';
export { maintenanceQueue, startWorker, queueName, reap, retention, type ReapResult, type RetentionResult } from './jobs.js';
export { PolicyStore, PolicyConflict, type StoredPolicy, type AuditEntry, type SwitchState, type AuditWriter } from '../bus/policy-store.js';
export { StoreSigner, StoreRecordError, type SignedKind, type StoreRejectReason } from '../bus/store-signature.js';
export { EventLog, type EventLogOptions, type LimitEvent, type LimitRefusal } from '../bus/events.js';
export { connect, type RedisClient, type RedisConnectionOptions } from '../bus/redis-connection.js';

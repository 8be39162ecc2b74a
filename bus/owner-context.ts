import type { Clock } from '../lib/clock.js';
import type { Envelope, EnvelopeCodec } from './codec.js';
import type { KeySchema } from './keys.js';
import type { RedisClient } from './redis-connection.js';
import type { RedisBusOptions, RedisBusStats } from './redis-bus-types.js';
import type { CreditOwner, NodeIdentity } from './types.js';

/** A shard this node owns: replaying its log, settling after a blind takeover, or serving. */
export interface Owned {
  epoch: number;
  state: 'taking' | 'settling' | 'ready';
  /** When it became ours (monotonic). */
  takenAt: number;
  /** Round of the last sweep for stranded entries. */
  claimRound: number;
  /** Monotonic time until which the lease is certainly ours (renewal sent + lease − two rounds). */
  validUntil: number;
  settleUntil: number;
  /** Anything folded or granted since the last snapshot. */
  dirty: boolean;
  snapshotAt: number;
  /** Id of the last entry read from the shard's report stream. */
  lastRead: string;
  /** Given up by this round, which runs once the shard's log writes are done. */
  leaving?: boolean;
  /** The seal of the log fence this owner raised (`LogFence.raise`), re-sealed `settled` once ready. */
  seal?: string;
  /** After a blind takeover: each member's first check-in since, in this process's time. */
  checkedIn?: Map<string, number>;
  /**
   * After a blind takeover, once every member has checked in enough: the report stream's last entry
   * then ('' while asking). Ready once the read loop has read past it, so every member's resync batch
   * (published before its check-in, on the same connection) is folded.
   */
  readTo?: string;
}

/**
 * What the parts of the Redis bus (the shard log and its fence, the report reader, the takeover, the
 * round loop, the fast path's asks) share with the bus: its settings and connections, and the shards
 * it owns. Getters for what the bus learns later (its identity, its owner) or changes (closed).
 */
export interface OwnerContext {
  readonly opts: RedisBusOptions;
  readonly clock: Clock;
  readonly codec: EnvelopeCodec;
  readonly keys: KeySchema;
  /** The command connection (auto-pipelined). */
  readonly redis: RedisClient;
  readonly stats: RedisBusStats;
  /** Shards this node owns, by shard. */
  readonly owned: Map<number, Owned>;
  identity(): NodeIdentity | undefined;
  owner(): CreditOwner | undefined;
  closed(): boolean;
  /** Whether this node may answer for `shard` now: its lease is current and its ledgers rebuilt. */
  serving(shard: number): boolean;
  /** Opens an envelope, counting one that does not open (`stats.rejected`). */
  open(fields: Readonly<Record<string, unknown>>): Envelope | undefined;
  /** Logs a warning, each kind at most once every 5 s; none after close. */
  warn(err: unknown, msg: string, extra?: object): void;
}

import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { RejectReason } from './codec.js';
import type { FastPathStats } from './fast-path.js';
import type { LoopStalls } from './loop-stall.js';
import type { RedisConnectionOptions } from './redis-options.js';

/** Settings the limiter adds from its own options. */
export interface RedisBusOptions extends RedisConnectionOptions {
  readonly shards: number;
  readonly roundMs: number;
  /** The nodes' F5 limit: a silent member is held back for this long, since it may self-grant until then. */
  readonly degradedAfterMs: number;
  readonly clock?: Clock;
  readonly logger?: Logger;
  /** This process's event-loop stalls, not counted as owner silence (one is started if not given). */
  readonly loop?: LoopStalls;
}

/** Counters of the Redis bus (metrics, tests, the benchmark). */
export interface RedisBusStats extends FastPathStats {
  rounds: number;
  roundFailures: number;
  reportsSent: number;
  reportsSkipped: number;
  entriesFolded: number;
  rejected: Record<RejectReason | 'fold', number>;
  deadLettered: number;
  asksServed: number;
  messagesSent: number;
  /** Owner messages dropped because a newer owner holds their shard. */
  staleMessages: number;
  /** Grants issued but never sent: their log write failed, or the log's fence refused it. */
  grantsWithheld: number;
  takeovers: number;
  snapshots: number;
}

/** A Redis bus's counters as it starts: all zero. */
export function zeroStats(): RedisBusStats {
  return {
    rounds: 0,
    roundFailures: 0,
    reportsSent: 0,
    reportsSkipped: 0,
    entriesFolded: 0,
    rejected: { version: 0, secret: 0, mac: 0, malformed: 0, fold: 0 },
    deadLettered: 0,
    asksSent: 0,
    asksDirect: 0,
    asksServed: 0,
    answersLate: 0,
    fastPathTimeouts: 0,
    messagesSent: 0,
    staleMessages: 0,
    grantsWithheld: 0,
    takeovers: 0,
    snapshots: 0,
  };
}

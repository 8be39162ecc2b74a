import type { Cluster, Redis } from 'ioredis';
import { systemClock, type Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import { EventAggregator } from './event-aggregator.js';
import { decodeEvent, encodeEvent, maxEntries, parseEventOptions, type EventConfig } from './event-entry.js';
import type { LimitEvent, LimitEventOptions, LimitEventSink, LimitEventStats, LimitRefusal } from './limit-event.js';

export type { LimitEvent, LimitRefusal };

const SCAN = 1000;
/** Drops are logged at most this often (the counts since the last line). */
const LOG_EVERY_MS = 60_000;

type Client = Redis | Cluster;

/** What an `EventLog` is made with besides its client and prefix. */
export interface EventLogOptions extends LimitEventOptions {
  /** Time source for the aggregates' due times. @default the system clock */
  clock?: Clock;
  /** Where dropped and evicted events are reported (once a minute at most). @default none */
  logger?: Logger;
}

/**
 * Limit events (429s and 503s) in the stream `frl:{ev}:events`, recorded off the request path:
 * `record` only counts a refusal into its aggregate (key id, class, window, route class, node);
 * `flush` (every quarter second on a node) writes the aggregates whose window ended or that waited
 * `flushMs`, in one transaction that then trims the stream to its byte budget. Memory is bounded
 * by `maxPending`, the stream by `maxBytes`; what either refuses is counted, and logged once a
 * minute. Subject access and erasure scan the stream for key ids; retention trims it by age.
 */
export class EventLog implements LimitEventSink {
  readonly key: string;
  readonly config: EventConfig;
  /** The stream length its byte budget allows. */
  readonly maxLength: number;
  private readonly aggregator: EventAggregator;
  private readonly clock: Clock;
  private readonly logger: Logger | undefined;
  private counts = { refusals: 0, written: 0, droppedWrite: 0, evicted: 0 };
  private logged = { droppedPending: 0, droppedWrite: 0, evicted: 0 };
  private logAt = 0;

  /** Throws a `ConfigError` naming the field (`events.maxBytes`, …) for a bad option. */
  constructor(
    private readonly redis: Client,
    prefix = 'frl',
    options: EventLogOptions = {},
  ) {
    const { clock, logger, ...limits } = options;
    this.config = parseEventOptions(limits);
    this.key = `${prefix}:{ev}:events`;
    this.maxLength = maxEntries(this.config.maxBytes);
    this.aggregator = new EventAggregator(this.config.maxPending, this.config.flushMs);
    this.clock = clock ?? systemClock;
    this.logger = logger;
  }

  /** Counts a refusal into its aggregate; never blocks, never throws. */
  record(r: LimitRefusal): void {
    this.counts.refusals++;
    this.aggregator.add(r);
  }

  get stats(): LimitEventStats {
    return { ...this.counts, droppedPending: this.aggregator.dropped };
  }

  get dropped(): number {
    return this.aggregator.dropped + this.counts.droppedWrite;
  }

  /** Aggregates held in memory, awaiting their write. */
  get pending(): number {
    return this.aggregator.size;
  }

  /**
   * Writes the aggregates due (every one with `all`, as on close) and trims the stream to its budget.
   * A write that fails loses its aggregates (their refusals counted), never retried forever.
   */
  async flush(all = false): Promise<void> {
    const now = this.clock.now();
    const batch = this.aggregator.take(now, all);
    if (batch.length > 0) {
      const tx = this.redis.multi();
      for (const e of batch) tx.xadd(this.key, '*', ...encodeEvent(e));
      tx.xtrim(this.key, 'MAXLEN', String(this.maxLength));
      try {
        const replies = (await tx.exec()) ?? [];
        const trim = replies[batch.length];
        if (replies.length !== batch.length + 1 || replies.some(([err]) => err)) throw new Error('limit event write refused');
        this.counts.written += batch.length;
        this.counts.evicted += Number(trim?.[1] ?? 0);
      } catch {
        this.counts.droppedWrite += batch.reduce((n, e) => n + e.count, 0);
      }
    }
    this.report(now);
  }

  /** Every event of these key ids (subject access), oldest first. */
  async find(keyIds: readonly string[]): Promise<Array<LimitEvent & { id: string }>> {
    const out: Array<LimitEvent & { id: string }> = [];
    await this.scan(keyIds, (id, e) => out.push({ id, ...e }));
    return out;
  }

  /** Deletes every event of these key ids (erasure); returns how many. */
  async erase(keyIds: readonly string[]): Promise<number> {
    const ids: string[] = [];
    await this.scan(keyIds, (id) => ids.push(id));
    for (let i = 0; i < ids.length; i += SCAN) await this.redis.xdel(this.key, ...ids.slice(i, i + SCAN));
    return ids.length;
  }

  /** Deletes events written before `beforeMs` (retention); returns how many. */
  async trimBefore(beforeMs: number): Promise<number> {
    return this.redis.xtrim(this.key, 'MINID', String(Math.max(0, Math.floor(beforeMs))));
  }

  /** Once a minute at most: what was dropped or evicted since the last line. */
  private report(now: number): void {
    const s = this.stats;
    const since = { droppedPending: s.droppedPending - this.logged.droppedPending, droppedWrite: s.droppedWrite - this.logged.droppedWrite, evicted: s.evicted - this.logged.evicted };
    if (this.logger === undefined || now < this.logAt || since.droppedPending + since.droppedWrite + since.evicted === 0) return;
    this.logged = { droppedPending: s.droppedPending, droppedWrite: s.droppedWrite, evicted: s.evicted };
    this.logAt = now + LOG_EVERY_MS;
    this.logger.warn({ ...since, maxPending: this.config.maxPending, maxBytes: this.config.maxBytes, maxLength: this.maxLength }, 'limit events dropped or evicted');
  }

  private async scan(keyIds: readonly string[], hit: (id: string, e: LimitEvent) => void): Promise<void> {
    const wanted = new Set(keyIds);
    let start = '-';
    for (;;) {
      const rows = await this.redis.xrange(this.key, start, '+', 'COUNT', SCAN);
      for (const [id, flat] of rows) {
        const e = decodeEvent(flat);
        if (wanted.has(e.keyId)) hit(id, e);
      }
      if (rows.length < SCAN) return;
      start = `(${rows[rows.length - 1]![0]}`;
    }
  }
}

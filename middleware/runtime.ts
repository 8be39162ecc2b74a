import { randomUUID } from 'node:crypto';
import { SCHEMA_VERSION } from '../bus/codec.js';
import { sharedConnections } from '../bus/channels.js';
import { EventLog } from '../bus/events.js';
import type { NodeStatus } from '../bus/keys.js';
import { LoopStalls } from '../bus/loop-stall.js';
import { joinFleet } from '../bus/member.js';
import type { PolicyFeed } from '../bus/policy-feed.js';
import { RedisBus } from '../bus/redis.js';
import { HistoryWriter } from '../bus/traffic-history.js';
import type { Bus } from '../bus/types.js';
import type { FoldOwner } from '../lib/fold-owner.js';
import { LocalCounters } from '../lib/local-counters.js';
import type { Logger } from '../lib/logger.js';
import type { Enforcer } from '../lib/node-contract.js';
import { followStore, type LiveState } from './live-policy.js';
import type { Config } from './options.js';
import { fleetQuota, QuotaReader } from './quota.js';
import { RELEASE } from './release.js';

/** How often a node writes its traffic history (what it saw, the peaks of the windows its owner side swept). */
const HISTORY_FLUSH_MS = 5000;

/** What the runtime reads of the limiter's live state: the store's setters, and the policy in force. */
export interface RuntimeState extends LiveState {
  readonly policyVersion: number;
}

/**
 * Everything a limiter runs besides its request handler: the enforcer (a fleet node over a bus, or a
 * fleet of one's counts), the round timer, and with Redis the limit-event log, the live policy and
 * the kill switch, and the status the admin API's health view reads.
 */
export class Runtime {
  readonly node: Enforcer;
  readonly quota: QuotaReader;
  /** The transport; undefined in a fleet of one. */
  readonly bus: Bus | undefined;
  /** The shard-owner side; undefined in a fleet of one. */
  readonly owner: FoldOwner | undefined;
  /** With Redis: every 429 and 503, aggregated per key and window, written off the request path. */
  readonly events: EventLog | undefined;
  /** With Redis: the stored policy and kill switch. */
  readonly feed: PolicyFeed | undefined;
  /** With Redis: the traffic history policy staging judges candidates by (keys seen; the owner's window peaks). */
  readonly history: HistoryWriter | undefined;
  /** This process's own event-loop stalls: exported, and not taken for owner silence. */
  readonly loop: LoopStalls;
  private readonly local: LocalCounters | undefined;
  private readonly ownBus: boolean;
  private readonly timers: NodeJS.Timeout[] = [];
  private sweepAt = 0;
  private closing: Promise<void> | undefined;

  constructor(
    private readonly cfg: Config,
    private readonly logger: Logger,
    private readonly state: RuntimeState,
  ) {
    const clock = cfg.clock;
    this.loop = LoopStalls.started(clock);
    this.ownBus = cfg.bus === undefined;
    let redisBus: RedisBus | undefined;
    try {
      // A fleet of one (no Redis, no bus given) decides against counts of its own: nothing to lease.
      redisBus =
        cfg.bus !== undefined || cfg.redis === undefined
          ? undefined
          : new RedisBus({ ...cfg.redis, shards: cfg.shards, roundMs: cfg.roundMs, degradedAfterMs: cfg.degradedAfterMs, clock, logger, loop: this.loop });
      this.bus = cfg.bus ?? redisBus;
    } catch (err) {
      // ioredis missing, say: nothing may be left running.
      this.loop.stop();
      throw err;
    }
    const { nodeId, shards, maxBuckets, roundMs, fastPathDeadlineMs, headroom, reserveRatio, degradedAfterMs } = cfg;
    const member = { nodeId, nodeEpoch: randomUUID(), shards, maxBuckets, roundMs, fastPathDeadlineMs, headroom, reserveRatio, degradedAfterMs };
    const fleet = this.bus === undefined ? undefined : joinFleet(this.bus, member, clock);
    this.local = fleet === undefined ? new LocalCounters(clock) : undefined;
    this.node = fleet?.node ?? this.local!;
    this.owner = fleet?.owner;
    this.quota = new QuotaReader(fleet === undefined ? this.local! : fleetQuota(fleet.node, fleet.owner), clock);
    // The event log and the policy feed use the bus's command connection and subscriber.
    const shared = redisBus === undefined ? undefined : sharedConnections(redisBus);
    this.events = shared === undefined ? undefined : new EventLog(shared.command, cfg.redis!.prefix, { ...cfg.redis!.events, clock, logger });
    // With Redis, the live policy and the kill switch come from the store (P4).
    this.feed = shared === undefined ? undefined : followStore(cfg.redis!, shared, state, logger);
    this.history = shared === undefined ? undefined : new HistoryWriter(shared.command, cfg.redis!.prefix, clock, logger);
    const events = this.events;
    if (events !== undefined) this.every(250, () => void events.flush());
    const history = this.history;
    if (history !== undefined) this.every(HISTORY_FLUSH_MS, () => void history.flush());
    this.every(cfg.roundMs, () => this.round());
  }

  /** Credit committed over the windows running, and their allowance (a fleet of one: its counts). */
  leases(nowMs: number): { ledgers: number; committed: number; allowance: number } {
    return (this.owner ?? this.local!).totals(nowMs);
  }

  /** What the admin API's health view shows of this node (A2). */
  status(nowMs: number): NodeStatus {
    const node = this.node;
    return {
      degraded: node.degraded,
      foldAgeMs: node.longestSilenceMs(),
      enforcing: this.state.enforcing,
      policyVersion: this.state.policyVersion,
      buckets: node.buckets.size,
      leases: this.leases(nowMs),
      eventsDropped: this.events?.dropped ?? 0,
      release: RELEASE,
      schemaVersion: SCHEMA_VERSION,
      ...(this.owner === undefined ? {} : { concentration: this.owner.concentration() }),
    };
  }

  /** Stops the timers, flushes the event log and closes every connection the runtime opened; idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const t of this.timers) clearInterval(t);
      this.loop.stop();
      // A policy load in flight ends before the bus's connections do (and applies nothing).
      await Promise.all([this.feed?.close(), this.events?.flush(true), this.history?.flush()]);
      if (this.ownBus) await this.bus?.close();
    })();
    return this.closing;
  }

  /** A round: the node's reports, and once a second the owner's sweep and this node's status. */
  private round(): void {
    try {
      this.node.endRound();
      const now = this.cfg.clock.now();
      if (now >= this.sweepAt) {
        this.owner?.sweep(now, this.history === undefined ? undefined : (...w) => this.history!.peaks.add(...w));
        this.sweepAt = now + 1000;
        this.bus?.publishStatus?.(this.status(now));
      }
    } catch (err) {
      this.logger.error({ err }, 'reconciliation round failed');
    }
  }

  private every(ms: number, run: () => void): void {
    const t = setInterval(run, ms);
    t.unref();
    this.timers.push(t);
  }
}

import { systemClock, type Clock } from '../lib/clock.js';
import type { FleetView } from '../lib/fold-owner.js';
import { rejoining } from '../lib/membership.js';
import type { OwnerLink } from '../lib/node-contract.js';
import type { OwnerMessage, ReportBatch } from '../lib/protocol/messages.js';
import { BeatStatements } from './beats.js';
import { EnvelopeCodec, EnvelopeError, type Envelope, type EnvelopeFields, type PeerAddress } from './codec.js';
import { CreditAsks } from './credit-asks.js';
import { DirectChannel } from './direct-channel.js';
import { FleetTable } from './fleet-table.js';
import { KeySchema, type NodeStatus, type StoredNodeStatus } from './keys.js';
import { LogFence } from './log-fence.js';
import { LoopStalls } from './loop-stall.js';
import { MessageRouter } from './message-router.js';
import type { Owned, OwnerContext } from './owner-context.js';
import { zeroStats, type RedisBusOptions, type RedisBusStats } from './redis-bus-types.js';
import { connect, type RedisClient } from './redis-connection.js';
import { RoundLoop } from './round-loop.js';
import { defineControlScripts, defineGrantScript } from './scripts.js';
import { ShardLog } from './shard-log.js';
import { ShardReach } from './shard-reach.js';
import { ShardReader } from './shard-reader.js';
import { Takeover } from './takeover.js';
import type { Bus, BusCounters, CreditOwner, NodeIdentity } from './types.js';
import { Channels, shareConnections } from './channels.js';

export type { RedisBusOptions, RedisBusStats };

/**
 * The leasing protocol over Redis (key layout: `bus/keys.ts`). This class owns the connections and
 * drives the round loop (`RoundLoop`, once per heartbeat); its parts do the rest: the fleet and the
 * ownership table (`FleetTable`, with heartbeat statements in `BeatStatements`), serving and reach
 * (`ShardReach`), the shards' logs and their fences (`ShardLog`, `LogFence`), reading the report
 * streams (`ShardReader`), taking a shard over (`Takeover`), sending owner messages
 * (`MessageRouter`) and the fast path's asks and answers (`CreditAsks`).
 *
 * Nothing on the request path waits for Redis except a fast-path ask, bounded by its deadline.
 */
export class RedisBus implements Bus {
  readonly stats: RedisBusStats = zeroStats();
  private readonly redis: RedisClient;
  private readonly reader: RedisClient;
  private readonly sub: RedisClient;
  /** Fast-path traffic (asks, their answers and the answers' grant log): written at once, never auto-pipelined. */
  private readonly fast: RedisClient;
  private readonly codec: EnvelopeCodec;
  private readonly clock: Clock;
  private readonly loop: LoopStalls;
  private readonly ownLoop: boolean;
  private readonly keys: KeySchema;
  private identity?: NodeIdentity;
  private deliver?: (m: OwnerMessage) => void;
  private owner?: CreditOwner;
  private readonly owned = new Map<number, Owned>();
  private readonly fleet: FleetTable;
  private readonly reach: ShardReach;
  private readonly log: ShardLog;
  private readonly router: MessageRouter;
  private readonly asks: CreditAsks;
  private readonly rounds: RoundLoop;
  private onOwnersChanged?: (shards: ReadonlySet<number>) => void;
  /** The fast path's direct channel; undefined when `fastPath: false`. */
  private readonly direct?: DirectChannel;
  private readonly warned = new Map<string, number>();
  private closed = false;
  private readonly readerDone: Promise<void>;
  private readonly channels: Channels;

  constructor(private readonly opts: RedisBusOptions) {
    this.codec = new EnvelopeCodec(opts.busSecret.versions, opts.busSecret.current);
    this.clock = opts.clock ?? systemClock;
    this.ownLoop = opts.loop === undefined;
    this.loop = opts.loop ?? LoopStalls.started(this.clock);
    this.keys = new KeySchema(opts.prefix ?? 'frl');
    // XGROUP's key is its second argument: kept out of auto-pipelines, which route by the first.
    this.redis = connect(opts, { enableAutoPipelining: true, autoPipeliningIgnoredCommands: ['xgroup'], commandTimeout: 2000 });
    defineControlScripts(this.redis);
    this.reader = connect(opts, {});
    this.sub = connect(opts, {});
    this.fast = connect(opts, { commandTimeout: 2000 });
    for (const c of [this.redis, this.fast]) defineGrantScript(c);
    for (const c of [this.redis, this.reader, this.sub, this.fast]) c.on('error', (err: Error) => this.warn(err, 'redis connection error'));
    this.channels = new Channels(this.sub);
    shareConnections(this, { command: this.redis, subscribe: (channel, onMessage) => this.channels.subscribe(channel, onMessage) });
    const ctx: OwnerContext = {
      opts,
      clock: this.clock,
      codec: this.codec,
      keys: this.keys,
      redis: this.redis,
      stats: this.stats,
      owned: this.owned,
      identity: () => this.identity,
      owner: () => this.owner,
      closed: () => this.closed,
      serving: (shard) => this.reach.serving(shard),
      open: (fields) => this.tryOpen(fields),
      warn: (err, msg, extra) => this.warn(err, msg, extra),
    };
    const deliver = (m: OwnerMessage): void => this.deliver?.(m);
    const beats = new BeatStatements(this.codec, this.stats, (err, msg) => this.warn(err, msg));
    const fleet = new FleetTable(opts, this.clock, beats, () => this.identity);
    const reach = new ShardReach(this.owned, fleet, this.clock, this.loop, opts.roundMs);
    const fence = new LogFence(ctx, (epoch) => fleet.learnEpoch(epoch));
    const log = new ShardLog(ctx, fence);
    const router = new MessageRouter(ctx, log, this.fast, deliver);
    this.fleet = fleet;
    this.reach = reach;
    this.log = log;
    this.router = router;
    const route = (messages: readonly OwnerMessage[]): void => router.route(messages);
    const reports = new ShardReader(ctx, this.reader, route, (redisMs) => beats.local(redisMs));
    const takeover = new Takeover(ctx, fence, reports);
    if (opts.fastPath !== false) {
      this.direct = new DirectChannel(
        {
          codec: this.codec,
          redis: this.redis,
          clock: this.clock,
          roundMs: opts.roundMs,
          recordKey: (nodeId) => this.keys.ctl(`peer:${nodeId}`),
          members: () => fleet.members,
          open: (fields) => this.tryOpen(fields),
          onFrame: (frame, reply) => this.asks.onFrame(frame, reply),
          warn: (err, msg) => this.warn(err, msg),
        },
        opts.fastPath ?? {},
      );
    }
    const direct = this.direct;
    this.asks = new CreditAsks(ctx, { fleet, reach, log, fast: this.fast, direct, route: (messages, answer) => router.route(messages, answer), deliver });
    const ownersChanged = (shards: ReadonlySet<number>): void => this.onOwnersChanged?.(shards);
    this.rounds = new RoundLoop(ctx, { fleet, beats, fence, log, reports, takeover, reach, asks: this.asks, direct, route, ownersChanged });
    this.readerDone = reports.readLoop();
  }

  // ---- Bus --------------------------------------------------------------------------------------

  connectNode(node: NodeIdentity, onMessage: (message: OwnerMessage) => void, onOwnersChanged?: (shards: ReadonlySet<number>) => void): OwnerLink {
    this.identity = node;
    this.deliver = onMessage;
    this.onOwnersChanged = onOwnersChanged;
    this.channels.subscribe(this.keys.channel(node.nodeId), (message) => this.asks.onChannel(message)).catch((err: Error) => this.warn(err, 'subscribe failed'));
    this.direct?.listen(node);
    return {
      requestCredit: (requests, deadlineMs) => this.asks.requestCredit(requests, deadlineMs),
      publish: (batch) => this.publish(batch),
      heartbeat: (beat) => this.rounds.beat(beat),
      selfGranted: (shard, round) => this.fleet.ownSelfGrants.set(shard, round),
      reachable: (shard) => this.reach.reachable(shard),
      // Its own shards while it serves them, or will once the round reply is in (`awaitsRound`).
      local: (shard) => this.fleet.mine(shard) && this.reach.reachable(shard),
      fleetSize: () => (this.fleet.hadTable ? this.fleet.size() : Number.MAX_SAFE_INTEGER),
      held: (shard) => this.fleet.heldFor(shard),
    };
  }

  serveOwner(_node: NodeIdentity, owner: CreditOwner): void {
    this.owner = owner;
    this.rounds.run();
  }

  fleetView(): FleetView {
    return {
      size: () => this.fleet.size(),
      unsettled: (shard, folded) => this.fleet.unsettled(shard, folded),
      countsBlankets: () => this.fleet.counts('blankets'),
      holders: () => this.fleet.holders(),
      countsReach: () => this.fleet.counts('reaches'),
      // L5 is for members heard through Redis. Its own node it hears in process: that node's silence was
      // this process's stall, and its self-grants reach the owner side at once: nothing to wait for.
      rejoining: (nodeId, nodeEpoch) =>
        !(nodeId === this.identity?.nodeId && nodeEpoch === this.identity.nodeEpoch) && rejoining(this.fleet.members.get(nodeId), this.clock.monotonic(), this.opts.roundMs),
    };
  }

  ownerEpoch(shard: number): number {
    return this.owned.get(shard)?.epoch ?? this.fleet.table[shard]?.epoch ?? 1;
  }

  fleetSize(): number {
    return this.fleet.size();
  }

  ready(): Promise<void> {
    return this.rounds.ready;
  }

  /** Round trip of answered fast-path asks, late ones too: count, p50 and p99 (ms) of the last 4096 or since `since`. */
  fastPathRtt(since = 0): { count: number; p50: number; p99: number } {
    return this.asks.rtt(since);
  }

  /** Where this process takes fast-path asks directly; undefined before its listener is up, or with `fastPath: false`. */
  fastPathAddress(): PeerAddress | undefined {
    return this.direct?.address();
  }

  /**
   * Publishes this node's status for the admin API's health view (A2): one field of
   * `frl:{ctl}:status`, stamped with the time. Fire and forget.
   */
  publishStatus(status: NodeStatus): void {
    if (this.closed || this.identity === undefined) return;
    const stored: StoredNodeStatus = { ...status, nodeEpoch: this.identity.nodeEpoch, ownedShards: this.ownedShards().length, at: Date.now() };
    const value = JSON.stringify(stored);
    this.redis.hset(this.keys.ctl('status'), this.identity.nodeId, value).catch((err: Error) => this.warn(err, 'status not published'));
  }

  /** The counters the metrics read (`Bus.counters`). */
  get counters(): BusCounters {
    return this.stats;
  }

  /** Shards this node owns and serves now. */
  ownedShards(): number[] {
    return [...this.owned].filter(([, o]) => o.state === 'ready').map(([s]) => s);
  }

  /** The ownership table as last read: owner and fencing epoch per shard. */
  owners(): Array<{ shard: number; owner: string; epoch: number } | undefined> {
    return this.fleet.table.map((o, shard) => (o === undefined ? undefined : { shard, owner: o.owner, epoch: o.epoch }));
  }

  /**
   * Leaves the fleet: checkpoints and gives up the shards it owns (the next owners take them at once,
   * without waiting for the lease to lapse), leaves the member list, and closes every connection.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.rounds.closing();
    if (this.ownLoop) this.loop.stop();
    this.asks.close();
    const closing = this.direct?.close();
    const owned = [...this.owned.keys()];
    const leave = [...owned, ...this.rounds.releasingShards()];
    try {
      await closing;
      await Promise.all(owned.map((s) => this.log.writeSnapshot(s)));
      await Promise.allSettled(leave.flatMap((s) => this.log.pendingWrites(s))).then(() => this.log.retireBlankets(owned));
      await this.rounds.leave(leave);
    } catch (err) {
      this.opts.logger?.warn({ err }, 'could not leave the fleet cleanly; shards pass on when their lease lapses');
    }
    this.owned.clear();
    this.reader.disconnect();
    this.sub.disconnect();
    this.fast.disconnect();
    await this.readerDone;
    await this.redis.quit().catch(() => this.redis.disconnect());
  }

  // ---- node side: reports ------------------------------------------------------------------------

  /** A node's round batch: folded here if this node serves the shard, else onto the shard's stream. */
  private publish(batch: ReportBatch): boolean {
    if (this.closed) return false;
    if (this.reach.serving(batch.shard)) {
      this.owned.get(batch.shard)!.dirty = true;
      this.router.route(this.owner!.onReports(batch, this.clock.monotonic()));
      return true;
    }
    // Skipped while Redis is out of reach or backed up: the node reports those buckets again.
    if (this.append(batch.shard, this.codec.seal('reports', batch)) !== undefined) {
      this.stats.reportsSent++;
      return true;
    }
    this.stats.reportsSkipped++;
    return false;
  }

  /**
   * A report batch's XADD without waiting: resolves with whether it was written, or is undefined when
   * skipped — while Redis is out of reach or backed up (reports are cumulative, the next one makes up
   * for it).
   */
  private append(shard: number, fields: EnvelopeFields): Promise<boolean> | undefined {
    if (!this.reach.inTouch()) return undefined;
    return this.log.appendReport(shard, fields);
  }

  private tryOpen(fields: Readonly<Record<string, unknown>>): Envelope | undefined {
    try {
      return this.codec.open(fields);
    } catch (err) {
      this.stats.rejected[err instanceof EnvelopeError ? err.reason : 'malformed']++;
      return undefined;
    }
  }

  /** Logs a warning, each kind at most once every 5 s (an outage repeats them every round); none after close. */
  private warn(err: unknown, msg: string, extra?: object): void {
    const now = this.clock.monotonic();
    if (this.closed || now - (this.warned.get(msg) ?? Number.NEGATIVE_INFINITY) < 5000) return;
    this.warned.set(msg, now);
    this.opts.logger?.warn({ err, ...extra }, msg);
  }
}

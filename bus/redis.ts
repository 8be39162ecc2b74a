import type { Logger } from '../lib/logger.js';
import { systemClock, type Clock } from '../lib/clock.js';
import type { FleetView } from '../lib/fold-owner.js';
import { REACH_ROUNDS, rejoining, SILENT_ROUNDS, withinReach, type NodeBeat } from '../lib/membership.js';
import type { OwnerLink } from '../lib/node-contract.js';
import { shardOf, type CreditRequest, type Grant, type OwnerMessage, type ReportBatch } from '../lib/protocol/messages.js';
import { BeatStatements } from './beats.js';
import { EnvelopeCodec, EnvelopeError, type Bodies, type Envelope, type EnvelopeFields, type PeerAddress, type RejectReason } from './codec.js';
import { FastPath, type FastPathStats } from './fast-path.js';
import { DirectChannel, REFRESH_ROUNDS } from './direct-channel.js';
import { FleetTable, LEASE_ROUNDS } from './fleet-table.js';
import { KeySchema, type NodeStatus, type StoredNodeStatus } from './keys.js';
import { LogFence } from './log-fence.js';
import { LoopStalls } from './loop-stall.js';
import { MessageRouter, type Answer } from './message-router.js';
import type { Owned, OwnerContext } from './owner-context.js';
import { connect, type RedisClient } from './redis-connection.js';
import type { RedisConnectionOptions } from './redis-options.js';
import { rendezvousOwner } from './rendezvous.js';
import { defineControlScripts, defineGrantScript, roundScript, type RoundReply } from './scripts.js';
import { ShardLog } from './shard-log.js';
import { ShardReader } from './shard-reader.js';
import { Takeover } from './takeover.js';
import type { Bus, BusCounters, CreditOwner, NodeIdentity } from './types.js';
import { ErrorCode, RateLimiterError } from '../lib/errors.js';

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

/** Key id of warm-up asks; never a real key id (those start with a version: `v1:`). */
const WARM_UP_KEY = 'warm-up';

type Client = RedisClient;

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

/**
 * The leasing protocol over Redis (key layout: `bus/keys.ts`). This class owns the connections, the
 * round loop and the node side; its parts do the rest: the fleet and the ownership table
 * (`FleetTable`, with heartbeat statements in `BeatStatements`), the shards' logs and their fences
 * (`ShardLog`, `LogFence`), reading the report streams (`ShardReader`), taking a shard over
 * (`Takeover`) and sending owner messages (`MessageRouter`).
 *
 * Nothing on the request path waits for Redis except a fast-path ask, bounded by its deadline.
 */
export class RedisBus implements Bus {
  readonly stats: RedisBusStats = {
    rounds: 0, roundFailures: 0, reportsSent: 0, reportsSkipped: 0, entriesFolded: 0,
    rejected: { version: 0, secret: 0, mac: 0, malformed: 0, fold: 0 }, deadLettered: 0,
    asksSent: 0, asksDirect: 0, asksServed: 0, answersLate: 0, fastPathTimeouts: 0, messagesSent: 0, staleMessages: 0, grantsWithheld: 0, takeovers: 0, snapshots: 0,
  };
  private readonly redis: Client;
  private readonly reader: Client;
  private readonly sub: Client;
  /** Fast-path traffic (asks, their answers and the answers' grant log): written at once, never auto-pipelined. */
  private readonly fast: Client;
  private readonly codec: EnvelopeCodec;
  private readonly clock: Clock;
  private readonly loop: LoopStalls;
  private readonly ownLoop: boolean;
  private readonly keys: KeySchema;
  private identity?: NodeIdentity;
  private deliver?: (m: OwnerMessage) => void;
  private owner?: CreditOwner;
  private readonly owned = new Map<number, Owned>();
  private readonly beats: BeatStatements;
  private readonly fleet: FleetTable;
  private readonly fence: LogFence;
  private readonly log: ShardLog;
  private readonly reports: ShardReader;
  private readonly takeover: Takeover;
  private readonly router: MessageRouter;
  private roundBusy = false;
  /** Shards given up by a round still waiting for their log writes. */
  private readonly releasing = new Set<number>();
  /** What this node states in its next heartbeat (`NodeBeat`), as its last round ended. */
  private nodeBeat: NodeBeat = { selfGranted: new Map(), contact: [] };
  private onOwnersChanged?: (shards: ReadonlySet<number>) => void;
  private readonly fastPath: FastPath;
  /** The fast path's direct channel; undefined when `fastPath: false`. */
  private readonly direct?: DirectChannel;
  private readonly warned = new Map<string, number>();
  private closed = false;
  private readonly readerDone: Promise<void>;
  private readyResolve?: () => void;
  private readyReject?: (err: Error) => void;
  private readonly readyPromise: Promise<void>;

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
    this.sub.on('message', (_channel: string, message: string) => this.onChannel(message));
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
      serving: (shard) => this.serving(shard),
      open: (fields) => this.tryOpen(fields),
      warn: (err, msg, extra) => this.warn(err, msg, extra),
    };
    this.beats = new BeatStatements(this.codec, this.stats, (err, msg) => this.warn(err, msg));
    this.fleet = new FleetTable(opts, this.clock, this.beats, () => this.identity);
    this.fence = new LogFence(ctx, (epoch) => this.fleet.learnEpoch(epoch));
    this.log = new ShardLog(ctx, this.fence);
    this.router = new MessageRouter(ctx, this.log, this.fast, (m) => this.deliver?.(m));
    this.reports = new ShardReader(ctx, this.reader, (messages) => this.route(messages));
    this.takeover = new Takeover(ctx, this.fence, this.reports);
    this.fastPath = new FastPath({
      stats: this.stats,
      send: (owner, ask) => this.sendAsk(owner, ask),
      deliver: (m) => this.deliver?.(m),
      current: (messages) => this.current(messages),
      nodeEpoch: () => this.identity!.nodeEpoch,
    });
    if (opts.fastPath !== false) {
      this.direct = new DirectChannel(
        {
          codec: this.codec,
          redis: this.redis,
          clock: this.clock,
          roundMs: opts.roundMs,
          recordKey: (nodeId) => this.keys.ctl(`peer:${nodeId}`),
          members: () => this.fleet.members,
          open: (fields) => this.tryOpen(fields),
          onFrame: (frame, reply) => this.onFrame(frame, reply),
          warn: (err, msg) => this.warn(err, msg),
        },
        opts.fastPath ?? {},
      );
    }
    this.readyPromise = new Promise((resolve, reject) => {
      this.readyResolve = resolve;
      this.readyReject = reject;
    });
    this.readyPromise.catch(() => undefined); // a close() before ready is not an unhandled rejection
    this.readerDone = this.reports.readLoop();
  }

  // ---- Bus --------------------------------------------------------------------------------------

  connectNode(node: NodeIdentity, onMessage: (message: OwnerMessage) => void, onOwnersChanged?: (shards: ReadonlySet<number>) => void): OwnerLink {
    this.identity = node;
    this.deliver = onMessage;
    this.onOwnersChanged = onOwnersChanged;
    void this.sub.subscribe(this.keys.channel(node.nodeId)).catch((err: Error) => this.warn(err, 'subscribe failed'));
    this.direct?.listen(node);
    return {
      requestCredit: (requests, deadlineMs) => this.requestCredit(requests, deadlineMs),
      publish: (batch) => this.publish(batch),
      heartbeat: (beat) => {
        this.nodeBeat = beat;
        this.round();
      },
      selfGranted: (shard, round) => this.fleet.ownSelfGrants.set(shard, round),
      reachable: (shard) => this.reachable(shard),
      local: (shard) => this.fleet.mine(shard) && this.serving(shard),
      fleetSize: () => (this.fleet.hadTable ? this.fleet.size() : Number.MAX_SAFE_INTEGER),
    };
  }

  serveOwner(_node: NodeIdentity, owner: CreditOwner): void {
    this.owner = owner;
    this.round();
  }

  fleetView(): FleetView {
    const roundMs = this.opts.roundMs;
    return {
      size: () => this.fleet.size(),
      unsettled: (shard, folded) => this.fleet.unsettled(shard, folded),
      rejoining: (nodeId) => rejoining(this.fleet.members.get(nodeId), this.clock.monotonic(), roundMs),
    };
  }

  ownerEpoch(shard: number): number {
    return this.owned.get(shard)?.epoch ?? this.fleet.table[shard]?.epoch ?? 1;
  }

  fleetSize(): number {
    return this.fleet.size();
  }

  ready(): Promise<void> {
    return this.readyPromise;
  }

  /**
   * Round trip of answered fast-path asks, late ones included: count, and p50 and p99 in ms over the
   * last 4096, or over those answered after the first `since` (a count read earlier).
   */
  fastPathRtt(since = 0): { count: number; p50: number; p99: number } {
    return this.fastPath.rtt(since);
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
    this.readyReject?.(new RateLimiterError(ErrorCode.CLOSED, 'the bus was closed before it was ready'));
    this.readyResolve = undefined;
    if (this.ownLoop) this.loop.stop();
    this.fastPath.close();
    const closing = this.direct?.close();
    const owned = [...this.owned.keys()];
    const leave = [...owned, ...this.releasing];
    try {
      await closing;
      await Promise.all(owned.map((s) => this.log.writeSnapshot(s)));
      await Promise.allSettled(leave.flatMap((s) => this.log.pendingWrites(s)));
      await this.runRound([], leave, 'leave');
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

  // ---- the round loop ---------------------------------------------------------------------------

  /** One control round, unless the previous one is still out (Redis slow or unreachable). */
  private round(): void {
    if (this.roundBusy || this.closed || this.identity === undefined || this.owner === undefined) return;
    this.roundBusy = true;
    const me = this.identity.nodeId;
    const mono = this.clock.monotonic();
    const ids = this.fleet.candidates(mono);
    const wanted: number[] = [];
    const released: number[] = [];
    for (let s = 0; s < this.opts.shards; s++) {
      if (rendezvousOwner(s, ids) === me) wanted.push(s);
      else if (this.owned.has(s)) released.push(s);
    }
    // Stop serving a shard before giving it up: its next owner replays everything folded until now.
    // And give it up only once its grants are on record: an ask's answer is logged on the fast-path
    // connection, which Redis may serve after this round's script on the other one — the next owner
    // would replay a log without that grant and issue its credit again.
    for (const s of released) {
      this.owned.get(s)!.leaving = true;
      this.owned.delete(s);
      this.releasing.add(s);
    }
    const logged = released.flatMap((s) => this.log.pendingWrites(s));
    const stale = this.fence.takeRelinquished((s) => this.fleet.table[s]?.epoch ?? 0);
    const givenUp = [...new Set([...released, ...stale])];
    (logged.length > 0 ? Promise.allSettled(logged) : Promise.resolve())
      // Closed meanwhile: close() has left the fleet (these shards with it); a round now would rejoin.
      .then(() => (this.closed ? undefined : this.runRound(wanted, givenUp, 'stay')))
      .catch((err: unknown) => {
        this.stats.roundFailures++;
        this.warn(err, 'control round failed');
      })
      .finally(() => {
        this.roundBusy = false;
        for (const s of released) this.releasing.delete(s);
      });
    this.log.snapshots(mono);
    this.refillFloats();
    this.reports.claimStranded();
    this.fastPath.sweep();
    if (this.stats.rounds % REFRESH_ROUNDS === 0) this.direct?.refresh();
  }

  /** Runs `lua/round.lua`: stays in the fleet (and takes in its reply), or leaves it. */
  private async runRound(wanted: number[], released: number[], membership: 'stay' | 'leave'): Promise<void> {
    const leave = membership === 'leave';
    const sent = this.clock.monotonic();
    const statement = this.beats.seal(this.nodeBeat, this.identity!, leave);
    const res = await roundScript(this.redis, this.keys, {
      nodeId: this.identity!.nodeId,
      nodeEpoch: this.identity!.nodeEpoch,
      leaseMs: LEASE_ROUNDS * this.opts.roundMs,
      memberExpiryMs: this.opts.degradedAfterMs + SILENT_ROUNDS * this.opts.roundMs,
      wanted,
      released,
      membership,
      highestEpoch: this.fleet.highestEpoch,
      statement,
    });
    if (!leave && !this.closed) this.applyRound(sent, res);
  }

  /** Takes in the fleet and the ownership table; starts takeovers of shards newly ours. */
  private applyRound(sent: number, reply: RoundReply): void {
    const got = this.clock.monotonic();
    const roundMs = this.opts.roundMs;
    this.stats.rounds++;
    const { redisNow, ours, blind } = this.fleet.take(sent, got, reply);
    for (const { shard: s, epoch, expiresAt: exp } of ours) {
      const validUntil = sent + (exp - redisNow) - 2 * roundMs;
      const o = this.owned.get(s);
      if (o !== undefined && o.epoch === epoch) {
        // Ours all along (renewed under the same epoch, so nobody else claimed it): the ledgers are current.
        o.validUntil = validUntil;
      } else {
        // New to us — or the epoch moved under us (someone else may have served it, or Redis lost the
        // table, and maybe the log): rebuild. Replay merges into what the ledgers hold already.
        const taken: Owned = { epoch, state: 'taking', validUntil, takenAt: got, settleUntil: 0, dirty: true, snapshotAt: got, lastRead: '0-0', claimRound: 0 };
        this.owned.set(s, taken);
        void this.takeover.start(s, taken, blind.has(s));
      }
    }
    // Owners changed (against the last epoch known, even if the shard had no owner in between): the
    // node reports every bucket of those shards again, so a new owner with no log learns what is held.
    const changed = this.fleet.ownersChanged();
    if (changed.size > 0) this.onOwnersChanged?.(changed);
    this.beats.replied(redisNow, got);
    for (const [s, o] of this.owned) {
      if (!this.fleet.mine(s)) this.owned.delete(s);
      else if (o.state === 'settling' && got >= o.settleUntil && this.fleet.everyoneReportedSince(o.takenAt, (o.checkedIn ??= new Map()))) this.takeover.readPast(s, o);
    }
    this.fleet.hadTable = true;
    // Ready once every shard is reachable at its rendezvous owner: the fleet has settled, so no
    // handover is about to leave a shard without an owner for a round. (Or after 40 rounds anyway.)
    const ids = this.fleet.candidates(got);
    if (this.readyResolve !== undefined && this.fleet.table.every((o, s) => this.reachable(s) && (this.stats.rounds > 40 || o!.owner === rendezvousOwner(s, ids)))) {
      const resolve = this.readyResolve;
      this.readyResolve = undefined;
      void this.warmUp().finally(resolve);
    }
  }

  // ---- serving and reach ------------------------------------------------------------------------

  /** Whether this node may answer for `shard` now: its lease is current and its ledgers rebuilt. */
  private serving(shard: number): boolean {
    const o = this.owned.get(shard);
    const mono = this.clock.monotonic();
    // Out of touch with Redis, an owner stops too: it could not log what it grants, and its peers
    // already count it as out of reach. On the full time, stalls included: back from one, it must
    // learn of members that joined meanwhile (and may self-grant) before it issues again.
    return o !== undefined && o.state === 'ready' && mono < o.validUntil && withinReach(this.fleet.lastRoundOk, mono, this.opts.roundMs);
  }

  /**
   * Node side: whether our last round reply is recent, counting only the time this loop was running —
   * a stall of our own (GC, a starved CPU, a burst of requests) is not Redis's or an owner's silence.
   * Never for what an owner may issue (`serving`).
   */
  private inTouch(): boolean {
    return this.loop.awakeSince(this.fleet.lastRoundOk) < REACH_ROUNDS * this.opts.roundMs;
  }

  private reachable(shard: number): boolean {
    const o = this.fleet.table[shard];
    if (o === undefined) return false;
    const mono = this.clock.monotonic();
    if (this.fleet.mine(shard)) return this.serving(shard);
    // The owner's process must still be the one heard from: a restarted node does not answer for
    // shards its previous process held. Our own round's age counts only the time this loop was
    // running (a stall of ours is not the owner's silence); the owner's, by Redis's clock.
    const m = this.fleet.members.get(o.owner);
    return m !== undefined && m.fresh && m.epoch === o.ownerProcess && mono < o.expiresAt && this.inTouch();
  }

  private tryOpen(fields: Readonly<Record<string, unknown>>): Envelope | undefined {
    try {
      return this.codec.open(fields);
    } catch (err) {
      this.stats.rejected[err instanceof EnvelopeError ? err.reason : 'malformed']++;
      return undefined;
    }
  }

  // ---- owner messages ---------------------------------------------------------------------------

  /** Sends owner messages (`MessageRouter.route`). */
  private route(messages: readonly OwnerMessage[], answer?: Answer): void {
    this.router.route(messages, answer);
  }

  /**
   * Tops up the owner's floats (`FoldOwner.refillFloats`) and logs them; a float is usable once its
   * write was taken. Floats are only logged, never sent: they are this owner's own credit.
   */
  private refillFloats(): void {
    const floats = this.owner?.refillFloats?.((s) => this.serving(s)) ?? [];
    if (floats.length === 0) return;
    void this.log.logGrants(floats).then((ok) => {
      // A float on record may refill a window announced exhausted: tell its leases now.
      if (ok && !this.closed) this.route(this.owner!.takeOutbox());
    });
  }

  /**
   * A report batch's XADD without waiting: resolves with whether it was written, or is undefined when
   * skipped — while Redis is out of reach or backed up (reports are cumulative, the next one makes up
   * for it).
   */
  private append(shard: number, fields: EnvelopeFields): Promise<boolean> | undefined {
    if (!this.inTouch()) return undefined;
    return this.log.appendReport(shard, fields);
  }

  // ---- node side --------------------------------------------------------------------------------

  /** A node's round batch: folded here if this node serves the shard, else onto the shard's stream. */
  private publish(batch: ReportBatch): boolean {
    if (this.closed) return false;
    if (this.serving(batch.shard)) {
      this.owned.get(batch.shard)!.dirty = true;
      this.route(this.owner!.onReports(batch));
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
   * The fast path: requests for shards this node serves are answered in process; the others go to
   * their owners (directly, or over Redis), and the answer counts only if it is back within `deadlineMs`.
   */
  private requestCredit(requests: readonly CreditRequest[], deadlineMs: number): readonly Grant[] | undefined | Promise<readonly Grant[] | undefined> {
    if (this.closed) return undefined;
    const local: Grant[] = [];
    const unrecorded: Array<Promise<readonly Grant[]>> = [];
    const remote = new Map<string, CreditRequest[]>();
    let missed = false;
    for (const r of requests) {
      const shard = shardOf(r.keyId, r.windowId, this.opts.shards);
      if (this.serving(shard)) {
        const g = this.owner!.onCreditRequest(r);
        if (g !== undefined) {
          // This node's own credit too is spent only once on record (or out of the float, which is):
          // a later owner replays the log, and what it lacks it would issue again.
          const written = this.log.logGrants([g], this.fast);
          if (this.owner!.onRecord?.(g) === true) local.push(g);
          else unrecorded.push(written.then((ok) => (ok ? [g] : (this.stats.grantsWithheld++, []))));
        }
        this.route(this.owner!.takeOutbox());
        continue;
      }
      const owner = this.fleet.table[shard]?.owner;
      if (owner === undefined || !this.reachable(shard)) {
        missed = true;
        continue;
      }
      const list = remote.get(owner);
      if (list === undefined) remote.set(owner, [r]);
      else list.push(r);
    }
    if (remote.size === 0 && unrecorded.length === 0) return missed ? this.apply(local) : local;
    return this.fastPath.ask(this.identity!.nodeId, remote, { local, missed, deadlineMs, unrecorded });
  }

  /**
   * An ask to an owner: over the direct channel when a connection to the owner's current process is
   * up, else on its Redis channel (and a connection is started for the next one).
   */
  private sendAsk(owner: string, ask: Bodies['ask']): boolean {
    const frame = EnvelopeCodec.toJson(this.codec.seal('ask', ask));
    if (this.direct?.send(owner, frame)) return true;
    this.fast.publish(this.keys.channel(owner), frame).catch(() => undefined);
    return false;
  }

  /**
   * Before the node takes traffic: a few empty asks to every other owner, so connections, code paths
   * and the owners' handlers are warm when the first real ask races its 1 ms deadline.
   */
  private async warmUp(): Promise<void> {
    await this.direct?.read();
    let w = 0;
    for (let i = 0; i < 20 && !this.closed; i++) {
      const owners = new Map<string, CreditRequest[]>();
      const remote = new Set(this.fleet.table.filter((o, s) => o !== undefined && !this.fleet.mine(s)).map((o) => o!.owner));
      // Each probe asks for one credit of a new window of January 1970: it takes the whole path of a
      // first sight (new ledger, grant, apply), and its grant finds no bucket.
      for (let tries = 0; owners.size < remote.size && tries < 100 * this.opts.shards; tries++, w++) {
        const shard = shardOf(WARM_UP_KEY, w, this.opts.shards);
        const o = this.fleet.table[shard];
        if (o === undefined || this.fleet.mine(shard) || owners.has(o.owner)) continue;
        owners.set(o.owner, [{ keyId: WARM_UP_KEY, windowId: w, windowMs: 1000, limit: 1, nodeId: this.identity!.nodeId, nodeEpoch: this.identity!.nodeEpoch, lease: 0, spent: 0, selfIssued: 0, released: 0, need: 1, demand: 1, fastPath: true }]);
      }
      if (owners.size === 0) return;
      await this.fastPath.probe(this.identity!.nodeId, owners, 20);
    }
  }

  /** Applies grants through the node's message handler (they arrived, but the ask as a whole missed). */
  private apply(grants: readonly Grant[]): undefined {
    for (const g of grants) this.deliver?.(g);
    return undefined;
  }

  /** A message on this node's Redis channel: an ask (as an owner) or owner messages (as a node). */
  private onChannel(raw: string): void {
    try {
      this.onFrame(raw);
    } catch {
      // counted and logged by onFrame
    }
  }

  /**
   * An envelope from Redis pub/sub or the direct channel (`reply` answers on that connection). One
   * that does not open, or cannot be applied, is counted, logged and thrown: the direct channel
   * closes a connection that sends one.
   */
  private onFrame(raw: string, reply?: (frame: string) => void): void {
    let env: Envelope;
    try {
      env = this.codec.open(EnvelopeCodec.fromJson(raw));
    } catch (err) {
      this.stats.rejected[err instanceof EnvelopeError ? err.reason : 'malformed']++;
      this.warn(err, 'bus message rejected');
      throw err;
    }
    try {
      if (env.t === 'ask') this.serveAsk(env.body, reply);
      else if (env.t === 'messages') this.onMessages(env.body);
      else throw new EnvelopeError('malformed', `t: a ${env.t} envelope is not a message`);
    } catch (err) {
      this.stats.rejected.fold++;
      this.warn(err, 'bus message could not be applied');
      throw err;
    }
  }

  /** Answers an ask, on the connection it came by (`reply`) or over Redis. */
  private serveAsk(ask: Bodies['ask'], reply?: (frame: string) => void): void {
    // Leaving: the shards' last checkpoints are being written, and the log writes waited for.
    if (this.closed) return;
    const grants: OwnerMessage[] = [];
    let all = true;
    for (const r of ask.requests) {
      if (r.nodeId !== ask.nodeId || !this.serving(shardOf(r.keyId, r.windowId, this.opts.shards))) {
        all = false;
        continue;
      }
      const g = this.owner!.onCreditRequest(r);
      if (g !== undefined) grants.push(g);
    }
    this.stats.asksServed++;
    this.route([...grants, ...this.owner!.takeOutbox()], { re: all ? ask.id : 0, to: ask.nodeId, reply });
  }

  private onMessages(body: Bodies['messages']): void {
    if (body.nodeId !== this.identity?.nodeId) return;
    if (!this.fastPath.answer(body.re, body.messages)) for (const m of this.current(body.messages)) this.deliver?.(m);
  }

  /** Drops messages from an owner older than the one the table names for their shard (a deposed owner). */
  private current(messages: readonly OwnerMessage[]): OwnerMessage[] {
    return messages.filter((m) => {
      const ok = m.ownerEpoch >= (this.fleet.table[shardOf(m.keyId, m.windowId, this.opts.shards)]?.epoch ?? 0);
      if (!ok) this.stats.staleMessages++;
      return ok;
    });
  }

  /** Logs a warning, each kind at most once every 5 s (an outage repeats them every round); none after close. */
  private warn(err: unknown, msg: string, extra?: object): void {
    const now = this.clock.monotonic();
    if (this.closed || now - (this.warned.get(msg) ?? Number.NEGATIVE_INFINITY) < 5000) return;
    this.warned.set(msg, now);
    this.opts.logger?.warn({ err, ...extra }, msg);
  }
}


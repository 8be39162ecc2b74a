import { ErrorCode, RateLimiterError } from '../lib/errors.js';
import { SILENT_ROUNDS, type NodeBeat } from '../lib/membership.js';
import type { OwnerMessage } from '../lib/protocol/messages.js';
import type { BeatStatements } from './beats.js';
import type { CreditAsks } from './credit-asks.js';
import { REFRESH_ROUNDS, type DirectChannel } from './direct-channel.js';
import { LEASE_ROUNDS, type FleetTable } from './fleet-table.js';
import type { LogFence } from './log-fence.js';
import type { Owned, OwnerContext } from './owner-context.js';
import { RendezvousShards, rendezvousOwner } from './rendezvous.js';
import { roundScript, type RoundReply } from './scripts.js';
import type { ShardLog } from './shard-log.js';
import type { ShardReach } from './shard-reach.js';
import type { ShardReader } from './shard-reader.js';
import type { Takeover } from './takeover.js';

/** The parts of the Redis bus a round works with, besides what the owner side shares (`OwnerContext`). */
export interface RoundParts {
  readonly fleet: FleetTable;
  readonly beats: BeatStatements;
  readonly fence: LogFence;
  readonly log: ShardLog;
  readonly reports: ShardReader;
  readonly takeover: Takeover;
  readonly reach: ShardReach;
  readonly asks: CreditAsks;
  /** The direct channel; undefined with `fastPath: false`. */
  readonly direct: DirectChannel | undefined;
  /** Sends owner messages (`MessageRouter.route`). */
  route(messages: readonly OwnerMessage[]): void;
  /** Tells the node the shards whose owner changed. */
  ownersChanged(shards: ReadonlySet<number>): void;
}

/**
 * The control round, once per heartbeat of this node: the shards it wants and gives up, the round
 * script (`lua/round.lua`), taking in its reply (the fleet and the ownership table through
 * `FleetTable`, takeovers of shards newly ours), readiness, and an owner's chores of each round
 * (checkpoints, floats, stranded entries, the fast path's sweep, the direct channel's records).
 */
export class RoundLoop {
  /** Settles once the fleet has settled and the warm-up asks have crossed; rejects if the bus closes first. */
  readonly ready: Promise<void>;
  private busy = false;
  /** Shards given up by a round still waiting for their log writes. */
  private readonly releasing = new Set<number>();
  /** What this node states in its next heartbeat (`NodeBeat`), as its last round ended. */
  private nodeBeat: NodeBeat = { selfGranted: new Map(), contact: [] };
  private readonly rendezvous = new RendezvousShards();
  private readyResolve?: () => void;
  private readyReject?: (err: Error) => void;

  constructor(
    private readonly ctx: OwnerContext,
    private readonly parts: RoundParts,
  ) {
    this.ready = new Promise((resolve, reject) => {
      this.readyResolve = resolve;
      this.readyReject = reject;
    });
    this.ready.catch(() => undefined); // a close() before ready is not an unhandled rejection
  }

  /** The node's heartbeat: what it states from now on (`NodeBeat`); runs a round. */
  beat(beat: NodeBeat): void {
    this.nodeBeat = beat;
    this.run();
  }

  /** The bus is closing: `ready`, if still waiting, rejects. */
  closing(): void {
    this.readyReject?.(new RateLimiterError(ErrorCode.CLOSED, 'the bus was closed before it was ready'));
    this.readyResolve = undefined;
  }

  /** Shards given up by a round still waiting for their log writes (to give up as the bus leaves). */
  releasingShards(): number[] {
    return [...this.releasing];
  }

  /** Leaves the fleet, giving up `shards` (the next owners take them at once). */
  leave(shards: number[]): Promise<void> {
    return this.runRound([], shards, 'leave');
  }

  /** One control round, unless the previous one is still out (Redis slow or unreachable). */
  run(): void {
    const { ctx, parts } = this;
    const identity = ctx.identity();
    if (this.busy || ctx.closed() || identity === undefined || ctx.owner() === undefined) return;
    this.busy = true;
    const me = identity.nodeId;
    const mono = ctx.clock.monotonic();
    const { wanted, owns } = this.rendezvous.of(ctx.opts.shards, parts.fleet.candidates(mono), me);
    const released: number[] = [];
    for (let s = 0; s < ctx.opts.shards; s++) if (!owns(s) && ctx.owned.has(s)) released.push(s);
    // Stop serving a shard before giving it up: its next owner replays everything folded until now.
    // And give it up only once its grants are on record: an ask's answer is logged on the fast-path
    // connection, which Redis may serve after this round's script on the other one — the next owner
    // would replay a log without that grant and issue its credit again.
    for (const s of released) {
      ctx.owned.get(s)!.leaving = true;
      ctx.owned.delete(s);
      this.releasing.add(s);
    }
    const logged = released.flatMap((s) => parts.log.pendingWrites(s));
    const stale = parts.fence.takeRelinquished((s) => parts.fleet.table[s]?.epoch ?? 0);
    const givenUp = [...new Set([...released, ...stale])];
    (logged.length > 0 ? Promise.allSettled(logged) : Promise.resolve())
      // Every answer's grant on record: the shards' blankets are retired (later owners need not count them).
      .then(() => parts.log.retireBlankets(released))
      // Closed meanwhile: close() has left the fleet (these shards with it); a round now would rejoin.
      .then(() => (ctx.closed() ? undefined : this.runRound(wanted, givenUp, 'stay')))
      .catch((err: unknown) => {
        ctx.stats.roundFailures++;
        ctx.warn(err, 'control round failed');
      })
      .finally(() => {
        this.busy = false;
        for (const s of released) this.releasing.delete(s);
        // The node's asks on shards it owns that waited for this reply (a stall of our own).
        parts.asks.roundSettled();
      });
    parts.log.snapshots(mono);
    this.refillFloats();
    parts.reports.claimStranded();
    parts.asks.sweep();
    if (ctx.stats.rounds % REFRESH_ROUNDS === 0) parts.direct?.refresh();
  }

  /** Runs `lua/round.lua`: stays in the fleet (and takes in its reply), or leaves it. */
  private async runRound(wanted: readonly number[], released: number[], membership: 'stay' | 'leave'): Promise<void> {
    const { ctx, parts } = this;
    const me = ctx.identity()!;
    const roundMs = ctx.opts.roundMs;
    const sent = ctx.clock.monotonic();
    const statement = parts.beats.seal(
      this.nodeBeat,
      me,
      membership,
      ctx.owner()?.heldStatement?.((s) => ctx.serving(s)),
    );
    const reply = await roundScript(ctx.redis, ctx.keys, {
      nodeId: me.nodeId,
      nodeEpoch: me.nodeEpoch,
      leaseMs: LEASE_ROUNDS * roundMs,
      memberExpiryMs: ctx.opts.degradedAfterMs + SILENT_ROUNDS * roundMs,
      wanted,
      released,
      membership,
      highestEpoch: parts.fleet.highestEpoch,
      statement,
    });
    if (membership === 'stay' && !ctx.closed()) this.applyRound(sent, reply);
  }

  /** Takes in the fleet and the ownership table; starts takeovers of shards newly ours. */
  private applyRound(sent: number, reply: RoundReply): void {
    const { ctx, parts } = this;
    const { fleet } = parts;
    const got = ctx.clock.monotonic();
    const roundMs = ctx.opts.roundMs;
    ctx.stats.rounds++;
    const { redisNow, ours, blind } = fleet.take(sent, got, reply);
    for (const { shard: s, epoch, expiresAt: exp } of ours) {
      const validUntil = sent + (exp - redisNow) - 2 * roundMs;
      const o = ctx.owned.get(s);
      if (o !== undefined && o.epoch === epoch) {
        // Ours all along (renewed under the same epoch, so nobody else claimed it): the ledgers are current.
        o.validUntil = validUntil;
      } else {
        // New to us — or the epoch moved under us (someone else may have served it, or Redis lost the
        // table, and maybe the log): rebuild. Replay merges into what the ledgers hold already.
        const taken: Owned = { epoch, state: 'taking', validUntil, takenAt: got, settleUntil: 0, dirty: true, snapshotAt: got, lastRead: '0-0', claimRound: 0 };
        ctx.owned.set(s, taken);
        void parts.takeover.start(s, taken, { blind: blind.has(s) });
      }
    }
    // Owners changed (against the last epoch known, even if the shard had no owner in between): the
    // node reports every bucket of those shards again, so a new owner with no log learns what is held.
    const changed = fleet.ownersChanged();
    if (changed.size > 0) parts.ownersChanged(changed);
    parts.beats.replied(redisNow, got, sent);
    for (const [s, o] of ctx.owned) {
      if (!fleet.mine(s)) ctx.owned.delete(s);
      else if (o.state === 'settling' && got >= o.settleUntil && fleet.everyoneReportedSince(o.takenAt, (o.checkedIn ??= new Map()))) parts.takeover.readPast(s, o);
    }
    fleet.hadTable = true;
    // Ready once every shard is reachable at its rendezvous owner: the fleet has settled, so no
    // handover is about to leave a shard without an owner for a round. (Or after 40 rounds anyway.)
    const ids = fleet.candidates(got);
    if (this.readyResolve !== undefined && fleet.table.every((o, s) => parts.reach.reachable(s) && (ctx.stats.rounds > 40 || o!.owner === rendezvousOwner(s, ids)))) {
      const resolve = this.readyResolve;
      this.readyResolve = undefined;
      void parts.asks.warmUp().finally(resolve);
    }
  }

  /**
   * Sends the top-ups held back from withheld nodes (`FoldOwner.topUpWithheld`); tops up the owner's
   * floats (`FoldOwner.refillFloats`) and logs them, with the blankets due; a float (or a blanket) is
   * usable once its write was taken. Floats are only logged, never sent: they are this owner's own credit.
   */
  private refillFloats(): void {
    const { ctx, parts } = this;
    const serving = (s: number): boolean => ctx.serving(s);
    const released = ctx.owner()?.topUpWithheld?.(serving) ?? [];
    if (released.length > 0) parts.route(released);
    for (const b of ctx.owner()?.blanketsDue?.(ctx.owned.keys(), serving) ?? []) parts.log.logBlanket(b);
    const floats = ctx.owner()?.refillFloats?.(serving) ?? [];
    if (floats.length === 0) return;
    void parts.log.logGrants(floats).then((ok) => {
      // A float on record may refill a window announced exhausted: tell its leases now.
      if (ok && !ctx.closed()) parts.route(ctx.owner()!.takeOutbox());
    });
  }
}

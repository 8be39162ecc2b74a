import type { Clock } from '../lib/clock.js';
import { REACH_ROUNDS, withinReach } from '../lib/membership.js';
import type { FleetTable } from './fleet-table.js';
import type { LoopStalls } from './loop-stall.js';
import type { Owned } from './owner-context.js';

/**
 * Serving and reach on the Redis bus: whether this node may answer for a shard now (owner side), and
 * whether a shard's owner is in reach of it (node side), from the ownership table, the leases and the
 * age of the last round reply.
 */
export class ShardReach {
  constructor(
    private readonly owned: ReadonlyMap<number, Owned>,
    private readonly fleet: FleetTable,
    private readonly clock: Clock,
    private readonly loop: LoopStalls,
    private readonly roundMs: number,
  ) {}

  /** Whether this node may answer for `shard` now: its lease is current and its ledgers rebuilt. */
  serving(shard: number): boolean {
    const o = this.owned.get(shard);
    const mono = this.clock.monotonic();
    // Out of touch with Redis, an owner stops too: it could not log what it grants, and its peers
    // already count it as out of reach. On the full time, stalls included: back from one, it must
    // learn of members that joined meanwhile (and may self-grant) before it issues again.
    return o !== undefined && o.state === 'ready' && mono < o.validUntil && withinReach(this.fleet.lastRoundOk, mono, this.roundMs);
  }

  /**
   * Node side: whether our last round reply is recent, counting only the time this loop was running —
   * a stall of our own (GC, a starved CPU, a burst of requests) is not Redis's or an owner's silence.
   * Never for what an owner may issue (`serving`).
   */
  inTouch(): boolean {
    return this.loop.awakeSince(this.fleet.lastRoundOk) < REACH_ROUNDS * this.roundMs;
  }

  /**
   * Node side: whether `shard`'s owner can be asked now — this node itself when it serves the shard,
   * or will once the round reply it waits for is in (`awaitsRound`).
   */
  reachable(shard: number): boolean {
    const o = this.fleet.table[shard];
    if (o === undefined) return false;
    const mono = this.clock.monotonic();
    if (this.fleet.mine(shard)) return this.serving(shard) || this.awaitsRound(shard);
    // The owner's process must still be the one heard from: a restarted node does not answer for
    // shards its previous process held. Our own round's age counts only the time this loop was
    // running (a stall of ours is not the owner's silence); the owner's, by Redis's clock.
    const m = this.fleet.members.get(o.owner);
    return m !== undefined && m.fresh && m.epoch === o.ownerProcess && mono < o.expiresAt && this.inTouch();
  }

  /**
   * Node side: whether this node owns `shard` (its ledgers rebuilt, the table's lease current) and
   * does not serve it only because its last round reply is three rounds old on the full time — a
   * stall of its own, not Redis's silence: the owner side serves again once the next reply is in.
   * Its node's asks there are not remote ones (`local`); one that misses its deadline is still
   * refused, and answered once that reply is in if the owner side serves then (`CreditAsks`).
   */
  awaitsRound(shard: number): boolean {
    const o = this.owned.get(shard);
    const t = this.fleet.table[shard];
    return o !== undefined && o.state === 'ready' && t?.ours === true && this.clock.monotonic() < t.expiresAt && this.inTouch();
  }
}

import { FLOAT_PREFIX, leaseFor, type Ledger } from '../ledger-store.js';
import type { LogEntry } from '../protocol/log.js';

/**
 * A blanket covers every window of its shard that starts at or before `startsBy` for this long ahead
 * of the time it is made; it is made again once no more than half of that is left, so one is always
 * taken for the windows running now and those starting within the next second.
 */
export const BLANKET_SPAN_MS = 2000;

/** Earlier owners' blankets kept per shard (one per owner epoch that wrote any): the latest few. */
const INHERITED_PER_SHARD = 16;

/** What a blanket says: its writer's float lease, by holder and owner epoch, and the windows it covers. */
export interface Blanket {
  readonly shard: number;
  /** The float's holder: the owner process (`FLOAT_PREFIX` + `nodeEpoch` names its float lease). */
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly ownerEpoch: number;
  /** Windows of the shard starting at or before this (ms, wall clock) are covered. */
  readonly startsBy: number;
}

/**
 * Blankets: one log write per shard that lets its owner answer the first ask of any window with one
 * credit from a float it never logged for that window.
 *
 * An owner answers an ask at once only from a float whose grant is on record; a window nobody asked
 * for before has none, so its first ask waited for a log write — a Redis round trip inside the fast
 * path's 1 ms deadline, which a busy host misses (the bench's fleet members refused first sights at a
 * limit of 10⁹). A blanket, logged once a second per shard, states: every window of this shard that
 * starts by `startsBy` may have one credit issued to this owner's float (lease `FLOAT_PREFIX` +
 * holder epoch, number = owner epoch), as if a grant of 1 to that float were on record. So the owner
 * may make such a float of 1 in a window with none (`cover`), usable at once, and answer the window's
 * first ask from it; the answer's own grant (`floated` 1) is logged after it, as with any float.
 *
 * A later owner replaying the log counts the credit in every window the blanket covers (`inherit`),
 * whether or not the writer made the float there: it may have, and the grant that says so may be
 * lost with it. That costs at most one credit per covered window after a change of owner, as an
 * unused float does; it never lets the new owner issue what the old one did. Kept in checkpoints.
 */
export class Blankets {
  /** This owner's latest per shard: the `startsBy` taken (usable), and the latest written. */
  private readonly own = new Map<number, { blanket: Blanket; taken: number }>();
  /** Earlier owners' (and this process's under earlier epochs), by shard: replayed, counted in every covered window. */
  private readonly inherited = new Map<number, Blanket[]>();
  /** Whether every member counts blankets (`FleetView.countsBlankets`), as of the last `due`. */
  private allowed = false;

  /**
   * The blankets to write now on the shards this owner serves: one whose latest written `startsBy` is
   * less than half a span ahead, or under an earlier owner epoch. None while a member may not count
   * them (an older release could take a shard over and issue a blanket's credit again).
   */
  due(holder: { nodeId: string; nodeEpoch: string }, serving: (shard: number) => boolean, shards: Iterable<number>, ownerEpoch: (shard: number) => number, now: number, allowed: boolean): Blanket[] {
    this.allowed = allowed;
    if (!allowed) return [];
    const out: Blanket[] = [];
    for (const shard of shards) {
      if (!serving(shard)) continue;
      const epoch = ownerEpoch(shard);
      const o = this.own.get(shard);
      const current = o !== undefined && o.blanket.ownerEpoch === epoch;
      if (current && o.blanket.startsBy - now > BLANKET_SPAN_MS / 2) continue;
      const blanket = { shard, nodeId: holder.nodeId, nodeEpoch: holder.nodeEpoch, ownerEpoch: epoch, startsBy: Math.floor(now) + BLANKET_SPAN_MS };
      this.own.set(shard, { blanket, taken: current ? o.taken : Number.NEGATIVE_INFINITY });
      out.push(blanket);
    }
    return out;
  }

  /**
   * A blanket's log write came back: taken (not refused by the fence), the windows it covers may use
   * it; not (refused, or failed), the next round writes the shard's blanket again.
   */
  logged(b: Blanket, taken: boolean): void {
    const o = this.own.get(b.shard);
    if (o === undefined || o.blanket.ownerEpoch !== b.ownerEpoch) return;
    if (taken) o.taken = Math.max(o.taken, b.startsBy);
    else if (o.blanket === b) o.blanket = { ...b, startsBy: o.taken };
  }

  /** Whether this owner's taken blanket, under `ownerEpoch`, covers `l`'s window. */
  covers(l: Ledger, ownerEpoch: number): boolean {
    const o = this.own.get(l.shard);
    return this.allowed && o !== undefined && o.blanket.ownerEpoch === ownerEpoch && l.windowEnd - l.windowMs <= o.taken;
  }

  /** A replayed blanket (an earlier owner's): counted from now on in every window of its shard it covers. */
  replay(b: Blanket): void {
    let list = this.inherited.get(b.shard);
    if (list === undefined) this.inherited.set(b.shard, (list = []));
    const same = list.find((x) => x.ownerEpoch === b.ownerEpoch && x.nodeEpoch === b.nodeEpoch && x.nodeId === b.nodeId);
    if (same !== undefined) {
      if (same.startsBy >= b.startsBy) return;
      list.splice(list.indexOf(same), 1);
    }
    list.push(b);
    list.sort((x, y) => y.startsBy - x.startsBy);
    if (list.length > INHERITED_PER_SHARD) list.length = INHERITED_PER_SHARD;
  }

  /**
   * Counts earlier owners' blankets in `l`: the float lease each names holds at least the one credit
   * the blanket let it issue there, whatever the log says (its grants may be lost).
   */
  inherit(l: Ledger): void {
    const list = this.inherited.get(l.shard);
    if (list === undefined) return;
    const start = l.windowEnd - l.windowMs;
    for (const b of list) {
      if (start > b.startsBy) continue;
      const lease = leaseFor(l, b.nodeId, FLOAT_PREFIX + b.nodeEpoch, b.ownerEpoch);
      if (lease.issued < 1) lease.issued = 1;
    }
  }

  /**
   * The shard's blankets as log entries, for its checkpoint: earlier owners' and this owner's latest
   * taken, so that the log it trims never loses one a later owner must count.
   */
  entries(shard: number): LogEntry[] {
    const out: LogEntry[] = (this.inherited.get(shard) ?? []).map((blanket) => ({ kind: 'blanket', blanket }));
    // The latest written, taken or not: its write may land in the part of the log the checkpoint trims.
    const o = this.own.get(shard);
    if (o !== undefined && Number.isFinite(o.blanket.startsBy)) out.push({ kind: 'blanket', blanket: o.blanket });
    return out;
  }
}

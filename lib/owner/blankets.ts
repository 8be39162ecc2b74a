import { FLOAT_PREFIX, leaseFor, type Ledger } from '../ledger-store.js';
import type { LogEntry } from '../protocol/log.js';

/**
 * A blanket covers the windows of its shard that start by `startsBy`, this long ahead of the time it
 * is written; it is written again once no more than half of that is left, so one is always taken for
 * the windows running now and those starting within the next second.
 */
export const BLANKET_SPAN_MS = 2000;

/**
 * An earlier owner's blanket is forgotten once every window it covered ended: the longest window a
 * policy allows (`lib/policy.ts`) after its `startsBy`, and a minute for the owners' clocks' skew.
 */
const FORGOTTEN_AFTER_MS = 31 * 86_400_000 + 60_000;

/** Earlier owners' blankets kept per shard at most (owner epochs that failed without retiring theirs). */
const INHERITED_PER_SHARD = 512;

/**
 * What a blanket says: its writer's float lease, by holder and owner epoch, and the windows it
 * covers — those starting after `startsAfter` (when that owner epoch's first blanket was written:
 * nothing started before it is covered) and by `startsBy`. `retired`: the writer gave the shard up
 * with every grant it answered from a blanket on record; its blankets no longer count.
 */
export interface Blanket {
  readonly shard: number;
  /** The float's holder: the owner process (`FLOAT_PREFIX` + `nodeEpoch` names its float lease). */
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly ownerEpoch: number;
  /** Windows of the shard starting after `startsAfter` and by `startsBy` (ms, wall clock) are covered. */
  readonly startsAfter: number;
  readonly startsBy: number;
  readonly retired?: boolean;
}

/** This owner's blanket of one shard: the latest written (never lowered), the latest taken, and whether to write again. */
interface Own {
  blanket: Blanket;
  taken: number;
  rewrite: boolean;
  /** A grant with float credit was not taken by the log: the blanket can never be retired. */
  lost: boolean;
}

const covering = (b: Blanket, start: number, by = b.startsBy): boolean => start > b.startsAfter && start <= by;

/**
 * Blankets: one log write per shard about once a second that lets its owner answer the first ask of
 * any window of it with one credit from a float it never logged for that window.
 *
 * An owner answers an ask at once only from a float whose grant is on record; a window nobody asked
 * for before has none, so its first ask waited for a log write — a Redis round trip inside the fast
 * path's 1 ms deadline, which a busy host misses (the bench's fleet members refused first sights at a
 * limit of 10⁹). A blanket states: every window of this shard that starts within its range may have
 * one credit issued to this owner's float (lease `FLOAT_PREFIX` + holder epoch, number = owner
 * epoch), as if a grant of 1 to that float were on record. So the owner may make such a float of 1
 * in a window with none (`Floats.cover`), usable at once, and answer the window's first ask from it;
 * the answer's own grant (`floated` 1) is logged after it, as with any float.
 *
 * A later owner replaying the log counts the credit in every window the blanket covers (`inherit`),
 * whether or not the writer made the float there: it may have, and the grant that says so may be
 * lost with it. An owner that gives a shard up cleanly, every such grant on record, retires its
 * blanket (`retire`), logging with it the floats it made that gave credit out
 * (`Floats.retireBlanket`): the grants say all. So a window loses one credit only when its owner
 * failed while the window was running, having started in that owner's time — as an unused float does.
 */
export class Blankets {
  private readonly own = new Map<number, Own>();
  /** Earlier owners' (and this process's under earlier epochs), by shard: replayed, counted in every covered window. */
  private readonly inherited = new Map<number, Blanket[]>();
  /** Whether every member counts blankets (`FleetView.countsBlankets`), as of the last `due`. */
  private allowed = false;
  /** A log is being replayed: ledgers made meanwhile count blankets after it (`replayLog`), as one may be retired. */
  replaying = false;

  /**
   * The blankets to write now on the shards this owner serves: one whose latest `startsBy` is no more
   * than half a span ahead, or whose last write did not come back. None while a member may not count
   * them (an older release could take a shard over and issue a blanket's credit again).
   */
  due(holder: { nodeId: string; nodeEpoch: string }, serving: (shard: number) => boolean, shards: Iterable<number>, ownerEpoch: (shard: number) => number, now: number, allowed: boolean): Blanket[] {
    this.allowed = allowed;
    if (!allowed) return [];
    const out: Blanket[] = [];
    const at = Math.floor(now);
    for (const shard of shards) {
      if (!serving(shard)) continue;
      const epoch = ownerEpoch(shard);
      let o = this.own.get(shard);
      if (o?.blanket.ownerEpoch !== epoch) {
        const first = { shard, nodeId: holder.nodeId, nodeEpoch: holder.nodeEpoch, ownerEpoch: epoch, startsAfter: at, startsBy: at };
        this.own.set(shard, (o = { blanket: first, taken: Number.NEGATIVE_INFINITY, rewrite: true, lost: false }));
      } else if (!o.rewrite && o.blanket.startsBy - at > BLANKET_SPAN_MS / 2) continue;
      o.blanket = { ...o.blanket, startsBy: Math.max(o.blanket.startsBy, at + BLANKET_SPAN_MS) };
      o.rewrite = false;
      out.push(o.blanket);
    }
    return out;
  }

  /**
   * A blanket's log write came back: taken (not refused by the fence), the windows it covers may use
   * it; not (refused, or failed), the next round writes the shard's blanket again. What was written
   * stays the shard's blanket either way: the write may have landed, and a checkpoint must carry it.
   */
  logged(b: Blanket, taken: boolean): void {
    const o = this.own.get(b.shard);
    if (o === undefined || o.blanket.ownerEpoch !== b.ownerEpoch) return;
    if (taken) o.taken = Math.max(o.taken, b.startsBy);
    else o.rewrite = true;
  }

  /** A grant of `shard` with float credit (answered before its write) was not taken by the log. */
  lost(shard: number, ownerEpoch: number): void {
    const o = this.own.get(shard);
    if (o !== undefined && o.blanket.ownerEpoch === ownerEpoch) o.lost = true;
  }

  /** Whether this owner's taken blanket, under `ownerEpoch`, covers `l`'s window. */
  covers(l: Ledger, ownerEpoch: number): boolean {
    const o = this.own.get(l.shard);
    return this.allowed && o !== undefined && o.blanket.ownerEpoch === ownerEpoch && covering(o.blanket, l.windowEnd - l.windowMs, o.taken);
  }

  /**
   * The shard is given up cleanly: this owner answers no more asks there, and every grant and
   * blanket write it started has come back. If every grant with float credit was taken, its blanket
   * is retired — the entry to log, after those, with its floats' grants (`Floats.retireBlanket`) —
   * and forgotten; if one was not, later owners count it.
   */
  retire(shard: number): Blanket | undefined {
    const o = this.own.get(shard);
    this.own.delete(shard);
    return o === undefined || o.lost ? undefined : { ...o.blanket, retired: true };
  }

  /** A replayed blanket (an earlier owner's): counted from now on in every window of its shard it covers, until retired. */
  replay(b: Blanket, now: number): void {
    let list = this.inherited.get(b.shard);
    if (list === undefined) this.inherited.set(b.shard, (list = []));
    const i = list.findIndex((x) => x.ownerEpoch === b.ownerEpoch && x.nodeEpoch === b.nodeEpoch && x.nodeId === b.nodeId);
    const same = list[i];
    if (same !== undefined) list.splice(i, 1);
    if (b.retired) return;
    list.push(same === undefined ? b : { ...b, startsAfter: Math.min(same.startsAfter, b.startsAfter), startsBy: Math.max(same.startsBy, b.startsBy) });
    // Newest first; none whose every window ended; at most INHERITED_PER_SHARD (the oldest go).
    list.sort((x, y) => y.startsBy - x.startsBy);
    while (list.length > 0 && (list.length > INHERITED_PER_SHARD || list.at(-1)!.startsBy < now - FORGOTTEN_AFTER_MS)) list.pop();
  }

  /** Shards with earlier owners' blankets to count. */
  shards(): IterableIterator<number> {
    return this.inherited.keys();
  }

  /**
   * Counts earlier owners' blankets in `l`: the float lease each names holds at least the one credit
   * the blanket let it issue there, whatever the log says (its grants may be lost).
   */
  inherit(l: Ledger): void {
    const list = this.inherited.get(l.shard);
    if (list === undefined || this.replaying) return;
    const start = l.windowEnd - l.windowMs;
    for (const b of list) {
      if (!covering(b, start)) continue;
      const lease = leaseFor(l, b.nodeId, FLOAT_PREFIX + b.nodeEpoch, b.ownerEpoch);
      if (lease.issued < 1) lease.issued = 1;
    }
  }

  /**
   * The shard's blankets as log entries, for its checkpoint: earlier owners' and this owner's latest
   * written, taken or not — its write may land in the part of the log the checkpoint trims.
   */
  entries(shard: number): LogEntry[] {
    const out: LogEntry[] = (this.inherited.get(shard) ?? []).map((blanket) => ({ kind: 'blanket', blanket }));
    const o = this.own.get(shard);
    if (o !== undefined) out.push({ kind: 'blanket', blanket: o.blanket });
    return out;
  }
}

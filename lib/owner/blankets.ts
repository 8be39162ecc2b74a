import { FLOAT_PREFIX, leaseFor, type Ledger } from '../ledger-store.js';
import type { LogEntry } from '../protocol/log.js';
import { extended, holdIn, mergeHeld, recorded, relist, type Held, type HeldOptions, type HeldShard, type HeldStatement, type Holder, type Reached } from './held.js';

export type { HeldStatement };

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
 * with every grant it answered from a blanket on record; its float's credit no longer counts.
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
  /** Members that take credit themselves under it (`Held`): kept when retired, on record nowhere else. */
  readonly held?: Held;
}

/** This owner's blanket of one shard: the latest written (never lowered), the latest taken, and whether to write again. */
interface Own {
  blanket: Blanket;
  taken: number;
  /** Its held part's latest end taken (`Held.startsBy`); whether a record with a reach was taken; its last back pass (`Reached`). */
  heldTaken: number;
  reachTaken: boolean;
  reached?: Reached;
  rewrite: boolean;
  /** A grant with float credit was not taken by the log: the blanket can never be retired. */
  lost: boolean;
}

const covering = (b: Blanket, start: number, by = b.startsBy): boolean => start > b.startsAfter && start <= by;

/**
 * How far back members may take in a shard by its owner's statement (`Reached.stated`): not at all
 * while a member may not count it, before a record with a reach (`Held.reach`, never later) is taken,
 * or while the members its latest record lists were not all counted by a back pass (one written while
 * a member could not count a reach lists members no back pass counted in the running windows).
 */
function reachOf(o: Own, reaching: boolean): number | undefined {
  const r = o.reached;
  return reaching && o.reachTaken && r?.holders !== undefined && r.holders === o.blanket.held?.holders ? r.stated : undefined;
}

/** Two records of one blanket (a rewrite, a retirement) as one: the widest range, every member's (`mergeHeld`). */
function merged(a: Blanket, b: Blanket): Blanket {
  const held = mergeHeld(a.held, b.held);
  return {
    ...b,
    startsAfter: Math.min(a.startsAfter, b.startsAfter),
    startsBy: Math.max(a.startsBy, b.startsBy),
    // The later record's: an owner that retired it may have taken the shard back under the same epoch.
    retired: b.retired === true,
    ...(held === undefined ? {} : { held }),
  };
}

/** `into` counting `b`'s members too, over both ranges (`b` is forgotten): more than either counts, never less. */
function widened(into: Blanket, b: Blanket): Blanket {
  const held = mergeHeld(into.held, b.held);
  return { ...into, startsAfter: Math.min(into.startsAfter, b.startsAfter), startsBy: Math.max(into.startsBy, b.startsBy), ...(held === undefined ? {} : { held }) };
}

/**
 * Blankets: one log write per shard about once a second that lets its owner answer the first ask of
 * any window of it with one credit from a float it never logged for that window.
 *
 * A window nobody asked for has no float, so its first ask waited for a log write (a Redis round
 * trip inside the fast path's 1 ms deadline). A blanket states: every window of this shard starting
 * within its range may have one credit issued to this owner's float (lease `FLOAT_PREFIX` + holder
 * epoch, number = owner epoch), as if its grant of 1 were on record. So the owner may make such a
 * float in a window with none (`Floats.cover`) and answer the first ask from it, logging after.
 *
 * A later owner replaying the log counts the credit in every window the blanket covers (`inherit`),
 * whether or not the writer made the float there: it may have, and the grant that says so may be
 * lost with it. An owner that gives a shard up cleanly, every such grant on record, retires its
 * blanket (`retire`), logging with it the floats it made that gave credit out
 * (`Floats.retireBlanket`): the grants say all. So a window loses one credit only when its owner
 * failed while the window was running, having started in that owner's time — as an unused float does.
 *
 * A blanket may also list members that take credit themselves in the windows it covers (`held`,
 * `lib/owner/held.ts`): every owner counts that credit in every such window, the writer from before
 * the write, later owners from the log — even once the blanket is retired.
 */
export class Blankets {
  private readonly own = new Map<number, Own>();
  /** The members its blankets list (`relist`): one list for every shard. */
  private roster: readonly Holder[] = [];
  /** Earlier owners' (and this process's under earlier epochs), by shard: replayed, counted in every covered window. */
  private readonly inherited = new Map<number, Blanket[]>();
  /** Whether every member counts blankets (`FleetView.countsBlankets`), and a reach (`countsReach`), as of the last `due`. */
  private allowed = false;
  private reaching = false;
  /** This owner's own blankets of an earlier epoch, counted as written: not all of them may be on record. */
  private readonly unlogged = new WeakSet<Blanket>();
  /** A log is being replayed: ledgers made meanwhile count blankets after it (`replayLog`), as one may be retired. */
  replaying = false;

  /**
   * The blankets to write now on the shards this owner serves: one whose latest `startsBy` is no more
   * than half a span ahead, or whose last write did not come back. None while a member may not count
   * them (an older release could take a shard over and issue a blanket's credit again).
   */
  due(
    holder: { nodeId: string; nodeEpoch: string },
    serving: (shard: number) => boolean,
    shards: Iterable<number>,
    ownerEpoch: (shard: number) => number,
    now: number,
    allowed: boolean,
    held?: HeldOptions,
  ): Blanket[] {
    this.allowed = allowed;
    this.reaching = held?.reachFrom !== undefined;
    if (!allowed) return [];
    const out: Blanket[] = [];
    const at = Math.floor(now);
    // Members listed anew hold nothing in windows any of its blankets' held parts was written for.
    if (held !== undefined) {
      let from = at;
      for (const o of this.own.values()) from = Math.max(from, o.blanket.held?.startsBy ?? o.blanket.startsBy);
      this.roster = relist(this.roster, held.members, from, now - FORGOTTEN_AFTER_MS);
    }
    for (const shard of shards) {
      if (!serving(shard)) continue;
      const epoch = ownerEpoch(shard);
      let o = this.own.get(shard);
      // Under a new owner epoch without a replay, the members of the last one still count.
      if (o !== undefined && o.blanket.ownerEpoch !== epoch && o.blanket.held !== undefined) this.keep({ ...o.blanket, retired: true }, now, false);
      if (o?.blanket.ownerEpoch !== epoch) {
        const first = { shard, nodeId: holder.nodeId, nodeEpoch: holder.nodeEpoch, ownerEpoch: epoch, startsAfter: at, startsBy: at };
        this.own.set(shard, (o = { blanket: first, taken: Number.NEGATIVE_INFINITY, heldTaken: Number.NEGATIVE_INFINITY, reachTaken: false, rewrite: true, lost: false }));
      } else if (!o.rewrite && o.blanket.startsBy - at > BLANKET_SPAN_MS / 2) continue;
      const by = Math.max(o.blanket.startsBy, at + BLANKET_SPAN_MS);
      if (held === undefined || (this.roster.length === 0 && o.blanket.held === undefined)) o.blanket = { ...o.blanket, startsBy: by };
      else ({ blanket: o.blanket, reached: o.reached } = extended(o.blanket, by, held, this.roster, o.reached));
      o.rewrite = false;
      out.push(o.blanket);
    }
    return out;
  }

  /**
   * A blanket's log write came back: taken (not refused by the fence), the windows it covers may use it;
   * not, it is written again next round — and stays the shard's blanket: the write may have landed.
   */
  logged(b: Blanket, taken: boolean): void {
    const o = this.own.get(b.shard);
    if (o === undefined || o.blanket.ownerEpoch !== b.ownerEpoch) return;
    if (taken) {
      o.taken = Math.max(o.taken, b.startsBy);
      o.heldTaken = Math.max(o.heldTaken, b.held?.startsBy ?? o.heldTaken);
      // Every later record has it too: each member the statement lists is in one taken with it.
      if (b.held?.reach !== undefined) o.reachTaken = true;
    } else o.rewrite = true;
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
   * The held parts of its blankets as far as their writes were taken, of the shards it serves, for its
   * heartbeat (`HeldStatement`), with its current members: a shard's record the log took may list
   * fewer, but each listed since was listed from a later end than that record's, so it holds nothing
   * there; and one ended since holds no more than the record said.
   */
  statement(serving: (shard: number) => boolean): HeldStatement {
    const shards: HeldShard[] = [];
    for (const [shard, o] of this.own) {
      const h = o.blanket.held;
      const startsBy = Math.min(o.heldTaken, h?.startsBy ?? o.heldTaken);
      if (h === undefined || startsBy <= o.blanket.startsAfter || !serving(shard)) continue;
      const reach = reachOf(o, this.reaching);
      shards.push({ shard, ownerEpoch: o.blanket.ownerEpoch, startsAfter: o.blanket.startsAfter, startsBy, min: h.min, ...(reach === undefined ? {} : { reach }) });
    }
    // Only those listed now: leaving one out narrows what it may take, and ended ones would pile up.
    return { holders: shards.length === 0 ? [] : this.roster.filter((h) => h.until === undefined), shards };
  }

  /**
   * Whether a blanket on record (this owner's, as far as its write was taken, or one replayed from the
   * log) lets `nodeEpoch` hold credit in `l`: what it says it took there is on record (`Floats.onRecord`).
   */
  recordsHeld(l: Ledger, nodeEpoch: string): boolean {
    const o = this.own.get(l.shard);
    const h = o?.blanket.held;
    if (o !== undefined && h !== undefined && recorded(l, { ...o.blanket, held: { ...h, reach: reachOf(o, this.reaching) } }, nodeEpoch, o.heldTaken)) return true;
    return (this.inherited.get(l.shard) ?? []).some((b) => !this.unlogged.has(b) && recorded(l, b, nodeEpoch, b.startsBy));
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

  /** A replayed blanket (an earlier owner's): counted from now on where it covers — its float's credit until retired, its members' for good. */
  replay(b: Blanket, now: number): void {
    this.keep(b, now);
  }

  /** Counts `b` from now on as an earlier owner's; as not on record, if `b` or what it merges with is not. */
  private keep(b: Blanket, now: number, logged = true): void {
    let list = this.inherited.get(b.shard);
    if (list === undefined) this.inherited.set(b.shard, (list = []));
    const i = list.findIndex((x) => x.ownerEpoch === b.ownerEpoch && x.nodeEpoch === b.nodeEpoch && x.nodeId === b.nodeId);
    const same = list[i];
    if (same !== undefined) list.splice(i, 1);
    const one = same === undefined ? b : merged(same, b);
    if (!logged || (same !== undefined && this.unlogged.has(same))) this.unlogged.add(one);
    // Retired, it counts only what members may hold; with none, nothing.
    if (one.retired === true && one.held === undefined) return;
    list.push(one);
    // Newest first; none whose every window ended; at most INHERITED_PER_SHARD: the oldest go, but what
    // one lets members hold is merged into the next oldest (a wider range counts more, never less).
    list.sort((x, y) => y.startsBy - x.startsBy);
    while (list.length > 0 && list.at(-1)!.startsBy < now - FORGOTTEN_AFTER_MS) list.pop();
    while (list.length > INHERITED_PER_SHARD) {
      const oldest = list.pop()!;
      if (oldest.held !== undefined) list[list.length - 1] = widened(list.at(-1)!, oldest);
    }
  }

  /** Shards with blankets to count: earlier owners', and this owner's own (a replay may make ledgers in them too). */
  shards(): Set<number> {
    return new Set([...this.inherited.keys(), ...this.own.keys()]);
  }

  /**
   * Counts blankets in `l`: earlier owners' — the float lease each names holds at least the one credit
   * the blanket let it issue there, whatever the log says (its grants may be lost) — and what the
   * members each lists, this owner's own included, may hold there (`holdIn`).
   */
  inherit(l: Ledger, stated = false): void {
    if (this.replaying) return;
    // Counted before the allowance was known: again now, by it (nothing was issued meanwhile).
    if (stated) delete l.heldBy;
    const start = l.windowEnd - l.windowMs;
    for (const b of this.inherited.get(l.shard) ?? []) {
      // Its members' range may reach back past the float's (`Held.reach`).
      holdIn(l, b, start);
      if (!covering(b, start) || b.retired === true) continue;
      const lease = leaseFor(l, b.nodeId, FLOAT_PREFIX + b.nodeEpoch, b.ownerEpoch);
      if (lease.issued < 1) lease.issued = 1;
    }
    // This owner's own, as written: its members may hold credit wherever it may be taken.
    const o = this.own.get(l.shard);
    if (o !== undefined) holdIn(l, o.blanket, start);
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

import { HELD, type Ledger } from '../ledger-store.js';
import type { Blanket } from './blankets.js';

/**
 * Windows whose allowance is below this hold no member's credit: a member that never sees the key
 * there strands its credit, which must be a small part of the allowance (at most 16 members, as the
 * Redis bus lists them: under 0.1 %).
 */
export const HELD_MIN_ALLOWANCE = 16_384;

/** Members one blanket lists at most (a reader refuses more): once full, a new member is not listed. */
export const HOLDERS_MAX = 1_024;

/**
 * What a blanket lets members hold: `HELD` credit each member takes itself in the windows of the
 * blanket that start by `startsBy` (never after the blanket's own) and whose allowance is at least
 * `min` (fixed for the blanket's life: a member may read any of its records). With `reach`, also in
 * windows that started before the blanket's range or the member's `since`, by `startsBy`, and end
 * after `reach` (`extended`): windows running when it was first written.
 */
export interface Held {
  readonly min: number;
  readonly startsBy: number;
  readonly holders: readonly Holder[];
  readonly reach?: number;
}

/**
 * A member a blanket lets take `HELD` credit itself in each window it covers that starts after
 * `since` and by `until` (while the member is listed, by the held part's `startsBy`).
 */
export interface Holder {
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly since: number;
  readonly until?: number;
}

/** One shard's held part as far as the log took it, under `ownerEpoch` (`HeldStatement`). */
export interface HeldShard {
  readonly shard: number;
  readonly ownerEpoch: number;
  readonly startsAfter: number;
  readonly startsBy: number;
  readonly min: number;
  /** Windows ending after it are held in, whenever they started (`Reached.stated`). */
  readonly reach?: number;
}

/**
 * What an owner states to members each round of its blankets' held parts (`Blankets.statement`): its
 * members, the same in every shard it owns, and per shard what the log took. A member listed may take
 * credit in a window of a shard starting after both the shard's `startsAfter` and its own `since`,
 * and by both the shard's `startsBy` and its own `until`, of a limit at least `min`.
 */
export interface HeldStatement {
  readonly holders: readonly Pick<Holder, 'nodeEpoch' | 'since' | 'until'>[];
  readonly shards: readonly HeldShard[];
}

/** What an owner needs to list members in its blankets (`Blankets.due`). */
export interface HeldOptions {
  /** Members that may take credit themselves now: listed from the next blanket on, given an end once they are not. */
  readonly members: readonly { readonly nodeId: string; readonly nodeEpoch: string }[];
  readonly min: number;
  /** A shard's ledgers: those a blanket's new part covers count its members' credit before it is written. */
  readonly inShard: (shard: number) => Iterable<Ledger>;
  /**
   * What a ledger can still commit: its pool, the reserve included (what is held back for unsettled
   * nodes is not); below 0 by what it counts committed past that.
   */
  readonly room: (l: Ledger) => number;
  /**
   * The earliest window end a held part of `shard` may reach back to (`Held.reach`): no earlier than
   * now, nor than the shard's ended marks (a window whose ledger was dropped is ended for good). None
   * while a member may not count such a reach (an older release would not).
   */
  readonly reachFrom?: (shard: number) => number;
}

/*
 * Members' credit under a blanket (`Blanket.held`): a member a blanket lists takes `HELD` credit
 * itself, with no ask and no grant, in a window the blanket covers — so its first sight of a key
 * waits for nobody. Every owner counts that credit committed in every such window, whether the member
 * took it or not (`Ledger.heldBy`, `tally`): the living owner from the moment the part of the range is
 * written (before the write goes out, so before any member can take it), a later owner from the log.
 */

/**
 * Whether `h`, listed in `b`, may hold credit in a window from `start` to `end`, the held part's end
 * taken as `by`: one starting after both the blanket's start and `since`, or ending after its reach.
 */
function holds(b: Blanket, h: Holder, start: number, end: number, by: number): boolean {
  const reach = b.held?.reach;
  return start <= Math.min(h.until ?? by, by) && ((start > b.startsAfter && start > h.since) || (reach !== undefined && end > reach));
}

/** Each list of holders' node epochs, for ledgers every one of them holds credit in: one array for all of them. */
const everyone = new WeakMap<readonly Holder[], string[]>();

/**
 * Counts in `l` (its window starting at `start`) the credit every member `b` lists may hold there
 * (`Ledger.heldBy`): none in a window `b` does not cover or whose allowance is below its `min`.
 * Never uncounted.
 */
export function holdIn(l: Ledger, b: Blanket, start: number): void {
  const h = b.held;
  if (h === undefined || (l.allowance < h.min && l.unstated !== true)) return;
  if (l.heldBy === undefined && h.holders.length > 0 && h.holders.every((x) => holds(b, x, start, l.windowEnd, h.startsBy))) {
    let all = everyone.get(h.holders);
    if (all === undefined) everyone.set(h.holders, (all = [...new Set(h.holders.map((x) => x.nodeEpoch))]));
    l.heldBy = all;
    return;
  }
  for (const x of h.holders) {
    if (!holds(b, x, start, l.windowEnd, h.startsBy) || l.heldBy?.includes(x.nodeEpoch) === true) continue;
    // Copied, never changed in place: the array may be shared.
    l.heldBy = l.heldBy === undefined ? [x.nodeEpoch] : [...l.heldBy, x.nodeEpoch];
  }
}

/**
 * Whether `b`, its held part taken (written and not refused by the log's fence) up to `taken`, lets
 * `nodeEpoch` hold credit in `l`: the blanket is the record of that credit.
 */
export function recorded(l: Ledger, b: Blanket, nodeEpoch: string, taken: number): boolean {
  const h = b.held;
  const start = l.windowEnd - l.windowMs;
  const by = Math.min(taken, h?.startsBy ?? taken);
  // Listed in a record taken: one ending past its `since` (`lib/owner/blankets.ts` `statement`).
  return h !== undefined && l.allowance >= h.min && h.holders.some((x) => x.nodeEpoch === nodeEpoch && by > x.since && holds(b, x, start, l.windowEnd, by));
}

/**
 * `list` with `members` listed from `from` (the latest end any of its blankets' held parts was written
 * with) on: a member not listed yet holds nothing in windows starting by then; one no longer a member
 * holds nothing in windows starting after it, and is forgotten once its end is before `forgetBefore`.
 * At most HOLDERS_MAX: a member beyond them asks for its credit, as before. The same array if nothing
 * changed. One list for all of an owner's shards, so its statement states it once.
 */
export function relist(list: readonly Holder[], members: HeldOptions['members'], from: number, forgetBefore: number): readonly Holder[] {
  const open = new Set(members.map((m) => m.nodeEpoch));
  let changed = false;
  const out: Holder[] = [];
  for (const h of list) {
    if (h.until !== undefined && h.until < forgetBefore) changed = true;
    else if (h.until === undefined && !open.has(h.nodeEpoch)) {
      out.push({ ...h, until: from });
      changed = true;
    } else out.push(h);
    if (h.until === undefined) open.delete(h.nodeEpoch);
  }
  for (const m of members) {
    if (!open.has(m.nodeEpoch) || out.length >= HOLDERS_MAX) continue;
    out.push({ nodeId: m.nodeId, nodeEpoch: m.nodeEpoch, since: from });
    changed = true;
  }
  return changed ? out : list;
}

/**
 * How far back members may take in a shard (`HeldShard.reach`), and the members the back pass of
 * `extended` last counted in the shard's running windows (`Blankets` keeps one per shard it writes):
 * none while a window it would reach over has no allowance stated yet (no reach is stated until then).
 */
export interface Reached {
  readonly stated: number;
  readonly holders?: readonly Holder[];
}

/**
 * `b` rewritten to cover windows starting by `by`, listing `holders` (`relist`, from at least its held
 * part's end): every ledger of its shard the held part's new range covers counts what the members may
 * hold there first (`holdIn`), and that range ends before the first such window with no room for it
 * (its credit is committed already; the blanket's own range goes on). What was written stays as it was.
 *
 * With `reachFrom`, the held part also reaches back over windows ending after its reach, whenever they
 * started: those running now (a new fleet's first minute, a member's first window after it is listed,
 * a shard's first under a new owner). Two reaches: the record's (`Held.reach`), what every owner counts
 * by — ledgers made later, a checkpoint, a later owner — set at its first write and never raised nor
 * dropped; and the stated one (`Reached.stated`), what members take by: past the record's, the ended
 * marks and now (a window ending by then may have had its ledger dropped with the allowance spent, and
 * a member whose clock runs behind could see it as running), and past any running window with no room
 * for the members' credit, counted already or not (a later owner counts by the record's reach, room or
 * not, so what is counted holds only within the allowance). A back pass — when the members changed, or
 * while a window with no room holds the stated reach up — counts the members in every running window
 * past the stated reach before the write goes out: a statement, however old, never lets a member take
 * where nothing counts it. A window made later counts them when made, by the record's reach. A window
 * a replay made from grants alone, its allowance not stated yet (it may be given out to the last
 * credit), holds the back pass back until a node states it, and ends the part ahead before it.
 */
export function extended(b: Blanket, by: number, held: HeldOptions, holders: readonly Holder[], reached?: Reached): { blanket: Blanket; reached?: Reached } {
  const from = b.held?.startsBy ?? b.startsBy;
  const min = b.held?.min ?? held.min;
  const floor = held.reachFrom?.(b.shard);
  const reach = b.held?.reach ?? floor;
  // Again from the floor when the members changed, or a window with no room raised it (it may have ended).
  const back = floor !== undefined && (reached?.holders !== holders || reached.stated > floor);
  let stated = floor === undefined ? reached?.stated : Math.max(floor, reach!);
  // As members may take by it from now on (no reach while one may not count it).
  const part = (startsBy: number, r = floor === undefined ? undefined : stated): Blanket => ({ ...b, startsBy: by, held: { min, startsBy, holders, ...(r === undefined ? {} : { reach: r }) } });
  let end = by;
  let unstated = false;
  for (const l of held.inShard(b.shard)) {
    const start = l.windowEnd - l.windowMs;
    const ahead = start > from && start <= end;
    const behind = back && l.windowEnd > stated! && start <= end;
    if ((!ahead && !behind) || (l.allowance < min && l.unstated !== true)) continue;
    const next = part(end);
    let adding = 0;
    let holding = false;
    for (const h of holders) {
      if (!holds(next, h, start, l.windowEnd, end)) continue;
      holding = true;
      if (l.heldBy?.includes(h.nodeEpoch) !== true) adding += HELD;
    }
    // A replay made it from grants alone: its allowance, not stated yet, may be given out to the last
    // credit (an earlier owner's count of members there is no room either). No part covers it ahead,
    // and no reach is stated, until a node states it.
    if (l.unstated === true) {
      if (holding && ahead) end = start - 1;
      else if (holding) unstated = true;
      continue;
    }
    // Room read signed: a later owner counts by the record's reach, room or not, so what is counted
    // already holds only if the allowance, less what is held back for silent members, does.
    if (adding <= held.room(l)) continue;
    if (behind) stated = l.windowEnd;
    if (ahead) end = start - 1;
  }
  const counted = part(end);
  for (const l of held.inShard(b.shard)) {
    const start = l.windowEnd - l.windowMs;
    if (start > from || (back && l.windowEnd > stated!)) holdIn(l, counted, start);
  }
  const blanket = part(end, reach);
  if (stated === undefined) return { blanket };
  return { blanket, reached: back && unstated ? { stated } : { stated, holders: back ? holders : reached!.holders } };
}

/** The members two records of one blanket list (a rewrite, a retirement), as one list: each one's widest range. */
export function mergeHeld(a: Blanket['held'], b: Blanket['held']): Blanket['held'] {
  if (a === undefined || b === undefined) return a ?? b;
  // A member's end in a record is its `until`, or while it was listed there the record's end: the later
  // record may have ended it (an earlier one, written before it left, does not keep it listed).
  const holders = a.holders.map((x) => (x.until === undefined ? { ...x, until: a.startsBy } : x));
  for (const h of b.holders) {
    const i = holders.findIndex((x) => x.nodeEpoch === h.nodeEpoch && x.since === h.since);
    const x = holders[i];
    if (x === undefined) holders.push(h);
    else holders[i] = h.until === undefined ? h : { ...x, until: Math.max(x.until!, h.until) };
  }
  const reach = a.reach === undefined ? b.reach : b.reach === undefined ? a.reach : Math.min(a.reach, b.reach);
  return { min: Math.min(a.min, b.min), startsBy: Math.max(a.startsBy, b.startsBy), holders, ...(reach === undefined ? {} : { reach }) };
}

import type { HeldShard, HeldStatement } from './owner/held.js';

/**
 * The fleet's one presence rule, in rounds, for every transport (the in-memory bus of the simulator
 * and the Redis bus alike), so the simulator measures the rule production runs.
 *
 * Timeline of a member cut off after its last heartbeat at t (T = one round):
 *   t + REACH_ROUNDS·T      it counts its owners out of reach (no more heartbeats reach them; the
 *                           Redis bus counts it in its own running time, stalls of its event loop
 *                           left out, so maybe later — which only delays what follows)
 *   t + SILENT_ROUNDS·T     owners count it silent and hold its possible self-grant back
 *   t + (REACH + 2)·T       it stops the fast path (F2: two missed rounds)
 * and it grants itself credit (F4) only into a window that began at least ASK_AHEAD + SILENT + SKEW rounds
 * (`lib/lease-node/boundary.ts`) after its last contact: by then no owner can have issued credit for
 * that window without holding the node's share back, pre-grants asked ahead by other nodes included.
 *
 * Silence is judged on both sides in one time base (Redis time, or the simulator's clock), so no
 * pause breaks it. A member's heartbeat (`Heartbeat`) says when it last heard from each shard's owner
 * — a time no later than the one its own silence counts from — and in which shards it holds a
 * self-grant. An owner holds the member's share back in a shard while the member is silent, while it
 * has not heard from that shard's owner for SILENT_ROUNDS (an owner that was paused, or cut off while
 * the member was not, was silent to it although its heartbeats kept coming), and, where it granted
 * itself credit, until the owner has folded its first report batch since (which, like every later one,
 * carries the self-granted bucket) — however late that batch lands.
 */
export const REACH_ROUNDS = 3;
/** Rounds without a heartbeat after which an owner holds a member's possible self-grant back. */
export const SILENT_ROUNDS = 4;
/** A member back from a silence gets no grants for this many rounds (L5). */
export const REJOIN_ROUNDS = 1;

/** What a node states in each round's heartbeat, besides being alive (`OwnerLink.heartbeat`). */
export interface NodeBeat {
  /**
   * Shards in which it holds a boundary self-grant (F4) for a window not yet ended, each with the
   * round of its first report batch since the latest one (`ReportBatch.round`): that batch, and every
   * later one, carries the self-granted bucket.
   */
  readonly selfGranted: ReadonlyMap<number, number>;
  /**
   * Per shard, the node's own monotonic time of its last contact with the owner: the very times its
   * self-grant rule counts silence from. The transport states them in the owners' time base, never
   * later than they were.
   */
  readonly contact: ArrayLike<number>;
}

/** A member's last heartbeat as an owner knows it, its times in the owner's monotonic time. */
export interface Heartbeat extends Omit<NodeBeat, 'contact'> {
  /** It had last heard from the owner of every shard at this time or later, except… */
  readonly freshAt: number;
  /** …these shards (a shard → the time it last heard from that shard's owner). */
  readonly stale: ReadonlyMap<number, number>;
  /** It counts blankets when it replays a shard's log (`lib/owner/blankets.ts`); an older release does not say so. */
  readonly blankets?: boolean;
  /** It counts what blankets' members may hold (`lib/owner/held.ts`); an older release does not say so. */
  readonly holds?: boolean;
  /** It counts a held part's reach back over running windows (`Held.reach`); an older release does not say so. */
  readonly reaches?: boolean;
  /** The taken held parts of its blankets, by shard, and its members (`HeldStatement`): what members may take by. */
  readonly held?: { readonly holders: HeldStatement['holders']; readonly shards: ReadonlyMap<number, HeldShard> };
}

/**
 * Stale shards listed one by one up to this many (a dead owner's, typically, all with one time);
 * beyond, every shard is stated as stale as the oldest.
 */
export const STALE_LISTED = 1024;

/**
 * A node's per-shard contact times as a heartbeat states them, mapped by `at` into the owners' time
 * base: when it had heard from every owner but the stale ones, and those. Compact in the common case
 * (nothing stale), bounded in an outage (past STALE_LISTED the oldest stands for all, which only
 * holds back more).
 */
export function statedContact(contact: ArrayLike<number>, at: (t: number) => number): Pick<Heartbeat, 'freshAt' | 'stale'> {
  let top = Number.NEGATIVE_INFINITY;
  let oldest = Number.POSITIVE_INFINITY;
  for (let s = 0; s < contact.length; s++) {
    top = Math.max(top, contact[s]!);
    oldest = Math.min(oldest, contact[s]!);
  }
  const stale = new Map<number, number>();
  for (let s = 0; s < contact.length && stale.size <= STALE_LISTED; s++) if (contact[s]! < top) stale.set(s, at(contact[s]!));
  if (stale.size > STALE_LISTED) return { freshAt: at(oldest), stale: new Map() };
  return { freshAt: contact.length === 0 ? Number.NEGATIVE_INFINITY : at(top), stale };
}

/** What an observer knows of one member's presence, in the observer's monotonic time. */
export interface Presence {
  lastSeen: number;
  /** When it came back from its last silence (−∞ if never silent). */
  rejoinedAt: number;
  /**
   * Its last heartbeat's statement; undefined when it states none the owner can trust (a release that
   * sends none, or one that does not verify): then nothing is fresh.
   */
  beat?: Heartbeat;
}

/** A new member: seen now, never back from a silence (a new process starts with nothing, L6). */
export function presentAt(at: number): Presence {
  return { lastSeen: at, rejoinedAt: Number.NEGATIVE_INFINITY };
}

/**
 * Records a heartbeat sent at `at` and learnt of at `observedAt`; one after a silence is a return.
 * A new process under the same name (`sameProcess` false) is no return: it starts with nothing (L6).
 */
export function seen(p: Presence, at: number, roundMs: number, observedAt = at, sameProcess = true): void {
  if (sameProcess && at - p.lastSeen >= SILENT_ROUNDS * roundMs) p.rejoinedAt = observedAt;
  p.lastSeen = Math.max(p.lastSeen, at);
}

/**
 * Whether the member may hold, or be about to grant itself, credit in `shard` that the owner has not
 * heard of (F4); `folded` is the latest round of its report batches for that shard the owner folded.
 */
export function unsettled(p: Presence, shard: number, folded: number, now: number, roundMs: number): boolean {
  const silent = SILENT_ROUNDS * roundMs;
  if (now - p.lastSeen >= silent) return true;
  const b = p.beat;
  // No statement to trust: it may have lost touch with this shard's owner at any time.
  if (b === undefined || now - (b.stale.get(shard) ?? b.freshAt) >= silent) return true;
  return folded < (b.selfGranted.get(shard) ?? 0);
}

/** Whether grants to the member are withheld because it just came back (L5). */
export function rejoining(p: Presence | undefined, now: number, roundMs: number): boolean {
  return p !== undefined && now - p.rejoinedAt < REJOIN_ROUNDS * roundMs;
}

/** Whether an owner last heard at `lastHeard` still counts as reachable (node side, F2 counts from then). */
export function withinReach(lastHeard: number, now: number, roundMs: number): boolean {
  return now - lastHeard < REACH_ROUNDS * roundMs;
}

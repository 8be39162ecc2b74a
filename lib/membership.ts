/**
 * The fleet's one presence rule, in rounds, for every transport (the in-memory bus of the simulator
 * and the Redis bus alike), so the simulator measures the rule production runs.
 *
 * Timeline of a member cut off after its last heartbeat at t (T = one round):
 *   t + REACH_ROUNDS·T      it counts its owners out of reach (no more heartbeats reach them)
 *   t + SILENT_ROUNDS·T     owners count it silent and hold its possible self-grant back
 *   t + (REACH + 2)·T       it stops the fast path (F2: two missed rounds)
 * and it grants itself credit (F4) only into a window that began at least AHEAD + SILENT + SKEW rounds
 * (`lib/lease-node.ts`) after its last contact: by then no owner can have issued credit for that
 * window without holding the node's share back, pre-grants asked ahead by other nodes included.
 */
export const REACH_ROUNDS = 3;
/** Rounds without a heartbeat after which an owner holds a member's possible self-grant back. */
export const SILENT_ROUNDS = 4;
/**
 * A member back from a silence stays unsettled (its possible self-grant still held back) this many
 * rounds: its reports, skipped while it was cut off, land a round or two after its heartbeat does.
 */
export const SETTLE_ROUNDS = 4;
/** A member back from a silence gets no grants for this many rounds (L5). */
export const REJOIN_ROUNDS = 1;

/** What an observer knows of one member's presence, in the observer's monotonic time. */
export interface Presence {
  lastSeen: number;
  /** When it came back from its last silence (−∞ if never silent). */
  rejoinedAt: number;
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

/** Whether the member may have granted itself credit the owner has not heard of yet (F4). */
export function unsettled(p: Presence, now: number, roundMs: number): boolean {
  return now - p.lastSeen >= SILENT_ROUNDS * roundMs || now - p.rejoinedAt < SETTLE_ROUNDS * roundMs;
}

/** Whether grants to the member are withheld because it just came back (L5). */
export function rejoining(p: Presence | undefined, now: number, roundMs: number): boolean {
  return p !== undefined && now - p.rejoinedAt < REJOIN_ROUNDS * roundMs;
}

/** Whether an owner last heard at `lastHeard` still counts as reachable (node side, F2 counts from then). */
export function withinReach(lastHeard: number, now: number, roundMs: number): boolean {
  return now - lastHeard < REACH_ROUNDS * roundMs;
}

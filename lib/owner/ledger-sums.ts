import type { Grant } from '../protocol/messages.js';
import { HELD, type Lease, type Ledger } from '../ledger-store.js';

/** Credit a lease holds unspent: issued + self-granted − spent − released (negative when it overspent). */
export function held(lease: Lease): number {
  return lease.issued + lease.selfIssued - lease.spent - lease.released;
}

/**
 * issued + self-granted − released over the leases, a float's credit counted once whether it is
 * still in the float or moved out to a lease — and never less than what leases say they took from
 * floats, even if a float's own grant were missing from a replayed log. A lease that spent more than
 * that (a degraded node's fail-open admissions, charged to the window) commits what it spent.
 */
export function committed(l: Ledger): number {
  return committedOf(tally(l));
}

/** What a ledger's sums (`tally`) commit: direct, a float's credit once, and what members may hold. */
export function committedOf(t: Tally): number {
  return t.direct + Math.max(t.floats, t.floated) + t.held;
}

/** A ledger's sums (`tally`). */
export interface Tally {
  readonly direct: number;
  readonly floats: number;
  readonly floated: number;
  readonly held: number;
}

/**
 * A ledger's sums: nodes' leases' issued + self-granted − released − floated, plus what they spent
 * beyond it (`direct`), floats' issued, what leases took from floats, and what blankets let members
 * hold that they took themselves (`held`: `HELD` for each node epoch in `heldBy`, taken or not).
 *
 * A node may say more of its credit came out of a float than the grants known here do
 * (`Lease.saidFloated`): an earlier owner answered it from its float and failed before that grant's
 * log write. The float's record (its grant, or its blanket) counts that credit already, so it moves
 * from direct to floated — but only as far as earlier owners' floats known here hold more than what
 * is known to have moved out of floats. Beyond that (the float's record lost with Redis's data too)
 * it stays the node's: this owner's own float never stands for it.
 */
export function tally(l: Ledger): Tally {
  let direct = 0;
  let floats = 0;
  let floated = 0;
  let said = 0;
  for (const lease of l.leases) {
    if (lease.float) floats += lease.issued;
    else {
      direct += lease.issued + lease.selfIssued - lease.released - lease.floated + Math.max(0, lease.spent - (lease.issued + lease.selfIssued - lease.released));
      said += Math.max(0, Math.min(lease.saidFloated, lease.issued) - lease.floated);
    }
    floated += lease.floated;
  }
  const { held, took } = heldIn(l);
  direct -= took;
  if (said === 0) return { direct, floats, floated, held };
  // Earlier owners' floats: all but this owner's own, and what is known to have moved out of them.
  const earlier = floats - (l.float?.lease.issued ?? 0);
  const movedOut = floated - (l.float?.moved ?? 0);
  const counted = Math.min(said, Math.max(0, earlier - movedOut));
  return { direct: direct - counted, floats, floated: floated + counted, held };
}

/**
 * What members may hold in `l` that they took themselves under a blanket (`held`), and of it what
 * their leases state (`took`: at most `HELD` per node epoch, over its leases): part of the leases'
 * `issued` — or absorbed into it by a grant that did not know of it, which the node applies as the
 * larger of the two — so counted once, as the blanket's. What a node says beyond that (or without a
 * blanket known here that lists it: Redis lost the log) stays its lease's.
 */
function heldIn(l: Ledger): { held: number; took: number } {
  const by = l.heldBy;
  if (by === undefined) return { held: 0, took: 0 };
  let took = 0;
  for (const epoch of by) {
    let said = 0;
    for (const lease of l.leases) if (lease.nodeEpoch === epoch) said += Math.min(lease.saidBlanketed, lease.issued);
    took += Math.min(HELD, said);
  }
  return { held: HELD * by.length, took };
}

/** Admissions merged from reports into a ledger, summed over its leases and node epochs (0 for none). */
export function spentIn(l: Ledger | undefined): number {
  let sum = 0;
  for (const lease of l?.leases ?? []) sum += lease.spent;
  return sum;
}

/** Over the ledgers of windows running at `nowMs` (ending after it): how many, credit committed, allowance. */
export function runningTotals(ledgers: Iterable<Ledger>, nowMs: number): { ledgers: number; committed: number; allowance: number } {
  let n = 0;
  let sum = 0;
  let allowance = 0;
  for (const l of ledgers) {
    if (l.windowEnd <= nowMs) continue;
    n++;
    sum += committed(l);
    allowance += l.allowance;
  }
  return { ledgers: n, committed: sum, allowance };
}

/** What a grant states beyond the credit it took from a float. */
export function directOf(g: Grant): number {
  return g.issued - (g.floated ?? 0);
}

import type { Grant } from '../protocol/messages.js';
import type { Lease, Ledger } from '../ledger-store.js';

/** Credit a lease holds unspent: issued + self-granted − spent − released (negative when it overspent). */
export function held(lease: Lease): number {
  return lease.issued + lease.selfIssued - lease.spent - lease.released;
}

/**
 * issued + self-granted − released over the leases, a float's credit counted once whether it is
 * still in the float or moved out to a lease (`tally`). A lease that spent more than that (a
 * degraded node's fail-open admissions, charged to the window) commits what it spent.
 */
export function committed(l: Ledger): number {
  const t = tally(l);
  return t.direct + Math.max(t.floats, t.floated);
}

/**
 * A ledger's sums: nodes' leases' issued + self-granted − released, less what came out of floats,
 * plus what they spent beyond it (`direct`); floats' issued; and what leases took from floats.
 *
 * What this owner process moved out of its own floats is theirs (`Lease.ownMoved`). The rest of a
 * lease's `floated` — what replayed grants, or the node itself, say came out of floats — came out
 * of earlier owners' floats, perhaps in a grant the log lost with its owner: their record (a grant,
 * or a blanket) counts that credit already, so it is theirs too, but only as far as earlier owners'
 * floats known here hold it all together. Beyond that (a float's record lost with Redis's data) it
 * stays the node's: this owner's own floats never stand for it.
 */
export function tally(l: Ledger): { direct: number; floats: number; floated: number } {
  const holder = l.float?.lease.nodeEpoch;
  let direct = 0;
  let floats = 0;
  let own = 0;
  let moved = 0;
  let earlier = 0;
  for (const lease of l.leases) {
    if (lease.float) {
      floats += lease.issued;
      if (lease.nodeEpoch === holder) own += lease.issued;
    } else {
      direct += lease.issued + lease.selfIssued - lease.released - lease.ownMoved + Math.max(0, lease.spent - (lease.issued + lease.selfIssued - lease.released));
      moved += lease.ownMoved;
      earlier += Math.max(0, Math.min(lease.floated, lease.issued) - lease.ownMoved);
    }
  }
  const counted = Math.min(earlier, floats - own);
  return { direct: direct - counted, floats, floated: moved + counted };
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

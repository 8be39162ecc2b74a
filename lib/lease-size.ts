/**
 * How much credit a lease should hold: the one sizing rule of the owner's grants and the node's
 * give-backs, so the two never pull against each other.
 *
 * `demand` is the requests a node expects over the next `demandRounds` (its smoothed rate × rounds).
 * - Below one request's worth (demand × h < 1): nothing. The key is seen here less than about once a
 *   round, so each request asks for exactly what it needs and no credit strands where requests seldom
 *   come (a 5-per-second plan spread over 50 nodes).
 * - Otherwise demand × h at least, and up to twice that plus one — so a node rarely runs dry between
 *   two rounds' top-ups and the fast path stays rare — but never more than a quarter of what the node
 *   would spend at its rate before the window ends: credit given out late in a window is credit that
 *   may be left unspent on a node when the window closes while another node refuses a caller.
 */
export function leaseTarget(demand: number, roundsLeft: number, demandRounds: number, headroom: number): number {
  const base = demand * headroom;
  if (base < 1) return 0;
  const spendable = Math.floor(((demand / demandRounds) * Math.max(0, roundsLeft)) / 4);
  return Math.max(Math.floor(base), Math.min(Math.ceil(2 * base) + 1, spendable));
}

/** Rounds of its demand a busy lease gets whatever the room, and keeps when recalled (`lib/owner/sizing.ts`). */
export const BUSY_ROUNDS = 2;

/** What a node advertising `demand` (over `demandRounds`) spends in `n` rounds, rounded up. */
export function demandIn(demand: number, n: number, demandRounds: number): number {
  return Math.ceil((demand * n) / demandRounds);
}

/**
 * What a recalled lease keeps. Below one request's worth a lease keeps nothing: `leaseTarget` gives
 * it no lease. A busier one keeps what it spends in BUSY_ROUNDS, at most ⌈demand × h⌉: the node gives
 * the rest back the moment the recall lands, for the nodes that ran dry.
 */
export function recallKeep(demand: number, demandRounds: number, headroom: number): number {
  const base = demand * headroom;
  return base < 1 ? 0 : Math.min(Math.ceil(base), demandIn(demand, BUSY_ROUNDS, demandRounds));
}

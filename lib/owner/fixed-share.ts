import type { Lease, Ledger } from '../ledger-store.js';
import type { Grant } from '../protocol/messages.js';
import type { FoldOwnerConfig, FoldOwnerStats } from './config.js';
import { committed, held } from './ledger-sums.js';
import type { Issuer } from './issuer.js';
import type { CreditPool } from './pool.js';
import type { GrantSizing } from './sizing.js';

/**
 * Fixed-share allocation (`allocation: fixed-share`): each node gets ⌊allowance / fleet⌋ of a window
 * — its share, by this owner's fleet size when it issues — plus, beyond it, the reserve through the
 * fast path, first come: 2 % of the allowance or the rounding remainder (allowance − fleet × share)
 * if more, so all of a small plan is reachable; nothing is recalled or moved between nodes. The shares are ordinary grants
 * of the window's owner, logged like any: a node never sizes its own from its view of the fleet (two
 * nodes seeing different sizes mid-change would take more than the allowance between them), and L2
 * (committed ≤ allowance) is checked on every one. A share the allowance cannot cover any more (the
 * fleet grew mid-window, or other nodes' shares and the reserve took it) is cut to what is left.
 */
export class FixedShare {
  constructor(
    private readonly cfg: FoldOwnerConfig,
    private readonly pool: CreditPool,
    private readonly sizing: GrantSizing,
    private readonly issuer: Issuer,
    private readonly stats: FoldOwnerStats,
  ) {}

  /** ⌊allowance / fleet⌋ with the fleet as this owner sees it now. */
  share(l: Ledger): number {
    return Math.floor(l.allowance / Math.max(1, this.cfg.fleet.size()));
  }

  /**
   * The reserve of a fixed-share window: the pool's (2 % of the allowance), or the rounding remainder
   * allowance − F × share if that is more — credit no share covers, which would otherwise never be
   * issued (a plan below the fleet size has shares of 0: all of it is remainder).
   */
  reserveOf(l: Ledger): number {
    const fleet = Math.max(1, this.cfg.fleet.size());
    return Math.max(this.pool.reserveOf(l), l.allowance - fleet * Math.floor(l.allowance / fleet));
  }

  /**
   * What node `nodeId` has had of the window over its leases (epochs, bucket lives): issued and
   * self-granted, less what it gave back — or what it spent, if more (spent past what it kept is
   * committed all the same). Credit given back is owed again.
   */
  had(l: Ledger, nodeId: string): number {
    let n = 0;
    for (const x of l.leases) if (!x.float && x.nodeId === nodeId) n += Math.max(x.issued + x.selfIssued - x.released, x.spent);
    return n;
  }

  /** The reserve not yet given beyond shares: the reserve less what nodes had above their share. */
  reserveLeft(l: Ledger): number {
    const share = this.share(l);
    const nodes = new Set<string>();
    for (const x of l.leases) if (!x.float) nodes.add(x.nodeId);
    let beyond = 0;
    for (const n of nodes) beyond += Math.max(0, this.had(l, n) - share);
    return Math.max(0, this.reserveOf(l) - beyond);
  }

  /**
   * Answers an ask: what is owed of the node's share (leaving the reserve's room), and on the fast
   * path, if that does not cover the waiting request, a round of its demand (at least the need) from
   * the reserve. Nothing left for this lease at all: it is told the window is exhausted for it.
   */
  ask(l: Ledger, lease: Lease, need: number, demand: number, fastPath: boolean): Grant | undefined {
    // A repeated ask (a grant crossed it) adds nothing: the latest grant again.
    if (held(lease) >= need) return lease.grantSeq > 0 ? this.issuer.restate(l, lease) : undefined;
    const owed = Math.max(0, this.share(l) - this.had(l, lease.nodeId));
    const room = this.pool.available(l, { includeReserve: true });
    const reserve = this.reserveLeft(l);
    let amount = Math.min(owed, Math.max(0, room - reserve));
    if (amount < need && fastPath) amount += Math.min(reserve, room - amount, Math.max(need - amount, this.sizing.rounds(demand, 1)));
    if (amount > 0) return this.issuer.issue(l, lease, amount);
    // Only what is held back for unsettled nodes stands between: that passes, no notice.
    if (l.allowance - committed(l) <= 0 || (owed === 0 && reserve === 0)) this.issuer.exhaust(l, lease);
    return undefined;
  }

  /**
   * After a report with demand (this window's, or the next one's ahead of its start): tops the
   * lease up to what is owed of its share, leaving the reserve's room; the reserve only by asks.
   */
  topUp(l: Ledger, lease: Lease): void {
    const owed = Math.max(0, this.share(l) - this.had(l, lease.nodeId));
    const amount = Math.min(owed, Math.max(0, this.pool.available(l, { includeReserve: true }) - this.reserveLeft(l)));
    if (amount <= 0) return;
    this.issuer.post(this.issuer.issue(l, lease, amount));
    if (l.windowEnd - l.windowMs > this.cfg.clock.now()) this.stats.preGrants++;
  }
}

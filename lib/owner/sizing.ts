import { demandIn, leaseTarget, recallKeep } from '../lease-size.js';
import type { Lease, Ledger } from '../ledger-store.js';
import type { FoldOwnerConfig } from './config.js';
import { held } from './ledger-sums.js';

/**
 * demand × h at or above which a lease is busy — about a request a round or more — and is always
 * topped up to BUSY_ROUNDS (`lib/lease-size.ts`) of its demand whatever the room: it will spend that
 * before its next top-ups. Beyond that the room decides, so at a window's tail credit stays with the
 * owner.
 */
export const BUSY = 4;

/** How much credit a lease should get, or keep: the owner's sizing rules over a ledger's leases. */
export class GrantSizing {
  constructor(private readonly cfg: FoldOwnerConfig) {}

  /** What a node advertising `demand` spends in `n` rounds, rounded up (`demandIn`). */
  rounds(demand: number, n: number): number {
    return demandIn(demand, n, this.cfg.demandRounds);
  }

  /** Credit a lease of `l` should hold for `demand` (`lib/lease-size.ts`). */
  target(l: Ledger, demand: number): number {
    return leaseTarget(demand, (l.windowEnd - this.cfg.clock.now()) / this.cfg.roundMs, this.cfg.demandRounds, this.cfg.headroom);
  }

  /** What leases may still take by top-ups: half of what the window has not spent, less what they hold. */
  room(l: Ledger): number {
    let unspent = l.allowance;
    let out = 0;
    for (const x of l.leases) {
      if (x.float) continue;
      unspent -= x.spent;
      out += Math.max(0, held(x));
    }
    return Math.max(0, Math.floor(unspent / 2) - out);
  }

  /**
   * How much of `pool` an asking lease wanting `want` gets. While the pool covers what every lease of
   * the window wants, all of it; when it does not, a share in proportion to the want — but at least
   * the waiting request's `need` — so the last credit of a window goes where requests are and none
   * strands on the node that happened to ask first.
   */
  ration(l: Ledger, lease: Lease, want: number, need: number, pool: number): number {
    if (want <= 0 || pool <= 0) return 0;
    let wants = want;
    for (const x of l.leases) if (x !== lease && !x.float) wants += Math.max(0, this.target(l, x.demand) - held(x));
    if (wants <= pool) return Math.min(want, pool);
    return Math.min(pool, want, Math.max(need, Math.floor((pool * want) / wants)));
  }

  /** What a recalled lease keeps (`recallKeep`). */
  keepOnRecall(lease: Lease): number {
    return recallKeep(lease.demand, this.cfg.demandRounds, this.cfg.headroom);
  }
}

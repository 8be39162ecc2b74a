import { BUSY_ROUNDS } from '../lease-size.js';
import type { Lease, Ledger } from '../ledger-store.js';
import type { FoldOwnerConfig, FoldOwnerStats } from './config.js';
import type { FixedShare } from './fixed-share.js';
import type { Issuer } from './issuer.js';
import { held } from './ledger-sums.js';
import type { CreditPool } from './pool.js';
import { BUSY, type GrantSizing } from './sizing.js';

/** A pool this many times what every node's lease could want lets top-ups wait (`topUp`). */
const PLENTY = 16;

/** The owner's top-ups: what a report's stated demand gets a lease (`FoldOwner.onReports`, `FoldOwner.topUpWithheld`). */
export class TopUps {
  /** `ended`: whether nothing more is issued for a ledger's window (`FoldOwner.ended`). */
  constructor(
    private readonly cfg: FoldOwnerConfig,
    private readonly pool: CreditPool,
    private readonly sizing: GrantSizing,
    private readonly issuer: Issuer,
    private readonly stats: FoldOwnerStats,
    private readonly fixed: FixedShare,
    private readonly ended: (l: Ledger) => boolean,
  ) {}

  /** A lease's top-up, for a report stating `demand` (a fixed share's by its own rules). */
  refill(ledger: Ledger, lease: Lease, demand: number): void {
    if (!ledger.fixed) this.topUp(ledger, lease, demand);
    else if (!this.ended(ledger)) this.fixed.topUp(ledger, lease);
  }

  /**
   * Tops a lease up toward the size its reported demand calls for. A report for a window that has
   * not started is a node asking ahead of its rollover: the grant lands as the next window's credit,
   * so busy keys never start a window on the fast path. A top-up is not rationed — it is demand-sized
   * already (`lib/lease-size.ts`), and rationing it would turn every shortfall into fast-path asks —
   * but beyond a busy lease's next BUSY_ROUNDS of demand, leases together never hold more than half
   * of what the window has left: the other half stays with the owner for the nodes that ask, whatever
   * the demand estimates got wrong. (Up to demand × h whatever the room, a window's last credit sat
   * on the nodes that happened to hold it when the key stopped, while others refused.)
   */
  private topUp(ledger: Ledger, lease: Lease, demand: number): void {
    if (this.ended(ledger)) return;
    const target = this.sizing.target(ledger, demand);
    if (held(lease) >= target) return;
    const avail = this.pool.available(ledger);
    const base = Math.floor(demand * this.cfg.headroom);
    // While the pool is far above what the leases could want, a lease is refilled (to its target) only
    // once it holds less than demand × h: it has rounds of requests in hand, and a refill after each
    // request costs a grant, a message and a log entry per request. Otherwise every report tops it up.
    if (avail >= PLENTY * this.cfg.fleet.size() * target && held(lease) >= Math.max(1, base)) return;
    // The float too, when the pool is short (a top-up goes out once all it states is on record).
    const pool = avail + this.pool.floatLeft(ledger);
    const own = base >= BUSY ? Math.min(base, this.sizing.rounds(demand, BUSY_ROUNDS)) - held(lease) : 0;
    const amount = Math.min(target - held(lease), pool, Math.max(own, this.sizing.room(ledger)));
    if (amount > 0) {
      this.issuer.post(this.issuer.issue(ledger, lease, amount, Math.max(0, amount - avail)));
      this.issuer.announceExhausted(ledger);
      if (ledger.windowEnd - ledger.windowMs > this.cfg.clock.now()) this.stats.preGrants++;
    } else if (pool <= 0) this.issuer.recall(ledger, lease);
  }
}

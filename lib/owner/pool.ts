import type { Ledger } from '../ledger-store.js';
import type { FoldOwnerConfig } from './config.js';
import { committed, committedOf, tally } from './ledger-sums.js';

/**
 * What a ledger can still issue: its pool (the allowance less committed credit, less what is held
 * back for unsettled nodes and the reserve) and what this owner's float of it can still give.
 */
export class CreditPool {
  constructor(
    private readonly cfg: FoldOwnerConfig,
    /** The latest round of `nodeEpoch`'s report batches for `shard` this owner folded (0: none). */
    private readonly foldedRound: (nodeEpoch: string, shard: number) => number,
  ) {}

  /**
   * What can still be issued: the allowance less committed credit, less 1/fleet for every unsettled
   * node (silent, or just back) that may have granted itself credit at this window's boundary (F4)
   * without this owner knowing — less the reserve unless `includeReserve`. A node is known not to have
   * (or to have, and it is committed) once it reported this window with credit applied or with its
   * self-grant. A lease alone says nothing: a node that asked ahead and was given nothing, or whose
   * grant never arrived (Redis frozen), rolls into the window empty-handed and grants itself.
   */
  available(l: Ledger, { includeReserve = false, signed = false }: { readonly includeReserve?: boolean; readonly signed?: boolean } = {}): number {
    const fleet = Math.max(1, this.cfg.fleet.size());
    let holdback = 0;
    for (const node of this.cfg.fleet.unsettled(l.shard, this.foldedRound)) {
      if (!l.leases.some((lease) => lease.nodeId === node && (lease.reported > 0 || lease.selfIssued > 0))) holdback += Math.ceil(l.allowance / fleet);
    }
    // Credit already committed into the reserve (seen on replay) means the reserve is gone; in the
    // window's last two rounds it is released to anyone, since no later fast path is left to keep it for.
    if (committed(l) > l.allowance - this.reserveOf(l) || l.windowEnd - this.cfg.clock.now() <= 2 * this.cfg.roundMs) l.reserveReleased = true;
    const reserve = includeReserve || l.reserveReleased ? 0 : this.reserveOf(l);
    const left = l.allowance - reserve - committed(l) - holdback;
    return signed ? left : Math.max(0, left);
  }

  /** The reserve R of a ledger: its share of the allowance kept for fast-path asks. */
  reserveOf(l: Ledger): number {
    return Math.floor(l.allowance * this.cfg.reserveRatio);
  }

  /**
   * What this owner's float of `l` can still give: on record, less what moved out — with
   * `includePending`, also what is on its way to the log. Nothing from a float of an earlier owner epoch.
   */
  floatLeft(l: Ledger, { includePending = false }: { readonly includePending?: boolean } = {}): number {
    const f = l.float;
    if (f === undefined || f.lease.lease !== this.cfg.ownerEpoch(l.shard)) return 0;
    // Never past the allowance: committed credit can exceed it (a lower limit mid-window, a report
    // of credit a lost log write carried), and then the float gives that much less. Nor more than
    // the ledger's floats hold unmoved: a replayed log may have lost a float's grant but kept what
    // moved out of it, which `committed` counts in its place.
    const t = tally(l);
    const own = (includePending ? f.lease.issued : f.onRecord) - f.base - f.moved;
    return Math.max(0, Math.min(own, t.floats - t.floated) - Math.max(0, committedOf(t) - l.allowance));
  }
}

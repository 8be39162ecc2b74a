import type { Lease, Ledger } from '../ledger-store.js';
import type { Report, ReportBatch } from '../protocol/messages.js';
import type { FoldOwnerConfig, FoldOwnerStats } from './config.js';

/**
 * What an owner folds from nodes' requests and reports: their cumulative counts merged into leases
 * (idempotent: duplicates and reorders change nothing), and what it remembers of each node process —
 * when its self_grant flag was first seen (F4) and the latest round of its report batches folded.
 */
export class NodeReports {
  /** When each node's self_grant flag was first seen in the current episode (F4). */
  private readonly selfGrantSeen = new Map<string, number>();
  /** Per node epoch: the latest round of its report batches folded per shard, and when it was last one. */
  private readonly folded = new Map<string, { at: number; rounds: Map<number, number> }>();
  /** Leases a report asked a top-up for while their node was withheld, with their ledgers (`defer`). */
  private readonly deferred = new Map<Lease, Ledger>();

  constructor(
    private readonly cfg: FoldOwnerConfig,
    private readonly stats: FoldOwnerStats,
  ) {}

  /**
   * Whether grants to process `nodeEpoch` of `nodeId` are held back: it is rejoining (L5) or
   * self-granted less than a round ago (F4).
   */
  withheld(nodeId: string, nodeEpoch: string, count = true): boolean {
    const seen = this.selfGrantSeen.get(nodeId);
    const w = this.cfg.fleet.rejoining(nodeId, nodeEpoch) || (seen !== undefined && this.cfg.clock.monotonic() - seen < this.cfg.roundMs);
    if (w && count) this.stats.withheld++;
    return w;
  }

  /**
   * A report of `lease` asked for a top-up while its node was withheld: it is topped up once the node
   * is not (`released`), not only at its next report — which a lease waiting for that top-up, quiet
   * with its demand stated, may not send before a request finds it dry and asks across the network.
   */
  defer(ledger: Ledger, lease: Lease): void {
    this.deferred.set(lease, ledger);
  }

  /** The deferred top-ups whose node is no longer withheld, forgotten here. */
  released(): Array<[Ledger, Lease]> {
    const out: Array<[Ledger, Lease]> = [];
    for (const [lease, ledger] of this.deferred) {
      if (this.withheld(lease.nodeId, lease.nodeEpoch, false)) continue;
      this.deferred.delete(lease);
      out.push([ledger, lease]);
    }
    return out;
  }

  /** Max seq wins within a lease; a lower or equal seq is a duplicate or a reordered entry. */
  merge(nodeId: string, lease: Lease, r: Report): boolean {
    if (r.seq <= lease.seq) {
      this.stats.reportsStale++;
      return false;
    }
    lease.seq = r.seq;
    lease.reported = Math.max(lease.reported, r.issued);
    if (r.seen !== undefined) lease.seen = Math.max(lease.seen, r.seen);
    this.absorb(nodeId, lease, r, r.selfGrant);
    lease.demand = r.demand;
    this.stats.reportsMerged++;
    return true;
  }

  /**
   * Takes a lease's cumulative counts from a request or a report (max: duplicates and reorders change
   * nothing). The first time a node's self_grant flag is seen, grants to it are withheld a round (F4).
   * What the node says it was issued counts too: a grant this owner's ledger missed (an earlier
   * owner's, or one from before the ledger was swept) is still committed; and what it says of that
   * came out of a float (`tally` counts it once, as an earlier owner's float's, where it can), and
   * what it took itself under a blanket (counted once, as the blanket's, where one lists it).
   */
  absorb(nodeId: string, lease: Lease, c: { spent: number; selfIssued: number; released: number; issued?: number; floated?: number; blanketed?: number }, selfGrant: boolean): void {
    if (c.issued !== undefined) lease.issued = Math.max(lease.issued, c.issued);
    if (c.floated !== undefined) lease.saidFloated = Math.max(lease.saidFloated, c.floated);
    if (c.blanketed !== undefined) lease.saidBlanketed = Math.max(lease.saidBlanketed, c.blanketed);
    lease.spent = Math.max(lease.spent, c.spent);
    lease.selfIssued = Math.max(lease.selfIssued, c.selfIssued);
    lease.released = Math.max(lease.released, c.released);
    if (selfGrant && !this.selfGrantSeen.has(nodeId)) this.selfGrantSeen.set(nodeId, this.cfg.clock.monotonic());
  }

  /** Records that `batch` (a live one, of round > 0) is folded: its node epoch's latest round for its shard. */
  markFolded(batch: ReportBatch): void {
    let f = this.folded.get(batch.nodeEpoch);
    if (f === undefined) this.folded.set(batch.nodeEpoch, (f = { at: 0, rounds: new Map() }));
    f.at = this.cfg.clock.monotonic();
    f.rounds.set(batch.shard, Math.max(f.rounds.get(batch.shard) ?? 0, batch.round));
  }

  /** The latest round of `nodeEpoch`'s report batches for `shard` this owner folded (0: none). */
  readonly foldedRound = (nodeEpoch: string, shard: number): number => this.folded.get(nodeEpoch)?.rounds.get(shard) ?? 0;

  /** Forgets ended self-grant episodes, and processes unheard of for ten minutes. */
  sweep(): void {
    const mono = this.cfg.clock.monotonic();
    for (const [node, at] of this.selfGrantSeen) if (at + 60_000 < mono) this.selfGrantSeen.delete(node);
    // A process unheard of for ten minutes is gone (a new one has a new epoch and starts over).
    for (const [epoch, f] of this.folded) if (f.at + 600_000 < mono) this.folded.delete(epoch);
  }
}

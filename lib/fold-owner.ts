import { ErrorCode, RateLimiterError } from './errors.js';
import type { CreditRequest, Grant, Report, ReportBatch } from './protocol/messages.js';
import { phaseOffset, windowEndMs } from './window.js';

/** Settings of the owner side of the protocol. */
export interface FoldOwnerConfig {
  /** Fencing token of this owner; grants carry it. */
  readonly ownerEpoch: number;
  /** Headroom h applied to advertised demand. */
  readonly headroom: number;
  /** Reserve R as a fraction of the allowance, released once per key per window, fast path only. */
  readonly reserveRatio: number;
  /** Round length T; ledgers live until window end + 2 rounds. */
  readonly roundMs: number;
  /** Live fleet size, for the fair-share floor of a requested grant. */
  readonly fleetSize: () => number;
}

/** One lease (a node epoch's bucket life) in one ledger. */
interface Lease {
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly lease: number;
  issued: number;
  grantSeq: number;
  /** Spend from the highest-seq report merged so far (cumulative). */
  spent: number;
  seq: number;
  demand: number;
}

/** The owner's account of one (key id, window id). */
interface Ledger {
  readonly keyId: string;
  readonly windowId: number;
  readonly windowMs: number;
  readonly windowEnd: number;
  allowance: number;
  issuedTotal: number;
  reserveReleased: boolean;
  /** Few per ledger (one per node epoch and bucket life that asked): an array beats a Map here. */
  leases: Lease[];
}

/** Thrown if a grant would break sum(issued) ≤ allowance (L2); it must be unreachable. */
export class InvariantViolation extends RateLimiterError {
  constructor(message: string) {
    super(ErrorCode.INTERNAL, message);
  }
}

/**
 * Owner side of the leasing protocol for the shards this node owns: the only issuer of credit.
 * It merges reports by (key, window, node epoch, lease) — max seq wins inside a lease, leases and
 * epochs add up — and
 * never issues more than the window's allowance, reserve included (L2). Pure: no timers, no I/O.
 */
export class FoldOwner {
  /** Ledgers by key id (the same string the node side holds), then a short list per window. */
  private readonly ledgers = new Map<string, Ledger[]>();
  private ledgerCount = 0;
  /** Counters read by metrics and tests. */
  readonly stats = { grants: 0, reportsMerged: 0, reportsStale: 0, reserveReleases: 0 };

  constructor(private readonly cfg: FoldOwnerConfig) {}

  /** Answers a credit request with a grant, or undefined when nothing can be issued. */
  onCreditRequest(req: CreditRequest): Grant | undefined {
    const ledger = this.ledgerFor(req.keyId, req.windowId, req.windowMs, req.limit);
    const lease = this.leaseFor(ledger, req.nodeId, req.nodeEpoch, req.lease);
    lease.demand = Math.max(lease.demand, req.demand);
    lease.spent = Math.max(lease.spent, req.spent);
    const held = lease.issued - lease.spent;
    const pool = this.pool(ledger);
    // A node that has to ask gets at least its fair share of what is left, so a fleet of one (or a
    // key whose traffic is pinned to one node) is not held to demand-sized sips, one ask per round.
    const share = Math.ceil(pool / Math.max(1, this.cfg.fleetSize()));
    const want = Math.max(req.need, Math.ceil(req.demand * this.cfg.headroom) - held, share);
    let amount = Math.min(want, pool);
    if (amount < req.need && req.fastPath && !ledger.reserveReleased) {
      const reserve = this.reserveOf(ledger);
      if (reserve > 0) {
        ledger.reserveReleased = true;
        this.stats.reserveReleases++;
        amount += Math.min(reserve, ledger.allowance - ledger.issuedTotal - amount);
      }
    }
    return amount > 0 ? this.issue(ledger, lease, amount) : undefined;
  }

  /** Folds one node's round batch; returns top-up grants for buckets whose demand outruns their credit. */
  onReports(batch: ReportBatch): Grant[] {
    const grants: Grant[] = [];
    for (const r of batch.reports) {
      const ledger = this.ledgerFor(r.keyId, r.windowId, r.windowMs, r.limit);
      const lease = this.leaseFor(ledger, batch.nodeId, batch.nodeEpoch, r.lease);
      if (!this.merge(lease, r)) continue;
      const held = lease.issued - lease.spent;
      const target = Math.ceil(r.demand * this.cfg.headroom);
      if (r.demand > 0 && held < target) {
        const amount = Math.min(target - held, this.pool(ledger));
        if (amount > 0) grants.push(this.issue(ledger, lease, amount));
      }
    }
    return grants;
  }

  /** Drops ledgers of windows that ended more than two rounds ago. */
  sweep(nowMs: number): void {
    const horizon = nowMs - 2 * this.cfg.roundMs;
    for (const [keyId, list] of this.ledgers) {
      const live = list.filter((l) => l.windowEnd > horizon);
      this.ledgerCount -= list.length - live.length;
      if (live.length === 0) this.ledgers.delete(keyId);
      else if (live.length !== list.length) this.ledgers.set(keyId, live);
    }
  }

  /** Total credit issued for a (key, window) — what L2 bounds. */
  issued(keyId: string, windowMs: number, windowId: number): number {
    return this.find(keyId, windowMs, windowId)?.issuedTotal ?? 0;
  }

  /** Admissions merged from reports for a (key, window), summed over leases and node epochs. */
  spent(keyId: string, windowMs: number, windowId: number): number {
    let sum = 0;
    for (const lease of this.find(keyId, windowMs, windowId)?.leases ?? []) sum += lease.spent;
    return sum;
  }

  /** Number of ledgers held. */
  get size(): number {
    return this.ledgerCount;
  }

  /** Max seq wins within a node epoch; a lower or equal seq is a duplicate or reordered entry. */
  private merge(lease: Lease, r: Report): boolean {
    if (r.seq <= lease.seq) {
      this.stats.reportsStale++;
      return false;
    }
    lease.seq = r.seq;
    lease.spent = Math.max(lease.spent, r.spent);
    lease.demand = r.demand;
    this.stats.reportsMerged++;
    return true;
  }

  private issue(ledger: Ledger, lease: Lease, amount: number): Grant {
    if (ledger.issuedTotal + amount > ledger.allowance) {
      throw new InvariantViolation(
        `grant of ${amount} would raise issued credit to ${ledger.issuedTotal + amount} > allowance ${ledger.allowance}`,
      );
    }
    ledger.issuedTotal += amount;
    lease.issued += amount;
    lease.grantSeq++;
    this.stats.grants++;
    return {
      keyId: ledger.keyId,
      windowId: ledger.windowId,
      windowMs: ledger.windowMs,
      nodeId: lease.nodeId,
      nodeEpoch: lease.nodeEpoch,
      lease: lease.lease,
      grantSeq: lease.grantSeq,
      ownerEpoch: this.cfg.ownerEpoch,
      issued: lease.issued,
    };
  }

  /** Unissued allowance outside the reserve (the reserve is only for the fast path). */
  private pool(l: Ledger): number {
    const reserve = l.reserveReleased ? 0 : this.reserveOf(l);
    return Math.max(0, l.allowance - reserve - l.issuedTotal);
  }

  private reserveOf(l: Ledger): number {
    return Math.floor(l.allowance * this.cfg.reserveRatio);
  }

  private find(keyId: string, windowMs: number, windowId: number): Ledger | undefined {
    const list = this.ledgers.get(keyId);
    if (list !== undefined) for (const l of list) if (l.windowId === windowId && l.windowMs === windowMs) return l;
    return undefined;
  }

  private ledgerFor(keyId: string, windowId: number, windowMs: number, limit: number): Ledger {
    let l = this.find(keyId, windowMs, windowId);
    if (l === undefined) {
      const windowEnd = windowEndMs(windowId, windowMs, phaseOffset(keyId, windowMs));
      l = { keyId, windowId, windowMs, windowEnd, allowance: limit, issuedTotal: 0, reserveReleased: false, leases: [] };
      const list = this.ledgers.get(keyId);
      if (list === undefined) this.ledgers.set(keyId, [l]);
      else list.push(l);
      this.ledgerCount++;
    }
    // A policy change mid-window moves the allowance; credit already issued stays issued.
    l.allowance = limit;
    return l;
  }

  private leaseFor(l: Ledger, nodeId: string, nodeEpoch: string, leaseNo: number): Lease {
    for (const lease of l.leases) if (lease.lease === leaseNo && lease.nodeEpoch === nodeEpoch) return lease;
    const lease: Lease = { nodeId, nodeEpoch, lease: leaseNo, issued: 0, grantSeq: 0, spent: 0, seq: -1, demand: 0 };
    // Most ledgers only ever have one lease; a pushed-to empty array reserves room for sixteen.
    if (l.leases.length === 0) l.leases = [lease];
    else l.leases.push(lease);
    return lease;
  }
}

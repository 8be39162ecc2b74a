import { FLOAT_PREFIX, LedgerStore, leaseFor, type Ledger } from './ledger-store.js';
import { SKEW_ROUNDS } from './lease-node.js';
import { Blankets, type Blanket, type HeldStatement } from './owner/blankets.js';
import { replayLog, snapshotShard } from './owner/checkpoint.js';
import { Concentration, type ConcentrationSummary } from './owner/concentration.js';
import { newStats, type FoldOwnerConfig, type FoldOwnerStats } from './owner/config.js';
import { EndedMarks } from './owner/ended.js';
import { FixedShare } from './owner/fixed-share.js';
import { FoldAges, TopKeys } from './owner/fold-age.js';
import { Floats } from './owner/floats.js';
import { Issuer } from './owner/issuer.js';
import { committed, held, runningTotals, spentIn } from './owner/ledger-sums.js';
import { NodeReports } from './owner/node-reports.js';
import { CreditPool } from './owner/pool.js';
import { GrantSizing } from './owner/sizing.js';
import { TopUps } from './owner/top-up.js';
import type { LogEntry } from './protocol/log.js';
import type { CreditRequest, Grant, OwnerMessage, ReportBatch } from './protocol/messages.js';
import { phaseOffset, windowEndMs } from './window.js';

export { FLOAT_PREFIX };
export type { FleetView, FoldOwnerConfig, FoldOwnerStats } from './owner/config.js';
export { InvariantViolation } from './owner/issuer.js';

/**
 * Owner side of the leasing protocol for the shards this node owns: the only issuer of credit. It
 * merges reports by (key, window, node epoch, lease) — max seq wins inside a lease, leases and epochs
 * add up — and never lets committed credit (issued + self-granted − released) pass the allowance (L2).
 * It sizes grants from demand × h, tops up each round (and ahead of a rollover), recalls idle
 * credit when the pool runs dry, holds back 1/fleet for every silent node (its possible boundary
 * self-grant), and withholds grants from rejoining or self-granting nodes for a round (L5, F4).
 * Pure: no timers, no I/O; messages for other nodes collect in an outbox the bus drains.
 *
 * The parts, in `lib/owner/`: sums over a ledger (`ledger-sums.ts`), what a ledger can still issue
 * (`pool.ts`), how much a lease should get (`sizing.ts`), the messages sent (`issuer.ts`), what is
 * folded from nodes (`node-reports.ts`), floats and log writes (`floats.ts`, `blankets.ts`), and
 * checkpoints (`checkpoint.ts`). This class answers requests and folds report batches with them.
 */
export class FoldOwner {
  private readonly ledgers: LedgerStore;
  private readonly reports: NodeReports;
  private readonly pool: CreditPool;
  private readonly sizing: GrantSizing;
  private readonly issuer: Issuer;
  private readonly floats: Floats;
  private readonly fixed: FixedShare;
  private readonly topUps: TopUps;
  private readonly blankets = new Blankets();
  private readonly measured = new Concentration();
  /** Per shard and window length, the end of the latest window whose ledger was dropped (`ended`). */
  readonly marks = new EndedMarks();
  readonly stats: FoldOwnerStats = newStats();
  /** The keys this owner folds the most for lately (`TopKeys`), and the fold ages of its reports. */
  readonly topKeys: TopKeys;
  readonly foldAges = new FoldAges();

  constructor(private readonly cfg: FoldOwnerConfig) {
    this.topKeys = new TopKeys(cfg.clock);
    this.ledgers = new LedgerStore(cfg.shardOf, (l, stated) => this.blankets.inherit(l, stated));
    this.reports = new NodeReports(cfg, this.stats);
    this.pool = new CreditPool(cfg, this.reports.foldedRound);
    this.sizing = new GrantSizing(cfg);
    this.issuer = new Issuer(cfg, this.pool, this.sizing, this.stats, this.marks);
    this.floats = new Floats(cfg, this.ledgers, this.pool, this.issuer, this.stats, this.blankets, this.marks);
    this.fixed = new FixedShare(cfg, this.pool, this.sizing, this.issuer, this.stats);
    this.topUps = new TopUps(cfg, this.pool, this.sizing, this.issuer, this.stats, this.fixed, (l) => this.ended(l.shard, l.windowMs, l.windowEnd));
  }

  /** Answers a credit request with a grant, or undefined when nothing can be issued now. */
  onCreditRequest(req: CreditRequest): Grant | undefined {
    // Float leases are an owner's own: no node asks as one.
    if (req.nodeEpoch.startsWith(FLOAT_PREFIX)) return undefined;
    if (this.ended(this.cfg.shardOf(req.keyId, req.windowId), req.windowMs, windowEndMs(req.windowId, req.windowMs, phaseOffset(req.keyId, req.windowMs)))) return undefined;
    this.topKeys.count(req.keyId);
    const ledger = this.ledgers.ledgerFor(req.keyId, req.windowId, req.windowMs, req.limit, req.fixedShare === true);
    const lease = leaseFor(ledger, req.nodeId, req.nodeEpoch, req.lease);
    this.reports.absorb(req.nodeId, lease, req, req.selfIssued > 0);
    lease.demand = Math.max(lease.demand, req.demand);
    if (this.reports.withheld(req.nodeId, req.nodeEpoch)) return undefined;
    // A fixed share: owed share, then the reserve; never a float, a recall or a demand-sized lease.
    if (ledger.fixed) return this.fixed.ask(ledger, lease, req.need, req.demand, req.fastPath);
    // What the request needs, or its node's demand for the next rounds if more: a node that sees the
    // key rarely gets exactly what it needs, so no credit strands where requests seldom come. What
    // the lease already holds counts (a grant may be in flight): a repeated request adds nothing.
    const want = Math.max(req.need, this.sizing.target(ledger, req.demand)) - Math.max(0, held(lease));
    if (want <= 0) return lease.grantSeq > 0 ? this.issuer.restate(ledger, lease) : undefined;
    // An ask may draw on the float: what it covers needs no log write before the answer. Every ask
    // sizes it, this node's own too: they wait for the log like any other.
    const useFloat = req.fastPath && this.floats.on;
    if (useFloat) this.floats.asked(ledger, want);
    const float = useFloat ? this.pool.floatLeft(ledger) : 0;
    let avail = this.pool.available(ledger);
    // At least a round of the node's demand when there is that much: a busy node that ran dry does
    // not ask again before its next top-up.
    const least = Math.max(req.need, this.sizing.rounds(req.demand, 1));
    let amount = this.sizing.ration(ledger, lease, want, least, avail + float);
    if (amount < req.need && req.fastPath && !ledger.reserveReleased) {
      const reserve = this.pool.reserveOf(ledger);
      if (reserve > 0) {
        ledger.reserveReleased = true;
        this.stats.reserveReleases++;
        avail = this.pool.available(ledger, { includeReserve: true });
        amount = this.sizing.ration(ledger, lease, want, least, avail + float);
      }
    }
    if (amount < req.need) this.issuer.recall(ledger, lease);
    if (amount <= 0) return undefined;
    // All from the float when it covers the grant, else as little of it as the pool allows.
    const fromFloat = amount <= float ? amount : Math.max(0, amount - avail);
    if (fromFloat === amount) this.stats.floatAnswers++;
    const grant = this.issuer.issue(ledger, lease, amount, fromFloat);
    this.issuer.announceExhausted(ledger);
    return grant;
  }

  /** Tops up the floats of windows that had remote asks lately: the grants to log (`Floats.refillFloats`). */
  refillFloats(serving: (shard: number) => boolean): Grant[] {
    return this.floats.refillFloats(serving);
  }

  /** Grants whose log write came back, taken or not (`Floats.logged`). */
  logged(grants: readonly Grant[], taken = true): void {
    this.floats.logged(grants, taken);
  }

  /** The blankets to log now on the shards this owner serves (`Floats.blanketsDue`). */
  blanketsDue(shards: Iterable<number>, serving: (shard: number) => boolean): Blanket[] {
    return this.floats.blanketsDue(shards, serving);
  }

  /** Whether a blanket's log write was taken: only then may the windows it covers use it. */
  blanketLogged(b: Blanket, taken: boolean): void {
    this.blankets.logged(b, taken);
  }

  /** The taken held parts of its blankets, for its heartbeat (`Blankets.statement`). */
  readonly heldStatement = (serving: (shard: number) => boolean): HeldStatement => this.blankets.statement(serving);

  /** A shard given up cleanly, every write back: its blanket's retirement to log, if any (`Blankets.retire`). */
  retireBlanket(shard: number): { blanket: Blanket; grants: Grant[] } | undefined {
    return this.floats.retireBlanket(shard);
  }

  /** Whether all `g` states is on record already, so it may go out before its own log write does. */
  onRecord(g: Grant): boolean {
    return this.floats.onRecord(g);
  }

  /**
   * Folds one node's round batch; returns top-ups, pre-grants, recalls and exhaustion notices.
   * `queuedAt` (this owner's monotonic clock): when the batch entered the bus, for its fold age.
   */
  onReports(batch: ReportBatch, queuedAt?: number): OwnerMessage[] {
    if (batch.nodeEpoch.startsWith(FLOAT_PREFIX)) return [];
    const now = this.cfg.clock.now();
    const mono = this.cfg.clock.monotonic();
    const age = queuedAt === undefined ? undefined : mono - queuedAt;
    for (const r of batch.reports) {
      const top = this.topKeys.count(r.keyId, mono);
      const ledger = this.ledgers.ledgerFor(r.keyId, r.windowId, r.windowMs, r.limit, r.fixedShare === true);
      const lease = leaseFor(ledger, batch.nodeId, batch.nodeEpoch, r.lease);
      if (!this.reports.merge(batch.nodeId, lease, r)) continue;
      if (age !== undefined) this.foldAges.observe(age, top);
      if (this.floats.on && this.floats.aheadOf(ledger, now) && r.demand > 0 && this.sizing.target(ledger, r.demand) === 0) this.floats.markWanted(ledger);
      // What this report gave back may refill a window announced exhausted, whatever it asks for.
      if (r.demand > 0) {
        if (this.reports.withheld(batch.nodeId, batch.nodeEpoch)) this.reports.defer(ledger, lease);
        else this.topUps.refill(ledger, lease, r.demand);
      }
      this.issuer.announceRefilled(ledger);
    }
    // Folded only once all of it is (a report that throws leaves the round unfolded).
    if (batch.round > 0) this.reports.markFolded(batch);
    return this.takeOutbox();
  }

  /**
   * The top-ups reports asked for while their node was withheld (L5, F4), now that it is not: the
   * messages to send. One in a shard this owner does not serve now (a stall of its own) waits until it
   * does, or its window ends (a ledger swept since has its window ended).
   */
  topUpWithheld(serving: (shard: number) => boolean): OwnerMessage[] {
    let refilled = false;
    for (const [ledger, lease] of this.reports.released()) {
      if (lease.demand <= 0 || this.ended(ledger.shard, ledger.windowMs, ledger.windowEnd)) continue;
      if (!serving(ledger.shard)) this.reports.defer(ledger, lease);
      else {
        this.topUps.refill(ledger, lease, lease.demand);
        refilled = true;
      }
    }
    return refilled ? this.takeOutbox() : [];
  }

  /** Rebuilds ledgers from a shard's retained log before serving it (`replayLog`). */
  replay(entries: readonly LogEntry[]): void {
    replayLog(this.ledgers, this.reports, this.marks, this.blankets, entries, this.cfg.clock.now() + SKEW_ROUNDS * this.cfg.roundMs);
  }

  /** A checkpoint of one shard's ledgers as log entries; `replay(snapshot(s))` restores them (`snapshotShard`). */
  snapshot(shard: number): LogEntry[] {
    return snapshotShard(this.ledgers, this.issuer, this.marks, this.blankets, shard);
  }

  /** Messages produced for other nodes (recalls, notices) since the last call. */
  takeOutbox(): OwnerMessage[] {
    return this.issuer.takeOutbox();
  }

  /**
   * Whether nothing more is issued for a window: it ended SKEW_ROUNDS ago by this owner's clock (no node
   * within the skew is still in it), or by its shard's ended mark, whatever the clock says (`EndedMarks`).
   */
  private ended(shard: number, windowMs: number, windowEnd: number): boolean {
    return windowEnd <= this.cfg.clock.now() - SKEW_ROUNDS * this.cfg.roundMs || this.marks.covers(shard, windowMs, windowEnd);
  }

  /**
   * Drops ledgers of windows that ended (`ended`: two rounds ago), each measured for concentration
   * first (`lib/owner/concentration.ts`) and raising its shard's ended mark, and forgets ended
   * self-grant episodes. `ended` hears of each dropped window: what it admitted fleet-wide (spent,
   * summed over its leases) against its allowance — the traffic history policy staging judges candidates by.
   */
  sweep(nowMs: number, ended?: (keyId: string, windowMs: number, windowEnd: number, admitted: number, allowance: number) => void): void {
    const fleet = this.cfg.fleet.size();
    const dropped = (l: Ledger): void => {
      this.measured.observe(l, fleet);
      this.marks.raise(l.shard, l.windowMs, l.windowEnd);
      ended?.(l.keyId, l.windowMs, l.windowEnd, spentIn(l), l.allowance);
    };
    // `ended`, as the store counts it: the window's end at or before this.
    this.ledgers.sweep(nowMs - SKEW_ROUNDS * this.cfg.roundMs, dropped);
    this.reports.sweep();
  }

  /** Per-node-per-key concentration of the windows this owner swept lately: the ratio to uniform. */
  concentration(): ConcentrationSummary {
    return this.measured.summary();
  }

  /** Committed credit of a (key, window): what L2 bounds (`ledger-sums.ts`). */
  committed(keyId: string, windowMs: number, windowId: number): number {
    const l = this.ledgers.find(keyId, windowMs, windowId);
    return l === undefined ? 0 : committed(l);
  }

  /**
   * Credit of a (key, window) not yet committed to any lease: what this owner could still issue (the
   * reserve included); 0 without a ledger here (the window's owner is elsewhere, or nobody asked).
   */
  unissued(keyId: string, windowMs: number, windowId: number): number {
    const l = this.ledgers.find(keyId, windowMs, windowId);
    return l === undefined ? 0 : Math.max(0, l.allowance - committed(l));
  }

  /** What this owner's float of a (key, window) can give now: on record, not yet moved out. */
  float(keyId: string, windowMs: number, windowId: number): number {
    const l = this.ledgers.find(keyId, windowMs, windowId);
    return l === undefined ? 0 : this.pool.floatLeft(l);
  }

  /** Credit issued to nodes' leases for a (key, window): a float's credit counts once it moved to one. */
  issued(keyId: string, windowMs: number, windowId: number): number {
    return (this.ledgers.find(keyId, windowMs, windowId)?.leases ?? []).reduce((sum, lease) => sum + (lease.float ? 0 : lease.issued), 0);
  }

  /** Admissions merged from reports for a (key, window), summed over leases and node epochs. */
  spent(keyId: string, windowMs: number, windowId: number): number {
    return spentIn(this.ledgers.find(keyId, windowMs, windowId));
  }

  /**
   * Totals over the ledgers of windows still running: credit committed against their allowances. Every
   * grant keeps a ledger's committed within its allowance (L2); a ledger may count more than was given
   * out (ARCHITECTURE.md, the owner's arithmetic), less only if Redis lost acknowledged writes.
   */
  totals(nowMs: number): { ledgers: number; committed: number; allowance: number } {
    return runningTotals(this.ledgers.all(), nowMs);
  }

  /** Number of ledgers held. */
  get size(): number {
    return this.ledgers.size;
  }
}

import type { Clock } from './clock.js';
import { ErrorCode, RateLimiterError } from './errors.js';
import type { Adjust, CreditRequest, Grant, OwnerMessage, Report, ReportBatch } from './protocol/messages.js';
import { leaseTarget } from './lease-size.js';
import { SKEW_ROUNDS } from './lease-node.js';
import { FLOAT_PREFIX, LedgerStore, leaseFor, leaseIn, type Float, type Lease, type Ledger } from './ledger-store.js';
import type { LogEntry } from './protocol/log.js';
import { phaseOffset, windowEndMs } from './window.js';

export { FLOAT_PREFIX };

/** What an owner knows of the fleet, from the transport's heartbeats. */
export interface FleetView {
  /** Number of members (live or silent, not yet expired). */
  size(): number;
  /**
   * Members that may hold a boundary self-grant (F4) in `shard` this owner has not heard of yet, or
   * be about to grant themselves one (`lib/membership.ts`). `folded(nodeEpoch, shard)`: the latest
   * round of that process's report batches for the shard this owner has folded.
   */
  unsettled(shard: number, folded: (nodeEpoch: string, shard: number) => number): readonly string[];
  /** Whether `nodeId` reappeared less than a round ago: no grants to it yet (L5). */
  rejoining(nodeId: string): boolean;
}

/** Settings of the owner side of the protocol. */
export interface FoldOwnerConfig {
  /** Fencing token of this owner for a shard; grants carry it. */
  readonly ownerEpoch: (shard: number) => number;
  readonly shardOf: (keyId: string, windowId: number) => number;
  /** Headroom h applied to advertised demand. */
  readonly headroom: number;
  /** Rounds of requests a node's advertised demand covers. */
  readonly demandRounds: number;
  /** Reserve R as a fraction of the allowance, released once per key per window, fast path only. */
  readonly reserveRatio: number;
  /** Round length T; ledgers live until window end + 2 rounds; pre-grants start 2 rounds before the end. */
  readonly roundMs: number;
  readonly fleet: FleetView;
  readonly clock: Clock;
  /**
   * This process, as the holder of its floats (`refillFloats`): credit it logs as issued to itself,
   * so an ask the float covers is answered without waiting for a log write.
   */
  readonly floatHolder?: { readonly nodeId: string; readonly nodeEpoch: string };
}

/** How far ahead of a window's start a node's report makes its float: its two rounds ahead, and skew. */
const AHEAD_FLOAT_ROUNDS = 4;
/** Refills a float waits for its log write before writing its grant again. */
const RELOG_ROUNDS = 4;

/** A float holds at least this much (while the window has it), and at most a quarter of the allowance (at least 1). */
const FLOAT_MIN = 2;

/**
 * demand × h at or above which a lease is busy — about a request a round or more — and is always
 * topped up to BUSY_ROUNDS of its demand whatever the room: it will spend that before its next
 * top-ups. Beyond that the room decides, so at a window's tail credit stays with the owner.
 */
const BUSY = 4;
/** Rounds of its demand a busy lease gets whatever the room, and keeps when recalled. */
const BUSY_ROUNDS = 2;

/** Thrown if a grant would break sum(committed) ≤ allowance (L2); it must be unreachable. */
export class InvariantViolation extends RateLimiterError {
  constructor(message: string) {
    super(ErrorCode.INTERNAL, message);
  }
}

/** Counters of the owner side. */
export interface FoldOwnerStats {
  grants: number;
  preGrants: number;
  recalls: number;
  exhaustedNotices: number;
  /** Leases told that a window announced exhausted has credit again. */
  refills: number;
  withheld: number;
  /** Refills of floats, and asks answered from a float (no wait for a log write). */
  floatRefills: number;
  floatAnswers: number;
  reportsMerged: number;
  reportsStale: number;
  reserveReleases: number;
}

/**
 * Owner side of the leasing protocol for the shards this node owns: the only issuer of credit. It
 * merges reports by (key, window, node epoch, lease) — max seq wins inside a lease, leases and epochs
 * add up — and never lets committed credit (issued + self-granted − released) pass the allowance (L2).
 * It sizes grants from demand × h, tops up each round (and ahead of a rollover), recalls idle
 * credit when the pool runs dry, holds back 1/fleet for every silent node (its possible boundary
 * self-grant), and withholds grants from rejoining or self-granting nodes for a round (L5, F4).
 * Pure: no timers, no I/O; messages for other nodes collect in an outbox the bus drains.
 */
export class FoldOwner {
  private readonly ledgers: LedgerStore;
  private outbox: OwnerMessage[] = [];
  /** When each node's self_grant flag was first seen in the current episode (F4). */
  private readonly selfGrantSeen = new Map<string, number>();
  /** Per node epoch: the latest round of its report batches folded per shard, and when it was last one. */
  private readonly folded = new Map<string, { at: number; rounds: Map<number, number> }>();
  /** Ledgers whose window had remote asks, while floats are on (the first `refillFloats`). */
  private readonly floatWanted = new Set<Ledger>();
  private floats = false;
  readonly stats: FoldOwnerStats = {
    grants: 0, preGrants: 0, recalls: 0, exhaustedNotices: 0, refills: 0, withheld: 0, floatRefills: 0, floatAnswers: 0, reportsMerged: 0, reportsStale: 0, reserveReleases: 0,
  };

  constructor(private readonly cfg: FoldOwnerConfig) {
    this.ledgers = new LedgerStore(cfg.shardOf);
  }

  /** Answers a credit request with a grant, or undefined when nothing can be issued now. */
  onCreditRequest(req: CreditRequest): Grant | undefined {
    // Float leases are an owner's own: no node asks as one.
    if (req.nodeEpoch.startsWith(FLOAT_PREFIX)) return undefined;
    if (this.ended(windowEndMs(req.windowId, req.windowMs, phaseOffset(req.keyId, req.windowMs)))) return undefined;
    const ledger = this.ledgers.ledgerFor(req.keyId, req.windowId, req.windowMs, req.limit);
    const lease = leaseFor(ledger, req.nodeId, req.nodeEpoch, req.lease);
    this.absorb(req.nodeId, lease, req, req.selfIssued > 0);
    lease.demand = Math.max(lease.demand, req.demand);
    if (this.withheld(req.nodeId)) return undefined;
    // What the request needs, or its node's demand for the next rounds if more: a node that sees the
    // key rarely gets exactly what it needs, so no credit strands where requests seldom come. What
    // the lease already holds counts (a grant may be in flight): a repeated request adds nothing.
    const want = Math.max(req.need, this.target(ledger, req.demand)) - Math.max(0, held(lease));
    if (want <= 0) return lease.grantSeq > 0 ? this.restate(ledger, lease) : undefined;
    // An ask may draw on the float: what it covers needs no log write before the answer. Every ask
    // sizes it, this node's own too: they wait for the log like any other.
    const useFloat = req.fastPath && this.floats;
    if (useFloat) {
      ledger.asks += want;
      ledger.asked = true;
      this.floatWanted.add(ledger);
    }
    const float = useFloat ? this.floatLeft(ledger, false) : 0;
    let avail = this.available(ledger, false);
    // At least a round of the node's demand when there is that much: a busy node that ran dry does
    // not ask again before its next top-up.
    const least = Math.max(req.need, this.rounds(req.demand, 1));
    let amount = this.ration(ledger, lease, want, least, avail + float);
    if (amount < req.need && req.fastPath && !ledger.reserveReleased) {
      const reserve = this.reserveOf(ledger);
      if (reserve > 0) {
        ledger.reserveReleased = true;
        this.stats.reserveReleases++;
        avail = this.available(ledger, true);
        amount = this.ration(ledger, lease, want, least, avail + float);
      }
    }
    if (amount < req.need) this.recall(ledger, lease);
    if (amount <= 0) return undefined;
    // All from the float when it covers the grant, else as little of it as the pool allows.
    const fromFloat = amount <= float ? amount : Math.max(0, amount - avail);
    if (fromFloat === amount) this.stats.floatAnswers++;
    const grant = this.issue(ledger, lease, amount, fromFloat);
    this.announceExhausted(ledger);
    return grant;
  }

  /**
   * Tops up the floats of windows that had remote asks lately (and of the next window of each, in
   * its last two rounds, as of one a node reported ahead for a key it will ask for), on shards
   * `serving` says are this owner's: the grants to log. A float's credit counts as issued from the
   * moment it is made, so a later owner replaying the log never issues it again; it is usable only
   * once `logged` says its grant is on record. Sized to twice the most credit asks wanted between
   * two refills, at least FLOAT_MIN, at most a quarter of the allowance (at least 1), from the pool
   * without the reserve. The first call turns floats on.
   */
  refillFloats(serving: (shard: number) => boolean): Grant[] {
    const holder = this.cfg.floatHolder;
    if (holder === undefined) return [];
    this.floats = true;
    const now = this.cfg.clock.now();
    const out: Grant[] = [];
    for (const l of this.floatWanted) {
      const shard = l.shard;
      if (l.windowEnd <= now) {
        this.floatWanted.delete(l);
        continue;
      }
      // Not served now (a lost shard, or Redis briefly out of reach): kept, so a float whose write is
      // still out is written again once it is.
      if (!serving(shard)) continue;
      const asked = l.asks > 0;
      l.askPeak = Math.max(l.askPeak, l.asks);
      l.asks = 0;
      if (l.asked && l.windowEnd - now <= 2 * this.cfg.roundMs && serving(this.cfg.shardOf(l.keyId, l.windowId + 1))) {
        // Visited later in this loop (a Set iterates what is added while it runs).
        const next = this.ledgers.find(l.keyId, l.windowMs, l.windowId + 1) ?? this.ledgers.ledgerFor(l.keyId, l.windowId + 1, l.windowMs, l.allowance);
        next.askPeak = Math.max(next.askPeak, l.askPeak);
        this.floatWanted.add(next);
      }
      const f = this.floatOf(l, holder, shard);
      // Credit not yet on record counts: a refill waits for the one before it, and a write that did
      // not come back is written again (the grant is cumulative) a few rounds on.
      if (f.lease.issued > f.onRecord) {
        if (++f.waited % RELOG_ROUNDS === 0) out.push(this.restate(l, f.lease));
        continue;
      }
      f.waited = 0;
      const size = Math.min(Math.max(1, Math.floor(l.allowance / 4)), Math.max(FLOAT_MIN, 2 * l.askPeak));
      const amount = Math.min(size - (f.lease.issued - f.base - f.moved), this.available(l, false));
      if (amount > 0) {
        out.push(this.issue(l, f.lease, amount));
        this.stats.floatRefills++;
      } else if (!asked && l.windowEnd - now > 2 * this.cfg.roundMs) {
        // Settled and not asked since the last refill: off the list until an ask or a report ahead
        // puts it back, so rounds cost what changed, not every key seen this window.
        this.floatWanted.delete(l);
      }
    }
    return out;
  }

  /** Grants whose log write came back in time: what they state is on record, floats' credit usable. */
  logged(grants: readonly Grant[]): void {
    for (const g of grants) {
      const found = this.granted(g);
      if (found === undefined || g.ownerEpoch !== this.cfg.ownerEpoch(found.l.shard)) continue;
      const { l, lease } = found;
      if (!lease.float) {
        const direct = directOf(g);
        lease.onRecord = lease.recordEpoch === g.ownerEpoch ? Math.max(lease.onRecord, direct) : direct;
        lease.recordEpoch = g.ownerEpoch;
      } else if (l.float?.lease === lease) {
        l.float.onRecord = Math.max(l.float.onRecord, g.issued);
        this.announceRefilled(l);
      }
    }
  }

  /**
   * Whether all `g` states is on record already: its credit beyond what came from a float was in a
   * grant whose log write came back. Such a grant may go out before its own log write does.
   */
  onRecord(g: Grant): boolean {
    const lease = this.granted(g)?.lease;
    const direct = directOf(g);
    return lease !== undefined && !lease.float && (direct === 0 || (lease.recordEpoch === g.ownerEpoch && direct <= lease.onRecord));
  }

  /** The ledger and lease a grant of this owner's went to, if still known. */
  private granted(g: Grant): { l: Ledger; lease: Lease } | undefined {
    const l = this.ledgers.find(g.keyId, g.windowMs, g.windowId);
    if (l === undefined) return undefined;
    const lease = leaseIn(l, g.nodeEpoch, g.lease);
    return lease === undefined ? undefined : { l, lease };
  }

  /**
   * What this owner's float of `l` can still give: on record, less what moved out — with `pending`,
   * also what is on its way to the log. Nothing from a float of an earlier owner epoch.
   */
  private floatLeft(l: Ledger, pending: boolean): number {
    const f = l.float;
    if (f === undefined || f.lease.lease !== this.cfg.ownerEpoch(l.shard)) return 0;
    // Never past the allowance: committed credit can exceed it (a lower limit mid-window, a report
    // of credit a lost log write carried), and then the float gives that much less. Nor more than
    // the ledger's floats hold unmoved: a replayed log may have lost a float's grant but kept what
    // moved out of it, which `committed` counts in its place.
    const t = tally(l);
    const own = (pending ? f.lease.issued : f.onRecord) - f.base - f.moved;
    return Math.max(0, Math.min(own, t.floats - t.floated) - Math.max(0, t.direct + Math.max(t.floats, t.floated) - l.allowance));
  }

  /** The ledger's float under the current owner epoch: a new one after a change of owner. */
  private floatOf(l: Ledger, holder: { nodeId: string; nodeEpoch: string }, shard: number): Float {
    const epoch = this.cfg.ownerEpoch(shard);
    if (l.float?.lease.lease !== epoch) {
      const lease = leaseFor(l, holder.nodeId, FLOAT_PREFIX + holder.nodeEpoch, epoch);
      l.float = { lease, base: lease.issued, onRecord: lease.issued, moved: 0, waited: 0 };
    }
    return l.float;
  }

  /** Folds one node's round batch; returns top-ups, pre-grants, recalls and exhaustion notices. */
  onReports(batch: ReportBatch): OwnerMessage[] {
    if (batch.nodeEpoch.startsWith(FLOAT_PREFIX)) return [];
    const now = this.cfg.clock.now();
    for (const r of batch.reports) {
      const ledger = this.ledgers.ledgerFor(r.keyId, r.windowId, r.windowMs, r.limit);
      const lease = leaseFor(ledger, batch.nodeId, batch.nodeEpoch, r.lease);
      if (!this.merge(batch.nodeId, lease, r)) continue;
      // A node reporting, in the rounds before a window starts, a key it will ask for there (too
      // rare for a lease): the window gets a float before its first ask, not after it. This owner's
      // own node too: its asks wait for their grant's log write like any other's.
      const ahead = ledger.windowEnd - ledger.windowMs - now;
      if (this.floats && ahead > 0 && ahead <= AHEAD_FLOAT_ROUNDS * this.cfg.roundMs && r.demand > 0 && this.target(ledger, r.demand) === 0) {
        this.floatWanted.add(ledger);
      }
      // What this report gave back may refill a window announced exhausted, whatever it asks for.
      if (r.demand > 0 && !this.withheld(batch.nodeId)) this.topUp(ledger, lease, r);
      this.announceRefilled(ledger);
    }
    // Folded only once all of it is (a report that throws leaves the round unfolded).
    if (batch.round > 0) {
      let f = this.folded.get(batch.nodeEpoch);
      if (f === undefined) this.folded.set(batch.nodeEpoch, (f = { at: 0, rounds: new Map() }));
      f.at = this.cfg.clock.monotonic();
      f.rounds.set(batch.shard, Math.max(f.rounds.get(batch.shard) ?? 0, batch.round));
    }
    return this.takeOutbox();
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
  private topUp(ledger: Ledger, lease: Lease, r: Report): void {
    if (this.ended(ledger.windowEnd)) return;
    const target = this.target(ledger, r.demand);
    if (held(lease) >= target) return;
    // The float too, when the pool is short (a top-up goes out once all it states is on record).
    const avail = this.available(ledger, false);
    const pool = avail + this.floatLeft(ledger, false);
    const base = Math.floor(r.demand * this.cfg.headroom);
    const own = base >= BUSY ? Math.min(base, this.rounds(r.demand, BUSY_ROUNDS)) - held(lease) : 0;
    const amount = Math.min(target - held(lease), pool, Math.max(own, this.room(ledger)));
    if (amount > 0) {
      this.outbox.push(this.issue(ledger, lease, amount, Math.max(0, amount - avail)));
      this.announceExhausted(ledger);
      if (ledger.windowEnd - ledger.windowMs > this.cfg.clock.now()) this.stats.preGrants++;
    } else if (pool <= 0) this.recall(ledger, lease);
  }

  /**
   * Rebuilds ledgers from a shard's retained log, as a restarted or new owner must before it serves:
   * grants restore what was issued (cumulative, so order and duplicates do not matter), reports what
   * was spent, self-granted and released. Credit issued before a crash is never issued twice.
   */
  replay(entries: readonly LogEntry[]): void {
    for (const e of entries) {
      if (e.kind === 'report') {
        for (const r of e.batch.reports) {
          const l = this.ledgers.ledgerFor(r.keyId, r.windowId, r.windowMs, r.limit);
          const lease = leaseFor(l, e.batch.nodeId, e.batch.nodeEpoch, r.lease);
          // Counts are cumulative: even a report no newer than what is known adds what it knows. A
          // replayed report (a snapshot's, written from this owner's side) proves nothing about what
          // the node applied: `reported` stays as it was.
          const reported = lease.reported;
          const merged = this.merge(e.batch.nodeId, lease, r);
          lease.reported = reported;
          if (!merged) {
            lease.issued = Math.max(lease.issued, r.issued);
            this.absorb(e.batch.nodeId, lease, r, r.selfGrant);
          }
        }
        continue;
      }
      const g = e.grant;
      const l = this.ledgers.find(g.keyId, g.windowMs, g.windowId) ?? this.ledgers.ledgerFor(g.keyId, g.windowId, g.windowMs, 0);
      const lease = leaseFor(l, g.nodeId, g.nodeEpoch, g.lease);
      lease.issued = Math.max(lease.issued, g.issued);
      lease.floated = Math.max(lease.floated, g.floated ?? 0);
      lease.grantSeq = Math.max(lease.grantSeq, g.grantSeq);
      // Until a report or request states the allowance, nothing more is issued for this window.
      l.allowance = Math.max(l.allowance, committed(l));
    }
  }

  /**
   * A checkpoint of the ledgers of one shard as log entries (a grant and a report per lease): what a
   * later owner replays instead of the whole log behind it. `replay(snapshot(s))` restores them. It
   * visits that shard's ledgers only (`LedgerStore.inShard`).
   */
  snapshot(shard: number): LogEntry[] {
    const entries: LogEntry[] = [];
    const batches = new Map<string, { nodeId: string; nodeEpoch: string; reports: Report[] }>();
    for (const l of this.ledgers.inShard(shard)) {
      for (const lease of l.leases) {
        if (lease.grantSeq > 0) entries.push({ kind: 'grant', grant: this.restate(l, lease) });
        const key = `${lease.nodeId}|${lease.nodeEpoch}`;
        let b = batches.get(key);
        if (b === undefined) batches.set(key, (b = { nodeId: lease.nodeId, nodeEpoch: lease.nodeEpoch, reports: [] }));
        b.reports.push({
          keyId: l.keyId,
          windowId: l.windowId,
          windowMs: l.windowMs,
          limit: l.allowance,
          lease: lease.lease,
          seq: lease.seq,
          spent: lease.spent,
          issued: lease.issued,
          selfIssued: lease.selfIssued,
          released: lease.released,
          demand: lease.demand,
          held: Math.max(0, held(lease)),
          selfGrant: lease.selfIssued > 0,
        });
      }
    }
    for (const b of batches.values()) entries.push({ kind: 'report', batch: { shard, round: 0, ...b } });
    return entries;
  }

  /** Messages produced for other nodes (recalls, notices) since the last call. */
  takeOutbox(): OwnerMessage[] {
    const out = this.outbox;
    this.outbox = [];
    return out;
  }

  /**
   * Whether a window that ends at `windowEnd` ended more than SKEW_ROUNDS ago by this owner's clock.
   * No node whose clock is within the skew allowed of this one's is still in it, so its ledger may be
   * swept, and nothing more is issued for it. An ask or a report that late was long on its way (what
   * it got would land after the window ended there too) or comes from a clock stepped back beyond the
   * skew, and a ledger swept meanwhile would come back empty, as if none of the window's allowance had
   * been issued. Such a node is refused until its clock is in a live window.
   */
  private ended(windowEnd: number, nowMs = this.cfg.clock.now()): boolean {
    return windowEnd <= nowMs - SKEW_ROUNDS * this.cfg.roundMs;
  }

  /** Drops ledgers of windows that ended (`ended`: two rounds ago), and forgets ended self-grant episodes. */
  sweep(nowMs: number): void {
    // `ended`, as the store counts it: the window's end at or before this.
    this.ledgers.sweep(nowMs - SKEW_ROUNDS * this.cfg.roundMs);
    const mono = this.cfg.clock.monotonic();
    for (const [node, at] of this.selfGrantSeen) if (at + 60_000 < mono) this.selfGrantSeen.delete(node);
    // A process unheard of for ten minutes is gone (a new one has a new epoch and starts over).
    for (const [epoch, f] of this.folded) if (f.at + 600_000 < mono) this.folded.delete(epoch);
  }

  /** Committed credit of a (key, window): issued + self-granted − released. What L2 bounds. */
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
    return l === undefined ? 0 : this.floatLeft(l, false);
  }

  /** Credit issued to nodes' leases for a (key, window): a float's credit counts once it moved to one. */
  issued(keyId: string, windowMs: number, windowId: number): number {
    let sum = 0;
    for (const lease of this.ledgers.find(keyId, windowMs, windowId)?.leases ?? []) if (!lease.float) sum += lease.issued;
    return sum;
  }

  /** Admissions merged from reports for a (key, window), summed over leases and node epochs. */
  spent(keyId: string, windowMs: number, windowId: number): number {
    let sum = 0;
    for (const lease of this.ledgers.find(keyId, windowMs, windowId)?.leases ?? []) sum += lease.spent;
    return sum;
  }

  /**
   * Totals over the ledgers of windows still running: credit committed (issued + self-granted −
   * released) against their allowances. Committed never exceeds allowance in any ledger (L2), so
   * never in the sum; the sum says how much of the fleet's allowance is out on lease.
   */
  totals(nowMs: number): { ledgers: number; committed: number; allowance: number } {
    let ledgers = 0;
    let sum = 0;
    let allowance = 0;
    for (const l of this.ledgers.all()) {
      if (l.windowEnd <= nowMs) continue;
      ledgers++;
      sum += committed(l);
      allowance += l.allowance;
    }
    return { ledgers, committed: sum, allowance };
  }

  /** Number of ledgers held. */
  get size(): number {
    return this.ledgers.size;
  }

  /** What a node advertising `demand` (over `demandRounds`) spends in `n` rounds, rounded up. */
  private rounds(demand: number, n: number): number {
    return Math.ceil((demand * n) / this.cfg.demandRounds);
  }

  /** Credit a lease of `l` should hold for `demand` (`lib/lease-size.ts`). */
  private target(l: Ledger, demand: number): number {
    return leaseTarget(demand, (l.windowEnd - this.cfg.clock.now()) / this.cfg.roundMs, this.cfg.demandRounds, this.cfg.headroom);
  }

  /** What leases may still take by top-ups: half of what the window has not spent, less what they hold. */
  private room(l: Ledger): number {
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
  private ration(l: Ledger, lease: Lease, want: number, need: number, pool: number): number {
    if (want <= 0 || pool <= 0) return 0;
    let wants = want;
    for (const x of l.leases) if (x !== lease && !x.float) wants += Math.max(0, this.target(l, x.demand) - held(x));
    if (wants <= pool) return Math.min(want, pool);
    return Math.min(pool, want, Math.max(need, Math.floor((pool * want) / wants)));
  }

  private withheld(nodeId: string): boolean {
    const seen = this.selfGrantSeen.get(nodeId);
    const w = this.cfg.fleet.rejoining(nodeId) || (seen !== undefined && this.cfg.clock.monotonic() - seen < this.cfg.roundMs);
    if (w) this.stats.withheld++;
    return w;
  }

  /** Max seq wins within a lease; a lower or equal seq is a duplicate or a reordered entry. */
  private merge(nodeId: string, lease: Lease, r: Report): boolean {
    if (r.seq <= lease.seq) {
      this.stats.reportsStale++;
      return false;
    }
    lease.seq = r.seq;
    // What the node says it was issued counts too: a grant this owner's ledger missed (an earlier
    // owner's, or one from before the ledger was swept) is still committed.
    lease.issued = Math.max(lease.issued, r.issued);
    lease.reported = Math.max(lease.reported, r.issued);
    this.absorb(nodeId, lease, r, r.selfGrant);
    lease.demand = r.demand;
    this.stats.reportsMerged++;
    return true;
  }

  /**
   * Takes a lease's cumulative counts from a request or a report (max: duplicates and reorders change
   * nothing). The first time a node's self_grant flag is seen, grants to it are withheld a round (F4).
   */
  private absorb(nodeId: string, lease: Lease, c: { spent: number; selfIssued: number; released: number }, selfGrant: boolean): void {
    lease.spent = Math.max(lease.spent, c.spent);
    lease.selfIssued = Math.max(lease.selfIssued, c.selfIssued);
    lease.released = Math.max(lease.released, c.released);
    if (selfGrant && !this.selfGrantSeen.has(nodeId)) this.selfGrantSeen.set(nodeId, this.cfg.clock.monotonic());
  }

  /**
   * The pool is dry for `asking`: ask leases holding more than their own demand needs to give the
   * surplus back. If none has any and even the reserve is gone, tell every lease of the window that
   * it is exhausted, so none of them spends a fast path on asking again.
   */
  private recall(l: Ledger, asking: Lease): void {
    const round = Math.floor(this.cfg.clock.monotonic() / this.cfg.roundMs);
    let recalled = false;
    for (const lease of l.leases) {
      if (lease === asking || lease.float || lease.noticeAt === round) continue;
      // Below one request's worth a lease keeps nothing: `lib/lease-size.ts` gives it no lease. A
      // busier one keeps what it spends in BUSY_ROUNDS, not demand × h: the node gives the rest back
      // the moment the recall lands, for the nodes that ran dry.
      const base = lease.demand * this.cfg.headroom;
      const keep = base < 1 ? 0 : Math.min(Math.ceil(base), this.rounds(lease.demand, BUSY_ROUNDS));
      if (held(lease) > keep) {
        lease.noticeAt = round;
        this.outbox.push(this.adjust(l, lease, keep, false));
        this.stats.recalls++;
        recalled = true;
      }
    }
    if (!recalled) this.announceExhausted(l);
  }

  /**
   * Once nothing is left, reserve included, every lease of the window is told so (once, until a grant
   * changes it): none of them spends a fast path on asking, and their denials name this window.
   * What is held back for unsettled nodes is not spent: it comes back to the pool the round they are
   * heard from, so a pool emptied only by it is not announced (its leases would wait for the
   * window's end). In a fleet of one that share is the whole allowance.
   */
  private announceExhausted(l: Ledger): void {
    // A float whose write is still out counts: its credit is the window's, usable once on record.
    if (Math.max(0, l.allowance - committed(l)) + this.floatLeft(l, true) > 0) return;
    l.announced = true;
    const round = Math.floor(this.cfg.clock.monotonic() / this.cfg.roundMs);
    for (const lease of l.leases) {
      if (lease.float || (lease.exhaustedAt >= 0 && lease.exhaustedAt >= lease.grantedAt)) continue;
      lease.exhaustedAt = round;
      this.outbox.push(this.adjust(l, lease, -1, true));
      this.stats.exhaustedNotices++;
    }
  }

  /**
   * Credit came back after the window was announced exhausted (a node gave back what it stopped
   * using): the leases told so may ask again, or requests under the limit would be refused while the
   * pool has credit. Sent as an adjustment that neither recalls nor exhausts (keep −1, not exhausted).
   */
  private announceRefilled(l: Ledger): void {
    if (!l.announced || this.available(l, true) + this.floatLeft(l, false) <= 0) return;
    l.announced = false;
    for (const lease of l.leases) {
      if (lease.float || lease.exhaustedAt < 0 || lease.exhaustedAt < lease.grantedAt) continue;
      lease.exhaustedAt = -1;
      this.outbox.push(this.adjust(l, lease, -1, false));
      this.stats.refills++;
    }
  }

  private adjust(l: Ledger, lease: Lease, keep: number, exhausted: boolean): Adjust {
    return {
      type: 'adjust',
      keyId: l.keyId,
      windowId: l.windowId,
      windowMs: l.windowMs,
      nodeId: lease.nodeId,
      nodeEpoch: lease.nodeEpoch,
      lease: lease.lease,
      ownerEpoch: this.cfg.ownerEpoch(l.shard),
      keep,
      exhausted,
      grantSeq: lease.grantSeq,
    };
  }

  /** Issues `amount` to `lease`, `fromFloat` of it moved out of the ledger's float (committed already). */
  private issue(ledger: Ledger, lease: Lease, amount: number, fromFloat = 0): Grant {
    // Credit moved out of the float commits nothing more: the float's own bound (`floatLeft`) holds it.
    const after = committed(ledger) + amount - fromFloat;
    if ((amount > fromFloat && after > ledger.allowance) || fromFloat > this.floatLeft(ledger, false)) {
      throw new InvariantViolation(`grant of ${amount} (${fromFloat} from the float) would raise committed credit to ${after} > allowance ${ledger.allowance}`);
    }
    lease.issued += amount;
    if (fromFloat > 0) {
      lease.floated += fromFloat;
      ledger.float!.moved += fromFloat;
    }
    lease.grantSeq++;
    lease.grantedAt = Math.floor(this.cfg.clock.monotonic() / this.cfg.roundMs);
    this.stats.grants++;
    return this.restate(ledger, lease);
  }

  /** The lease's latest grant, cumulative: re-sending it repairs a lost grant and adds nothing. */
  private restate(ledger: Ledger, lease: Lease): Grant {
    return {
      type: 'grant',
      keyId: ledger.keyId,
      windowId: ledger.windowId,
      windowMs: ledger.windowMs,
      nodeId: lease.nodeId,
      nodeEpoch: lease.nodeEpoch,
      lease: lease.lease,
      grantSeq: lease.grantSeq,
      ownerEpoch: this.cfg.ownerEpoch(ledger.shard),
      issued: lease.issued,
      ...(lease.floated > 0 ? { floated: lease.floated } : {}),
    };
  }

  /**
   * What can still be issued: the allowance less committed credit, less 1/fleet for every unsettled
   * node (silent, or just back) that may have granted itself credit at this window's boundary (F4)
   * without this owner knowing — less the reserve unless `withReserve`. A node is known not to have
   * (or to have, and it is committed) once it reported this window with credit applied or with its
   * self-grant. A lease alone says nothing: a node that asked ahead and was given nothing, or whose
   * grant never arrived (Redis frozen), rolls into the window empty-handed and grants itself.
   */
  private available(l: Ledger, withReserve: boolean): number {
    const fleet = Math.max(1, this.cfg.fleet.size());
    let holdback = 0;
    for (const node of this.cfg.fleet.unsettled(l.shard, this.foldedRound)) {
      if (!l.leases.some((lease) => lease.nodeId === node && (lease.reported > 0 || lease.selfIssued > 0))) holdback += Math.ceil(l.allowance / fleet);
    }
    // Credit already committed into the reserve (seen on replay) means the reserve is gone; in the
    // window's last two rounds it is released to anyone, since no later fast path is left to keep it for.
    if (committed(l) > l.allowance - this.reserveOf(l) || l.windowEnd - this.cfg.clock.now() <= 2 * this.cfg.roundMs) l.reserveReleased = true;
    const reserve = withReserve || l.reserveReleased ? 0 : this.reserveOf(l);
    return Math.max(0, l.allowance - reserve - committed(l) - holdback);
  }

  /** The latest round of `nodeEpoch`'s report batches for `shard` this owner folded (0: none). */
  private readonly foldedRound = (nodeEpoch: string, shard: number): number => this.folded.get(nodeEpoch)?.rounds.get(shard) ?? 0;

  private reserveOf(l: Ledger): number {
    return Math.floor(l.allowance * this.cfg.reserveRatio);
  }
}

function held(lease: Lease): number {
  return lease.issued + lease.selfIssued - lease.spent - lease.released;
}

/**
 * issued + self-granted − released over the leases, a float's credit counted once whether it is
 * still in the float or moved out to a lease — and never less than what leases say they took from
 * floats, even if a float's own grant were missing from a replayed log. A lease that spent more than
 * that (a degraded node's fail-open admissions, charged to the window) commits what it spent.
 */
function committed(l: Ledger): number {
  const t = tally(l);
  return t.direct + Math.max(t.floats, t.floated);
}

/**
 * A ledger's sums: nodes' leases' issued + self-granted − released − floated, plus what they spent
 * beyond it (`direct`), floats' issued, and what leases took from floats.
 */
function tally(l: Ledger): { direct: number; floats: number; floated: number } {
  let direct = 0;
  let floats = 0;
  let floated = 0;
  for (const lease of l.leases) {
    if (lease.float) floats += lease.issued;
    else direct += lease.issued + lease.selfIssued - lease.released - lease.floated + Math.max(0, lease.spent - (lease.issued + lease.selfIssued - lease.released));
    floated += lease.floated;
  }
  return { direct, floats, floated };
}

/** What a grant states beyond the credit it took from a float. */
function directOf(g: Grant): number {
  return g.issued - (g.floated ?? 0);
}

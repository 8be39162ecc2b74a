import type { Bucket } from './bucket.js';
import { BucketMap, type Subject } from './bucket-map.js';
import type { Clock } from './clock.js';
import type { ResolvedLimits } from './policy.js';
import { shardOf, type CreditRequest, type Grant, type Report, type ReportBatch } from './protocol/messages.js';
import { windowEndMs, windowIdAt } from './window.js';

/**
 * The node's view of the credit authority (the bus toward the shard owners). Implemented in `bus/`.
 */
export interface OwnerLink {
  /**
   * Asks the owners for credit. Grants come back synchronously when the owner is in this process,
   * as a promise otherwise that settles with undefined once `deadlineMs` has passed (the hard
   * fast-path deadline); undefined at once means no owner can be reached. The caller applies them;
   * late grants also arrive through `applyGrant`.
   */
  requestCredit(
    requests: readonly CreditRequest[],
    deadlineMs: number,
  ): readonly Grant[] | undefined | Promise<readonly Grant[] | undefined>;
  /** Sends one round's batch for one shard. Never blocks the caller. */
  publish(batch: ReportBatch): void;
  /** Whether the owners answered recently (heartbeat of the transport). */
  connected(): boolean;
}

/** Settings of the node side of the protocol. */
export interface LeaseNodeConfig {
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly shards: number;
  readonly maxBuckets: number;
  readonly fastPathDeadlineMs: number;
  /** Rounds of demand a credit request asks for (grants must last until the next top-up lands). */
  readonly demandRounds: number;
  /** Milliseconds without owner contact after which the node is degraded. */
  readonly degradedAfterMs: number;
}

/** A request was admitted: the one shared instance, so the common path allocates nothing. */
export const ADMITTED = Object.freeze({ admitted: true as const });

/** A request was denied for lack of credit in at least one window. */
export interface Denied {
  readonly admitted: false;
  /** Name of the denying window (the one with the latest boundary among those without credit). */
  readonly window: string;
  /** Wait until the latest boundary among windows without credit, or undefined if unknown. */
  readonly retryAfterMs: number | undefined;
}

/** Outcome of `acquire`. */
export type Acquired = typeof ADMITTED | Denied;

/**
 * Node side of the leasing protocol: buckets of leased credit, decremented all-or-nothing across a
 * key's windows; first sight and exhaustion go to the owner (the fast path, once per bucket per round,
 * under a hard deadline); each round one report batch per touched shard. No timers or I/O inside:
 * the caller drives `round()` and supplies the link.
 */
export class LeaseNode {
  readonly buckets: BucketMap;
  private roundNo = 0;
  private leases = 0;
  private touched: Subject[] = [];
  private lastContact: number;
  /** Counters read by metrics and the benchmark. */
  readonly stats = { fastPath: 0, fastPathTimeouts: 0, grantsApplied: 0, grantsIgnored: 0, reports: 0 };

  constructor(
    private readonly cfg: LeaseNodeConfig,
    private readonly clock: Clock,
    private readonly link: OwnerLink,
  ) {
    this.buckets = new BucketMap(cfg.maxBuckets);
    this.lastContact = clock.monotonic();
  }

  /** Current round number (grows by one per `round()`). */
  get round(): number {
    return this.roundNo;
  }

  /** True once the owners have been out of reach for longer than `degradedAfterMs`. */
  get degraded(): boolean {
    return this.clock.monotonic() - this.lastContact > this.cfg.degradedAfterMs;
  }

  /**
   * Takes `cost` credit from every window of `limits` or from none. Synchronous when credit is held
   * or the owner is local; a promise only when the fast path has to cross the network.
   */
  acquire(keyId: string, limits: ResolvedLimits, cost = 1): Acquired | Promise<Acquired> {
    const now = this.clock.now();
    const subject = this.buckets.get(keyId, limits, now, this.roundNo);
    if (subject.touchedRound !== this.roundNo) {
      subject.touchedRound = this.roundNo;
      this.touched.push(subject);
    }
    const windows = limits.windows;
    let short = false;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      const w = windows[i]!;
      const id = windowIdAt(now, w.windowMs, b.offset);
      if (id !== b.windowId) b.roll(id, windowEndMs(id, w.windowMs, b.offset), ++this.leases);
      b.roundDemand += cost;
      if (b.credit < cost) short = true;
    }
    if (!short) return this.take(subject, cost);
    return this.fastPath(subject, cost);
  }

  /** Applies a grant if it is new for its bucket; returns whether it changed anything. */
  applyGrant(g: Grant): boolean {
    this.lastContact = this.clock.monotonic();
    const b = this.bucketFor(g);
    if (b === undefined || g.nodeEpoch !== this.cfg.nodeEpoch || g.lease !== b.lease || g.grantSeq <= b.grantSeq) {
      this.stats.grantsIgnored++;
      return false;
    }
    b.grantSeq = g.grantSeq;
    // Cumulative: a grant only ever raises what this node holds.
    if (g.issued > b.issued) b.issued = g.issued;
    this.stats.grantsApplied++;
    return true;
  }

  /** Ends the round: one report batch per shard touched, handed to the link. */
  endRound(): ReportBatch[] {
    if (this.link.connected()) this.lastContact = this.clock.monotonic();
    const byShard = new Map<number, Report[]>();
    for (const s of this.touched) {
      s.limits.windows.forEach((w, i) => {
        const b = s.buckets[i] as Bucket;
        const shard = shardOf(s.keyId, b.windowId, this.cfg.shards);
        let list = byShard.get(shard);
        if (list === undefined) byShard.set(shard, (list = []));
        list.push({
          keyId: s.keyId,
          windowId: b.windowId,
          windowMs: w.windowMs,
          limit: w.limit,
          lease: b.lease,
          seq: this.roundNo,
          spent: b.spent,
          demand: this.demandOf(b),
          held: Math.max(0, b.credit),
          selfGrant: false,
        });
        b.lastDemand = b.roundDemand;
        b.roundDemand = 0;
      });
    }
    const batches: ReportBatch[] = [];
    for (const [shard, reports] of byShard) {
      const batch = { shard, nodeId: this.cfg.nodeId, nodeEpoch: this.cfg.nodeEpoch, round: this.roundNo, reports };
      batches.push(batch);
      this.link.publish(batch);
    }
    this.stats.reports += batches.length;
    this.touched = [];
    this.roundNo++;
    return batches;
  }

  private take(subject: Subject, cost: number): typeof ADMITTED {
    for (const b of subject.buckets) b.spent += cost;
    return ADMITTED;
  }

  private demandOf(b: Bucket): number {
    return Math.max(b.roundDemand, b.lastDemand) * this.cfg.demandRounds;
  }

  private fastPath(subject: Subject, cost: number): Acquired | Promise<Acquired> {
    const windows = subject.limits.windows;
    const requests: CreditRequest[] = [];
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      if (b.credit >= cost) continue;
      // At most once per bucket per round: a second miss in the same round is a denial.
      if (b.fastRound === this.roundNo) return this.deny(subject, cost);
      const w = windows[i]!;
      requests.push({
        keyId: subject.keyId,
        windowId: b.windowId,
        windowMs: w.windowMs,
        limit: w.limit,
        nodeId: this.cfg.nodeId,
        nodeEpoch: this.cfg.nodeEpoch,
        lease: b.lease,
        spent: b.spent,
        need: cost - b.credit,
        demand: Math.max(cost, this.demandOf(b)),
        fastPath: true,
      });
    }
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      if (b.credit < cost) b.fastRound = this.roundNo;
    }
    this.stats.fastPath++;
    const answer = this.link.requestCredit(requests, this.cfg.fastPathDeadlineMs);
    if (answer === undefined) return this.deny(subject, cost);
    if (!isPromise(answer)) {
      this.lastContact = this.clock.monotonic();
      for (const g of answer) this.applyGrant(g);
      return this.recheck(subject, cost);
    }
    return answer.then((grants) => {
      if (grants === undefined) this.stats.fastPathTimeouts++;
      else for (const g of grants) this.applyGrant(g);
      return this.recheck(subject, cost);
    });
  }

  /** After the fast path: take credit if every window now has it, else deny. */
  private recheck(subject: Subject, cost: number): Acquired {
    const now = this.clock.now();
    const windows = subject.limits.windows;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      // The window may have rolled while we waited: its fresh bucket has no credit yet.
      if (b.windowEnd <= now || b.credit < cost) return this.deny(subject, cost);
    }
    return this.take(subject, cost);
  }

  private deny(subject: Subject, cost: number): Denied {
    const now = this.clock.now();
    let latest: Bucket | undefined;
    let name = subject.limits.windows[0]!.name;
    subject.limits.windows.forEach((w, i) => {
      const b = subject.buckets[i] as Bucket;
      if (b.credit < cost && (latest === undefined || b.windowEnd > latest.windowEnd)) {
        latest = b;
        name = w.name;
      }
    });
    const wait = latest === undefined ? undefined : Math.max(0, latest.windowEnd - now);
    return { admitted: false, window: name, retryAfterMs: wait };
  }

  private bucketFor(g: Grant): Bucket | undefined {
    const s = this.buckets.peek(g.keyId);
    if (s === undefined) return undefined;
    const windows = s.limits.windows;
    for (let i = 0; i < windows.length; i++) {
      const b = s.buckets[i] as Bucket;
      if (windows[i]!.windowMs === g.windowMs && b.windowId === g.windowId) return b;
    }
    return undefined;
  }
}

function isPromise<T>(v: T | Promise<T>): v is Promise<T> {
  return typeof (v as { then?: unknown })?.then === 'function';
}

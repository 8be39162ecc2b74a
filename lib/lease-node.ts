import { Exhaustion, RATE_ONE, type Bucket } from './bucket.js';
import { BucketMap, type Subject } from './bucket-map.js';
import type { Clock } from './clock.js';
import { leaseTarget } from './lease-size.js';
import { SILENT_ROUNDS } from './membership.js';
import type { ResolvedLimits, WindowSpec } from './policy.js';
import { ADMITTED, type Acquired, type Denied, type Enforcer, type LeaseNodeConfig, type LeaseNodeStats, type OwnerLink } from './node-contract.js';
import { shardOf, type Adjust, type CreditRequest, type Grant, type OwnerMessage, type Report, type ReportBatch } from './protocol/messages.js';
import { windowEndMs, windowIdAt } from './window.js';

export { ADMITTED, type Acquired, type Denied, type LeaseNodeConfig, type LeaseNodeStats, type OwnerLink };

/** Below this smoothed rate (1/256 request per round) a quiet bucket drops out of the reports. */
const MIN_RATE = RATE_ONE / 256;
/**
 * Share of remote asks missing their deadline (× 256, smoothed over about 16 asks) above which the
 * fast path counts as unreliable: 26/256 ≈ 10 %, two misses close together. One miss alone (16) is
 * not enough: hedged leases strand credit, which a key using its whole allowance then misses.
 */
const UNRELIABLE_256 = 26;
/** Most requests' worth a key seen rarely on a node asks for while the fast path is unreliable. */
const HEDGE_MAX = 3;
/** Rounds before a window's end in which a node asks the next window's owner for credit ahead. */
const AHEAD_ROUNDS = 2;
/**
 * Clock skew between nodes allowed for, in rounds (50 ms): any two wall clocks agree within this,
 * steps included (each within a round of true time).
 */
export const SKEW_ROUNDS = 2;
/** A quiet bucket with fading demand is reported once in this many rounds. */
const IDLE_REPORT_ROUNDS = 8;

/**
 * Node side of the leasing protocol: buckets of leased credit, decremented all-or-nothing across a
 * key's windows; a request the credit held cannot cover asks the owner (the fast path, under a hard
 * deadline, rationed per round as in `settle`); each round one report batch per shard. Tracks owner
 * contact per shard for the failure states F2–F5. No timers or I/O inside: the caller drives `endRound()` and the link.
 */
export class LeaseNode implements Enforcer {
  readonly buckets: BucketMap;
  readonly stats: LeaseNodeStats = { fastPath: 0, fastPathTimeouts: 0, grantsApplied: 0, grantsIgnored: 0, staleOwnerEpoch: 0, adjustsApplied: 0, selfGrants: 0, reports: 0, charged: 0 };
  private roundNo = 0;
  /** Seq of the last report sent: every report carries a higher one, so the owner keeps the newest. */
  private reportSeq = 0;
  private touched: Subject[] = [];
  /** Window end of the last boundary self-grant per key and window length (F4), kept across eviction. */
  private readonly selfGranted = new Map<string, number>();
  /**
   * Shards holding a self-grant of this process: the end of the latest window it is for, and the
   * round of the first batch since its latest self-grant there (`NodeBeat.selfGranted`).
   */
  private readonly selfGrantShards = new Map<number, { end: number; round: number }>();
  /**
   * The final report of each self-granted bucket evicted before its window ended: sent again every
   * round until then, since owners take every batch after a self-grant as carrying it.
   */
  private readonly evictedSelfGrants = new Map<string, { shard: number; report: Report; end: number }>();
  /** Final reports of evicted subjects (their credit given back), sent at the end of the round. */
  private evicted: Array<{ shard: number; report: Report }> = [];
  /** Monotonic time of the last sign of life from each shard's owner. */
  private readonly contact: Float64Array;
  /** Highest owner epoch heard from for each shard: fencing against a deposed owner. */
  private readonly ownerEpochs: Float64Array;
  /** Whether some owner's silence was past `degradedAfterMs` at the end of the last round. */
  private isDegraded = false;
  /** Share of recent remote asks that missed their deadline, × 256. */
  private missed256 = 0;

  constructor(
    private readonly cfg: LeaseNodeConfig,
    private readonly clock: Clock,
    private readonly link: OwnerLink,
  ) {
    this.buckets = new BucketMap(cfg.maxBuckets, (s) => this.releaseAll(s));
    this.contact = new Float64Array(cfg.shards).fill(clock.monotonic());
    this.ownerEpochs = new Float64Array(cfg.shards);
  }

  /** Current round number (grows by one per `endRound()`). */
  get round(): number {
    return this.roundNo;
  }

  /**
   * True once some shard's owner has been out of reach for longer than `degradedAfterMs` (F5). Read
   * on every request (the X-RateLimit-Degraded header), so it is decided once per round, at its end:
   * it may lag a round behind either way. Refusals do not read it: an ask checks its owner's silence.
   */
  get degraded(): boolean {
    return this.isDegraded;
  }

  /** Milliseconds since the owner of `shard` was last heard from (0 while the transport reaches it). */
  silenceMs(shard: number): number {
    const mono = this.clock.monotonic();
    if (this.link.reachable(shard)) {
      this.contact[shard] = mono;
      return 0;
    }
    return mono - this.contact[shard]!;
  }

  /** The longest silence of any shard's owner toward this node, ms: how stale its newest fold may be. */
  longestSilenceMs(): number {
    let worst = 0;
    for (let s = 0; s < this.cfg.shards; s++) worst = Math.max(worst, this.silenceMs(s));
    return worst;
  }

  /**
   * Takes `cost` credit from every window of `limits` or from none. Synchronous when credit is held
   * or the owner is local; a promise only when the fast path has to cross the network.
   */
  acquire(keyId: string, limits: ResolvedLimits, cost = 1): Acquired | Promise<Acquired> {
    const now = this.clock.now();
    const subject = this.buckets.get(keyId, limits, now, this.roundNo);
    this.touch(subject);
    const windows = limits.windows;
    let short = false;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      this.rollToNow(keyId, b, windows[i]!, now);
      b.roundDemand += cost;
      if (b.credit < cost) short = true;
    }
    if (!short) return this.take(subject, cost);
    return this.fastPath(subject, cost);
  }

  /**
   * Charges `cost` to every window of `limits` for a request admitted without credit (the middleware
   * failing open while this node is degraded, F5): spent like any admission, so it is reported once
   * owners are back and the window holds no credit for it afterwards. Credit goes below zero; grants
   * fill that first.
   */
  charge(keyId: string, limits: ResolvedLimits, cost = 1): void {
    const now = this.clock.now();
    const subject = this.buckets.get(keyId, limits, now, this.roundNo);
    const windows = limits.windows;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      this.rollToNow(keyId, b, windows[i]!, now);
      b.spent += cost;
      b.dirty = true;
    }
    this.touch(subject);
    this.stats.charged += cost;
  }

  /** Applies a message from an owner; returns whether it changed anything. */
  onMessage(m: OwnerMessage): boolean {
    return m.type === 'grant' ? this.applyGrant(m) : this.applyAdjust(m);
  }

  /** Rejects a message from an owner older than one already heard from for its shard (L4). */
  private fenced(m: OwnerMessage): boolean {
    const shard = shardOf(m.keyId, m.windowId, this.cfg.shards);
    if (m.ownerEpoch < this.ownerEpochs[shard]!) {
      this.stats.staleOwnerEpoch++;
      return true;
    }
    this.ownerEpochs[shard] = m.ownerEpoch;
    return false;
  }

  /** Applies a grant if it is new for its lease (current or next window); a grant only raises credit. */
  applyGrant(g: Grant): boolean {
    if (this.fenced(g)) return false;
    const b = this.bucketFor(g.keyId, g.windowMs, g.nodeEpoch, g.lease);
    if (b !== undefined) this.heard(shardOf(g.keyId, g.windowId, this.cfg.shards));
    if (b !== undefined && g.windowId === b.windowId && g.grantSeq > b.grantSeq) {
      b.grantSeq = g.grantSeq;
      if (g.issued > b.issued) b.issued = g.issued;
      // A grant sized under an older, higher limit is cut to the one in force.
      this.trim(b, this.limitOf(g.keyId, g.windowMs));
      if (g.grantSeq > b.exhaustedSeq) b.exhausted = Exhaustion.None;
      this.stats.grantsApplied++;
      return true;
    }
    if (b !== undefined && g.windowId === b.windowId + 1 && (b.nextWindowId !== g.windowId || g.grantSeq > b.nextGrantSeq)) {
      b.nextWindowId = g.windowId;
      b.nextGrantSeq = g.grantSeq;
      b.nextIssued = Math.max(b.nextIssued, g.issued);
      // Listed, so the round after the rollover rolls it in even if no request comes (`endRound`).
      this.touch(this.buckets.peek(g.keyId)!);
      this.stats.grantsApplied++;
      return true;
    }
    this.stats.grantsIgnored++;
    return false;
  }

  /** Applies a recall (release what is held above `keep`) and/or an exhaustion notice. */
  applyAdjust(a: Adjust): boolean {
    if (this.fenced(a)) return false;
    const b = this.bucketFor(a.keyId, a.windowMs, a.nodeEpoch, a.lease);
    if (b === undefined || a.windowId !== b.windowId) return false;
    this.heard(shardOf(a.keyId, a.windowId, this.cfg.shards));
    if (a.keep >= 0 && b.credit > a.keep) {
      b.released += b.credit - a.keep;
      b.dirty = true;
      const s = this.buckets.peek(a.keyId);
      if (s !== undefined) {
        this.touch(s);
        this.reportNow(s, b, a.windowMs);
      }
    }
    // Exhausted: when what is held runs out, deny without asking (until a later grant, or until the
    // owner says credit came back: neither a recall nor exhausted).
    if (a.exhausted && a.grantSeq >= b.exhaustedSeq && a.grantSeq >= b.grantSeq) {
      b.exhausted = Exhaustion.Spent;
      b.exhaustedSeq = a.grantSeq;
    } else if (!a.exhausted && a.keep < 0 && a.grantSeq >= b.exhaustedSeq) {
      b.exhausted = Exhaustion.None;
    }
    this.stats.adjustsApplied++;
    return true;
  }

  /**
   * What a recall released, reported at once rather than at the round's end: the owner has it for
   * the next node that asks within a hop. Not to an owner in this process (it would fold the report
   * while still sending what it decided before, and a refill could overtake an older exhaustion
   * notice), nor for a window that has ended; those wait for the round.
   */
  private reportNow(s: Subject, b: Bucket, windowMs: number): void {
    const shard = shardOf(s.keyId, b.windowId, this.cfg.shards);
    if (b.windowEnd <= this.clock.now() || this.link.local?.(shard) === true) return;
    this.send(shard, [this.report(s.keyId, windowMs, this.limitOf(s.keyId, windowMs), b)], 0);
  }

  /**
   * Publishes one batch of reports for `shard`; what the link could not send is reported next round.
   * `round`: for a round's batch (everything up to this round's heartbeat) the round's number as the
   * heartbeat states it (counted from 1), 0 for a partial one.
   */
  private send(shard: number, reports: Report[], round = this.roundNo + 1): ReportBatch {
    const batch: ReportBatch = { shard, nodeId: this.cfg.nodeId, nodeEpoch: this.cfg.nodeEpoch, round, reports };
    this.stats.reports++;
    if (!this.link.publish(batch)) this.unsent(batch);
    return batch;
  }

  /**
   * The owner of these shards changed and may have had no log to replay (Redis lost it): every bucket
   * of theirs in a current window is reported at the end of this round, idle or not, so the new owner
   * learns what is held and spent before it issues more.
   */
  resync(shards: ReadonlySet<number>): void {
    const now = this.clock.now();
    for (const s of this.buckets.values()) {
      let any = false;
      for (const b of s.buckets) {
        if (b.windowEnd > now && shards.has(shardOf(s.keyId, b.windowId, this.cfg.shards))) {
          b.dirty = true;
          any = true;
        }
      }
      if (any) this.touch(s);
    }
  }

  /** Ends the round: a heartbeat, then one report batch per shard with something to report (B2). */
  endRound(): ReportBatch[] {
    const mono = this.clock.monotonic();
    const now = this.clock.now();
    let oldest = mono;
    for (let s = 0; s < this.cfg.shards; s++) {
      if (this.link.reachable(s)) this.contact[s] = mono;
      oldest = Math.min(oldest, this.contact[s]!);
    }
    this.isDegraded = mono - oldest > this.cfg.degradedAfterMs;
    // Owners hold back this node's share in a shard where it granted itself credit until they fold
    // its first batch since (`lib/membership.ts`): a self-granted bucket is in every batch. The
    // contact times as they are now: a grant landing before the transport writes this heartbeat must
    // not make it say more than the rest of it does.
    const selfGranted = new Map<number, number>();
    for (const [shard, g] of this.selfGrantShards) {
      if (g.end > now) selfGranted.set(shard, g.round);
      else this.selfGrantShards.delete(shard);
    }
    this.link.heartbeat({ selfGranted, contact: Float64Array.from(this.contact) });
    const byShard = new Map<number, Report[]>();
    for (const { shard, report } of this.evicted) this.queue(byShard, shard, report);
    this.evicted = [];
    for (const [mark, e] of this.evictedSelfGrants) {
      if (e.end <= now) this.evictedSelfGrants.delete(mark);
      else this.queue(byShard, e.shard, e.report);
    }
    const next: Subject[] = [];
    for (const s of this.touched) {
      if (s.evicted) continue;
      const windows = s.limits.windows;
      let keep = false;
      for (let i = 0; i < windows.length; i++) {
        const b = s.buckets[i] as Bucket;
        const w = windows[i]!;
        // Credit granted ahead for a window that began without a request here is rolled in, so it is
        // reported and given back like any lease's instead of stranding until the window ends.
        if (b.windowEnd <= now && b.nextIssued > 0) {
          const id = windowIdAt(now, w.windowMs, b.offset);
          if (id === b.nextWindowId) this.rollBucket(s.keyId, b, id, w.windowMs, w.limit);
        }
        // Smoothed over about sixteen rounds (400 ms): one request is not a rate of one per round, and
        // a lull of a few rounds is not the end of a key's traffic on this node.
        b.rate += Math.floor((b.roundDemand * RATE_ONE - b.rate) / 16);
        // What it gives back is reported this round, even by a bucket that saw no request. Not right
        // after a request was told to retry in a round: a late answer's credit is kept for the retry.
        if (this.roundNo - s.shortRound > 1) this.shed(b, now);
        const idle = b.roundDemand === 0 && !b.dirty;
        // A bucket of an ended window has nothing to say, nor a quiet one whose demand has faded: that
        // one's rate is forgotten, or what is left of it would outlive its key's traffic here.
        const faded = idle && b.rate < MIN_RATE && b.selfIssued === 0;
        if (faded) b.rate = 0;
        if (faded || b.windowEnd <= now) continue;
        keep = true;
        // A quiet one is reported the first round it is quiet (the owner sees its demand drop), then
        // every IDLE_REPORT_ROUNDS rounds; one carrying a self-grant every round (F4).
        if (!idle || b.selfIssued > 0 || this.roundNo - b.reportedRound === 1 || this.roundNo % IDLE_REPORT_ROUNDS === 0) {
          this.queue(byShard, shardOf(s.keyId, b.windowId, this.cfg.shards), this.report(s.keyId, w.windowMs, w.limit, b));
          if (!idle) b.reportedRound = this.roundNo;
        }
        // Ask the next window's owner (another shard) for credit ahead of the rollover.
        if (b.windowEnd - now <= AHEAD_ROUNDS * this.cfg.roundMs) {
          this.queue(byShard, shardOf(s.keyId, b.windowId + 1, this.cfg.shards), this.nextReport(s.keyId, w.windowMs, w.limit, b));
        }
        b.roundDemand = 0;
        b.dirty = false;
      }
      // Buckets with demand stay on the list so the owner keeps hearing it; idle ones drop off.
      s.listed = keep;
      if (keep) next.push(s);
    }
    this.touched = next;
    if (this.selfGranted.size > 0 && this.roundNo % 40 === 0) {
      for (const [mark, end] of this.selfGranted) if (end <= now) this.selfGranted.delete(mark);
    }
    const batches: ReportBatch[] = [];
    for (const [shard, reports] of byShard) batches.push(this.send(shard, reports));
    this.roundNo++;
    return batches;
  }

  /** A batch the link could not send: its buckets are reported again next round (counts are cumulative). */
  private unsent(batch: ReportBatch): void {
    for (const r of batch.reports) {
      const s = this.buckets.peek(r.keyId);
      const b = this.bucketFor(r.keyId, r.windowMs, this.cfg.nodeEpoch, r.lease);
      if (s === undefined || b === undefined || s.evicted) continue;
      b.dirty = true;
      this.touch(s);
    }
  }

  private queue(byShard: Map<number, Report[]>, shard: number, report: Report): void {
    const list = byShard.get(shard);
    if (list === undefined) byShard.set(shard, [report]);
    else list.push(report);
  }

  /** The report for the window after the bucket's current one: nothing spent yet, the current demand. */
  private nextReport(keyId: string, windowMs: number, limit: number, b: Bucket): Report {
    const next = b.nextWindowId === b.windowId + 1;
    return {
      keyId,
      windowId: b.windowId + 1,
      windowMs,
      limit,
      lease: b.lease,
      seq: ++this.reportSeq,
      spent: 0,
      issued: next ? b.nextIssued : 0,
      selfIssued: 0,
      released: 0,
      demand: this.demandOf(b),
      held: next ? b.nextIssued : 0,
      selfGrant: false,
    };
  }

  private report(keyId: string, windowMs: number, limit: number, b: Bucket): Report {
    return {
      keyId,
      windowId: b.windowId,
      windowMs,
      limit,
      lease: b.lease,
      seq: ++this.reportSeq,
      spent: b.spent,
      issued: b.issued,
      selfIssued: b.selfIssued,
      released: b.released,
      demand: this.demandOf(b),
      held: Math.max(0, b.credit),
      selfGrant: b.selfIssued > 0,
    };
  }

  /** Gives back every bit of unspent credit of a subject about to be evicted, and queues its report. */
  private releaseAll(subject: Subject): void {
    const now = this.clock.now();
    subject.evicted = true;
    subject.limits.windows.forEach((w, i) => {
      const b = subject.buckets[i] as Bucket;
      if (b.windowEnd <= now) return;
      if (b.credit > 0) b.released += b.credit;
      const shard = shardOf(subject.keyId, b.windowId, this.cfg.shards);
      const report = this.report(subject.keyId, w.windowMs, w.limit, b);
      if (b.selfIssued > 0) this.evictedSelfGrants.set(`${subject.keyId}|${w.windowMs}|${b.lease}`, { shard, report, end: b.windowEnd });
      else this.evicted.push({ shard, report });
      // Credit granted ahead for the next window goes back to that window's owner.
      if (b.nextWindowId === b.windowId + 1 && b.nextIssued > 0) {
        const ahead = this.nextReport(subject.keyId, w.windowMs, w.limit, b);
        this.evicted.push({ shard: shardOf(subject.keyId, b.windowId + 1, this.cfg.shards), report: { ...ahead, released: b.nextIssued, held: 0 } });
      }
    });
  }

  private touch(subject: Subject): void {
    subject.touchedRound = this.roundNo;
    if (!subject.listed) {
      subject.listed = true;
      this.touched.push(subject);
    }
  }

  /**
   * Rolls `b` into the window of `w` running at `now`, if it is in an earlier one — never back into
   * an earlier one. A wall clock stepped back over a boundary (within the skew allowed) leaves the
   * bucket in the window it is in until the clock is past that window's start again: admissions go
   * on counting there, against its credit. Rolling back would reset the bucket's counts while the
   * owner's ledger keeps them, and a restated grant (cumulative) would then hand it again what it
   * had spent already.
   */
  private rollToNow(keyId: string, b: Bucket, w: WindowSpec, now: number): void {
    const id = windowIdAt(now, w.windowMs, b.offset);
    if (!(id <= b.windowId)) this.rollBucket(keyId, b, id, w.windowMs, w.limit);
  }

  private heard(shard: number): void {
    this.contact[shard] = this.clock.monotonic();
  }

  /**
   * Rolls a bucket into window `id`. With no owner contact for the last rounds (F2) and no credit
   * granted ahead for the new window, the node grants itself exactly 1/fleet of the allowance (F4),
   * and reports self_grant for the rest of the window; a degraded node does not (F5).
   */
  private rollBucket(keyId: string, b: Bucket, id: number, windowMs: number, limit: number): void {
    b.roll(id, windowEndMs(id, windowMs, b.offset));
    // Credit granted ahead under a higher limit is cut to the current one.
    this.trim(b, limit);
    if (b.issued > 0) return;
    const silence = this.silenceMs(shardOf(keyId, id, this.cfg.shards));
    // Only into a window that began well into the silence. Owners hold this node's possible
    // self-grant back from SILENT_ROUNDS after its last heartbeat, but may have granted credit for a
    // window up to AHEAD_ROUNDS before it begins (by another node's clock, up to SKEW_ROUNDS apart):
    // credit already out before they held anything back. A window that began earlier (a first sight
    // mid-window, a key reloaded) gets no self-grant: its requests are refused, never over-admitted.
    const intoWindow = this.clock.now() - (b.windowEnd - windowMs);
    const before = (AHEAD_ROUNDS + SILENT_ROUNDS + SKEW_ROUNDS) * this.cfg.roundMs;
    if (silence >= this.cfg.missedRoundsLimit * this.cfg.roundMs && silence - intoWindow >= before && silence <= this.cfg.degradedAfterMs) {
      // Once per key and window, even if the bucket is evicted and reloaded meanwhile: the owners'
      // holdback covers one self-grant per node per window, not one per reload.
      const mark = `${keyId}|${windowMs}`;
      if (this.selfGranted.get(mark) === b.windowEnd) return;
      this.selfGranted.set(mark, b.windowEnd);
      b.selfIssued = Math.floor(limit / Math.max(1, this.link.fleetSize()));
      if (b.selfIssued > 0) {
        b.dirty = true;
        this.stats.selfGrants++;
        const shard = shardOf(keyId, id, this.cfg.shards);
        // Reported in this round's batch (`send` numbers it roundNo + 1) and every later one.
        this.selfGrantShards.set(shard, { end: Math.max(this.selfGrantShards.get(shard)?.end ?? 0, b.windowEnd), round: this.roundNo + 1 });
        this.link.selfGranted?.(shard, this.roundNo + 1);
      }
    }
  }

  /** Gives back credit above what `limit` still allows in the window (reported as released). */
  private trim(b: Bucket, limit: number): void {
    const excess = b.credit - Math.max(0, limit - b.spent);
    if (excess > 0) {
      b.released += excess;
      b.dirty = true;
    }
  }

  private take(subject: Subject, cost: number): typeof ADMITTED {
    for (const b of subject.buckets) b.spent += cost;
    return ADMITTED;
  }

  /**
   * Requests this bucket expects over the next `demandRounds`, from its smoothed rate. A key this node
   * sees less than about once a round asks for what each request needs and holds no lease here
   * (`lib/lease-size.ts`); a busy key new to this node asks per request until its rate shows.
   */
  private demandOf(b: Bucket): number {
    const demand = (b.rate / RATE_ONE) * this.cfg.demandRounds;
    if (b.rate === 0 || this.missed256 <= UNRELIABLE_256) return demand;
    // While remote asks often miss their deadline (a busy host, a slow bus), a key this node served
    // lately asks for what its rate says it will spend by the window's end — at least one request,
    // at most HEDGE_MAX, below a busy lease so the owner's room bounds it — instead of asking per
    // request: a little credit may strand rather than most such requests being refused.
    const untilEnd = ((b.rate / RATE_ONE) * Math.max(0, b.windowEnd - this.clock.now())) / this.cfg.roundMs;
    return Math.max(demand, Math.min(HEDGE_MAX, Math.max(1, untilEnd)));
  }

  private noteAsk(missed: boolean): void {
    this.missed256 += ((missed ? 256 : 0) - this.missed256) >> 4;
  }

  /**
   * Gives back credit this node is not going to need (L1): above twice what the lease-size rule
   * (`lib/lease-size.ts`) gives its demand now, down to that. The owner sees the release in this
   * round's report and can issue it where requests are.
   */
  private shed(b: Bucket, now: number): void {
    if (b.credit <= 0) return;
    const keep = leaseTarget(this.demandOf(b), (b.windowEnd - now) / this.cfg.roundMs, this.cfg.demandRounds, this.cfg.headroom);
    if (b.credit > 2 * keep) {
      b.released += b.credit - keep;
      b.dirty = true;
    }
  }

  private fastPath(subject: Subject, cost: number): Acquired | Promise<Acquired> {
    // An ask for this key is on its way: share its answer instead of asking again (a second ask
    // would outlast the hard deadline). Whatever happens to the ask, the waiters are answered.
    if (subject.asking !== undefined) {
      const recheck = (): Acquired => this.recheck(subject, cost);
      return subject.asking.then(recheck, recheck);
    }
    const sent = this.ask(subject, cost);
    if (!('requests' in sent)) return sent;
    const { requests, answer, blocked, remote } = sent;
    if (!isPromise(answer)) {
      if (remote) this.noteAsk(false);
      this.settle(requests, answer);
      return blocked ? this.deny(subject, cost, false) : this.recheck(subject, cost);
    }
    const settled = answer.then(
      (grants) => {
        subject.asking = undefined;
        this.noteAsk(grants === undefined);
        if (grants === undefined) this.stats.fastPathTimeouts++;
        else this.settle(requests, grants);
      },
      (err: unknown) => {
        // Never left pending: a stuck ask would send every later request of this key to fail-open.
        subject.asking = undefined;
        throw err;
      },
    );
    subject.asking = settled;
    return settled.then(() => (blocked ? this.deny(subject, cost, false) : this.recheck(subject, cost)));
  }

  /**
   * Asks the owners of every window short of `cost` for it: the requests and the answer (a promise
   * across the network, settled by the hard deadline), or a denial when no window may ask now.
   */
  private ask(subject: Subject, cost: number): Denied | { requests: CreditRequest[]; answer: readonly Grant[] | Promise<readonly Grant[] | undefined>; blocked: boolean; remote: boolean } {
    const windows = subject.limits.windows;
    const requests: CreditRequest[] = [];
    // A short window that cannot ask now dooms this request, but the others still ask (once per
    // round): their answers say which windows are really spent, for an honest Retry-After.
    let blocked = false;
    let remote = false;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      if (b.credit >= cost) continue;
      const shard = shardOf(subject.keyId, b.windowId, this.cfg.shards);
      const silence = this.silenceMs(shard);
      // F5: degraded and out of credit — the limiter cannot decide; the backstop is the bound.
      if (silence > this.cfg.degradedAfterMs) return this.deny(subject, cost, true);
      // F2: two missed rounds — no fast path, enforce with what is held. D2 across the network (an
      // owner in this process answers for free): see `settle`. And no asking when the owner said
      // the window has nothing left for us.
      const local = this.link.local?.(shard) === true;
      if (silence >= this.cfg.missedRoundsLimit * this.cfg.roundMs || (!local && b.fastRound >= this.roundNo) || b.exhausted !== Exhaustion.None) {
        blocked = true;
        continue;
      }
      const w = windows[i]!;
      b.fastRound = this.roundNo;
      remote ||= !local;
      requests.push({
        keyId: subject.keyId,
        windowId: b.windowId,
        windowMs: w.windowMs,
        limit: w.limit,
        nodeId: this.cfg.nodeId,
        nodeEpoch: this.cfg.nodeEpoch,
        lease: b.lease,
        spent: b.spent,
        selfIssued: b.selfIssued,
        released: b.released,
        need: cost - b.credit,
        demand: this.demandOf(b),
        fastPath: true,
      });
    }
    if (requests.length === 0) return this.deny(subject, cost, false);
    this.stats.fastPath++;
    const answer = this.link.requestCredit(requests, this.cfg.fastPathDeadlineMs);
    if (answer === undefined) {
      if (remote) this.noteAsk(true);
      return this.deny(subject, cost, false);
    }
    return { requests, answer, blocked, remote };
  }

  /**
   * Applies a fast-path answer. D2 as this node keeps it: a remote ask that went unanswered blocks
   * asks for the rest of the round; one answered with nothing for the next round too (the owner has
   * recalled idle credit, which lands in the pool a round later); one answered with credit blocks
   * nothing, so a key seen a few times a second on a node gets one ask per request and holds no
   * lease. Denials say "one round", not "until the window ends": only the owner's exhaustion notice
   * says the window is spent.
   */
  private settle(requests: readonly CreditRequest[], grants: readonly Grant[]): void {
    for (const r of requests) this.heard(shardOf(r.keyId, r.windowId, this.cfg.shards));
    for (const g of grants) this.applyGrant(g);
    for (const r of requests) {
      const b = this.bucketFor(r.keyId, r.windowMs, r.nodeEpoch, r.lease);
      if (b === undefined || b.windowId !== r.windowId) continue;
      // Granted: the next request may ask again (each grant is credit, so this is bounded by the
      // allowance). Nothing: no ask this round or the next.
      b.fastRound = b.credit > 0 ? -1 : this.roundNo + 1;
    }
  }

  /** After the fast path: take credit if every window now has it, else deny. */
  private recheck(subject: Subject, cost: number): Acquired {
    const now = this.clock.now();
    const windows = subject.limits.windows;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      // The window may have rolled while we waited: its fresh bucket has no credit yet.
      if (b.windowEnd <= now || b.credit < cost) return this.deny(subject, cost, false);
    }
    return this.take(subject, cost);
  }

  /**
   * Denial for `subject`. A window could deny this key now if it is short here and the owner said it
   * has nothing left (exhausted): Retry-After is the wait to the latest such boundary (H2). A window
   * that is only short here (its ask is spent for this round, or the owner is out of reach) may get
   * credit next round: then the wait is one round, not a whole window.
   */
  private deny(subject: Subject, cost: number, unavailable: boolean): Denied {
    const now = this.clock.now();
    let spent: Bucket | undefined;
    let spentName = '';
    let short: Bucket | undefined;
    let shortName = '';
    subject.limits.windows.forEach((w, i) => {
      const b = subject.buckets[i] as Bucket;
      // Credit in a window that ended while an ask was out covers nothing: its successor is short.
      if (b.credit >= cost && b.windowEnd > now) return;
      if (b.exhausted === Exhaustion.Spent && (spent === undefined || b.windowEnd > spent.windowEnd)) {
        spent = b;
        spentName = w.name;
      } else if (short === undefined) {
        short = b;
        shortName = w.name;
      }
    });
    if (unavailable) return { admitted: false, window: spentName || shortName, retryAfterMs: undefined, unavailable };
    if (spent !== undefined) return { admitted: false, window: spentName, retryAfterMs: Math.max(0, spent.windowEnd - now), unavailable };
    const wait = short === undefined ? undefined : Math.min(this.cfg.roundMs, Math.max(0, short.windowEnd - now));
    subject.shortRound = this.roundNo;
    return { admitted: false, window: shortName || subject.limits.windows[0]!.name, retryAfterMs: wait, unavailable };
  }

  private limitOf(keyId: string, windowMs: number): number {
    const w = this.buckets.peek(keyId)?.limits.windows.find((x) => x.windowMs === windowMs);
    return w === undefined ? Number.POSITIVE_INFINITY : w.limit;
  }

  private bucketFor(keyId: string, windowMs: number, nodeEpoch: string, lease: number): Bucket | undefined {
    if (nodeEpoch !== this.cfg.nodeEpoch) return undefined;
    const s = this.buckets.peek(keyId);
    if (s === undefined) return undefined;
    const windows = s.limits.windows;
    for (let i = 0; i < windows.length; i++) {
      const b = s.buckets[i] as Bucket;
      if (windows[i]!.windowMs === windowMs && b.lease === lease) return b;
    }
    return undefined;
  }
}

function isPromise<T>(v: T | Promise<T>): v is Promise<T> {
  return typeof (v as { then?: unknown })?.then === 'function';
}

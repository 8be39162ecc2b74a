import { smoothed, type Bucket } from '../bucket.js';
import { QUIET_MAX, quietFor, quietSince, type Subject } from '../bucket-map.js';
import { shardOf, type Report, type ReportBatch } from '../protocol/messages.js';
import { windowIdAt } from '../window.js';
import { NodeAsks } from './asks.js';
import { AHEAD_ROUNDS, ASK_AHEAD_ROUNDS, SLOT_ROUNDS } from './boundary.js';
import { demandMark } from './demand.js';
import { RESYNC_ROUNDS } from './reports.js';

/** A quiet bucket with fading demand is reported once in this many rounds. */
const IDLE_REPORT_ROUNDS = 8;
/** A bucket's last rounds in its window, in which what it spent is reported at once (`mayWait`). */
const TAIL_ROUNDS = AHEAD_ROUNDS + 1;
/**
 * How far the rounds' pace may drift from the wall clock, in rounds either way, before every quiet
 * subject is woken (`wakeAll`); and the rounds a quiet spell ends before a window's last rounds. The
 * time of N rounds passed over then differs from N rounds by at most 2 × QUIET_DRIFT < QUIET_SLACK + 1
 * rounds, so none is passed over into them.
 */
const QUIET_DRIFT = 2;
const QUIET_SLACK = 4;
/** ln(16/15): a round with no request keeps 15/16 of a bucket's rate, less one at most. */
const DECAY_LOG = Math.log(16 / 15);

/**
 * The round, driven by the caller: at its end a heartbeat, then for each listed bucket the credit
 * granted ahead rolled in, its smoothed rate, its give-backs, its report and the ask ahead for the
 * next window, one batch per shard (B2). Also what a round sends besides the requests' buckets: the
 * final reports of evicted subjects, and all that is held for shards whose new owner may have had no
 * log to replay (`resync`).
 */
export abstract class NodeRound extends NodeAsks {
  /**
   * The final report of each self-granted bucket evicted before its window ended: sent again every
   * round until then, since owners take every batch after a self-grant as carrying it.
   */
  private readonly evictedSelfGrants = new Map<string, { shard: number; report: Report; end: number }>();
  /** The fleet size, and the wall-clock time and round, at the last round no subject was passed over (`wakeAll`). */
  private quietFleet = 0;
  private paceAt = 0;
  private paceRound = 0;
  /** Monotonic time the last round ended: how late rounds come lately (`endRound`'s ask ahead). */
  private endedAt: number | undefined;

  /**
   * The owner of these shards changed and may have had no log to replay (Redis lost it): every bucket
   * of theirs in a current window is reported at the end of this round, idle or not, and so is credit
   * granted ahead for a next window there, so the new owner learns what is held and spent before it
   * issues more.
   */
  resync(shards: ReadonlySet<number>): void {
    const now = this.clock.now();
    for (const s of shards) this.resynced.set(s, { epoch: this.ownerEpochs[s]!, until: this.roundNo + RESYNC_ROUNDS });
    for (const s of this.buckets.values()) {
      this.wake(s);
      let any = false;
      s.buckets.forEach((b, i) => {
        if (b.windowEnd > now && shards.has(shardOf(s.keyId, b.windowId, this.cfg.shards))) {
          b.dirty = true;
          any = true;
        }
        // Credit granted ahead for the next window, on a shard that changed owner: the ask ahead
        // states it, so the new owner counts it before it issues that window anything.
        const next = shardOf(s.keyId, b.windowId + 1, this.cfg.shards);
        if (b.nextWindowId === b.windowId + 1 && b.nextIssued > 0 && shards.has(next)) {
          const w = s.limits.windows[i]!;
          this.finalReports.push({ shard: next, report: this.nextReport(s.keyId, w.windowMs, w.limit, b, s.limits.fixedShare) });
        }
      });
      if (any) this.touch(s);
    }
  }

  /** Ends the round: a heartbeat, then one report batch per shard with something to report (B2). */
  endRound(): ReportBatch[] {
    const mono = this.clock.monotonic();
    const now = this.clock.now();
    // Rounds coming late (a starved CPU): the next may come after a window's last rounds, so an ask
    // ahead waiting for them goes as many rounds earlier, within the ASK_AHEAD_ROUNDS allowed.
    const lateMs = this.endedAt === undefined ? 0 : Math.max(0, mono - this.endedAt - this.cfg.roundMs);
    this.endedAt = mono;
    let oldest = mono;
    for (let s = 0; s < this.cfg.shards; s++) {
      if (this.link.reachable(s)) this.contact[s] = mono;
      oldest = Math.min(oldest, this.contact[s]!);
    }
    this.isDegraded = mono - oldest > this.cfg.degradedAfterMs;
    // The shards this node granted itself credit in (`selfGrantStatement`), and the contact times as
    // they are now: a grant landing before the transport writes this heartbeat must not make it say
    // more than the rest of it does.
    const selfGranted = this.selfGrantStatement(now);
    this.link.heartbeat({ selfGranted, contact: Float64Array.from(this.contact) });
    const byShard = new Map<number, Report[]>();
    for (const [mark, e] of this.evictedSelfGrants) {
      if (e.end <= now) this.evictedSelfGrants.delete(mark);
      else this.queue(byShard, e.shard, e.report);
    }
    const wakeAll = this.wakeAll(now);
    const next: Subject[] = [];
    // Reports that may wait for their shard's slot (`canWait`), decided once every batch of the round is known.
    const waiting: Array<{ s: Subject; b: Bucket; limit: number; shard: number; demand: number; spent: boolean }> = [];
    for (const s of this.reportList) {
      if (s.evicted) continue;
      // A quiet subject is passed over until it is due, or a request or a grant wakes it.
      if (s.quiet !== 0 && !wakeAll && quietSince(s.quiet, this.roundNo) < (s.quiet & QUIET_MAX)) {
        next.push(s);
        continue;
      }
      this.wake(s);
      const windows = s.limits.windows;
      let keep = false;
      // What its buckets give back is reported this round, even by one that saw no request. Not right
      // after a request was told to retry in a round: a late answer's credit is kept for the retry. A
      // fixed share is kept whatever the demand: it would not come back (`lib/owner/fixed-share.ts`).
      // Neither goes quiet: the first gives back next round, a fixed share reports by rules of its own.
      const sheds = this.roundNo - s.shortRound > 1 && !s.limits.fixedShare;
      // For how many rounds it may be passed over from the next on (`quietRounds`): 0, none.
      let quiet = sheds ? QUIET_MAX : 0;
      for (let i = 0; i < windows.length; i++) {
        const b = s.buckets[i] as Bucket;
        const w = windows[i]!;
        // Credit granted ahead for a window that began without a request here is rolled in, so it is
        // reported and given back like any lease's instead of stranding until the window ends.
        if (b.windowEnd <= now && b.nextIssued > 0) {
          const id = windowIdAt(now, w.windowMs, b.offset);
          if (id === b.nextWindowId) this.rollBucket(s.keyId, b, id, w.windowMs, w.limit);
        }
        b.rate = smoothed(b.rate, b.roundDemand);
        b.seen += b.roundDemand;
        // Its demand this round: what the give-back, the choice to report and the report go by.
        const demand = this.demandOf(b, w.limit);
        if (sheds) this.shed(b, w.limit, demand, now);
        const idle = b.roundDemand === 0 && !b.dirty;
        // Counted (rate, seen, idle): not again next round, even by a bucket whose window ended meanwhile
        // (left below with nothing to say, it would add a request a round to its rate while listed).
        b.roundDemand = 0;
        // A bucket of an ended window has nothing to say, nor a quiet one whose demand has faded: that
        // one's rate is forgotten, or what is left of it would outlive its key's traffic here. Not
        // while it holds credit granted ahead: that is rolled in, given back and reported first.
        const faded = idle && b.rate < this.fadeRate(w.limit) && b.selfIssued === 0 && b.nextIssued === 0;
        if (faded) b.rate = 0;
        if (b.windowEnd <= now) this.reportEnded(s.keyId, w.windowMs, w.limit, b);
        if (faded) {
          if (b.credit > 0) {
            quiet = 0;
            if (b.windowEnd > now && !s.limits.fixedShare && this.recallSpares(b))
              this.queue(byShard, shardOf(s.keyId, b.windowId, this.cfg.shards), this.report(s.keyId, w.windowMs, w.limit, b, false, 0));
          }
          continue;
        }
        if (b.windowEnd <= now) {
          // Ended, not yet faded: until it does, it may still give credit back (`shed`) or roll credit
          // in, and a wall clock stepped back within the drift allowed could bring its window back.
          const over = now - b.windowEnd >= 2 * QUIET_DRIFT * this.cfg.roundMs;
          if (quiet > 0) quiet = idle && over && b.nextIssued === 0 && (b.credit <= 0 || this.steady(w.limit, demand)) ? Math.min(quiet, this.fadeRounds(b, w.limit)) : 0;
          continue;
        }
        keep = true;
        // A quiet one is reported the first round it is quiet (the owner sees its demand drop), then
        // every IDLE_REPORT_ROUNDS rounds, while its demand moves (a standing lease's does not: its
        // report would say nothing new); one carrying a self-grant every round (F4). A standing lease
        // puts off the report of what it spent while it holds enough (`mayWait`): until it runs low,
        // its window's last rounds (or end: `reportEnded`), or the round its rate fades, when it
        // gives its credit back (`shed`, above) and so is reported before it leaves the list.
        const tail = b.windowEnd - now <= TAIL_ROUNDS * this.cfg.roundMs;
        const news = idle && ((b.unreported && tail) || ((this.roundNo - b.reportedRound === 1 || this.roundNo % IDLE_REPORT_ROUNDS === 0) && demandMark(demand) !== b.reportedDemand));
        if (!idle && !b.dirty && !tail && !s.limits.fixedShare && this.mayWait(b, w.limit, demand)) b.unreported = true;
        else if (!idle || b.selfIssued > 0 || news) {
          const shard = shardOf(s.keyId, b.windowId, this.cfg.shards);
          if (!tail && !s.limits.fixedShare && !this.slot(shard) && this.canWait(b, w.limit, SLOT_ROUNDS)) {
            waiting.push({ s, b, limit: w.limit, shard, demand, spent: !idle });
            quiet = 0;
          } else {
            this.queue(byShard, shard, this.report(s.keyId, w.windowMs, w.limit, b, s.limits.fixedShare, demand));
            if (!idle) b.reportedRound = this.roundNo;
          }
        }
        // Ask the next window's owner (another shard) for credit ahead of the rollover: in the window's
        // last AHEAD_ROUNDS; under a plentiful plan while nothing is granted ahead, in that shard's slot
        // (`SLOT_ROUNDS`) or in the last AHEAD_ROUNDS, and every round while that shard was resynced
        // (credit granted ahead by an owner that may have had no log is restated to the next).
        const left = b.windowEnd - now;
        if (left <= ASK_AHEAD_ROUNDS * this.cfg.roundMs) {
          const shard = shardOf(s.keyId, b.windowId + 1, this.cfg.shards);
          const last = left <= AHEAD_ROUNDS * this.cfg.roundMs + lateMs;
          const granted = b.nextWindowId === b.windowId + 1;
          const ask = s.limits.fixedShare || !this.plentiful(w.limit) ? last : this.resynced.has(shard) || (!granted && (last || this.slot(shard)));
          if (ask) this.queue(byShard, shard, this.nextReport(s.keyId, w.windowMs, w.limit, b, s.limits.fixedShare));
        }
        b.dirty = false;
        if (quiet > 0) quiet = idle ? Math.min(quiet, this.quietRounds(b, w.limit, demand, now)) : 0;
      }
      // Buckets with demand stay on the list so the owner keeps hearing it; idle ones drop off.
      s.listed = keep;
      if (keep) next.push(s);
      if (keep && quiet > 0) s.quiet = quietFor(this.roundNo, quiet);
    }
    this.reportList = next;
    this.passRound = this.roundNo + 1;
    for (const { shard, report } of this.finalReports) this.queue(byShard, shard, report);
    this.finalReports = [];
    // A report that waits goes with a batch its shard gets anyway, else in a later round: its bucket
    // stays dirty, and its subject is not passed over.
    for (const x of waiting) {
      if (!byShard.has(x.shard)) {
        // Said by `reportEnded` if its window ends first (late rounds).
        x.b.dirty = true;
        x.b.unreported = true;
        continue;
      }
      this.queue(byShard, x.shard, this.report(x.s.keyId, x.b.windowMs, x.limit, x.b, false, x.demand));
      if (x.spent) x.b.reportedRound = this.roundNo;
    }
    this.forgetEndedSelfGrants(now);
    const batches: ReportBatch[] = [];
    for (const [shard, reports] of byShard) batches.push(this.send(shard, reports));
    for (const [shard, r] of this.resynced) if (r.until <= this.roundNo + 1 && this.ownerEpochs[shard]! > r.epoch) this.resynced.delete(shard);
    this.roundNo++;
    return batches;
  }

  /** Whether `shard`'s batch goes out this round with reports that could wait: its slot, or it is resynced. */
  private slot(shard: number): boolean {
    return (this.roundNo + shard) % SLOT_ROUNDS === 0 || this.resynced.has(shard);
  }

  /**
   * For how many rounds from the next on an idle bucket that went through this round may be passed
   * over if no request or grant comes (0: none). Going through it then would do nothing: its demand is
   * steady (a standing lease: `steady`) and reported as it is, it holds no self-grant, and its rate,
   * decaying, stays above where it fades (`fadeRate`) for those rounds; and they end QUIET_SLACK rounds'
   * time before its window's last rounds (`TAIL_ROUNDS`), whose reports, ask ahead and roll-in follow
   * the clock. So a key seen every second or so costs a visit or two per request, not one every round:
   * at 1,000 such keys on a fleet member, that pass was a fifth of what its limiter cost beyond bare Express.
   */
  protected quietRounds(b: Bucket, limit: number, demand: number, now: number): number {
    if (b.selfIssued > 0 || !this.steady(limit, demand) || demandMark(demand) !== b.reportedDemand) return 0;
    const untilTail = Math.floor((b.windowEnd - TAIL_ROUNDS * this.cfg.roundMs - now) / this.cfg.roundMs) - QUIET_SLACK;
    return Math.max(0, Math.min(this.fadeRounds(b, limit), untilTail));
  }

  /**
   * Rounds with no request for which `b`'s rate surely stays at or above where it fades (`fadeRate`),
   * at most QUIET_MAX: a round with no request takes ⌈rate / 16⌉ off, so after k at least
   * rate · (15/16)^k − 16 is left. A lower bound: passed over that long, it is gone through once more
   * before it fades, never after.
   */
  private fadeRounds(b: Bucket, limit: number): number {
    const fade = this.fadeRate(limit);
    return b.rate > fade + 16 ? Math.min(QUIET_MAX, Math.floor(Math.log(b.rate / (fade + 16)) / DECAY_LOG)) : 0;
  }

  /**
   * Whether no subject may be passed over this round, all gone through as they would have been: when
   * the fleet's size changed (it moves every plan's standing budget, so demands), or when the rounds'
   * pace has drifted from the wall clock by more than QUIET_DRIFT rounds since the last such round
   * (late rounds, a clock step) — so a quiet subject is never passed over into its window's last rounds.
   */
  private wakeAll(now: number): boolean {
    const fleet = this.link.fleetSize();
    const drift = now - this.paceAt - (this.roundNo - this.paceRound) * this.cfg.roundMs;
    if (fleet === this.quietFleet && Math.abs(drift) <= QUIET_DRIFT * this.cfg.roundMs) return false;
    this.quietFleet = fleet;
    this.paceAt = now;
    this.paceRound = this.roundNo;
    return true;
  }

  /** Gives back every bit of unspent credit of a subject about to be evicted, and queues its report. */
  protected releaseAll(subject: Subject): void {
    const now = this.clock.now();
    this.wake(subject);
    subject.evicted = true;
    subject.limits.windows.forEach((w, i) => {
      const b = subject.buckets[i] as Bucket;
      if (b.windowEnd <= now) return this.reportEnded(subject.keyId, w.windowMs, w.limit, b);
      if (b.credit > 0) b.released += b.credit;
      const shard = shardOf(subject.keyId, b.windowId, this.cfg.shards);
      const report = this.report(subject.keyId, w.windowMs, w.limit, b, subject.limits.fixedShare);
      if (b.selfIssued > 0) this.evictedSelfGrants.set(`${subject.keyId}|${w.windowMs}|${b.lease}`, { shard, report, end: b.windowEnd });
      else this.finalReports.push({ shard, report });
      // Credit granted ahead for the next window goes back to that window's owner.
      if (b.nextWindowId === b.windowId + 1 && b.nextIssued > 0) {
        const ahead = this.nextReport(subject.keyId, w.windowMs, w.limit, b, subject.limits.fixedShare);
        this.finalReports.push({ shard: shardOf(subject.keyId, b.windowId + 1, this.cfg.shards), report: { ...ahead, released: b.nextIssued, held: 0 } });
      }
    });
  }
}

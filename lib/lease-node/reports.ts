import type { Bucket } from '../bucket.js';
import type { Subject } from '../bucket-map.js';
import { HELD } from '../ledger-store.js';
import { shardOf, type Report, type ReportBatch } from '../protocol/messages.js';
import { demandMark, NodeDemand } from './demand.js';

/**
 * Rounds after a resync of a shard (or a batch of it the link could not send) in which none of its
 * reports waits for its slot, at least (`resynced`): past a blind owner's settling (9 rounds), counted
 * in this node's rounds, so a stall of its own stretches it.
 */
export const RESYNC_ROUNDS = 16;

/**
 * What a node tells the owners of its shards: per bucket a report of its cumulative counts and the
 * demand it advertises, numbered so an owner keeps the newest; per shard a batch of them, at the end
 * of the round (B2) or at once for what a recall released. What the link could not send is reported
 * again next round.
 */
export abstract class NodeReports extends NodeDemand {
  /** Seq of the last report sent: every report carries a higher one, so the owner keeps the newest. */
  private reportSeq = 0;
  /**
   * Reports sent at the end of the round besides the listed buckets': the final ones of evicted
   * subjects (their credit given back) and of windows that ended with spends put off (`reportEnded`).
   */
  protected finalReports: Array<{ shard: number; report: Report }> = [];
  /**
   * Shards whose owner changed and may have had no log to replay (`resync`): none of their reports
   * waits for its slot (`NodeRound.slot`), and asks ahead there go every round, until this node has
   * heard from an owner of that shard newer than it had (`epoch`; a deposed owner's grant landing
   * later is fenced off, L4) and RESYNC_ROUNDS of its rounds have passed since the resync or a batch
   * of that shard the link could not send (`until`). A blind owner issues once every member has checked
   * in since and it has read their reports: what this node holds and spent there, and credit an earlier
   * owner granted ahead that lands meanwhile, goes to it every round, as before slots.
   */
  protected readonly resynced = new Map<number, { epoch: number; until: number }>();

  /**
   * Queues the final report of a bucket whose window has ended, if it put off reporting some of what
   * it spent there (`mayWait`): that window's owner takes reports for a few rounds after its end, and
   * counts what it admitted for the traffic history and concentration.
   */
  protected reportEnded(keyId: string, windowMs: number, limit: number, b: Bucket): void {
    if (b.unreported) this.finalReports.push({ shard: shardOf(keyId, b.windowId, this.cfg.shards), report: this.report(keyId, windowMs, limit, b) });
  }

  /**
   * What a recall released, reported at once rather than at the round's end: the owner has it for
   * the next node that asks within a hop. Not to an owner in this process (it would fold the report
   * while still sending what it decided before, and a refill could overtake an older exhaustion
   * notice), nor for a window that has ended; those wait for the round.
   */
  protected reportNow(s: Subject, b: Bucket, windowMs: number): void {
    const shard = shardOf(s.keyId, b.windowId, this.cfg.shards);
    if (b.windowEnd <= this.clock.now() || this.link.local?.(shard) === true) return;
    this.send(shard, [this.report(s.keyId, windowMs, this.limitOf(s.keyId, windowMs), b, s.limits.fixedShare)], 0);
  }

  /**
   * Publishes one batch of reports for `shard`; what the link could not send is reported next round.
   * `round`: for a round's batch (everything up to this round's heartbeat) the round's number as the
   * heartbeat states it (counted from 1), 0 for a partial one.
   */
  protected send(shard: number, reports: Report[], round = this.roundNo + 1): ReportBatch {
    const batch: ReportBatch = { shard, nodeId: this.cfg.nodeId, nodeEpoch: this.cfg.nodeEpoch, round, reports };
    this.stats.reports++;
    if (!this.link.publish(batch)) this.unsent(batch);
    return batch;
  }

  /** A batch the link could not send: its buckets are reported again next round (counts are cumulative). */
  private unsent(batch: ReportBatch): void {
    const resynced = this.resynced.get(batch.shard);
    if (resynced !== undefined) resynced.until = this.roundNo + 1 + RESYNC_ROUNDS;
    for (const r of batch.reports) {
      const s = this.buckets.peek(r.keyId);
      const b = this.bucketFor(r.keyId, r.windowMs, this.cfg.nodeEpoch, r.lease);
      if (s === undefined || b === undefined || s.evicted) continue;
      // What it gave back is untold again: that report never waits for its slot either.
      if (r.released > 0) b.giveBack(0);
      else b.dirty = true;
      this.touch(s);
    }
  }

  /** Adds `report` to the batch for `shard`. */
  protected queue(byShard: Map<number, Report[]>, shard: number, report: Report): void {
    const list = byShard.get(shard);
    if (list === undefined) byShard.set(shard, [report]);
    else list.push(report);
  }

  /**
   * The report for the window after the bucket's current one: nothing spent yet, the current demand.
   * `fixed`: its plan allocates a fixed share per node (said only when so).
   */
  protected nextReport(keyId: string, windowMs: number, limit: number, b: Bucket, fixed = false): Report {
    const next = b.nextWindowId === b.windowId + 1;
    const r: Report = {
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
      demand: this.demandOf(b, limit),
      held: next ? b.nextIssued : 0,
      selfGrant: false,
    };
    return withParts(fixed ? { ...r, fixedShare: true } : r, next ? b.nextFloated : 0, false);
  }

  /**
   * The report of the bucket's current window: its cumulative counts and the demand it advertises
   * (`demand`, when the caller has it already).
   */
  protected report(keyId: string, windowMs: number, limit: number, b: Bucket, fixed = false, demand = this.demandOf(b, limit)): Report {
    b.reportedDemand = demandMark(demand);
    b.reported();
    const r: Report = {
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
      demand,
      held: Math.max(0, b.credit),
      selfGrant: b.selfIssued > 0,
      seen: b.seen,
    };
    return withParts(fixed ? { ...r, fixedShare: true } : r, b.floated, b.blanketed);
  }
}

/**
 * `r` saying what of its credit came out of an owner's float (`Report.floated`) and what it took
 * itself under a blanket (`Report.blanketed`), when any did.
 */
const withParts = (r: Report, floated: number, blanketed: boolean): Report => (floated > 0 || blanketed ? { ...r, ...(floated > 0 ? { floated } : {}), ...(blanketed ? { blanketed: HELD } : {}) } : r);

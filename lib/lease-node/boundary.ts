import type { Bucket } from '../bucket.js';
import { HELD } from '../ledger-store.js';
import { SILENT_ROUNDS } from '../membership.js';
import type { WindowSpec } from '../policy.js';
import { shardOf } from '../protocol/messages.js';
import { windowIdAt } from '../window.js';
import { NodeReports } from './reports.js';

/** Rounds before a window's end in which a node asks the next window's owner for credit ahead. */
export const AHEAD_ROUNDS = 2;
/**
 * A report that can wait goes out in its shard's slot, one round in this many (staggered by shard),
 * or with a batch its shard gets anyway (`NodeRound.endRound`): a fleet member that reports a few
 * requests a window for each of many keys sends one batch per shard every few rounds, not every round.
 * Under a plentiful plan a node asks ahead, while nothing is granted ahead, in the next window's
 * shard's slot among its window's last SLOT_ROUNDS and in the last AHEAD_ROUNDS.
 */
export const SLOT_ROUNDS = 4;
/** The earliest a node asks ahead, in rounds before its window's end. */
export const ASK_AHEAD_ROUNDS = Math.max(AHEAD_ROUNDS, SLOT_ROUNDS);
/**
 * Clock skew between nodes allowed for, in rounds (50 ms): any two wall clocks agree within this,
 * steps included (each within a round of true time).
 */
export const SKEW_ROUNDS = 2;

/**
 * A bucket at its window's boundary: rolled into the window running now (never back into an earlier
 * one), taking the credit granted ahead for it; and the boundary self-grant (F4) a node out of touch
 * with the owner makes there, once per key and window, with what its heartbeats state of it.
 */
export abstract class NodeBoundary extends NodeReports {
  /** Window end of the last boundary self-grant per key and window length (F4), kept across eviction. */
  private readonly selfGrantedWindows = new Map<string, number>();
  /**
   * Shards holding a self-grant of this process: the end of the latest window it is for, and the
   * round of the first batch since its latest self-grant there (`NodeBeat.selfGranted`).
   */
  private readonly selfGrantShards = new Map<number, { end: number; round: number }>();

  /**
   * Rolls `b` into the window of `w` running at `now`, if it is in an earlier one — never back into
   * an earlier one. A wall clock stepped back over a boundary (within the skew allowed) leaves the
   * bucket in the window it is in until the clock is past that window's start again: admissions go
   * on counting there, against its credit. Rolling back would reset the bucket's counts while the
   * owner's ledger keeps them, and a restated grant (cumulative) would then hand it again what it
   * had spent already.
   */
  protected rollToNow(keyId: string, b: Bucket, w: WindowSpec, now: number): void {
    const id = windowIdAt(now, w.windowMs, b.offset);
    if (!(id <= b.windowId)) this.rollBucket(keyId, b, id, w.windowMs, w.limit);
  }

  /**
   * Rolls a bucket into window `id`. With no owner contact for the last rounds (F2) and no credit
   * granted ahead for the new window, the node grants itself exactly 1/fleet of the allowance (F4),
   * and reports self_grant for the rest of the window; a degraded node does not (F5).
   */
  protected rollBucket(keyId: string, b: Bucket, id: number, windowMs: number, limit: number): void {
    this.reportEnded(keyId, windowMs, limit, b);
    b.roll(id);
    // Credit granted ahead under a higher limit is cut to the current one.
    this.trim(b, limit);
    if (b.issued > 0) return;
    const silence = this.silenceMs(shardOf(keyId, id, this.cfg.shards));
    // Only into a window that began well into the silence. Owners hold this node's possible
    // self-grant back from SILENT_ROUNDS after its last heartbeat, but may have granted credit for a
    // window up to ASK_AHEAD_ROUNDS before it begins (by another node's clock, up to SKEW_ROUNDS apart;
    // under any plan: another node may see the limit or the fleet that makes it plentiful otherwise):
    // credit already out before they held anything back. A window that began earlier (a first sight
    // mid-window, a key reloaded) gets no self-grant: its requests are refused, never over-admitted.
    const intoWindow = this.clock.now() - (b.windowEnd - windowMs);
    const before = (ASK_AHEAD_ROUNDS + SILENT_ROUNDS + SKEW_ROUNDS) * this.cfg.roundMs;
    if (silence >= this.cfg.missedRoundsLimit * this.cfg.roundMs && silence - intoWindow >= before && silence <= this.cfg.degradedAfterMs) {
      // Once per key and window, even if the bucket is evicted and reloaded meanwhile: the owners'
      // holdback covers one self-grant per node per window, not one per reload.
      const mark = `${keyId}|${windowMs}`;
      if (this.selfGrantedWindows.get(mark) === b.windowEnd) return;
      this.selfGrantedWindows.set(mark, b.windowEnd);
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

  /**
   * A first sight of a window with nothing issued, spent or granted to itself there: the node takes
   * `HELD` credit itself, with no ask, if the shard's owner lets it (`OwnerLink.held`: a blanket of
   * the current owner epoch whose write was taken lists this process, covering the window's start —
   * or its end, reaching back over windows running when it was written — for windows of at least its
   * limit). Every owner counts that credit committed there, taken or not.
   * Once per window: a bucket made again after one that took was dropped (evicted, or left out by a
   * policy change) takes none there, nor in an earlier window (`BucketMap.tookBefore`); and none while
   * the map remembers as many keys' takes as it holds buckets (`BucketMap.mayTake`).
   */
  protected takeHeld(keyId: string, b: Bucket, w: WindowSpec): void {
    if (b.issued !== 0 || b.selfIssued !== 0 || b.spent !== 0 || b.released !== 0 || b.blanketed || !this.buckets.mayTake) return;
    const h = this.link.held?.(shardOf(keyId, b.windowId, this.cfg.shards));
    const start = b.windowEnd - w.windowMs;
    if (h === undefined || w.limit < h.min || start > h.by || (start <= h.after && !(h.reach !== undefined && b.windowEnd > h.reach))) return;
    if (this.buckets.tookBefore(keyId, w.windowMs, b.windowEnd)) return;
    b.issued = HELD;
    b.blanketed = true;
    this.stats.heldTaken++;
  }

  /**
   * The shards holding a self-grant of this process, each with the round of its first batch since,
   * for this round's heartbeat: owners hold back this node's share in such a shard until they fold
   * that batch (`lib/membership.ts`), and a self-granted bucket is in every batch. A shard whose
   * self-granted windows have all ended is forgotten.
   */
  protected selfGrantStatement(now: number): Map<number, number> {
    const selfGranted = new Map<number, number>();
    for (const [shard, g] of this.selfGrantShards) {
      if (g.end > now) selfGranted.set(shard, g.round);
      else this.selfGrantShards.delete(shard);
    }
    return selfGranted;
  }

  /** Every 40 rounds, forgets the self-grants of windows that have ended, and what dropped buckets took in them. */
  protected forgetEndedSelfGrants(now: number): void {
    if (this.roundNo % 40 !== 0) return;
    for (const [mark, end] of this.selfGrantedWindows) if (end <= now) this.selfGrantedWindows.delete(mark);
    this.buckets.forgetTaken(now);
  }
}

import type { LogEntry } from '../protocol/log.js';

/**
 * The owner's ended marks, kept per shard: per window length, the latest window end among the
 * shard's ledgers it dropped (`FoldOwner.sweep`) or that a checkpoint of the shard it replayed says an
 * earlier owner dropped. A window of that length in that shard (any key, whatever its phase offset)
 * that ends at or before the mark is ended for good: nothing is issued for it again, whatever this
 * owner's wall clock says afterwards.
 *
 * Why: a dropped ledger is the window's record of what was issued. Made again, it would start empty
 * and issue the whole allowance once more; an owner's clock stepped back after the sweep (within the
 * skew allowed) would do that for a late ask, and a node spends what a late ask brings for the request
 * that asked, even after its window ended. A mark is raised only by a ledger of its shard actually
 * dropped, so it never runs ahead of a window the shard once held: a clock stepped far forward and
 * back costs at most the windows it swept early (their records are gone: refusing them is what safety
 * needs) and those of other keys of that length in the same shard ending before them. Per shard, so
 * that cost stays with the shards that owner held: a checkpoint carries its own shard's marks only,
 * and a successor taking one shard takes no other shard's.
 *
 * Marks are complete for a shard only if every owner that dropped its ledgers kept them. An older
 * release keeps none: a shard whose history reaches back to one has an unmarked horizon, a time no
 * window it dropped unmarked ends after (`unmark`). A node spends a grant that lands after its window
 * ended only if the owner says, on the grant (`Grant.late`), that its marks are complete for that
 * window (`complete`): it ends after the horizon.
 */
export class EndedMarks {
  private readonly byShard = new Map<number, Map<number, number>>();
  private readonly unmarked = new Map<number, number>();

  /** Whether a window of length `windowMs` in `shard` that ends at `windowEnd` is ended by a mark. */
  covers(shard: number, windowMs: number, windowEnd: number): boolean {
    const mark = this.byShard.get(shard)?.get(windowMs);
    return mark !== undefined && windowEnd <= mark;
  }

  /** A ledger of `shard` of a window of length `windowMs` ending at `windowEnd` was dropped (or an earlier owner's was). */
  raise(shard: number, windowMs: number, windowEnd: number): void {
    let marks = this.byShard.get(shard);
    if (marks === undefined) this.byShard.set(shard, (marks = new Map()));
    const mark = marks.get(windowMs);
    if (mark === undefined || windowEnd > mark) marks.set(windowMs, windowEnd);
  }

  /** The latest end of `shard`'s marks and unmarked horizon: no window ending after it was dropped. */
  latest(shard: number): number {
    let end = this.unmarked.get(shard) ?? Number.NEGATIVE_INFINITY;
    for (const mark of this.byShard.get(shard)?.values() ?? []) end = Math.max(end, mark);
    return end;
  }

  /** The mark of windows of length `windowMs` in `shard`, if any. */
  of(shard: number, windowMs: number): number | undefined {
    return this.byShard.get(shard)?.get(windowMs);
  }

  /**
   * Windows of `shard` ending at or before `by` may have had their ledgers dropped without a mark (an
   * older release owned the shard, or its record was lost): the horizon only grows. Kept in whole ms,
   * rounded up (a clock may give fractions; a checkpoint carries the horizon as an integer).
   */
  unmark(shard: number, by: number): void {
    const h = this.unmarked.get(shard);
    const at = Math.ceil(by);
    if (h === undefined || at > h) this.unmarked.set(shard, at);
  }

  /** Whether the marks of `shard` are complete for a window ending at `windowEnd`: it ends after the shard's unmarked horizon. */
  complete(shard: number, windowEnd: number): boolean {
    const h = this.unmarked.get(shard);
    return h === undefined || windowEnd > h;
  }

  /** The shard's marks as log entries, for its checkpoint: what a later owner of the shard must know. */
  entries(shard: number): LogEntry[] {
    const out: LogEntry[] = [];
    for (const [windowMs, end] of this.byShard.get(shard) ?? []) out.push({ kind: 'ended', shard, windowMs, end });
    const by = this.unmarked.get(shard);
    if (by !== undefined) out.push({ kind: 'unmarked', shard, by });
    return out;
  }
}

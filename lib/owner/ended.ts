import type { LogEntry } from '../protocol/log.js';

/**
 * The owner's ended marks: per window length, the latest window end among the ledgers it dropped
 * (`FoldOwner.sweep`) or that a checkpoint it replayed says an earlier owner of the shard dropped. A
 * window of that length (any key, whatever its phase offset) that ends at or before the mark is ended
 * for good: nothing is issued for it again, whatever this owner's wall clock says afterwards.
 *
 * Why: a dropped ledger is the window's record of what was issued. Made again, it would start empty
 * and issue the whole allowance once more; an owner's clock stepped back after the sweep (within the
 * skew allowed) would do that for a late ask, and a node spends what a late ask brings for the request
 * that asked, even after its window ended. A mark is raised only by a ledger actually dropped, so it
 * never runs ahead of a window the owner once held: a clock stepped far forward and back costs at
 * most the windows it swept early (their records are gone: refusing them is what safety needs) and
 * those of other keys of that length ending before them.
 */
export class EndedMarks {
  private readonly marks = new Map<number, number>();

  /** Whether a window of length `windowMs` that ends at `windowEnd` is ended by a mark. */
  covers(windowMs: number, windowEnd: number): boolean {
    const mark = this.marks.get(windowMs);
    return mark !== undefined && windowEnd <= mark;
  }

  /** A ledger of a window of length `windowMs` ending at `windowEnd` was dropped (or an earlier owner's was). */
  raise(windowMs: number, windowEnd: number): void {
    const mark = this.marks.get(windowMs);
    if (mark === undefined || windowEnd > mark) this.marks.set(windowMs, windowEnd);
  }

  /** The mark of windows of length `windowMs`, if any. */
  of(windowMs: number): number | undefined {
    return this.marks.get(windowMs);
  }

  /** The marks as log entries, for a checkpoint: what a later owner of the shard must know. */
  entries(): LogEntry[] {
    const out: LogEntry[] = [];
    for (const [windowMs, end] of this.marks) out.push({ kind: 'ended', windowMs, end });
    return out;
  }
}

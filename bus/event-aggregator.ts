import type { LimitEvent, LimitRefusal } from './limit-event.js';

interface Pending {
  keyId: string;
  class: LimitEvent['class'];
  status: number;
  window: string;
  routeClass: string;
  node: string;
  first: number;
  last: number;
  count: number;
  firstCorrelationId: string;
  lastCorrelationId: string;
  /** When it is written: its window's end, or `flushMs` after its first refusal, whichever is sooner. */
  due: number;
}

function closed(p: Pending): LimitEvent {
  return {
    keyId: p.keyId,
    class: p.class,
    status: p.status,
    window: p.window,
    routeClass: p.routeClass,
    node: p.node,
    first: p.first,
    last: p.last,
    count: p.count,
    firstCorrelationId: p.firstCorrelationId,
    lastCorrelationId: p.lastCorrelationId,
  };
}

/**
 * Refusals folded into limit events in memory: one per (key id, class, window, route class, node)
 * and window, so a flood costs one entry per window instead of one per request. At most `maxPending`
 * aggregates are held (those awaiting `take` included); a refusal that would open another is
 * counted in `dropped` instead. Pure: the caller passes the time.
 */
export class EventAggregator {
  private readonly pending = new Map<string, Pending>();
  /** Aggregates closed early (their window ended and a new refusal came) awaiting `take`. */
  private ready: LimitEvent[] = [];
  /** The earliest `due` among the pending, so `take` skips the scan when nothing is due. */
  private nextDue = Number.POSITIVE_INFINITY;
  /** Refusals not kept, for want of room. */
  dropped = 0;

  constructor(
    private readonly maxPending: number,
    private readonly flushMs: number,
  ) {}

  /** Aggregates held: pending and awaiting `take`. */
  get size(): number {
    return this.pending.size + this.ready.length;
  }

  /** Counts `r` into its aggregate (opening one if there is room); false if it was dropped. */
  add(r: LimitRefusal): boolean {
    const id = `${r.keyId}\u0000${r.class}\u0000${r.window}\u0000${r.routeClass}\u0000${r.node}`;
    let p = this.pending.get(id);
    if (p !== undefined && r.at >= p.due) {
      // Its window ended: the refusal belongs to a new aggregate; the old one waits for `take`.
      this.ready.push(closed(p));
      this.pending.delete(id);
      p = undefined;
    }
    if (p === undefined) {
      if (this.size >= this.maxPending) {
        this.dropped++;
        return false;
      }
      const ends = r.windowEndsAt !== undefined && r.windowEndsAt > r.at ? r.windowEndsAt : Number.POSITIVE_INFINITY;
      const due = Math.min(r.at + this.flushMs, ends);
      const { keyId, status, window, routeClass, node, correlationId } = r;
      this.pending.set(id, { keyId, class: r.class, status, window, routeClass, node, first: r.at, last: r.at, count: 1, firstCorrelationId: correlationId, lastCorrelationId: correlationId, due });
      if (due < this.nextDue) this.nextDue = due;
      return true;
    }
    p.count++;
    // Refusals decided asynchronously (after a fast path) may be recorded slightly out of order.
    if (r.at >= p.last) {
      p.last = r.at;
      p.lastCorrelationId = r.correlationId;
    } else if (r.at < p.first) {
      p.first = r.at;
      p.firstCorrelationId = r.correlationId;
    }
    return true;
  }

  /** Removes and returns the aggregates due at `nowMs` (every one with `all`). */
  take(nowMs: number, all = false): LimitEvent[] {
    const out = this.ready;
    this.ready = [];
    if (!all && nowMs < this.nextDue) return out;
    this.nextDue = Number.POSITIVE_INFINITY;
    for (const [id, p] of this.pending) {
      if (all || p.due <= nowMs) {
        out.push(closed(p));
        this.pending.delete(id);
      } else if (p.due < this.nextDue) this.nextDue = p.due;
    }
    return out;
  }
}

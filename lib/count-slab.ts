import type { ResolvedLimits } from './policy.js';

/** Numbers kept per window of a key: its window id, its phase offset, and what it admitted there. */
export const SLOTS = 3;

/**
 * The counts of every key of a fleet of one, flat: a key takes a run of consecutive window slots, one
 * per window of its limits, each `SLOTS` numbers of one Float64Array (`counts[SLOTS * s]` the
 * window id, `+ 1` its phase offset, `+ 2` what it admitted), and its limits sit at the run's first
 * slot. No object per key: a key costs its slots' 24 bytes a window and one reference, with the slab
 * grown by doubling. A freed run goes on a list of runs of its length, for the next key with as many
 * windows; the slab does not shrink (it stays at the peak of keys held at once).
 */
export class CountSlab {
  /** The numbers of every slot; replaced (grown) by `alloc`, so read it again after one. */
  counts: Float64Array;
  /** Limits of the key whose run starts at a slot (undefined elsewhere). */
  private readonly owner: Array<ResolvedLimits | undefined> = [];
  /** Free runs by length (windows): their first slots. */
  private readonly free: number[][] = [];
  /** Slots handed out or freed so far; the slab's slots beyond it were never used. */
  private top = 0;

  constructor(initialSlots = 1024) {
    this.counts = new Float64Array(initialSlots * SLOTS);
  }

  /** Limits of the run starting at slot `s`. */
  limitsAt(s: number): ResolvedLimits {
    return this.owner[s]!;
  }

  /** A run of slots for a key with `limits` (its numbers are not set: the caller sets every one). */
  alloc(limits: ResolvedLimits): number {
    const n = limits.windows.length;
    let s = this.free[n]?.pop();
    if (s === undefined) {
      s = this.top;
      this.top += n;
      if (this.top * SLOTS > this.counts.length) this.grow();
      this.owner.push(limits);
      for (let i = 1; i < n; i++) this.owner.push(undefined);
    } else {
      this.owner[s] = limits;
    }
    return s;
  }

  /** Gives back the run starting at slot `s`. */
  release(s: number): void {
    const n = this.owner[s]!.windows.length;
    this.owner[s] = undefined;
    (this.free[n] ??= []).push(s);
  }

  private grow(): void {
    let length = this.counts.length * 2;
    while (this.top * SLOTS > length) length *= 2;
    const next = new Float64Array(length);
    next.set(this.counts);
    this.counts = next;
  }
}

import type { Scheduler } from '../../bus/memory.js';
import { FakeClock } from '../../lib/clock.js';

/**
 * A discrete-event queue on a virtual clock: events run in time order (ties in the order they were
 * scheduled), and the clock jumps to each event's time. Deterministic for a given schedule.
 */
export class EventQueue implements Scheduler {
  readonly clock: FakeClock;
  private readonly times: number[] = [];
  private readonly seqs: number[] = [];
  private readonly runs: Array<() => void> = [];
  private seq = 0;

  constructor(startMs: number) {
    this.clock = new FakeClock(startMs);
  }

  /** Runs `run` `delayMs` from now (virtual time). */
  after(delayMs: number, run: () => void): void {
    this.at(this.clock.now() + Math.max(0, delayMs), run);
  }

  /** Runs `run` at wall-clock instant `timeMs` (virtual). */
  at(timeMs: number, run: () => void): void {
    // Binary heap keyed by (time, seq).
    let i = this.times.length;
    this.times.push(timeMs);
    this.seqs.push(this.seq++);
    this.runs.push(run);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  /** Runs events until the queue is empty or the next one is after `endMs`. */
  runUntil(endMs: number): void {
    while (this.times.length > 0 && this.times[0]! <= endMs) {
      const t = this.times[0]!;
      const run = this.pop();
      if (t > this.clock.now()) this.clock.set(t);
      run();
    }
    if (endMs > this.clock.now()) this.clock.set(endMs);
  }

  private pop(): () => void {
    const top = this.runs[0]!;
    const last = this.times.length - 1;
    this.swap(0, last);
    this.times.pop();
    this.seqs.pop();
    this.runs.pop();
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < this.times.length && this.less(l, m)) m = l;
      if (r < this.times.length && this.less(r, m)) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
    return top;
  }

  private less(a: number, b: number): boolean {
    return this.times[a]! < this.times[b]! || (this.times[a] === this.times[b] && this.seqs[a]! < this.seqs[b]!);
  }

  private swap(a: number, b: number): void {
    [this.times[a], this.times[b]] = [this.times[b]!, this.times[a]!];
    [this.seqs[a], this.seqs[b]] = [this.seqs[b]!, this.seqs[a]!];
    [this.runs[a], this.runs[b]] = [this.runs[b]!, this.runs[a]!];
  }
}

/** Seeded PRNG (mulberry32): the same seed replays the same run. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Exponential inter-arrival time (ms) for a Poisson process of `ratePerSec`. */
export function nextArrival(random: () => number, ratePerSec: number): number {
  return (-Math.log(1 - random()) / ratePerSec) * 1000;
}

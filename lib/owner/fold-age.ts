import type { Clock } from '../clock.js';
import { fnv1a32 } from '../hash.js';

/** How many keys an owner counts as its top keys: the ones with the most fold work lately. */
export const TOP_K = 8;
/** Counters per row of the sketch (a power of two: two rows from one 32-bit hash). */
const WIDTH = 2048;
/** Every this many ms the sketch's counts are halved: what it ranks is the work of the last second or so. */
const HALF_LIFE_MS = 1000;

/**
 * The keys an owner does the most fold work for lately (reports folded, asks answered), in bounded
 * memory whatever the number of keys: a count-min sketch of two rows (conservative update, counts
 * halved every second) estimates each key's work, and the K keys with the highest estimates are kept
 * by name. Estimates only overcount, so a key that is hot is never missed; a quiet key that shares
 * both counters with hot ones may rank high with them. What it ranks is fold work, not requests: a
 * key refused at a hundred times its limit does no more of it than a busy key within its limit.
 */
export class TopKeys {
  private readonly rows = new Float64Array(2 * WIDTH);
  private readonly top = new Map<string, number>();
  private halvedAt: number;

  constructor(
    private readonly clock: Clock,
    readonly k: number = TOP_K,
  ) {
    this.halvedAt = clock.monotonic();
  }

  /** Counts one unit of fold work for `keyId` at `now` (monotonic ms); returns whether the key is among the top K now. */
  count(keyId: string, now: number = this.clock.monotonic()): boolean {
    this.age(now);
    const h = fnv1a32(keyId);
    const i = h & (WIDTH - 1);
    const j = WIDTH + ((h >>> 16) & (WIDTH - 1));
    const a = this.rows[i]!;
    const b = this.rows[j]!;
    const est = Math.min(a, b) + 1;
    if (a < est) this.rows[i] = est;
    if (b < est) this.rows[j] = est;
    const top = this.top;
    if (top.has(keyId) || top.size < this.k) {
      top.set(keyId, est);
      return true;
    }
    let minKey = '';
    let min = Number.POSITIVE_INFINITY;
    for (const [key, n] of top) {
      if (n < min) {
        min = n;
        minKey = key;
      }
    }
    if (est <= min) return false;
    top.delete(minKey);
    top.set(keyId, est);
    return true;
  }

  /** Whether `keyId` is among the top K now (counts nothing). */
  has(keyId: string): boolean {
    return this.top.has(keyId);
  }

  /** The top K, busiest first, with their estimated work (units, halved every second). */
  list(): Array<{ keyId: string; work: number }> {
    this.age(this.clock.monotonic());
    return [...this.top].map(([keyId, work]) => ({ keyId, work })).sort((x, y) => y.work - x.work);
  }

  /** Halves every count once per half-life gone by. */
  private age(now: number): void {
    const halvings = Math.floor((now - this.halvedAt) / HALF_LIFE_MS);
    if (halvings <= 0) return;
    this.halvedAt += halvings * HALF_LIFE_MS;
    const f = halvings >= 60 ? 0 : 2 ** -halvings;
    for (let i = 0; i < this.rows.length; i++) this.rows[i]! *= f;
    for (const [key, n] of this.top) this.top.set(key, n * f);
  }
}

/** Upper bounds of the fold-age buckets, seconds: 1 ms to 1 s (two rounds is 0.05 at T = 25 ms). */
export const FOLD_AGE_BOUNDS: readonly number[] = [0.001, 0.0025, 0.005, 0.0125, 0.025, 0.05, 0.1, 0.25, 1];

/** A histogram of fold ages: counts per bucket of `FOLD_AGE_BOUNDS` (the last one: beyond them), sum, count. */
export class FoldAgeHistogram {
  readonly bounds = FOLD_AGE_BOUNDS;
  readonly counts = new Float64Array(FOLD_AGE_BOUNDS.length + 1);
  sum = 0;
  count = 0;

  observe(seconds: number): void {
    this.sum += seconds;
    this.count++;
    let i = 0;
    while (i < FOLD_AGE_BOUNDS.length && seconds > FOLD_AGE_BOUNDS[i]!) i++;
    this.counts[i]!++;
  }
}

/**
 * Fold ages as an owner measures them: for every report it folds into a ledger, the time from its
 * batch entering the bus (the node's publish on the in-memory bus; the entry's id, Redis time, on
 * the Redis bus) to the fold, split into reports of the owner's top keys and the others.
 */
export class FoldAges {
  readonly top = new FoldAgeHistogram();
  readonly other = new FoldAgeHistogram();
  /** Called with every age observed (ms), for a caller that wants each one (the simulator). */
  watcher: ((ageMs: number, top: boolean) => void) | undefined;

  observe(ageMs: number, top: boolean): void {
    const ms = Math.max(0, ageMs);
    (top ? this.top : this.other).observe(ms / 1000);
    this.watcher?.(ms, top);
  }
}

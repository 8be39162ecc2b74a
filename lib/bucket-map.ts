import { Bucket } from './bucket.js';
import type { ResolvedLimits } from './policy.js';
import { phaseOffset } from './window.js';

/** All buckets of one key: one per window of its limits. */
export class Subject {
  readonly buckets: Bucket[];
  /** Round in which this subject was last touched (for the round's report). */
  touchedRound = -1;

  constructor(
    readonly keyId: string,
    readonly limits: ResolvedLimits,
  ) {
    this.buckets = limits.windows.map((w) => new Bucket(phaseOffset(keyId, w.windowMs)));
  }

  /** True when every bucket is empty or belongs to a past window. */
  evictable(nowMs: number): boolean {
    for (const b of this.buckets) if (!b.evictable(nowMs)) return false;
    return true;
  }
}

/** How many of the least recently used subjects one insertion looks at for eviction. */
const EVICTION_SCAN = 32;

/**
 * The node's buckets, keyed by key id, capped by LRU. Only buckets with no credit or of a past window
 * are evicted (an evicted key is simply reloaded through the owner on next sight); if every candidate
 * still holds credit the map grows past the cap rather than throw credit away, and counts it.
 */
export class BucketMap {
  private readonly map = new Map<string, Subject>();
  private bucketCount = 0;
  /** Insertions that found nothing evictable and left the map above its cap. */
  overCap = 0;
  /** Subjects evicted so far. */
  evictions = 0;

  constructor(readonly maxBuckets: number) {}

  /** Number of buckets held. */
  get size(): number {
    return this.bucketCount;
  }

  /** Number of keys held. */
  get keys(): number {
    return this.map.size;
  }

  /** The subject of `keyId` with `limits`, created (or rebuilt after a policy change) as needed. */
  get(keyId: string, limits: ResolvedLimits, nowMs: number): Subject {
    const found = this.map.get(keyId);
    if (found !== undefined) {
      // Re-inserting moves the key to the most recently used end of the Map's order.
      this.map.delete(keyId);
      if (found.limits === limits) {
        this.map.set(keyId, found);
        return found;
      }
      this.bucketCount -= found.buckets.length;
    }
    const subject = new Subject(keyId, limits);
    this.makeRoom(subject.buckets.length, nowMs);
    this.map.set(keyId, subject);
    this.bucketCount += subject.buckets.length;
    return subject;
  }

  /** The subject of `keyId` if held, without touching LRU order. */
  peek(keyId: string): Subject | undefined {
    return this.map.get(keyId);
  }

  /** Every subject, least recently used first. */
  values(): IterableIterator<Subject> {
    return this.map.values();
  }

  private makeRoom(adding: number, nowMs: number): void {
    if (this.bucketCount + adding <= this.maxBuckets) return;
    let scanned = 0;
    for (const [keyId, subject] of this.map) {
      if (scanned++ >= EVICTION_SCAN || this.bucketCount + adding <= this.maxBuckets) break;
      this.map.delete(keyId);
      if (subject.evictable(nowMs)) {
        this.bucketCount -= subject.buckets.length;
        this.evictions++;
      } else {
        // Still holds credit: give it another pass at the young end instead of scanning it again.
        this.map.set(keyId, subject);
      }
    }
    if (this.bucketCount + adding > this.maxBuckets) this.overCap++;
  }
}

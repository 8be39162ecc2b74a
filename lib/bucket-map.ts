import { Bucket, Exhaustion } from './bucket.js';
import type { ResolvedLimits } from './policy.js';
import { phaseOffset } from './window.js';

/** All buckets of one key: one per window of its limits. */
export class Subject {
  readonly buckets: Bucket[];
  /** Round in which this subject last saw a request. */
  touchedRound = -1;
  /** Round in which it was put at the young end of the map: touched since, it gets a second chance. */
  queuedRound = -1;
  /** On the node's list of subjects to report this round. */
  listed = false;
  /** Dropped from the map (its final report is already queued). */
  evicted = false;
  /** Round in which a request was last told to retry in a round (its ask's late answer is kept for it). */
  shortRound = -1;
  /**
   * Passed over at the rounds' ends for a while (`NodeRound.endRound`): the round it was last gone
   * through and for how many rounds after it, packed in one small integer (`quietFor`); 0 when not. A
   * request or a grant wakes it (`NodeState.wake`). One field: a subject holds no room for another
   * without growing by a fifth (N4).
   */
  quiet = 0;

  /**
   * Builds the buckets of `limits`, keeping those of `previous` for windows of the same length;
   * `nextLease` numbers the new ones.
   */
  constructor(
    readonly keyId: string,
    readonly limits: ResolvedLimits,
    nextLease: () => number,
    previous?: Subject,
  ) {
    // Its quiet spell goes on: the buckets it keeps still owe the rounds passed over (`NodeState.wake`).
    this.quiet = previous?.quiet ?? 0;
    this.buckets = limits.windows.map((w) => {
      const i = previous?.limits.windows.findIndex((p) => p.windowMs === w.windowMs) ?? -1;
      if (i < 0) return new Bucket(phaseOffset(keyId, w.windowMs), nextLease(), w.windowMs);
      const kept = previous!.buckets[i] as Bucket;
      // The allowance may have grown: the owner may have credit now, so this round's ask is not spent.
      kept.fastRound = -1;
      kept.exhausted = Exhaustion.None;
      // Or shrunk: credit above the new limit is given back at once (reported at the round's end).
      const excess = kept.credit - Math.max(0, w.limit - kept.spent);
      if (excess > 0) {
        kept.giveBack(excess);
      }
      return kept;
    });
  }

  /** True when every bucket is empty or belongs to a past window. */
  evictable(nowMs: number): boolean {
    for (const b of this.buckets) if (!b.evictable(nowMs)) return false;
    return true;
  }
}

/** Rounds a subject is passed over at most (`Subject.quiet`'s low 8 bits), and the bits its round of going quiet keeps. */
export const QUIET_MAX = 255;
const QUIET_FROM = (1 << 22) - 1;

/** `Subject.quiet` for a subject gone through at round `from`, then passed over for `rounds` (1 to QUIET_MAX). */
export function quietFor(from: number, rounds: number): number {
  return ((from & QUIET_FROM) << 8) | rounds;
}

/** Rounds since a quiet subject (`quiet`, not 0) was last gone through, at round `now`. */
export function quietSince(quiet: number, now: number): number {
  return (now - (quiet >>> 8)) & QUIET_FROM;
}

/** How many of the least recently used subjects one insertion looks at for eviction. */
const EVICTION_SCAN = 32;

/**
 * How long after its window's end a dropped bucket's credit taken under a blanket is remembered: a
 * wall clock stepped back (within the skew) could bring that window back.
 */
const TAKEN_KEPT_MS = 1000;

/**
 * The node's buckets, keyed by key id, capped by LRU (approximated as a clock: a touch only stamps the
 * round, the eviction scan gives a key touched since it was queued a second chance). Only buckets with no credit or of a past window,
 * already reported, are evicted; an evicted key is reloaded through the owner on next sight, under a
 * new lease (so nothing addressed to the old one can credit it); if every candidate
 * still holds credit the map grows past the cap rather than throw credit away, and counts it.
 */
export class BucketMap {
  private readonly map = new Map<string, Subject>();
  private bucketCount = 0;
  /** Insertions that found nothing evictable and left the map above its cap. */
  overCap = 0;
  /** Subjects evicted so far. */
  evictions = 0;

  private leases = 0;

  /**
   * Windows in which a bucket dropped from the map (evicted, or left out by a policy change) had
   * taken credit under a blanket, by key id: [window length, window end, …]. Owners count one such
   * credit per node process and window, so a bucket made again there takes none (`tookBefore`).
   */
  private readonly taken = new Map<string, number[]>();

  /**
   * @param maxBuckets the cap
   * @param release gives a subject's unspent credit back before it is evicted under pressure (the node
   *   reports it to the owner); without it, only empty or past-window subjects are ever evicted
   */
  constructor(
    readonly maxBuckets: number,
    private readonly release?: (subject: Subject) => void,
  ) {}

  /** Number of buckets held. */
  get size(): number {
    return this.bucketCount;
  }

  /** Number of keys held. */
  get keys(): number {
    return this.map.size;
  }

  /** The subject of `keyId` with `limits`, created (or rebuilt after a policy change) as needed. */
  get(keyId: string, limits: ResolvedLimits, nowMs: number, round = 0): Subject {
    const found = this.map.get(keyId);
    if (found !== undefined) {
      if (found.limits === limits) {
        // Recency is a stamp: the eviction scan moves a key used since it was queued to the young end.
        found.touchedRound = round;
        return found;
      }
      this.map.delete(keyId);
      this.bucketCount -= found.buckets.length;
      // The old subject is gone: it must not report the buckets it shares with its successor.
      found.evicted = true;
      this.remember(found, nowMs);
    }
    // After a policy change, windows of the same length keep their lease: the owner still counts it.
    const subject = new Subject(keyId, limits, () => ++this.leases, found);
    subject.queuedRound = round;
    this.makeRoom(subject.buckets.length, nowMs, round);
    this.map.set(keyId, subject);
    this.bucketCount += subject.buckets.length;
    return subject;
  }

  /** The subject of `keyId` if held, without touching LRU order. */
  peek(keyId: string): Subject | undefined {
    return this.map.get(keyId);
  }

  /** Every subject, least recently queued first. */
  values(): IterableIterator<Subject> {
    return this.map.values();
  }

  private makeRoom(adding: number, nowMs: number, round: number): void {
    if (this.bucketCount + adding <= this.maxBuckets) return;
    let scanned = 0;
    for (const [keyId, subject] of this.map) {
      if (scanned++ >= EVICTION_SCAN || this.bucketCount + adding <= this.maxBuckets) break;
      this.map.delete(keyId);
      // Evicted unless used since it was queued (a second chance), touched this round (not reported
      // yet: kept until its final spend is sent) or holding credit. The rest go to the young end,
      // so the next scan looks at others.
      if (subject.touchedRound <= subject.queuedRound && subject.touchedRound !== round && subject.evictable(nowMs)) {
        this.bucketCount -= subject.buckets.length;
        this.evictions++;
        this.remember(subject, nowMs);
      } else {
        subject.queuedRound = round;
        this.map.set(keyId, subject);
      }
    }
    // Still full of keys holding credit: the least recently used ones not seen this round give their
    // credit back (so they hold none, as D4 requires) and go.
    if (this.release !== undefined && this.bucketCount + adding > this.maxBuckets) {
      scanned = 0;
      for (const [keyId, subject] of this.map) {
        if (scanned++ >= EVICTION_SCAN || this.bucketCount + adding <= this.maxBuckets) break;
        if (subject.touchedRound === round) continue;
        this.release(subject);
        this.map.delete(keyId);
        this.bucketCount -= subject.buckets.length;
        this.evictions++;
        this.remember(subject, nowMs);
      }
    }
    if (this.bucketCount + adding > this.maxBuckets) this.overCap++;
  }

  /** Whether a bucket of `keyId` for windows of `windowMs`, dropped earlier, took credit in the window ending at `windowEnd` or a later one. */
  tookBefore(keyId: string, windowMs: number, windowEnd: number): boolean {
    const list = this.taken.size === 0 ? undefined : this.taken.get(keyId);
    if (list !== undefined) for (let i = 0; i < list.length; i += 2) if (list[i] === windowMs && list[i + 1]! >= windowEnd) return true;
    return false;
  }

  /** Forgets what dropped buckets took in windows that ended more than TAKEN_KEPT_MS ago. */
  forgetTaken(nowMs: number): void {
    for (const [keyId, list] of this.taken) {
      const kept: number[] = [];
      for (let i = 0; i < list.length; i += 2) if (list[i + 1]! > nowMs - TAKEN_KEPT_MS) kept.push(list[i]!, list[i + 1]!);
      if (kept.length === 0) this.taken.delete(keyId);
      else if (kept.length < list.length) this.taken.set(keyId, kept);
    }
  }

  /**
   * Remembers the windows `subject`'s buckets may have taken credit in under a blanket, as it is
   * dropped: the one each is in if it took there, else the one it rolled out of if it took there,
   * as long as a clock stepped back could bring that window back.
   */
  private remember(subject: Subject, nowMs: number): void {
    for (const b of subject.buckets) {
      const end = b.blanketed ? b.windowEnd : b.tookBefore ? b.windowEnd - b.windowMs : Number.NEGATIVE_INFINITY;
      if (end <= nowMs - TAKEN_KEPT_MS) continue;
      const list = this.taken.get(subject.keyId);
      if (list === undefined) this.taken.set(subject.keyId, [b.windowMs, end]);
      else list.push(b.windowMs, end);
    }
  }

  /** Whether a bucket may take credit under a blanket: not while as many keys' takes are remembered as the map holds buckets. */
  get mayTake(): boolean {
    return this.taken.size < this.maxBuckets;
  }

  /**
   * Whether the map is at most three quarters full: far enough from its cap that a bucket holding
   * credit for a caller who may come back is unlikely to be evicted for room (an eviction that costs
   * a report giving that credit back).
   */
  get roomy(): boolean {
    return this.bucketCount * 4 <= this.maxBuckets * 3;
  }
}

import { smoothed, type Bucket } from '../bucket.js';
import { BucketMap, quietSince, type Subject } from '../bucket-map.js';
import type { Clock } from '../clock.js';
import { newNodeStats, type LeaseNodeConfig, type LeaseNodeStats, type OwnerLink } from '../node-contract.js';

/**
 * What every layer of the node side (`LeaseNode`) shares: its settings, clock and link, the bucket
 * map, the round and the subjects to go through at its end, the counters, and when each shard's owner
 * was last heard from (the failure states F2–F5 are read from that).
 */
export abstract class NodeState {
  readonly buckets: BucketMap;
  readonly stats: LeaseNodeStats = newNodeStats();
  protected roundNo = 0;
  /** The round whose end goes through the report list next: `roundNo`, or the next once this one's has. */
  protected passRound = 0;
  /**
   * Subjects to go through at the end of the round: each touched since the last one, and each whose
   * buckets still report demand (`Subject.listed`).
   */
  protected reportList: Subject[] = [];
  /** Monotonic time of the last sign of life from each shard's owner. */
  protected readonly contact: Float64Array;
  /** Whether some owner's silence was past `degradedAfterMs` at the end of the last round. */
  protected isDegraded = false;

  constructor(
    protected readonly cfg: LeaseNodeConfig,
    protected readonly clock: Clock,
    protected readonly link: OwnerLink,
  ) {
    this.buckets = new BucketMap(cfg.maxBuckets, (s) => this.releaseAll(s));
    this.contact = new Float64Array(cfg.shards).fill(clock.monotonic());
  }

  /** Current round number (grows by one per `endRound()`). */
  get round(): number {
    return this.roundNo;
  }

  /**
   * True once some shard's owner has been out of reach for longer than `degradedAfterMs` (F5). Read
   * on every request (the X-RateLimit-Degraded header), so it is decided once per round, at its end:
   * it may lag a round behind either way. Refusals do not read it: an ask checks its owner's silence.
   */
  get degraded(): boolean {
    return this.isDegraded;
  }

  /** Milliseconds since the owner of `shard` was last heard from (0 while the transport reaches it). */
  silenceMs(shard: number): number {
    const mono = this.clock.monotonic();
    if (this.link.reachable(shard)) {
      this.contact[shard] = mono;
      return 0;
    }
    return mono - this.contact[shard]!;
  }

  /** The longest silence of any shard's owner toward this node, ms: how stale its newest fold may be. */
  longestSilenceMs(): number {
    let worst = 0;
    for (let s = 0; s < this.cfg.shards; s++) worst = Math.max(worst, this.silenceMs(s));
    return worst;
  }

  /** Gives back the credit of a subject about to be evicted from a full map, and queues its report (`NodeRound`). */
  protected abstract releaseAll(subject: Subject): void;

  /** Stamps `subject` as used this round and puts it on the report list. */
  protected touch(subject: Subject): void {
    this.wake(subject);
    subject.touchedRound = this.roundNo;
    if (!subject.listed) {
      subject.listed = true;
      this.reportList.push(subject);
    }
  }

  /**
   * Ends a quiet spell of `subject` (`NodeRound.endRound`): gone through at this round's end, its
   * rates decayed first for every round it was passed over, as those rounds would have with no request.
   */
  protected wake(subject: Subject): void {
    if (subject.quiet === 0) return;
    const passed = quietSince(subject.quiet, this.passRound) - 1;
    subject.quiet = 0;
    for (const b of subject.buckets) for (let i = 0; i < passed && b.rate > 0; i++) b.rate = smoothed(b.rate, 0);
  }

  /** Notes a sign of life from the owner of `shard`. */
  protected heard(shard: number): void {
    this.contact[shard] = this.clock.monotonic();
  }

  /** The limit of the window of length `windowMs` that `keyId` is under here (none known: no limit). */
  protected limitOf(keyId: string, windowMs: number): number {
    const w = this.buckets.peek(keyId)?.limits.windows.find((x) => x.windowMs === windowMs);
    return w === undefined ? Number.POSITIVE_INFINITY : w.limit;
  }

  /** The bucket a message addresses: this process's, of that window length and lease; else undefined. */
  protected bucketFor(keyId: string, windowMs: number, nodeEpoch: string, lease: number): Bucket | undefined {
    if (nodeEpoch !== this.cfg.nodeEpoch) return undefined;
    const s = this.buckets.peek(keyId);
    if (s === undefined) return undefined;
    const windows = s.limits.windows;
    for (let i = 0; i < windows.length; i++) {
      const b = s.buckets[i] as Bucket;
      if (windows[i]!.windowMs === windowMs && b.lease === lease) return b;
    }
    return undefined;
  }
}

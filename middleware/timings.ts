// Decision-time histograms kept as plain per-bucket counts (a request only adds to an array) and
// served to prom-client's registry as histograms of every open limiter.

/** Seconds, from 1 µs (a decision from held credit) to 25 ms (a fast path that waited). */
const DECISION_BUCKETS = [1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 2.5e-2];

/** Decision times of one limiter: per-bucket counts, kept off prom-client so a request only adds. */
export class Timings {
  readonly bounds: readonly number[] = DECISION_BUCKETS;
  readonly counts = new Float64Array(DECISION_BUCKETS.length);
  sum = 0;
  count = 0;

  /** One observation standing for `weight` of them (a sample). */
  observe(seconds: number, weight: number): void {
    this.sum += seconds * weight;
    this.count += weight;
    for (let i = 0; i < DECISION_BUCKETS.length; i++) {
      if (seconds <= DECISION_BUCKETS[i]!) {
        this.counts[i]! += weight;
        return;
      }
    }
  }
}

type Sample = { value: number; labels: Record<string, string | number>; metricName: string };

/** Per-bucket counts (`counts[i]`: observations in bucket `bounds[i]`, beyond the last bound not needed), sum and count. */
export interface BucketCounts {
  readonly bounds: readonly number[];
  readonly counts: ArrayLike<number>;
  readonly sum: number;
  readonly count: number;
}

/**
 * A histogram whose series are per-bucket counts of every open limiter (its `Timings`, or several
 * series with labels of their own), labelled `node`; it meets the prom-client registry's metric
 * contract (`name`, `help`, `type`, `get()`, `reset()`).
 */
export class TimingsHistogram<M> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly read: (m: M) => BucketCounts | ReadonlyArray<readonly [Record<string, string>, BucketCounts]>,
    private readonly members: ReadonlyMap<string, M>,
  ) {}

  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Sample[] }> {
    const values: Sample[] = [];
    for (const [node, m] of this.members) {
      const read = this.read(m);
      for (const [extra, t] of Array.isArray(read) ? (read as ReadonlyArray<readonly [Record<string, string>, BucketCounts]>) : [[{}, read as BucketCounts] as const]) {
        const labels = { ...extra, node };
        let acc = 0;
        t.bounds.forEach((le, i) => {
          acc += t.counts[i]!;
          values.push({ value: acc, labels: { le, ...labels }, metricName: `${this.name}_bucket` });
        });
        values.push({ value: t.count, labels: { le: '+Inf', ...labels }, metricName: `${this.name}_bucket` });
        values.push({ value: t.sum, labels, metricName: `${this.name}_sum` });
        values.push({ value: t.count, labels, metricName: `${this.name}_count` });
      }
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** The counts belong to the limiters (like the mirrored counters, they are read, not reset). */
  reset(): void {}
}

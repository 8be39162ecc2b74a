import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { PeakRecord, TrafficHistory } from '../lib/policy-backfill.js';
import { decodeSighting, fromScore, HOUR_MS, hourOf, parseMember, PeakAggregator, SightingAggregator, type Sighting } from '../lib/peak-history.js';

type Client = Redis | Cluster;

/** Members or fields per command: a flush of many keys is several commands, pipelined. */
const CHUNK = 500;

/**
 * The recorded traffic policy staging judges candidates against (key layout): `<prefix>:{hist}:hours`
 * (zset: the hours holding anything, score = the hour's start), and per hour, under a hash tag of its
 * own so the hours spread over a Redis Cluster, `<prefix>:{hist:<hour>}:peaks` (zset: `<key id> <window
 * ms>` → twice the most a window of it that ended in the hour admitted, plus 1 if that was its whole
 * allowance) and `<prefix>:{hist:<hour>}:seen` (hash: key id → `[tenant or null, route class, [window
 * ms…]]`). Key ids only: never a raw key.
 */
export class HistoryKeys {
  constructor(readonly prefix = 'frl') {}
  get hours(): string {
    return `${this.prefix}:{hist}:hours`;
  }
  peaks(hour: number): string {
    return `${this.prefix}:{hist:${hour}}:peaks`;
  }
  seen(hour: number): string {
    return `${this.prefix}:{hist:${hour}}:seen`;
  }
}

/**
 * A node's side of the history: its owner's peaks of the windows it swept, and its own sightings of
 * keys, each held in memory and written by `flush` (every few seconds, off the request path): peaks
 * merged with `ZADD GT` (a max: owners of one key's other windows, and a handover's two owners of one
 * window, merge safely), sightings with `HSET`. A flush that fails loses what it carried (accuracy:
 * a window missing from the history), never anything on the request path.
 */
export class HistoryWriter {
  readonly peaks = new PeakAggregator();
  readonly sightings = new SightingAggregator();
  private readonly keys: HistoryKeys;
  /** Writes that failed, and entries lost with them. */
  failed = 0;

  constructor(
    private readonly redis: Client,
    prefix: string | undefined,
    private readonly clock: Clock,
    private readonly logger?: Logger,
  ) {
    this.keys = new HistoryKeys(prefix);
  }

  /** Writes what was recorded since the last flush; resolves once Redis answered (never rejects). */
  async flush(): Promise<void> {
    const now = this.clock.now();
    const peaks = this.peaks.take(now);
    const seen = this.sightings.take(now);
    if (peaks.length === 0 && seen.length === 0) return;
    const writes: Array<Promise<unknown>> = [];
    const hours = new Set<number>();
    const byHour = <T extends { hour: number }>(rows: readonly T[]): Map<number, T[]> => {
      const m = new Map<number, T[]>();
      for (const r of rows) {
        hours.add(r.hour);
        const list = m.get(r.hour);
        if (list === undefined) m.set(r.hour, [r]);
        else list.push(r);
      }
      return m;
    };
    for (const [hour, rows] of byHour(peaks)) {
      for (let i = 0; i < rows.length; i += CHUNK) writes.push(this.redis.zadd(this.keys.peaks(hour), 'GT', ...rows.slice(i, i + CHUNK).flatMap((r) => [r.score, r.member])));
    }
    for (const [hour, rows] of byHour(seen)) {
      for (let i = 0; i < rows.length; i += CHUNK) writes.push(this.redis.hset(this.keys.seen(hour), ...rows.slice(i, i + CHUNK).flatMap((r) => [r.keyId, r.value])));
    }
    writes.push(this.redis.zadd(this.keys.hours, ...[...hours].flatMap((h) => [h, String(h)])));
    const results = await Promise.allSettled(writes);
    const bad = results.filter((r) => r.status === 'rejected');
    if (bad.length > 0) {
      this.failed += bad.length;
      this.logger?.warn({ err: (bad[0] as PromiseRejectedResult).reason as Error, writes: bad.length }, 'traffic history not written (a gap in the staging history)');
    }
  }
}

/** Hours in [fromMs, toMs) that hold history, oldest first. */
async function hoursIn(redis: Client, keys: HistoryKeys, fromMs: number, toMs: number): Promise<number[]> {
  return (await redis.zrangebyscore(keys.hours, hourOf(fromMs), `(${toMs}`)).map(Number).filter((h) => Number.isSafeInteger(h));
}

/**
 * The recorded traffic of the `hours` hours up to `nowMs` (the current hour included). Peaks below
 * `minCount` are not read (no candidate limit is below it, so none of them can be throttled); every
 * sighting is: the latest hour's tenant and route class, the union of window lengths.
 */
export async function readHistory(redis: Client, prefix: string | undefined, nowMs: number, hours: number, minCount = 0): Promise<TrafficHistory> {
  const keys = new HistoryKeys(prefix);
  const from = hourOf(nowMs) - (hours - 1) * HOUR_MS;
  const list = await hoursIn(redis, keys, from, hourOf(nowMs) + HOUR_MS);
  const peaks: PeakRecord[] = [];
  const sightings = new Map<string, Sighting>();
  let withData = 0;
  // A day at a time: all of a day's reads in flight together.
  for (let i = 0; i < list.length; i += 24) {
    const day = list.slice(i, i + 24);
    const read = await Promise.all(day.map((h) => Promise.all([redis.zrangebyscore(keys.peaks(h), 2 * minCount, '+inf', 'WITHSCORES'), redis.hgetall(keys.seen(h))])));
    for (const [j, [flat, seen]] of read.entries()) {
      const hour = day[j]!;
      if (flat.length > 0 || Object.keys(seen).length > 0) withData++;
      for (let k = 0; k + 1 < flat.length; k += 2) {
        const m = parseMember(flat[k]!);
        const score = Number(flat[k + 1]);
        if (m !== undefined && Number.isSafeInteger(score) && score >= 0) peaks.push({ ...m, hour, ...fromScore(score) });
      }
      for (const [keyId, text] of Object.entries(seen)) {
        const s = decodeSighting(text);
        if (s === undefined) continue;
        const before = sightings.get(keyId);
        const lengths = before === undefined ? s.windowLengths : [...new Set([...before.windowLengths, ...s.windowLengths])];
        sightings.set(keyId, { ...s, windowLengths: lengths });
      }
    }
  }
  return { hoursRead: hours, hoursWithData: withData, firstHour: list[0], lastHour: list[list.length - 1], sightings, peaks };
}

/** Deletes the history of every hour that ended at or before `beforeMs`; returns how many hours. */
export async function trimHistory(redis: Client, prefix: string | undefined, beforeMs: number): Promise<number> {
  const keys = new HistoryKeys(prefix);
  const old = (await redis.zrangebyscore(keys.hours, '-inf', beforeMs - HOUR_MS)).map(Number).filter((h) => Number.isSafeInteger(h));
  for (let i = 0; i < old.length; i += 100) {
    const batch = old.slice(i, i + 100);
    // One key a DEL: an hour's two keys share a slot, two hours need not.
    await Promise.all(batch.map((h) => redis.del(keys.peaks(h), keys.seen(h))));
    await redis.zrem(keys.hours, ...batch.map(String));
  }
  return old.length;
}

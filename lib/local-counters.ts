import type { Clock } from './clock.js';
import { ADMITTED, type Acquired, type Denied, type Enforcer, type LeaseNodeStats, type QuotaSource, type WindowQuota } from './node-contract.js';
import type { ResolvedLimits } from './policy.js';
import { phaseOffset, windowEndMs, windowIdAt } from './window.js';

/** Numbers kept per window of a key: its window id, its phase offset, and what it admitted there. */
const SLOTS = 3;

/**
 * One key's counts: `counts[3i]` is the id of window `i`'s current window, `counts[3i + 1]` its phase
 * offset, `counts[3i + 2]` the admissions counted in it. Small integers all (ids of 1 s windows stay
 * below 2³¹ until 2038), so V8 keeps them unboxed, with no heap number per count.
 */
class Counts {
  constructor(
    readonly limits: ResolvedLimits,
    readonly counts: number[],
  ) {}
}

/**
 * The decision of a fleet of one: a count per key and window, in this process. With nobody to share
 * an allowance with there is nothing to lease, grant or report: a request is admitted when every
 * window of its key has room for it. The windows are the fleet's (the same ids and per-key phase
 * offsets, `lib/window.ts`), and the answers a fleet's owners would give: all or nothing across a
 * key's windows, and a refusal's Retry-After is the wait until the latest of its full windows ends.
 *
 * Counts of running windows are never dropped (that would admit past the allowance), as an owner
 * keeps its ledgers; a key whose windows have all ended is forgotten by a sweep that visits every key
 * about once a second, a slice each round. No timers or I/O inside: the caller drives `endRound()`.
 */
export class LocalCounters implements Enforcer, QuotaSource {
  readonly stats: LeaseNodeStats = { fastPath: 0, fastPathTimeouts: 0, grantsApplied: 0, grantsIgnored: 0, staleOwnerEpoch: 0, adjustsApplied: 0, selfGrants: 0, reports: 0, charged: 0 };
  /** Never degraded: there is no owner to lose contact with. */
  readonly degraded = false;
  private readonly map = new Map<string, Counts>();
  private roundNo = 0;
  private cursor: IterableIterator<[string, Counts]> | undefined;
  /** Windows counted (a bucket each, as a fleet node would hold); never over a cap, there is none. */
  readonly buckets = { size: 0, overCap: 0 };

  /** @param sweepRounds rounds over which the sweep visits every key once */
  constructor(
    private readonly clock: Clock,
    private readonly sweepRounds = 40,
  ) {}

  get round(): number {
    return this.roundNo;
  }

  /** Keys held. */
  get keys(): number {
    return this.map.size;
  }

  /** Admits `cost` in every window of `limits` or in none. Always synchronous. */
  acquire(keyId: string, limits: ResolvedLimits, cost = 1): Acquired {
    const now = this.clock.now();
    const c = this.countsAt(keyId, limits, now);
    const windows = limits.windows;
    for (let i = 0, k = 2; i < windows.length; i++, k += SLOTS) {
      if (c[k]! + cost > windows[i]!.limit) return this.deny(c, limits, cost, now);
    }
    for (let k = 2; k < c.length; k += SLOTS) c[k]! += cost;
    return ADMITTED;
  }

  /** Counts `cost` in every window of `limits` for a request admitted without a decision (fail-open). */
  charge(keyId: string, limits: ResolvedLimits, cost = 1): void {
    const c = this.countsAt(keyId, limits, this.clock.now());
    for (let k = 2; k < c.length; k += SLOTS) c[k]! += cost;
    this.stats.charged += cost;
  }

  /** Ends a round: forgets a slice of the keys whose windows have all ended. */
  endRound(): void {
    this.roundNo++;
    const now = this.clock.now();
    this.cursor ??= this.map.entries();
    for (let n = Math.max(64, Math.ceil(this.map.size / this.sweepRounds)); n > 0; n--) {
      const next = this.cursor.next();
      if (next.done === true) {
        this.cursor = undefined;
        return;
      }
      const [keyId, e] = next.value;
      if (ended(e, now)) {
        this.map.delete(keyId);
        this.buckets.size -= e.limits.windows.length;
      }
    }
  }

  /** No owner, so never any silence. */
  longestSilenceMs(): number {
    return 0;
  }

  windowQuota(keyId: string, limits: ResolvedLimits, i: number): WindowQuota | undefined {
    const e = this.map.get(keyId);
    if (e === undefined || e.limits !== limits) return undefined;
    const now = this.clock.now();
    const w = limits.windows[i]!;
    const k = i * SLOTS;
    const offset = e.counts[k + 1]!;
    const running = windowIdAt(now, w.windowMs, offset);
    // Counted in the window it holds unless a later one has begun (none rolled it yet): that one is whole.
    const current = running <= e.counts[k]!;
    return { left: current ? Math.max(0, w.limit - e.counts[k + 2]!) : w.limit, end: windowEndMs(current ? e.counts[k]! : running, w.windowMs, offset) };
  }

  /** Admissions counted in running windows, and the allowance of those windows (committed ≤ allowance). */
  totals(nowMs: number): { ledgers: number; committed: number; allowance: number } {
    let ledgers = 0;
    let committed = 0;
    let allowance = 0;
    for (const e of this.map.values()) {
      e.limits.windows.forEach((w, i) => {
        if (windowEndMs(e.counts[i * SLOTS]!, w.windowMs, e.counts[i * SLOTS + 1]!) <= nowMs) return;
        ledgers++;
        committed += Math.min(w.limit, e.counts[i * SLOTS + 2]!);
        allowance += w.limit;
      });
    }
    return { ledgers, committed, allowance };
  }

  /** The key's counts rolled to the windows running at `now`, created (or rebuilt for new limits) as needed. */
  private countsAt(keyId: string, limits: ResolvedLimits, now: number): number[] {
    let e = this.map.get(keyId);
    if (e === undefined || e.limits !== limits) e = this.load(keyId, limits, e);
    const c = e.counts;
    const windows = limits.windows;
    for (let i = 0, k = 0; i < windows.length; i++, k += SLOTS) {
      const id = windowIdAt(now, windows[i]!.windowMs, c[k + 1]!);
      // Never back into an earlier window: a wall clock stepped back keeps counting where it is.
      if (id > c[k]!) {
        c[k] = id;
        c[k + 2] = 0;
      }
    }
    return c;
  }

  /** New counts for `limits`; after a policy change, windows of the same length keep what they counted. */
  private load(keyId: string, limits: ResolvedLimits, previous: Counts | undefined): Counts {
    const counts: number[] = [];
    for (const w of limits.windows) {
      const j = previous?.limits.windows.findIndex((p) => p.windowMs === w.windowMs) ?? -1;
      if (j >= 0) counts.push(...previous!.counts.slice(j * SLOTS, j * SLOTS + SLOTS));
      else counts.push(-1, phaseOffset(keyId, w.windowMs), 0); // rolled into the running window at once
    }
    const e = new Counts(limits, counts);
    this.buckets.size += limits.windows.length - (previous?.limits.windows.length ?? 0);
    this.map.set(keyId, e);
    return e;
  }

  /** A refusal: the full window that ends last names it and says when to retry. */
  private deny(c: readonly number[], limits: ResolvedLimits, cost: number, now: number): Denied {
    let at = -1;
    let end = 0;
    limits.windows.forEach((w, i) => {
      const k = i * SLOTS;
      if (c[k + 2]! + cost <= w.limit) return;
      const e = windowEndMs(c[k]!, w.windowMs, c[k + 1]!);
      if (at < 0 || e > end) {
        at = i;
        end = e;
      }
    });
    return { admitted: false, window: limits.windows[at]!.name, retryAfterMs: Math.max(0, end - now), unavailable: false };
  }
}

/** Whether every window of `e` has ended by `now`. */
function ended(e: Counts, now: number): boolean {
  const windows = e.limits.windows;
  for (let i = 0, k = 0; i < windows.length; i++, k += SLOTS) {
    if (windowEndMs(e.counts[k]!, windows[i]!.windowMs, e.counts[k + 1]!) > now) return false;
  }
  return true;
}

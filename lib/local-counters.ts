import type { Clock } from './clock.js';
import { CountSlab, SLOTS } from './count-slab.js';
import { ADMITTED, newNodeStats, type Acquired, type Denied, type Enforcer, type LeaseNodeStats, type QuotaSource, type WindowQuota } from './node-contract.js';
import type { ResolvedLimits } from './policy.js';
import { fnv1a32 } from './hash.js';
import { windowEndMs, windowIdAt } from './window.js';

/**
 * The decision of a fleet of one: a count per key and window, in this process. With nobody to share
 * an allowance with there is nothing to lease, grant or report: a request is admitted when every
 * window of its key has room for it. The windows are the fleet's (the same ids and per-key phase
 * offsets, `lib/window.ts`), and the answers a fleet's owners would give: all or nothing across a
 * key's windows, and a refusal's Retry-After is the wait until the latest of its full windows ends.
 *
 * A key is an entry of one map, key id to the first of its slots in a `CountSlab`: no object per
 * key. Counts of running windows are never dropped (that would admit past the allowance), as an
 * owner keeps its ledgers; a key whose windows have all ended is forgotten by a sweep that visits
 * every key about once a second, a slice each round. No timers or I/O inside: the caller drives
 * `endRound()`.
 */
export class LocalCounters implements Enforcer, QuotaSource {
  readonly stats: LeaseNodeStats = newNodeStats();
  /** Never degraded: there is no owner to lose contact with. */
  readonly degraded = false;
  /** Key id → its first slot in `slab`. */
  private readonly map = new Map<string, number>();
  private readonly slab = new CountSlab();
  private roundNo = 0;
  private cursor: IterableIterator<[string, number]> | undefined;
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
    const at = this.countsAt(keyId, limits, now);
    const c = this.slab.counts;
    const windows = limits.windows;
    const end = at + windows.length * SLOTS;
    for (let i = 0, k = at + 2; k < end; i++, k += SLOTS) {
      if (c[k]! + cost > windows[i]!.limit) return this.deny(at, limits, cost, now);
    }
    for (let k = at + 2; k < end; k += SLOTS) c[k]! += cost;
    return ADMITTED;
  }

  /** Counts `cost` in every window of `limits` for a request admitted without a decision (fail-open). */
  charge(keyId: string, limits: ResolvedLimits, cost = 1): void {
    const at = this.countsAt(keyId, limits, this.clock.now());
    const c = this.slab.counts;
    for (let k = at + 2, end = at + limits.windows.length * SLOTS; k < end; k += SLOTS) c[k]! += cost;
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
      const [keyId, s] = next.value;
      if (this.ended(s, now)) {
        this.map.delete(keyId);
        this.buckets.size -= this.slab.limitsAt(s).windows.length;
        this.slab.release(s);
      }
    }
  }

  /** No owner, so never any silence. */
  longestSilenceMs(): number {
    return 0;
  }

  windowQuota(keyId: string, limits: ResolvedLimits, i: number): WindowQuota | undefined {
    const s = this.map.get(keyId);
    if (s === undefined || this.slab.limitsAt(s) !== limits) return undefined;
    const now = this.clock.now();
    const w = limits.windows[i]!;
    const c = this.slab.counts;
    const k = (s + i) * SLOTS;
    const offset = c[k + 1]!;
    const running = windowIdAt(now, w.windowMs, offset);
    // Counted in the window it holds unless a later one has begun (none rolled it yet): that one is whole.
    const current = running <= c[k]!;
    return { left: current ? Math.max(0, w.limit - c[k + 2]!) : w.limit, end: windowEndMs(current ? c[k]! : running, w.windowMs, offset) };
  }

  /** Admissions counted in running windows, and the allowance of those windows (committed ≤ allowance). */
  totals(nowMs: number): { ledgers: number; committed: number; allowance: number } {
    let ledgers = 0;
    let committed = 0;
    let allowance = 0;
    const c = this.slab.counts;
    for (const s of this.map.values()) {
      this.slab.limitsAt(s).windows.forEach((w, i) => {
        const k = (s + i) * SLOTS;
        if (windowEndMs(c[k]!, w.windowMs, c[k + 1]!) <= nowMs) return;
        ledgers++;
        committed += Math.min(w.limit, c[k + 2]!);
        allowance += w.limit;
      });
    }
    return { ledgers, committed, allowance };
  }

  /** Where in the slab the key's counts are, rolled to the windows running at `now`; created (or rebuilt for new limits) as needed. */
  private countsAt(keyId: string, limits: ResolvedLimits, now: number): number {
    let s = this.map.get(keyId);
    if (s === undefined || this.slab.limitsAt(s) !== limits) s = this.load(keyId, limits, s);
    const at = s * SLOTS;
    const c = this.slab.counts;
    const windows = limits.windows;
    for (let i = 0, k = at; i < windows.length; i++, k += SLOTS) {
      const id = windowIdAt(now, windows[i]!.windowMs, c[k + 1]!);
      // Never back into an earlier window: a wall clock stepped back keeps counting where it is.
      if (id > c[k]!) {
        c[k] = id;
        c[k + 2] = 0;
      }
    }
    return at;
  }

  /** New slots for `limits`; after a policy change, windows of the same length keep what they counted. */
  private load(keyId: string, limits: ResolvedLimits, previous: number | undefined): number {
    const s = this.slab.alloc(limits);
    const c = this.slab.counts; // read after alloc, which may have grown the slab
    const before = previous === undefined ? undefined : this.slab.limitsAt(previous).windows;
    const windows = limits.windows;
    // phaseOffset(keyId, windowMs) for every window, with the key id hashed once.
    let hash = -1;
    for (let i = 0, k = s * SLOTS; i < windows.length; i++, k += SLOTS) {
      const windowMs = windows[i]!.windowMs;
      const j = before === undefined ? -1 : before.findIndex((p) => p.windowMs === windowMs);
      if (j >= 0) {
        c.copyWithin(k, (previous! + j) * SLOTS, (previous! + j + 1) * SLOTS);
      } else {
        if (hash < 0) hash = fnv1a32(keyId);
        c[k] = -1; // rolled into the running window at once
        c[k + 1] = hash % windowMs;
        c[k + 2] = 0;
      }
    }
    this.buckets.size += windows.length - (before?.length ?? 0);
    if (previous !== undefined) this.slab.release(previous);
    this.map.set(keyId, s);
    return s;
  }

  /** A refusal: the full window that ends last names it and says when to retry. */
  private deny(at: number, limits: ResolvedLimits, cost: number, now: number): Denied {
    const c = this.slab.counts;
    let which = -1;
    let end = 0;
    limits.windows.forEach((w, i) => {
      const k = at + i * SLOTS;
      if (c[k + 2]! + cost <= w.limit) return;
      const e = windowEndMs(c[k]!, w.windowMs, c[k + 1]!);
      if (which < 0 || e > end) {
        which = i;
        end = e;
      }
    });
    return { admitted: false, window: limits.windows[which]!.name, retryAfterMs: Math.max(0, end - now), unavailable: false };
  }

  /** Whether every window of the key at slot `s` has ended by `now`. */
  private ended(s: number, now: number): boolean {
    const windows = this.slab.limitsAt(s).windows;
    const c = this.slab.counts;
    for (let i = 0, k = s * SLOTS; i < windows.length; i++, k += SLOTS) {
      if (windowEndMs(c[k]!, windows[i]!.windowMs, c[k + 1]!) > now) return false;
    }
    return true;
  }
}

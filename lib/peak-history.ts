import type { ResolvedLimits } from './policy.js';

/** History is kept per hour: the hour a window ended in (owners), or a key was seen in (nodes). */
export const HOUR_MS = 3_600_000;

/** The start (ms) of the hour `ms` falls in. */
export function hourOf(ms: number): number {
  return Math.floor(ms / HOUR_MS) * HOUR_MS;
}

/**
 * A window that admitted this many requests or fewer is never recorded: no policy allows a limit
 * below 1, so no candidate can refuse any of them. Skipping it hides nothing (see `judgeCandidate`).
 */
export const NEGLIGIBLE_COUNT = 1;

/** A window's count as a score: twice what it admitted, plus 1 if that reached its allowance. */
export function peakScore(admitted: number, allowance: number): number {
  return admitted * 2 + (admitted >= allowance ? 1 : 0);
}

/** What a score says: the count admitted, and whether the window's allowance was used up. */
export function fromScore(score: number): { count: number; saturated: boolean } {
  return { count: Math.floor(score / 2), saturated: score % 2 === 1 };
}

/** The member of a key's window length in an hour's peaks: `<key id> <window ms>` (key ids hold no space). */
export function peakMember(keyId: string, windowMs: number): string {
  return `${keyId} ${windowMs}`;
}

/** The key id and window length of a member, or undefined for one this format never writes. */
export function parseMember(member: string): { keyId: string; windowMs: number } | undefined {
  const i = member.lastIndexOf(' ');
  const windowMs = Number(member.slice(i + 1));
  return i > 0 && Number.isSafeInteger(windowMs) && windowMs > 0 ? { keyId: member.slice(0, i), windowMs } : undefined;
}

/** One hour's highest score of one member, to be merged into Redis with a max (`ZADD GT`). */
export interface PeakEntry {
  readonly hour: number;
  readonly member: string;
  readonly score: number;
}

/**
 * An owner's peaks (`FoldOwner.sweep` hands it every ledger it drops): per hour a window ended in, per
 * (key id, window length), the largest count a window admitted fleet-wide — the sum over every lease
 * of what was spent — with whether it used up its allowance. The hour's maxima stay in memory until
 * the hour is over (one entry per (key, window length) whose windows ended in it, whatever their
 * number), and `take` hands over only those that rose since it last handed them over: a key busy all
 * hour is written about as often as its peak rises, not once per window.
 */
export class PeakAggregator {
  /** Per hour, per member: [highest score, highest score handed over]. */
  private readonly hours = new Map<number, Map<string, [number, number]>>();

  /** Records one ended window. Dual-run counts (a key id with a suffix) are not the key's traffic. */
  add(keyId: string, windowMs: number, windowEnd: number, admitted: number, allowance: number): void {
    if (admitted <= NEGLIGIBLE_COUNT || keyId.includes('/')) return;
    const hour = hourOf(windowEnd);
    let h = this.hours.get(hour);
    if (h === undefined) this.hours.set(hour, (h = new Map()));
    const member = peakMember(keyId, windowMs);
    const score = peakScore(admitted, allowance);
    const e = h.get(member);
    if (e === undefined) h.set(member, [score, -1]);
    else if (e[0] < score) e[0] = score;
  }

  /**
   * The maxima that rose since the last call; the hours before `nowMs`'s are forgotten once handed
   * over (a window of theirs swept late starts its hour again: a max is safe to merge twice).
   */
  take(nowMs: number): PeakEntry[] {
    const out: PeakEntry[] = [];
    const current = hourOf(nowMs);
    for (const [hour, h] of this.hours) {
      for (const [member, e] of h) {
        if (e[0] <= e[1]) continue;
        e[1] = e[0];
        out.push({ hour, member, score: e[0] });
      }
      if (hour < current) this.hours.delete(hour);
    }
    return out;
  }

  /** Entries held: (hour, key, window length). */
  get size(): number {
    let n = 0;
    for (const h of this.hours.values()) n += h.size;
    return n;
  }
}

/** What a node knows of a key at decision time: its tenant, its route class, the window lengths it was held to. */
export interface Sighting {
  /** Undefined for an anonymous caller (its plan comes from the route class). */
  readonly tenant: string | undefined;
  /** Only kept for anonymous callers: an authenticated caller's plan does not depend on it. */
  readonly routeClass: string;
  readonly windowLengths: readonly number[];
}

/** A sighting as stored: a JSON array `[tenant or null, route class, [window ms…]]`. */
export function encodeSighting(s: Sighting): string {
  return JSON.stringify([s.tenant ?? null, s.routeClass, s.windowLengths]);
}

/** A stored sighting, or undefined if it is not one. */
export function decodeSighting(text: string): Sighting | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    if (!Array.isArray(v) || v.length < 3) return undefined;
    const [tenant, routeClass, lengths] = v as [unknown, unknown, unknown];
    if ((tenant !== null && typeof tenant !== 'string') || typeof routeClass !== 'string' || !Array.isArray(lengths)) return undefined;
    if (!lengths.every((n) => Number.isSafeInteger(n) && (n as number) > 0)) return undefined;
    return { tenant: tenant ?? undefined, routeClass, windowLengths: lengths as number[] };
  } catch {
    return undefined;
  }
}

interface Seen {
  tenant: string | undefined;
  routeClass: string;
  limits: ResolvedLimits;
  dirty: boolean;
}

/**
 * A node's sightings: key id → what it knows of the key. `note` is on the request path: a map lookup
 * and three comparisons when nothing changed, no clock. `take` hands over what changed since the last
 * call, as seen in the hour of that call's predecessor; at a new hour everything is forgotten, so each
 * key seen again is handed over again, in its new hour.
 */
export class SightingAggregator {
  private hour = -1;
  private seen = new Map<string, Seen>();

  note(keyId: string, tenant: string | undefined, routeClass: string, limits: ResolvedLimits): void {
    const rc = tenant === undefined ? routeClass : '';
    const s = this.seen.get(keyId);
    if (s === undefined) this.seen.set(keyId, { tenant, routeClass: rc, limits, dirty: true });
    else if (s.limits !== limits || s.tenant !== tenant || s.routeClass !== rc) {
      s.tenant = tenant;
      s.routeClass = rc;
      s.limits = limits;
      s.dirty = true;
    }
  }

  /** Sightings changed since the last call, with their hour. */
  take(nowMs: number): Array<{ hour: number; keyId: string; value: string }> {
    const hour = hourOf(nowMs);
    if (this.hour < 0) this.hour = hour;
    const out: Array<{ hour: number; keyId: string; value: string }> = [];
    for (const [keyId, s] of this.seen) {
      if (!s.dirty) continue;
      s.dirty = false;
      out.push({ hour: this.hour, keyId, value: encodeSighting({ tenant: s.tenant, routeClass: s.routeClass, windowLengths: s.limits.windows.map((w) => w.windowMs) }) });
    }
    if (hour !== this.hour) {
      this.seen = new Map();
      this.hour = hour;
    }
    return out;
  }

  get size(): number {
    return this.seen.size;
  }
}

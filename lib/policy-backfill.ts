import type { Sighting } from './peak-history.js';
import type { CompiledPolicy, ResolvedLimits, WindowSpec } from './policy.js';

/** One hour's peak of one key and window length: the most a window admitted, fleet-wide. */
export interface PeakRecord {
  readonly keyId: string;
  readonly windowMs: number;
  /** Start of the hour (ms) the windows ended in. */
  readonly hour: number;
  readonly count: number;
  /** The window used up its allowance: the key was at its limit then. */
  readonly saturated: boolean;
}

/** The recorded traffic a candidate is judged against. */
export interface TrafficHistory {
  /** Hours read, and the first and last of them holding anything. */
  readonly hoursRead: number;
  readonly firstHour: number | undefined;
  readonly lastHour: number | undefined;
  readonly hoursWithData: number;
  /** Per key id: what nodes saw (its tenant, route class, the window lengths it was held to, over every hour). */
  readonly sightings: ReadonlyMap<string, Sighting>;
  readonly peaks: readonly PeakRecord[];
}

/** A key and window the candidate would refuse requests in. */
export interface ThrottledWindow {
  readonly keyId: string;
  readonly window: string;
  readonly windowMs: number;
  /** The highest count recorded over the limit, and the hour (ms) it was recorded in. */
  readonly peak: number;
  readonly hour: number;
  /** How many hours had a count over the new limit. */
  readonly hours: number;
  /** The current policy's limit for that window length (null: none, or not enforced). */
  readonly oldLimit: number | null;
  readonly newLimit: number;
}

/** A key and window the history says nothing about. */
export interface UnjudgedWindow {
  readonly keyId: string;
  readonly window: string;
  readonly windowMs: number;
  /** The candidate's limit for it (null: unknown, the key's plan is). */
  readonly newLimit: number | null;
  readonly reason: string;
}

export interface StageReport {
  readonly hoursRead: number;
  readonly hoursWithData: number;
  readonly firstHour: number | null;
  readonly lastHour: number | null;
  readonly keysSeen: number;
  readonly windowsJudged: number;
  /** Under its limit in force then and now, over the candidate's: refused where it is admitted today. */
  readonly newlyThrottled: { readonly count: number; readonly keys: readonly ThrottledWindow[] };
  /** Already at its limit (the window used up its allowance, or the count reaches today's limit), and the candidate lowers it. */
  readonly furtherThrottled: { readonly count: number; readonly keys: readonly ThrottledWindow[] };
  readonly unjudged: { readonly count: number; readonly keys: readonly UnjudgedWindow[] };
  /** Each list holds at most this many rows (worst first); `count` is the full number. */
  readonly listed: number;
}

/** The enforced windows of `keyId` under `policy` (none when its plan is in shadow mode). */
function enforced(policy: CompiledPolicy | undefined, keyId: string, seen: Sighting | undefined): readonly WindowSpec[] {
  if (policy === undefined) return [];
  let limits: ResolvedLimits;
  if (seen === undefined || seen.tenant !== undefined) limits = policy.limitsFor(keyId, seen?.tenant);
  else {
    if (policy.shadowRoute(seen.routeClass)) return [];
    limits = policy.anonymousLimitsFor(seen.routeClass);
  }
  return limits.shadow ? [] : limits.windows;
}

/**
 * Judges a candidate policy against recorded traffic. Each key is resolved as a node resolves it
 * (override → tenant plan → default plan; an anonymous caller's plan from its route class), under the
 * policy in force and under the candidate, and its windows are joined with its peaks by window length.
 * A peak over the candidate's limit is newly throttled unless today's policy enforces that window and
 * the key was already at its limit (the window used up its allowance) or would be today (the count
 * reaches today's limit); those are listed apart when the candidate lowers the limit. Counts of one or
 * none are not recorded, which hides nothing: no limit is below 1. A window length the key has no
 * record of (its nodes never held it to one) cannot be judged and is listed; a key with peaks but no
 * sighting is judged only if it has an override in both policies (its plan then needs no tenant),
 * else listed too.
 */
export function judgeCandidate(current: CompiledPolicy | undefined, candidate: CompiledPolicy, history: TrafficHistory, listed = 1000): StageReport {
  const fresh = new Map<string, ThrottledWindow>();
  const further = new Map<string, ThrottledWindow>();
  const unjudged = new Map<string, UnjudgedWindow>();
  const judged = new Set<string>();
  const hasOverride = (p: CompiledPolicy | undefined, keyId: string): boolean => Object.hasOwn(p?.doc.keys ?? {}, keyId);
  for (const p of history.peaks) {
    const seen = history.sightings.get(p.keyId);
    const id = `${p.keyId} ${p.windowMs}`;
    if (seen === undefined && !(hasOverride(candidate, p.keyId) && hasOverride(current, p.keyId))) {
      const w = enforced(candidate, p.keyId, undefined).find((x) => x.windowMs === p.windowMs);
      unjudged.set(id, { keyId: p.keyId, window: w?.name ?? '', windowMs: p.windowMs, newLimit: w?.limit ?? null, reason: 'no node recorded its tenant: its plan is unknown' });
      continue;
    }
    judged.add(id);
    const next = enforced(candidate, p.keyId, seen).find((x) => x.windowMs === p.windowMs);
    // A window that used its whole allowance may have been asked for more: at the new limit, it is over it.
    if (next === undefined || p.count < next.limit || (p.count === next.limit && !p.saturated)) continue;
    const old = enforced(current, p.keyId, seen).find((x) => x.windowMs === p.windowMs);
    const oldLimit = old?.limit ?? null;
    // Throttled already: only where today's policy enforces this window (a shadow plan refuses nobody).
    const already = oldLimit !== null && (p.saturated || p.count >= oldLimit);
    if (already && oldLimit !== null && next.limit >= oldLimit) continue;
    const into = already ? further : fresh;
    const was = into.get(id);
    into.set(id, {
      keyId: p.keyId,
      window: next.name,
      windowMs: p.windowMs,
      peak: was === undefined || p.count > was.peak ? p.count : was.peak,
      hour: was === undefined || p.count > was.peak ? p.hour : was.hour,
      hours: (was?.hours ?? 0) + 1,
      oldLimit,
      newLimit: next.limit,
    });
  }
  for (const [keyId, seen] of history.sightings) {
    for (const w of enforced(candidate, keyId, seen)) {
      if (seen.windowLengths.includes(w.windowMs)) continue;
      unjudged.set(`${keyId} ${w.windowMs}`, { keyId, window: w.name, windowMs: w.windowMs, newLimit: w.limit, reason: 'no recorded history for this window length' });
    }
  }
  const worst = (m: Map<string, ThrottledWindow>): ThrottledWindow[] => [...m.values()].sort((a, b) => b.peak / b.newLimit - a.peak / a.newLimit || (a.keyId < b.keyId ? -1 : 1)).slice(0, listed);
  const keysSeen = new Set([...history.sightings.keys(), ...history.peaks.map((p) => p.keyId)]).size;
  return {
    hoursRead: history.hoursRead,
    hoursWithData: history.hoursWithData,
    firstHour: history.firstHour ?? null,
    lastHour: history.lastHour ?? null,
    keysSeen,
    windowsJudged: judged.size,
    newlyThrottled: { count: fresh.size, keys: worst(fresh) },
    furtherThrottled: { count: further.size, keys: worst(further) },
    unjudged: { count: unjudged.size, keys: [...unjudged.values()].sort((a, b) => (a.keyId < b.keyId ? -1 : a.keyId > b.keyId ? 1 : a.windowMs - b.windowMs)).slice(0, listed) },
    listed,
  };
}

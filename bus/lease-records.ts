import type { Blanket } from '../lib/owner/blankets.js';
import type { Adjust, CreditRequest, Grant, LeaseRef, OwnerMessage, Report } from '../lib/protocol/messages.js';
import { at, bad, bool, int, num, posint, record, str, uint, type Fields, type Reader } from './body-readers.js';

/*
 * The leasing protocol's records as the bus carries them (`bus/bodies.ts` puts them in bodies):
 * arrays in a fixed field order, then trailing fields a release that does not know them ignores.
 * A trailing field is written only when it, or one after it, says something.
 */

type Writable<T> = { -readonly [K in keyof T]: T[K] };

/** Trailing element `i` of a record read by `r`, if the record has one. */
function tail<T>(v: unknown, i: number, r: Reader<T>, p: string): T | undefined {
  const a = v as unknown[];
  return a.length > i ? r(a[i], p) : undefined;
}

/**
 * Trailing `floated` at `i`: the part of `issued` that came out of an owner's float (0 when absent),
 * never more than it. A release that ignores it counts more committed, never less.
 */
function floatedAt(v: unknown, i: number, issued: number, p: string): number {
  const floated = tail(v, i, uint, at(p, '.floated')) ?? 0;
  if (floated > issued) bad(at(p, '.floated'), 'must not be more than issued');
  return floated;
}

/**
 * `rec` (of `n` fields) followed by the `fixedShare` flag, its `middle` field and `floated`, each
 * written when it or a later one says something (the flag as 0, `middle` as `fill`) and read when
 * present; `floated` never more than `bound` says.
 */
function tailed<T extends { readonly fixedShare?: boolean; readonly floated?: number }>(
  rec: { encode: (x: T) => unknown[]; decode: Reader<T> },
  n: number,
  middle: 'seen' | 'issued',
  fill: (x: T) => number,
  bound: (x: T) => number,
): { encode: (x: T) => unknown[]; decode: (v: unknown, p: string) => T } {
  return {
    encode: (x) => {
      const out = rec.encode(x);
      const mid = (x as Record<string, unknown>)[middle] as number | undefined;
      const floated = x.floated ?? 0;
      if (mid !== undefined || floated > 0) out.push(x.fixedShare === true ? 1 : 0, mid ?? fill(x));
      else if (x.fixedShare === true) out.push(1);
      if (floated > 0) out.push(floated);
      return out;
    },
    decode: (v, p) => {
      const x = rec.decode(v, p) as Writable<T>;
      if (tail(v, n, bool, at(p, '.fixedShare')) === true) x.fixedShare = true;
      const mid = tail(v, n + 1, uint, at(p, `.${middle}`));
      if (mid !== undefined) (x as Record<string, unknown>)[middle] = mid;
      const floated = floatedAt(v, n + 2, bound(x), p);
      if (floated > 0) x.floated = floated;
      return x;
    },
  };
}

const reportFields = record<Report>([
  ['keyId', str],
  ['windowId', uint],
  ['windowMs', posint],
  ['limit', uint],
  ['lease', uint],
  ['seq', int],
  ['spent', uint],
  ['issued', uint],
  ['selfIssued', uint],
  ['released', uint],
  ['demand', num],
  ['held', num],
  ['selfGrant', bool],
]);
const REPORT_FIELDS = 13;

const requestFields = record<CreditRequest>([
  ['keyId', str],
  ['windowId', uint],
  ['windowMs', posint],
  ['limit', uint],
  ['nodeId', str],
  ['nodeEpoch', str],
  ['lease', uint],
  ['spent', uint],
  ['selfIssued', uint],
  ['released', uint],
  ['need', uint],
  ['demand', num],
  ['fastPath', bool],
]);
const REQUEST_FIELDS = 13;

/**
 * A report: its fields, then the `fixedShare` flag (a release that does not know it reads leasing:
 * demand-sized grants, still within the allowance), `seen` (requests offered; before it was
 * reported, the owner took `spent`, which it is written as when unknown) and `floated`.
 */
export const reportRec = tailed(
  reportFields,
  REPORT_FIELDS,
  'seen',
  (r) => r.spent,
  (r) => r.issued,
);

/** A credit request: its fields, then the `fixedShare` flag (as a report's), `issued` and `floated`. */
export const requestRec = tailed(
  requestFields,
  REQUEST_FIELDS,
  'issued',
  (q) => q.floated ?? 0,
  (q) => q.issued ?? 0,
);

/** Which lease an owner's message is about (`LeaseRef`): the first fields of a grant and an adjustment. */
const leaseRef: Fields<LeaseRef> = [
  ['keyId', str],
  ['windowId', uint],
  ['windowMs', posint],
  ['nodeId', str],
  ['nodeEpoch', str],
  ['lease', uint],
  ['ownerEpoch', posint],
];

const grantRec = record<Omit<Grant, 'type'>>([...leaseRef, ['grantSeq', posint], ['issued', uint]]);
const GRANT_FIELDS = 9;

export const blanketRec = record<Blanket>([
  ['shard', uint],
  ['nodeId', str],
  ['nodeEpoch', str],
  ['ownerEpoch', posint],
  ['startsAfter', uint],
  ['startsBy', uint],
  ['retired', bool],
]);

const adjustRec = record<Omit<Adjust, 'type'>>([...leaseRef, ['keep', int], ['exhausted', bool], ['grantSeq', uint]]);

/** A grant's fields, then `floated` (0 for none), then `late` (1, or left out). */
export const decodeGrant: Reader<Grant> = (v, p) => {
  const g = grantRec.decode(v, p) as Writable<Grant>;
  const floated = floatedAt(v, GRANT_FIELDS, g.issued, p);
  const late = tail(v, GRANT_FIELDS + 1, bool, at(p, '.late')) === true;
  g.type = 'grant';
  if (floated > 0) g.floated = floated;
  if (late) g.late = 1;
  return g;
};
export const encodeGrant = (g: Grant): unknown[] => {
  const out = grantRec.encode(g);
  if (g.late === 1) out.push(g.floated ?? 0, 1);
  else if (g.floated) out.push(g.floated);
  return out;
};

export const decodeMessage: Reader<OwnerMessage> = (v, p) => {
  if (!Array.isArray(v) || (v[0] !== 'g' && v[0] !== 'a')) bad(p, 'must be ["g", grant] or ["a", adjust]');
  if (v[0] === 'g') return decodeGrant(v[1], at(p, '.grant'));
  const m = adjustRec.decode(v[1], at(p, '.adjust')) as Writable<Adjust>;
  m.type = 'adjust';
  return m;
};
export const encodeMessage = (m: OwnerMessage): unknown[] => (m.type === 'grant' ? ['g', encodeGrant(m)] : ['a', adjustRec.encode(m)]);

import type { Blanket } from '../lib/owner/blankets.js';
import { HOLDERS_MAX, type Held, type HeldShard, type HeldStatement, type Holder } from '../lib/owner/held.js';
import type { Adjust, CreditRequest, Grant, LeaseRef, OwnerMessage, Report } from '../lib/protocol/messages.js';
import { at, bad, bool, int, list, num, posint, record, str, uint, type Fields, type Reader } from './body-readers.js';

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
 * Trailing `name` at `i`: a part of `issued` (0 when absent), never more than it — `floated`, what
 * came out of an owner's float, or `blanketed`, what the node took itself under a blanket. A release
 * that ignores it counts more committed, never less.
 */
function partAt(v: unknown, i: number, issued: number, p: string, name: 'floated' | 'blanketed' = 'floated'): number {
  const part = tail(v, i, uint, at(p, `.${name}`)) ?? 0;
  if (part > issued) bad(at(p, `.${name}`), 'must not be more than issued');
  return part;
}

/**
 * `rec` (of `n` fields) followed by the `fixedShare` flag, its `middle` field, `floated` and
 * `blanketed`, each written when it or a later one says something (the flag as 0, `middle` as
 * `fill`) and read when present; the last two never more than `bound` says.
 */
function tailed<T extends { readonly fixedShare?: boolean; readonly floated?: number; readonly blanketed?: number }>(
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
      const blanketed = x.blanketed ?? 0;
      const says = blanketed > 0 ? 4 : floated > 0 ? 3 : mid !== undefined ? 2 : x.fixedShare === true ? 1 : 0;
      const trailing = [x.fixedShare === true ? 1 : 0, mid ?? fill(x), floated, blanketed];
      for (let i = 0; i < says; i++) out.push(trailing[i]);
      return out;
    },
    decode: (v, p) => {
      const x = rec.decode(v, p) as Writable<T>;
      if (tail(v, n, bool, at(p, '.fixedShare')) === true) x.fixedShare = true;
      const mid = tail(v, n + 1, uint, at(p, `.${middle}`));
      if (mid !== undefined) (x as Record<string, unknown>)[middle] = mid;
      const floated = partAt(v, n + 2, bound(x), p);
      if (floated > 0) x.floated = floated;
      const blanketed = partAt(v, n + 3, bound(x), p, 'blanketed');
      if (blanketed > 0) x.blanketed = blanketed;
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
 * reported, the owner took `spent`, which it is written as when unknown), `floated` and `blanketed`.
 */
export const reportRec = tailed(
  reportFields,
  REPORT_FIELDS,
  'seen',
  (r) => r.spent,
  (r) => r.issued,
);

/** A credit request: its fields, then the `fixedShare` flag (as a report's), `issued`, `floated` and `blanketed`. */
export const requestRec = tailed(
  requestFields,
  REQUEST_FIELDS,
  'issued',
  (q) => Math.max(q.floated ?? 0, q.blanketed ?? 0),
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

const blanketFields = record<Blanket>([
  ['shard', uint],
  ['nodeId', str],
  ['nodeEpoch', str],
  ['ownerEpoch', posint],
  ['startsAfter', uint],
  ['startsBy', uint],
  ['retired', bool],
]);
const BLANKET_FIELDS = 7;

/** How a blanket's record and an owner's statement list a member: node epoch, `since`, then `until` once it has one. */
type Span = HeldStatement['holders'][number];
const spanOf = (h: Span): unknown[] => (h.until === undefined ? [h.nodeEpoch, h.since] : [h.nodeEpoch, h.since, h.until]);
function readSpan(v: unknown, i: number, p: string, shape: string): Span {
  if (!Array.isArray(v) || v.length < i + 2) bad(p, `must be ${shape}`);
  const h = { nodeEpoch: str(v[i], at(p, `[${i}]`)), since: uint(v[i + 1], at(p, `[${i + 1}]`)) };
  const until = tail(v, i + 2, uint, at(p, `[${i + 2}]`));
  return until === undefined ? h : { ...h, until };
}

/** A member a blanket lists (`Holder`): its node id, then its span. */
const readHolder: Reader<Holder> = (v, p) => {
  const span = readSpan(v, 1, p, '[nodeId, nodeEpoch, since, until?]');
  return { nodeId: str((v as unknown[])[0], at(p, '[0]')), ...span };
};
const readHeld = (v: unknown, p: string): Held => {
  if (!Array.isArray(v) || v.length < 3) bad(p, 'must be [min, startsBy, holders, reach?]');
  const held = { min: uint(v[0], at(p, '.min')), startsBy: uint(v[1], at(p, '.startsBy')), holders: list(readHolder, HOLDERS_MAX)(v[2], at(p, '.holders')) };
  const reach = tail(v, 3, uint, at(p, '.reach'));
  return reach === undefined ? held : { ...held, reach };
};

/** A blanket: its fields, then what it lets members hold (`held`: min, end, holders and reach), if anything. */
export const blanketRec = {
  encode: (b: Blanket): unknown[] => {
    const out = blanketFields.encode(b);
    const h = b.held;
    if (h !== undefined) out.push([h.min, h.startsBy, h.holders.map((x) => [x.nodeId, ...spanOf(x)]), ...(h.reach === undefined ? [] : [h.reach])]);
    return out;
  },
  decode: (v: unknown, p: string): Blanket => {
    const b = blanketFields.decode(v, p);
    const held = tail(v, BLANKET_FIELDS, readHeld, at(p, '.held'));
    if (held !== undefined && held.startsBy > b.startsBy) bad(at(p, '.held.startsBy'), 'must not be after the blanket’s');
    return held === undefined ? b : { ...b, held };
  },
};

/** An owner's statement of its blankets' held parts (`HeldStatement`): [members' spans, [shard, owner epoch, startsAfter, startsBy, min, reach?]…]. */
const readHeldShard: Reader<HeldShard> = (v, p) => {
  if (!Array.isArray(v) || v.length < 5) bad(p, 'must be [shard, ownerEpoch, startsAfter, startsBy, min, reach?]');
  const h = { shard: uint(v[0], at(p, '[0]')), ownerEpoch: posint(v[1], at(p, '[1]')), startsAfter: uint(v[2], at(p, '[2]')), startsBy: uint(v[3], at(p, '[3]')), min: uint(v[4], at(p, '[4]')) };
  const reach = tail(v, 5, uint, at(p, '[5]'));
  return reach === undefined ? h : { ...h, reach };
};
const sameSpan = (x: Span, y: Span): boolean => x.nodeEpoch === y.nodeEpoch && x.since === y.since && x.until === y.until;
const sameHeldShard = (x: HeldShard, y: HeldShard): boolean =>
  x.shard === y.shard && x.ownerEpoch === y.ownerEpoch && x.startsAfter === y.startsAfter && x.startsBy === y.startsBy && x.min === y.min && x.reach === y.reach;
export const heldStatementRec = {
  /** Whether `a` and `b` encode to the same record, field by field without encoding either (a statement is sealed every round). */
  same: (a: HeldStatement, b: HeldStatement): boolean =>
    a.holders.length === b.holders.length && a.shards.length === b.shards.length && a.holders.every((x, i) => sameSpan(x, b.holders[i]!)) && a.shards.every((x, i) => sameHeldShard(x, b.shards[i]!)),
  encode: (h: HeldStatement): unknown[] => [h.holders.map(spanOf), h.shards.map((x) => [x.shard, x.ownerEpoch, x.startsAfter, x.startsBy, x.min, ...(x.reach === undefined ? [] : [x.reach])])],
  decode: (v: unknown, p: string): HeldStatement => {
    if (!Array.isArray(v) || v.length < 2) bad(p, 'must be [holders, shards]');
    const readStated: Reader<Span> = (x, q) => readSpan(x, 0, q, '[nodeEpoch, since, until?]');
    return { holders: list(readStated, HOLDERS_MAX)(v[0], at(p, '[0]')), shards: list(readHeldShard, 100_000)(v[1], at(p, '[1]')) };
  },
};

const adjustRec = record<Omit<Adjust, 'type'>>([...leaseRef, ['keep', int], ['exhausted', bool], ['grantSeq', uint]]);

/** A grant's fields, then `floated` (0 for none), then `late` (1, or left out). */
export const decodeGrant: Reader<Grant> = (v, p) => {
  const g = grantRec.decode(v, p) as Writable<Grant>;
  const floated = partAt(v, GRANT_FIELDS, g.issued, p);
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

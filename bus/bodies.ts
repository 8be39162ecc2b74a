import { ErrorCode, RateLimiterError } from '../lib/errors.js';
import type { LogEntry } from '../lib/protocol/log.js';
import type { Adjust, CreditRequest, Grant, OwnerMessage, Report, ReportBatch } from '../lib/protocol/messages.js';

/*
 * The bodies of the bus's envelopes (`bus/codec.ts` seals and opens them): their types, and a
 * hand-written encoder and decoder for each. Records are arrays in a fixed field order; a peer one
 * release newer may append fields to a record or add keys to a body, and they are ignored. Any bad
 * field rejects the whole body with an `EnvelopeError` naming its path.
 */

/** Why an envelope was rejected; counted per reason. */
export type RejectReason = 'version' | 'secret' | 'mac' | 'malformed';

/** A rejected envelope: `reason` for counting, `message` names the bad field. */
export class EnvelopeError extends RateLimiterError {
  constructor(
    readonly reason: RejectReason,
    message: string,
  ) {
    super(ErrorCode.REFUSED, message);
  }
}

/** Bodies by envelope type. */
export interface Bodies {
  /** A node's round batch for one shard (shard stream, read by the owner's consumer group). */
  reports: ReportBatch;
  /**
   * Grants an owner issued, logged to the shard's log stream for a later owner's replay. `epoch`: the
   * writer's owner epoch, the signed copy of the entry's plain `epoch` field that fences the log
   * (`lua/snapshot.lua`); absent from an older release's entries.
   */
  grants: { shard: number; grants: Grant[]; epoch?: number };
  /** An owner's checkpoint of a shard: its ledgers as grants and reports, replayed like the log. */
  snapshot: { shard: number; entries: LogEntry[]; epoch?: number };
  /** A fast-path request to a shard owner. */
  ask: { id: number; nodeId: string; nodeEpoch: string; requests: CreditRequest[] };
  /** Owner messages to one node; `re` names the ask they answer, 0 for none. */
  messages: { re: number; nodeId: string; messages: OwnerMessage[] };
  /** Where a node process takes fast-path asks directly (TCP): its record in Redis. */
  peer: PeerAddress;
  /** A node's first frame on a direct connection: a fresh nonce for the listener to answer. */
  hello: { nonce: string };
  /** A listener's answer to a connecting node's challenge: who it is, and the node's nonce. */
  greeting: PeerAddress & { nonce: string };
  /**
   * A member's heartbeat statement, stored beside its presence by the round script
   * (`BeatStatements.seal`): who states it, and its contact and self-grant statement (`BeatStatement`).
   * `left`: its last one, written as it leaves the fleet cleanly.
   */
  beat: { nodeId: string; nodeEpoch: string; statement: BeatStatement; left?: boolean };
  /**
   * The fence of a shard's grant log (`lua/fence.lua`): the owner process that took the shard over
   * under this owner epoch. Writes of a lower epoch, or of another process, are refused. `settled`:
   * that owner had rebuilt the shard's ledgers (replayed the log, or after a blind takeover heard
   * every member's reports); a takeover that finds no settled fence is blind (Redis lost data).
   */
  fence: { shard: number; epoch: number; nodeId: string; nodeEpoch: string; settled?: boolean };
}

/**
 * What a member's heartbeat states, in Redis ms (`lib/membership.ts`, `NodeBeat`): it had last heard
 * from every shard's owner at `freshAt` or later except the `stale` ones ([time, shards] groups), and
 * holds a self-grant in these shards since the report batch of this round ([shard, round] pairs).
 */
export interface BeatStatement {
  freshAt: number;
  stale: Array<[number, number[]]>;
  selfGranted: Array<[number, number]>;
}

/** A node process's fast-path listener. */
export interface PeerAddress {
  nodeId: string;
  nodeEpoch: string;
  host: string;
  port: number;
}

export type EnvelopeType = keyof Bodies;

/** A decoded, verified envelope. */
export type Envelope = { [T in EnvelopeType]: { t: T; body: Bodies[T] } }[EnvelopeType];

// ---- field readers: each names the offending path ---------------------------------------------

type Reader<T> = (v: unknown, path: string) => T;

function bad(path: string, what: string): never {
  throw new EnvelopeError('malformed', `${path}: ${what}`);
}

const ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const str: Reader<string> = (v, p) => (typeof v === 'string' && ID.test(v) ? v : bad(p, 'must be an id string (1-128 of A-Z a-z 0-9 _ . : -)'));
const uint: Reader<number> = (v, p) => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : bad(p, 'must be a non-negative integer'));
const int: Reader<number> = (v, p) => (typeof v === 'number' && Number.isSafeInteger(v) ? v : bad(p, 'must be an integer'));
const posint: Reader<number> = (v, p) => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : bad(p, 'must be a positive integer'));
const num: Reader<number> = (v, p) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : bad(p, 'must be a non-negative number'));
const optional =
  <T>(r: Reader<T>): Reader<T | undefined> =>
  (v, p) =>
    v === undefined ? undefined : r(v, p);
const bool: Reader<boolean> = (v, p) => (v === 0 || v === 1 ? v === 1 : bad(p, 'must be 0 or 1'));

/** A record's fields in wire order; the encoder writes them as an array, the decoder reads them back. */
type Fields<T> = ReadonlyArray<readonly [keyof T & string, Reader<unknown>]>;

function record<T>(fields: Fields<T>): { encode: (x: T) => unknown[]; decode: Reader<T> } {
  return {
    encode: (x) => fields.map(([k, r]) => (r === bool ? (x[k] ? 1 : 0) : x[k])),
    decode: (v, p) => {
      if (!Array.isArray(v) || v.length < fields.length) bad(p, `must be an array of at least ${fields.length} fields`);
      const out: Record<string, unknown> = {};
      // Trailing elements are fields of a newer release: ignored.
      for (let i = 0; i < fields.length; i++) out[fields[i]![0]] = fields[i]![1](v[i], `${p}.${fields[i]![0]}`);
      return out as T;
    },
  };
}

function list<T>(r: Reader<T>, max = 100_000): Reader<T[]> {
  return (v, p) => {
    if (!Array.isArray(v) || v.length > max) bad(p, `must be an array of at most ${max} items`);
    return v.map((x, i) => r(x, `${p}[${i}]`));
  };
}

function object<T>(fields: { [K in keyof T]: Reader<T[K]> }): Reader<T> {
  return (v, p) => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(p, 'must be an object');
    const out: Record<string, unknown> = {};
    // Keys not listed are a newer release's: ignored.
    for (const k of Object.keys(fields)) {
      const x = (fields as Record<string, Reader<unknown>>)[k]!((v as Record<string, unknown>)[k], p ? `${p}.${k}` : k);
      if (x !== undefined) out[k] = x; // an optional field left out stays out
    }
    return out as T;
  };
}

/**
 * A record followed by a `fixedShare` flag, written only when set: a release that does not know it
 * reads leasing (demand-sized grants, still within the allowance), and a record without it is leasing.
 */
function flagged<T extends { readonly fixedShare?: boolean }>(rec: { encode: (x: T) => unknown[]; decode: Reader<T> }, at: number): { encode: (x: T) => unknown[]; decode: Reader<T> } {
  return {
    encode: (x) => (x.fixedShare === true ? [...rec.encode(x), 1] : rec.encode(x)),
    decode: (v, p) => {
      const x = rec.decode(v, p);
      return (v as unknown[]).length > at && bool((v as unknown[])[at], `${p}.fixedShare`) ? { ...x, fixedShare: true } : x;
    },
  };
}

const reportFlagged = flagged(
  record<Report>([
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
  ]),
  13,
);
/**
 * A report: its fields, the `fixedShare` flag, then `seen` (requests offered) when known — the flag
 * written as 0 before it when not set. A release that knows neither reads a leasing report.
 */
const reportRec = {
  encode: (r: Report): unknown[] => (r.seen === undefined ? reportFlagged.encode(r) : [...reportFlagged.encode({ ...r, fixedShare: false }), r.fixedShare === true ? 1 : 0, r.seen]),
  decode: (v: unknown, p: string): Report => {
    const r = reportFlagged.decode(v, p);
    return (v as unknown[]).length > 14 ? { ...r, seen: uint((v as unknown[])[14], `${p}.seen`) } : r;
  },
};
const grantRec = record<Omit<Grant, 'type'>>([
  ['keyId', str],
  ['windowId', uint],
  ['windowMs', posint],
  ['nodeId', str],
  ['nodeEpoch', str],
  ['lease', uint],
  ['ownerEpoch', posint],
  ['grantSeq', posint],
  ['issued', uint],
]);
const GRANT_FIELDS = 9;
const adjustRec = record<Omit<Adjust, 'type'>>([
  ['keyId', str],
  ['windowId', uint],
  ['windowMs', posint],
  ['nodeId', str],
  ['nodeEpoch', str],
  ['lease', uint],
  ['ownerEpoch', posint],
  ['keep', int],
  ['exhausted', bool],
  ['grantSeq', uint],
]);
const requestRec = flagged(
  record<CreditRequest>([
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
  ]),
  13,
);

/** A grant's fields, then `floated` when not 0 (a release that does not know it ignores it, and counts more committed). */
const decodeGrant: Reader<Grant> = (v, p) => {
  const g = grantRec.decode(v, p);
  const floated = (v as unknown[]).length > GRANT_FIELDS ? uint((v as unknown[])[GRANT_FIELDS], `${p}.floated`) : 0;
  if (floated > g.issued) bad(`${p}.floated`, 'must not be more than issued');
  return floated > 0 ? { type: 'grant', ...g, floated } : { type: 'grant', ...g };
};
const encodeGrant = (g: Grant): unknown[] => (g.floated ? [...grantRec.encode(g), g.floated] : grantRec.encode(g));
const decodeMessage: Reader<OwnerMessage> = (v, p) => {
  if (!Array.isArray(v) || (v[0] !== 'g' && v[0] !== 'a')) bad(p, 'must be ["g", grant] or ["a", adjust]');
  return v[0] === 'g' ? decodeGrant(v[1], `${p}.grant`) : { type: 'adjust', ...adjustRec.decode(v[1], `${p}.adjust`) };
};
const encodeMessage = (m: OwnerMessage): unknown[] => (m.type === 'grant' ? ['g', encodeGrant(m)] : ['a', adjustRec.encode(m)]);

const batchFields = { shard: uint, nodeId: str, nodeEpoch: str, round: uint, reports: list(reportRec.decode) };
const decodeBatch = object<ReportBatch>(batchFields);
const decodeEntry: Reader<LogEntry> = (v, p) => {
  if (!Array.isArray(v) || (v[0] !== 'r' && v[0] !== 'g')) bad(p, 'must be ["r", batch] or ["g", grant]');
  return v[0] === 'r' ? { kind: 'report', batch: decodeBatch(v[1], `${p}.batch`) } : { kind: 'grant', grant: decodeGrant(v[1], `${p}.grant`) };
};
const encodeBatch = (b: ReportBatch): unknown => ({ shard: b.shard, nodeId: b.nodeId, nodeEpoch: b.nodeEpoch, round: b.round, reports: b.reports.map(reportRec.encode) });

const pair =
  <A, B>(a: Reader<A>, b: Reader<B>): Reader<[A, B]> =>
  (v, p) => {
    if (!Array.isArray(v) || v.length < 2) bad(p, 'must be a pair');
    return [a(v[0], `${p}[0]`), b(v[1], `${p}[1]`)];
  };
const decodeStatement = object<BeatStatement>({ freshAt: uint, stale: list(pair(uint, list(uint, 100_000)), 100_000), selfGranted: list(pair(uint, uint), 100_000) });

export const decoders: { [T in EnvelopeType]: Reader<Bodies[T]> } = {
  reports: decodeBatch,
  grants: object({ shard: uint, grants: list(decodeGrant), epoch: optional(posint) }),
  snapshot: object({ shard: uint, entries: list(decodeEntry, 2_000_000), epoch: optional(posint) }),
  ask: object({ id: posint, nodeId: str, nodeEpoch: str, requests: list(requestRec.decode, 64) }),
  messages: object({ re: uint, nodeId: str, messages: list(decodeMessage) }),
  peer: object({ nodeId: str, nodeEpoch: str, host: str, port: posint }),
  greeting: object({ nodeId: str, nodeEpoch: str, host: str, port: posint, nonce: str }),
  hello: object({ nonce: str }),
  beat: object({ nodeId: str, nodeEpoch: str, statement: decodeStatement, left: optional(bool) }),
  fence: object({ shard: uint, epoch: posint, nodeId: str, nodeEpoch: str, settled: optional(bool) }),
};

export const encoders: { [T in EnvelopeType]: (b: Bodies[T]) => unknown } = {
  reports: encodeBatch,
  grants: (b) => ({ shard: b.shard, grants: b.grants.map(encodeGrant), ...(b.epoch !== undefined ? { epoch: b.epoch } : {}) }),
  snapshot: (b) => ({
    shard: b.shard,
    entries: b.entries.map((e) => (e.kind === 'report' ? ['r', encodeBatch(e.batch)] : ['g', encodeGrant(e.grant)])),
    ...(b.epoch !== undefined ? { epoch: b.epoch } : {}),
  }),
  ask: (b) => ({ id: b.id, nodeId: b.nodeId, nodeEpoch: b.nodeEpoch, requests: b.requests.map(requestRec.encode) }),
  messages: (b) => ({ re: b.re, nodeId: b.nodeId, messages: b.messages.map(encodeMessage) }),
  peer: (b) => ({ nodeId: b.nodeId, nodeEpoch: b.nodeEpoch, host: b.host, port: b.port }),
  greeting: (b) => ({ nodeId: b.nodeId, nodeEpoch: b.nodeEpoch, host: b.host, port: b.port, nonce: b.nonce }),
  hello: (b) => ({ nonce: b.nonce }),
  beat: (b) => ({
    nodeId: b.nodeId,
    nodeEpoch: b.nodeEpoch,
    statement: { freshAt: b.statement.freshAt, stale: b.statement.stale, selfGranted: b.statement.selfGranted },
    ...(b.left ? { left: 1 } : {}),
  }),
  fence: (b) => ({ shard: b.shard, epoch: b.epoch, nodeId: b.nodeId, nodeEpoch: b.nodeEpoch, ...(b.settled ? { settled: 1 } : {}) }),
};

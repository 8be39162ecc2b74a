import type { Blanket } from '../lib/owner/blankets.js';
import type { HeldStatement } from '../lib/owner/held.js';
import type { LogEntry } from '../lib/protocol/log.js';
import type { CreditRequest, Grant, OwnerMessage, ReportBatch } from '../lib/protocol/messages.js';
import { at, bad, bool, list, object, optional, pair, posint, quietly, str, uint, type Reader } from './body-readers.js';
import { blanketRec, decodeGrant, decodeMessage, encodeGrant, encodeMessage, heldStatementRec, reportRec, requestRec } from './lease-records.js';

export { EnvelopeError, type RejectReason } from './body-readers.js';

/*
 * The bodies of the bus's envelopes (`bus/codec.ts` seals and opens them): their types, and a
 * hand-written encoder and decoder for each. Records are arrays in a fixed field order; a peer one
 * release newer may append fields to a record or add keys to a body, and they are ignored. Any bad
 * field rejects the whole body with an `EnvelopeError` naming its path.
 */

/** Bodies by envelope type. */
export interface Bodies {
  /** A node's round batch for one shard (shard stream, read by the owner's consumer group). */
  reports: ReportBatch;
  /**
   * Grants an owner issued, logged to the shard's log stream for a later owner's replay. `epoch`: the
   * writer's owner epoch, the signed copy of the entry's plain `epoch` field that fences the log
   * (`lua/snapshot.lua`); absent from an older release's entries. `blanket` (`lib/owner/blankets.ts`):
   * alone in an entry, or a retirement after the grants of the floats made under it; a release that
   * does not know it reads the grants only.
   */
  grants: { shard: number; grants: Grant[]; epoch?: number; blanket?: Blanket };
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
  /** It counts blankets in a replay (`lib/owner/blankets.ts`): absent from an older release's. */
  blankets?: boolean;
  /** It counts what blankets' members may hold (`lib/owner/held.ts`): absent from an older release's. */
  holds?: boolean;
  /** It counts a held part's reach back over running windows (`Held.reach`): absent from an older release's. */
  reaches?: boolean;
  /**
   * Its blankets' taken held parts (`HeldStatement`): [[[node epoch, since, until?]…], [[shard, owner
   * epoch, startsAfter, startsBy, min, reach?]…]].
   */
  held?: HeldStatement;
  /**
   * Which held part this process states (`BeatStatements.seal`): one higher whenever it changes. A
   * statement carries the part whole when it changed and for a few statements after, and every so
   * often; the others carry only this. Absent from an older release's, and with no held part.
   */
  heldTag?: number;
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

const batchFields = { shard: uint, nodeId: str, nodeEpoch: str, round: uint, reports: list(reportRec.decode) };
const decodeBatch = object<ReportBatch>(batchFields);
const decodeEntry: Reader<LogEntry> = (v, p) => {
  if (!Array.isArray(v) || (v[0] !== 'r' && v[0] !== 'g')) bad(p, 'must be ["r", batch] or ["g", grant]');
  return v[0] === 'r' ? { kind: 'report', batch: decodeBatch(v[1], at(p, '.batch')) } : { kind: 'grant', grant: decodeGrant(v[1], at(p, '.grant')) };
};
const encodeBatch = (b: ReportBatch): unknown => ({ shard: b.shard, nodeId: b.nodeId, nodeEpoch: b.nodeEpoch, round: b.round, reports: b.reports.map(reportRec.encode) });

/**
 * A checkpoint: its ledgers' entries, then its shard's ended marks, which travel as `ended` ([window
 * length, end] pairs) and `unmarked` (the shard's unmarked horizon, if any): body keys a release that
 * does not know them ignores, where an entry of a new kind would reject its whole checkpoint. `ended`
 * is always written, `[]` for none, so a checkpoint of a release that keeps marks is told apart from
 * an older release's (no key), whose owner dropped ledgers without marking them: read as an
 * `unmarked` entry with no horizon, which the replaying owner dates.
 */
/** `unmarked`, read leniently (a bad value would reject the ledgers too): a fraction ceiled, anything else not a time undated (`null`). */
const horizon: Reader<number | null | undefined> = (v) => (v === undefined ? undefined : typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.ceil(v) : null);
const snapshotFields = object({ shard: uint, entries: list(decodeEntry, 2_000_000), epoch: optional(posint), ended: optional(list(pair(posint, uint), 10_000)), unmarked: horizon });
const blanketsField = object({ blankets: optional(list(blanketRec.decode, 1_000)) });
const decodeSnapshot: Reader<Bodies['snapshot']> = (v, p) => {
  const { ended, unmarked, ...b } = snapshotFields(v, p);
  const { blankets } = blanketsField(v, p);
  for (const blanket of blankets ?? []) b.entries.push({ kind: 'blanket', blanket });
  for (const [windowMs, end] of ended ?? []) b.entries.push({ kind: 'ended', shard: b.shard, windowMs, end });
  if (ended === undefined || unmarked === null) b.entries.push({ kind: 'unmarked', shard: b.shard });
  else if (unmarked !== undefined) b.entries.push({ kind: 'unmarked', shard: b.shard, by: unmarked });
  return b.epoch === undefined ? { shard: b.shard, entries: b.entries } : b;
};
/** A checkpoint's entries in its body's keys; an undated `unmarked` entry (an older release's checkpoint, read) is written as one: no `ended`. */
const encodeEntries = (entries: readonly LogEntry[]): { entries: unknown[]; ended?: Array<[number, number]>; unmarked?: number; blankets?: unknown[] } => {
  const out: unknown[] = [];
  const ended: Array<[number, number]> = [];
  const blankets: unknown[] = [];
  let unmarked = -1;
  for (const e of entries) {
    if (e.kind === 'report') out.push(['r', encodeBatch(e.batch)]);
    else if (e.kind === 'grant') out.push(['g', encodeGrant(e.grant)]);
    else if (e.kind === 'ended') ended.push([e.windowMs, e.end]);
    else if (e.kind === 'blanket') blankets.push(blanketRec.encode(e.blanket));
    else unmarked = e.by === undefined ? Infinity : Math.max(unmarked, Math.ceil(e.by));
  }
  const more = blankets.length > 0 ? { blankets } : {};
  return unmarked === Infinity ? { entries: out, ...more } : unmarked < 0 ? { entries: out, ended, ...more } : { entries: out, ended, unmarked, ...more };
};

const decodeStatement = object<BeatStatement>({
  freshAt: uint,
  stale: list(pair(uint, list(uint, 100_000)), 100_000),
  selfGranted: list(pair(uint, uint), 100_000),
  blankets: optional(bool),
  holds: optional(bool),
  reaches: optional(bool),
  held: optional(heldStatementRec.decode),
  heldTag: optional(posint),
});

/** Each read quietly (`quietly`): paths are built only to name the field of a body that is rejected. */
export const decoders: { [T in EnvelopeType]: Reader<Bodies[T]> } = {
  reports: quietly(decodeBatch),
  grants: quietly(object({ shard: uint, grants: list(decodeGrant), epoch: optional(posint), blanket: optional(blanketRec.decode) })),
  snapshot: quietly(decodeSnapshot),
  ask: quietly(object({ id: posint, nodeId: str, nodeEpoch: str, requests: list(requestRec.decode, 64) })),
  messages: quietly(object({ re: uint, nodeId: str, messages: list(decodeMessage) })),
  peer: quietly(object({ nodeId: str, nodeEpoch: str, host: str, port: posint })),
  greeting: quietly(object({ nodeId: str, nodeEpoch: str, host: str, port: posint, nonce: str })),
  hello: quietly(object({ nonce: str })),
  beat: quietly(object({ nodeId: str, nodeEpoch: str, statement: decodeStatement, left: optional(bool) })),
  fence: quietly(object({ shard: uint, epoch: posint, nodeId: str, nodeEpoch: str, settled: optional(bool) })),
};

export const encoders: { [T in EnvelopeType]: (b: Bodies[T]) => unknown } = {
  reports: encodeBatch,
  grants: (b) => ({
    shard: b.shard,
    grants: b.grants.map(encodeGrant),
    ...(b.epoch !== undefined ? { epoch: b.epoch } : {}),
    ...(b.blanket !== undefined ? { blanket: blanketRec.encode(b.blanket) } : {}),
  }),
  snapshot: (b) => ({
    shard: b.shard,
    ...encodeEntries(b.entries),
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
    statement: {
      freshAt: b.statement.freshAt,
      stale: b.statement.stale,
      selfGranted: b.statement.selfGranted,
      ...(b.statement.blankets ? { blankets: 1 } : {}),
      ...(b.statement.holds ? { holds: 1 } : {}),
      ...(b.statement.reaches ? { reaches: 1 } : {}),
      ...(b.statement.held !== undefined && b.statement.held.shards.length > 0 ? { held: heldStatementRec.encode(b.statement.held) } : {}),
      ...(b.statement.heldTag !== undefined ? { heldTag: b.statement.heldTag } : {}),
    },
    ...(b.left ? { left: 1 } : {}),
  }),
  fence: (b) => ({ shard: b.shard, epoch: b.epoch, nodeId: b.nodeId, nodeEpoch: b.nodeEpoch, ...(b.settled ? { settled: 1 } : {}) }),
};

import { randomInt } from 'node:crypto';
import { statedContact, type Heartbeat, type NodeBeat } from '../lib/membership.js';
import type { HeldShard, HeldStatement } from '../lib/owner/held.js';
import { heldStatementRec } from './lease-records.js';
import { EnvelopeCodec, EnvelopeError, type BeatStatement, type Bodies, type RejectReason } from './codec.js';
import type { RedisBusStats } from './redis-bus-types.js';
import type { NodeIdentity } from './types.js';

/** How long `local` keeps a round reply's clock sample before a slower one may replace it. */
const CLOCK_SAMPLE_MS = 10_000;
/**
 * A held part is carried whole in the statements of the rounds it changed in, and this many after
 * (a member reads a statement each of its own rounds, which run at their own pace), then in every
 * HELD_WHOLE_EVERY-th: the rest carry its tag only (`BeatStatement.heldTag`). A member that missed
 * them (joined since, or its rounds stalled) asks until the next one that carries it.
 */
const HELD_WHOLE_AFTER = 7;
const HELD_WHOLE_EVERY = 20;
/** A heartbeat statement longer than this is refused unread (one names at most 1,024 stale shards). */
const MAX_STATEMENT = 65_536;
/** Characters of a statement its blankets' held parts may take at most: the shards beyond are left out. */
const HELD_BUDGET = 24_576;
/** An upper bound on the characters of one holder, beyond its node epoch, and of one shard (13-digit times). */
const HOLDER_CHARS = 40;
const SHARD_CHARS = 86;

/** `held` cut to the budget: its members, then as many shards as fit (none if its members do not). */
function budgeted(held: HeldStatement): HeldStatement {
  const room = HELD_BUDGET - held.holders.reduce((n, x) => n + x.nodeEpoch.length + HOLDER_CHARS, 16);
  const shards = room < 0 ? [] : held.shards.slice(0, Math.max(0, Math.floor(room / SHARD_CHARS)));
  return { holders: shards.length === 0 ? [] : held.holders, shards };
}

/**
 * Heartbeat statements (`frl:{ctl}:beats`): this node's own, sealed for its next round, and the
 * members' as the round reply brings them, opened and verified.
 */
export class BeatStatements {
  /** Redis time of the last round reply applied, and this process's monotonic time when it came back. */
  private replyAt = 0;
  private replyGot: number | undefined;
  /** The round reply `local` maps Redis times through: sent, round trip, Redis time, back at. */
  private clockSample: { sent: number; rtt: number; redis: number; at: number } | undefined;
  /** Members whose statement is refused now (counted once as they turn so, not at every round). */
  private readonly refused = new Set<string>();
  /**
   * Per member, its last statement that verified: as stored, as opened, and its held part as read
   * (`withKeptHeld`). A statement changes every round (its contact times), its held part about once a
   * second, and each round every member reads every member's.
   */
  private readonly opened = new Map<string, { field: string; body: Bodies['beat']; held: KeptHeld | undefined }>();
  /**
   * This process's held part as last stated; its tag; statements sealed since it changed.
   * Tags start anywhere, so that another instance stating under the same node epoch (an embedder
   * reconnecting one identity) does not take up tags a reader holds another part under.
   */
  private stated: { held: HeldStatement | undefined; tag: number; since: number } = { held: undefined, tag: randomInt(1, 2 ** 40), since: 0 };

  constructor(
    private readonly codec: EnvelopeCodec,
    private readonly stats: RedisBusStats,
    private readonly warn: (err: unknown, msg: string) => void,
  ) {}

  /** A round reply was applied: made at `redisNow` (Redis ms), sent at `sent` and back at `got` (monotonic). */
  replied(redisNow: number, got: number, sent = got): void {
    this.replyAt = redisNow;
    this.replyGot = got;
    // For `local`: the quickest round trip lately (a busy loop that read a reply late makes it long).
    const best = this.clockSample;
    if (best === undefined || got - sent <= best.rtt || got - best.at > CLOCK_SAMPLE_MS) this.clockSample = { sent, rtt: got - sent, redis: redisNow, at: got };
  }

  /**
   * This process's monotonic time at Redis time `redisMs` (a stream entry's id), mapped through the
   * round reply with the quickest round trip of the last few seconds as if Redis had run it when the
   * call was sent: never later than it was, by at most that round trip, so an age measured from it
   * is never short. Undefined before any reply.
   */
  local(redisMs: number): number | undefined {
    const s = this.clockSample;
    return s === undefined ? undefined : s.sent + (redisMs - s.redis);
  }

  /** A member is forgotten: a statement of a member by that name is counted again once refused. */
  forget(nodeId: string): void {
    this.refused.delete(nodeId);
    this.opened.delete(nodeId);
  }

  /**
   * This node's heartbeat statement as the round script stores it: a sealed `beat` envelope (its last,
   * with `left`, when `membership` is `leave`). Its contact times (`NodeBeat.contact`, this process's
   * monotonic time) in Redis ms, mapped through the last reply as if Redis had run it when the reply
   * came back — which is never earlier than it did, so a stated time is never later than the contact
   * was. Before any reply, nothing is known: everything is stated as heard at 0. Sealed, so that
   * nobody without the bus secret can state a member's contact fresh, its self-grant folded, or its
   * leave.
   */
  seal(b: NodeBeat, { nodeId, nodeEpoch }: NodeIdentity, membership: 'stay' | 'leave', held: HeldStatement = { holders: [], shards: [] }): string {
    const { replyGot } = this;
    const c = replyGot === undefined ? { freshAt: 0, stale: new Map<number, number>() } : statedContact(b.contact, (t) => Math.floor(this.replyAt + (t - replyGot)));
    const groups = new Map<number, number[]>();
    for (const [s, t] of c.stale) {
      const at = Math.max(0, t);
      const g = groups.get(at);
      if (g === undefined) groups.set(at, [s]);
      else g.push(s);
    }
    const statement = { freshAt: Math.max(0, c.freshAt), stale: [...groups], selfGranted: [...b.selfGranted], blankets: true, holds: true, reaches: true, ...this.heldPart(held) };
    return EnvelopeCodec.toJson(this.codec.seal('beat', { nodeId, nodeEpoch, statement, ...(membership === 'leave' ? { left: true } : {}) }));
  }

  /**
   * The held part as this statement carries it: as many shards as fit the budget (members of the rest
   * ask, as before), whole or by its tag only (HELD_WHOLE_AFTER, HELD_WHOLE_EVERY); nothing if none.
   */
  private heldPart(held: HeldStatement): Pick<BeatStatement, 'held' | 'heldTag'> {
    const h = budgeted(held);
    if (h.shards.length === 0) return {};
    const s = this.stated;
    if (s.held === undefined || !heldStatementRec.same(h, s.held)) this.stated = { held: h, tag: s.tag + 1, since: 0 };
    const { tag, since } = this.stated;
    this.stated.since++;
    return since <= HELD_WHOLE_AFTER || since % HELD_WHOLE_EVERY === 0 ? { held: h, heldTag: tag } : { heldTag: tag };
  }

  /**
   * A member's stored statement, if it verifies and names that member; otherwise undefined, counted by
   * reason when the member's statements turn unverifiable (every round reads them again). An empty one
   * (a release that signs none, or a field someone deleted) says nothing either.
   */
  open(nodeId: string, field: string): Bodies['beat'] | undefined {
    if (field === '') return undefined;
    const before = this.opened.get(nodeId);
    if (before?.field === field) {
      this.refused.delete(nodeId);
      return before.body;
    }
    let reason: RejectReason;
    try {
      if (field.length > MAX_STATEMENT) throw new EnvelopeError('malformed', `statement: over ${MAX_STATEMENT} characters`);
      const env = this.codec.open(EnvelopeCodec.fromJson(field));
      if (env.t === 'beat' && env.body.nodeId === nodeId) {
        this.refused.delete(nodeId);
        const read = withKeptHeld(env.body, before?.held);
        this.opened.set(nodeId, { field, ...read });
        return read.body;
      }
      reason = 'malformed';
    } catch (err) {
      reason = err instanceof EnvelopeError ? err.reason : 'malformed';
    }
    if (!this.refused.has(nodeId)) {
      this.refused.add(nodeId);
      this.stats.rejected[reason]++;
      this.warn(new Error(`${reason}: statement of member ${nodeId}`), 'heartbeat statement refused; the member owns nothing and is held back');
    }
    return undefined;
  }
}

/** A verified statement (`BeatStatements.seal`) as an owner keeps it, its Redis times mapped by `at`. */
export function heartbeat(st: BeatStatement, at: (redisMs: number) => number): Heartbeat {
  const stale = new Map<number, number>();
  for (const [t, shards] of st.stale) for (const s of shards) stale.set(s, at(t));
  return { freshAt: at(st.freshAt), stale, selfGranted: new Map(st.selfGranted), blankets: st.blankets === true, holds: st.holds === true, reaches: st.reaches === true, held: heldOf(st.held) };
}

/** A member's held part as a reader keeps it (`withKeptHeld`): the process that stated it, under which tag. */
interface KeptHeld {
  readonly nodeEpoch: string;
  readonly tag: number;
  readonly held: HeldStatement;
}

/**
 * A heartbeat body, and its held part to keep for the next statement: one carrying only its tag
 * (`BeatStatement.heldTag`) is read as the part kept, `before`, if that is the same process's under
 * the same tag; as none otherwise (its member asks until a statement carries the part whole). A part
 * carried whole is always read as it is.
 */
function withKeptHeld(body: Bodies['beat'], before: KeptHeld | undefined): { body: Bodies['beat']; held: KeptHeld | undefined } {
  const { heldTag: tag, held } = body.statement;
  if (tag === undefined) return { body, held: undefined };
  if (held !== undefined) return { body, held: { nodeEpoch: body.nodeEpoch, tag, held } };
  const kept = before?.nodeEpoch === body.nodeEpoch && before.tag === tag ? before : undefined;
  return { body: kept === undefined ? body : { ...body, statement: { ...body.statement, held: kept.held } }, held: kept };
}

/** A statement's held part as an owner keeps it, by shard: made once per held part read (a tag-only statement reuses the part kept). */
const byShard = new WeakMap<HeldStatement, NonNullable<Heartbeat['held']>>();
const NO_HELD: NonNullable<Heartbeat['held']> = { holders: [], shards: new Map() };
function heldOf(h: HeldStatement | undefined): NonNullable<Heartbeat['held']> {
  if (h === undefined) return NO_HELD;
  let held = byShard.get(h);
  if (held === undefined) {
    const shards = new Map<number, HeldShard>();
    for (const x of h.shards) shards.set(x.shard, x);
    byShard.set(h, (held = { holders: h.holders, shards }));
  }
  return held;
}

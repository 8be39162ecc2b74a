import { shardOf, type CreditRequest, type Grant, type OwnerMessage } from '../lib/protocol/messages.js';
import { EnvelopeCodec, EnvelopeError, type Bodies, type Envelope } from './codec.js';
import type { DirectChannel } from './direct-channel.js';
import { FastPath } from './fast-path.js';
import type { FleetTable } from './fleet-table.js';
import type { Answer } from './message-router.js';
import type { OwnerContext } from './owner-context.js';
import type { RedisClient } from './redis-connection.js';
import type { ShardLog } from './shard-log.js';
import type { ShardReach } from './shard-reach.js';

/** Key id of warm-up asks; never a real key id (those start with a version: `v1:`). */
const WARM_UP_KEY = 'warm-up';

/** What the fast path on the Redis bus works with, besides what the owner side shares (`OwnerContext`). */
export interface CreditAskParts {
  readonly fleet: FleetTable;
  readonly reach: ShardReach;
  readonly log: ShardLog;
  /** The fast-path connection (written at once, never auto-pipelined). */
  readonly fast: RedisClient;
  /** The direct channel; undefined with `fastPath: false`. */
  readonly direct: DirectChannel | undefined;
  /** Sends owner messages (`MessageRouter.route`). */
  route(messages: readonly OwnerMessage[], answer?: Answer): void;
  /** Hands an owner message to this process's node. */
  deliver(m: OwnerMessage): void;
}

/**
 * The fast path (D2) on the Redis bus, both sides. A node's credit requests: answered in process for
 * the shards this node serves, otherwise asked of their owners — over the direct channel, else the
 * owner's Redis channel — and settled by `FastPath`. An owner's side: the asks and answers that come
 * in as frames, and its answers. And the warm-up asks before the node takes traffic.
 */
export class CreditAsks {
  private readonly fastPath: FastPath;
  /**
   * This node's asks on shards it owns, waiting for the round reply that lets its owner side serve
   * again: one per lease, which later asks of it share (they are not held to one a round).
   */
  private awaiting = new Map<string, { readonly request: CreditRequest; readonly settle: (grants: PromiseLike<readonly Grant[]>) => void; readonly answer: Promise<readonly Grant[]> }>();

  constructor(
    private readonly ctx: OwnerContext,
    private readonly parts: CreditAskParts,
  ) {
    this.fastPath = new FastPath({
      stats: ctx.stats,
      send: (owner, ask) => this.sendAsk(owner, ask),
      deliver: (m) => parts.deliver(m),
      current: (messages) => this.current(messages),
      nodeEpoch: () => ctx.identity()!.nodeEpoch,
    });
  }

  /** Round trip of answered asks (`FastPath.rtt`). */
  rtt(since = 0): { count: number; p50: number; p99: number } {
    return this.fastPath.rtt(since);
  }

  /** Forgets asks settled long enough ago (`FastPath.sweep`); once a round. */
  sweep(): void {
    this.fastPath.sweep();
  }

  /** Settles every open ask with nothing (the bus is closing). */
  close(): void {
    this.roundSettled();
    this.fastPath.close();
  }

  /**
   * A round reply was taken in (or the round failed): this node's asks waiting for it are answered by
   * its owner side if it serves their shard now, else with nothing. Once a round.
   */
  roundSettled(): void {
    if (this.awaiting.size === 0) return;
    const waiting = [...this.awaiting.values()];
    this.awaiting.clear();
    for (const { request, settle } of waiting) {
      if (this.ctx.closed() || !this.ctx.serving(shardOf(request.keyId, request.windowId, this.ctx.opts.shards))) settle(Promise.resolve([]));
      else {
        const { now, later } = this.grantLocal(request);
        settle(later ?? Promise.resolve(now === undefined ? [] : [now]));
      }
    }
  }

  /**
   * Requests for shards this node serves are answered in process; the others go to their owners
   * (directly, or over Redis), and the answer counts only if it is back within `deadlineMs`.
   */
  requestCredit(requests: readonly CreditRequest[], deadlineMs: number): readonly Grant[] | undefined | Promise<readonly Grant[] | undefined> {
    const { ctx, parts } = this;
    if (ctx.closed()) return undefined;
    const local: Grant[] = [];
    const unrecorded: Array<Promise<readonly Grant[]>> = [];
    const remote = new Map<string, CreditRequest[]>();
    let missed = false;
    for (const r of requests) {
      const shard = shardOf(r.keyId, r.windowId, ctx.opts.shards);
      if (ctx.serving(shard)) {
        const { now, later } = this.grantLocal(r);
        if (now !== undefined) local.push(now);
        if (later !== undefined) unrecorded.push(later);
        continue;
      }
      if (parts.reach.awaitsRound(shard)) {
        // Ours, and served again once the round reply this loop's own stall held up is in: the ask is
        // answered then, if the owner side serves; past the deadline the request is still refused,
        // and the late answer is kept as credit for the next one.
        unrecorded.push(this.awaitRound(r));
        continue;
      }
      const owner = parts.fleet.table[shard]?.owner;
      if (owner === undefined || !parts.reach.reachable(shard)) {
        missed = true;
        continue;
      }
      const list = remote.get(owner);
      if (list === undefined) remote.set(owner, [r]);
      else list.push(r);
    }
    if (remote.size === 0 && unrecorded.length === 0) return missed ? this.apply(local) : local;
    return this.fastPath.ask(ctx.identity()!.nodeId, remote, { local, missed, deadlineMs, unrecorded });
  }

  /** The answer to `r` once the round reply is in: the one already awaited for its lease, else a new one. */
  private awaitRound(r: CreditRequest): Promise<readonly Grant[]> {
    const key = `${r.keyId}\n${r.windowId}\n${r.nodeEpoch}\n${r.lease}`;
    const waiting = this.awaiting.get(key);
    if (waiting !== undefined) return waiting.answer;
    let settle!: (grants: PromiseLike<readonly Grant[]>) => void;
    const answer = new Promise<readonly Grant[]>((resolve) => (settle = resolve));
    this.awaiting.set(key, { request: r, settle, answer });
    return answer;
  }

  /**
   * Before the node takes traffic: a few empty asks to every other owner, so connections, code paths
   * and the owners' handlers are warm when the first real ask races its 1 ms deadline.
   */
  async warmUp(): Promise<void> {
    const { ctx, parts } = this;
    const { fleet } = parts;
    await parts.direct?.read();
    let w = 0;
    for (let i = 0; i < 20 && !ctx.closed(); i++) {
      const owners = new Map<string, CreditRequest[]>();
      const remote = new Set(fleet.table.filter((o, s) => o !== undefined && !fleet.mine(s)).map((o) => o!.owner));
      // Each probe asks for one credit of a new window of January 1970: it takes the whole path of a
      // first sight (new ledger, grant, apply), and its grant finds no bucket.
      for (let tries = 0; owners.size < remote.size && tries < 100 * ctx.opts.shards; tries++, w++) {
        const shard = shardOf(WARM_UP_KEY, w, ctx.opts.shards);
        const o = fleet.table[shard];
        if (o === undefined || fleet.mine(shard) || owners.has(o.owner)) continue;
        const { nodeId, nodeEpoch } = ctx.identity()!;
        owners.set(o.owner, [{ keyId: WARM_UP_KEY, windowId: w, windowMs: 1000, limit: 1, nodeId, nodeEpoch, lease: 0, spent: 0, selfIssued: 0, released: 0, need: 1, demand: 1, fastPath: true }]);
      }
      if (owners.size === 0) return;
      await this.fastPath.probe(ctx.identity()!.nodeId, owners, 20);
    }
  }

  /** A message on this node's Redis channel: an ask (as an owner) or owner messages (as a node). */
  onChannel(raw: string): void {
    try {
      this.onFrame(raw);
    } catch {
      // counted and logged by onFrame
    }
  }

  /**
   * An envelope from Redis pub/sub or the direct channel (`reply` answers on that connection). One
   * that does not open, or cannot be applied, is counted, logged and thrown: the direct channel
   * closes a connection that sends one.
   */
  onFrame(raw: string, reply?: (frame: string) => void): void {
    const { ctx } = this;
    let env: Envelope;
    try {
      env = ctx.codec.open(EnvelopeCodec.fromJson(raw));
    } catch (err) {
      ctx.stats.rejected[err instanceof EnvelopeError ? err.reason : 'malformed']++;
      ctx.warn(err, 'bus message rejected');
      throw err;
    }
    try {
      if (env.t === 'ask') this.serveAsk(env.body, reply);
      else if (env.t === 'messages') this.onMessages(env.body);
      else throw new EnvelopeError('malformed', `t: a ${env.t} envelope is not a message`);
    } catch (err) {
      ctx.stats.rejected.fold++;
      ctx.warn(err, 'bus message could not be applied');
      throw err;
    }
  }

  /**
   * An ask to an owner: over the direct channel when a connection to the owner's current process is
   * up, else on its Redis channel (and a connection is started for the next one).
   */
  private sendAsk(owner: string, ask: Bodies['ask']): boolean {
    const { ctx, parts } = this;
    const frame = EnvelopeCodec.toJson(ctx.codec.seal('ask', ask));
    if (parts.direct?.send(owner, frame)) return true;
    parts.fast.publish(ctx.keys.channel(owner), frame).catch(() => undefined);
    return false;
  }

  /**
   * This node's request answered by its owner side, which serves the shard: a grant all on record
   * already (`now`), or one that counts once its log write is back (`later`). The node's own credit
   * too is spent only once on record (or out of the float, which is): a later owner replays the log,
   * and what it lacks it would issue again.
   */
  private grantLocal(r: CreditRequest): { now?: Grant; later?: Promise<readonly Grant[]> } {
    const { ctx, parts } = this;
    const owner = ctx.owner()!;
    const g = owner.onCreditRequest(r);
    let answer: { now?: Grant; later?: Promise<readonly Grant[]> } = {};
    if (g !== undefined) {
      const written = parts.log.logGrants([g], parts.fast);
      answer = owner.onRecord?.(g) === true ? { now: g } : { later: written.then((ok) => (ok ? [g] : (ctx.stats.grantsWithheld++, []))) };
    }
    parts.route(owner.takeOutbox());
    return answer;
  }

  /** Applies grants through the node's message handler (they arrived, but the ask as a whole missed). */
  private apply(grants: readonly Grant[]): undefined {
    for (const g of grants) this.parts.deliver(g);
    return undefined;
  }

  /** Answers an ask, on the connection it came by (`reply`) or over Redis. */
  private serveAsk(ask: Bodies['ask'], reply?: (frame: string) => void): void {
    const { ctx } = this;
    // Leaving: the shards' last checkpoints are being written, and the log writes waited for.
    if (ctx.closed()) return;
    const grants: OwnerMessage[] = [];
    let all = true;
    for (const r of ask.requests) {
      if (r.nodeId !== ask.nodeId || !ctx.serving(shardOf(r.keyId, r.windowId, ctx.opts.shards))) {
        all = false;
        continue;
      }
      const g = ctx.owner()!.onCreditRequest(r);
      if (g !== undefined) grants.push(g);
    }
    ctx.stats.asksServed++;
    this.parts.route([...grants, ...ctx.owner()!.takeOutbox()], { re: all ? ask.id : 0, to: ask.nodeId, reply });
  }

  private onMessages(body: Bodies['messages']): void {
    if (body.nodeId !== this.ctx.identity()?.nodeId) return;
    if (!this.fastPath.answer(body.re, body.messages)) for (const m of this.current(body.messages)) this.parts.deliver(m);
  }

  /** Drops messages from an owner older than the one the table names for their shard (a deposed owner). */
  private current(messages: readonly OwnerMessage[]): OwnerMessage[] {
    const { ctx, parts } = this;
    return messages.filter((m) => {
      const ok = m.ownerEpoch >= (parts.fleet.table[shardOf(m.keyId, m.windowId, ctx.opts.shards)]?.epoch ?? 0);
      if (!ok) ctx.stats.staleMessages++;
      return ok;
    });
  }
}

import type { Blanket } from '../lib/owner/blankets.js';
import { shardOf, type Grant, type OwnerMessage } from '../lib/protocol/messages.js';
import type { EnvelopeFields } from './codec.js';
import { processName } from './keys.js';
import type { LogFence } from './log-fence.js';
import type { OwnerContext } from './owner-context.js';
import type { RedisClient } from './redis-connection.js';
import { appendGrantsScript, flatFields, snapshotScript } from './scripts.js';

/** An idle shard's blanket writes ask for a checkpoint once this long after the last (monotonic ms). */
const BLANKET_CHECKPOINT_MS = 60_000;

/**
 * Writes to the shards' streams: the grants an owner issues and its checkpoints onto each shard's log
 * (`frl:{sN}:log`, behind the log's fence), and a node's report batches; counts the writes in flight.
 */
export class ShardLog {
  /** Every grant-log write per shard still in flight (on either command connection), as one promise. */
  private readonly logWrites = new Map<number, Promise<unknown>>();
  private inflight = 0;

  constructor(
    private readonly ctx: OwnerContext,
    private readonly fence: LogFence,
  ) {}

  /** The shard's grant-log writes still in flight (none: an empty list). */
  pendingWrites(shard: number): Array<Promise<unknown>> {
    const w = this.logWrites.get(shard);
    return w === undefined ? [] : [w];
  }

  /**
   * Appends grants to their shards' logs, one entry per shard; resolves with whether every write was
   * taken — not refused by the log's fence — whenever its reply comes. Only such grants may go out;
   * the owner learns of each that its grants are on record (`logged`).
   */
  logGrants(messages: readonly OwnerMessage[], conn: RedisClient = this.ctx.redis): Promise<boolean> {
    const { ctx } = this;
    const grants = new Map<number, Grant[]>();
    for (const m of messages) {
      if (m.type !== 'grant') continue;
      const s = shardOf(m.keyId, m.windowId, ctx.opts.shards);
      const g = grants.get(s);
      if (g === undefined) grants.set(s, [m]);
      else g.push(m);
    }
    const writes: Array<Promise<boolean>> = [];
    for (const [shard, list] of grants) {
      const o = ctx.owned.get(shard);
      if (o !== undefined) o.dirty = true;
      const write = this.appendGrants(shard, ctx.codec.seal('grants', { shard, grants: list, epoch: list[0]!.ownerEpoch }), list[0]!.ownerEpoch, conn);
      // On record means replayed by any later owner: it raises the log's fence before it reads the log,
      // so a write that reached Redis after that was refused. No lease time to check.
      writes.push(
        write.then((written) => {
          ctx.owner()?.logged?.(list, written);
          return written;
        }),
      );
      this.track(shard, write);
    }
    return writes.length === 0 ? Promise.resolve(true) : Promise.all(writes).then((ok) => ok.every(Boolean));
  }

  /**
   * A blanket onto its shard's log, as an entry of no grants (`lib/owner/blankets.ts`); the owner hears
   * whether the write was taken: only then may the windows it covers use it.
   */
  logBlanket(b: Blanket): void {
    const { ctx } = this;
    // Checkpointed at least once a minute (which trims what it covers), however idle the shard.
    const o = ctx.owned.get(b.shard);
    if (o !== undefined && ctx.clock.monotonic() - o.snapshotAt >= BLANKET_CHECKPOINT_MS) o.dirty = true;
    const write = this.appendBlanket(b);
    this.track(b.shard, write);
    void write.then((taken) => ctx.owner()?.blanketLogged?.(b, taken));
  }

  /**
   * Shards given up cleanly, their grant and blanket writes all back: each one's blanket retired, if
   * its owner has one to retire (`FoldOwner.retireBlanket`), logged after them on the same connection.
   */
  retireBlankets(shards: readonly number[]): Promise<unknown> {
    const { ctx } = this;
    const writes: Array<Promise<boolean>> = [];
    for (const s of shards) {
      const r = ctx.owner()?.retireBlanket?.(s);
      if (r !== undefined) writes.push(this.appendBlanket(r.blanket, r.grants));
    }
    return Promise.allSettled(writes);
  }

  /**
   * A blanket as an entry on its shard's log, behind the fence, on the main connection: alone, or a
   * retirement after the grants of the floats made under it (replayed before it).
   */
  private appendBlanket(b: Blanket, grants: Grant[] = []): Promise<boolean> {
    return this.appendGrants(b.shard, this.ctx.codec.seal('grants', { shard: b.shard, grants, epoch: b.ownerEpoch, blanket: b }), b.ownerEpoch, this.ctx.redis);
  }

  /** Counts a log write in its shard's writes in flight: on two connections, a later one may finish first. */
  private track(shard: number, write: Promise<unknown>): void {
    const prev = this.logWrites.get(shard);
    const pending = prev === undefined ? write : Promise.allSettled([prev, write]);
    this.logWrites.set(shard, pending);
    void pending.finally(() => {
      if (this.logWrites.get(shard) === pending) this.logWrites.delete(shard);
    });
  }

  /**
   * Grants onto the shard's log, unless a later owner fenced it (`lua/append-grants.lua`): always
   * written, since a later owner must know them. Resolves with whether they are on record. A fence
   * that refused them is looked into (`LogFence.stands`), and the grants are never sent.
   */
  private appendGrants(shard: number, fields: EnvelopeFields, epoch: number, conn: RedisClient): Promise<boolean> {
    const { ctx } = this;
    const o = ctx.owned.get(shard);
    const id = appendGrantsScript(conn, ctx.keys, shard, { epoch, process: this.process, maxLength: this.maxLength, fields });
    return this.written(id).then((ok) => {
      if (!ok && o !== undefined && ctx.owned.get(shard) === o) void this.fence.stands(shard, o).catch((err: unknown) => ctx.warn(err, 'reading the log fence failed'));
      return ok;
    });
  }

  /**
   * A report batch's XADD without waiting: resolves with whether it was written, or is undefined when
   * skipped — while Redis is backed up (reports are cumulative, the next one makes up for it).
   */
  appendReport(shard: number, fields: EnvelopeFields): Promise<boolean> | undefined {
    if (this.inflight > 4 * this.ctx.opts.shards) return undefined;
    return this.written(this.ctx.redis.call('XADD', this.ctx.keys.shard(shard, 'reports'), 'MAXLEN', '~', this.maxLength, '*', ...flatFields(fields)));
  }

  /** Every `snapshotMs`, checkpoints each served shard that changed and trims what it covers (B4). */
  snapshots(mono: number): void {
    const every = this.ctx.opts.snapshotMs ?? 1000;
    for (const [s, o] of this.ctx.owned) {
      if (this.ctx.serving(s) && o.dirty && mono - o.snapshotAt >= every) {
        o.snapshotAt = mono;
        o.dirty = false;
        this.writeSnapshot(s).catch((err: unknown) => this.ctx.warn(err, 'snapshot failed'));
      }
    }
  }

  /**
   * Checkpoints a shard and trims the log and reports behind it, less two rounds (B4), in one fenced
   * script (`lua/snapshot.lua`): a deposed owner finds its successor's higher epoch and does nothing.
   */
  async writeSnapshot(shard: number): Promise<void> {
    const { ctx } = this;
    const o = ctx.owned.get(shard);
    if (o === undefined || !ctx.serving(shard)) return;
    const fields = ctx.codec.seal('snapshot', { shard, entries: ctx.owner()!.snapshot(shard), epoch: o.epoch });
    const id = await snapshotScript(ctx.redis, ctx.keys, shard, { epoch: o.epoch, process: this.process, keepMs: 2 * ctx.opts.roundMs, lastRead: o.lastRead, fields });
    if (id) ctx.stats.snapshots++;
    else if ((await this.fence.clearForged(shard, o.epoch)) || (await this.fence.stands(shard, o))) o.dirty = true;
  }

  /** This process as the ownership table and the log's fence name it. */
  private get process(): string {
    const me = this.ctx.identity()!;
    return processName(me.nodeId, me.nodeEpoch);
  }

  private get maxLength(): string {
    return String(this.ctx.opts.maxStreamLength ?? 100_000);
  }

  /** Counts a write in flight until it settles; resolves with whether Redis took it (an id, not false). */
  private written(write: Promise<unknown>): Promise<boolean> {
    this.inflight++;
    return write
      .then(
        (id) => id !== null && id !== false,
        (err: Error) => {
          this.ctx.warn(err, 'stream write failed');
          return false;
        },
      )
      .finally(() => this.inflight--);
  }
}

import { EnvelopeCodec, EnvelopeError, type Bodies, type RejectReason } from './codec.js';
import { processName } from './keys.js';
import type { Owned, OwnerContext } from './owner-context.js';
import { fenceScript, type StreamEntries } from './scripts.js';
import { ErrorCode, RateLimiterError } from '../lib/errors.js';

/**
 * The fence of each shard's log (`frl:{sN}:fence`, `lua/fence.lua`): raised by a new owner before it
 * replays the log, so that every grant append and checkpoint from a lower epoch (or another process
 * of the same) is refused; judged by its seal; re-sealed `settled` once the owner's ledgers are
 * rebuilt. An owner a genuine fence stands against stands down and gives the shard up.
 */
export class LogFence {
  /**
   * Shards to give up in the next round, with the epoch the log's fence stood against, to claim anew
   * above it (not if the table has moved past that epoch meanwhile).
   */
  private readonly relinquish = new Map<number, number>();

  /** `learnEpoch`: an owner epoch seen on a fence, which no claim may go below. */
  constructor(
    private readonly ctx: OwnerContext,
    private readonly learnEpoch: (epoch: number) => void,
  ) {}

  /**
   * The shards to give up this round (`relinquish`): those whose table epoch has not moved past the
   * one the fence stood against. Forgets them all.
   */
  takeRelinquished(tableEpoch: (shard: number) => number): number[] {
    const stale = [...this.relinquish].filter(([s, e]) => !(tableEpoch(s) > e)).map(([s]) => s);
    this.relinquish.clear();
    return stale;
  }

  /** This process as the ownership table and the log's fence name it. */
  private get process(): string {
    const me = this.ctx.identity()!;
    return processName(me.nodeId, me.nodeEpoch);
  }

  /**
   * Raises the fence of a shard's log (`lua/fence.lua`) under `o`'s epoch, reading the log in the same
   * step when `read` is `log` (else the log returned is empty). Returns the log and whether the fence
   * it replaced was a settled one sealed with the bus secret, or else the epoch of the genuine fence
   * that stands. What stands is judged by its seal: a fence whose seal does not verify was written
   * without the bus secret, and one whose plain fields differ from its seal was tampered with; either
   * is counted. One whose seal does not stand against us is replaced by ours; one whose seal does is
   * put back as sealed, and stands.
   */
  async raise(shard: number, o: Owned, { read }: { read: 'log' | 'nothing' }): Promise<{ log: StreamEntries; settled: boolean } | number> {
    const { ctx } = this;
    const epoch = o.epoch;
    const { nodeId, nodeEpoch } = ctx.identity()!;
    const raise = (e: number, holder: string, seal: string, found: string) => fenceScript(ctx.redis, ctx.keys, shard, { epoch: e, holder, seal, found, read });
    const mine = EnvelopeCodec.toJson(ctx.codec.seal('fence', { shard, epoch, nodeId, nodeEpoch }));
    for (let found = '', tries = 0; tries < 3; tries++) {
      const reply = await raise(epoch, this.process, mine, found);
      if (reply[0] === 1) {
        o.seal = mine;
        return { log: reply[2], settled: this.open(shard, reply[1])?.settled === true };
      }
      const [, standing, holder, seal] = reply;
      const sealed = this.open(shard, seal);
      const sealedHolder = sealed === undefined ? '' : processName(sealed.nodeId, sealed.nodeEpoch);
      const tampered = sealed === undefined || String(sealed.epoch) !== standing || sealedHolder !== holder;
      if (tampered) {
        ctx.stats.rejected.malformed++;
        ctx.warn(new Error(`fence of shard ${shard} at epoch ${standing} is not as sealed`), 'log fence written without the bus secret', { shard });
      }
      if (sealed !== undefined && (sealed.epoch > epoch || (sealed.epoch === epoch && sealedHolder !== this.process))) {
        if (tampered) await raise(sealed.epoch, sealedHolder, seal, seal);
        return sealed.epoch;
      }
      found = seal; // replaced only if still exactly this one
    }
    throw new RateLimiterError(ErrorCode.INTERNAL, `shard ${shard}: the log fence keeps changing under us`);
  }

  /** A fence seal's body if it verifies and names this shard. */
  private open(shard: number, seal: string): Bodies['fence'] | undefined {
    try {
      const env = this.ctx.codec.open(EnvelopeCodec.fromJson(seal));
      return env.t === 'fence' && env.body.shard === shard ? env.body : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * The shard's ledgers are rebuilt: serve it, and re-seal our fence `settled`, so that the next owner
   * knows the log is whole and need not wait for every member's reports.
   */
  settled(shard: number, o: Owned): void {
    const { ctx } = this;
    o.state = 'ready';
    const { nodeId, nodeEpoch } = ctx.identity()!;
    const seal = EnvelopeCodec.toJson(ctx.codec.seal('fence', { shard, epoch: o.epoch, nodeId, nodeEpoch, settled: true }));
    fenceScript(ctx.redis, ctx.keys, shard, { epoch: o.epoch, holder: this.process, seal, found: o.seal ?? '', read: 'nothing' })
      .then((reply) => {
        if (reply[0] === 1) o.seal = seal;
      })
      .catch((err: unknown) => ctx.warn(err, 'sealing the log fence settled failed'));
  }

  /**
   * A genuine fence of epoch `standing` stands against us: a later owner took the shard, or our table
   * epoch is behind one the log has seen (Redis lost the table but not the log's fence). Stop serving
   * it at once, learn that epoch, and give the shard up in the next round: a claim after that (ours
   * or another's) gets a higher epoch, so nobody renews one the fence refuses for good.
   */
  standDown(shard: number, standing: number, o: Owned): void {
    if (this.ctx.owned.get(shard) !== o) return;
    this.learnEpoch(standing);
    this.relinquish.set(shard, o.epoch);
    this.ctx.owned.delete(shard);
    this.ctx.warn(new Error(`shard ${shard}: the log is fenced under owner epoch ${standing}`), 'stopped serving a shard whose log a later owner fenced');
  }

  /**
   * A write of ours was refused by the log's fence: a forged one is replaced (the write is tried
   * again by the next round's work), a genuine one means this node stands down. Returns whether it
   * may write again.
   */
  async stands(shard: number, o: Owned): Promise<boolean> {
    const epoch = o.epoch;
    if (this.ctx.owned.get(shard) !== o) return false;
    const raised = await this.raise(shard, o, { read: 'nothing' });
    if (typeof raised !== 'number') return this.ctx.owned.get(shard) === o;
    if (o.epoch === epoch) this.standDown(shard, raised, o);
    return false;
  }

  /**
   * The snapshot script found a higher epoch in the log: a successor's, or an entry written by someone
   * without the bus secret (whose plain `epoch` would stop checkpoints and trimming for good). Entries
   * whose envelope does not verify, or signs another epoch, are deleted and counted; returns whether any
   * was, so the checkpoint is tried again. A real successor's entry stays, and this owner stands down.
   */
  async clearForged(shard: number, mine: number): Promise<boolean> {
    const { ctx } = this;
    const entries = (await ctx.redis.call('XREVRANGE', ctx.keys.shard(shard, 'log'), '+', '-', 'COUNT', '256')) as StreamEntries;
    const forged: string[] = [];
    for (const [id, flat] of entries) {
      const fields = EnvelopeCodec.fromStream(flat);
      const plain = Number(fields.epoch);
      if (!(plain > mine)) continue;
      let reason: RejectReason | undefined;
      try {
        const env = ctx.codec.open(fields);
        // An older release signs no epoch (nor does a snapshot of no grants): its entry verified, so
        // it was written with the bus secret and stands.
        const signed = env.t === 'grants' ? (env.body.epoch ?? env.body.grants[0]?.ownerEpoch) : env.t === 'snapshot' ? env.body.epoch : undefined;
        if (signed !== undefined && signed !== plain) reason = 'malformed';
      } catch (err) {
        reason = err instanceof EnvelopeError ? err.reason : 'malformed';
      }
      if (reason === undefined) return false;
      ctx.stats.rejected[reason]++;
      forged.push(id);
    }
    if (forged.length === 0) return false;
    await ctx.redis.call('XDEL', ctx.keys.shard(shard, 'log'), ...forged);
    ctx.warn(new Error(`${forged.length} log entries with an epoch their envelope does not sign`), 'forged log entries deleted', { shard, ids: forged });
    return true;
  }
}

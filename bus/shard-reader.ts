import type { OwnerMessage } from '../lib/protocol/messages.js';
import { EnvelopeCodec, EnvelopeError, type Envelope, type RejectReason } from './codec.js';
import { consumerName, GROUP } from './keys.js';
import type { OwnerContext } from './owner-context.js';
import type { RedisClient } from './redis-connection.js';
import type { StreamEntries } from './scripts.js';

const READ_COUNT = 500;
/** Rounds between an owner's sweeps for report entries stranded with a deposed owner's consumer. */
const CLAIM_EVERY_ROUNDS = 8;

/**
 * What a fold does with what it reads: `serve` answers it (when the shard is served), `replay` only
 * rebuilds the ledgers (a takeover).
 */
export type FoldMode = 'serve' | 'replay';

/**
 * The owner's side of the shards' report streams: the read loop through the consumer group, folding
 * into the owner, dead letters, and the sweep for entries stranded with a deposed owner.
 */
export class ShardReader {
  /**
   * `reader`: the connection of the blocking reads, no other. `route`: sends the owner messages one
   * read produced. `local`: this process's monotonic time at a Redis time (an entry id's), for the
   * fold age of what it folds.
   */
  constructor(
    private readonly ctx: OwnerContext,
    private readonly reader: RedisClient,
    private readonly route: (messages: readonly OwnerMessage[]) => void,
    private readonly local: (redisMs: number) => number | undefined = () => undefined,
  ) {}

  private get consumer(): string {
    const me = this.ctx.identity()!;
    return consumerName(me.nodeId, me.nodeEpoch);
  }

  async ensureGroup(shard: number): Promise<void> {
    try {
      await this.ctx.redis.call('XGROUP', 'CREATE', this.ctx.keys.shard(shard, 'reports'), GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!String((err as Error).message).includes('BUSYGROUP')) throw err;
    }
  }

  /**
   * The owner's read loop on its own connection: a blocking XREADGROUP over every shard it serves
   * (on a Redis Cluster, whose multi-key reads must stay in one slot, one read per shard each round).
   * Runs until the bus is closed.
   */
  async readLoop(): Promise<void> {
    const { ctx } = this;
    const cluster = ctx.opts.clusterNodes !== undefined;
    while (!ctx.closed()) {
      const shards = [...ctx.owned].filter(([, o]) => o.state !== 'taking').map(([s]) => s);
      try {
        if (shards.length === 0 || ctx.identity() === undefined) {
          await sleep(ctx.opts.roundMs);
          continue;
        }
        const block = 2 * ctx.opts.roundMs;
        const results: Array<[string, StreamEntries]> = [];
        if (cluster) {
          const each = await Promise.all(shards.map((s) => this.reader.call('XREADGROUP', 'GROUP', GROUP, this.consumer, 'COUNT', READ_COUNT, 'STREAMS', ctx.keys.shard(s, 'reports'), '>')));
          for (const r of each as Array<Array<[string, StreamEntries]> | null>) results.push(...(r ?? []));
          if (results.length === 0) await sleep(ctx.opts.roundMs);
        } else {
          const keys = shards.map((s) => ctx.keys.shard(s, 'reports'));
          const r = (await this.reader.call('XREADGROUP', 'GROUP', GROUP, this.consumer, 'COUNT', READ_COUNT, 'BLOCK', block, 'STREAMS', ...keys, ...keys.map(() => '>'))) as Array<
            [string, StreamEntries]
          > | null;
          results.push(...(r ?? []));
        }
        // Everything read in one go is answered in one go: one message per node, one log entry per shard.
        const out: OwnerMessage[] = [];
        const acks = results.map((res) => this.fold(Number(/\{s(\d+)\}/.exec(res[0])?.[1]), res[1], 'serve', out));
        this.route(out);
        await Promise.all(acks);
      } catch (err) {
        if (ctx.closed()) break;
        if (String((err as Error).message).includes('NOGROUP')) {
          // Redis lost the stream (restarted empty): recreate the groups and go on.
          await Promise.all(shards.map((s) => this.ensureGroup(s).catch(() => undefined)));
        } else ctx.warn(err, 'reading shard streams failed');
        await sleep(ctx.opts.roundMs);
      }
    }
  }

  /**
   * Folds report entries of a shard and acks them; an entry that can never be folded goes to the dead
   * letter stream and is acked too, so nothing stays pending. During a takeover or a blind settle,
   * entries only rebuild ledgers (replay), nothing is issued. Entries of a shard no longer ours stay
   * pending for its next owner. Messages for nodes go to `out`; resolves once the entries are acked.
   */
  fold(shard: number, entries: StreamEntries, mode: FoldMode, out: OwnerMessage[]): Promise<unknown> {
    const { ctx } = this;
    const st = ctx.owned.get(shard);
    if (st === undefined || entries.length === 0) return Promise.resolve();
    const acks: string[] = [];
    for (const [id, flat] of entries) {
      st.lastRead = id;
      if (flat === null) {
        acks.push(id); // trimmed while pending: nothing left to fold
        continue;
      }
      const fields = EnvelopeCodec.fromStream(flat);
      let env: Envelope;
      try {
        env = ctx.codec.open(fields);
        if (env.t !== 'reports' || env.body.shard !== shard)
          throw new EnvelopeError('malformed', `t: a ${env.t} entry for shard ${env.t === 'reports' ? env.body.shard : '?'} in shard ${shard}'s report stream`);
      } catch (err) {
        this.deadLetter(shard, id, fields, err);
        acks.push(id);
        continue;
      }
      try {
        // Not serving (taking over, settling, lease in doubt, Redis out of reach, leaving): merge, issue nothing.
        if (mode === 'replay' || ctx.closed() || !ctx.serving(shard)) ctx.owner()!.replay([{ kind: 'report', batch: env.body }]);
        else out.push(...ctx.owner()!.onReports(env.body, this.local(Number.parseInt(id, 10))));
        ctx.stats.entriesFolded++;
        st.dirty = true;
      } catch (err) {
        this.deadLetter(shard, id, fields, err, 'fold');
      }
      acks.push(id);
    }
    return acks.length ? ctx.redis.call('XACK', ctx.keys.shard(shard, 'reports'), GROUP, ...acks) : Promise.resolve();
  }

  private deadLetter(shard: number, id: string, fields: Record<string, string>, err: unknown, reason?: 'fold'): void {
    const { ctx } = this;
    const why: RejectReason | 'fold' = reason ?? (err instanceof EnvelopeError ? err.reason : 'malformed');
    ctx.stats.rejected[why]++;
    ctx.stats.deadLettered++;
    const flat = Object.entries(fields).flatMap(([k, v]) => [`entry.${k}`, v]);
    ctx.redis
      .call('XADD', ctx.keys.shard(shard, 'dead'), 'MAXLEN', '~', '10000', '*', 'reason', why, 'error', String((err as Error)?.message ?? err), 'id', id, ...flat)
      .catch((e: Error) => ctx.warn(e, 'dead-letter write failed'));
    ctx.warn(err, `bus entry rejected (${why})`, { shard, id });
  }

  /** Claims and folds (as a takeover replays) the entries a previous owner left pending, from the first. */
  async claimPending(shard: number, current: () => boolean): Promise<boolean> {
    let cursor = '0-0';
    do {
      const [next, claimed] = (await this.ctx.redis.call('XAUTOCLAIM', this.ctx.keys.shard(shard, 'reports'), GROUP, this.consumer, '0', cursor, 'COUNT', READ_COUNT)) as [string, StreamEntries];
      if (!current()) return false;
      await this.fold(shard, claimed, 'replay', []);
      cursor = next;
    } while (cursor !== '0-0');
    return true;
  }

  /**
   * Every few rounds, per shard served: report entries still pending with another consumer for over
   * two rounds (delivered to a deposed owner's last blocking read) are claimed and folded.
   */
  claimStranded(): void {
    const { ctx } = this;
    if (ctx.stats.rounds % CLAIM_EVERY_ROUNDS !== 0) return;
    for (const [s, o] of ctx.owned) {
      if (!ctx.serving(s) || o.claimRound === ctx.stats.rounds) continue;
      o.claimRound = ctx.stats.rounds;
      (ctx.redis.call('XAUTOCLAIM', ctx.keys.shard(s, 'reports'), GROUP, this.consumer, String(2 * ctx.opts.roundMs), '0-0', 'COUNT', READ_COUNT) as Promise<[string, StreamEntries]>)
        .then(async ([, claimed]) => {
          const out: OwnerMessage[] = [];
          const acked = this.fold(s, claimed, 'serve', out);
          this.route(out);
          await acked;
        })
        .catch((err: unknown) => ctx.warn(err, 'claiming stranded entries failed'));
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

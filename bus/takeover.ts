import { EnvelopeCodec, type Envelope } from './codec.js';
import type { LogFence } from './log-fence.js';
import type { Owned, OwnerContext } from './owner-context.js';
import { streamIdBelow, type StreamEntries } from './scripts.js';
import type { ShardReader } from './shard-reader.js';
import type { LogEntry } from './types.js';

/** A takeover without a log (Redis lost it) folds this many rounds of reports before it issues anything. */
const BLIND_SETTLE_ROUNDS = 9;

/** How a shard that became ours is taken over: fence, replay, claim, then serve (or settle first). */
export class Takeover {
  constructor(
    private readonly ctx: OwnerContext,
    private readonly fence: LogFence,
    private readonly reader: ShardReader,
  ) {}

  /**
   * A shard became ours: create its group if Redis lost it, replay the log and the reports retained
   * behind the last snapshot, claim the previous owner's pending entries, then serve. After a blind
   * takeover (Redis lost the table, so maybe the log) fold reports for a few rounds before issuing.
   */
  async start(shard: number, st: Owned, { blind }: { blind: boolean }): Promise<void> {
    const { ctx } = this;
    const current = (): boolean => ctx.owned.get(shard) === st && !ctx.closed();
    try {
      ctx.stats.takeovers++;
      await this.reader.ensureGroup(shard);
      // Fenced and read in one step: every grant an earlier owner can still have issued is in this log.
      const raised = await this.fence.raise(shard, st, { read: 'log' });
      if (!current()) return;
      if (typeof raised === 'number') return this.fence.standDown(shard, raised, st);
      // No settled fence before ours: Redis lost this shard's data (or it never had an owner). The log
      // may be gone; the members' reports are the record, and only once all of them have come in.
      if (!raised.settled) blind = true;
      const log = raised.log;
      const reports = (await ctx.redis.call('XRANGE', ctx.keys.shard(shard, 'reports'), '-', '+')) as StreamEntries;
      if (!current()) return;
      const entries: LogEntry[] = [];
      let checkpoint = false;
      let lost = false;
      for (const [i, [, flat]] of [...log, ...reports].entries()) {
        const env = ctx.open(EnvelopeCodec.fromStream(flat));
        if (env !== undefined) entries.push(...logEntries(env));
        if (i < log.length) [checkpoint, lost] = [checkpoint || env?.t === 'snapshot', lost || env === undefined];
      }
      // The ended marks travel in checkpoints: without a settled fence, without a checkpoint that
      // opened (the length cap trimmed it, or none was written yet) or with a log entry that did not
      // open, the ledgers an earlier owner dropped may be unmarked in what is left.
      if (blind || !checkpoint || lost) entries.push({ kind: 'unmarked', shard });
      ctx.owner()!.replay(entries);
      const lastReport = reports[reports.length - 1]?.[0];
      if (lastReport !== undefined && !streamIdBelow(lastReport, st.lastRead)) st.lastRead = lastReport;
      if (!(await this.reader.claimPending(shard, current))) return;
      st.settleUntil = blind ? ctx.clock.monotonic() + BLIND_SETTLE_ROUNDS * ctx.opts.roundMs : 0;
      if (blind) {
        st.checkedIn = new Map();
        st.state = 'settling';
      } else this.fence.settled(shard, st);
    } catch (err) {
      ctx.warn(err, 'takeover failed; retried next round');
      if (current()) ctx.owned.delete(shard);
    }
  }

  /**
   * A blind owner whose members have all checked in since: ready once its read loop has folded the
   * report stream up to the entry that was last at that moment (asked once, then checked each round).
   */
  readPast(shard: number, o: Owned): void {
    const { ctx } = this;
    if (o.readTo === undefined) {
      o.readTo = '';
      (ctx.redis.call('XREVRANGE', ctx.keys.shard(shard, 'reports'), '+', '-', 'COUNT', '1') as Promise<StreamEntries>)
        .then((last) => {
          o.readTo = last[0]?.[0] ?? '0-0';
        })
        .catch((err: unknown) => {
          o.readTo = undefined;
          ctx.warn(err, 'reading the report stream failed');
        });
      return;
    }
    if (o.readTo !== '' && !streamIdBelow(o.lastRead, o.readTo)) this.fence.settled(shard, o);
  }
}

/** What a log or report entry contributes to a replay. */
function logEntries(env: Envelope): LogEntry[] {
  switch (env.t) {
    case 'reports':
      return [{ kind: 'report', batch: env.body }];
    case 'grants': {
      const out: LogEntry[] = env.body.grants.map((grant) => ({ kind: 'grant', grant }));
      if (env.body.blanket !== undefined) out.push({ kind: 'blanket', blanket: env.body.blanket });
      return out;
    }
    case 'snapshot':
      return env.body.entries;
    default:
      return [];
  }
}

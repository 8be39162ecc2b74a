import { expect } from 'chai';
import { EnvelopeCodec } from '../../bus/codec.js';
import type { ReportBatch } from '../../lib/protocol/messages.js';
import { BUS_SECRET, fleetSuite, placeOf, redisLimiter, until } from '../support/redis-members.js';

const WINDOW_MS = 60_000;
const codec = new EnvelopeCodec(BUS_SECRET.versions);

function report(keyId: string, seq: number): ReportBatch {
  const { windowId, shard } = placeOf(keyId);
  return {
    shard,
    nodeId: 'ghost',
    nodeEpoch: 'ghost-e1',
    round: seq,
    reports: [{ keyId, windowId, windowMs: WINDOW_MS, limit: 100, lease: 1, seq, spent: 1, issued: 0, selfIssued: 0, released: 0, demand: 0, held: 0, selfGrant: false }],
  };
}

describe('fold age over Redis (real redis-server): from a report entry’s id to its fold', function () {
  this.timeout(30_000);
  const ctx = fleetSuite('fa');

  it('measures an entry from the Redis time in its id: one added with an id 400 ms old is folded at least 400 ms old', async () => {
    const a = ctx.join('a');
    await a.bus.ready();
    const ages: number[] = [];
    a.owner.foldAges.watcher = (ms) => ages.push(ms);
    const keyId = 'v1:FOLDAGEFOLDAGEFOLDAGEF';
    const { shard } = placeOf(keyId);
    const [seconds, micros] = (await ctx.raw.time()) as unknown as [string, string];
    const redisMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    const sealed = codec.seal('reports', report(keyId, 1));
    await ctx.raw.xadd(`${ctx.prefix}:{s${shard}}:reports`, `${redisMs - 400}-0`, ...Object.entries(sealed).flat());
    await until(() => ages.length > 0, 'the entry to be folded');
    expect(ages).to.have.length(1);
    expect(ages[0]).to.be.at.least(400);
    expect(a.owner.foldAges.other.count + a.owner.foldAges.top.count).to.equal(1);
  });

  it('a limiter on Redis serves the fold-age histogram of its owner side, split into top and other keys', async () => {
    const limiter = redisLimiter(ctx.redis.url, ctx.prefix, 'fa-node', 'someone');
    try {
      await limiter.ready();
      const text = await limiter.metrics.metrics();
      for (const keys of ['top', 'other']) {
        expect(text).to.include(`fleet_ratelimit_report_fold_age_seconds_bucket{le="0.05",keys="${keys}",node="fa-node"}`);
        expect(text).to.match(new RegExp(`fleet_ratelimit_report_fold_age_seconds_count\\{keys="${keys}",node="fa-node"\\} \\d+`));
      }
    } finally {
      await limiter.close();
    }
  });
});

import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { LedgerStore, type Ledger } from '../../lib/ledger-store.js';
import { Blankets } from '../../lib/owner/blankets.js';
import { replayLog } from '../../lib/owner/checkpoint.js';
import { newStats } from '../../lib/owner/config.js';
import { EndedMarks } from '../../lib/owner/ended.js';
import { NodeReports } from '../../lib/owner/node-reports.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

/*
 * A replay counts blankets again only in the shards its entries are of. An owner not serving a shard
 * folds each report entry it reads as a replay of that one entry: counting them in every ledger of
 * every shard each time made a member short of CPU spend more of it the further behind it fell.
 */
describe('replaying a log counts blankets in the shards its entries are of', () => {
  const W = 60_000;
  const WID = 30_000_000;
  /** Key `k<s>` is in shard s. */
  const shardOf = (keyId: string): number => Number(keyId.slice(1));
  const report = (shard: number, seq: number): LogEntry => ({
    kind: 'report',
    batch: {
      shard,
      nodeId: 'a',
      nodeEpoch: 'a-e1',
      round: seq,
      reports: [{ keyId: `k${shard}`, windowId: WID, windowMs: W, limit: 100_000, lease: 1, seq, spent: 1, issued: 1, selfIssued: 0, released: 0, demand: 3, held: 0, selfGrant: false }],
    },
  });

  it('goes through the ledgers of the replayed shard only, and counts there as a whole replay does', () => {
    const clock = new FakeClock(WID * W + 100);
    const blankets = new Blankets();
    const counted: number[] = [];
    const inherit = blankets.inherit.bind(blankets);
    blankets.inherit = (l: Ledger, stated?: boolean): void => {
      if (!blankets.replaying) counted.push(l.shard);
      inherit(l, stated);
    };
    const ledgers = new LedgerStore(shardOf, (l, stated) => blankets.inherit(l, stated));
    const reports = new NodeReports(ownerConfig(clock, new FixedFleet(3)), newStats());
    const marks = new EndedMarks();
    const replay = (entries: LogEntry[]): void => replayLog(ledgers, reports, marks, blankets, entries, clock.now());
    // Earlier owners' blankets in shards 1 and 2, covering the window; a ledger in each.
    const blanket = (shard: number): LogEntry => ({ kind: 'blanket', blanket: { shard, nodeId: 'o', nodeEpoch: 'o-e1', ownerEpoch: 3, startsAfter: WID * W - W, startsBy: WID * W + 2 * W } });
    replay([blanket(1), blanket(2), report(1, 1), report(2, 1)]);
    expect(counted.sort()).to.deep.equal([1, 2]);
    for (const s of [1, 2]) expect(ledgers.find(`k${s}`, W, WID)!.leases.some((x) => x.issued >= 1 && x.nodeEpoch.endsWith('o-e1'))).to.equal(true);
    counted.length = 0;
    replay([report(1, 2)]);
    expect(counted).to.deep.equal([1]);
    counted.length = 0;
    replay([report(5, 1)]); // a shard with no blanket: nothing to count
    expect(counted).to.deep.equal([]);
  });
});

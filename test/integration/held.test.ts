import { expect } from 'chai';
import type { HeldRange } from '../../lib/node-contract.js';
import { fleetSuite, limits, placeOf, until, windowLeftMs, type Member } from '../support/redis-members.js';

/** What `m`'s bus lets its node take itself in `shard` now (`OwnerLink.held`). */
const heldFor = (m: Member, shard: number): HeldRange | undefined => (m.bus as unknown as { fleet: { heldFor: (s: number) => HeldRange | undefined } }).fleet.heldFor(shard);

/**
 * A key of a shard `owner` owns whose current window of `windowMs` `asker` may take credit in itself,
 * as `fits` judges its start and end against the held range `asker` was given for it. Keys are tried
 * (and the clock waited on) until one fits.
 */
async function keyWhere(asker: Member, owner: Member, salt: string, windowMs: number, fits: (start: number, end: number, range: HeldRange) => boolean): Promise<string> {
  let found = '';
  await until(
    () => {
      for (let i = 0; i < 2000; i++) {
        const keyId = `v1:${`${salt}${i}`.padStart(22, 'h')}`;
        const { shard } = placeOf(keyId, windowMs);
        const range = heldFor(asker, shard);
        const end = Date.now() + windowLeftMs(keyId, windowMs);
        if (asker.bus.owners()[shard]?.owner === owner.nodeId && range !== undefined && fits(end - windowMs, end, range)) {
          found = keyId;
          return true;
        }
      }
      return false;
    },
    'a key whose window the asker may take credit in',
    15_000,
  );
  return found;
}

/**
 * A key whose current 1 s window started after the held range `asker` was given for it, and by its
 * end. With a margin: the window's start is stated in whole ms, and the check runs again in acquire.
 */
const coveredKey = (asker: Member, owner: Member, salt: string): Promise<string> =>
  keyWhere(asker, owner, salt, 1000, (start, end, range) => start > range.after && start <= range.by - 50 && end - Date.now() > 200);

describe('Members’ credit under blankets over real Redis: a first sight with no ask', function () {
  this.timeout(30_000);
  const ctx = fleetSuite('hd');

  it('a member’s first sight of a key another member owns is admitted at once, with no ask; its owner counts that credit once', async () => {
    const a = ctx.join('a');
    const b = ctx.join('b');
    await Promise.all([a.bus.ready(), b.bus.ready()]);
    const keyId = await coveredKey(b, a, 'first');
    const { windowId } = placeOf(keyId, 1000);
    const asks = b.node.stats.fastPath;
    expect(b.node.acquire(keyId, limits(1e9, 1000)), 'at once').to.deep.equal({ admitted: true });
    expect(b.node.stats.fastPath, 'no ask').to.equal(asks);
    expect(b.node.stats.heldTaken).to.equal(1);
    // a counts b's credit in the window once b's report of it made the ledger, and once only: what b
    // holds (the 1 it took, and any top-up a granted since), and the 1 a's own node may take there.
    await until(() => a.owner.spent(keyId, 1000, windowId) === 1, 'b’s report folded by a');
    expect(a.owner.issued(keyId, 1000, windowId)).to.be.at.least(1);
    expect(a.owner.committed(keyId, 1000, windowId)).to.equal(a.owner.issued(keyId, 1000, windowId) + 1);
  });

  it('a new fleet’s member takes its credit at first sight of a 60 s window that started before the fleet, by the held part’s reach', async () => {
    const a = ctx.join('a');
    const b = ctx.join('b');
    await Promise.all([a.bus.ready(), b.bus.ready()]);
    // A 60 s window that started before the held range, ending well after its reach.
    const keyId = await keyWhere(b, a, 'reach', 60_000, (start, end, range) => range.reach !== undefined && start <= range.after && end > range.reach + 1000);
    const { windowId } = placeOf(keyId, 60_000);
    const asks = b.node.stats.fastPath;
    expect(b.node.acquire(keyId, limits(1e9, 60_000)), 'at once').to.deep.equal({ admitted: true });
    expect(b.node.stats.fastPath, 'no ask').to.equal(asks);
    expect(b.node.stats.heldTaken).to.equal(1);
    await until(() => a.owner.spent(keyId, 60_000, windowId) === 1, 'b’s report folded by a');
    expect(a.owner.committed(keyId, 60_000, windowId)).to.equal(a.owner.issued(keyId, 60_000, windowId) + 1);
  });

  it('a member takes nothing in a window of a plan below the least allowance: it asks', async () => {
    const a = ctx.join('a');
    const b = ctx.join('b');
    await Promise.all([a.bus.ready(), b.bus.ready()]);
    const keyId = await coveredKey(b, a, 'small');
    const asks = b.node.stats.fastPath;
    await b.node.acquire(keyId, limits(100, 1000));
    expect(b.node.stats.fastPath).to.equal(asks + 1);
    expect(b.node.stats.heldTaken).to.equal(0);
  });
});

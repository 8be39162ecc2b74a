import { expect } from 'chai';
import type { FleetTable } from '../../bus/fleet-table.js';
import { parseOwnerEntry } from '../../bus/keys.js';
import type { RoundReply } from '../../bus/scripts.js';
import type { ShardReach } from '../../bus/shard-reach.js';
import { rejoining } from '../../lib/membership.js';
import { fleetSuite, limits, placeOf, ROUND_MS, SHARDS, until, type Member } from '../support/redis-members.js';

/** Keeps this process's event loop busy for `ms`, as a long GC pause or a starved CPU would. */
function stall(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* nothing else runs */
  }
}

describe('A stall of the node’s own event loop is not owner silence (real redis-server)', function () {
  this.timeout(30_000);
  const ctx = fleetSuite('stall');

  /** Two members that both own shards; a shard of `b` as `a` sees the table. */
  const pair = async (): Promise<{ a: Member; b: Member; shardOfB: number }> => {
    const a = ctx.join('a');
    const b = ctx.join('b');
    await Promise.all([a.bus.ready(), b.bus.ready()]);
    await until(() => a.bus.ownedShards().length > 0 && b.bus.ownedShards().length > 0, 'both to own shards');
    await until(() => a.node.silenceMs(a.bus.owners().findIndex((o) => o?.owner === 'b')) === 0, 'a to reach b');
    return { a, b, shardOfB: a.bus.owners().findIndex((o) => o?.owner === 'b') };
  };

  it('right after a 150 ms stall the owner still counts as reachable: the fast path is not shut', async () => {
    const { a, shardOfB } = await pair();
    let i = 0;
    while (placeOf(`v1:stall${i}`.padEnd(25, 'k')).shard !== shardOfB) i++;
    const asks = a.bus.stats.asksSent;
    // Six rounds: twice REACH_ROUNDS without a round reply on the full time, yet within b's lease on
    // the shard (LEASE_ROUNDS, counted from when a's round was sent; past it, the table entry itself
    // lapses and nobody is reachable). On a busy machine a reply can come back late: stall once one
    // leaves the lease room for the whole stall.
    const table = (a.bus as unknown as { fleet: FleetTable }).fleet.table;
    await until(() => table[shardOfB]!.expiresAt - performance.now() > 150 + ROUND_MS, 'a round reply leaving b’s lease room for the stall', 10_000);
    stall(150);
    expect(a.node.silenceMs(shardOfB), 'silence of b as a judges it right after the stall').to.equal(0);
    void a.node.acquire(`v1:stall${i}`.padEnd(25, 'k'), limits(100));
    expect(a.bus.stats.asksSent, 'a asked b instead of refusing for want of contact').to.equal(asks + 1);
  });

  it('a real silence still counts: with Redis paused, the owner is out of reach within a few rounds', async function () {
    if (ctx.redis.external) this.skip(); // pauses the server
    const { a, shardOfB } = await pair();
    await ctx.raw.call('CLIENT', 'PAUSE', '600', 'ALL');
    // Within the pause (the loop running all along), b falls silent: over four rounds without a reply.
    await until(() => a.node.silenceMs(shardOfB) > 100, 'b to count as silent while Redis is paused', 500);
    await until(() => a.node.silenceMs(shardOfB) === 0, 'contact again once Redis is back');
  });

  it('after a stall of its own process, the owner does not withhold grants from its own node (L5 is for other members)', async function () {
    const a = ctx.join('solo');
    await a.bus.ready();
    await until(() => a.bus.ownedShards().length === SHARDS, 'solo to own every shard');
    const fleet = (a.bus as unknown as { fleet: FleetTable }).fleet;
    const me = fleet.members.get('solo')!;
    const before = me.rejoinedAt;
    // Six rounds without a heartbeat: by Redis's clock this member was silent, and its next check-in
    // is a return (`lib/membership.ts`: `seen`), which L5 withholds grants from for a round.
    stall(150);
    const limit = 1000;
    const keyId = 'v1:ownstall'.padEnd(25, 'k');
    const { windowId } = placeOf(keyId);
    for (let i = 0; i < 5000 && me.rejoinedAt === before; i++) await new Promise((r) => setImmediate(r));
    const now = performance.now();
    expect(me.rejoinedAt, 'the check-in after the stall counts as a return').to.be.above(before);
    // The return is withheld for one round after it was taken in: looked at later, there is nothing to see.
    if (!rejoining(me, now, ROUND_MS) || !a.bus.ownedShards().length) this.skip();
    const withheld = a.owner.stats.withheld;
    expect(a.bus.fleetView().rejoining('solo', a.nodeEpoch), 'its own node is not withheld').to.equal(false);
    expect(a.bus.fleetView().rejoining('solo', 'another-process'), 'another process under its name still is').to.equal(true);
    const g = a.owner.onCreditRequest({
      keyId,
      windowId,
      windowMs: 60_000,
      limit,
      nodeId: 'solo',
      nodeEpoch: a.nodeEpoch,
      lease: 1,
      spent: 0,
      selfIssued: 0,
      released: 0,
      need: 1,
      demand: 1,
      fastPath: true,
    });
    expect(a.owner.stats.withheld, 'grants withheld').to.equal(withheld);
    expect(g?.issued ?? 0, 'credit for its own node').to.be.at.least(1);
  });

  it('right after a 150 ms stall its own shards still count as reachable: the node asks instead of refusing', async () => {
    const a = ctx.join('solo');
    await a.bus.ready();
    await until(() => a.bus.ownedShards().length === SHARDS, 'solo to own every shard');
    const key = 'v1:ownask'.padEnd(25, 'k');
    const shard = placeOf(key).shard;
    await until(() => a.node.silenceMs(shard) === 0, 'solo to serve its shards');
    const asks = a.node.stats.fastPath;
    // Three rounds without a round reply on the full time: the owner side does not serve until the
    // next one (it must learn of members that joined meanwhile), yet Redis and the shard's lease were
    // fine all along — the node's own stall is not its owner's silence.
    stall(150);
    expect(a.node.silenceMs(shard), 'silence of its own shard right after the stall').to.equal(0);
    const decided = a.node.acquire(key, limits(100));
    expect(a.node.stats.fastPath, 'it asked its owner side instead of refusing for want of contact').to.equal(asks + 1);
    await decided;
  });

  it('an ask waiting for the round reply gets nothing while its owner side does not serve, and its credit once it does', async () => {
    const a = ctx.join('solo');
    await a.bus.ready();
    await until(() => a.bus.ownedShards().length === SHARDS, 'solo to own every shard');
    const key = 'v1:ownwait'.padEnd(25, 'k');
    const shard = placeOf(key).shard;
    await until(() => a.node.silenceMs(shard) === 0, 'solo to serve its shards');
    // No rounds: the reply the ask waits for does not come while they are stopped.
    a.rounds(false);
    const loop = (a.bus as unknown as { rounds: { busy: boolean } }).rounds;
    await until(() => !loop.busy, 'the round in flight, if any, to be back');
    const grants = a.owner.stats.grants;
    stall(150);
    const node = a.node as unknown as { missed256: number };
    const missed = node.missed256;
    const decided = await a.node.acquire(key, limits(100));
    expect(decided.admitted, 'refused at the deadline: its owner side was not serving').to.equal(false);
    expect(a.owner.stats.grants, 'nothing issued while not serving').to.equal(grants);
    // Its own owner side, not the network, missed: no hedging, and no once-a-round block on asking it.
    expect(node.missed256, 'not counted as a missed remote ask').to.equal(missed);
    const asks = a.node.stats.fastPath;
    expect((await a.node.acquire(key, limits(100))).admitted, 'still refused at the deadline').to.equal(false);
    expect(a.node.stats.fastPath, 'asked again in the same round').to.equal(asks + 1);
    expect(a.owner.stats.grants, 'still nothing issued').to.equal(grants);
    // Both asks wait for one answer: a flood waits as one ask per lease, answered once.
    expect((a.bus as unknown as { asks: { awaiting: Map<string, unknown> } }).asks.awaiting.size, 'one waiting ask for the lease').to.equal(1);
    a.rounds(true);
    // The next round reply lets the owner side serve again: the waiting ask is answered then, late,
    // and its credit is kept for the next request.
    await until(() => (a.node.buckets.peek(key)?.buckets[0]?.credit ?? 0) > 0, 'the late answer to land as credit');
    expect(a.owner.stats.grants, 'issued once serving').to.be.above(grants);
  });

  it('a stall between Redis running the round and the reply being taken in: nothing for the waiting ask, and the shard out of reach', async () => {
    const a = ctx.join('solo');
    await a.bus.ready();
    await until(() => a.bus.ownedShards().length === SHARDS, 'solo to own every shard');
    const key = 'v1:ownlate'.padEnd(25, 'k');
    const shard = placeOf(key).shard;
    await until(() => a.node.silenceMs(shard) === 0, 'solo to serve its shards');
    const bus = a.bus as unknown as {
      rounds: { busy: boolean; applyRound(sent: number, reply: RoundReply): void };
      asks: { awaiting: Map<string, unknown> };
      reach: ShardReach;
      fleet: FleetTable;
    };
    const loop = bus.rounds;
    a.rounds(false);
    await until(() => !loop.busy, 'the round in flight, if any, to be back');
    stall(150);
    const grants = a.owner.stats.grants;
    const decided = a.node.acquire(key, limits(100));
    expect(bus.asks.awaiting.size, 'the ask waits for the round reply').to.equal(1);
    let seen: { sent: number; leaseMs: number; expiresAt: number; serving: boolean; awaits: boolean; tableExpiresAt: number } | undefined;
    const apply = loop.applyRound.bind(loop);
    loop.applyRound = (sent, reply) => {
      loop.applyRound = apply;
      const [redisNow, , flatOwners] = reply;
      let expiresAt = 0;
      for (let i = 0; i + 1 < flatOwners.length; i += 2) if (Number(flatOwners[i]) === shard) expiresAt = parseOwnerEntry(flatOwners[i + 1]!).expiresAt;
      // The process stops after Redis ran the round (renewing the lease) and before the reply is
      // taken in: past the lease Redis applied, counted from the script.
      stall(270);
      apply(sent, reply);
      const leaseMs = expiresAt - Number(redisNow);
      seen = { sent, leaseMs, expiresAt, serving: bus.reach.serving(shard), awaits: bus.reach.awaitsRound(shard), tableExpiresAt: bus.fleet.table[shard]!.expiresAt };
    };
    a.rounds(true);
    await decided;
    await until(() => seen !== undefined, 'the reply to be taken in');
    // The waiting ask was settled right after the reply was taken in (the same turn of the loop).
    expect(bus.asks.awaiting.size, 'settled').to.equal(0);
    const [sec, usec] = await ctx.raw.time();
    const redisMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
    expect(redisMs, 'the lease has lapsed in Redis').to.be.above(seen!.expiresAt);
    expect(seen!.serving, 'the owner side does not serve').to.equal(false);
    expect(a.owner.stats.grants, 'nothing issued to the waiting ask by an owner side that does not serve').to.equal(grants);
    // Node side: the table entry's lease is counted from when the round was sent, as Redis's clock
    // saw it at the latest, so the shard is not in reach past the lease Redis applied.
    expect(seen!.tableExpiresAt, 'the entry lapses no later than the lease Redis applied').to.be.at.most(seen!.sent + seen!.leaseMs);
    expect(seen!.awaits, 'not awaiting the round past the lease').to.equal(false);
  });

  /** A member that owns every shard, serving the shard of `key`; its reach as the bus sees it. */
  const solo = async (key: string): Promise<{ a: Member; shard: number; reach: ShardReach; awaiting: () => number }> => {
    const a = ctx.join('solo');
    await a.bus.ready();
    await until(() => a.bus.ownedShards().length === SHARDS, 'solo to own every shard');
    const shard = placeOf(key).shard;
    await until(() => a.node.silenceMs(shard) === 0, 'solo to serve its shards');
    const bus = a.bus as unknown as { reach: ShardReach; asks: { awaiting: Map<string, unknown> } };
    return { a, shard, reach: bus.reach, awaiting: () => bus.asks.awaiting.size };
  };

  it('a stall longer than the lease: its own shard is out of reach, and an ask there does not wait', async () => {
    const key = 'v1:ownlong'.padEnd(25, 'k');
    const { a, shard, reach, awaiting } = await solo(key);
    a.rounds(false);
    const loop = (a.bus as unknown as { rounds: { busy: boolean } }).rounds;
    await until(() => !loop.busy, 'the round in flight, if any, to be back');
    // Past LEASE_ROUNDS (ten rounds) since the last round was sent: the lease may have lapsed in Redis.
    stall(300);
    expect(reach.serving(shard), 'not serving').to.equal(false);
    expect(reach.awaitsRound(shard), 'not awaiting the round past the lease').to.equal(false);
    expect(reach.reachable(shard), 'out of reach').to.equal(false);
    const decided = await a.node.acquire(key, limits(100));
    expect(decided.admitted, 'refused').to.equal(false);
    expect(awaiting(), 'no ask waits for the round').to.equal(0);
    a.rounds(true);
  });

  it('Redis paused past REACH_ROUNDS with the loop running: its own shard no longer awaits the round', async function () {
    if (ctx.redis.external) this.skip(); // pauses the server
    const key = 'v1:ownpause'.padEnd(25, 'k');
    const { a, shard, reach } = await solo(key);
    const table = (a.bus as unknown as { fleet: FleetTable }).fleet.table;
    await ctx.raw.call('CLIENT', 'PAUSE', '600', 'ALL');
    // The loop runs all along: three rounds of running time without a reply is Redis's silence.
    await until(() => !reach.inTouch(), 'out of touch while Redis is paused', 500);
    // Looked at before the table's lease lapses (ten rounds), so that contact alone decides.
    if (performance.now() >= table[shard]!.expiresAt) this.skip();
    expect(reach.serving(shard), 'not serving').to.equal(false);
    expect(reach.awaitsRound(shard), 'not awaiting the round').to.equal(false);
    expect(reach.reachable(shard), 'out of reach').to.equal(false);
    await until(() => reach.serving(shard), 'serving again once Redis is back');
  });
});

import { expect } from 'chai';
import { connect } from 'node:net';
import type { Redis } from 'ioredis';
import { EnvelopeCodec } from '../../bus/codec.js';
import { BUS_SECRET, fleetSuite, limits, placeOf, until, windowLeftMs, withoutBlankets, type Member } from '../support/redis-members.js';

const WINDOW_MS = 60_000;
const codec = new EnvelopeCodec(BUS_SECRET.versions);

/** Key ids whose current window `owner` owns, as `asker` sees the table. */
function keysOwnedBy(asker: Member, owner: string, salt: string): () => string {
  let i = 0;
  return () => {
    for (; i < 100_000; i++) {
      const keyId = `v1:${`${salt}${i}`.padStart(22, 'f')}`;
      if (asker.bus.owners()[placeOf(keyId).shard]?.owner === owner) {
        i++;
        return keyId;
      }
    }
    throw new Error(`no key lands on a shard of ${owner}`);
  };
}

/** Grants for `keyId` on record in its shard's log: logged, or in a checkpoint that trimmed them. */
async function loggedGrants(raw: Redis, prefix: string, keyId: string): Promise<number> {
  let n = 0;
  for (const [, flat] of await raw.xrange(`${prefix}:{s${placeOf(keyId).shard}}:log`, '-', '+')) {
    const env = codec.open(EnvelopeCodec.fromStream(flat));
    const grants = env.t === 'grants' ? env.body.grants : env.t === 'snapshot' ? env.body.entries.flatMap((e) => (e.kind === 'grant' ? [e.grant] : [])) : [];
    n += grants.filter((g) => g.keyId === keyId).length;
  }
  return n;
}

describe('Fast path over its direct channel (real redis-server)', function () {
  this.timeout(30_000);
  const ctx = fleetSuite('fp');
  // Without blankets, as in a fleet with an older member: a window's first ask is answered only once
  // its grant is on record, or from a float logged before it. (With them: `blanket.test.ts`.)
  const join = (id: string, fastPath?: false): Member => withoutBlankets(ctx.join(id, 30_000, fastPath === false ? { fastPath: false } : {}));
  /** Two members that both own shards, `a` asking `b`. */
  const pair = async (bFastPath?: false): Promise<[Member, Member]> => {
    const a = join('a');
    const b = join('b', bFastPath);
    await Promise.all([a.bus.ready(), b.bus.ready()]);
    await until(() => a.bus.ownedShards().length > 0 && b.bus.ownedShards().length > 0, 'both to own shards');
    return [a, b];
  };

  /** Two members, `a` connected to `b`'s listener: an ask has gone direct. */
  const connected = async (salt: string): Promise<[Member, Member, () => string]> => {
    const [a, b] = await pair();
    const next = keysOwnedBy(a, 'b', salt);
    const asked: string[] = [];
    await until(() => {
      asked.push(next());
      void a.node.acquire(asked.at(-1)!, limits(100));
      return a.bus.stats.asksDirect > 0;
    }, 'an ask over the direct channel');
    await until(() => asked.every((k) => (a.node.buckets.peek(k)?.buckets[0]?.issued ?? 0) > 0), 'the earlier asks’ grants to land');
    return [a, b, next];
  };

  it('asks go to the owner over TCP once connected, and the answer comes only after its grant is in the log', async function () {
    if (ctx.redis.external) this.skip(); // pauses the server
    const [a, b, next] = await connected('tcp');
    // With Redis refusing writes, the owner cannot log the grant: the answer waits, the ask misses.
    const keyId = next();
    const direct = a.bus.stats.asksDirect;
    const issued = (): number => a.node.buckets.peek(keyId)?.buckets[0]?.issued ?? 0;
    await ctx.raw.call('CLIENT', 'PAUSE', '100', 'WRITE');
    const r = await a.node.acquire(keyId, limits(100));
    expect(a.bus.stats.asksDirect).to.equal(direct + 1);
    expect(r.admitted).to.equal(false);
    // Once Redis takes writes again the grant is logged, then delivered late (kept for the next
    // request). However slow either process is (a starved machine), whenever this node holds credit
    // for the key the log has its grant already.
    await until(
      async () => {
        if (issued() === 0) return false;
        expect(await loggedGrants(ctx.raw, ctx.prefix, keyId), 'credit applied before the log has it').to.be.at.least(1);
        return true;
      },
      'the grant to land',
      5000,
    );
    expect(b.owner.issued(keyId, WINDOW_MS, placeOf(keyId).windowId)).to.be.above(0);
  });

  it('an ask the owner’s float covers is answered before its log write, which follows', async function () {
    const [a, b] = await pair();
    const keyId = keysOwnedBy(a, 'b', 'float')();
    const { windowId } = placeOf(keyId);
    // Asks as a's process would send them, on a connection of our own to b's listener.
    const addr = b.bus.fastPathAddress()!;
    const s = connect(addr.port, addr.host);
    let frames = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => (frames += d));
    s.on('error', () => undefined);
    s.write(`${EnvelopeCodec.toJson(codec.seal('hello', { nonce: 'a-nonce-of-the-float-test' }))}\n`);
    await until(() => frames.includes('\n'), 'the greeting');
    const answers = (): Array<{ re: number; messages: Array<{ type: string; floated?: number }> }> =>
      frames
        .trim()
        .split('\n')
        .slice(1)
        .map((line) => codec.open(EnvelopeCodec.fromJson(line)).body as { re: number; messages: Array<{ type: string; floated?: number }> });
    const ask = (id: number, spent: number): void => {
      const request = { keyId, windowId, windowMs: WINDOW_MS, limit: 100, nodeId: 'a', nodeEpoch: a.nodeEpoch, lease: 99, spent, selfIssued: 0, released: 0, need: 1, demand: 0, fastPath: true };
      s.write(`${EnvelopeCodec.toJson(codec.seal('ask', { id, nodeId: 'a', nodeEpoch: a.nodeEpoch, requests: [request] }))}\n`);
    };
    ask(1, 0); // the window's first ask: answered after its log write; the owner makes a float
    await until(() => answers().some((x) => x.re === 1), 'the first answer');
    await until(() => b.owner.float(keyId, WINDOW_MS, windowId) > 0, 'the float to be on record');
    // Hold the owner's log writes on the fast-path connection until the answer is in (Redis itself runs on).
    const fast = (b.bus as unknown as { fast: Redis & { frlAppendGrants: (...args: string[]) => Promise<unknown> } }).fast;
    const append = fast.frlAppendGrants.bind(fast);
    let held = 0;
    let written = 0;
    const floated: unknown[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    fast.frlAppendGrants = (...args: string[]) => {
      held++;
      // What this write appends: the answered grant, with its float's share.
      const body = JSON.parse(args[args.indexOf('b') + 1]!) as { grants: unknown[][] };
      return gate
        .then(() => append(...args))
        .then((id) => {
          if (id !== null && body.grants.some((g) => g[0] === keyId && Number(g[9] ?? 0) > 0)) floated.push(id);
          return id;
        })
        .finally(() => written++);
    };
    ask(2, 1);
    try {
      await until(() => answers().some((x) => x.re === 2), 'the second answer');
      expect(
        answers()
          .find((x) => x.re === 2)!
          .messages.find((m) => m.type === 'grant'),
      ).to.include({ floated: 1 });
      expect(held, 'log writes started').to.be.above(0);
      expect(written, 'log writes finished before the answer').to.equal(0);
    } finally {
      release();
    }
    // Appended after (the log itself keeps it only until the next checkpoint, which covers it).
    await until(() => floated.length > 0, 'the grant to reach the log after', 5000);
    s.destroy();
  });

  it('this node’s own credit is spent only once on record: with the log write held, its first sight on a shard it owns waits, misses, and is granted after', async () => {
    const a = join('a');
    await a.bus.ready();
    const keyId = keysOwnedBy(a, 'a', 'own')();
    // Every log write of a's held until released (Redis itself runs on).
    const log = (a.bus as unknown as { log: { appendGrants: (...args: unknown[]) => Promise<boolean> } }).log;
    const append = log.appendGrants.bind(log);
    let written = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    log.appendGrants = (...args: unknown[]) => gate.then(() => append(...args)).finally(() => written++);
    try {
      const r = await a.node.acquire(keyId, limits(100));
      expect(r.admitted, 'admitted on credit not yet on record').to.equal(false);
      // Busy for eight rounds meanwhile: its reports ask for top-ups, which wait for the log too.
      const end = Date.now() + 8 * 25;
      while (Date.now() < end) {
        expect((await a.node.acquire(keyId, limits(100))).admitted).to.equal(false);
        await new Promise((res) => setTimeout(res, 2)); // fixed: paces requests over the eight rounds
      }
      expect(a.node.buckets.peek(keyId)!.buckets[0]!.issued).to.equal(0);
    } finally {
      release();
    }
    await until(() => a.node.buckets.peek(keyId)!.buckets[0]!.issued > 0, 'the grant once on record', 5000);
    expect(written).to.be.above(0);
    expect(await loggedGrants(ctx.raw, ctx.prefix, keyId)).to.be.above(0);
  });

  // Rare keys asked on every request, and this node's own asks wait for their grant's log write unless
  // the float covers them: at a limit of 10^9, every such write that took over 1 ms refused a caller.
  // Under a plan short of plentiful (fewer than 512 a window per node) the owner floats the next
  // window; under a plentiful one the key holds a standing lease, granted ahead for the next window.
  for (const [limit, what] of [
    [500, 'the next window’s float on record'],
    [1e9, 'a standing lease granted ahead for the next window'],
  ] as const) {
    it(`in a fleet of one, a key seen in a window at a limit of ${limit} has ${what} before it begins: its first request there waits for no log write`, async function () {
      this.timeout(60_000);
      const a = join('a');
      await a.bus.ready();
      const W = 1000;
      const plan = limits(limit, W);
      const keys = keysOwnedBy(a, 'a', 'ahead');
      const log = (a.bus as unknown as { log: { appendGrants: (...args: unknown[]) => Promise<boolean> } }).log;
      const append = log.appendGrants.bind(log);
      // A starved machine can run past the next 1 s window before the check: that attempt proves
      // nothing either way, and another key tries again. Every attempt that does ask in the next window
      // must be answered at once.
      for (let attempt = 1; ; attempt++) {
        const keyId = keys();
        // Seen once, well before its 1 s window's last rounds: the window's own float settles and leaves
        // the owner's list before then.
        await until(() => windowLeftMs(keyId, W) > 400 && windowLeftMs(keyId, W) < 700, 'the key’s window to be half over');
        await a.node.acquire(keyId, plan);
        const next = placeOf(keyId, W).windowId + 1;
        const ahead = (): boolean => {
          if (limit !== 1e9) return a.owner.float(keyId, W, next) > 0;
          // Granted ahead, or (on a starved machine) already rolled into the next window.
          const b = a.node.buckets.peek(keyId)!.buckets[0]!;
          return b.windowId === next ? b.issued > 0 : b.nextIssued > 0;
        };
        await until(ahead, what, 3000);
        // (On a starved machine the float's write may come back just after the window began.)
        await until(() => placeOf(keyId, W).windowId >= next, 'the next window to begin', 2000);
        // From now on every log write of a's takes a second: an ask that waited for one would miss.
        // (Fixed: a delay far past the 1 ms deadline is the point, not something to wait for.)
        log.appendGrants = (...args: unknown[]) => new Promise((r) => setTimeout(r, 1000)).then(() => append(...args));
        try {
          // Asked in the same turn as its owner side is seen serving (a starved loop can lapse its lease).
          await until(() => a.node.silenceMs(placeOf(keyId, W).shard) === 0, 'a to serve the shard');
          if (placeOf(keyId, W).windowId !== next) {
            expect(attempt, 'attempts that all ran past the next window').to.be.below(5);
            continue;
          }
          const r = a.node.acquire(keyId, plan);
          expect(r, 'answered in process, at once').to.deep.equal({ admitted: true });
          return;
        } finally {
          log.appendGrants = append;
        }
      }
    });
  }

  it('falls back to Redis pub/sub for an owner that takes no direct asks, with the same answers', async () => {
    const [a, b] = await pair(false);
    expect(b.bus.fastPathAddress()).to.equal(undefined);
    expect(a.bus.fastPathAddress()?.port).to.be.above(0);
    const next = keysOwnedBy(a, 'b', 'ps');
    const keyId = next();
    const r = await a.node.acquire(keyId, limits(100));
    // Answered in time (admitted), or late on a busy machine: the grant lands either way.
    await until(() => a.node.stats.grantsApplied > 0, 'the grant to land');
    expect(r.admitted || a.bus.stats.answersLate > 0).to.equal(true);
    expect(b.owner.issued(keyId, WINDOW_MS, placeOf(keyId).windowId)).to.be.above(0);
    expect(a.bus.stats.asksSent).to.be.at.least(1);
    expect(a.bus.stats.asksDirect).to.equal(0);
  });

  for (const transport of ['direct', 'redis'] as const) {
    it(`over ${transport === 'direct' ? 'TCP' : 'Redis pub/sub'}, a grant the log refuses (Redis out of memory) is never handed out`, async function () {
      if (ctx.redis.external) this.skip(); // changes the server's settings
      const [a, b] = transport === 'direct' ? await connected('oom') : await pair(false);
      const keyId = keysOwnedBy(a, 'b', `oom-${transport}`)();
      // XADD is refused under maxmemory; PUBLISH is not, so only the log-first rule keeps the grant back.
      await ctx.raw.config('SET', 'maxmemory', '1');
      try {
        const r = await a.node.acquire(keyId, limits(100));
        expect(r.admitted).to.equal(false);
        // (On a starved machine the ask may take a while to reach b.)
        await until(() => b.owner.issued(keyId, WINDOW_MS, placeOf(keyId).windowId) > 0, 'the owner to issue', 3000);
        await until(() => b.bus.stats.grantsWithheld > 0, 'the grant to be withheld', 3000);
        await new Promise((res) => setTimeout(res, 100)); // fixed: time for a wrongly sent grant to land
        expect(a.node.buckets.peek(keyId)?.buckets[0]?.issued ?? 0, 'credit the node applied').to.equal(0);
      } finally {
        await ctx.raw.config('SET', 'maxmemory', '0');
      }
    });
  }

  it('a member that is leaving answers no more asks: its last checkpoint has every grant', async () => {
    const [a, b] = await pair(false);
    const keyId = keysOwnedBy(a, 'b', 'leaving')();
    const { windowId } = placeOf(keyId);
    const served = b.bus.stats.asksServed;
    const leaving = b.stop();
    const ask = {
      id: 7,
      nodeId: 'a',
      nodeEpoch: a.nodeEpoch,
      requests: [{ keyId, windowId, windowMs: WINDOW_MS, limit: 100, nodeId: 'a', nodeEpoch: a.nodeEpoch, lease: 0, spent: 0, selfIssued: 0, released: 0, need: 5, demand: 5, fastPath: true }],
    };
    await ctx.raw.publish(`${ctx.prefix}:node:b`, EnvelopeCodec.toJson(codec.seal('ask', ask)));
    await leaving;
    expect(b.owner.issued(keyId, WINDOW_MS, windowId)).to.equal(0);
    expect(b.bus.stats.asksServed).to.equal(served);
  });

  it('a connection that sends a forged ask is closed, counted, and issues nothing', async () => {
    const [a, b] = await pair();
    const next = keysOwnedBy(a, 'b', 'forged');
    const keyId = next();
    const { windowId } = placeOf(keyId);
    const addr = b.bus.fastPathAddress()!;
    const forger = new EnvelopeCodec([{ version: 'b1', secret: 'someone-elses-secret' }]);
    const ask = {
      id: 1,
      nodeId: 'a',
      nodeEpoch: a.nodeEpoch,
      requests: [{ keyId, windowId, windowMs: WINDOW_MS, limit: 100, nodeId: 'a', nodeEpoch: a.nodeEpoch, lease: 0, spent: 0, selfIssued: 0, released: 0, need: 50, demand: 50, fastPath: true }],
    };
    const s = connect(addr.port, addr.host);
    let greeting = '';
    let closed = false;
    s.setEncoding('utf8');
    s.on('data', (d: string) => (greeting += d));
    s.on('close', () => (closed = true));
    s.on('error', () => undefined);
    s.write(`${EnvelopeCodec.toJson(codec.seal('hello', { nonce: 'a-nonce-of-the-asker-0123' }))}\n`);
    await until(() => greeting.includes('\n'), 'the greeting');
    const hello = codec.open(EnvelopeCodec.fromJson(greeting.trim()));
    expect(hello).to.deep.include({ t: 'greeting', body: { nodeId: 'b', nodeEpoch: b.nodeEpoch, host: addr.host, port: addr.port, nonce: 'a-nonce-of-the-asker-0123' } });
    s.write(`${EnvelopeCodec.toJson(forger.seal('ask', ask))}\n`);
    await until(() => closed, 'the connection to be closed');
    expect(b.bus.stats.rejected.mac).to.equal(1);
    expect(b.owner.issued(keyId, WINDOW_MS, windowId)).to.equal(0);
  });
});

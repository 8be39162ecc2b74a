import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { LeaseNode, type Denied } from '../../lib/lease-node.js';
import { PLENTIFUL, STANDING } from '../../lib/lease-node/demand.js';
import { compilePolicy } from '../../lib/policy.js';
import { shardOf, type CreditRequest, type OwnerMessage } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { demoPolicy } from '../support/fixtures.js';
import { grantFor, RecordingLink } from '../support/links.js';
import { nodeConfig } from '../support/protocol.js';

const KEY = 'v1:KKKKKKKKKKKKKKKKKKKKKK';
const policy = compilePolicy(demoPolicy());
const free = policy.limitsFor(KEY, 't'); // burst 10/1 s, sustained 100/60 s
/** One window of 10 per second: the fast-path rules without a second window asking beside it. */
const one = compilePolicy({ version: 1, plans: { p: { windows: [{ name: 'burst', windowMs: 1000, limit: 10 }] } }, defaultPlan: 'p', anonymousPlan: 'p' }).limitsFor(KEY, 't');
/** KEY's phase offset in a 60 s window: where its windows of that length end. */
const off = phaseOffset(KEY, 60_000);

function makeNode(link: RecordingLink, clock = new FakeClock()): LeaseNode {
  return new LeaseNode(nodeConfig(), clock, link);
}

/** A link whose owner grants exactly what each request asks for up to `caps` (per window length). */
/**
 * An owner with `caps` credit per window length. With `notify`, a window it has nothing left for is
 * also announced as exhausted, as a FoldOwner does (its Adjust reaches the node before the answer).
 */
function grantingLink(caps: Record<number, number>, notify?: (m: OwnerMessage) => void): RecordingLink {
  const issued = new Map<string, { n: number; seq: number }>();
  return new RecordingLink((reqs) =>
    reqs.flatMap((r) => {
      const k = `${r.windowMs}|${r.windowId}`;
      const s = issued.get(k) ?? { n: 0, seq: 0 };
      const amount = Math.min(r.need, (caps[r.windowMs] ?? 0) - s.n);
      if (amount <= 0) {
        const { type: _, issued: __, ...ref } = grantFor(r, s.n, s.seq);
        notify?.({ ...ref, type: 'adjust', keep: -1, exhausted: true });
        return [];
      }
      s.n += amount;
      s.seq++;
      issued.set(k, s);
      return [grantFor(r, s.n, s.seq)];
    }),
  );
}

describe('lease node: the decision path', () => {
  it('first sight asks the owner for credit and never grants itself a share (D3)', () => {
    const link = new RecordingLink(() => []);
    const node = makeNode(link);
    const r = node.acquire(KEY, free) as Denied;
    expect(r.admitted).to.equal(false);
    expect(link.requests).to.have.length(1);
    expect(link.requests[0]!.map((q) => [q.windowMs, q.need, q.fastPath])).to.deep.equal([
      [1000, 1, true],
      [60_000, 1, true],
    ]);
    const s = node.buckets.peek(KEY)!;
    expect(s.buckets.map((b) => b.credit)).to.deep.equal([0, 0]);
  });

  it('charges a request admitted without credit (fail-open, degraded) to every window: reported, and the next grant fills the gap first', () => {
    const link = grantingLink({ 1000: 2, 60_000: 2 });
    const node = makeNode(link);
    node.acquire(KEY, free);
    node.acquire(KEY, free); // both credits of each window spent
    node.charge(KEY, free);
    node.charge(KEY, free);
    const s = node.buckets.peek(KEY)!;
    expect(s.buckets.map((b) => [b.spent, b.credit])).to.deep.equal([
      [4, -2],
      [4, -2],
    ]);
    expect(node.stats.charged).to.equal(2);
    const reports = node.endRound().flatMap((b) => b.reports);
    expect(reports.map((r) => [r.spent, r.held])).to.deep.equal([
      [4, 0],
      [4, 0],
    ]);
    // A grant raising the burst window's issued to 5 leaves 1: the two charged took the rest.
    const burst = link.requests.flat().find((r) => r.windowMs === 1000)!;
    expect(node.onMessage(grantFor(burst, 5, 99))).to.equal(true);
    expect(s.buckets[0]!.credit).to.equal(1);
  });

  it('admits from held credit with no call to the owner', () => {
    const link = grantingLink({ 1000: 10, 60_000: 100 });
    link.answer = (
      (orig) => (reqs: Parameters<typeof orig>[0]) =>
        orig(reqs.map((q) => ({ ...q, need: q.windowMs === 1000 ? 10 : 100 })))
    )(link.answer);
    const node = makeNode(link);
    for (let i = 0; i < 10; i++) expect(node.acquire(KEY, free)).to.deep.equal({ admitted: true });
    expect(link.requests).to.have.length(1);
    expect(node.buckets.peek(KEY)!.buckets.map((b) => b.spent)).to.deep.equal([10, 10]);
  });

  it('takes credit from every window or from none (all-or-nothing)', () => {
    // The owner grants the burst window but has nothing left for the sustained one.
    const link = grantingLink({ 1000: 10, 60_000: 0 });
    const node = makeNode(link);
    const r = node.acquire(KEY, free) as Denied;
    expect(r.admitted).to.equal(false);
    expect(r.window).to.equal('sustained');
    const [burst, sustained] = node.buckets.peek(KEY)!.buckets;
    expect(burst!.credit).to.equal(1); // granted, not spent
    expect(burst!.spent).to.equal(0);
    expect(sustained!.spent).to.equal(0);
  });

  it('D2 across the network: an ask answered with credit frees the next; one answered with nothing blocks two rounds', () => {
    const link = grantingLink({ 1000: 2 });
    const node = makeNode(link);
    expect(node.acquire(KEY, one)).to.deep.equal({ admitted: true }); // first sight: asks, gets its need
    expect(node.acquire(KEY, one)).to.deep.equal({ admitted: true }); // asks again in the same round
    expect(link.requests).to.have.length(2);
    expect((node.acquire(KEY, one) as Denied).admitted).to.equal(false); // asks: nothing left
    expect((node.acquire(KEY, one) as Denied).admitted).to.equal(false); // no ask: this round is done
    expect(link.requests).to.have.length(3);
    node.endRound();
    expect((node.acquire(KEY, one) as Denied).admitted).to.equal(false); // nor the next round
    expect(link.requests).to.have.length(3);
    node.endRound();
    expect((node.acquire(KEY, one) as Denied).admitted).to.equal(false); // then it asks again
    expect(link.requests).to.have.length(4);
    expect(node.stats.fastPath).to.equal(4);
  });

  it('asks nothing once told the window is spent, until a grant or the owner says credit came back', () => {
    const notices: OwnerMessage[] = [];
    const link = grantingLink({ 1000: 1 }, (m) => notices.push(m));
    const node = makeNode(link);
    expect(node.acquire(KEY, one)).to.deep.equal({ admitted: true });
    expect((node.acquire(KEY, one) as Denied).admitted).to.equal(false); // nothing left, and told so
    for (const m of notices.splice(0)) node.onMessage(m);
    for (let i = 0; i < 3; i++) node.endRound();
    const spent = node.acquire(KEY, one) as Denied;
    expect(spent.admitted).to.equal(false);
    expect(spent.retryAfterMs).to.be.above(25); // to the window's end: it is spent
    expect(link.requests).to.have.length(2);
    // Credit given back elsewhere refills the window: an adjustment that neither recalls nor exhausts.
    const { type: _, issued: __, ...ref } = grantFor(link.requests[1]![0]!, 1, 1);
    expect(node.onMessage({ ...ref, type: 'adjust', keep: -1, exhausted: false })).to.equal(true);
    node.acquire(KEY, one);
    expect(link.requests).to.have.length(3);
    // A grant clears an exhaustion too: credit again, no ask needed.
    for (const m of notices.splice(0)) node.onMessage(m);
    expect(node.onMessage(grantFor(link.requests[2]![0]!, 3, 5))).to.equal(true);
    expect(node.acquire(KEY, one)).to.deep.equal({ admitted: true });
    expect(link.requests).to.have.length(3);
  });

  it('waits for a remote owner through a promise and admits when the grant lands', async () => {
    const link = new RecordingLink((reqs) => Promise.resolve(reqs.map((r) => grantFor(r, 5, 1))));
    const node = makeNode(link);
    const pending = node.acquire(KEY, free);
    expect(pending).to.be.instanceOf(Promise);
    expect(await pending).to.deep.equal({ admitted: true });
    expect(node.buckets.peek(KEY)!.buckets.map((b) => b.credit)).to.deep.equal([4, 4]);
  });

  it('denies when the fast path expires (the link settles with undefined) and counts it', async () => {
    const link = new RecordingLink(() => Promise.resolve(undefined));
    const node = makeNode(link);
    const r = (await node.acquire(KEY, free)) as Denied;
    expect(r.admitted).to.equal(false);
    expect(node.stats.fastPathTimeouts).to.equal(1);
  });

  describe('Retry-After input: the latest boundary among windows that could deny (H2)', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const burstEnd = (now: number) => windowEndMs(windowIdAt(now, 1000, phaseOffset(KEY, 1000)), 1000, phaseOffset(KEY, 1000));
    const sustEnd = (now: number) => windowEndMs(windowIdAt(now, 60_000, phaseOffset(KEY, 60_000)), 60_000, phaseOffset(KEY, 60_000));

    it('only the burst window is short: wait to the burst boundary', () => {
      const node: LeaseNode = makeNode(
        grantingLink({ 1000: 0, 60_000: 100 }, (m) => node.onMessage(m)),
        clock,
      );
      const r = node.acquire(KEY, free) as Denied;
      expect(r.window).to.equal('burst');
      expect(r.retryAfterMs).to.equal(burstEnd(clock.now()) - clock.now());
    });

    it('both windows short: wait to the later (sustained) boundary, not the one checked first', () => {
      const node: LeaseNode = makeNode(
        grantingLink({ 1000: 0, 60_000: 0 }, (m) => node.onMessage(m)),
        clock,
      );
      const r = node.acquire(KEY, free) as Denied;
      expect(r.window).to.equal('sustained');
      expect(r.retryAfterMs).to.equal(sustEnd(clock.now()) - clock.now());
      expect(r.retryAfterMs).to.be.above(burstEnd(clock.now()) - clock.now() - 1);
    });
  });

  it('an ask that fails (the link rejects) is never left pending: the next request asks afresh', async () => {
    let calls = 0;
    const link = new RecordingLink((reqs) => (calls++ === 0 ? Promise.reject(new Error('link down')) : Promise.resolve(reqs.map((r) => grantFor(r, 1, 1)))));
    const node = makeNode(link);
    const first = node.acquire(KEY, one) as Promise<unknown>;
    const second = node.acquire(KEY, one); // shares the failing ask: answered, not left hanging
    await first.then(
      () => expect.fail('the failed ask should reject the request that made it'),
      (err: Error) => expect(err.message).to.equal('link down'),
    );
    expect(((await second) as Denied).admitted).to.equal(false);
    node.endRound();
    expect(await node.acquire(KEY, one)).to.deep.equal({ admitted: true });
    expect(link.requests).to.have.length(2);
  });

  it('a refill notice does not lift the once-a-round block of an ask just answered with nothing', () => {
    const link = grantingLink({ 1000: 0 });
    const node = makeNode(link);
    expect((node.acquire(KEY, one) as Denied).admitted).to.equal(false);
    const { type: _, issued: __, ...ref } = grantFor(link.requests[0]![0]!, 0, 0);
    node.onMessage({ ...ref, type: 'adjust', keep: -1, exhausted: false });
    node.acquire(KEY, one);
    expect(link.requests).to.have.length(1);
  });

  it('an answer of nothing without an exhaustion notice (the owner holding back) says retry next round, and asks again the round after', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const link = grantingLink({ 1000: 0 });
    const node = makeNode(link, clock);
    const r = node.acquire(KEY, one) as Denied;
    expect(r.window).to.equal('burst');
    expect(r.retryAfterMs).to.be.at.most(25);
    node.endRound();
    expect((node.acquire(KEY, one) as Denied).retryAfterMs).to.be.at.most(25);
    expect(link.requests).to.have.length(1);
    node.endRound();
    node.acquire(KEY, one);
    expect(link.requests).to.have.length(2);
  });

  it('a request whose window ended while its ask was out is admitted against the credit granted for that window, by an owner keeping complete ended marks', async () => {
    // It came in that window, and the grant was that window's allowance: the wait is the owner's, not
    // the caller's (1 in 1,000 requests of 1 s windows asking per request was refused for it).
    const clock = new FakeClock(1_800_000_000_000);
    const end = windowEndMs(windowIdAt(clock.now(), 1000, phaseOffset(KEY, 1000)), 1000, phaseOffset(KEY, 1000));
    clock.advance(end - clock.now() - 1); // 1 ms before the key's window ends
    const link = new RecordingLink((reqs) => {
      clock.advance(2); // the window ends while the ask is out; its grant is for the window that ended
      return Promise.resolve(reqs.map((r) => ({ ...grantFor(r, 1, 1), late: 1 as const })));
    });
    const node = makeNode(link, clock);
    expect(await node.acquire(KEY, one)).to.deep.equal({ admitted: true });
    const b = node.buckets.peek(KEY)!.buckets[0]!;
    expect([b.windowEnd, b.spent, b.credit], 'charged to the window it came in').to.deep.equal([end, 1, 0]);
    // The next request is in the new window: its bucket rolls, with nothing of the old one's.
    const next = node.acquire(KEY, one);
    expect(next).to.be.instanceOf(Promise);
    expect(await next).to.deep.equal({ admitted: true });
    expect([b.windowEnd, b.spent]).to.deep.equal([end + 1000, 1]);
  });

  it('a grant without `late` (an owner whose marks may be incomplete) that lands after the window ended covers nothing there: refused, retry now', async () => {
    const clock = new FakeClock(1_800_000_000_000);
    const end = windowEndMs(windowIdAt(clock.now(), 1000, phaseOffset(KEY, 1000)), 1000, phaseOffset(KEY, 1000));
    clock.advance(end - clock.now() - 1);
    const link = new RecordingLink((reqs) => {
      clock.advance(2);
      return Promise.resolve(reqs.map((r) => grantFor(r, 1, 1)));
    });
    const node = makeNode(link, clock);
    const r = (await node.acquire(KEY, one)) as Denied;
    expect([r.admitted, r.retryAfterMs]).to.deep.equal([false, 0]);
    const b = node.buckets.peek(KEY)!.buckets[0]!;
    expect([b.windowEnd, b.spent, b.credit]).to.deep.equal([end, 0, 1]);
    // A later grant saying `late` does not clear it: the credit the first one added is still there.
    node.onMessage({ ...grantFor(link.requests[0]![0]!, 2, 2), late: 1 });
    expect(b.lateUnsure).to.equal(true);
    // The next window's bucket starts without the mark.
    expect(await node.acquire(KEY, one)).to.deep.equal({ admitted: true });
    expect([b.windowEnd, b.lateUnsure]).to.deep.equal([end + 1000, false]);
  });

  it('credit that landed before the window ended covers a request that came in it, whatever the grant said, even once the window ended during the ask', async () => {
    const clock = new FakeClock(1_800_000_000_000);
    const end = windowEndMs(windowIdAt(clock.now(), 1000, phaseOffset(KEY, 1000)), 1000, phaseOffset(KEY, 1000));
    clock.advance(end - clock.now() - 1);
    let node: LeaseNode | undefined;
    const link = new RecordingLink((reqs) => {
      node!.onMessage(grantFor(reqs[0]!, 1, 1)); // a top-up, without `late`, lands before the end
      clock.advance(2);
      return Promise.resolve([]);
    });
    node = makeNode(link, clock);
    expect(await node.acquire(KEY, one)).to.deep.equal({ admitted: true });
    expect(node.buckets.peek(KEY)!.buckets[0]!.lateUnsure).to.equal(false);
  });

  it('a request whose window ended while its ask was out, answered with nothing, is told to retry now', async () => {
    const clock = new FakeClock(1_800_000_000_000);
    const end = windowEndMs(windowIdAt(clock.now(), 1000, phaseOffset(KEY, 1000)), 1000, phaseOffset(KEY, 1000));
    clock.advance(end - clock.now() - 1);
    const link = new RecordingLink(() => {
      clock.advance(2);
      return Promise.resolve([]);
    });
    const r = (await makeNode(link, clock).acquire(KEY, one)) as Denied;
    expect(r.admitted).to.equal(false);
    expect(r.retryAfterMs, 'never left without a Retry-After').to.equal(0);
  });

  it('a request that came after its window ended, while an ask of the window before was out, takes nothing of that window', async () => {
    // Only requests that came in the window may spend its late grant. One that came after the
    // boundary rolls the bucket, so the grant for the ended window finds no bucket of its window: both
    // are refused (the one that asked too, a refusal left), and nothing is charged to either window.
    const clock = new FakeClock(1_800_000_000_000);
    const end = windowEndMs(windowIdAt(clock.now(), 1000, phaseOffset(KEY, 1000)), 1000, phaseOffset(KEY, 1000));
    clock.advance(end - clock.now() - 1);
    let answer: (g: ReturnType<typeof grantFor>[]) => void = () => undefined;
    const asked: CreditRequest[][] = [];
    const link = new RecordingLink((reqs) => {
      asked.push([...reqs]);
      return asked.length === 1 ? new Promise((resolve) => (answer = resolve)) : Promise.resolve([]);
    });
    const node = makeNode(link, clock);
    const first = node.acquire(KEY, one);
    clock.advance(2); // the window ends; a second request comes in the next one
    const second = node.acquire(KEY, one);
    answer(asked[0]!.map((r) => grantFor(r, 1, 1)));
    expect((await second).admitted, 'it came in the next window, which nobody granted').to.equal(false);
    expect((await first).admitted, 'its bucket rolled under it').to.equal(false);
    const b = node.buckets.peek(KEY)!.buckets[0]!;
    expect([b.windowEnd, b.spent, b.credit]).to.deep.equal([end + 1000, 0, 0]);
  });

  it('a window short only here (its ask for this round is spent) says retry next round, not at its end', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const link = grantingLink({ 1000: 1, 60_000: 100 });
    const node = makeNode(link, clock);
    node.acquire(KEY, free); // first sight, this round's ask
    const r = node.acquire(KEY, free) as Denied;
    expect(r.window).to.equal('burst');
    expect(r.retryAfterMs).to.be.at.most(25);
  });

  it('evicting under pressure gives the credit back and reports it, so the owner can issue it again', () => {
    const link = grantingLink({ 1000: 1000, 60_000: 1000 });
    link.answer = (
      (orig) => (reqs: Parameters<typeof orig>[0]) =>
        orig(reqs.map((q) => ({ ...q, need: 5 })))
    )(link.answer);
    const node = new LeaseNode(nodeConfig({ maxBuckets: 4 }), new FakeClock(), link);
    node.acquire('v1:AAAAAAAAAAAAAAAAAAAAAA', free);
    node.acquire('v1:BBBBBBBBBBBBBBBBBBBBBB', free);
    node.endRound();
    node.acquire('v1:CCCCCCCCCCCCCCCCCCCCCC', free); // over the cap: A (least recently used) goes
    expect(node.buckets.peek('v1:AAAAAAAAAAAAAAAAAAAAAA')).to.equal(undefined);
    const reports = node
      .endRound()
      .flatMap((b) => b.reports)
      .filter((r) => r.keyId === 'v1:AAAAAAAAAAAAAAAAAAAAAA');
    expect(reports.map((r) => [r.issued, r.spent, r.released, r.held])).to.deep.equal([
      [5, 1, 4, 0],
      [5, 1, 4, 0],
    ]);
  });

  describe('grants (L4)', () => {
    function setup() {
      const link = new RecordingLink(() => []);
      const node = makeNode(link);
      node.acquire(KEY, free);
      const [burstReq] = link.requests[0]!;
      return { node, req: burstReq!, bucket: node.buckets.peek(KEY)!.buckets[0]! };
    }

    it('apply once: a duplicate changes nothing', () => {
      const { node, req, bucket } = setup();
      expect(node.applyGrant(grantFor(req, 6, 1))).to.equal(true);
      expect(node.applyGrant(grantFor(req, 6, 1))).to.equal(false);
      expect(bucket.credit).to.equal(6);
    });

    it('out of order: an older grant arriving late never lowers or adds credit', () => {
      const { node, req, bucket } = setup();
      node.applyGrant(grantFor(req, 9, 2));
      expect(node.applyGrant(grantFor(req, 4, 1))).to.equal(false);
      expect(bucket.credit).to.equal(9);
    });

    it('cumulative: a later grant raises credit by the difference only', () => {
      const { node, req, bucket } = setup();
      node.applyGrant(grantFor(req, 4, 1));
      node.applyGrant(grantFor(req, 9, 2));
      expect(bucket.issued).to.equal(9);
    });

    it('a grant for another node epoch (a previous life of this node) is ignored', () => {
      const { node, req, bucket } = setup();
      expect(node.applyGrant({ ...grantFor(req, 50, 1), nodeEpoch: 'old-epoch' })).to.equal(false);
      expect(bucket.credit).to.equal(0);
    });

    it('a grant for an earlier lease of the same bucket (before eviction and reload) is ignored', () => {
      const { node, req, bucket } = setup();
      expect(node.applyGrant({ ...grantFor(req, 50, 7), lease: req.lease - 1 })).to.equal(false);
      expect(bucket.credit).to.equal(0);
    });

    it("states the part of its credit that came out of an owner's float in reports and asks, this window's and, once rolled in, the next's", () => {
      const link = new RecordingLink(() => []);
      const clock = new FakeClock();
      const node = makeNode(link, clock);
      node.acquire(KEY, one);
      const req = link.requests[0]![0]!;
      node.applyGrant({ ...grantFor(req, 3, 1), floated: 1 });
      node.applyGrant({ ...grantFor(req, 2, 2), floated: 2 }); // a lower total at a higher seq: issued stays 3
      node.applyGrant({ ...grantFor(req, 5, 3), windowId: req.windowId + 1, floated: 4 });
      const reports = (): Array<[number, number, number | undefined]> =>
        node
          .endRound()
          .flatMap((x) => x.reports)
          .map((r) => [r.windowId - req.windowId, r.issued, r.floated]);
      expect(reports()).to.deep.equal([[0, 3, 2]]);
      for (let i = 0; i < 3; i++) expect(node.acquire(KEY, one)).to.deep.equal({ admitted: true });
      reports();
      reports(); // the ask answered with nothing at first sight blocked two rounds
      expect((node.acquire(KEY, one) as Denied).admitted).to.equal(false);
      expect(link.requests.at(-1)!.map((q) => [q.issued, q.floated])).to.deep.equal([[3, 2]]);
      clock.advance(node.buckets.peek(KEY)!.buckets[0]!.windowEnd - clock.now());
      expect(node.acquire(KEY, one)).to.deep.equal({ admitted: true });
      expect(reports()).to.deep.include([1, 5, 4]);
    });

    it('a grant for a past window is ignored', () => {
      const { node, req, bucket } = setup();
      expect(node.applyGrant({ ...grantFor(req, 50, 1), windowId: req.windowId - 1 })).to.equal(false);
      expect(bucket.credit).to.equal(0);
    });
  });

  it('ends a round with one batch per touched shard, cumulative spend and a seq that grows with every report (B2)', () => {
    const link = grantingLink({ 1000: 1000, 60_000: 1000 });
    link.answer = (
      (orig) => (reqs: Parameters<typeof orig>[0]) =>
        orig(reqs.map((q) => ({ ...q, need: 10 })))
    )(link.answer);
    const node = makeNode(link);
    for (let i = 0; i < 8; i++) node.acquire(KEY, free);
    node.acquire('v1:OTHERKEYOTHERKEYOTHERK', free);
    const batches = node.endRound();
    const reports = batches.flatMap((b) => b.reports);
    expect(reports).to.have.length(4);
    expect(new Set(batches.map((b) => b.shard)).size).to.equal(batches.length);
    const mine = reports.filter((r) => r.keyId === KEY);
    // The first round's batches carry round 1, the round its heartbeat states (0 is a partial batch).
    expect(batches.every((b) => b.round === 1)).to.equal(true);
    expect(link.beats.map((b) => b.selfGranted.size)).to.deep.equal([0]);
    expect(mine.map((r) => [r.windowMs, r.spent, r.selfGrant])).to.have.deep.members([
      [1000, 8, false],
      [60_000, 8, false],
    ]);
    // 8 requests in one round, smoothed over 16 rounds: half a request per round, × 2 rounds ahead.
    expect(mine.every((r) => r.demand === 1)).to.equal(true);
    expect(link.published).to.have.length(batches.length);
    // Without traffic a key is reported the first quiet round (its demand fading by 1/16 a round),
    // the round its fading demand no longer calls for what it holds (it gives that back) and the round
    // after, then once every 8 rounds while its demand fades, then not at all.
    const seqs = mine.map((r) => r.seq);
    const quiet = () => {
      const out = node.endRound().flatMap((b) => b.reports.filter((r) => r.keyId === KEY).map((r) => ({ ...r, round: b.round })));
      seqs.push(...out.map((r) => r.seq));
      return out;
    };
    expect(quiet().map((r) => r.demand)).to.deep.equal([0.9375, 0.9375]); // round 1: 120/256 × 2
    const between = Array.from({ length: 6 }, quiet).flat(); // rounds 2–7
    // Round 4 (demand 0.77 × h < 1): it gives back the 2 it held; round 5 is its first quiet round since.
    // (Batches count rounds from 1, as heartbeats do: round 4 is the fifth, batch round 5.)
    expect(between.map((r) => [r.round - 1, r.windowMs, r.held, r.released])).to.have.deep.members([
      [4, 1000, 0, 2],
      [4, 60_000, 0, 2],
      [5, 1000, 0, 2],
      [5, 60_000, 0, 2],
    ]);
    expect(quiet()).to.have.length(2); // round 8
    // Every report a higher seq than the one before: the owner keeps the newest, whatever the round.
    expect(seqs.every((x, i) => i === 0 || x > seqs[i - 1]!)).to.equal(true);
    for (let i = 0; i < 100; i++) node.endRound();
    expect(node.endRound()).to.have.length(0);
  });

  /** A node that asked once for KEY (one 10-per-second window) and got nothing yet. */
  function seenOnce() {
    const clock = new FakeClock();
    const link = new RecordingLink(() => []);
    const node = makeNode(link, clock);
    node.acquire(KEY, one);
    const ask = link.requests[0]![0]!;
    const { type: _, issued: __, ...ref } = grantFor(ask, 0, 1);
    const recall = (keep: number): boolean => node.onMessage({ ...ref, type: 'adjust', keep, exhausted: false });
    return { clock, link, node, ask, recall, bucket: node.buckets.peek(KEY)!.buckets[0]! };
  }

  it('gives a recall back at once: the report goes out when the recall lands, not at the round end', () => {
    const { link, node, ask, recall } = seenOnce();
    node.applyGrant(grantFor(ask, 6, 1));
    expect(recall(2)).to.equal(true);
    const sent = link.published.flatMap((b) => b.reports);
    expect(sent.map((r) => [r.windowId, r.issued, r.released, r.held])).to.deep.equal([[ask.windowId, 6, 4, 2]]);
    // The round's report follows with a higher seq, so the owner takes it over the early one.
    const round = node.endRound().flatMap((b) => b.reports);
    expect(round.map((r) => r.released)).to.deep.equal([4]);
    expect(round[0]!.seq).to.be.above(sent[0]!.seq);
  });

  it('reports a recall at round end only, when the owner is in this process or the window has ended', () => {
    const { clock, link, node, ask, recall, bucket } = seenOnce();
    node.applyGrant(grantFor(ask, 6, 1));
    // An owner in this process would fold the report while still sending what it decided before.
    const local = Object.assign(link, { local: (): boolean => true });
    recall(4);
    expect(local.published).to.have.length(0);
    // A recall landing after its window ended (clock skew, an ask in the last moment): nothing to say.
    local.local = () => false;
    clock.advance(bucket.windowEnd - clock.now());
    recall(2);
    expect(local.published).to.have.length(0);
  });

  describe('credit granted ahead for a window that began without a request here', () => {
    /** The reports of the next window at the first round after it began, 5 granted ahead for it. */
    function rolled(t: ReturnType<typeof seenOnce>): Array<[number, number, number]> {
      t.clock.advance(t.bucket.windowEnd - t.clock.now() + 1);
      const next = t.node
        .endRound()
        .flatMap((x) => x.reports)
        .filter((r) => r.windowId === t.ask.windowId + 1);
      return next.map((r) => [r.issued, r.released, r.held]);
    }

    it('is rolled in and given back, not stranded until the window ends', () => {
      const t = seenOnce();
      t.node.applyGrant({ ...grantFor(t.ask, 5, 1), windowId: t.ask.windowId + 1 });
      t.node.endRound(); // two rounds on from the denial: give-backs are not held for a retry
      t.node.endRound();
      // One request's trace calls for no lease: the 5 are reported and given back.
      expect(rolled(t)).to.deep.equal([[5, 5, 0]]);
    });

    it('is rolled in even when it lands after the key dropped off the round list', () => {
      const t = seenOnce();
      for (let i = 0; i < 60; i++) t.node.endRound(); // one request's trace fades; the key leaves the list
      expect(t.node.endRound()).to.have.length(0);
      t.node.applyGrant({ ...grantFor(t.ask, 5, 1), windowId: t.ask.windowId + 1 });
      expect(rolled(t)).to.deep.equal([[5, 5, 0]]);
    });
  });

  it('counts a request once in its rate, even when its window ended before the round did', () => {
    const clock = new FakeClock();
    const node = makeNode(grantingLink({ 1000: 10, 60_000: 100 }), clock);
    const burst = phaseOffset(KEY, 1000);
    clock.advance(windowEndMs(windowIdAt(clock.now(), 1000, burst), 1000, burst) - clock.now() - 1);
    node.acquire(KEY, free); // in the 1 s window's last millisecond; the 60 s window keeps the key listed
    clock.advance(25);
    node.endRound();
    const b = node.buckets.peek(KEY)!.buckets[0]!;
    const [rate, seen] = [b.rate, b.seen];
    expect(rate).to.be.above(0);
    for (let i = 0; i < 10; i++) node.endRound();
    expect(node.buckets.peek(KEY)!.listed, 'listed for its 60 s window').to.equal(true);
    // The ended window's bucket decays like any other with no request, its count of requests seen stays.
    expect(b.rate).to.be.below(rate);
    expect(b.seen).to.equal(seen);
  });

  describe('a key seen here less than once in 16 rounds (every 600 ms)', () => {
    /** One 60 s window of `limit`. */
    const perMinute = (limit: number) =>
      compilePolicy({ version: 1, plans: { p: { windows: [{ name: 'sustained', windowMs: 60_000, limit }] } }, defaultPlan: 'p', anonymousPlan: 'p' }).limitsFor(KEY, 't');
    const minute = perMinute(100);
    const OTHER = 'v1:OTHERKEYOTHERKEYOTHERK';
    /**
     * `misses` asks for another key that miss their deadline, then one request of this key 590 ms
     * before its window ends and quiet rounds to the window's last: its reports for this window and
     * the next.
     */
    async function requestThenQuiet(misses: number, limits = minute): Promise<{ current: number[]; next: number[] }> {
      const clock = new FakeClock(1_800_000_000_000);
      const end = windowEndMs(windowIdAt(clock.now(), 60_000, off), 60_000, off);
      clock.set(end - 590 - 25 * misses);
      let asks = 0;
      const link = new RecordingLink((reqs) => Promise.resolve(asks++ < misses ? undefined : reqs.map((r) => grantFor(r, 1, 1))));
      const node = makeNode(link, clock);
      for (let i = 0; i < misses; i++) {
        await node.acquire(OTHER, limits);
        node.endRound();
        clock.advance(25);
      }
      expect(await node.acquire(KEY, limits)).to.deep.equal({ admitted: true });
      const current: number[] = [];
      const next: number[] = [];
      // Its last two rounds fall in the window's last 50 ms, when a node asks ahead.
      for (let i = 0; i < 24; i++) {
        for (const r of node.endRound().flatMap((b) => b.reports)) if (r.keyId === KEY) (r.windowId === windowIdAt(clock.now(), 60_000, off) ? current : next).push(r.demand);
        clock.advance(25);
      }
      return { current, next };
    }

    it('while asks miss, it is still reported with a hedge, and asks ahead for the next window', async () => {
      const { current, next } = await requestThenQuiet(2); // two misses close together: unreliable
      // Its trace outlives the gap: the owner hears a demand of a request's worth until the window
      // ends, and the next window's owner hears it in time to grant ahead of the rollover.
      expect(current.length).to.be.greaterThan(2);
      expect(current.every((d) => d >= 1)).to.equal(true);
      expect(next).to.have.length(2);
      expect(next.every((d) => d >= 1)).to.equal(true);
    });

    for (const misses of [0, 1]) {
      it(`after ${misses} missed ask(s), its demand stays below a request (no lease) but is still heard ahead`, async () => {
        const { current, next } = await requestThenQuiet(misses);
        expect(current.length).to.be.greaterThan(0);
        expect(next).to.have.length(2);
        expect([...current, ...next].every((d) => d > 0 && d < 1 / 1.25)).to.equal(true);
      });
    }

    // The recording link's fleet is 4 nodes: plentiful from PLENTIFUL × 4 a window.
    for (const [limit, demand] of [
      [PLENTIFUL * 4 * STANDING, STANDING],
      [PLENTIFUL * 4 * 100, STANDING],
      [PLENTIFUL * 4 * 2, 2],
      [PLENTIFUL * 4, 1],
    ] as const) {
      it(`under a plan of ${limit} (plentiful for 4 nodes), it asks for ${demand} request(s) in its window and ahead: a standing lease`, async () => {
        const { current, next } = await requestThenQuiet(0, perMinute(limit));
        // Reported once; quiet rounds would say the same demand again, so not then. Asked ahead in each
        // of the window's last two rounds (nothing is granted ahead here), and in the next shard's slot
        // before them if it falls there (`SLOT_ROUNDS`).
        expect(current).to.have.length(1);
        expect(next.length).to.be.within(2, 3);
        expect([...current, ...next].every((d) => d === demand)).to.equal(true);
      });
    }

    it('under a plan just short of plentiful, its demand stays below a request', async () => {
      const { current, next } = await requestThenQuiet(0, perMinute(PLENTIFUL * 4 - 1));
      expect([...current, ...next].every((d) => d > 0 && d < 1 / 1.25)).to.equal(true);
    });

    it('keeps a standing lease through quiet rounds, and gives all but one credit back once its demand has faded', async () => {
      const clock = new FakeClock(1_800_000_000_000);
      const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 1, 1)));
      const node = makeNode(link, clock);
      const limits = perMinute(PLENTIFUL * 4 * STANDING);
      await node.acquire(KEY, limits); // granted 1, spent it
      node.applyGrant({ ...grantFor(link.requests[0]![0]!, 1 + 2 * STANDING, 2) }); // a top-up to its lease
      const b = node.buckets.peek(KEY)!.buckets[0]!;
      // 1.5 s on (a key seen every 1.5 s here): a request's trace has not faded below 1/4096 a round.
      for (let i = 0; i < 60; i++) {
        node.endRound();
        clock.advance(25);
      }
      expect([b.credit, b.released]).to.deep.equal([2 * STANDING, 0]);
      for (let i = 0; i < 60; i++) {
        node.endRound();
        clock.advance(25);
      }
      expect([b.credit, b.released]).to.deep.equal([1, 2 * STANDING - 1]);
    });

    // The recording link's fleet is 4: PLENTIFUL × 4 a window is the least plentiful plan.
    for (const [limit, kept] of [
      [PLENTIFUL * 4 * STANDING, 1],
      [PLENTIFUL * 4, 1],
      [PLENTIFUL * 4 - 1, 0],
    ] as const) {
      it(`under a plan of ${limit}, keeps ${kept} credit once its demand has faded: back in the window, it ${kept > 0 ? 'asks nobody' : 'asks again'}`, () => {
        const clock = new FakeClock(1_800_000_000_000);
        const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 1 + STANDING, 1)));
        const node = makeNode(link, clock);
        const limits = perMinute(limit);
        clock.set(windowEndMs(windowIdAt(clock.now(), 60_000, off), 60_000, off) - 30_000);
        expect(node.acquire(KEY, limits)).to.deep.equal({ admitted: true }); // granted 1 + STANDING
        node.endRound();
        expect(node.acquire(KEY, limits)).to.deep.equal({ admitted: true });
        const b = node.buckets.peek(KEY)!.buckets[0]!;
        for (let i = 0; i < 200; i++) {
          node.endRound();
          clock.advance(25);
        }
        // Faded (5 s on): its rate forgotten, the rest given back, off the report list.
        expect([b.rate, b.credit, b.released]).to.deep.equal([0, kept, STANDING - 1 - kept]);
        expect(node.endRound().flatMap((x) => x.reports)).to.deep.equal([]);
        const back = node.acquire(KEY, limits);
        expect(link.requests).to.have.length(kept > 0 ? 1 : 2);
        if (kept > 0) expect(back).to.deep.equal({ admitted: true });
      });
    }

    it('reports what a standing lease of one request put off, and keeps one credit, once its rate fades', () => {
      const clock = new FakeClock(1_800_000_000_000);
      const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 4, 1)));
      const node = makeNode(link, clock);
      const limits = perMinute(PLENTIFUL * 4); // a standing demand of 1
      clock.set(windowEndMs(windowIdAt(clock.now(), 60_000, off), 60_000, off) - 30_000);
      const seen: Array<[number, number]> = [];
      const round = () => {
        for (const r of node.endRound().flatMap((x) => x.reports)) if (r.keyId === KEY) seen.push([r.spent, r.released]);
      };
      node.acquire(KEY, limits);
      round(); // its first report: news (in its shard's slot, `SLOT_ROUNDS`: maybe after the next request)
      clock.advance(100);
      node.acquire(KEY, limits); // holds 2, more than a recall would leave it: put off
      for (let i = 0; i < 200; i++) {
        clock.advance(25);
        round();
      }
      expect(seen).to.have.length(2);
      expect(seen[0]![1]).to.equal(0);
      expect(seen[1]).to.deep.equal([2, 1]);
    });

    it('reports a spend whose ask was answered after the round that counted its request', async () => {
      const clock = new FakeClock(1_800_000_000_000);
      let release: (() => void) | undefined;
      const link = new RecordingLink((reqs) => new Promise((resolve) => (release = () => resolve(reqs.map((r) => grantFor(r, 1 + STANDING, 1))))));
      const node = makeNode(link, clock);
      const limits = perMinute(PLENTIFUL * 4 * STANDING);
      const pending = node.acquire(KEY, limits);
      node.endRound(); // the request's round: reported, nothing spent yet
      release!();
      expect(await pending).to.deep.equal({ admitted: true });
      const spent = node
        .endRound()
        .flatMap((b) => b.reports)
        .filter((r) => r.keyId === KEY)
        .map((r) => r.spent);
      expect(spent).to.deep.equal([1]);
    });

    /**
     * A node whose owner answers each ask with a lease of `issued`, a plentiful plan (`plan` policy
     * options besides its one window), and the reports of KEY its next round sends.
     */
    function standing(issued: number, plan: Record<string, unknown> = {}) {
      const clock = new FakeClock(1_800_000_000_000);
      const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, issued, 1)));
      const node = makeNode(link, clock);
      const windows = [{ name: 'sustained', windowMs: 60_000, limit: PLENTIFUL * 4 * STANDING }];
      const limits = compilePolicy({ version: 1, plans: { p: { windows, ...plan } }, defaultPlan: 'p', anonymousPlan: 'p' }).limitsFor(KEY, 't');
      const reports = (windowId?: number) =>
        node
          .endRound()
          .flatMap((b) => b.reports)
          .filter((r) => r.keyId === KEY && (windowId === undefined || r.windowId === windowId));
      const end = windowEndMs(windowIdAt(clock.now(), 60_000, off), 60_000, off);
      /** A request every four rounds from `from` ms before the window's end, `n` of them: the spent each round's report said. */
      const everyFourRounds = (from: number, n: number): number[][] => {
        clock.set(end - from);
        const spent: number[][] = [];
        for (let i = 0; i < n; i++) {
          expect(node.acquire(KEY, limits)).to.deep.equal({ admitted: true });
          for (let j = 0; j < 4; j++) {
            spent.push(reports(windowIdAt(end - 1, 60_000, off)).map((r) => r.spent));
            clock.advance(25);
          }
        }
        return spent;
      };
      return { clock, link, node, limits, reports, end, everyFourRounds };
    }

    it('puts off the reports of what a standing lease spends while it holds more than its owner would top up or recall', () => {
      const { everyFourRounds } = standing(3 * STANDING);
      // Its first report is news (its demand). Then it holds 7 to 4 (a recall keeps 3 here): nothing
      // to tell; from 3 it has less than demand × h, where its owner tops it up.
      expect(everyFourRounds(30_000, 7).filter((x) => x.length > 0)).to.deep.equal([[1], [6], [7]]);
    });

    it('reports every spend while its plan allocates a fixed share per node', () => {
      const { everyFourRounds } = standing(3 * STANDING, { allocation: 'fixed-share' });
      expect(everyFourRounds(30_000, 4).filter((x) => x.length > 0)).to.deep.equal([[1], [2], [3], [4]]);
    });

    it('reports a spend at once when its advertised demand moved (the fleet grew)', () => {
      const { link, everyFourRounds } = standing(3 * STANDING);
      const before = everyFourRounds(30_000, 2).filter((x) => x.length > 0);
      link.fleet = 6; // a standing demand of 2 now
      expect([...before, ...everyFourRounds(29_000, 1).filter((x) => x.length > 0)]).to.deep.equal([[1], [3]]);
    });

    it('reports what a standing lease put off before its rate fades, and gives all but one credit back', () => {
      const { clock, node, limits, reports } = standing(3 * STANDING);
      const seen: Array<[number, number]> = [];
      const round = () => {
        for (const r of reports()) seen.push([r.spent, r.released]);
      };
      node.acquire(KEY, limits);
      round(); // news (in its shard's slot, `SLOT_ROUNDS`: maybe after the next request)
      clock.advance(100);
      node.acquire(KEY, limits); // put off
      for (let i = 0; i < 200; i++) {
        clock.advance(25);
        round();
      }
      expect(seen).to.have.length(2);
      expect(seen[0]![1]).to.equal(0);
      expect(seen[1]).to.deep.equal([2, 3 * STANDING - 3]);
    });

    it("reports a standing lease's spends in its window's last rounds: what it put off, and each at once", () => {
      const { clock, node, limits, reports, end, everyFourRounds } = standing(3 * STANDING);
      const spent = everyFourRounds(1000, 2).filter((x) => x.length > 0); // the second put off
      const told: Array<[number, number[]]> = []; // [ms before the end, spent]
      while (clock.now() < end) {
        if (end - clock.now() === 50) node.acquire(KEY, limits);
        const r = reports(windowIdAt(end - 1, 60_000, off));
        if (r.length > 0) told.push([end - clock.now(), r.map((x) => x.spent)]);
        clock.advance(25);
      }
      expect([spent, told]).to.deep.equal([
        [[1]],
        [
          [75, [2]],
          [50, [3]],
        ],
      ]);
    });

    for (const how of ['a stall skips its last rounds', 'a request rolls it before a round does'] as const) {
      it(`reports what a standing lease put off in a window that ended without its last rounds: ${how}`, () => {
        const { clock, node, limits, end, everyFourRounds } = standing(3 * STANDING);
        everyFourRounds(1000, 2);
        clock.set(end + 10);
        if (how === 'a request rolls it before a round does') node.acquire(KEY, limits);
        const last = node
          .endRound()
          .flatMap((b) => b.reports)
          .filter((x) => x.keyId === KEY && x.windowId === windowIdAt(end - 1, 60_000, off));
        expect(last.map((r) => r.spent)).to.deep.equal([2]);
      });
    }

    it("keeps a standing lease whole to its window's end rather than shed it as the window runs out", () => {
      const { clock, node, limits, reports, end } = standing(3 * STANDING);
      clock.set(end - 1000);
      node.acquire(KEY, limits); // holds 8; the lease-size rule allows 3 over its last 10 rounds
      const released: number[] = [];
      while (clock.now() < end - 25) {
        clock.advance(25);
        for (const r of reports()) released.push(r.released);
      }
      expect(node.buckets.peek(KEY)!.buckets[0]!.credit).to.equal(3 * STANDING - 1);
      expect(released.every((x) => x === 0)).to.equal(true);
    });

    it("gives back what a standing lease holds beyond its size, even at its window's start", () => {
      const { clock, node, limits, reports, end } = standing(5 * STANDING); // a lease of 15, cooled to standing
      clock.set(end - 30_000);
      node.acquire(KEY, limits);
      // Its first report may wait for its shard's slot (`SLOT_ROUNDS`); the give-back goes in the next
      // round's batch with it, or after it.
      const told = [reports(), (clock.advance(25), reports())].flat();
      expect(told.at(-1)!).to.include({ held: 3 * STANDING, released: 5 * STANDING - 1 - 3 * STANDING });
      expect(told.slice(0, -1).map((r) => [r.held, r.released])).to.deep.equal(told.length === 2 ? [[5 * STANDING - 1, 0]] : []);
    });

    it("reports a standing lease granted ahead to the next window's owner once rolled in", () => {
      const { clock, link, node, limits } = standing(1 + STANDING);
      node.acquire(KEY, limits);
      node.endRound(); // the request's round
      const b = node.buckets.peek(KEY)!.buckets[0]!;
      node.applyGrant({ ...grantFor(link.requests[0]![0]!, 2 * STANDING, 1), windowId: b.windowId + 1 }); // granted ahead
      clock.set(b.windowEnd);
      const next: number[] = [];
      for (let i = 0; i < 9; i++) {
        for (const r of node.endRound().flatMap((x) => x.reports)) if (r.keyId === KEY && r.windowId === b.windowId) next.push(r.held);
        clock.advance(25);
      }
      expect(b.windowId).to.equal(link.requests[0]![0]!.windowId + 1);
      expect(next.length).to.be.greaterThan(0);
      expect(next[0]).to.equal(2 * STANDING);
    });

    it("does not fade while it holds credit granted ahead: rolled in at the rollover, given back to that window's owner but one", () => {
      const clock = new FakeClock(1_800_000_000_000);
      const link = new RecordingLink((reqs) => reqs.map((r) => grantFor(r, 1, 1)));
      const node = makeNode(link, clock);
      const limits = perMinute(PLENTIFUL * 4 * STANDING);
      node.acquire(KEY, limits);
      const b = node.buckets.peek(KEY)!.buckets[0]!;
      const first = b.windowId;
      clock.set(b.windowEnd - 3000); // its trace fades (about 86 rounds) before the window ends (120)
      node.endRound();
      node.applyGrant({ ...grantFor(link.requests[0]![0]!, 2 * STANDING, 1), windowId: first + 1 });
      const released: number[] = [];
      for (let i = 0; i < 140; i++) {
        clock.advance(25);
        for (const r of node.endRound().flatMap((x) => x.reports)) if (r.keyId === KEY && r.windowId === first + 1) released.push(r.released);
      }
      expect(b.windowId).to.equal(first + 1);
      expect(released.at(-1)).to.equal(2 * STANDING - 1);
    });

    it('is forgotten once its demand has faded: a later unreliable spell does not hedge it', async () => {
      const clock = new FakeClock(1_800_000_000_000);
      let asks = 0;
      const link = new RecordingLink((reqs) => Promise.resolve(asks++ === 0 ? reqs.map((r) => grantFor(r, 1, 1)) : undefined));
      const node = makeNode(link, clock);
      await node.acquire(KEY, minute); // granted
      for (let i = 0; i < 100; i++) node.endRound(); // fades and drops out of the reports
      for (let i = 0; i < 2; i++) {
        await node.acquire(OTHER, minute); // two misses: unreliable
        node.endRound();
      }
      await node.acquire(KEY, minute);
      expect(link.requests.at(-1)!.map((r) => r.demand)).to.deep.equal([0]);
    });
  });

  it('reports again, every round, buckets whose batch the link could not send', () => {
    const link = grantingLink({ 1000: 1000, 60_000: 1000 });
    let up = false;
    link.publish = (batch) => {
      link.published.push(batch);
      return up;
    };
    const node = makeNode(link);
    node.acquire(KEY, free);
    const carries = (batches: { reports: readonly { keyId: string }[] }[]): boolean => batches.some((b) => b.reports.some((r) => r.keyId === KEY));
    for (let round = 0; round < 4; round++) expect(carries(node.endRound()), `round ${round}`).to.equal(true);
    up = true;
    node.endRound(); // round 4: sent at last
    node.endRound(); // round 5: the usual report of a bucket's first quiet round
    expect(carries(node.endRound())).to.equal(false);
  });

  it('after an owner change, reports every bucket of those shards once, even quiet ones', () => {
    const link = grantingLink({ 1000: 1000, 60_000: 1000 });
    const node = makeNode(link);
    node.acquire(KEY, free);
    for (let i = 0; i < 60; i++) node.endRound(); // long quiet (one request fades in about 43 rounds): dropped
    expect(node.endRound()).to.have.length(0);
    const shards = new Set(node.buckets.peek(KEY)!.buckets.map((b) => shardOf(KEY, b.windowId, 8)));
    node.resync(shards);
    const again = node
      .endRound()
      .flatMap((b) => b.reports)
      .filter((r) => r.keyId === KEY);
    expect(again.map((r) => r.windowMs).sort((x, y) => x - y)).to.deep.equal([1000, 60_000]);
    expect(node.endRound()).to.have.length(0);
  });

  it("after an owner change, reports credit granted ahead for a next window on those shards, before that window's last rounds", () => {
    const link = grantingLink({ 1000: 1000, 60_000: 1000 });
    const node = makeNode(link);
    node.acquire(KEY, free);
    node.endRound();
    const b = node.buckets.peek(KEY)!.buckets[1]!; // the 60 s window: its last rounds are far off
    node.applyGrant({ ...grantFor(link.requests[0]![1]!, 5, 1), windowId: b.windowId + 1 });
    const next = shardOf(KEY, b.windowId + 1, 8);
    node.resync(new Set([next]));
    const ahead = node
      .endRound()
      .filter((x) => x.shard === next)
      .flatMap((x) => x.reports)
      .filter((r) => r.keyId === KEY && r.windowId === b.windowId + 1);
    expect(ahead.map((r) => [r.windowMs, r.issued, r.held])).to.deep.equal([[60_000, 5, 5]]);
  });

  describe('asking ahead', () => {
    /** A node whose 60 s window of KEY has three rounds left, after one request, and its asks ahead per round. */
    function nearTheEnd(): { node: LeaseNode; link: RecordingLink; aheadIn: () => number } {
      const clock = new FakeClock(1_800_000_000_000);
      const end = windowEndMs(windowIdAt(clock.now(), 60_000, off), 60_000, off);
      clock.set(end - 70);
      const link = grantingLink({ 1000: 1000, 60_000: 1000 });
      const node = makeNode(link, clock);
      node.acquire(KEY, free);
      const id = node.buckets.peek(KEY)!.buckets[1]!.windowId;
      const aheadIn = (): number => {
        const n = node
          .endRound()
          .flatMap((x) => x.reports)
          .filter((r) => r.keyId === KEY && r.windowMs === 60_000 && r.windowId === id + 1).length;
        clock.advance(25);
        return n;
      };
      return { node, link, aheadIn };
    }

    it('asks in each of the last two rounds while no credit is granted ahead', () => {
      const { aheadIn } = nearTheEnd();
      expect([aheadIn(), aheadIn(), aheadIn()]).to.deep.equal([0, 1, 1]);
    });

    it("asks again once credit is granted ahead: a deposed owner's late grant is stated to its successor", () => {
      const { node, link, aheadIn } = nearTheEnd();
      expect([aheadIn(), aheadIn()]).to.deep.equal([0, 1]);
      const b = node.buckets.peek(KEY)!.buckets[1]!;
      node.applyGrant({ ...grantFor(link.requests[0]![1]!, 4, 1), windowId: b.windowId + 1 });
      expect(aheadIn()).to.equal(1);
    });
  });
});

import { expect } from 'chai';
import { decoders, encoders } from '../../bus/bodies.js';
import { EnvelopeCodec } from '../../bus/codec.js';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { LeaseNode } from '../../lib/lease-node.js';
import { compilePolicy } from '../../lib/policy.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import { shardOf, type CreditRequest, type Grant } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';
import { RecordingLink } from '../support/links.js';
import { FixedFleet, nodeConfig, ownerConfig } from '../support/protocol.js';

/*
 * The owner's ended mark. An owner drops a window's ledger (its record of what was issued) two rounds
 * after the window ends by its clock. A node spends the credit a late ask brings for the request that
 * asked, even once the window has ended. So an owner must never issue for a window whose ledger it
 * (or an earlier owner of the shard) dropped, whatever its wall clock does afterwards: a ledger made
 * again would start empty and hand out the whole allowance once more.
 */
const KEY = 'v1:ENDEDMARKENDEDMARKEND';
const W = 1000;
const R = 25;
const LIMIT = 10;
const offset = phaseOffset(KEY, W);
const limits = compilePolicy({ version: 1, defaultPlan: 'p', anonymousPlan: 'p', plans: { p: { windows: [{ name: 'w', limit: LIMIT, windowMs: W }] } } }).limitsFor(KEY, 't');
const W0 = windowIdAt(1_800_000_000_000, W, offset);
const END = windowEndMs(W0, W, offset);
/** The shard of KEY's window W0 (the test owners hash keys over 8 shards). */
const S0 = shardOf(KEY, W0, 8);

function newOwner(clock: FakeClock): FoldOwner {
  return new FoldOwner(ownerConfig(clock, new FixedFleet(2)));
}

function ask(node: string, windowId = W0, need = 1, keyId = KEY, windowMs = W, lease = 1): CreditRequest {
  return { keyId, windowId, windowMs, limit: LIMIT, nodeId: node, nodeEpoch: `${node}-e1`, lease, spent: 0, selfIssued: 0, released: 0, need, demand: 0, fastPath: true };
}

/** An owner that issued the whole allowance of window W0 to node a, then swept it two rounds after its end. */
function sweptOwner(clock: FakeClock): FoldOwner {
  const o = newOwner(clock);
  expect(o.onCreditRequest(ask('a', W0, LIMIT))?.issued).to.equal(LIMIT);
  clock.set(END + 2 * R);
  o.sweep(clock.now());
  expect(o.size, 'swept').to.equal(0);
  return o;
}

/**
 * Node a (its clock right) spends W0's whole allowance from `answer`; node b, a round behind true
 * time, asks 1 ms before W0 ends by its clock and its answer is held up. `meanwhile` runs at true
 * time END + R (b's clock at END − 1), before b's loop picks the answer up at END by its clock.
 * What b admitted in W0, with a's.
 */
async function lateAnswer(answer: (reqs: readonly CreditRequest[]) => Grant[], meanwhile: () => void): Promise<number> {
  const clockA = new FakeClock(END - 500);
  const a = new LeaseNode(nodeConfig({ nodeId: 'a', nodeEpoch: 'a-e1' }), clockA, new RecordingLink(answer));
  let admitted = 0;
  for (let i = 0; i < 3 * LIMIT; i++) {
    const r = a.acquire(KEY, limits);
    if (r instanceof Promise) expect.fail('answered at once');
    if (r.admitted) admitted++;
    clockA.advance(1);
  }
  expect(admitted, 'node a spent the allowance').to.equal(LIMIT);
  const clockB = new FakeClock(END - 1);
  let release: (() => void) | undefined;
  const linkB = new RecordingLink((reqs) => new Promise((resolve) => (release = () => resolve(answer(reqs)))));
  const b = new LeaseNode(nodeConfig({ nodeId: 'b', nodeEpoch: 'b-e1' }), clockB, linkB);
  const pending = b.acquire(KEY, limits);
  expect(linkB.requests.flat().map((q) => q.windowId)).to.deep.equal([W0]);
  meanwhile();
  clockB.set(END); // b's loop stalled: it picks the answer up once W0 ended by its clock
  release!();
  if ((await pending).admitted) admitted++;
  return admitted;
}

describe('owner: the ended mark', () => {
  it('a node spends a late grant for its ended window, and an owner whose clock stepped back after the sweep issues nothing for it: no more than the allowance', async () => {
    // Wall clocks within a round of true time (two rounds of each other). Node a spends the whole
    // allowance of W0. Node b asks 1 ms before W0 ends by its clock; the ask is held up. Meanwhile
    // the owner, a round ahead, sweeps W0 two rounds after its end by its clock, and then steps back
    // to a round behind: W0 ended less than two rounds ago again. The late ask arrives.
    const ownerClock = new FakeClock(END - 500);
    const owner = newOwner(ownerClock);
    const answer = (reqs: readonly CreditRequest[]): Grant[] => reqs.flatMap((r) => owner.onCreditRequest(r) ?? []);
    const admitted = await lateAnswer(answer, () => {
      ownerClock.set(END + 2 * R); // true time END + R
      owner.sweep(ownerClock.now());
      expect(owner.committed(KEY, W, W0), 'the ledger was dropped').to.equal(0);
      ownerClock.step(-2 * R); // a round behind true time
    });
    expect(admitted, 'admitted in W0: nothing was issued for the swept window').to.equal(LIMIT);
    expect(owner.committed(KEY, W, W0)).to.equal(0);
  });

  it('never moves back: after a sweep, a late ask for the window gets nothing whatever the clock does, stepped back, forward and back again', () => {
    const clock = new FakeClock(END - 500);
    const o = sweptOwner(clock);
    expect(o.marks.of(S0, W)).to.equal(END);
    for (const step of [-2 * R, -10 * R, 5_000, -5_000 - 20 * R, 3 * R]) {
      clock.step(step);
      o.sweep(clock.now());
      expect(o.onCreditRequest(ask('b')), `after a step of ${step} ms`).to.equal(undefined);
      expect(o.marks.of(S0, W), 'the mark never moves back').to.equal(END);
    }
    // Reports for the window make a ledger again, but it issues nothing: no top-up either.
    const out = o.onReports({
      shard: 0,
      nodeId: 'b',
      nodeEpoch: 'b-e1',
      round: 1,
      reports: [{ keyId: KEY, windowId: W0, windowMs: W, limit: LIMIT, lease: 1, seq: 1, spent: 0, issued: 0, selfIssued: 0, released: 0, demand: 50, held: 0, selfGrant: false }],
    });
    expect(out.filter((m) => m.type === 'grant')).to.deep.equal([]);
    expect(o.committed(KEY, W, W0)).to.equal(0);
  });

  it('covers every key of that shard and window length ending no later, whatever its phase offset, and no window of another shard or length', () => {
    const clock = new FakeClock(END - 500);
    const o = sweptOwner(clock);
    clock.step(-3 * R); // W0 looks live again by the clock: only the mark ends it
    // Another key of the shard whose window of this length ends before END (an earlier phase) is
    // ended too; one that ends after it, one of another shard, or a window of another length, is not.
    let earlier: string | undefined;
    let later: string | undefined;
    let elsewhere: string | undefined;
    for (let i = 0; (earlier === undefined || later === undefined || elsewhere === undefined) && i < 10_000; i++) {
      const k = `v1:OTHERKEY${String(i).padStart(14, '0')}`;
      const wid = windowIdAt(clock.now(), W, phaseOffset(k, W));
      const end = windowEndMs(wid, W, phaseOffset(k, W));
      const before = end <= END && end > clock.now() - 2 * R;
      if (before && shardOf(k, wid, 8) === S0) earlier ??= k;
      if (before && shardOf(k, wid, 8) !== S0) elsewhere ??= k;
      if (end > END) later ??= k;
    }
    const idOf = (k: string): number => windowIdAt(clock.now(), W, phaseOffset(k, W));
    expect(o.onCreditRequest(ask('b', idOf(earlier!), 1, earlier!)), 'ends before the mark').to.equal(undefined);
    expect(o.onCreditRequest(ask('b', idOf(later!), 1, later!))?.issued, 'ends after the mark').to.equal(1);
    expect(o.onCreditRequest(ask('b', idOf(elsewhere!), 1, elsewhere!))?.issued, 'another shard').to.equal(1);
    const id60 = windowIdAt(clock.now(), 60_000, phaseOffset(KEY, 60_000));
    expect(o.onCreditRequest(ask('b', id60, 1, KEY, 60_000))?.issued, 'another window length').to.equal(1);
  });

  it("a clock stepped far forward on one owner costs only the shards whose ledgers it dropped: their checkpoints carry the marks, no other shard's", () => {
    // The owner holds ledgers of one shard only; its clock jumps 5 s ahead and it sweeps them. A
    // successor taking its other shards (its clock right) answers every first ask for a live key.
    const clock = new FakeClock(END - 500);
    const o = newOwner(clock);
    expect(o.onCreditRequest(ask('a'))?.issued).to.equal(1);
    clock.step(5_000);
    o.sweep(clock.now());
    expect(o.marks.of(S0, W), 'the swept shard is marked').to.equal(END);
    const successor = newOwner(new FakeClock(END - 500));
    for (let s = 0; s < 8; s++) if (s !== S0) successor.replay(o.snapshot(s));
    let asked = 0;
    let granted = 0;
    for (let i = 0; asked < 200; i++) {
      const k = `v1:LIVEKEY${String(i).padStart(15, '0')}`;
      const wid = windowIdAt(END - 500, W, phaseOffset(k, W));
      if (shardOf(k, wid, 8) === S0) continue;
      asked++;
      if (successor.onCreditRequest(ask('b', wid, 1, k))?.issued === 1) granted++;
    }
    expect(granted, 'first asks for live keys of the other shards').to.equal(200);
  });

  it('is in the checkpoint: an owner that takes the shard over (or the same owner restarted) replays it and issues nothing for the window, its clock behind or not', () => {
    const clock = new FakeClock(END - 500);
    const o = sweptOwner(clock);
    // The checkpoint of the dropped ledger's shard carries the mark; no other shard's does.
    for (let s = 0; s < 8; s++) expect(o.snapshot(s).filter((e) => e.kind === 'ended')).to.deep.equal(s === S0 ? [{ kind: 'ended', shard: S0, windowMs: W, end: END }] : []);
    // Through the bus's codec, as the log carries it.
    const codec = new EnvelopeCodec([{ version: 'b1', secret: 'ended-mark-test-secret' }]);
    const env = codec.open(codec.seal('snapshot', { shard: S0, entries: o.snapshot(S0), epoch: 9 }));
    const carried = (env.body as { entries: LogEntry[] }).entries;
    expect(carried).to.deep.equal(o.snapshot(S0));
    for (const behind of [0, R, 2 * R, 10 * R]) {
      const successorClock = new FakeClock(END + 2 * R - behind);
      const successor = newOwner(successorClock);
      successor.replay(carried);
      expect(successor.marks.of(S0, W)).to.equal(END);
      expect(successor.onCreditRequest(ask('b')), `a successor ${behind} ms behind`).to.equal(undefined);
      // Its own checkpoint passes the mark on.
      expect(successor.snapshot(S0).filter((e) => e.kind === 'ended')).to.deep.equal([{ kind: 'ended', shard: S0, windowMs: W, end: END }]);
    }
    // Without the mark (a checkpoint taken before the mark existed), the window would be issued again.
    const blind = newOwner(new FakeClock(END));
    blind.replay(carried.filter((e) => e.kind !== 'ended'));
    expect(blind.onCreditRequest(ask('b'))?.issued).to.equal(1);
  });

  it("a checkpoint carries its marks in a body key of its own, always (none: []), which the previous release's reader drops: it reads the same ledgers", () => {
    const clock = new FakeClock(END - 500);
    const o = newOwner(clock);
    expect(o.onCreditRequest(ask('a', W0, 3))?.issued).to.equal(3);
    const ledgers = o.snapshot(S0);
    const codec = new EnvelopeCodec([{ version: 'b1', secret: 'ended-mark-test-secret' }]);
    const raw = (entries: LogEntry[]): { shard: number; entries: unknown[]; ended?: unknown } => JSON.parse(String(codec.seal('snapshot', { shard: S0, entries }).b)) as never;
    expect(raw(ledgers).ended, 'no marks yet: written all the same').to.deep.equal([]);
    const marked = raw([...ledgers, { kind: 'ended', shard: S0, windowMs: W, end: END - W }]);
    expect(marked.ended).to.deep.equal([[W, END - W]]);
    // The previous release's snapshot reader knows shard, entries and epoch, and drops other keys;
    // its entries reader is this one's. What it reads is the ledgers, as written.
    const previous = decoders.snapshot({ shard: marked.shard, entries: marked.entries }, '');
    expect(previous.entries.filter((e) => e.kind === 'grant' || e.kind === 'report')).to.deep.equal(ledgers);
  });

  it('a horizon dated by a clock that gives fractions of a ms is written whole (rounded up), and a fractional or bad one read never rejects the checkpoint', () => {
    const clock = new FakeClock(END - 500.5);
    const o1 = newOwner(clock);
    const S1 = shardOf(KEY, W0 + 1, 8);
    o1.replay([...new Set([S0, S1])].map((shard) => ({ kind: 'unmarked', shard }))); // a blind takeover
    expect(o1.onCreditRequest(ask('a', W0, LIMIT))?.issued).to.equal(LIMIT);
    expect(o1.onCreditRequest(ask('a', W0 + 1, 3))?.issued).to.equal(3);
    clock.set(END + 2 * R + 0.25);
    o1.sweep(clock.now());
    const written = (shard: number): Record<string, unknown> => JSON.parse(JSON.stringify(encoders.snapshot({ shard, entries: o1.snapshot(shard) }))) as never;
    const raw = written(S0);
    expect(raw['unmarked'], 'rounded up').to.equal(Math.ceil(END - 500.5 + 2 * R));
    const o2 = newOwner(new FakeClock(END + 5));
    o2.replay([...new Set([S0, S1])].flatMap((shard) => decoders.snapshot(written(shard), '').entries));
    expect(o2.onCreditRequest(ask('b')), 'the dropped window').to.equal(undefined);
    expect(o2.committed(KEY, W, W0 + 1), 'the live ledger, not issued again').to.equal(3);
    expect(o2.onCreditRequest(ask('b', W0 + 1, LIMIT))?.issued, 'what is left of it').to.equal(LIMIT - 3);
    // Read from a writer that did not round it up: rounded up; anything else that is not a time: undated.
    for (const [v, by] of [
      [END - 450.5, END - 450],
      ['soon', undefined],
      [-1, undefined],
    ] as const) {
      const entries = decoders.snapshot({ ...raw, unmarked: v }, '').entries;
      expect(
        entries.filter((e) => e.kind === 'unmarked'),
        String(v),
      ).to.deep.equal([by === undefined ? { kind: 'unmarked', shard: S0 } : { kind: 'unmarked', shard: S0, by }]);
      expect(entries.filter((e) => e.kind === 'ended')).to.deep.equal([{ kind: 'ended', shard: S0, windowMs: W, end: END }]);
    }
  });

  it('an owner that replays a log with no checkpoint cannot know its marks: the takeover dates the horizon (without it, `late` would go out)', () => {
    const clock = new FakeClock(END + 5);
    const bare = newOwner(clock);
    bare.replay([]);
    expect(bare.onCreditRequest(ask('b')), 'what the bus must not leave it at').to.deep.include({ issued: 1, late: 1 });
    const dated = newOwner(clock);
    dated.replay([{ kind: 'unmarked', shard: S0 }]);
    expect(dated.onCreditRequest(ask('b'))?.late).to.equal(undefined);
  });

  it('property: whatever the owner clocks do (steps within the skew and far beyond it), restarts and takeovers, no window is issued more than its allowance in all', function () {
    this.timeout(60_000);
    const keys = Array.from({ length: 6 }, (_, i) => `v1:PROPKEY${String(i).padStart(14, '0')}`);
    const lengths = [200, 1000];
    for (let seed = 1; seed <= 40; seed++) {
      const rand = rng(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
      let t = 1_800_000_000_000;
      let skew = 0; // the owner's clock minus true time
      let clock = new FakeClock(t);
      let owner = newOwner(clock);
      let log: LogEntry[] = [];
      /** Per (key, length, window id): per (node epoch, lease) the most it was issued. */
      const issued = new Map<string, Map<string, number>>();
      /** Per (shard, length): the marks of the last checkpoint, and those the owner last showed. */
      const marks = new Map<string, number>();
      const shown = new Map<string, number>();
      const slots = [0, 1, 2, 3, 4, 5, 6, 7].flatMap((shard) => lengths.map((ms) => ({ shard, ms, id: `${shard}|${ms}` })));
      for (let step = 0; step < 1500; step++) {
        t += Math.floor(rand() * 20);
        const x = rand();
        // The owner's clock: mostly within a round of true time, stepping about; now and then far off.
        if (x < 0.1) skew = Math.round((rand() * 2 - 1) * R);
        else if (x < 0.12) skew = pick([-5_000, -1_500, 1_500, 5_000]);
        clock.step(t + skew - clock.now());
        if (x > 0.97) {
          // A takeover or a restart: a new owner, its clock anywhere within a round of true time,
          // replays the log (the last checkpoint and the grants since).
          clock = new FakeClock(t + Math.round((rand() * 2 - 1) * R));
          skew = clock.now() - t;
          owner = newOwner(clock);
          owner.replay(log);
          for (const { shard, ms, id } of slots) if (marks.has(id)) expect(owner.marks.of(shard, ms), 'a successor knows at least the marks checkpointed').to.be.at.least(marks.get(id)!);
          shown.clear();
        } else if (x > 0.9) {
          owner.sweep(clock.now());
          for (const { shard, ms, id } of slots) {
            const m = owner.marks.of(shard, ms);
            if (m === undefined) continue;
            expect(m, 'a mark never moves back').to.be.at.least(shown.get(id) ?? m);
            shown.set(id, m);
          }
        } else if (x > 0.87) {
          log = [0, 1, 2, 3, 4, 5, 6, 7].flatMap((s) => owner.snapshot(s)); // checkpoint, log trimmed behind it
          for (const { shard, ms, id } of slots) if (owner.marks.of(shard, ms) !== undefined) marks.set(id, owner.marks.of(shard, ms)!);
        } else {
          // An ask, from a node whose clock is within a round of true time, for its window or (held
          // up on its way) one of the two before.
          const keyId = pick(keys);
          const windowMs = pick(lengths);
          const nodeNow = t + Math.round((rand() * 2 - 1) * R);
          const windowId = windowIdAt(nodeNow, windowMs, phaseOffset(keyId, windowMs)) - pick([0, 0, 1, 2]);
          const node = pick(['a', 'b', 'c']);
          const lease = 1 + Math.floor(rand() * 3);
          const g = owner.onCreditRequest({ ...ask(node, windowId, 1 + Math.floor(rand() * 3), keyId, windowMs, lease), nodeEpoch: `${node}-e${lease}` });
          if (g === undefined) continue;
          log.push({ kind: 'grant', grant: g });
          const id = `${keyId}|${windowMs}|${windowId}`;
          const per = issued.get(id) ?? new Map<string, number>();
          issued.set(id, per);
          per.set(`${g.nodeEpoch}|${g.lease}`, Math.max(per.get(`${g.nodeEpoch}|${g.lease}`) ?? 0, g.issued));
          let sum = 0;
          for (const v of per.values()) sum += v;
          expect(sum, `seed ${seed}: window ${id} issued in all`).to.be.at.most(LIMIT);
        }
      }
    }
  });

  describe('in a fleet where an older release (no marks, no `late` on its grants) owned the shard', () => {
    /** What an older release sends for a grant: it keeps no marks, and knows no `late`. */
    const older = (g: Grant): Grant => {
      const { late, ...rest } = g;
      void late;
      return rest;
    };
    /** A checkpoint through the log's body codec; `olderWriter`: written as an older release writes it (no `ended`). */
    const checkpoint = (o: FoldOwner, olderWriter: boolean): LogEntry[] =>
      [0, 1, 2, 3, 4, 5, 6, 7].flatMap((shard) => {
        const raw = encoders.snapshot({ shard, entries: o.snapshot(shard) }) as Record<string, unknown>;
        if (olderWriter) delete raw['ended'];
        return decoders.snapshot(JSON.parse(JSON.stringify(raw)), '').entries;
      });

    it('route A: an older owner sweeps W0 (a round ahead) and its clock steps back within the skew; the fresh grant it then issues lands after W0 ended: the node spends none of it', async () => {
      const ownerClock = new FakeClock(END - 500);
      const owner = newOwner(ownerClock);
      // An older release: no marks.
      (owner as unknown as { marks: { covers: () => boolean } }).marks.covers = () => false;
      const answer = (reqs: readonly CreditRequest[]): Grant[] => reqs.flatMap((r) => owner.onCreditRequest(r) ?? []).map(older);
      const admitted = await lateAnswer(answer, () => {
        ownerClock.set(END + 2 * R); // true time END + R
        owner.sweep(ownerClock.now());
        expect(owner.committed(KEY, W, W0), 'the ledger was dropped').to.equal(0);
        ownerClock.step(-2 * R); // a round behind true time
      });
      expect(owner.committed(KEY, W, W0), 'it did issue W0 again').to.equal(1);
      expect(admitted, 'admitted in W0').to.equal(LIMIT);
    });

    for (const olderCheckpoint of [true, false]) {
      it(`route B: an older owner a round ahead sweeps W0 and checkpoints ${olderCheckpoint ? 'without marks (as an older release writes it)' : 'with them (this release)'}; this release takes the shard a round behind and answers the late ask: no more than the allowance`, async () => {
        const o1Clock = new FakeClock(END - 500 + R);
        const o1 = newOwner(o1Clock);
        if (olderCheckpoint) (o1 as unknown as { marks: { covers: () => boolean } }).marks.covers = () => false;
        let owner = o1;
        const answer = (reqs: readonly CreditRequest[]): Grant[] => reqs.flatMap((r) => owner.onCreditRequest(r) ?? []).map((g) => (olderCheckpoint && owner === o1 ? older(g) : g));
        let o2: FoldOwner | undefined;
        const admitted = await lateAnswer(answer, () => {
          const t = END + R; // true time
          o1Clock.set(t + R);
          o1.sweep(o1Clock.now());
          const log = checkpoint(o1, olderCheckpoint); // the log is trimmed behind it
          o2 = newOwner(new FakeClock(t + 5 - R)); // END + 5: W0 is not two rounds past by its clock
          o2.replay(log);
          owner = o2;
        });
        expect(admitted, 'admitted in W0').to.equal(LIMIT);
        if (olderCheckpoint) {
          // The successor issued W0 again (it cannot know it was swept), but said nothing of `late`.
          expect(o2!.committed(KEY, W, W0)).to.equal(1);
          const again = o2!.onCreditRequest({ ...ask('c'), nodeEpoch: 'c-e1' });
          expect(again?.late, 'a window ending by the unmarked horizon').to.equal(undefined);
        } else expect(o2!.committed(KEY, W, W0), 'the mark ends W0').to.equal(0);
      });
    }

    it('an owner says `late` only for windows ending after its unmarked horizon: its own checkpoint carries the horizon, and a successor keeps it', () => {
      const clock = new FakeClock(END - 10);
      const fresh = newOwner(clock);
      expect(fresh.onCreditRequest(ask('a'))?.late, 'marks complete from the start').to.equal(1);
      const older = newOwner(clock);
      expect(older.onCreditRequest(ask('a'))?.issued).to.equal(1);
      const o2 = newOwner(clock);
      o2.replay(checkpoint(older, true));
      const horizon = clock.now() + 2 * R;
      // W0 ends within the horizon; the next window of the key ends after it.
      expect(END).to.be.at.most(horizon);
      expect(o2.onCreditRequest(ask('b'))?.late, 'W0: restated or not, no `late`').to.equal(undefined);
      expect(o2.onCreditRequest(ask('a'))?.late).to.equal(undefined);
      expect(o2.onCreditRequest(ask('b', W0 + 1))?.late, 'the next window').to.equal(1);
      // Over the log's codec, `late` travels as a trailing field an older reader ignores.
      const g = o2.onCreditRequest(ask('c', W0 + 1))!;
      expect(decoders.messages(JSON.parse(JSON.stringify(encoders.messages({ re: 0, nodeId: 'c', messages: [g] }))), '').messages).to.deep.equal([g]);
      for (const shard of [0, 1, 2, 3, 4, 5, 6, 7]) expect(o2.snapshot(shard).filter((e) => e.kind === 'unmarked')).to.deep.equal([{ kind: 'unmarked', shard, by: horizon }]);
      const o3 = newOwner(new FakeClock(clock.now() - R));
      o3.replay(checkpoint(o2, false));
      expect(o3.onCreditRequest(ask('d'))?.late, 'a successor keeps the horizon').to.equal(undefined);
      expect(o3.onCreditRequest(ask('d', W0 + 1))?.late).to.equal(1);
    });
  });
});

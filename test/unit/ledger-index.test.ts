import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import { shardOf, type CreditRequest, type ReportBatch } from '../../lib/protocol/messages.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

/*
 * The owner's ledgers by shard: a checkpoint of a shard (`snapshot`) holds exactly that shard's
 * ledgers and restores them on replay, the sweep forgets ended ones everywhere, and the totals count
 * every ledger once. The owner's config hashes (key id, window id) onto 8 shards.
 */

const SHARDS = 8;
const SHORT = 1000;
const LONG = 60_000;
/** 40 s into a minute: no 60 s window near its end; 1 s windows end all the time. */
const NOW = 1_800_000_040_000;

const keyOf = (i: number): string => `v1:IDX${String(i).padStart(19, '0')}`;
const ledgerId = (keyId: string, windowMs: number, windowId: number): string => `${keyId}|${windowMs}|${windowId}`;

interface Made {
  /** The key's first 1 s window, or its 60 s one. */
  first: boolean;
  keyId: string;
  windowMs: number;
  windowId: number;
  shard: number;
}

function ask(keyId: string, windowMs: number, windowId: number, node: string, need: number): CreditRequest {
  return { keyId, windowId, windowMs, limit: 1000, nodeId: node, nodeEpoch: `${node}-e1`, lease: 1, spent: 0, selfIssued: 0, released: 0, need, demand: 2, fastPath: false };
}

/** An owner holding ledgers of 40 keys, each in a 60 s and a 1 s window (and the next 1 s one), one or two leases each. */
function filled(clock: FakeClock): { o: FoldOwner; made: Made[] } {
  const o = new FoldOwner(ownerConfig(clock, new FixedFleet(3), { reserveRatio: 0 }));
  const made: Made[] = [];
  const now = clock.now();
  for (let i = 0; i < 40; i++) {
    const keyId = keyOf(i);
    for (const windowMs of [LONG, SHORT]) {
      const first = windowIdAt(now, windowMs, phaseOffset(keyId, windowMs));
      for (const windowId of windowMs === SHORT ? [first, first + 1] : [first]) {
        made.push({ first: windowId === first, keyId, windowMs, windowId, shard: shardOf(keyId, windowId, SHARDS) });
        o.onCreditRequest(ask(keyId, windowMs, windowId, 'a', 1 + (i % 5)));
        if (i % 3 === 0) o.onCreditRequest(ask(keyId, windowMs, windowId, 'b', 2));
        // Spend reported by a, so the checkpoint's reports carry something besides grants.
        const batch: ReportBatch = {
          shard: shardOf(keyId, windowId, SHARDS),
          nodeId: 'a',
          nodeEpoch: 'a-e1',
          round: 1,
          reports: [{ keyId, windowId, windowMs, limit: 1000, lease: 1, seq: 1, spent: 1, issued: 1, selfIssued: 0, released: 0, demand: 0, held: 0, selfGrant: false }],
        };
        o.onReports(batch);
      }
    }
  }
  o.takeOutbox();
  return { o, made };
}

/** The (key, window) ledgers a checkpoint's entries name, grants and reports alike. */
function ledgersIn(entries: readonly LogEntry[]): Set<string> {
  const out = new Set<string>();
  for (const e of entries) {
    if (e.kind === 'grant') out.add(ledgerId(e.grant.keyId, e.grant.windowMs, e.grant.windowId));
    else if (e.kind === 'report') for (const r of e.batch.reports) out.add(ledgerId(r.keyId, r.windowMs, r.windowId));
  }
  return out;
}

/**
 * A checkpoint in an order-free form: grants and reports as sorted JSON lines. Without demand: a
 * lease that never reported has its ask's demand, which a replay does not take from a report that
 * carries no sequence number (the node's next report states it again).
 */
function canonical(entries: readonly LogEntry[]): string[] {
  const lines: string[] = [];
  for (const e of entries) {
    if (e.kind === 'grant') lines.push(JSON.stringify(['g', e.grant]));
    else if (e.kind === 'ended') lines.push(JSON.stringify(['e', e.windowMs, e.end]));
    else if (e.kind === 'unmarked') lines.push(JSON.stringify(['u', e.shard, e.by]));
    else if (e.kind === 'blanket') lines.push(JSON.stringify(['b', e.blanket]));
    else for (const r of e.batch.reports) lines.push(JSON.stringify(['r', e.batch.shard, e.batch.nodeId, e.batch.nodeEpoch, { ...r, demand: undefined }]));
  }
  return lines.sort();
}

describe('fold owner: ledgers indexed by shard', () => {
  it("a shard's checkpoint holds exactly that shard's ledgers, each once", () => {
    const { o, made } = filled(new FakeClock(NOW));
    expect(o.size).to.equal(made.length);
    const seen = new Set<string>();
    for (let s = 0; s < SHARDS; s++) {
      const entries = o.snapshot(s);
      const want = new Set(made.filter((m) => m.shard === s).map((m) => ledgerId(m.keyId, m.windowMs, m.windowId)));
      expect(ledgersIn(entries), `shard ${s}`).to.deep.equal(want);
      for (const e of entries) if (e.kind === 'report') expect(e.batch.shard).to.equal(s);
      for (const id of want) {
        expect(seen.has(id), id).to.equal(false);
        seen.add(id);
      }
    }
    expect(seen.size).to.equal(made.length);
    // Shards that hold no ledger give an empty checkpoint, in range or not.
    expect(o.snapshot(SHARDS)).to.deep.equal([]);
  });

  it('replaying every shard checkpoint restores the ledgers: same counts, same checkpoints', () => {
    const clock = new FakeClock(NOW);
    const { o, made } = filled(clock);
    const o2 = new FoldOwner(ownerConfig(clock, new FixedFleet(3), { reserveRatio: 0 }));
    for (let s = 0; s < SHARDS; s++) o2.replay(o.snapshot(s));
    expect(o2.size).to.equal(o.size);
    for (const m of made) {
      expect(o2.committed(m.keyId, m.windowMs, m.windowId)).to.equal(o.committed(m.keyId, m.windowMs, m.windowId));
      expect(o2.issued(m.keyId, m.windowMs, m.windowId)).to.equal(o.issued(m.keyId, m.windowMs, m.windowId));
      expect(o2.spent(m.keyId, m.windowMs, m.windowId)).to.equal(o.spent(m.keyId, m.windowMs, m.windowId));
    }
    for (let s = 0; s < SHARDS; s++) expect(canonical(o2.snapshot(s)), `shard ${s}`).to.deep.equal(canonical(o.snapshot(s)));
    expect(o2.totals(clock.now())).to.deep.equal(o.totals(clock.now()));
  });

  it('the sweep drops ended ledgers from every shard, and a new window of the key is indexed afresh', () => {
    const clock = new FakeClock(NOW);
    const { o, made } = filled(clock);
    // Past the end of every key's first 1 s window, and two rounds more (the skew allowed).
    const endOf = (m: Made): number => windowEndMs(m.windowId, m.windowMs, phaseOffset(m.keyId, m.windowMs));
    const at = Math.max(...made.filter((m) => m.windowMs === SHORT && m.first).map(endOf)) + 50;
    const live = made.filter((m) => endOf(m) > at - 50);
    const ended = made.filter((m) => endOf(m) <= at - 50);
    expect(ended.length).to.be.greaterThan(0);
    expect(live.length).to.be.greaterThan(0);
    clock.set(at);
    o.sweep(at);
    expect(o.size).to.equal(live.length);
    for (let s = 0; s < SHARDS; s++) {
      const want = new Set(live.filter((m) => m.shard === s).map((m) => ledgerId(m.keyId, m.windowMs, m.windowId)));
      expect(ledgersIn(o.snapshot(s)), `shard ${s}`).to.deep.equal(want);
    }
    for (const m of ended) expect(o.committed(m.keyId, m.windowMs, m.windowId)).to.equal(0);
    // A key's later window: a ledger of its own, in its own shard, once.
    const m = ended[0]!;
    const later = m.windowId + 2;
    o.onCreditRequest(ask(m.keyId, SHORT, later, 'a', 1));
    const s = shardOf(m.keyId, later, SHARDS);
    expect([...ledgersIn(o.snapshot(s))].filter((id) => id === ledgerId(m.keyId, SHORT, later))).to.have.length(1);
    expect(o.size).to.equal(live.length + 1);
  });

  it('sweeps a short window created after a longer one in the same shard', () => {
    const clock = new FakeClock(NOW);
    const o = new FoldOwner(ownerConfig(clock, new FixedFleet(3), { reserveRatio: 0 }));
    // A key whose 60 s window and current 1 s window share a shard: the long one comes first.
    let keyId = '';
    let shortId = 0;
    for (let i = 0; keyId === ''; i++) {
      const k = keyOf(1000 + i);
      const longId = windowIdAt(NOW, LONG, phaseOffset(k, LONG));
      const sId = windowIdAt(NOW, SHORT, phaseOffset(k, SHORT));
      if (shardOf(k, longId, SHARDS) === shardOf(k, sId, SHARDS)) {
        keyId = k;
        shortId = sId;
        o.onCreditRequest(ask(k, LONG, longId, 'a', 1));
        o.onCreditRequest(ask(k, SHORT, sId, 'a', 1));
      }
    }
    const end = windowEndMs(shortId, SHORT, phaseOffset(keyId, SHORT));
    expect(o.size).to.equal(2);
    o.sweep(end + 49);
    expect(o.size).to.equal(2);
    o.sweep(end + 50);
    expect(o.size).to.equal(1);
    expect(ledgersIn(o.snapshot(shardOf(keyId, shortId, SHARDS)))).to.deep.equal(new Set([ledgerId(keyId, LONG, windowIdAt(NOW, LONG, phaseOffset(keyId, LONG)))]));
  });

  it('totals count every live ledger once, against its allowance', () => {
    const clock = new FakeClock(NOW);
    const { o, made } = filled(clock);
    const now = clock.now();
    const running = made.filter((m) => windowEndMs(m.windowId, m.windowMs, phaseOffset(m.keyId, m.windowMs)) > now);
    const committed = running.reduce((a, m) => a + o.committed(m.keyId, m.windowMs, m.windowId), 0);
    expect(o.totals(now)).to.deep.equal({ ledgers: running.length, committed, allowance: 1000 * running.length });
    // Ended but not yet swept: out of the totals already, still held.
    const later = now + 1000;
    const stillRunning = made.filter((m) => windowEndMs(m.windowId, m.windowMs, phaseOffset(m.keyId, m.windowMs)) > later);
    expect(o.totals(later).ledgers).to.equal(stillRunning.length);
    expect(o.size).to.equal(made.length);
  });
});

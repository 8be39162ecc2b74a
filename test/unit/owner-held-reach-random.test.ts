import { expect } from 'chai';
import { heldRanges } from '../../bus/held-ranges.js';
import { FakeClock } from '../../lib/clock.js';
import { FoldOwner } from '../../lib/fold-owner.js';
import type { Blanket, HeldStatement } from '../../lib/owner/blankets.js';
import type { LogEntry } from '../../lib/protocol/log.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs } from '../../lib/window.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';
import { FixedFleet, ownerConfig } from '../support/protocol.js';

/**
 * Members' credit reaching back over running windows (`Held.reach`), at random: one owner process
 * at a time over 8 shards, keys of four window lengths (1 s to a day), members listed and unlisted,
 * the reach turned off and on (a member of an older release comes and goes), blanket writes taken,
 * refused but landed, or lost, in any order; grants filling windows, checkpoints, sweeps, new owner
 * epochs in process and failovers to a successor that replays the log; nodes taking credit by any
 * statement of the last few steps (or of thirty, in some runs), with clocks up to 50 ms apart; in
 * some runs a silent member may grant itself its share. What must hold after every step: what was
 * granted, taken and may be self-granted in a window never passes its allowance, and every take is
 * counted (`Ledger.heldBy`) in the current owner's ledger of its window, if it has one.
 */
const SHARDS = 8;
const MIN = 12;
const NODES = ['n0', 'n1', 'n2', 'n3', 'n4'];
const LENGTHS = [1000, 60_000, 3_600_000, 86_400_000];
const T0 = 5_000_000_123;

interface Stmt {
  epoch: number;
  step: number;
  st: HeldStatement;
}
interface Take {
  node: string;
  keyId: string;
  windowMs: number;
  windowId: number;
  step: number;
  how: string;
}

const STATS = { full: 0, reach: 0, range: 0, reachChecked: 0, failovers: 0 };

/** One seed's run of `steps`; `trace`, if given, hears every step, for a failure's message. */
function run(seed: number, steps: number, trace?: string[]): void {
  const rand = rng(seed);
  const lag = seed % 4 === 0 ? 30 : 6;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const note = (f: () => string): void => void trace?.push(f());
  const clock = new FakeClock(T0 + Math.floor(rand() * 100_000));
  const fleet = new FixedFleet(NODES.length + 1);
  fleet.holding = NODES.filter(() => rand() < 0.5).map((n) => ({ nodeId: n, nodeEpoch: `${n}-e1` }));
  fleet.reachCounted = rand() < 0.8;
  // In some runs a member that is no longer heard from: its share is held back (it may grant it itself).
  const silent = seed % 5 === 1;
  if (silent) fleet.silentNodes = ['n7'];
  let epoch = 7;
  const mk = (): FoldOwner => new FoldOwner(ownerConfig(clock, fleet, { reserveRatio: 0, floatHolder: { nodeId: 'h', nodeEpoch: `h-e${epoch}` }, ownerEpoch: () => epoch, heldMinAllowance: MIN }));
  let o = mk();
  o.refillFloats(() => true);
  const log = new Map<number, LogEntry[]>();
  const append = (shard: number, e: LogEntry): void => void (log.get(shard) ?? log.set(shard, []).get(shard)!).push(e);
  let pending: { b: Blanket; epoch: number }[] = [];
  const stmts: Stmt[] = [];
  const takes: Take[] = [];
  const took = new Set<string>();
  const given = new Map<string, number>();
  const limits = new Map<string, number>();
  const limitOf = (keyId: string): number => {
    let l = limits.get(keyId);
    if (l === undefined) limits.set(keyId, (l = MIN + Math.floor(rand() * 20)));
    return l;
  };
  const keyIds = Array.from({ length: 40 }, (_, i) => `v1:REACHMODELKEY${String(i).padStart(8, '0')}`);
  const windowAt = (keyId: string, windowMs: number, at: number) => {
    const windowId = Math.floor((at - phaseOffset(keyId, windowMs)) / windowMs);
    const end = windowEndMs(windowId, windowMs, phaseOffset(keyId, windowMs));
    return { windowId, end, start: end - windowMs, shard: shardOf(keyId, windowId, SHARDS) };
  };
  const hear = (step: number): void => void stmts.push({ epoch, step, st: o.heldStatement(() => true) });
  const ledgerOf = (t: Take) =>
    (o as unknown as { ledgers: { find(k: string, ms: number, id: number): { heldBy?: string[]; allowance: number; unstated?: boolean; windowEnd: number } | undefined } }).ledgers.find(
      t.keyId,
      t.windowMs,
      t.windowId,
    );

  for (let step = 0; step < steps; step++) {
    const r = rand();
    if (r < 0.2) {
      clock.step(Math.floor(rand() * 800) - (rand() < 0.1 ? 40 : 0));
      const shards = [0, 1, 2, 3, 4, 5, 6, 7].filter(() => rand() < 0.6);
      for (const b of o.blanketsDue(shards, () => true)) pending.push({ b, epoch });
      note(() => `${step}: due ${shards} at ${clock.now()}`);
      hear(step);
    } else if (r < 0.4 && pending.length > 0) {
      const i = Math.floor(rand() * pending.length);
      const { b, epoch: e } = pending[i]!;
      pending.splice(i, 1);
      const x = rand();
      const taken = x < 0.75 && e === epoch;
      const landed = taken || x < 0.9;
      if (landed) append(b.shard, { kind: 'blanket', blanket: b });
      if (e === epoch) o.blanketLogged(b, taken);
      note(() => `${step}: blanket s${b.shard} by ${b.held?.startsBy} reach ${b.held?.reach} ${taken ? 'taken' : landed ? 'refused, landed' : 'lost'}`);
      hear(step);
    } else if (r < 0.47) {
      const n = pick(NODES);
      const i = fleet.holding.findIndex((h) => h.nodeId === n);
      if (i >= 0) fleet.holding = fleet.holding.filter((_, j) => j !== i);
      else fleet.holding = [...fleet.holding, { nodeId: n, nodeEpoch: `${n}-e1` }];
      note(() => `${step}: holding ${fleet.holding.map((h) => h.nodeId)}`);
    } else if (r < 0.5) {
      fleet.reachCounted = !fleet.reachCounted;
      note(() => `${step}: reach ${fleet.reachCounted}`);
    } else if (r < 0.62) {
      // Fill a running window (an ask from n9, logged).
      const keyId = pick(keyIds);
      const ms = pick(LENGTHS);
      const w = windowAt(keyId, ms, clock.now());
      const limit = limitOf(keyId);
      const fixed = keyIds.indexOf(keyId) % 5 === 0;
      const g = o.onCreditRequest({
        keyId,
        windowId: w.windowId,
        windowMs: ms,
        limit,
        nodeId: 'n9',
        nodeEpoch: 'n9-e1',
        lease: 1,
        spent: 0,
        selfIssued: 0,
        released: 0,
        need: rand() < 0.5 ? limit : 1 + Math.floor(rand() * limit),
        demand: Math.floor(rand() * 5),
        fastPath: rand() < 0.5,
        ...(fixed ? { fixedShare: true } : {}),
      });
      for (const f of o.refillFloats(() => true)) {
        append(shardOf(f.keyId, f.windowId, SHARDS), { kind: 'grant', grant: f });
        o.logged([f], true);
      }
      if (g !== undefined) {
        const id = `${keyId}|${ms}|${w.windowId}`;
        given.set(id, Math.max(given.get(id) ?? 0, g.issued));
        append(w.shard, { kind: 'grant', grant: g });
        o.logged([g], true);
      }
      note(() => `${step}: n9 asks ${keyId}/${ms}/${w.windowId} s${w.shard}: ${g?.issued}`);
    } else if (r < 0.92) {
      // A node takes by a statement a few steps old (any epoch heard in the last 6 steps, or current).
      const n = pick(NODES);
      const recent = stmts.filter((s) => step - s.step <= lag || s === stmts.at(-1));
      if (recent.length === 0) continue;
      const s = pick(recent);
      const keyId = pick(keyIds);
      const ms = pick(LENGTHS);
      const nodeNow = clock.now() + Math.floor(rand() * 101) - 50;
      const w = windowAt(keyId, ms, nodeNow);
      const id = `${n}|${keyId}|${ms}|${w.windowId}`;
      if (took.has(id)) continue;
      const table = Array.from({ length: SHARDS }, () => ({ owner: 'o', ownerProcess: 'o-e1', epoch: s.epoch }));
      const shards = new Map(s.st.shards.map((x) => [x.shard, x]));
      const members = new Map([['o', { epoch: 'o-e1', verified: true, beat: { held: { holders: s.st.holders, shards } } }]]);
      const h = heldRanges(table as never, members as never, { nodeId: n, nodeEpoch: `${n}-e1` })[w.shard];
      if (h === undefined || limitOf(keyId) < h.min || w.start > h.by) continue;
      const byRange = w.start > h.after;
      const byReach = h.reach !== undefined && w.end > h.reach;
      if (!byRange && !byReach) continue;
      took.add(id);
      if (byRange) STATS.range++;
      else STATS.reach++;
      takes.push({ node: n, keyId, windowMs: ms, windowId: w.windowId, step, how: `${byRange ? 'range' : 'reach'} by stmt of step ${s.step} epoch ${s.epoch}` });
      note(() => `${step}: ${n} takes ${keyId}/${ms}/${w.windowId} s${w.shard} (${takes.at(-1)!.how}; start ${w.start} end ${w.end} range ${JSON.stringify(h)})`);
    } else if (r < 0.94) {
      // A checkpoint of a shard: the log behind it trimmed.
      const shard = Math.floor(rand() * SHARDS);
      log.set(shard, o.snapshot(shard));
      note(() => `${step}: checkpoint s${shard}`);
    } else if (r < 0.96) {
      o.sweep(clock.now());
      note(() => `${step}: sweep`);
    } else if (r < 0.965) {
      // A new owner epoch for the same process, without a replay.
      for (const { b } of pending) if (rand() < 0.5) append(b.shard, { kind: 'blanket', blanket: b });
      pending = [];
      epoch++;
      STATS.failovers++;
      note(() => `${step}: epoch ${epoch} in process`);
    } else if (r < 0.975) {
      // Failover: the owner fails; a successor (next epoch) replays every shard's log.
      for (const { b } of pending) if (rand() < 0.5) append(b.shard, { kind: 'blanket', blanket: b });
      pending = [];
      epoch++;
      STATS.failovers++;
      o = mk();
      for (const [, entries] of log) o.replay(entries);
      o.refillFloats(() => true);
      // A report states allowances of replayed windows (each made from grants alone).
      note(() => `${step}: failover to epoch ${epoch}`);
    } else {
      // n9 reports a window's allowance (a replayed ledger gets it stated).
      const keyId = pick(keyIds);
      const ms = pick(LENGTHS);
      const w = windowAt(keyId, ms, clock.now());
      o.onReports({
        shard: w.shard,
        nodeId: 'n8',
        nodeEpoch: 'n8-e1',
        round: 1,
        reports: [{ keyId, windowId: w.windowId, windowMs: ms, limit: limitOf(keyId), lease: 1, seq: 1, spent: 0, issued: 0, selfIssued: 0, released: 0, demand: 0, held: 0, selfGrant: false }],
      });
      note(() => `${step}: n8 reports ${keyId}/${ms}/${w.windowId}`);
    }
    for (const [id, n] of given) {
      const [keyId, ms, wid] = id.split('|');
      const k = takes.filter((t) => t.keyId === keyId && t.windowMs === Number(ms) && t.windowId === Number(wid)).length;
      const selfGranted = silent ? Math.ceil(limitOf(keyId!) / fleet.size()) : 0;
      if (n + k + selfGranted >= limitOf(keyId!) - 1 && k > 0) STATS.full++;
      if (n + k + selfGranted > limitOf(keyId!)) {
        if (trace === undefined) throw new Error('over');
        expect.fail(`seed ${seed} step ${step}: ${id} given ${n} + ${k} taken + ${selfGranted} self-granted > ${limitOf(keyId!)}\n${trace.join('\n')}`);
      }
    }
    for (const t of takes) {
      const l = ledgerOf(t);
      if (l === undefined || (l.allowance < MIN && l.unstated !== true)) continue;
      if (t.how.startsWith('reach')) STATS.reachChecked++;
      if (l.heldBy?.includes(`${t.node}-e1`) === true) continue;
      const at = `seed ${seed} step ${step}: ${t.node} took ${t.keyId}/${t.windowMs}/${t.windowId} at step ${t.step} (${t.how}); heldBy ${JSON.stringify(l.heldBy)} allowance ${l.allowance}\n${(trace ?? []).join('\n')}`;
      if (trace === undefined) throw new Error('uncounted');
      expect.fail(`uncounted take: ${at}`);
    }
  }
}

describe('members’ credit reaching back, at random: owners that fail, members that come and go', () => {
  it('never lets members take past the allowance, nor take uncounted, over 300 random runs of 400 steps', () => {
    for (let seed = 1; seed <= 300; seed++) {
      try {
        run(seed, 400);
      } catch {
        run(seed, 400, []); // again, with every step told in the failure's message
      }
    }
    // The runs did what they are for: takes by a reach, checked against the owner's count, windows
    // given out to their last credit with takes in them, and failovers.
    expect(STATS.reach, 'takes by a reach').to.be.above(500);
    expect(STATS.reachChecked, 'checks of such a take against the owner’s count').to.be.above(10_000);
    expect(STATS.full, 'steps with a window given out to its last credit, takes in it').to.be.above(300);
    expect(STATS.failovers).to.be.above(1000);
  });
});

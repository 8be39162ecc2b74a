import { expect } from 'chai';
import { MemoryBus } from '../../bus/memory.js';
import { joinFleet } from '../../bus/member.js';
import { rendezvousOwner } from '../../bus/rendezvous.js';
import type { Acquired } from '../../lib/lease-node.js';
import { compilePolicy } from '../../lib/policy.js';
import { phaseOffset, windowIdAt, windowStartMs } from '../../lib/window.js';
import { EventQueue } from '../../scripts/sim/queue.js';

/*
 * Two over-admissions a read-only review of the heartbeat statements found, each on three nodes and
 * one shard of a 1,000-per-second key, replayed on the simulator's virtual clock.
 */
const START = 1_800_000_000_000;
const R = 25;
const W = 1000;
const LIMIT = 1000;
const KEY = 'v1:REVIEWREVIEWREVIEWREV';
const limits = compilePolicy({ version: 1, defaultPlan: 'p', anonymousPlan: 'p', plans: { p: { windows: [{ name: 'w', limit: LIMIT, windowMs: W }] } } }).limitsFor(KEY, 't');
const offset = phaseOffset(KEY, W);
/** A window starting at least three seconds in, and its start. */
const W1 = windowIdAt(START + 3000, W, offset) + 1;
const W1_START = windowStartMs(W1, W, offset);

/** A fleet of three on one shard: the owner's index, the two others, and a way to count admissions in W1. */
function fleet(opts: { maxBuckets?: number; pausedUntil?: Map<string, number>; isolated?: Set<string> }) {
  const queue = new EventQueue(START);
  const clock = queue.clock;
  const paused = opts.pausedUntil ?? new Map<string, number>();
  const isolated = opts.isolated ?? new Set<string>();
  const bus = new MemoryBus({
    shards: 1,
    roundMs: R,
    clock,
    scheduler: queue,
    random: () => 0.5,
    faults: { latencyMs: 0.2, jitterMs: 0.1, loss: 0, duplicate: 0, reorderMs: 0, blocked: (f, t) => f !== t && (isolated.has(f) || isolated.has(t)), pausedUntil: (id) => paused.get(id) ?? 0 },
  });
  const members = [0, 1, 2].map((i) =>
    joinFleet(
      bus,
      { nodeId: `n${i}`, nodeEpoch: `n${i}-e1`, shards: 1, maxBuckets: opts.maxBuckets ?? 50_000, roundMs: R, fastPathDeadlineMs: 1, headroom: 1.25, reserveRatio: 0.02, degradedAfterMs: 30_000 },
      clock,
    ),
  );
  // Whoever does not own the shard: the node under test and the one draining the window.
  const owner = Number(rendezvousOwner(0, ['n0', 'n1', 'n2'])!.slice(1));
  const [n, p] = [0, 1, 2].filter((i) => i !== owner) as [number, number];
  let admitted = 0;
  const decide = (i: number, key = KEY): void => {
    const until = paused.get(`n${i}`) ?? 0;
    if (until > clock.now()) return void queue.at(until, () => decide(i, key));
    const inW1 = windowIdAt(clock.now(), W, offset) === W1;
    const r = members[i]!.node.acquire(key, limits) as Acquired;
    if (r.admitted && key === KEY && inW1) admitted++;
  };
  return { queue, clock, members, owner, n, p, paused, isolated, decide, admitted: () => admitted };
}

describe('regressions found in review of the heartbeat statements', () => {
  for (const pauseMs of [94, 300]) {
    it(`a node that pauses ${pauseMs} ms right after the round that found its owner back states no contact its own rule did not see`, () => {
      const f = fleet({});
      const { queue, clock, members, paused } = f;
      const node = `n${f.n}`;
      const owner = `n${f.owner}`;
      const heartbeatAt = W1_START - 5; // the node's round just before W1 starts
      const ownerBack = heartbeatAt - 5; // the owner resumes 5 ms before it, from a 600 ms pause
      for (const i of [0, 1, 2]) {
        const tick = (): void => {
          const until = paused.get(`n${i}`) ?? 0;
          if (until > clock.now()) return void queue.at(until, tick);
          members[i]!.node.endRound();
          if (i === f.n && clock.now() === heartbeatAt) paused.set(node, heartbeatAt + pauseMs); // stops right after this round
          queue.after(R, tick);
        };
        queue.at(START + 1000 + ((i === f.owner ? ownerBack : i === f.n ? heartbeatAt : ownerBack + 2) % R), tick);
      }
      for (let t = W1_START - 950; t < W1_START - 900; t += 5) queue.at(t, () => f.decide(f.n)); // the node knows the key
      queue.at(ownerBack - 600, () => paused.set(owner, ownerBack));
      for (let t = W1_START - 300; t < W1_START + 900; t += 0.1) queue.at(t, () => f.decide(f.p)); // the other drains W1
      for (let k = 0; k < 400; k++) queue.at(heartbeatAt + 10 + k * 0.5, () => f.decide(f.n)); // decided when the node resumes
      queue.runUntil(W1_START + 999);
      expect(f.admitted()).to.be.at.most(LIMIT);
    });
  }

  it('a self-granted bucket evicted while its node is cut off is reported every round until its window ends, not once', () => {
    const f = fleet({ maxBuckets: 16 });
    const { queue, members, isolated } = f;
    for (const i of [0, 1, 2]) {
      const tick = (): void => {
        members[i]!.node.endRound();
        queue.after(R, tick);
      };
      queue.at(START + 1000 + i * 7, tick);
    }
    for (let t = W1_START - 950; t < W1_START - 900; t += 5) queue.at(t, () => f.decide(f.n));
    queue.at(W1_START - 600, () => isolated.add(`n${f.n}`));
    for (let k = 0; k < 120; k++) queue.at(W1_START + 10 + k * 0.1, () => f.decide(f.n)); // spends from its self-grant
    for (let j = 0; j < 40; j++) queue.at(W1_START + 50 + j * 0.1, () => f.decide(f.n, `v1:OTHER${String(j).padStart(15, '0')}`)); // evicts the key
    queue.at(W1_START + 100, () => isolated.delete(`n${f.n}`));
    for (let t = W1_START - 300; t < W1_START + 900; t += 0.1) queue.at(t, () => f.decide(f.p));
    queue.runUntil(W1_START + 999);
    expect(members[f.n]!.node.stats.selfGrants).to.be.at.least(1);
    expect(f.admitted()).to.be.at.most(LIMIT);
  });
});

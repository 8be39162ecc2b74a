import { expect } from 'chai';
import { MemoryBus } from '../../bus/memory.js';
import { joinFleet } from '../../bus/member.js';
import { FakeClock } from '../../lib/clock.js';
import { LocalCounters } from '../../lib/local-counters.js';
import type { Denied } from '../../lib/node-contract.js';
import { compilePolicy, type ResolvedLimits } from '../../lib/policy.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { seededRandom as rng } from '../../scripts/sim/queue.js';
import { demoPolicy } from '../support/fixtures.js';

const policy = compilePolicy(demoPolicy());
const free = policy.limitsFor('v1:any', 'none'); // burst 10/s, sustained 100/min
const KEY = 'v1:LOCALCOUNTERSLOCALCOU';

/** The start of the key's next window of `windowMs`. */
function nextWindow(clock: FakeClock, keyId: string, windowMs: number): number {
  const offset = phaseOffset(keyId, windowMs);
  return windowEndMs(windowIdAt(clock.now(), windowMs, offset), windowMs, offset);
}

function admitted(counters: LocalCounters, keyId: string, limits: ResolvedLimits, n: number): number {
  let ok = 0;
  for (let i = 0; i < n; i++) if (counters.acquire(keyId, limits).admitted) ok++;
  return ok;
}

describe('local counters: the decision of a fleet of one', () => {
  it('admits exactly the limit of a window, then refuses until the window ends (Retry-After to the end)', () => {
    const clock = new FakeClock(1_800_000_000_000);
    clock.set(nextWindow(clock, KEY, 1000));
    const c = new LocalCounters(clock);
    clock.advance(300);
    expect(admitted(c, KEY, free, 10)).to.equal(10);
    const r = c.acquire(KEY, free) as Denied;
    expect(r).to.deep.equal({ admitted: false, window: 'burst', retryAfterMs: 700, unavailable: false });
    clock.advance(700);
    expect(admitted(c, KEY, free, 11)).to.equal(10);
  });

  it('takes from every window or from none; the full window that ends last names a refusal', () => {
    const clock = new FakeClock(1_800_000_000_000);
    clock.set(nextWindow(clock, KEY, 60_000));
    const c = new LocalCounters(clock);
    let ok = 0;
    // 20 a second for 6 s: the burst window admits 10 a second, the sustained one stops at 100.
    for (let s = 0; s < 12; s++) {
      ok += admitted(c, KEY, free, 20);
      clock.advance(1000);
    }
    expect(ok).to.equal(100);
    const r = c.acquire(KEY, free) as Denied;
    expect(r.window).to.equal('sustained');
    expect(r.retryAfterMs).to.equal(48_000);
    // Refused requests took nothing from the burst window either.
    expect(c.windowQuota(KEY, free, 0)).to.deep.include({ left: 10 });
    expect(c.windowQuota(KEY, free, 1)).to.deep.include({ left: 0 });
  });

  it('a request costing more than is left is refused and takes nothing', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const c = new LocalCounters(clock);
    expect(admitted(c, KEY, free, 8)).to.equal(8);
    expect(c.acquire(KEY, free, 3).admitted).to.equal(false);
    expect(c.acquire(KEY, free, 2).admitted).to.equal(true);
  });

  it('uses the fleet’s windows: per-key phase offsets and ids', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const c = new LocalCounters(clock);
    const end = nextWindow(clock, KEY, 1000);
    clock.set(end - 1);
    expect(admitted(c, KEY, free, 12)).to.equal(10);
    clock.advance(1); // the key's next burst window begins
    expect(admitted(c, KEY, free, 12)).to.equal(10);
    expect(c.windowQuota(KEY, free, 0)!.end).to.equal(end + 1000);
  });

  it('a wall clock stepped back over a boundary keeps counting in the window it is in', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const c = new LocalCounters(clock);
    clock.set(nextWindow(clock, KEY, 1000));
    expect(admitted(c, KEY, free, 10)).to.equal(10);
    clock.step(-50); // back into the previous window: its count was reset when this one began
    expect(admitted(c, KEY, free, 5)).to.equal(0);
  });

  it('after a policy change, windows of the same length keep their counts', () => {
    const clock = new FakeClock(1_800_000_000_000);
    clock.set(nextWindow(clock, KEY, 60_000));
    const c = new LocalCounters(clock);
    expect(admitted(c, KEY, free, 10)).to.equal(10);
    const bigger = compilePolicy({ ...demoPolicy(), version: 2, plans: { ...demoPolicy().plans, free: { windows: [{ name: 'sustained', limit: 15, windowMs: 60_000 }] } } }).limitsFor(
      'v1:any',
      'none',
    );
    expect(admitted(c, KEY, bigger, 10)).to.equal(5);
    expect(c.buckets.size).to.equal(1);
  });

  it('forgets a key once all its windows have ended, a slice of the keys per round', () => {
    const clock = new FakeClock(1_800_000_000_000);
    const c = new LocalCounters(clock, 4);
    const hourly = compilePolicy(demoPolicy({ defaultPlan: 'hour' })).limitsFor('v1:h', 'none');
    for (let i = 0; i < 200; i++) c.acquire(`v1:key${String(i).padStart(18, '0')}`, i % 2 ? free : hourly);
    expect(c.buckets.size).to.equal(100 * 2 + 100);
    clock.advance(61_000); // every free window has ended, no hourly one has
    c.endRound();
    expect(c.keys).to.be.above(100); // one round sweeps a quarter (64 at least)
    for (let r = 0; r < 5; r++) c.endRound();
    expect(c.keys).to.equal(100);
    expect(c.buckets.size).to.equal(100);
    expect(c.totals(clock.now())).to.deep.equal({ ledgers: 100, committed: 100, allowance: 100 * 1000 });
  });

  for (let seed = 1; seed <= 8; seed++) {
    it(`seed ${seed}: admits exactly what a count per window allows; the protocol's fleet of one stays within it`, () => {
      const rand = rng(seed);
      const clock = new FakeClock(1_800_000_000_000 + Math.floor(rand() * 60_000));
      const local = new LocalCounters(clock);
      const bus = new MemoryBus({ shards: 16, roundMs: 25, clock });
      const settings = { nodeId: 'solo', nodeEpoch: 'e1', shards: 16, maxBuckets: 100_000, roundMs: 25, fastPathDeadlineMs: 1, headroom: 1.5, reserveRatio: 0.05, degradedAfterMs: 30_000 };
      const { node } = joinFleet(bus, settings, clock);
      const keys = Array.from({ length: 30 }, (_, i) => `v1:seed${seed}k${String(i).padStart(14, '0')}`);
      // The reference: a count per key, window length and window id; and what the protocol admitted there.
      const exact = new Map<string, number>();
      const fleet = new Map<string, number>();
      let units = 0;
      let nextRound = clock.monotonic() + 25;
      for (let step = 0; step < 8000; step++) {
        clock.advance(Math.floor(rand() * 5));
        while (clock.monotonic() >= nextRound) {
          local.endRound();
          node.endRound();
          nextRound += 25;
        }
        const key = keys[Math.floor(Math.pow(rand(), 2) * keys.length)]!;
        const limits = policy.limitsFor(key, 'none');
        const cost = rand() < 0.1 ? 3 : 1;
        const ids = limits.windows.map((w) => `${key}|${w.windowMs}|${windowIdAt(clock.now(), w.windowMs, phaseOffset(key, w.windowMs))}`);
        const fits = limits.windows.every((w, i) => (exact.get(ids[i]!) ?? 0) + cost <= w.limit);
        if (fits) ids.forEach((id) => exact.set(id, (exact.get(id) ?? 0) + cost));
        expect(local.acquire(key, limits, cost).admitted, `step ${step}`).to.equal(fits);
        if (fits) units += cost;
        const f = node.acquire(key, limits, cost);
        if (f instanceof Promise) expect.fail('a fleet of one answers synchronously');
        if (f.admitted) ids.forEach((id) => fleet.set(id, (fleet.get(id) ?? 0) + cost));
      }
      expect(units).to.be.above(2000);
      for (const [id, n] of fleet) expect(n, id).to.be.at.most(limits(id));
    });
  }

  for (let seed = 1; seed <= 4; seed++) {
    it(`seed ${seed}: keys swept, their slots reused and their limits changed admit exactly what a count per window allows`, () => {
      const rand = rng(100 + seed);
      const clock = new FakeClock(1_800_000_000_000 + Math.floor(rand() * 60_000));
      const c = new LocalCounters(clock, 2);
      const plans = [
        free,
        compilePolicy(demoPolicy({ defaultPlan: 'hour' })).limitsFor('v1:any', 'none'),
        compilePolicy(demoPolicy({ defaultPlan: 'anonymous' })).limitsFor('v1:any', 'none'),
        compilePolicy(demoPolicy({ defaultPlan: 'pro' })).limitsFor('v1:any', 'none'),
      ];
      const keys = Array.from({ length: 400 }, (_, i) => `v1:slot${seed}k${String(i).padStart(14, '0')}`);
      // The reference: a count per key, window length and window id, and each key's limits; a change of
      // limits forgets the counts of window lengths the new limits lack.
      const exact = new Map<string, number>();
      const held = new Map<string, ResolvedLimits>();
      let admittedUnits = 0;
      let swept = 0;
      for (let step = 0; step < 20_000; step++) {
        clock.advance(rand() < 0.002 ? 61_000 : Math.floor(rand() * 8));
        if (step % 10 === 0) {
          const before = c.keys;
          c.endRound();
          swept += before - c.keys;
        }
        const key = keys[Math.floor(Math.pow(rand(), 3) * keys.length)]!;
        let limits = held.get(key) ?? plans[Math.floor(rand() * 3)]!;
        if (rand() < 0.01) limits = plans[Math.floor(rand() * plans.length)]!;
        const was = held.get(key);
        if (was !== undefined && was !== limits) {
          for (const w of was.windows) if (!limits.windows.some((n) => n.windowMs === w.windowMs)) for (const id of exact.keys()) if (id.startsWith(`${key}|${w.windowMs}|`)) exact.delete(id);
        }
        held.set(key, limits);
        const cost = rand() < 0.1 ? 3 : 1;
        const ids = limits.windows.map((w) => `${key}|${w.windowMs}|${windowIdAt(clock.now(), w.windowMs, phaseOffset(key, w.windowMs))}`);
        const fits = limits.windows.every((w, i) => (exact.get(ids[i]!) ?? 0) + cost <= w.limit);
        if (fits) ids.forEach((id) => exact.set(id, (exact.get(id) ?? 0) + cost));
        expect(c.acquire(key, limits, cost).admitted, `step ${step}`).to.equal(fits);
        if (fits) admittedUnits += cost;
        limits.windows.forEach((w, i) => expect(c.windowQuota(key, limits, i)?.left, `step ${step} window ${w.name}`).to.equal(Math.max(0, w.limit - (exact.get(ids[i]!) ?? 0))));
      }
      expect(admittedUnits).to.be.above(5000);
      expect(swept, 'keys forgotten by the sweep').to.be.above(100);
      // Every key held counts as many buckets as its limits have windows.
      let buckets = 0;
      for (const key of keys) {
        const limits = held.get(key);
        if (limits !== undefined && c.windowQuota(key, limits, 0) !== undefined) buckets += limits.windows.length;
      }
      expect(c.buckets.size).to.equal(buckets);
    });
  }

  /** The limit of the window named by a reference id (`key|windowMs|windowId`). */
  function limits(id: string): number {
    const windowMs = Number(id.split('|')[1]);
    return free.windows.find((w) => w.windowMs === windowMs)!.limit;
  }
});

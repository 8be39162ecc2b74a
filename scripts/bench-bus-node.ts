import { randomUUID } from 'node:crypto';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { joinFleet } from '../bus/member.js';
import { RedisBus, type RedisBusStats } from '../bus/redis.js';
import { systemClock } from '../lib/clock.js';
import { compilePolicy } from '../lib/policy.js';
import { phaseOffset, windowIdAt } from '../lib/window.js';

/**
 * One node process of `npm run bench:bus` (see ./bench-bus.ts, which forks it with `--child`): it
 * joins the fleet, offers its share of the load for the run and sends its counts to the parent as a
 * ChildReport. Also the settings, key ids and timing both sides share.
 */

export const WINDOW_MS = 1000;
export const WARM_UP_MS = 2000;
export const OFFERED = 1.2;
const TICK_MS = 5;

export interface ChildReport {
  requests: number;
  fastPath: number;
  fastPathTimeouts: number;
  rtt: { count: number; p50: number; p99: number };
  /** Event-loop delay, ms: how long a ready callback (an ask, an answer) may wait for the loop. */
  loop: { p50: number; p99: number };
  /** CPU time of the node process per second of the run, ms. */
  cpuMsPerS: number;
  bus: RedisBusStats;
  admitted: Record<string, number>;
  offered: Record<string, number>;
  seconds: number;
}

export interface Settings {
  nodes: number;
  keys: number;
  limit: number;
  durationMs: number;
  /** Requests per node per second; by default each node's share of 1.2 × every key's allowance. */
  rate?: number;
  /** Busy-loop processes run beside the fleet (a CPU burner). */
  burners: number;
  /** How asks travel: the direct TCP channel (falling back to Redis) or Redis pub/sub only. */
  transport: 'direct' | 'redis';
  /** The fast path's deadline (`fastPathDeadlineMs`). */
  deadlineMs: number;
  redis?: string;
}

export function keyIdOf(i: number): string {
  return `v1:${String(i).padStart(22, 'b')}`;
}

/** One node: join, offer load for the duration, send the counts to the parent. */
export async function child(s: Settings & { redis: string; index: number; startAt: number }): Promise<void> {
  const nodeId = `bench-${s.index + 1}`;
  const bus = new RedisBus({
    url: s.redis,
    prefix: 'bench',
    busSecret: { versions: [{ version: 'b1', secret: 'bench-bus-secret-0123' }] },
    shards: 64,
    roundMs: 25,
    degradedAfterMs: 30_000,
    ...(s.transport === 'redis' ? { fastPath: false as const } : {}),
  });
  const { node, owner } = joinFleet(
    bus,
    { nodeId, nodeEpoch: randomUUID(), shards: 64, maxBuckets: 50_000, roundMs: 25, fastPathDeadlineMs: s.deadlineMs, headroom: 1.25, reserveRatio: 0.02, degradedAfterMs: 30_000 },
    systemClock,
  );
  const rounds = setInterval(() => {
    node.endRound();
    owner.sweep(Date.now());
  }, 25);
  await bus.ready();
  const policy = compilePolicy({ version: 1, plans: { p: { windows: [{ name: 'w', windowMs: WINDOW_MS, limit: s.limit }] } }, defaultPlan: 'p', anonymousPlan: 'p' });
  const plan = policy.limitsFor(keyIdOf(0), 't');
  const admitted: Record<string, number> = {};
  const offered: Record<string, number> = {};
  const perTick = ((s.rate ?? (s.keys * s.limit * OFFERED) / s.nodes) * TICK_MS) / 1000;
  let owed = 0;
  let next = Math.floor((s.index * s.keys) / s.nodes);
  let requests = 0;
  // An admission counts against the window its bucket was charged in (the node's own clock reading).
  const count = (k: number, at: number, ok: boolean): void => {
    if (!ok || at < s.startAt + WARM_UP_MS) return;
    const w = `${k}|${node.buckets.peek(keyIdOf(k))!.buckets[0]!.windowId}`;
    admitted[w] = (admitted[w] ?? 0) + 1;
  };
  await new Promise((r) => setTimeout(r, Math.max(0, s.startAt - Date.now())));
  const loop = monitorEventLoopDelay({ resolution: 1 });
  let cpu = process.cpuUsage();
  let base: { fastPath: number; timeouts: number; bus: RedisBusStats; rtt: number } | undefined;
  const end = s.startAt + s.durationMs;
  await new Promise<void>((done) => {
    const tick = setInterval(() => {
      const now = Date.now();
      if (base === undefined && now >= s.startAt + WARM_UP_MS) {
        loop.enable();
        cpu = process.cpuUsage();
        base = { fastPath: node.stats.fastPath, timeouts: bus.stats.fastPathTimeouts, bus: structuredClone(bus.stats), rtt: bus.fastPathRtt().count };
        requests = 0;
      }
      if (now >= end) {
        clearInterval(tick);
        done();
        return;
      }
      for (owed += perTick; owed >= 1; owed--) {
        // Every node offers every key its share: uniform traffic.
        const k = next++ % s.keys;
        requests++;
        if (now >= s.startAt + WARM_UP_MS) {
          const w = `${k}|${windowIdAt(now, WINDOW_MS, phaseOffset(keyIdOf(k), WINDOW_MS))}`;
          offered[w] = (offered[w] ?? 0) + 1;
        }
        const r = node.acquire(keyIdOf(k), plan);
        if (r instanceof Promise) void r.then((x) => count(k, now, x.admitted));
        else count(k, now, r.admitted);
      }
    }, TICK_MS);
  });
  const b = base!;
  const stats = structuredClone(bus.stats);
  for (const k of Object.keys(stats) as Array<keyof RedisBusStats>) if (typeof stats[k] === 'number') (stats[k] as number) -= b.bus[k] as number;
  const report: ChildReport = {
    requests,
    fastPath: node.stats.fastPath - b.fastPath,
    fastPathTimeouts: bus.stats.fastPathTimeouts - b.timeouts,
    rtt: bus.fastPathRtt(b.rtt),
    loop: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6 },
    cpuMsPerS: (() => {
      const c = process.cpuUsage(cpu);
      return (c.user + c.system) / 1000 / ((s.durationMs - WARM_UP_MS) / 1000);
    })(),
    bus: stats,
    admitted,
    offered,
    seconds: (s.durationMs - WARM_UP_MS) / 1000,
  };
  clearInterval(rounds);
  process.send!(report);
  await bus.close();
  process.exit(0);
}

import { randomBytes } from 'node:crypto';
import { cpuMs, paced, ticksPerSecond, type Outcome } from './bench-cost-load.js';
import { startCostServer, type CostServer, type CostVariant } from './bench-cost-server.js';
import { startRedis, type RedisProcess } from './redis-server.js';
import { median, round } from './bench-figures.js';

/**
 * CPU time per request at a fixed offered rate: utime + stime of the server process (all its
 * threads, from /proc/<pid>/stat) before and after a paced run, over the requests it answered. What
 * the process does between requests (the limiter's rounds, a fleet member's bus traffic) is charged
 * to them, as it is in production. Variants run in turn within each round, so a noisy spell on the
 * machine hits them alike; each is set against the same round's bare run, and the figures are
 * medians over the rounds.
 *
 * With `besideBare`, each variant instead runs at the same time as bare Express under the same offered
 * rate and is set against that very run, so the two share the machine's state. How busy the machine
 * is moves every process's CPU per request (a server alone on an idle VM pays more a request to wake
 * for each one), and a fleet member never runs alone (its peers and Redis run beside it); run beside
 * another busy server, it also pays more for its own rounds and asks.
 */
export interface CpuOptions {
  /** Offered requests per second (an even, open-loop pace: bench-cost-load.ts). */
  rate: number;
  /** Length of each counted run. */
  seconds: number;
  /** Counted runs per variant, interleaved. */
  rounds: number;
  /** Distinct API keys, in turn. */
  keys: number;
  /** Paced warm-up per server before its first counted run. */
  warmupSeconds: number;
  /** Run each variant at the same time as a bare Express run, and set it against that run. */
  besideBare?: boolean;
  /** This limiter's plan windows, standalone and in the fleet (each at a limit of 1e9); @default [1000, 60000]. */
  windowsMs?: number[];
  /**
   * Where the loaded fleet member writes a V8 CPU profile (`node --cpu-prof`) when it exits, for
   * `node dist/scripts/profile-share.js`. The profiler costs that member CPU: its figures are not
   * comparable with a run without it.
   */
  profileDir?: string;
}

export interface CpuRun {
  usPerRequest: number;
  requests: number;
  achievedRate: number;
  non2xx: number;
}

export interface CpuRow {
  variant: CostVariant;
  /** Median CPU µs per answered request over the rounds. */
  usPerRequest: number | null;
  /** (max − min) / median over the rounds, %. */
  spreadPct: number | null;
  /** Median over the rounds of (this run / the same round's bare run − 1), %: paired, so a slow spell cancels out (`besideBare`: the bare run beside it). */
  overBarePct: number | null;
  /** The same per round. */
  overBarePerRoundPct: number[];
  runs: CpuRun[];
  /** Non-2xx answers, errors and timeouts over all counted runs (nothing should be refused: the limit is 1e9). */
  non2xx: number;
  /**
   * The same over its warm-up. A fleet's falls in its first minute, when the 60 s windows running
   * started before its owners' first blankets: a member's first sight there asks its owner.
   */
  warmupNon2xx: number;
  statuses: Record<string, number>;
  skipped?: string;
  /** Fleet only: CPU µs per request (of the loaded member) spent by each of the two other members. */
  othersUsPerRequest?: number[];
  /**
   * Fleet only: the loaded member's CPU ms per second while it carried no load (median over the
   * rounds, measured over the run just before its own, half a minute after its last): its rounds'
   * work, which any load pays for. Per request at the offered rate: `idleUsPerRequest`.
   */
  idleMsPerSecond?: number;
  idleUsPerRequest?: number;
  stats?: Record<string, unknown> | undefined;
}

export interface CpuResult {
  options: CpuOptions;
  clockTicksPerSecond: number;
  fleet: string;
  rows: CpuRow[];
}

const VARIANTS: CostVariant[] = ['bare', 'noop', 'limiter', 'express-rate-limit', 'rlf-memory', 'fleet'];

interface Target {
  servers: CostServer[];
  row: CpuRow;
}

/** Three fleet members over one Redis (a private redis-server unless REDIS_URL is set); the first is loaded. */
async function startFleet(redis: RedisProcess, windowsMs: number[] | undefined, profileDir: string | undefined): Promise<CostServer[]> {
  const fleet = {
    redisUrl: redis.url,
    keyHashSecret: randomBytes(32).toString('base64url'),
    busSecret: randomBytes(32).toString('base64url'),
    prefix: `bench-cost-${process.pid}-${Date.now()}`,
  };
  const profiled = profileDir === undefined ? {} : { execArgv: ['--expose-gc', '--cpu-prof', `--cpu-prof-dir=${profileDir}`] };
  const started = await Promise.allSettled([1, 2, 3].map((i) => startCostServer({ variant: 'fleet', windowsMs, fleet: { ...fleet, nodeId: `cost-${i}` } }, i === 1 ? profiled : {})));
  const servers = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    await Promise.all(servers.map((s) => s.stop()));
    throw (failed as PromiseRejectedResult).reason;
  }
  return servers;
}

export async function cpuPerRequest(o: CpuOptions, log: (m: string) => void): Promise<CpuResult> {
  const targets: Target[] = [];
  let redis: RedisProcess | undefined;
  const empty = (variant: CostVariant, skipped?: string): CpuRow => ({
    variant,
    usPerRequest: null,
    spreadPct: null,
    overBarePct: null,
    overBarePerRoundPct: [],
    runs: [],
    non2xx: 0,
    warmupNon2xx: 0,
    statuses: {},
    ...(skipped ? { skipped } : {}),
  });
  try {
    for (const variant of VARIANTS) {
      if (variant !== 'fleet') {
        targets.push({ servers: [await startCostServer({ variant, windowsMs: o.windowsMs })], row: empty(variant) });
        continue;
      }
      try {
        redis = await startRedis();
        log(`cpu: starting a fleet of 3 over ${redis.external ? 'REDIS_URL' : 'a private redis-server'}`);
        if (o.profileDir !== undefined) log(`cpu: the loaded member writes a CPU profile into ${o.profileDir}; its CPU figures include the profiler's`);
        targets.push({ servers: await startFleet(redis, o.windowsMs, o.profileDir), row: { ...empty(variant), othersUsPerRequest: [] } });
      } catch (err) {
        const reason = `fleet over Redis could not start: ${(err as Error).message.split('\n')[0]}`;
        log(`cpu: skipping fleet: ${reason}`);
        targets.push({ servers: [], row: empty(variant, reason) });
      }
    }
    const prefix = 'cpu-key-';
    for (const t of targets) {
      if (t.servers.length === 0) continue;
      log(`cpu: warm-up ${t.row.variant}: ${o.warmupSeconds} s at ${o.rate}/s`);
      t.row.warmupNon2xx = (await paced(t.servers[0]!.port, o.rate, o.warmupSeconds, o.keys, prefix)).non2xx;
    }
    const others: number[][] = [[], []];
    // The loaded member, unloaded: measured over the run of the variant before its own.
    const member = targets.find((t) => t.row.variant === 'fleet')?.servers[0];
    const beforeFleet = targets[targets.findIndex((t) => t.row.variant === 'fleet') - 1];
    const idle: number[] = [];
    const bare = targets[0]!;
    const beside = o.besideBare === true;
    /** A paced run of `t`, with one of bare Express at the same time when `beside`: what each answered, the CPU each of their servers spent. */
    const run = async (t: Target): Promise<{ outs: Outcome[]; spent: number[] }> => {
      const paired = beside ? [t, bare] : [t];
      const servers = paired.flatMap((x) => x.servers);
      const before = servers.map((s) => cpuMs(s.pid));
      const outs = await Promise.all(paired.map((x) => paced(x.servers[0]!.port, o.rate, o.seconds, o.keys, prefix)));
      return { outs, spent: servers.map((s, i) => cpuMs(s.pid) - before[i]!) };
    };
    const record = (t: Target, out: Outcome, ms: number): number => {
      const usPerRequest = round((ms * 1000) / Math.max(1, out.requests));
      t.row.runs.push({ usPerRequest, requests: out.requests, achievedRate: round(out.requests / (out.ms / 1000), 0), non2xx: out.non2xx });
      t.row.non2xx += out.non2xx;
      for (const [k, v] of Object.entries(out.statuses)) t.row.statuses[k] = (t.row.statuses[k] ?? 0) + v;
      return usPerRequest;
    };
    for (let r = 1; r <= o.rounds; r++) {
      let bareUs = 0;
      for (const t of targets) {
        if (t.servers.length === 0 || (beside && t === bare)) continue;
        const memberBefore = member === undefined || t !== beforeFleet ? undefined : { cpu: cpuMs(member.pid), at: performance.now() };
        const { outs, spent } = await run(t);
        if (memberBefore !== undefined) idle.push(((cpuMs(member!.pid) - memberBefore.cpu) * 1000) / (performance.now() - memberBefore.at));
        const usPerRequest = record(t, outs[0]!, spent[0]!);
        if (beside) bareUs = record(bare, outs[1]!, spent.at(-1)!);
        else if (t === bare) bareUs = usPerRequest;
        t.row.overBarePerRoundPct.push(round((usPerRequest / bareUs - 1) * 100, 1));
        spent.slice(1, t.servers.length).forEach((ms, i) => others[i]!.push((ms * 1000) / Math.max(1, outs[0]!.requests)));
        log(`cpu: round ${r}/${o.rounds}: ${t.row.variant} ${usPerRequest} us/request${beside ? ` beside bare ${bareUs}` : ''}, ${outs[0]!.requests} requests, non-2xx ${outs[0]!.non2xx}`);
      }
    }
    if (beside) bare.row.overBarePerRoundPct = bare.row.runs.map(() => 0);
    for (const t of targets) {
      const us = t.row.runs.map((x) => x.usPerRequest);
      if (us.length === 0) continue;
      t.row.overBarePct = round(median(t.row.overBarePerRoundPct), 1);
      const m = median(us);
      t.row.usPerRequest = round(m);
      t.row.spreadPct = round(((Math.max(...us) - Math.min(...us)) / m) * 100, 1);
      if (t.row.variant === 'fleet') {
        t.row.othersUsPerRequest = others.map((xs) => round(median(xs)));
        if (idle.length > 0) {
          t.row.idleMsPerSecond = round(median(idle), 1);
          t.row.idleUsPerRequest = round((median(idle) * 1000) / o.rate);
        }
      }
      if (t.row.variant === 'limiter' || t.row.variant === 'fleet') t.row.stats = await t.servers[0]!.stats().catch(() => undefined);
    }
    return {
      options: o,
      clockTicksPerSecond: ticksPerSecond(),
      rows: targets.map((t) => t.row),
      fleet:
        `3 processes running rateLimiter({ redis }) over ${redis === undefined ? '(not started)' : redis.external ? 'REDIS_URL' : 'a private redis-server'}, ` +
        `default timing; load on the first only, ${o.keys} keys in turn; its CPU includes its bus work (owning about a third of the shards, asking the others for the rest)`,
    };
  } finally {
    await Promise.all(targets.flatMap((t) => t.servers.map((s) => s.stop())));
    await redis?.stop();
  }
}

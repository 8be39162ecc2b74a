import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { quantile } from '../lib/quantile.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../lib/window.js';
import { child, keyIdOf, OFFERED, WARM_UP_MS, WINDOW_MS, type ChildReport, type Settings } from './bench-bus-node.js';
import { startBurners } from './burners.js';
import { startRedis } from './redis-server.js';

/**
 * `npm run bench:bus [-- --nodes 3 --keys 1000 --limit 10 --duration 12 --redis URL]`: the leasing
 * protocol on real processes over a real Redis. Each node process joins the fleet (RedisBus, 64
 * shards, T = 25 ms) and offers its share of 1.2 × the allowance of every key (1 s windows), or
 * `--rate` requests per second, calling the decision path directly (no HTTP, so the figures are the
 * protocol's, not Express's). `--transport redis` sends asks over Redis pub/sub only, `--burners N`
 * runs N busy loops beside the fleet, `--deadline-ms` sets the fast path's deadline. Reports the
 * fast-path share and round trip (N3), each node's event-loop delay and CPU, bus messages per node
 * per second, Redis commands per second, and over/under-admission per key and window (against the
 * allowance, and against min(offered, allowance)). Without --redis it starts a private
 * redis-server. The first 2 s are warm-up. This file is the parent (options, fork, totals, report);
 * each node process is this script run with `--child`, whose work is in ./bench-bus-node.ts.
 */

const USAGE =
  'usage: npm run bench:bus -- [--nodes 3] [--keys 1000] [--limit 10] [--duration 12] [--rate REQ_PER_NODE_PER_S] [--burners 0] [--transport direct|redis] [--deadline-ms 1] [--redis redis://host:port]';

function percentile(values: number[], q: number): number {
  return quantile(
    [...values].sort((a, b) => a - b),
    q,
  );
}

async function parent(s: Settings): Promise<void> {
  const own = s.redis === undefined ? await startRedis() : undefined;
  const url = s.redis ?? own!.url;
  const raw = new Redis(url);
  await raw.flushdb();
  const statsBefore = await commandStats(raw);
  const startAt = Date.now() + 1500;
  const burners = startBurners(s.burners, s.durationMs + 1500);
  const script = fileURLToPath(import.meta.url);
  const reports = await Promise.all(
    Array.from(
      { length: s.nodes },
      (_, index) =>
        new Promise<ChildReport>((resolve, reject) => {
          const c = fork(script, ['--child', JSON.stringify({ ...s, redis: url, index, startAt })], { stdio: 'inherit' });
          c.once('message', (m) => resolve(m as ChildReport));
          c.once('exit', (code) => code !== 0 && reject(new Error(`node ${index + 1} exited with ${code}`)));
        }),
    ),
  );
  for (const b of burners) b.kill();
  const statsAfter = await commandStats(raw);
  raw.disconnect();
  await own?.stop();

  // Windows wholly inside the measured period, per key: admitted against the allowance.
  const admitted = new Map<string, number>();
  const offered = new Map<string, number>();
  for (const r of reports) for (const [w, n] of Object.entries(r.admitted)) admitted.set(w, (admitted.get(w) ?? 0) + n);
  for (const r of reports) for (const [w, n] of Object.entries(r.offered)) offered.set(w, (offered.get(w) ?? 0) + n);
  const from = startAt + WARM_UP_MS;
  const to = startAt + s.durationMs;
  let windows = 0;
  let over = 0;
  let under = 0;
  let allowed = 0;
  for (let k = 0; k < s.keys; k++) {
    const off = phaseOffset(keyIdOf(k), WINDOW_MS);
    for (let w = windowIdAt(from, WINDOW_MS, off) + 1; windowEndMs(w, WINDOW_MS, off) <= to; w++) {
      const a = admitted.get(`${k}|${w}`) ?? 0;
      const due = Math.min(s.limit, offered.get(`${k}|${w}`) ?? 0);
      windows++;
      allowed += due;
      over += Math.max(0, a - s.limit);
      under += Math.max(0, due - a);
    }
  }
  const seconds = reports[0]!.seconds;
  const sum = (f: (r: ChildReport) => number): number => reports.reduce((a, r) => a + f(r), 0);
  const requests = sum((r) => r.requests);
  const messages = sum((r) => r.bus.reportsSent + r.bus.asksSent + r.bus.messagesSent + r.bus.snapshots);
  const rounds = sum((r) => r.bus.rounds);
  const totalCommands = Object.keys(statsAfter).reduce((a, c) => a + statsAfter[c]! - (statsBefore[c] ?? 0), 0);
  const pct = (x: number, of: number): string => (of === 0 ? '-' : ((100 * x) / of).toFixed(3));
  const rows: Array<[string, string]> = [
    ['nodes × keys', `${s.nodes} × ${s.keys} (limit ${s.limit} per 1 s window, ${s.rate === undefined ? `offered ${OFFERED}×` : `${s.rate} requests per node per s`})`],
    ['CPU burners beside', String(s.burners)],
    [
      'fast-path transport',
      s.transport === 'direct'
        ? `direct TCP (${pct(
            sum((r) => r.bus.asksDirect),
            sum((r) => r.bus.asksSent),
          )} % of asks; the rest over Redis)`
        : 'Redis pub/sub',
    ],
    ['requests per node per s', (requests / s.nodes / seconds).toFixed(0)],
    [
      'fast path % of requests',
      pct(
        sum((r) => r.fastPath),
        requests,
      ),
    ],
    [
      `fast-path asks that missed ${s.deadlineMs} ms`,
      pct(
        sum((r) => r.fastPathTimeouts),
        sum((r) => r.bus.asksSent),
      ),
    ],
    [
      'fast-path rtt p50 / p99 ms',
      `${percentile(
        reports.map((r) => r.rtt.p50),
        0.5,
      ).toFixed(3)} / ${Math.max(...reports.map((r) => r.rtt.p99)).toFixed(3)}`,
    ],
    [
      'event-loop delay p50 / p99 ms',
      `${percentile(
        reports.map((r) => r.loop.p50),
        0.5,
      ).toFixed(3)} / ${Math.max(...reports.map((r) => r.loop.p99)).toFixed(3)}`,
    ],
    [
      'CPU per node, ms per s',
      percentile(
        reports.map((r) => r.cpuMsPerS),
        0.5,
      ).toFixed(0),
    ],
    ['bus messages per node per s', (messages / s.nodes / seconds).toFixed(0)],
    ['  of which report entries', (sum((r) => r.bus.reportsSent) / s.nodes / seconds).toFixed(0)],
    ['control rounds per node per s', (rounds / s.nodes / seconds).toFixed(1)],
    ['Redis commands per s (whole run)', (totalCommands / ((s.durationMs + 1500) / 1000)).toFixed(0)],
    ['windows measured', String(windows)],
    ['over-admission % of allowance', pct(over, windows * s.limit)],
    ['under-admission % of min(offered, allowance)', pct(under, allowed)],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  process.stdout.write(
    [
      `bus benchmark: real processes over Redis (${s.redis === undefined ? 'private redis-server' : url}), ${s.durationMs / 1000} s, first 2 s warm-up`,
      `command: npm run bench:bus -- ${process.argv.slice(2).join(' ')}`,
      '',
      ...rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`),
      '',
    ].join('\n'),
  );
}

/** Total calls per command from INFO commandstats. */
async function commandStats(r: Redis): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const line of (await r.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

function main(): void {
  let v;
  try {
    v = parseArgs({
      options: {
        nodes: { type: 'string' },
        keys: { type: 'string' },
        limit: { type: 'string' },
        duration: { type: 'string' },
        rate: { type: 'string' },
        burners: { type: 'string' },
        transport: { type: 'string' },
        'deadline-ms': { type: 'string' },
        redis: { type: 'string' },
        child: { type: 'string' },
      },
      strict: true,
    }).values;
  } catch (err) {
    process.stderr.write(`bench:bus: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  if (v.child !== undefined) return void child(JSON.parse(v.child));
  const usage = (msg: string): never => {
    process.stderr.write(`bench:bus: ${msg}\n${USAGE}\n`);
    process.exit(2);
  };
  const int = (name: string, raw: string | undefined, dflt: number, min: number, max: number): number => {
    const n = raw === undefined ? dflt : Number(raw);
    if (!Number.isInteger(n) || n < min || n > max) {
      process.stderr.write(`bench:bus: --${name} must be an integer from ${min} to ${max}, got "${raw}"\n${USAGE}\n`);
      process.exit(2);
    }
    return n;
  };
  const s: Settings = {
    nodes: int('nodes', v.nodes, 3, 1, 16),
    keys: int('keys', v.keys, 1000, 1, 100_000),
    limit: int('limit', v.limit, 10, 1, 1_000_000),
    durationMs: int('duration', v.duration, 12, 4, 600) * 1000,
    ...(v.rate !== undefined ? { rate: int('rate', v.rate, 0, 1, 1_000_000) } : {}),
    burners: int('burners', v.burners, 0, 0, 16),
    deadlineMs: int('deadline-ms', v['deadline-ms'], 1, 1, 100),
    transport: v.transport === undefined || v.transport === 'direct' ? 'direct' : v.transport === 'redis' ? 'redis' : usage(`--transport must be direct or redis, got "${v.transport}"`),
    ...(v.redis !== undefined ? { redis: v.redis } : {}),
  };
  parent(s).catch((err: unknown) => {
    process.stderr.write(`bench:bus: ${(err as Error).message}\n`);
    process.exit(1);
  });
}

main();

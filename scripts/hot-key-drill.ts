import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fnv1a32 } from '../lib/hash.js';
import { KeyHasher } from '../lib/key-id.js';
import { startFleet, type Fleet } from './fleet.js';
import { startRedis, type RedisProcess } from './redis-server.js';
import { markdownTable } from './markdown-table.js';

/**
 * `npm run drill:hot-key [-- --nodes 3 --seconds 20 --hot-rate 1000 --co-tenants 500 --co-rate 0.3]`:
 * hot-key isolation on a real fleet. Demo gateways (as `npm run cluster` starts them) over a private
 * redis-server, every key on a 10-per-second plan: `co-tenants` keys chosen to share one key's phase
 * and shard in every window, each sent `co-rate` requests a second over random gateways, first alone
 * (baseline), then beside that key at `hot-rate` (the storm). After each phase it reads the gateways'
 * fold-age histograms (`fleet_ratelimit_report_fold_age_seconds`) and prints, per phase, p50 and p99
 * fold age of the owners' top keys and of the others, and the worst event-loop lag; exit 1 when p99
 * of the others in the storm is over two rounds.
 */
const USAGE = 'usage: npm run drill:hot-key -- [--nodes 3] [--seconds 20] [--hot-rate 1000] [--co-tenants 500] [--co-rate 0.3]';
const LIMIT = 10;
const ROUND_MS = 25;
/** A 1 s window's phase and one of 64 shards: keys whose hashes agree modulo lcm(1000, 64) share both. */
const PERIOD = 8000;

interface Options {
  nodes: number;
  seconds: number;
  hotRate: number;
  coTenants: number;
  coRate: number;
}

function options(argv: readonly string[]): Options | { problems: string[] } {
  const flags = { nodes: [3, 1, 8, true], seconds: [20, 5, 600, true], 'hot-rate': [1000, 1, 20_000, false], 'co-tenants': [500, 1, 5000, true], 'co-rate': [0.3, 0.01, 10, false] } as const;
  let values: Record<string, string | undefined>;
  try {
    ({ values } = parseArgs({ args: [...argv], strict: true, options: Object.fromEntries(Object.keys(flags).map((k) => [k, { type: 'string' }])) }));
  } catch (err) {
    return { problems: [(err as Error).message] };
  }
  const problems: string[] = [];
  const read = (name: keyof typeof flags): number => {
    const [fallback, min, max, whole] = flags[name];
    const text = values[name];
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!Number.isFinite(n) || n < min || n > max || (whole && !Number.isInteger(n))) problems.push(`--${name} must be a ${whole ? 'whole ' : ''}number from ${min} to ${max}, got "${text}"`);
    return n;
  };
  const o = { nodes: read('nodes'), seconds: read('seconds'), hotRate: read('hot-rate'), coTenants: read('co-tenants'), coRate: read('co-rate') };
  return problems.length ? { problems } : o;
}

/** The demo configuration: the hot key and its co-tenants (raw keys; the gateways hash them). */
function drillConfig(secret: string, coTenants: number): { file: object; hot: string; co: string[] } {
  const hasher = new KeyHasher([{ version: 'v1', secret }], 'v1');
  const hot = 'hot-key-drill';
  const want = fnv1a32(hasher.hash(hot)) % PERIOD;
  const co: string[] = [];
  for (let i = 0; co.length < coTenants; i++) if (fnv1a32(hasher.hash(`co-tenant-${i}`)) % PERIOD === want) co.push(`co-tenant-${i}`);
  const demoKeys = Object.fromEntries([[hot, { tenant: 'hot', plan: 'tight' }], ...co.map((k) => [k, { tenant: 'co', plan: 'tight' }])]);
  const policy = {
    version: 1,
    defaultPlan: 'tight',
    anonymousPlan: 'tight',
    plans: { tight: { windows: [{ name: 'burst', limit: LIMIT, windowMs: 1000 }] } },
    routeClasses: { default: { failMode: 'open' } },
    capacity: { nodeAdmissionsPerSecond: 1_000_000, tenantShare: 1 },
  };
  return { file: { demoKeys, policy, backstop: { perKeyLimit: 1_000_000, perKeyWindowMs: 1000, nodeCeilingPerSecond: 1_000_000 } }, hot, co };
}

type Series = Map<string, number>;

/** Every gateway's fold-age samples (`keys|kind|le` → value, summed) and its event-loop lag now. */
async function scrape(fleet: Fleet): Promise<{ ages: Series; lagMs: number[] }> {
  const ages: Series = new Map();
  const lagMs: number[] = [];
  for (const node of fleet.nodes) {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    for (const line of text.split('\n')) {
      const m = /^fleet_ratelimit_report_fold_age_seconds_(bucket|count)\{(?:le="([^"]+)",)?keys="(\w+)",node="[^"]*"\} (\S+)$/.exec(line);
      if (m) ages.set(`${m[3]}|${m[1]}|${m[2] ?? ''}`, (ages.get(`${m[3]}|${m[1]}|${m[2] ?? ''}`) ?? 0) + Number(m[4]));
      const lag = /^fleet_ratelimit_event_loop_lag_seconds\{node="[^"]*"\} (\S+)$/.exec(line);
      if (lag) lagMs.push(Math.round(Number(lag[1]) * 1000));
    }
  }
  return { ages, lagMs };
}

/** A quantile of a histogram's change between two scrapes, interpolated within its bucket (ms). */
function quantileMs(before: Series, after: Series, keys: string, q: number): { count: number; ms: number } {
  const d = (k: string): number => (after.get(k) ?? 0) - (before.get(k) ?? 0);
  const count = d(`${keys}|count|`);
  const bounds = [...after.keys()].filter((k) => k.startsWith(`${keys}|bucket|`) && !k.endsWith('+Inf')).map((k) => Number(k.split('|')[2]));
  bounds.sort((a, b) => a - b);
  let prev = 0;
  let prevLe = 0;
  for (const le of bounds) {
    const c = d(`${keys}|bucket|${le}`);
    if (c >= q * count) return { count, ms: 1000 * (prevLe + ((le - prevLe) * (q * count - prev)) / Math.max(1, c - prev)) };
    [prev, prevLe] = [c, le];
  }
  return { count, ms: Number.POSITIVE_INFINITY };
}

/** Sends the phase's traffic for `seconds`: each key Poisson-free, evenly paced, to random gateways. */
async function drive(fleet: Fleet, o: Options, keys: { hot: string; co: string[] }, hot: boolean): Promise<Record<string, number>> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const status: Record<string, number> = {};
  let inflight = 0;
  const send = (key: string): void => {
    if (inflight > 512) return void (status.skipped = (status.skipped ?? 0) + 1);
    inflight++;
    const url = new URL(fleet.nodes[Math.floor(Math.random() * fleet.nodes.length)]!.url);
    const done = (code: string): void => {
      inflight--;
      status[code] = (status[code] ?? 0) + 1;
    };
    http
      .get({ host: url.hostname, port: url.port, path: '/api/drill', headers: { 'x-api-key': key }, agent }, (res) => res.resume().on('end', () => done(String(res.statusCode))))
      .on('error', () => done('error'));
  };
  let hotDue = 0;
  let coDue = 0;
  const start = Date.now();
  await new Promise<void>((resolve) => {
    const t = setInterval(() => {
      hotDue += hot ? o.hotRate / 200 : 0;
      coDue += (o.coRate * keys.co.length) / 200;
      for (; hotDue >= 1; hotDue--) send(keys.hot);
      for (; coDue >= 1; coDue--) send(keys.co[Math.floor(Math.random() * keys.co.length)]!);
      if (Date.now() - start >= o.seconds * 1000) resolve(void clearInterval(t));
    }, 5);
  });
  await new Promise((r) => setTimeout(r, 500));
  agent.destroy();
  return status;
}

async function run(o: Options, started: { redis?: RedisProcess; fleet?: Fleet; dir?: string }): Promise<boolean> {
  if (process.env.REDIS_URL) throw new Error('the drill starts a redis-server of its own; unset REDIS_URL');
  const secret = randomBytes(32).toString('base64url');
  process.stdout.write(`choosing ${o.coTenants} co-tenant keys on the hot key's phase and shard…\n`);
  const config = drillConfig(secret, o.coTenants);
  started.dir = mkdtempSync(path.join(tmpdir(), 'drill-hot-key-'));
  const file = path.join(started.dir, 'policy.json');
  writeFileSync(file, JSON.stringify(config.file));
  started.redis = await startRedis();
  started.fleet = await startFleet({ nodes: o.nodes, redisUrl: started.redis.url, env: { POLICY_FILE: file, KEY_HASH_SECRET: secret, LOG_LEVEL: 'warn' } });
  const rows: string[][] = [];
  let stormOtherRounds = Number.POSITIVE_INFINITY;
  for (const phase of ['baseline', 'storm'] as const) {
    const before = await scrape(started.fleet);
    const status = await drive(started.fleet, o, config, phase === 'storm');
    const after = await scrape(started.fleet);
    const q = (keys: string, p: number): { count: number; ms: number } => quantileMs(before.ages, after.ages, keys, p);
    const [other50, other99, top99] = [q('other', 0.5), q('other', 0.99), q('top', 0.99)];
    if (phase === 'storm') stormOtherRounds = other99.ms / ROUND_MS;
    rows.push([
      phase,
      `${Object.values(status).reduce((a, b) => a + b, 0)} (${Object.entries(status)
        .map(([k, v]) => `${k}: ${v}`)
        .join(', ')})`,
      String(other99.count),
      `${other50.ms.toFixed(1)} / ${other99.ms.toFixed(1)} (${(other99.ms / ROUND_MS).toFixed(2)} rounds)`,
      `${top99.ms.toFixed(1)} (${top99.count} reports)`,
      after.lagMs.join(' / '),
    ]);
  }
  const head = ['phase', 'requests (by status)', 'other reports folded', 'other fold age p50 / p99 ms', 'top p99 ms', 'worst loop lag ms per gateway'];
  process.stdout.write(
    [
      '',
      `hot-key drill: ${o.nodes} gateways over Redis; ${o.coTenants} co-tenant keys at ${o.coRate}/s on the hot key's shard, limit ${LIMIT}/s each; storm: the hot key at ${o.hotRate}/s (${o.hotRate / LIMIT}× its limit); ${o.seconds} s a phase`,
      `command: npm run drill:hot-key -- ${process.argv.slice(2).join(' ')}`,
      '',
      ...markdownTable(head, rows),
      '',
      `storm: p99 fold age of keys outside the owners' top keys ${stormOtherRounds.toFixed(2)} rounds (target ≤ 2)${stormOtherRounds <= 2 ? '' : ': missed; compare the loop lag (a starved host delays every fold, hot key or not)'}`,
      '',
    ].join('\n'),
  );
  return stormOtherRounds <= 2;
}

async function main(): Promise<void> {
  const o = options(process.argv.slice(2));
  if ('problems' in o) {
    process.stderr.write(`drill:hot-key: ${o.problems.join('\ndrill:hot-key: ')}\n${USAGE}\n`);
    process.exit(2);
  }
  const started: { redis?: RedisProcess; fleet?: Fleet; dir?: string } = {};
  let releasing: Promise<void> | undefined;
  const release = (): Promise<void> =>
    (releasing ??= (async () => {
      await started.fleet?.stop();
      await started.redis?.stop();
      if (started.dir) rmSync(started.dir, { recursive: true, force: true });
    })());
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => void release().finally(() => process.exit(130)));
  let ok = false;
  try {
    ok = await run(o, started);
  } catch (err) {
    process.stderr.write(`drill:hot-key: ${(err as Error).message}\n`);
  } finally {
    await release();
  }
  process.exit(ok ? 0 : 1);
}

void main();

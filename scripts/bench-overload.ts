import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
// @ts-expect-error -- autocannon ships no type declarations and @types/autocannon is not installed.
import autocannon from 'autocannon';
import { startBurners } from './burners.js';
import { startFleet } from './fleet.js';
import { startRedis } from './redis-server.js';

/**
 * `npm run bench:overload [-- --rate 1500 --keys 5000 --seconds 30 --burners 0]`: three demo gateways
 * over a private redis-server, one of them offered `rate` requests a second over `keys` API keys in
 * turn (key i mod keys), so each key sends rate/keys a second: far under its plan (free: 10 per 1 s,
 * 100 per 60 s; pro: more), and every refusal is a false one. Redis and the peers stay healthy; the
 * loaded node must keep enforcing, never degraded, never failing open. Prints one table; the node's
 * event-loop stall and lag show how overloaded it was.
 */

const USAGE = 'usage: npm run bench:overload -- [--rate 1500] [--keys 5000] [--seconds 30] [--burners 0]';

interface CannonResult {
  requests: { average: number };
  latency: { p50: number; p99: number };
  statusCodeStats: Record<string, { count: number }>;
  errors: number;
  timeouts: number;
}
const cannon = autocannon as (opts: Record<string, unknown>) => Promise<CannonResult>;

function count(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  const n = raw === undefined ? fallback : Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer from ${min} to ${max}, got "${raw}"\n${USAGE}`);
  return n;
}

/** A demo policy file whose key table is `keys` generated keys, half on each demo plan, 50 tenants. */
function policyFile(dir: string, keys: number): string {
  const demo = JSON.parse(readFileSync(fileURLToPath(new URL('../../demo/policy.json', import.meta.url)), 'utf8')) as { demoKeys: Record<string, unknown> };
  demo.demoKeys = {};
  for (let i = 0; i < keys; i++) demo.demoKeys[keyName(i)] = { tenant: `tenant-${i % 50}`, plan: i % 2 === 0 ? 'free' : 'pro' };
  const file = path.join(dir, 'policy.json');
  writeFileSync(file, JSON.stringify(demo));
  return file;
}

const keyName = (i: number): string => `overload-key-${String(i).padStart(6, '0')}`;

/** One series of a node's /metrics, summed over the label sets that include `label` (e.g. `class="fail_open"`). */
function metric(text: string, name: string, label = ''): number {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))) if (m[1]!.includes(label)) sum += Number(m[2]);
  return sum;
}

async function main(): Promise<void> {
  let v;
  try {
    v = parseArgs({ options: { rate: { type: 'string' }, keys: { type: 'string' }, seconds: { type: 'string' }, burners: { type: 'string' } }, strict: true }).values;
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${USAGE}`, { cause: err });
  }
  const rate = count('rate', v.rate, 1500, 1, 100_000);
  const keys = count('keys', v.keys, 5000, 1, 1_000_000);
  const seconds = count('seconds', v.seconds, 30, 1, 3600);
  const burners = count('burners', v.burners, 0, 0, 64);
  // Under a third of the free plan's 100 per minute per key, and well under its 10 per second.
  if ((rate / keys) * 60 > 33) throw new Error(`--keys must be at least ${Math.ceil((rate * 60) / 33)} at ${rate}/s, so every key stays far under its plan\n${USAGE}`);
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-overload-'));
  const redis = await startRedis();
  const fleet = await startFleet({ nodes: 3, redisUrl: redis.url, env: { POLICY_FILE: policyFile(dir, keys), LOG_LEVEL: 'warn' } });
  const hogs = startBurners(burners, (seconds + 30) * 1000);
  const target = fleet.nodes[0]!;
  try {
    await new Promise((r) => setTimeout(r, 2000)); // every node ready and warm
    const read = async (): Promise<string> => (await fetch(`${target.url}/metrics`)).text();
    const before = await read();
    let degradedSamples = 0;
    let worstLag = 0;
    const sampler = setInterval(() => {
      void read().then(
        (t) => {
          degradedSamples += metric(t, 'fleet_ratelimit_degraded');
          worstLag = Math.max(worstLag, metric(t, 'fleet_ratelimit_event_loop_lag_seconds'));
        },
        () => undefined,
      );
    }, 1000);
    let next = 0;
    const result = await cannon({
      url: `${target.url}/api/hello`,
      connections: 100,
      duration: seconds,
      overallRate: rate,
      requests: [{ setupRequest: (req: { headers?: Record<string, string> }) => ({ ...req, headers: { 'x-api-key': keyName(next++ % keys) } }) }],
    });
    clearInterval(sampler);
    const after = await read();
    const delta = (name: string, label?: string): number => metric(after, name, label) - metric(before, name, label);
    const codes = result.statusCodeStats;
    const other =
      Object.entries(codes)
        .filter(([c]) => c !== '200' && c !== '429')
        .map(([c, s]) => `${c}×${s.count}`)
        .join(' ') || '0';
    process.stdout.write(
      [
        `three gateway processes over a private redis-server; node 1 offered ${rate}/s for ${seconds} s over ${keys} keys in turn (${((rate / keys) * 60).toFixed(1)} per key per minute: every refusal is a false one), ${burners} busy loops beside`,
        `command: npm run bench:overload -- ${process.argv.slice(2).join(' ')}`,
        '',
        '| achieved req/s | p50 / p99 ms | admitted | refused (429) | other | fail-open | degraded (s sampled) | self-grants | asks | asks missed | loop stalled s | worst loop lag ms |',
        '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
        `| ${result.requests.average.toFixed(0)} | ${result.latency.p50} / ${result.latency.p99} | ${codes['200']?.count ?? 0} | ${codes['429']?.count ?? 0} | ${other}${result.errors + result.timeouts > 0 ? ` (+${result.errors} errors, ${result.timeouts} timeouts)` : ''} | ${delta('fleet_ratelimit_decisions_total', 'class="fail_open"')} | ${degradedSamples} | ${delta('fleet_ratelimit_self_grants_total')} | ${delta('fleet_ratelimit_fast_path_total')} | ${delta('fleet_ratelimit_fast_path_timeouts_total')} | ${delta('fleet_ratelimit_event_loop_stalled_seconds_total').toFixed(1)} | ${(worstLag * 1000).toFixed(0)} |`,
        '',
      ].join('\n'),
    );
  } finally {
    for (const h of hogs) h.kill('SIGKILL');
    await fleet.stop();
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:overload: ${(err as Error).message}\n`);
  process.exit(1);
});

import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
// @ts-expect-error -- autocannon ships no type declarations and @types/autocannon is not installed.
import autocannon from 'autocannon';
import { COST_OPTIONS, COST_USAGE, costFlags, costTargets, measureCost, renderCost, type CostFlags } from './bench-cost.js';
import { memoryFootprints } from './bench-memory.js';
import { micro, MICRO, MICRO_REDIS, renderMicro } from './bench-micro.js';
import { startServer, stopAllServers, stopServer, VARIANTS, type Variant } from './bench-server.js';
import { median, round } from './bench-figures.js';

/**
 * `npm run bench [-- flags]`: HTTP overhead against peers (interleaved bare/variant pairs, one server
 * process per variant), the in-process decision cost (`bench-micro.ts`), and heap per bucket, checked
 * against targets.
 * Progress goes to stderr; stdout carries only the report (or, with --json, one JSON object).
 */

const PEERS = VARIANTS.filter((v) => v !== 'bare');
const USAGE = `usage: node --expose-gc dist/scripts/bench.js [--json] [--duration S] [--pairs N] [--connections C]
       [--only ${PEERS.join(',')}] [--skip-http]
${COST_USAGE}`;
const KEYS = 1000;
const MEMORY_KEYS = 50_000;
const TARGETS = { ratioToBare: 0.95, decisionP99Us: 50, mbFor50kBuckets: 16 };

interface Flags {
  help: boolean;
  json: boolean;
  duration: number;
  pairs: number;
  connections: number;
  only: Variant[];
  skipHttp: boolean;
  cost: CostFlags;
}
interface Run {
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
}
interface HttpRow {
  reqPerSec: number | null;
  ratioToBare: number | null;
  p50Ms: number | null;
  p99Ms: number | null;
  /** Non-2xx answers plus errors and timeouts over the counted runs: must be 0, every request is admitted. */
  non2xx: number;
  skipped?: string;
  server?: unknown;
}
interface CannonResult {
  requests: { total: number };
  duration: number;
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
  timeouts: number;
}

class UsageError extends Error {}
const cannon = autocannon as (opts: Record<string, unknown>) => Promise<CannonResult>;
const log = (msg: string): void => void process.stderr.write(`${msg}\n`);
const key = (i: number): string => `bench-key-${i}`;

function parseFlags(argv: string[]): Flags {
  const options = {
    json: { type: 'boolean' },
    'skip-http': { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
    duration: { type: 'string' },
    pairs: { type: 'string' },
    connections: { type: 'string' },
    only: { type: 'string' },
    ...COST_OPTIONS,
  } as const;
  let v;
  try {
    v = parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const num = (name: string, raw: string | undefined, dflt: number, min: number, max: number, int: boolean): number => {
    const n = raw === undefined ? dflt : Number(raw);
    if (raw?.trim() === '' || !Number.isFinite(n) || n < min || n > max || (int && !Number.isInteger(n))) {
      throw new UsageError(`--${name} must be ${int ? 'an integer' : 'a number'} from ${min} to ${max}, got "${raw}"`);
    }
    return n;
  };
  const only = v.only === undefined ? PEERS : v.only.split(',').map((s) => s.trim());
  const unknown = only.find((name) => !(PEERS as string[]).includes(name));
  if (unknown !== undefined) {
    throw new UsageError(`--only: unknown variant "${unknown}" (choose from ${PEERS.join(', ')}; bare always runs as the reference)`);
  }
  if (v['skip-http'] && v.only !== undefined) throw new UsageError('--only selects HTTP variants: it cannot be combined with --skip-http');
  const cost = costFlags(v, num, (m) => new UsageError(m));
  const httpFlag = (['only', 'skip-http', 'duration', 'pairs', 'connections'] as const).find((k) => v[k] !== undefined);
  if (cost.only && httpFlag) throw new UsageError(`--${httpFlag} is for the throughput pairs: it cannot be combined with --cost-only`);
  return {
    help: v.help ?? false,
    json: v.json ?? false,
    skipHttp: v['skip-http'] ?? false,
    only: [...new Set(only)] as Variant[],
    duration: num('duration', v.duration, 5, 1, 600, false),
    pairs: num('pairs', v.pairs, 3, 1, 100, true),
    connections: num('connections', v.connections, 50, 1, 1000, true),
    cost,
  };
}

// ---- HTTP: autocannon here, each server in its own process (bench-server.ts). ----

async function load(port: number, duration: number, connections: number): Promise<Run> {
  const requests = Array.from({ length: KEYS }, (_, i) => ({ method: 'GET', path: '/api/hello', headers: { 'x-api-key': key(i) } }));
  let client = 0;
  const r = await cannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    pipelining: 1,
    duration,
    requests,
    // Each connection starts at its own place in the key list, so concurrent requests hit different buckets.
    setupClient: (c: { setRequests(r: unknown[]): void }) => {
      const start = Math.floor((client++ * KEYS) / connections) % KEYS;
      c.setRequests([...requests.slice(start), ...requests.slice(0, start)]);
    },
  });
  return { reqPerSec: r.requests.total / r.duration, p50Ms: r.latency.p50, p99Ms: r.latency.p99, non2xx: r.non2xx + r.errors + r.timeouts };
}

function summarize(runs: readonly Run[], ratios: readonly number[] = []): HttpRow {
  const m = (k: 'reqPerSec' | 'p50Ms' | 'p99Ms'): number | null => (runs.length ? round(median(runs.map((r) => r[k])), 1) : null);
  const ratioToBare = ratios.length ? round(median(ratios), 3) : null;
  return { reqPerSec: m('reqPerSec'), ratioToBare, p50Ms: m('p50Ms'), p99Ms: m('p99Ms'), non2xx: runs.reduce((s, r) => s + r.non2xx, 0) };
}

async function http(f: Flags): Promise<{ bare: HttpRow; peers: Record<string, HttpRow> }> {
  const bare = await startServer('bare');
  if ('skipped' in bare) throw new Error(`bare server skipped: ${bare.skipped}`);
  log('warm-up bare');
  await load(bare.port, 1, f.connections);
  const bareRuns: Run[] = [];
  const peers: Record<string, HttpRow> = {};
  for (const variant of f.only) {
    const srv = await startServer(variant);
    if ('skipped' in srv) {
      log(`skipping ${variant}: ${srv.skipped}`);
      peers[variant] = { reqPerSec: null, ratioToBare: null, p50Ms: null, p99Ms: null, non2xx: 0, skipped: srv.skipped };
      continue;
    }
    log(`warm-up ${variant}`);
    await load(srv.port, 1, f.connections);
    const runs: Run[] = [];
    const ratios: number[] = [];
    // A B A B …: a noisy neighbour slows a bare run and the variant run next to it alike.
    for (let i = 1; i <= f.pairs; i++) {
      const b = await load(bare.port, f.duration, f.connections);
      const v = await load(srv.port, f.duration, f.connections);
      bareRuns.push(b);
      runs.push(v);
      ratios.push(v.reqPerSec / b.reqPerSec);
      log(`pair ${i}/${f.pairs}: bare ${b.reqPerSec.toFixed(0)}, ${variant} ${v.reqPerSec.toFixed(0)} req/s (${ratios[i - 1]!.toFixed(3)})`);
    }
    peers[variant] = { ...summarize(runs, ratios), server: await stopServer(srv.child, true) };
  }
  await stopServer(bare.child);
  return { bare: summarize(bareRuns), peers };
}

// ---- Report ----

function table(rows: (string | number | null)[][]): string {
  const cells = rows.map((r) => r.map((c) => (c === null ? '-' : String(c))));
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => (i ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

type Result = Awaited<ReturnType<typeof collect>>;

async function collect(f: Flags) {
  const script = path.relative(process.cwd(), process.argv[1]!);
  const command = [process.argv0, ...process.execArgv, script, ...process.argv.slice(2)].join(' ');
  const cpus = os.cpus();
  const machine = { cores: cpus.length, cpu: cpus[0]?.model ?? '?', node: process.version, os: `${os.platform()} ${os.arch()}`, loadavg: os.loadavg().map((x) => round(x)) };
  const m = f.cost.only ? null : await micro(KEYS, key, log);
  if (m) log(`memory: ${MEMORY_KEYS} keys, one window, then two`);
  // Windows of a minute or more: a 1 s window's owner ledgers are swept within a second, which makes the figure jump.
  const mem = m ? [...(await memoryFootprints(MEMORY_KEYS, [60_000])), ...(await memoryFootprints(MEMORY_KEYS / 2, [60_000, 3_600_000]))] : [];
  const one = mem[0];
  const h = f.skipHttp || f.cost.only ? undefined : await http(f);
  const cost = f.cost.skip ? null : await measureCost(f.cost, MEMORY_KEYS, log);
  const ratio = h?.peers.limiter?.ratioToBare ?? null;
  const p99 = m?.limiter.p99Us ?? null;
  const targets = [
    { name: 'limiter ratioToBare >= 0.95', value: ratio, pass: ratio === null ? null : ratio >= TARGETS.ratioToBare },
    { name: 'decision p99 <= 50 us', value: p99, pass: p99 === null ? null : p99 <= TARGETS.decisionP99Us },
    { name: '50,000 buckets <= 16 MiB', value: one?.mib ?? null, pass: one ? one.mib <= TARGETS.mbFor50kBuckets : null },
    ...(cost ? costTargets(cost.summary) : []),
  ];
  const variants = h ? ['bare', ...f.only] : [];
  const s = cost?.summary;
  const config = { ...f, variants, keys: KEYS, micro: MICRO, microRedis: MICRO_REDIS, memoryKeys: MEMORY_KEYS, memoryUnit: 'MiB', targets: TARGETS };
  return {
    ratioToBare: ratio,
    decisionP99Us: p99,
    decisionP50Us: m?.limiter.p50Us ?? null,
    decisionNsPerCall: m?.limiter.nsPerCall ?? null,
    bytesPerBucket: one?.bytesEach ?? null,
    mbFor50kBuckets: one?.mib ?? null,
    peers: h?.peers ?? {},
    bare: h?.bare ?? null,
    instrOverBarePct: s?.instrOverBarePct ?? null,
    instrFirstSightOverBarePct: s?.instrFirstSightOverBarePct ?? null,
    cpuOverBarePct: s?.cpuOverBarePct ?? null,
    fleetCpuOverBarePct: s?.fleetCpuOverBarePct ?? null,
    bytesPerKey: s?.bytesPerKey ?? null,
    cost,
    micro: m,
    memory: mem,
    targets,
    machine,
    command,
    config,
  };
}

/** The bucket memory's part of the report. */
function renderMemory(memory: Result['memory']): string[] {
  const out: string[] = [];
  out.push(`Memory: heap growth after gc; 'node buckets' is the N4 figure, the owner's ledgers are spread over the fleet's shards`);
  const plan = (windowsMs: number[]): string => windowsMs.map((ms) => `${ms / 1000} s`).join(' + ');
  const memRows = memory.map((x) => [x.what, plan(x.windowsMs), x.count, x.bytesEach, x.mib]);
  out.push(table([['structure', 'plan windows', 'buckets', 'bytes each', 'MiB'], ...memRows]), '');
  return out;
}

function render(r: Result): string {
  const { config: f, machine: mc, micro: m } = r;
  const out = ['fleet-ratelimit benchmark', `command: ${r.command}`, `machine: ${mc.cores} cores (${mc.cpu}), node ${mc.node}, ${mc.os}, load avg ${mc.loadavg.join(' ')} at start`, ''];
  if (r.bare) {
    out.push(
      `HTTP GET /api/hello: ${f.pairs} bare/variant pairs x ${f.duration} s, ${f.connections} connections, pipelining 1, ` +
        `${KEYS} keys; medians over runs; ratio = median of (variant / the bare run just before it)`,
    );
    const peers = [['bare', r.bare] as const, ...Object.entries(r.peers)];
    const rows = peers.map(([k, p]) => (p.skipped ? [k, 'skipped'] : [k, p.reqPerSec, p.ratioToBare, p.p50Ms, p.p99Ms, p.non2xx]));
    out.push(table([['variant', 'req/s', 'ratio', 'p50 ms', 'p99 ms', 'non-2xx+err'], ...rows]));
    out.push(...peers.flatMap(([k, p]) => (p.skipped ? [`  ${k} skipped: ${p.skipped}`] : [])), '');
  }
  if (m) out.push(...renderMicro(m, KEYS, table), ...renderMemory(r.memory));
  if (r.cost) out.push(...renderCost(r.cost, table));
  out.push('Targets', table(r.targets.map((t) => [t.name, t.value, t.pass === null ? 'n/a' : t.pass ? 'PASS' : 'MISS'])));
  return `${out.join('\n')}\n`;
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2));
  if (f.help) return void process.stdout.write(`${USAGE}\n`);
  if (typeof globalThis.gc !== 'function') throw new UsageError('global.gc is not exposed: run with node --expose-gc (npm run bench does)');
  const result = await collect(f);
  process.stdout.write(f.json ? `${JSON.stringify(result, null, 2)}\n` : render(result));
}

for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void stopAllServers().finally(() => process.exit(130)));
main()
  .then(stopAllServers)
  .catch(async (err: unknown) => {
    await stopAllServers();
    log(err instanceof UsageError ? `bench: ${err.message}\n${USAGE}` : `bench failed: ${(err as Error).stack ?? String(err)}`);
    process.exit(err instanceof UsageError ? 2 : 1);
  });

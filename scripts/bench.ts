import { fork, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
// @ts-expect-error -- autocannon ships no type declarations and @types/autocannon is not installed.
import autocannon from 'autocannon';
import type { NextFunction, Request, Response } from 'express';
import { rateLimit } from 'express-rate-limit';
import { pino } from 'pino';
import { rateLimiter } from '../middleware/rate-limiter.js';
import { benchIdentity, HUGE, hugePolicy, VARIANTS, type ServerMessage, type Variant } from './bench-server.js';

/**
 * `npm run bench [-- flags]`: HTTP overhead against peers (interleaved bare/variant pairs, one server
 * process per variant), the in-process decision cost, and memory per bucket, checked against targets.
 */

const USAGE = `usage: node --expose-gc dist/scripts/bench.js [--json] [--duration S] [--pairs N] [--connections C]
       [--only ${VARIANTS.slice(1).join(',')}] [--skip-http]`;
const KEYS = 1000;
const MICRO = { warmup: 50_000, calls: 200_000, chunk: 10_000 };
const MEMORY_KEYS = 50_000;
const TARGETS = { ratioToBare: 0.95, decisionP99Us: 50, mbFor50kBuckets: 16 };

interface Flags { json: boolean; duration: number; pairs: number; connections: number; only: Variant[]; skipHttp: boolean }
interface Run { reqPerSec: number; p50Ms: number; p99Ms: number; non2xx: number; errors: number }
interface HttpRow { reqPerSec: number | null; ratioToBare: number | null; p50Ms: number | null; p99Ms: number | null; non2xx: number; skipped?: string; server?: unknown }
interface Micro { nsPerCall: number; p50Us: number; p99Us: number }
interface Memory { windows: number; keys: number; buckets: number; bytesPerBucket: number; mb: number; overCap: number }
interface CannonResult { requests: { total: number }; duration: number; latency: { p50: number; p99: number }; non2xx: number; errors: number; timeouts: number }

class UsageError extends Error {}
const cannon = autocannon as (opts: Record<string, unknown>) => Promise<CannonResult>;
const log = (msg: string): void => void process.stderr.write(`${msg}\n`);
const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const quantile = (sorted: Float64Array, q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
const round = (x: number, d = 2): number => Math.round(x * 10 ** d) / 10 ** d;

function parseFlags(argv: string[]): Flags & { help: boolean } {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, strict: true, allowPositionals: false, options: {
      json: { type: 'boolean' }, 'skip-http': { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
      duration: { type: 'string' }, pairs: { type: 'string' }, connections: { type: 'string' }, only: { type: 'string' },
    } });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const v = parsed.values;
  const num = (name: string, raw: string | undefined, dflt: number, min: number, max: number, integer: boolean): number => {
    if (raw === undefined) return dflt;
    const n = Number(raw);
    if (raw.trim() === '' || !Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
      throw new UsageError(`--${name} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}, got "${raw}"`);
    }
    return n;
  };
  const only = v.only === undefined ? VARIANTS.slice(1) : v.only.split(',').map((s) => s.trim());
  for (const name of only) {
    if (!(VARIANTS as readonly string[]).includes(name) || name === 'bare') {
      throw new UsageError(`--only: unknown variant "${name}" (choose from ${VARIANTS.slice(1).join(', ')}; bare always runs)`);
    }
  }
  if (only.length === 0) throw new UsageError('--only needs at least one variant');
  if (v['skip-http'] && v.only !== undefined) throw new UsageError('--only selects HTTP variants; it makes no sense with --skip-http');
  return {
    help: v.help ?? false, json: v.json ?? false, skipHttp: v['skip-http'] ?? false, only: [...new Set(only)] as Variant[],
    duration: num('duration', v.duration, 5, 1, 600, false), pairs: num('pairs', v.pairs, 3, 1, 100, true),
    connections: num('connections', v.connections, 50, 1, 1000, true),
  };
}

// ---- HTTP: one child process per server, so the load generator never shares their event loop. ----

const children = new Set<ChildProcess>();

function startServer(variant: Variant): Promise<{ child: ChildProcess; port: number } | { skipped: string }> {
  const script = fileURLToPath(new URL('./bench-server.js', import.meta.url));
  // The child's stdout goes to our stderr: with --json nothing but the result may reach stdout.
  const child = fork(script, [variant], { stdio: ['ignore', 2, 2, 'ipc'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${variant} server did not start within 15 s`)), 15_000);
    child.once('exit', (code) => reject(new Error(`${variant} server exited (code ${code}) before it was ready`)));
    child.on('message', (m: ServerMessage) => {
      if (m.type === 'ready') resolve({ child, port: m.port });
      else if (m.type === 'skip') resolve({ skipped: m.reason });
      else return;
      clearTimeout(timer);
    });
  });
}

function serverStats(child: ChildProcess): Promise<unknown> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 2000);
    child.on('message', (m: ServerMessage) => m.type === 'stats' && (clearTimeout(timer), resolve(m.stats)));
    child.send({ type: 'stats' });
  });
}

async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  if ((await Promise.race([exited, sleep(3000, 'late')])) === 'late') child.kill('SIGKILL');
}

async function load(port: number, duration: number, connections: number): Promise<Run> {
  const requests = Array.from({ length: KEYS }, (_, i) => ({ method: 'GET', path: '/api/hello', headers: { 'x-api-key': `bench-key-${i}` } }));
  let client = 0;
  const r = await cannon({
    url: `http://127.0.0.1:${port}`, connections, pipelining: 1, duration, requests,
    // Each connection starts at its own place in the key list, so concurrent requests hit many buckets.
    setupClient: (c: { setRequests(r: unknown[]): void }) => {
      const at = Math.floor((client++ * KEYS) / connections) % KEYS;
      c.setRequests([...requests.slice(at), ...requests.slice(0, at)]);
    },
  });
  return { reqPerSec: r.requests.total / r.duration, p50Ms: r.latency.p50, p99Ms: r.latency.p99, non2xx: r.non2xx, errors: r.errors + r.timeouts };
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
    for (let i = 1; i <= f.pairs; i++) {
      const b = await load(bare.port, f.duration, f.connections);
      const v = await load(srv.port, f.duration, f.connections);
      bareRuns.push(b);
      runs.push(v);
      ratios.push(v.reqPerSec / b.reqPerSec);
      log(`pair ${i}/${f.pairs} ${variant}: bare ${b.reqPerSec.toFixed(0)} req/s, ${variant} ${v.reqPerSec.toFixed(0)} req/s, ratio ${(v.reqPerSec / b.reqPerSec).toFixed(3)}`);
    }
    peers[variant] = { ...summarize(runs), ratioToBare: round(median(ratios), 3), server: await serverStats(srv.child) };
    await stopServer(srv.child);
  }
  await stopServer(bare.child);
  return { bare: summarize(bareRuns), peers };
}

function summarize(runs: readonly Run[]): HttpRow {
  const m = (k: 'reqPerSec' | 'p50Ms' | 'p99Ms'): number | null => (runs.length ? round(median(runs.map((r) => r[k])), 1) : null);
  const non2xx = runs.reduce((s, r) => s + r.non2xx + r.errors, 0);
  return { reqPerSec: m('reqPerSec'), ratioToBare: null, p50Ms: m('p50Ms'), p99Ms: m('p99Ms'), non2xx };
}

// ---- Decision microbenchmark: the middleware called directly with minimal fake req/res. ----

const fakeRes = { setHeader() {}, statusCode: 200, headersSent: false } as unknown as Response;
const noop = (() => undefined) as NextFunction;
const fakeReq = (key: string): Request =>
  ({ headers: { 'x-api-key': key }, socket: { remoteAddress: '127.0.0.1' }, path: '/api/hello' }) as unknown as Request;
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Times `fn` in chunks; yielding between chunks lets the limiter's round timer run, outside the timings. */
async function measure(fn: (i: number) => unknown): Promise<Micro> {
  let i = 0;
  const call = async (): Promise<void> => {
    const r = fn(i++);
    if (r instanceof Promise) await r;
  };
  const syncCall = (): void => void fn(i++);
  const isAsync = fn(i++) instanceof Promise;
  for (let done = 0; done < MICRO.warmup; done += MICRO.chunk) {
    for (let j = 0; j < MICRO.chunk; j++) isAsync ? await call() : syncCall();
    await tick();
  }
  let batchNs = 0n;
  for (let done = 0; done < MICRO.calls; done += MICRO.chunk) {
    const t0 = process.hrtime.bigint();
    for (let j = 0; j < MICRO.chunk; j++) isAsync ? await call() : syncCall();
    batchNs += process.hrtime.bigint() - t0;
    await tick();
  }
  const samples = new Float64Array(MICRO.calls);
  for (let k = 0; k < MICRO.calls; k++) {
    const t0 = process.hrtime.bigint();
    isAsync ? await call() : syncCall();
    samples[k] = Number(process.hrtime.bigint() - t0);
    if (k % MICRO.chunk === MICRO.chunk - 1) await tick();
  }
  samples.sort();
  return { nsPerCall: round(Number(batchNs) / MICRO.calls, 0), p50Us: round(quantile(samples, 0.5) / 1000, 3), p99Us: round(quantile(samples, 0.99) / 1000, 3) };
}

async function micro(): Promise<{ limiter: Micro; erl: Micro; hashNs: number; roundUs: number; timerNs: number }> {
  const reqs = Array.from({ length: KEYS }, (_, i) => fakeReq(`bench-key-${i}`));
  const limiter = rateLimiter({ policy: hugePolicy([1000, 60_000]), identify: benchIdentity, logger: pino({ level: 'silent' }) });
  try {
    log('micro: limiter decision');
    const result = await measure((i) => limiter(reqs[i % KEYS]!, fakeRes, noop));
    // Two costs inside the decision path, timed apart as evidence of where the time goes.
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < MICRO.calls; i++) limiter.hasher.hash(`bench-key-${i % KEYS}`);
    const hashNs = Number(process.hrtime.bigint() - t0) / MICRO.calls;
    const rounds: number[] = [];
    for (let r = 0; r < 20; r++) {
      for (const req of reqs) limiter(req, fakeRes, noop);
      const t1 = process.hrtime.bigint();
      limiter.node.endRound();
      rounds.push(Number(process.hrtime.bigint() - t1) / 1000);
    }
    const timer = new Float64Array(MICRO.calls);
    for (let k = 0; k < MICRO.calls; k++) timer[k] = Number(-process.hrtime.bigint() + process.hrtime.bigint());
    log('micro: express-rate-limit (async middleware: each call is awaited)');
    const erlMw = rateLimit({ windowMs: 60_000, limit: HUGE, keyGenerator: (req) => String(req.headers['x-api-key']), standardHeaders: false, legacyHeaders: false, validate: false });
    const erl = await measure((i) => erlMw(reqs[i % KEYS]!, fakeRes, noop));
    return { limiter: result, erl, hashNs: round(hashNs, 0), roundUs: round(median(rounds), 1), timerNs: quantile(timer.sort(), 0.5) };
  } finally {
    await limiter.close();
  }
}

// ---- Memory per bucket: heap growth over 50,000 fresh keys, owner ledgers (same process) included. ----

async function memory(windowsMs: number[]): Promise<Memory> {
  const gc = globalThis.gc as () => void;
  const expected = MEMORY_KEYS * windowsMs.length;
  const limiter = rateLimiter({ policy: hugePolicy(windowsMs), identify: benchIdentity, logger: pino({ level: 'silent' }), maxBuckets: Math.ceil(expected * 1.2) });
  // Garbage of an earlier limiter is sometimes only reclaimed a few event-loop turns after close().
  const settle = async (): Promise<number> => {
    for (let k = 0; k < 3; k++) await sleep(10).then(gc);
    return process.memoryUsage().heapUsed;
  };
  try {
    const before = await settle();
    for (let i = 0; i < MEMORY_KEYS; i++) limiter(fakeReq(`mem-key-${i}`), fakeRes, noop);
    await sleep(100); // a few rounds, so the per-round touched list is flushed as in steady state
    const delta = (await settle()) - before;
    const buckets = limiter.node.buckets.size;
    if (buckets !== expected) throw new Error(`memory: expected ${expected} buckets, the limiter holds ${buckets}`);
    return { windows: windowsMs.length, keys: MEMORY_KEYS, buckets, bytesPerBucket: round(delta / buckets, 0), mb: round(delta / 2 ** 20, 2), overCap: limiter.node.buckets.overCap };
  } finally {
    await limiter.close();
  }
}

// ---- Report ----

function table(rows: (string | number | null)[][]): string {
  const cells = rows.map((r) => r.map((c) => (c === null ? '-' : String(c))));
  const widths = cells[0]!.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ').trimEnd()).join('\n');
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2));
  if (f.help) return void process.stdout.write(`${USAGE}\n`);
  if (typeof globalThis.gc !== 'function') throw new UsageError('global.gc is not exposed: run with node --expose-gc (npm run bench does)');
  const command = [process.argv0, ...process.execArgv, path.relative(process.cwd(), process.argv[1]!), ...process.argv.slice(2)].join(' ');
  const cpus = os.cpus();
  const machine = { cores: cpus.length, cpu: cpus[0]?.model ?? 'unknown', node: process.version, platform: `${os.platform()} ${os.arch()}`, loadavg: os.loadavg().map((x) => round(x)) };
  const m = await micro();
  log('memory: 50,000 keys, one window, then two windows');
  const mem = [await memory([60_000]), await memory([1000, 60_000])];
  const h = f.skipHttp ? undefined : await http(f);
  const one = mem[0]!;
  const ratio = h?.peers.limiter?.ratioToBare ?? null;
  const targets = [
    { name: 'limiter ratioToBare >= 0.95', value: ratio, pass: ratio === null ? null : ratio >= TARGETS.ratioToBare },
    { name: 'decision p99 <= 50 us', value: m.limiter.p99Us, pass: m.limiter.p99Us <= TARGETS.decisionP99Us },
    { name: '50,000 buckets <= 16 MB', value: one.mb, pass: one.mb <= TARGETS.mbFor50kBuckets },
  ];
  const config = { ...f, keys: KEYS, micro: MICRO, memoryKeys: MEMORY_KEYS, targets: TARGETS, variants: f.skipHttp ? [] : ['bare', ...f.only] };
  if (f.json) {
    const out = {
      ratioToBare: ratio, decisionP99Us: m.limiter.p99Us, decisionP50Us: m.limiter.p50Us, decisionNsPerCall: m.limiter.nsPerCall,
      bytesPerBucket: one.bytesPerBucket, mbFor50kBuckets: one.mb, peers: h?.peers ?? {}, bare: h?.bare ?? null,
      micro: m, memory: mem, targets, machine, command, config,
    };
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    return;
  }
  const lines = [`fleet-ratelimit benchmark`, `command: ${command}`,
    `machine: ${machine.cores} cores (${machine.cpu}), node ${machine.node}, ${machine.platform}, load avg ${machine.loadavg.join(' ')} at start`, ''];
  if (h) {
    lines.push(`HTTP GET /api/hello: ${f.pairs} bare/variant pairs x ${f.duration} s, ${f.connections} connections, pipelining 1, ${KEYS} keys; medians over runs`);
    lines.push(table([['variant', 'req/s', 'ratio', 'p50 ms', 'p99 ms', 'non-2xx+err'], ['bare', h.bare.reqPerSec, null, h.bare.p50Ms, h.bare.p99Ms, h.bare.non2xx],
      ...Object.entries(h.peers).map(([k, r]) => (r.skipped ? [k, `skipped: ${r.skipped}`] : [k, r.reqPerSec, r.ratioToBare, r.p50Ms, r.p99Ms, r.non2xx]))]));
    lines.push('');
  }
  lines.push(`Decision, in-process: ${KEYS} keys, ${MICRO.warmup} warm-up calls, ${MICRO.calls} calls (timer overhead ~${m.timerNs} ns, included in p50/p99)`);
  lines.push(table([['middleware', 'ns/call', 'p50 us', 'p99 us'], ['fleet-ratelimit', m.limiter.nsPerCall, m.limiter.p50Us, m.limiter.p99Us],
    ['express-rate-limit (awaited)', m.erl.nsPerCall, m.erl.p50Us, m.erl.p99Us]]));
  lines.push(`  of which key hashing (HMAC): ~${m.hashNs} ns/call; one reconciliation round with ${KEYS} keys touched: ${m.roundUs} us`, '');
  lines.push(`Memory: ${MEMORY_KEYS} fresh keys, heap growth after gc (the in-process owner's ledgers included)`);
  lines.push(table([['plan', 'buckets', 'bytes/bucket', 'MB', 'over cap'], ...mem.map((x) => [`${x.windows} window(s)`, x.buckets, x.bytesPerBucket, x.mb, x.overCap])]), '');
  lines.push('Targets');
  lines.push(table(targets.map((t) => [t.name, t.value, t.pass === null ? 'n/a' : t.pass ? 'PASS' : 'MISS'])));
  process.stdout.write(`${lines.join('\n')}\n`);
}

async function killAll(): Promise<void> {
  await Promise.all([...children].map((c) => stopServer(c)));
}

for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => void killAll().finally(() => process.exit(130)));
}
main()
  .then(killAll)
  .catch(async (err: unknown) => {
    await killAll();
    log(err instanceof UsageError ? `bench: ${err.message}\n${USAGE}` : `bench failed: ${(err as Error).stack ?? String(err)}`);
    process.exit(err instanceof UsageError ? 2 : 1);
  });

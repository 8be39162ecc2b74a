import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { keySource, oneConnection, sequential, type KeyPlan } from './bench-cost-load.js';
import { startCostServer, type CostVariant } from './bench-cost-server.js';
import { liveDirs } from './exit-cleanup.js';
import { round } from './bench-figures.js';

/**
 * Instructions per request, counted by callgrind over the whole server process (every thread: V8's
 * compiler and GC included): the server runs under `valgrind --tool=callgrind --instr-atstart=no`,
 * takes a warm-up, then batches of sequential requests each with instrumentation switched on around
 * it (`callgrind_control -i on|off`, through vgdb) and dumped (`callgrind_control -d`), whose total
 * Ir / requests is the figure. Batches (four at least) run until the last three agree: the first batch
 * still carries V8's optimizing compiler whatever the warm-up (2,000 to 5,000 requests were tried),
 * and the limiter's held-credit path kept getting cheaper for four batches more (0.667, 0.680, 0.619,
 * 0.627, 0.596, then 0.589 three times, M Ir): two neighbours can agree while still on the way down,
 * three in a row did not. All requests share one keep-alive connection: with a new
 * connection per batch, per-connection code kept being optimized for several batches more.
 */

export interface InstrOptions {
  /** Sequential requests before any counting (instrumentation off). */
  warmup: number;
  /** Requests per counted batch. */
  perBatch: number;
  /** At most this many batches per server (at least 4): at least four are run, and the first is never in the figure. */
  maxBatches: number;
  /** The last three batches agreeing within this many % (max − min over their mean) ends the run. */
  tolerancePct: number;
  /** Factor the limiter's clock-driven settings are multiplied by (rounds, windows, fast-path deadline), within what its options allow. */
  timeScale: number;
}

/** The counted servers: each variant with one key, and the limiter and peers also with a fresh key per request. */
export const INSTR_RUNS: ReadonlyArray<{ variant: CostVariant; keys: 'one' | 'fresh' }> = [
  { variant: 'bare', keys: 'one' },
  { variant: 'noop', keys: 'one' },
  { variant: 'limiter', keys: 'one' },
  { variant: 'limiter', keys: 'fresh' },
  { variant: 'express-rate-limit', keys: 'one' },
  { variant: 'express-rate-limit', keys: 'fresh' },
  { variant: 'rlf-memory', keys: 'one' },
  { variant: 'rlf-memory', keys: 'fresh' },
];

/** Node's flags for the server under callgrind (see `nodeFlagsWhy`). */
export const NODE_FLAGS = ['--expose-gc', '--single-threaded', '--initial-old-space-size=256'];
const NODE_FLAGS_WHY =
  '--single-threaded: V8 compiles and collects on the main thread, so no background thread shifts work between batches ' +
  '(callgrind counts every thread either way); --initial-old-space-size=256: no major GC inside a 1,000-request batch, whose ' +
  'one-off cost would swamp it (major GC is in the CPU-time figure); a minor GC before each batch, so each starts with an empty young generation';
const VALGRIND_FLAGS = ['--tool=callgrind', '--instr-atstart=no', '--smc-check=all-non-file'];

export interface InstrRun {
  variant: CostVariant;
  keys: 'one' | 'fresh';
  /** Mean Ir per request of the last three batches. */
  irPerRequest: number;
  /** Ir per request of every counted batch, in order. */
  batches: number[];
  /** (max − min) / mean of the last three batches, %. */
  lastThreeSpreadPct: number;
  converged: boolean;
  /** Wall time per request under instrumentation (last batch). */
  msPerRequest: number;
  /** Limiter rounds that fell in one counted request, roughly: msPerRequest / roundMs. */
  requestsPerRound: number | null;
  non2xx: number;
  statuses: Record<string, number>;
  stats?: Record<string, unknown> | undefined;
}

export interface InstrResult {
  tool: string;
  nodeFlags: string[];
  nodeFlagsWhy: string;
  options: InstrOptions;
  keysOne: string;
  keysFresh: string;
  /** The limiter's settings under callgrind, and why. */
  limiterTiming: { roundMs: number; windowsMs: number[]; fastPathDeadlineMs: number; note: string };
  runs: InstrRun[];
}

const run = promisify(execFile);

/** Why callgrind cannot be used here, or undefined when valgrind and callgrind_control both run. */
export function callgrindMissing(): string | undefined {
  for (const [cmd, arg] of [
    ['valgrind', '--version'],
    ['callgrind_control', '-h'],
    ['vgdb', '--help'],
  ] as const) {
    const r = spawnSync(cmd, [arg], { stdio: 'ignore' });
    if (r.error) return `${cmd} not found (${(r.error as NodeJS.ErrnoException).code ?? r.error.message}): instruction counts skipped`;
  }
  return undefined;
}

/** The limiter's timing under callgrind: its defaults times `scale`, within what rateLimiter's options allow. */
export function scaledTiming(scale: number): InstrResult['limiterTiming'] {
  const roundMs = Math.min(1000, 25 * scale);
  const fastPathDeadlineMs = Math.min(100, 1 * scale);
  return {
    roundMs,
    fastPathDeadlineMs,
    windowsMs: [1000 * scale, 60_000 * scale],
    note:
      `the limiter's clock-driven work scaled by ${scale} (rounds 25 ms → ${roundMs} ms, the most its options allow; ` +
      `fast-path deadline 1 → ${fastPathDeadlineMs} ms; windows 1 s and 60 s → ${scale} s and ${60 * scale} s), since a request ` +
      "under callgrind takes that much longer; requestsPerRound shows how many requests shared a round's work",
  };
}

async function control(pid: number, ...args: string[]): Promise<void> {
  const { stdout } = await run('callgrind_control', [...args, String(pid)], { timeout: 60_000 });
  if (!/OK/.test(stdout)) throw new Error(`callgrind_control ${args.join(' ')} ${pid} did not answer OK: ${stdout.trim()}`);
}

/** Total Ir of the newest dump of `pid` in `dir` (cg.<pid>.<n>). */
function lastDumpIr(dir: string, pid: number): number {
  const dumps = readdirSync(dir)
    .filter((f) => f.startsWith(`cg.${pid}.`))
    .sort((a, b) => Number(a.split('.')[2]) - Number(b.split('.')[2]));
  const last = dumps.at(-1);
  if (last === undefined) throw new Error(`callgrind wrote no dump for pid ${pid}`);
  const totals = /^totals:\s+(\d+)/m.exec(readFileSync(join(dir, last), 'utf8'));
  if (!totals) throw new Error(`no totals line in callgrind dump ${last}`);
  return Number(totals[1]);
}

async function countOne(spec: (typeof INSTR_RUNS)[number], o: InstrOptions, dir: string, log: (m: string) => void): Promise<InstrRun> {
  const timing = scaledTiming(o.timeScale);
  const limiter = spec.variant === 'limiter';
  const server = await startCostServer(
    { variant: spec.variant, ...(limiter ? { roundMs: timing.roundMs, windowsMs: timing.windowsMs, fastPathDeadlineMs: timing.fastPathDeadlineMs } : {}) },
    { execPath: 'valgrind', execArgv: [...VALGRIND_FLAGS, `--callgrind-out-file=${join(dir, 'cg.%p')}`, process.execPath, ...NODE_FLAGS], readyTimeoutMs: 180_000 },
  );
  const agent = oneConnection();
  const plan: KeyPlan = spec.keys === 'one' ? { kind: 'one', key: 'cost-key-0' } : { kind: 'fresh', prefix: `first-${spec.variant}-` };
  const key = keySource(plan);
  const statuses: Record<string, number> = {};
  const add = (s: Record<string, number>): void => Object.entries(s).forEach(([k, v]) => (statuses[k] = (statuses[k] ?? 0) + v));
  try {
    const name = `${spec.variant} (${spec.keys === 'one' ? 'one key' : 'a fresh key per request'})`;
    log(`instructions: ${name}: ${o.warmup} warm-up requests under valgrind`);
    add((await sequential(server.port, o.warmup, key, agent)).statuses);
    const batches: number[] = [];
    let ms = 0;
    for (let b = 1; b <= o.maxBatches; b++) {
      await server.gc();
      await control(server.pid, '-i', 'on');
      const out = await sequential(server.port, o.perBatch, key, agent);
      await control(server.pid, '-i', 'off');
      await control(server.pid, '-d');
      add(out.statuses);
      ms = out.ms / o.perBatch;
      batches.push(lastDumpIr(dir, server.pid) / o.perBatch);
      log(`instructions: ${name}: batch ${b}: ${(batches.at(-1)! / 1e6).toFixed(3)} M Ir/request, ${ms.toFixed(1)} ms/request`);
      if (b >= 4 && spread(batches) <= o.tolerancePct) break; // the first never counts
    }
    const stats = limiter ? await server.stats() : undefined;
    const last = batches.slice(-3);
    return {
      variant: spec.variant,
      keys: spec.keys,
      irPerRequest: Math.round(last.reduce((a, b) => a + b, 0) / last.length),
      batches: batches.map(Math.round),
      lastThreeSpreadPct: round(spread(batches)),
      converged: spread(batches) <= o.tolerancePct,
      msPerRequest: round(ms),
      requestsPerRound: limiter ? round(timing.roundMs / ms, 1) : null,
      non2xx: Object.entries(statuses).reduce((s, [k, v]) => s + (k === '200' ? 0 : v), 0),
      statuses,
      ...(stats ? { stats } : {}),
    };
  } finally {
    agent.destroy();
    await server.stop();
  }
}

/** (max − min) / mean of the last three values, in %. */
function spread(xs: readonly number[]): number {
  const last = xs.slice(-3);
  return ((Math.max(...last) - Math.min(...last)) / (last.reduce((a, b) => a + b, 0) / last.length)) * 100;
}

/** Counts every run of `INSTR_RUNS`; throws when callgrind cannot be driven (the caller reports it as skipped). */
export async function instructionCounts(o: InstrOptions, log: (m: string) => void): Promise<InstrResult> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-callgrind-'));
  liveDirs.add(dir);
  try {
    const runs: InstrRun[] = [];
    for (const spec of INSTR_RUNS) runs.push(await countOne(spec, o, dir, log));
    return {
      tool: `valgrind ${VALGRIND_FLAGS.join(' ')}; callgrind_control -i on/off around each batch, -d after it`,
      nodeFlags: NODE_FLAGS,
      nodeFlagsWhy: NODE_FLAGS_WHY,
      options: o,
      keysOne: 'one API key for every request (the limiter holds credit for it after the first)',
      keysFresh: 'a fresh API key per request, never sent before (every request a first sight: key id, bucket and ledger created)',
      limiterTiming: scaledTiming(o.timeScale),
      runs,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
    liveDirs.delete(dir);
  }
}

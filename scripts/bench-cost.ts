import { cpuPerRequest, type CpuResult } from './bench-cost-cpu.js';
import { callgrindMissing, instructionCounts, type InstrResult, type InstrRun } from './bench-cost-instr.js';
import { keyMemory, type KeyMemoryResult } from './bench-cost-memory.js';
import type { CostVariant } from './bench-cost-server.js';

/**
 * The cost figures of `npm run bench` (issue 13): instructions per request under callgrind, CPU time
 * per request at a fixed offered rate (standalone and as a fleet member over Redis), and heap per
 * active key — each for this limiter with bare Express, a no-op middleware and the peers beside it.
 * Measures of work done rather than of wall-clock speed, so that they hold on a shared, noisy machine.
 */

export interface CostFlags {
  skip: boolean;
  only: boolean;
  skipCallgrind: boolean;
  rate: number;
  seconds: number;
  rounds: number;
  /** `--cost-beside-bare`: each variant's CPU runs at the same time as a bare Express run (`CpuOptions.besideBare`). */
  besideBare: boolean;
  /** `--cost-windows`: the plan windows of this limiter's CPU runs, standalone and in the fleet (`CpuOptions.windowsMs`). */
  windowsMs: number[];
  instrWarmup: number;
  instrRequests: number;
  instrBatches: number;
  /** Where the loaded fleet member writes a V8 CPU profile of the CPU pass (`--cpu-prof`), if asked. */
  profileDir?: string;
}

/** parseArgs options of the cost flags, for bench.ts's parser. */
export const COST_OPTIONS = {
  'skip-cost': { type: 'boolean' },
  'cost-only': { type: 'boolean' },
  'skip-callgrind': { type: 'boolean' },
  'cost-rate': { type: 'string' },
  'cost-seconds': { type: 'string' },
  'cost-rounds': { type: 'string' },
  'cost-profile': { type: 'string' },
  'cost-beside-bare': { type: 'boolean' },
  'cost-windows': { type: 'string' },
  'instr-warmup': { type: 'string' },
  'instr-requests': { type: 'string' },
  'instr-batches': { type: 'string' },
} as const;

export const COST_USAGE = `       [--skip-cost | --cost-only] [--skip-callgrind] [--cost-rate R] [--cost-seconds S] [--cost-rounds N]
       [--cost-beside-bare] [--cost-windows MS,MS] [--cost-profile DIR] [--instr-warmup N] [--instr-requests N]
       [--instr-batches N]`;

type Num = (name: string, raw: string | undefined, dflt: number, min: number, max: number, int: boolean) => number;
type Raw = Partial<Record<keyof typeof COST_OPTIONS, string | boolean>>;

/** The cost flags, validated with bench.ts's `num`; throws `usage(message)` on a bad combination. */
export function costFlags(v: Raw, num: Num, usage: (m: string) => Error): CostFlags {
  const str = (k: keyof typeof COST_OPTIONS): string | undefined => v[k] as string | undefined;
  const f: CostFlags = {
    skip: v['skip-cost'] === true,
    only: v['cost-only'] === true,
    skipCallgrind: v['skip-callgrind'] === true,
    rate: num('cost-rate', str('cost-rate'), 1500, 100, 20_000, true),
    seconds: num('cost-seconds', str('cost-seconds'), 10, 2, 600, false),
    rounds: num('cost-rounds', str('cost-rounds'), 3, 1, 20, true),
    besideBare: v['cost-beside-bare'] === true,
    windowsMs: (str('cost-windows') ?? '1000,60000').split(',').map((w) => num('cost-windows', w.trim(), 0, 1000, 31 * 86_400_000, true)),
    instrWarmup: num('instr-warmup', str('instr-warmup'), 3000, 0, 1_000_000, true),
    instrRequests: num('instr-requests', str('instr-requests'), 1000, 100, 100_000, true),
    instrBatches: num('instr-batches', str('instr-batches'), 10, 4, 50, true),
    ...(str('cost-profile') === undefined ? {} : { profileDir: str('cost-profile') }),
  };
  if (f.windowsMs.length > 8 || new Set(f.windowsMs).size < f.windowsMs.length) throw usage('--cost-windows takes at most 8 distinct windows, in ms');
  if (f.profileDir?.trim() === '') throw usage("--cost-profile needs a directory for the fleet member's CPU profile");
  if (f.skip && f.only) throw usage('--skip-cost and --cost-only exclude each other');
  const tuning = Object.keys(COST_OPTIONS).filter((k) => !['skip-cost', 'cost-only'].includes(k) && v[k as keyof Raw] !== undefined);
  if (f.skip && tuning.length) throw usage(`--${tuning[0]} tunes the cost figures: it cannot be combined with --skip-cost`);
  const instr = tuning.find((k) => k.startsWith('instr-'));
  if (f.skipCallgrind && instr) throw usage(`--${instr} tunes the callgrind runs: it cannot be combined with --skip-callgrind`);
  return f;
}

/** Figures over bare, in %: instructions (held credit, first sight), CPU per request, and the peers beside them. */
export interface CostSummary {
  instrOverBarePct: number | null;
  instrFirstSightOverBarePct: number | null;
  cpuOverBarePct: number | null;
  fleetCpuOverBarePct: number | null;
  bytesPerKey: number | null;
  /** The same figures for the no-op middleware and the peers (null where not measured). */
  beside: Record<string, { instrOverBarePct: number | null; instrFirstSightOverBarePct: number | null; cpuOverBarePct: number | null; bytesPerKey: number | null }>;
  /** Non-2xx answers, errors and timeouts per variant over every cost run (and warm-up, where any): all should be 0 (limit 1e9). */
  refusals: Record<string, number>;
}

export interface Cost {
  summary: CostSummary;
  instructions: InstrResult | { skipped: string };
  /** Wall time per request under callgrind over the CPU time per request natively, for bare Express. */
  callgrindSlowdown: number | null;
  cpu: CpuResult;
  memory: KeyMemoryResult;
}

const pct = (x: number | null | undefined, base: number | null | undefined): number | null => (x == null || base == null || base === 0 ? null : Math.round(((x - base) / base) * 1000) / 10);

function summarize(instr: Cost['instructions'], cpu: CpuResult, mem: KeyMemoryResult): CostSummary {
  const runs = 'runs' in instr ? instr.runs : [];
  const ir = (variant: CostVariant, keys: InstrRun['keys']): number | null => runs.find((r) => r.variant === variant && r.keys === keys)?.irPerRequest ?? null;
  const cpuOver = (variant: CostVariant): number | null => cpu.rows.find((r) => r.variant === variant)?.overBarePct ?? null;
  const bytes = (what: string): number | null => mem.rows.find((r) => r.what.startsWith(what))?.bytesPerKey ?? null;
  const bareIr = ir('bare', 'one');
  const peer = (variant: CostVariant, memName: string | undefined): CostSummary['beside'][string] => ({
    instrOverBarePct: pct(ir(variant, 'one'), bareIr),
    instrFirstSightOverBarePct: pct(ir(variant, 'fresh'), bareIr),
    cpuOverBarePct: cpuOver(variant),
    bytesPerKey: memName === undefined ? null : bytes(memName),
  });
  const refusals: Record<string, number> = {};
  for (const r of runs) refusals[`${r.variant} (callgrind, ${r.keys === 'one' ? 'one key' : 'fresh keys'})`] = r.non2xx;
  for (const r of cpu.rows) if (!r.skipped) refusals[`${r.variant} (cpu, ${cpu.options.keys} keys)`] = r.non2xx;
  for (const r of cpu.rows) if (r.warmupNon2xx > 0) refusals[`${r.variant} (cpu warm-up, ${cpu.options.keys} keys)`] = r.warmupNon2xx;
  return {
    instrOverBarePct: pct(ir('limiter', 'one'), bareIr),
    instrFirstSightOverBarePct: pct(ir('limiter', 'fresh'), bareIr),
    cpuOverBarePct: cpuOver('limiter'),
    fleetCpuOverBarePct: cpuOver('fleet'),
    bytesPerKey: bytes('fleet-ratelimit'),
    beside: {
      noop: peer('noop', undefined),
      'express-rate-limit': peer('express-rate-limit', 'express-rate-limit'),
      'rlf-memory': peer('rlf-memory', 'rate-limiter-flexible'),
    },
    refusals,
  };
}

/** Runs every cost measurement (callgrind only where it can run and is not skipped). */
export async function measureCost(f: CostFlags, memoryKeys: number, log: (m: string) => void): Promise<Cost> {
  log(`memory per key: ${memoryKeys} keys through each middleware`);
  const memory = await keyMemory(memoryKeys);
  log(`cpu: ${f.rate} req/s for ${f.seconds} s x ${f.rounds} rounds per variant`);
  const cpu = await cpuPerRequest(
    {
      rate: f.rate,
      seconds: f.seconds,
      rounds: f.rounds,
      keys: 1000,
      warmupSeconds: 3,
      besideBare: f.besideBare,
      windowsMs: f.windowsMs,
      ...(f.profileDir === undefined ? {} : { profileDir: f.profileDir }),
    },
    log,
  );
  let instructions: Cost['instructions'];
  const missing = f.skipCallgrind ? 'skipped with --skip-callgrind' : callgrindMissing();
  if (missing !== undefined) {
    log(`instructions: ${missing}`);
    instructions = { skipped: missing };
  } else {
    try {
      instructions = await instructionCounts({ warmup: f.instrWarmup, perBatch: f.instrRequests, maxBatches: f.instrBatches, tolerancePct: 2, timeScale: 40 }, log);
    } catch (err) {
      const reason = `callgrind failed: ${(err as Error).message.split('\n')[0]}`;
      log(`instructions: ${reason}`);
      instructions = { skipped: reason };
    }
  }
  const bareMs = 'runs' in instructions ? instructions.runs.find((r) => r.variant === 'bare')?.msPerRequest : undefined;
  const bareUs = cpu.rows.find((r) => r.variant === 'bare')?.usPerRequest;
  const callgrindSlowdown = bareMs != null && bareUs != null ? Math.round((bareMs * 1000) / bareUs) : null;
  return { summary: summarize(instructions, cpu, memory), instructions, callgrindSlowdown, cpu, memory };
}

/** The issue's targets for the cost figures, as bench.ts's target rows. */
export function costTargets(s: CostSummary | undefined): Array<{ name: string; value: number | null; pass: boolean | null }> {
  const row = (name: string, value: number | null | undefined, max: number): { name: string; value: number | null; pass: boolean | null } => ({
    name,
    value: value ?? null,
    pass: value == null ? null : value <= max,
  });
  return [
    row('instructions over bare, held credit <= +6 %', s?.instrOverBarePct, 6),
    row('instructions over bare, first sight <= +10 %', s?.instrFirstSightOverBarePct, 10),
    row('fleet member CPU/request over bare <= +25 %', s?.fleetCpuOverBarePct, 25),
    row('bytes per active key <= 300', s?.bytesPerKey, 300),
  ];
}

/** The human report's lines for the cost figures. */
export function renderCost(c: Cost, table: (rows: (string | number | null)[][]) => string): string[] {
  const s = c.summary;
  const out: string[] = [];
  const fmt = (x: number | null | undefined, unit = '%'): string => (x == null ? '-' : `${x > 0 && unit === '%' ? '+' : ''}${x}${unit === '%' ? ' %' : ''}`);
  if ('skipped' in c.instructions) out.push(`Instructions per request: skipped: ${c.instructions.skipped}`);
  else {
    const i = c.instructions;
    out.push(
      `Instructions per request under callgrind (whole server process): ${i.options.warmup} warm-up, then batches of ${i.options.perBatch} ` +
        `sequential keep-alive requests, at least 4, until the last three agree within ${i.options.tolerancePct} % (at most ${i.options.maxBatches}); figure = mean of the last three`,
      `  node ${i.nodeFlags.join(' ')}; ${i.limiterTiming.note}; bare under callgrind ~${c.callgrindSlowdown ?? '?'}x its native CPU time per request`,
    );
    const bare = i.runs.find((r) => r.variant === 'bare')?.irPerRequest;
    out.push(
      table([
        ['variant', 'keys', 'M Ir/request', 'over bare', 'last-two spread', 'batches (M Ir/request)', 'req/round', 'non-2xx'],
        ...i.runs.map((r) => [
          r.variant,
          r.keys === 'one' ? 'one' : 'fresh each',
          (r.irPerRequest / 1e6).toFixed(3),
          fmt(pct(r.irPerRequest, bare)),
          `${r.lastThreeSpreadPct} %${r.converged ? '' : ' (not converged)'}`,
          r.batches.map((b) => (b / 1e6).toFixed(3)).join(' '),
          r.requestsPerRound,
          r.non2xx,
        ]),
      ]),
    );
  }
  out.push('');
  const cpu = c.cpu;
  const beside = cpu.options.besideBare === true;
  out.push(
    `CPU per request at ${cpu.options.rate} req/s offered (utime+stime of the server process from /proc, ${cpu.clockTicksPerSecond} ticks/s): ` +
      `${cpu.options.rounds} x ${cpu.options.seconds} s per variant, ${beside ? 'each at the same time as a bare Express run' : 'interleaved'}, ${cpu.options.keys} keys, ` +
      `this limiter's windows ${(cpu.options.windowsMs ?? [1000, 60_000]).map((ms) => `${ms / 1000} s`).join(' + ')}; ` +
      `medians over rounds${beside ? ' (bare: over all its runs)' : ''}; over bare = median of (run / ${beside ? 'the bare run beside it' : "same round's bare run"})`,
    `  fleet: ${cpu.fleet}`,
  );
  out.push(
    table([
      ['variant', 'us/request', 'spread', 'over bare', 'per round', 'achieved req/s', 'non-2xx+err', 'statuses'],
      ...cpu.rows.map((r) =>
        r.skipped
          ? [r.variant, 'skipped']
          : [
              r.variant,
              r.usPerRequest,
              `${r.spreadPct} %`,
              fmt(r.overBarePct),
              r.overBarePerRoundPct.map((x) => fmt(x)).join(' '),
              r.runs.map((x) => x.achievedRate).join(' '),
              r.non2xx,
              Object.entries(r.statuses)
                .map(([k, v]) => `${k}:${v}`)
                .join(' '),
            ],
      ),
    ]),
  );
  const fleet = cpu.rows.find((r) => r.variant === 'fleet');
  if (fleet?.skipped) out.push(`  fleet skipped: ${fleet.skipped}`);
  else if (fleet?.othersUsPerRequest) out.push(`  the two unloaded fleet members spent ${fleet.othersUsPerRequest.join(' and ')} us per request of the loaded one`);
  if (fleet?.idleMsPerSecond !== undefined)
    out.push(
      `  the loaded member, carrying no load (the run before its own), spent ${fleet.idleMsPerSecond} ms a second on its rounds: ${fleet.idleUsPerRequest} of its ${fleet.usPerRequest} us per request at ${cpu.options.rate} req/s`,
    );
  out.push('', `Heap per active key (${c.memory.keys} keys, one ${c.memory.windowMs / 1000} s window): ${c.memory.note}`);
  out.push(table([['middleware', 'bytes/key'], ...c.memory.rows.map((r) => [r.what, r.bytesPerKey])]), '');
  out.push('Cost summary (JSON: instrOverBarePct, instrFirstSightOverBarePct, cpuOverBarePct, fleetCpuOverBarePct, bytesPerKey; cost.summary.beside for the others)');
  out.push(
    table([
      ['', 'instr, held credit', 'instr, first sight', 'CPU at fixed rate', 'bytes/key'],
      ['fleet-ratelimit', fmt(s.instrOverBarePct), fmt(s.instrFirstSightOverBarePct), `${fmt(s.cpuOverBarePct)} (fleet member ${fmt(s.fleetCpuOverBarePct)})`, s.bytesPerKey],
      ...Object.entries(s.beside).map(([k, b]) => [k, fmt(b.instrOverBarePct), fmt(b.instrFirstSightOverBarePct), fmt(b.cpuOverBarePct), b.bytesPerKey]),
    ]),
  );
  const refused = Object.entries(s.refusals).filter(([, n]) => n > 0);
  out.push(refused.length ? `  REFUSED OR FAILED at a limit of 1e9: ${refused.map(([k, n]) => `${k}: ${n}`).join('; ')}` : '  no request refused or failed in any cost run', '');
  return out;
}

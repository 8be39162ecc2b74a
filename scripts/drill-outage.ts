import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  PHASES,
  USAGE,
  WINDOW_MARGIN_MS,
  WINDOW_MS,
  parseDrillArgs,
  perSecond,
  pickKeyHashSecret,
  renderTable,
  renderVerdict,
  summarize,
  windowAt,
  type DrillOptions,
  type PhaseName,
  type Sample,
} from './drill-outage-core.js';
import { startFleet, type Fleet } from './fleet.js';
import { startRedis, type RedisProcess } from './redis-server.js';

/**
 * `npm run drill:outage [-- --rate 30 --seconds 110 --outage-at 10 --outage-seconds 40 --limit 1000
 * --degraded-after-ms 30000 --nodes 3 --json]`: the full-scale Redis outage drill. Three demo gateways
 * over a private redis-server, one key on a `limit`-per-hour plan, `rate` requests a second round robin
 * over the gateways for `seconds`; Redis is frozen (SIGSTOP) from `outage-at` for `outage-seconds`, then
 * thawed. Counts what each phase admitted, refused and admitted degraded, and checks the two bounds:
 * admitted in the window ≤ limit + what degraded mode admitted while Redis was down, and nothing
 * admitted after recovery once the window is spent. Exit 0 when both hold, 1 when one is violated or
 * the drill could not run, 2 on a bad flag.
 */

const API_KEY = 'demo-hour';
/** A request with no answer by then counts as "no answer" (status 0). */
const REQUEST_TIMEOUT_MS = 5000;
/** After the gateways are up, before the first request: every node ready and warm. */
const WARM_UP_MS = 2000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The demo configuration with the `hour` plan's one window set to `limit` per hour. */
function policyFile(dir: string, limit: number): string {
  const demo = JSON.parse(readFileSync(fileURLToPath(new URL('../../demo/policy.json', import.meta.url)), 'utf8')) as {
    demoKeys: Record<string, { plan: string }>;
    policy: { plans: Record<string, { windows: Array<{ limit: number; windowMs: number }> }> };
  };
  const plan = demo.policy.plans[demo.demoKeys[API_KEY]!.plan]!;
  if (plan.windows.length !== 1 || plan.windows[0]!.windowMs !== WINDOW_MS) throw new Error(`demo/policy.json: ${API_KEY}'s plan is no longer one hourly window`);
  plan.windows[0]!.limit = limit;
  const file = path.join(dir, 'policy.json');
  writeFileSync(file, JSON.stringify(demo));
  return file;
}

/** Sum of one series over a gateway's /metrics text, for the label sets containing `label`. */
function metric(text: string, name: string, label = ''): number {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))) if (m[1]!.includes(label)) sum += Number(m[2]);
  return sum;
}

/** The fleet's fail-open admissions so far (every gateway's metrics summed), NaN when one does not answer. */
async function failOpenSoFar(fleet: Fleet): Promise<number> {
  const counts = await Promise.all(
    fleet.nodes.map(async (node) => {
      try {
        const res = await fetch(`${node.url}/metrics`, { signal: AbortSignal.timeout(2000) });
        return metric(await res.text(), 'fleet_ratelimit_decisions_total', 'class="fail_open"');
      } catch {
        return NaN;
      }
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

/** One request as the drill's key; status 0 when nothing answered in time. */
async function send(url: string, t0: number, sentMs: number): Promise<Sample> {
  try {
    const res = await fetch(url, { headers: { 'x-api-key': API_KEY }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    await res.body?.cancel();
    return { sentMs, doneMs: performance.now() - t0, status: res.status, degraded: res.headers.get('x-ratelimit-degraded') === 'true' };
  } catch {
    return { sentMs, doneMs: performance.now() - t0, status: 0, degraded: false };
  }
}

/** What the drill started, stopped on any way out. */
const started: { redis?: RedisProcess; fleet?: Fleet; dir?: string; paused: boolean } = { paused: false };
let releasing: Promise<void> | undefined;

/** Thaws Redis if it is frozen, stops the gateways, then Redis, and removes the temp dir; idempotent. */
function release(): Promise<void> {
  releasing ??= (async () => {
    if (started.paused) {
      try {
        started.redis?.resume();
      } catch {
        // already gone
      }
      started.paused = false;
    }
    await started.fleet?.stop();
    await started.redis?.stop();
    if (started.dir) rmSync(started.dir, { recursive: true, force: true });
  })();
  return releasing;
}

let interrupted: NodeJS.Signals | undefined;

async function run(opts: DrillOptions, argv: readonly string[]): Promise<boolean> {
  if (process.env.REDIS_URL) throw new Error('the drill freezes a redis-server of its own; unset REDIS_URL');
  // A key-hash secret under which the key's hourly window has room for the whole run.
  const needMs = opts.seconds * 1000 + WINDOW_MARGIN_MS;
  const candidates = function* (): Generator<string> {
    for (let i = 0; i < 1000; i++) yield randomBytes(32).toString('base64url');
  };
  const picked = pickKeyHashSecret(candidates(), API_KEY, Date.now(), needMs);
  if (!picked) throw new Error(`no key-hash secret among 1,000 gave ${API_KEY} a window with ${needMs / 1000} s left`);

  started.dir = mkdtempSync(path.join(tmpdir(), 'drill-outage-'));
  started.redis = await startRedis();
  const unexpected: string[] = [];
  started.fleet = await startFleet({
    nodes: opts.nodes,
    redisUrl: started.redis.url,
    env: { POLICY_FILE: policyFile(started.dir, opts.limit), DEGRADED_AFTER_MS: String(opts.degradedAfterMs), KEY_HASH_SECRET: picked.secret, LOG_LEVEL: 'warn' },
    onExit: (node, code, signal) => unexpected.push(`${node.nodeId} exited on its own (code ${code}, signal ${signal})`),
  });
  const fleet = started.fleet;
  const redis = started.redis;
  const urls = fleet.nodes.map((node) => {
    if (new URL(node.url).hostname !== '127.0.0.1') throw new Error(`refusing a target off 127.0.0.1: ${node.url}`);
    return `${node.url}/api/hello`;
  });
  await sleep(WARM_UP_MS);
  if (interrupted) return false;

  const wallStart = Date.now();
  const window = windowAt(picked.window.keyId, WINDOW_MS, wallStart);
  if (window.windowId !== picked.window.windowId || window.leftMs < opts.seconds * 1000 + REQUEST_TIMEOUT_MS) {
    throw new Error(`the key's window ${picked.window.windowId} has only ${(window.leftMs / 1000).toFixed(0)} s left after start-up, less than the run; run the drill again`);
  }

  // The request loop: `rate * seconds` requests at fixed times, round robin; Redis frozen and thawed
  // between two of them, so every request is on one side of each edge.
  const total = opts.rate * opts.seconds;
  const intervalMs = 1000 / opts.rate;
  const fromMs = opts.outageAt * 1000;
  const toMs = (opts.outageAt + opts.outageSeconds) * 1000;
  const outage = { fromMs: NaN, toMs: NaN };
  const failOpen: Array<Promise<number>> = [failOpenSoFar(fleet)];
  const pending: Array<Promise<Sample>> = [];
  const t0 = performance.now();
  for (let i = 0; i < total && !interrupted; i++) {
    const due = i * intervalMs;
    const wait = t0 + due - performance.now();
    if (wait > 0) await sleep(wait);
    if (interrupted) break;
    if (Number.isNaN(outage.fromMs) && due >= fromMs) {
      redis.pause();
      started.paused = true;
      outage.fromMs = performance.now() - t0;
      failOpen.push(failOpenSoFar(fleet));
    }
    if (Number.isNaN(outage.toMs) && due >= toMs) {
      redis.resume();
      started.paused = false;
      outage.toMs = performance.now() - t0;
      failOpen.push(failOpenSoFar(fleet));
    }
    pending.push(send(urls[i % urls.length]!, t0, performance.now() - t0));
  }
  const samples = await Promise.all(pending);
  if (interrupted) return false;
  const runMs = performance.now() - t0;
  failOpen.push(failOpenSoFar(fleet));
  const [fo0, fo1, fo2, fo3] = await Promise.all(failOpen);
  const wallEnd = wallStart + (samples.at(-1)?.sentMs ?? 0);

  const report = summarize(samples, outage, opts.limit);
  const failOpenByPhase: Record<PhaseName | 'total', number> = { before: fo1! - fo0!, during: fo2! - fo1!, after: fo3! - fo2!, total: fo3! - fo0! };
  const straddled = wallEnd >= window.endMs;
  const command = `npm run drill:outage${argv.length ? ` -- ${argv.join(' ')}` : ''}`;
  const round = (ms: number | null): number | null => (ms === null ? null : Math.round(ms));
  const iso = (ms: number): string => new Date(ms).toISOString().replace('.000Z', 'Z');
  const lines = [
    `${opts.nodes} demo gateway processes over a private redis-server; ${API_KEY} on ${opts.limit.toLocaleString('en-US')} per hour; ${opts.rate}/s round robin for ${opts.seconds} s; Redis frozen (SIGSTOP) from ${opts.outageAt} s for ${opts.outageSeconds} s; DEGRADED_AFTER_MS=${opts.degradedAfterMs}`,
    `command: ${command}`,
    `window: ${API_KEY} is key id ${window.keyId}; its hourly window ${window.windowId} runs ${iso(window.startMs)} to ${iso(window.endMs)}, ${(window.leftMs / 1000).toFixed(0)} s left at the first request (the run needs ${opts.seconds + REQUEST_TIMEOUT_MS / 1000} s; key-hash secret: candidate ${picked.tried}); the last request was sent ${((window.endMs - wallEnd) / 1000).toFixed(0)} s before its end`,
    '',
    renderTable(report, runMs, failOpenByPhase),
    '',
    renderVerdict(report),
    ...unexpected.map((u) => `warning: ${u}; the counts are not a clean drill`),
    ...(straddled ? ["warning: the run crossed the key's window boundary; the counts are not a clean drill"] : []),
    '',
  ];
  process.stdout.write(lines.join('\n'));
  if (opts.json) {
    const json = {
      command,
      options: { ...opts },
      window: { keyId: window.keyId, windowId: window.windowId, startMs: window.startMs, endMs: window.endMs, leftAtStartMs: window.leftMs, lastSentBeforeEndMs: Math.round(window.endMs - wallEnd) },
      runMs: Math.round(runMs),
      outage: { fromMs: Math.round(outage.fromMs), toMs: Math.round(outage.toMs) },
      phases: Object.fromEntries(PHASES.map((p) => [p, { ...report.phases[p], failOpen: failOpenByPhase[p] }])),
      total: { ...report.total, failOpen: failOpenByPhase.total },
      windowBound: report.window,
      afterSpent: { ...report.afterSpent, spentAtMs: round(report.afterSpent.spentAtMs), fromMs: round(report.afterSpent.fromMs) },
      perSecond: perSecond(samples),
      unexpectedExits: unexpected,
      ok: report.ok && unexpected.length === 0 && !straddled,
    };
    process.stdout.write(`${JSON.stringify(json)}\n`);
  }
  return report.ok && unexpected.length === 0 && !straddled;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opts = parseDrillArgs(argv);
  if ('problems' in opts) {
    process.stderr.write(`drill:outage: ${opts.problems.join('\ndrill:outage: ')}\n${USAGE}\n`);
    process.exit(2);
  }
  // `on`, not `once`: a second Ctrl-C must not end this process before what it started is stopped.
  const stop = (signal: NodeJS.Signals): void => {
    if (interrupted) return;
    interrupted = signal;
    process.stderr.write(`\ndrill:outage: ${signal}, stopping what the drill started\n`);
    void release().finally(() => process.exit(130));
  };
  // SIGHUP too: a closed terminal must not leave a frozen redis-server behind.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, stop);
  let ok = false;
  try {
    ok = await run(opts, argv);
  } catch (err) {
    process.stderr.write(`drill:outage: ${(err as Error).message}\n`);
  } finally {
    await release();
  }
  if (interrupted) return; // stop() exits
  process.exit(ok ? 0 : 1);
}

void main();

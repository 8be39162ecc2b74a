import { parseArgs } from 'node:util';
import { KeyHasher } from '../lib/key-id.js';
import { phaseOffset, windowIdAt } from '../lib/window.js';
import { startFleet, type Fleet } from './fleet.js';
import { startRedis } from './redis-server.js';

/**
 * `npm run bench:cluster [-- --deadline-ms 1 --transport direct|redis --redis URL]`: three demo
 * gateway processes over a private redis-server, driven over HTTP round robin (request i to node
 * i mod 3) at a steady rate: demo-pro (100 per 1 s) at 50/s for 20 s and demo-free (10 per 1 s) at
 * 5/s for 20 s — half their limits, so every refusal is a false one — then demo-pro at 300/s for
 * 10 s, whose admissions are counted per window of the key (its phase offset included). Prints one
 * table, with the asks to remote owners each run made and those that missed the deadline (from the
 * nodes' /metrics); the end-to-end tests hold the same cases to bounds a loaded machine can meet.
 */

const USAGE = 'usage: npm run bench:cluster -- [--deadline-ms 1] [--transport direct|redis] [--redis redis://host:port]';
const SECRET = 'bench-cluster-key-hash-secret-0123456789';

interface Run {
  key: string;
  rate: number;
  seconds: number;
  admitted: number;
  refused: number;
  /** Admissions per window of the key, complete windows only. */
  perWindow: number[];
  /** Asks to a remote owner during the run, and those that missed the deadline (summed over nodes). */
  asks: number;
  late: number;
}

/** The fleet's asks to remote owners and those that missed the deadline, summed over every node's /metrics. */
async function askCounts(fleet: Fleet): Promise<{ asks: number; late: number }> {
  const sum = { asks: 0, late: 0 };
  for (const node of fleet.nodes) {
    const text = await (await fetch(`${node.url}/metrics`)).text();
    const read = (name: string): number => Number(new RegExp(`^${name}\\{[^}]*\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    sum.asks += read('fleet_ratelimit_fast_path_total');
    sum.late += read('fleet_ratelimit_fast_path_timeouts_total');
  }
  return sum;
}

async function drive(fleet: Fleet, key: string, limitWindowMs: number, rate: number, seconds: number): Promise<Run> {
  const offset = phaseOffset(new KeyHasher([{ version: 'v1', secret: SECRET }]).hash(key), limitWindowMs);
  const byWindow = new Map<number, number>();
  const before = await askCounts(fleet);
  const start = Date.now();
  const n = rate * seconds;
  let admitted = 0;
  let refused = 0;
  const pending: Array<Promise<void>> = [];
  for (let i = 0; i < n; i++) {
    const wait = start + (i * 1000) / rate - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const sent = Date.now();
    pending.push(
      fetch(`${fleet.nodes[i % fleet.nodes.length]!.url}/api/hello`, { headers: { 'x-api-key': key } }).then(async (res) => {
        await res.body?.cancel();
        if (res.status !== 200) return void refused++;
        admitted++;
        const w = windowIdAt(sent, limitWindowMs, offset);
        byWindow.set(w, (byWindow.get(w) ?? 0) + 1);
      }),
    );
  }
  await Promise.all(pending);
  // The first and last windows are partly outside the run.
  const ids = [...byWindow.keys()].sort((a, b) => a - b).slice(1, -1);
  const after = await askCounts(fleet);
  const asks = after.asks - before.asks;
  const late = after.late - before.late;
  return { key, rate, seconds, admitted, refused, perWindow: ids.map((w) => byWindow.get(w)!), asks, late };
}

async function main(): Promise<void> {
  let v;
  try {
    v = parseArgs({ options: { 'deadline-ms': { type: 'string' }, transport: { type: 'string' }, redis: { type: 'string' } }, strict: true }).values;
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${USAGE}`, { cause: err });
  }
  const deadline = v['deadline-ms'] ?? '1';
  if (!/^\d+(\.\d+)?$/.test(deadline) || Number(deadline) < 0.1 || Number(deadline) > 100) throw new Error(`--deadline-ms must be a number from 0.1 to 100, got "${deadline}"\n${USAGE}`);
  const transport = v.transport ?? 'direct';
  if (transport !== 'direct' && transport !== 'redis') throw new Error(`--transport must be direct or redis, got "${transport}"\n${USAGE}`);
  const own = v.redis === undefined ? await startRedis() : undefined;
  const fleet = await startFleet({
    nodes: 3,
    redisUrl: v.redis ?? own!.url,
    env: { KEY_HASH_SECRET: SECRET, FAST_PATH_DEADLINE_MS: deadline, ...(transport === 'redis' ? { FAST_PATH: 'off' } : {}) },
  });
  try {
    await new Promise((r) => setTimeout(r, 2000)); // every node ready and warm
    const runs = [await drive(fleet, 'demo-pro', 1000, 50, 20), await drive(fleet, 'demo-free', 1000, 5, 20), await drive(fleet, 'demo-pro', 1000, 300, 10)];
    const rows = runs.map((r) => {
      const w = r.perWindow;
      const range = w.length === 0 ? '-' : `${Math.min(...w)}–${Math.max(...w)} (mean ${(w.reduce((a, b) => a + b, 0) / w.length).toFixed(1)})`;
      return `| ${r.key} at ${r.rate}/s for ${r.seconds} s | ${r.admitted + r.refused} | ${r.refused} | ${r.asks} | ${r.late} | ${range} |`;
    });
    process.stdout.write(
      [
        `three gateway processes over ${own === undefined ? v.redis : 'a private redis-server'}, round robin, fast path ${transport === 'direct' ? 'direct (TCP)' : 'over Redis pub/sub'}, deadline ${deadline} ms`,
        `command: npm run bench:cluster -- ${process.argv.slice(2).join(' ')}`,
        '',
        '| traffic | requests | refused | asks | asks late | admitted per complete window |',
        '|---|---:|---:|---:|---:|---|',
        ...rows,
        '',
      ].join('\n'),
    );
  } finally {
    await fleet.stop();
    await own?.stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:cluster: ${(err as Error).message}\n`);
  process.exit(1);
});

import { fork, type ChildProcess } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
// @ts-expect-error -- autocannon ships no type declarations and @types/autocannon is not installed.
import autocannon from 'autocannon';
import express from 'express';
import { pino } from 'pino';
import { RedisBus } from '../bus/redis.js';
import { rateLimiter } from '../middleware/rate-limiter.js';
import { benchIdentity, HUGE, hugePolicy } from './bench-server.js';
import { startRedis } from './redis-server.js';

/**
 * `npm run bench:huge [-- --nodes 1 --windows 1000,60000 --rate 1000 --keys 1000 --seconds 20]`: gateway
 * processes of a fleet over a private redis-server, every window's limit 10⁹, driven by autocannon at
 * a fixed overall rate (an even share per node) over `--keys` API keys. Nothing may be refused there:
 * it prints the 429s, by the window they name and whether Retry-After was under a second, and per node
 * its fast-path asks and the asks that missed the deadline, with its event loop's delay (a starved
 * machine misses the protocol's timing: rounds late, owners out of reach, log writes over 1 ms).
 */

const USAGE = 'usage: npm run bench:huge -- [--nodes 1] [--windows 1000,60000] [--rate 1000] [--keys 1000] [--seconds 20] [--connections 50]';
const SECRET = 'bench-huge-key-hash-secret-0123456789ab';
const BUS_SECRET = 'bench-huge-bus-secret-0123456789abcdef';

interface CannonResult {
  requests: { total: number };
  non2xx: number;
  errors: number;
  timeouts: number;
  statusCodeStats: Record<string, { count: number }>;
}
const cannon = autocannon as (opts: Record<string, unknown>) => Promise<CannonResult>;

type ChildMsg = { type: 'ready'; port: number } | { type: 'stats'; stats: NodeFigures };

/** What each gateway process reports at the end. */
interface NodeFigures {
  refusedBy: Record<string, number>;
  admitted: number;
  asks: number;
  asksLate: number;
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  /** CPU time of the process (user + system) per request it answered while loaded, µs. */
  cpuUsPerRequest: number;
}

async function serve(redisUrl: string, nodeId: string, windows: number[]): Promise<void> {
  const refusedBy: Record<string, number> = {};
  const limiter = rateLimiter({
    policy: hugePolicy(windows),
    identify: benchIdentity,
    keyHash: { versions: [{ version: 'v1', secret: SECRET }] },
    nodeId,
    logger: pino({ level: 'warn' }),
    redis: { url: redisUrl, busSecret: { versions: [{ version: 'b1', secret: BUS_SECRET }] } },
    onLimited: (_req, res, _next, info) => {
      const k = `${info.window}, Retry-After ${info.retryAfterMs === undefined ? 'none' : info.retryAfterMs < 1000 ? '< 1 s' : '≥ 1 s'}`;
      refusedBy[k] = (refusedBy[k] ?? 0) + 1;
      res.json({ window: info.window });
    },
  });
  await limiter.ready();
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  const cpu = process.cpuUsage();
  let answered = 0;
  const app = express();
  app.disable('x-powered-by');
  app.use((_req, res, next) => {
    res.once('finish', () => answered++);
    next();
  });
  app.use(limiter);
  app.get('/api/hello', (_req, res) => void res.json({ ok: true }));
  const server = app.listen(0, '127.0.0.1', () => {
    const a = server.address();
    process.send?.({ type: 'ready', port: typeof a === 'object' && a !== null ? a.port : 0 } satisfies ChildMsg);
  });
  process.on('message', (m: { type?: string }) => {
    if (m?.type !== 'stats') return;
    const bus = limiter.bus instanceof RedisBus ? limiter.bus.stats : undefined;
    const stats: NodeFigures = {
      refusedBy,
      admitted: limiter.stats.admitted,
      asks: limiter.node.stats.fastPath,
      asksLate: bus?.fastPathTimeouts ?? 0,
      loopDelayP99Ms: Math.round(loop.percentile(99) / 1e5) / 10,
      loopDelayMaxMs: Math.round(loop.max / 1e5) / 10,
      cpuUsPerRequest: Math.round(((u) => u.user + u.system)(process.cpuUsage(cpu)) / Math.max(1, answered)),
    };
    process.send?.({ type: 'stats', stats } satisfies ChildMsg);
  });
  const stop = (): void => {
    server.close();
    server.closeAllConnections();
    void limiter.close().then(() => process.exit(0));
  };
  process.once('disconnect', stop);
  process.once('SIGTERM', stop);
}

function int(name: string, raw: string | undefined, dflt: number, min: number, max: number): number {
  const n = raw === undefined ? dflt : Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer from ${min} to ${max}, got "${raw}"\n${USAGE}`);
  return n;
}

async function main(): Promise<void> {
  let v;
  try {
    const options = {
      nodes: { type: 'string' },
      windows: { type: 'string' },
      rate: { type: 'string' },
      seconds: { type: 'string' },
      keys: { type: 'string' },
      connections: { type: 'string' },
    } as const;
    v = parseArgs({ options, strict: true }).values;
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${USAGE}`, { cause: err });
  }
  const nodes = int('nodes', v.nodes, 1, 1, 5);
  const windows = (v.windows ?? '1000,60000').split(',').map((w) => int('windows', w, 0, 1000, 3_600_000));
  const rate = int('rate', v.rate, 1000, 1, 100_000);
  const seconds = int('seconds', v.seconds, 20, 1, 600);
  const keys = int('keys', v.keys, 1000, 1, 100_000);
  const connections = int('connections', v.connections, 50, 1, 1000);
  const redis = await startRedis();
  const children: ChildProcess[] = [];
  try {
    const ports: number[] = [];
    for (let i = 0; i < nodes; i++) {
      const child = fork(fileURLToPath(import.meta.url), ['serve', redis.url, `huge-${i + 1}`, windows.join(',')], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      children.push(child);
      ports.push(
        await new Promise<number>((resolve, reject) => {
          child.once('exit', (code) => reject(new Error(`node ${i + 1} exited (code ${code}) before it was ready`)));
          child.on('message', (m: ChildMsg) => m.type === 'ready' && resolve(m.port));
        }),
      );
    }
    await new Promise((r) => setTimeout(r, 1000)); // every node's rounds running
    const requests = Array.from({ length: keys }, (_, i) => ({ method: 'GET', path: '/api/hello', headers: { 'x-api-key': `huge-key-${i}` } }));
    // One autocannon per node at its share of the rate; each connection starts at its own key.
    const results = await Promise.all(
      ports.map((port, n) => {
        let client = 0;
        return cannon({
          url: `http://127.0.0.1:${port}`,
          connections,
          pipelining: 1,
          duration: seconds,
          overallRate: Math.max(1, Math.round(rate / nodes)),
          requests,
          setupClient: (c: { setRequests(r: unknown[]): void }) => {
            const start = Math.floor(((client++ + n * connections) * keys) / (connections * nodes)) % keys;
            c.setRequests([...requests.slice(start), ...requests.slice(0, start)]);
          },
        });
      }),
    );
    const figures = await Promise.all(
      children.map(
        (c) =>
          new Promise<NodeFigures>((resolve) => {
            c.on('message', (m: ChildMsg) => m.type === 'stats' && resolve(m.stats));
            c.send({ type: 'stats' });
          }),
      ),
    );
    const total = results.reduce((s, r) => s + r.requests.total, 0);
    const refused = results.reduce((s, r) => s + (r.statusCodeStats['429']?.count ?? 0), 0);
    const failed = results.reduce((s, r) => s + r.non2xx + r.errors + r.timeouts, 0) - refused;
    const lines = [
      `${nodes} gateway process(es) over a private redis-server, windows ${windows.join(', ')} ms of limit ${HUGE}, ${keys} keys, ${rate}/s for ${seconds} s`,
      `command: npm run bench:huge -- ${process.argv.slice(2).join(' ')}`,
      `requests ${total}, refused (429) ${refused}, other failures ${failed}`,
      ...figures.map(
        (f, i) =>
          `node ${i + 1}: admitted ${f.admitted}, refused ${JSON.stringify(f.refusedBy)}, asks ${f.asks} (${f.asksLate} missed the deadline), event-loop delay p99 ${f.loopDelayP99Ms} ms, max ${f.loopDelayMaxMs} ms, CPU ${f.cpuUsPerRequest} µs a request`,
      ),
      '',
    ];
    process.stdout.write(lines.join('\n'));
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once('exit', r)) : undefined)));
    await redis.stop();
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [mode, url, nodeId, windows] = process.argv.slice(2);
  const run = mode === 'serve' ? serve(url!, nodeId!, windows!.split(',').map(Number)) : main();
  run.catch((err: unknown) => {
    process.stderr.write(`bench:huge: ${(err as Error).message}\n`);
    process.exit(1);
  });
}

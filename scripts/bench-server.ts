import { fork, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Server } from 'node:http';
import express, { type Request, type RequestHandler } from 'express';
import { rateLimit } from 'express-rate-limit';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { PolicyDoc } from '../lib/policy.js';
import type { Identity } from '../middleware/options.js';
import { rateLimiter, type RateLimiterMiddleware } from '../middleware/rate-limiter.js';

/**
 * One Express app per benchmark variant, each in its own process so that the load generator and the
 * server never share an event loop; both ends of the IPC protocol live here. The child sends
 * `{type:'ready', port}` or `{type:'skip', reason}`, answers `{type:'stats'}` with its limiter's
 * counters, and exits when the parent disconnects, so even a crashed benchmark leaves no server behind.
 */

/** Every variant the benchmark knows, in the order it runs them. */
export const VARIANTS = ['bare', 'limiter', 'noop', 'express-rate-limit', 'rlf-memory', 'rlf-redis'] as const;

/** A variant name. */
export type Variant = (typeof VARIANTS)[number];

/** A limit no benchmark run reaches: every request is admitted, so only overhead is measured. */
export const HUGE = 1_000_000_000;

/** Messages a server child sends to the benchmark. */
type ServerMessage = { type: 'ready'; port: number } | { type: 'skip'; reason: string } | { type: 'stats'; stats: Record<string, unknown> | undefined };

/** A one-plan policy with a huge limit in each window length given (1 window = 1 bucket per key). */
export function hugePolicy(windowsMs: readonly number[]): PolicyDoc {
  const windows = windowsMs.map((windowMs) => ({ name: `w${windowMs}`, limit: HUGE, windowMs }));
  return { version: 1, defaultPlan: 'bench', anonymousPlan: 'bench', plans: { bench: { windows } } };
}

/** The caller's API key, as the load generator sends it. */
export function apiKey(req: Request): string {
  const v = req.headers['x-api-key'];
  return typeof v === 'string' ? v : 'none';
}

/** Identity of a benchmark caller: its key as principal, one tenant for all. */
export function benchIdentity(req: Request): Identity {
  return { principal: apiKey(req), tenant: 't1' };
}

/** Serves the benchmark's one route behind `guard` (none: bare Express) on a free port, and reports the port. */
export function serveBench(guard: RequestHandler | undefined, ready: (port: number) => void): Server {
  const app = express();
  app.disable('x-powered-by');
  if (guard !== undefined) app.use(guard);
  app.get('/api/hello', (_req, res) => {
    res.json({ ok: true });
  });
  const server = app.listen(0, '127.0.0.1', () => {
    const addr = server.address();
    ready(typeof addr === 'object' && addr !== null ? addr.port : 0);
  });
  return server;
}

/** A limiter's counters as the benchmarks report them: decisions, its node's, buckets held. */
export function limiterStats(limiter: RateLimiterMiddleware | undefined): Record<string, unknown> | undefined {
  const node = limiter?.node;
  return limiter && node ? { ...limiter.stats, ...node.stats, buckets: node.buckets.size, overCap: node.buckets.overCap } : undefined;
}

// ---- Parent side ----

const children = new Set<ChildProcess>();

/** Forks the server of `variant` and waits until it listens (or reports why it cannot run). */
export function startServer(variant: Variant): Promise<{ child: ChildProcess; port: number } | { skipped: string }> {
  // The child's stdout goes to our stderr: with --json nothing but the result may reach stdout.
  const child = fork(fileURLToPath(import.meta.url), [variant], { stdio: ['ignore', 2, 2, 'ipc'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${variant} server did not start within 15 s`)), 15_000).unref();
    child.once('exit', (code) => reject(new Error(`${variant} server exited (code ${code}) before it was ready`)));
    child.on('message', (m: ServerMessage) => {
      if (m.type === 'ready') resolve({ child, port: m.port });
      if (m.type === 'skip') resolve({ skipped: m.reason });
      clearTimeout(timer);
    });
  });
}

/** Stops a server (SIGKILL if SIGTERM is ignored); with `withStats`, first fetches its limiter's counters. */
export async function stopServer(child: ChildProcess, withStats = false): Promise<Record<string, unknown> | undefined> {
  let stats: Record<string, unknown> | undefined;
  if (withStats && child.connected) {
    stats = await new Promise((resolve) => {
      setTimeout(() => resolve(undefined), 2000).unref();
      child.on('message', (m: ServerMessage) => m.type === 'stats' && resolve(m.stats));
      child.send({ type: 'stats' });
    });
  }
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    if ((await Promise.race([exited, sleep(3000, 'late')])) === 'late') child.kill('SIGKILL');
  }
  return stats;
}

/** Stops every server still running; for the end of the run and for error and signal paths. */
export function stopAllServers(): Promise<unknown> {
  return Promise.all([...children].map((c) => stopServer(c)));
}

// ---- Child side ----

/**
 * rate-limiter-flexible has no Express middleware of its own; this is the usual few lines. It returns
 * nothing: the decision is over when it calls next() (or answers 429). Also used by the micro rows (bench-micro.ts).
 */
export function rlfMiddleware(limiter: RateLimiterAbstract): RequestHandler {
  return (req, res, next) => {
    limiter.consume(apiKey(req)).then(
      () => next(),
      // rlf rejects with an Error on a store failure and with a RateLimiterRes on a denial.
      (rej: unknown) => (rej instanceof Error ? next(rej) : res.status(429).json({ error: 'TOO_MANY_REQUESTS' })),
    );
  };
}

/** An ioredis client set up as rlf documents, connected and pinged; rejects with the cause if Redis is unreachable. */
export async function connectRedis(url: string): Promise<Redis> {
  // rlf's documented ioredis setup: no offline queue, so an outage fails fast instead of queueing.
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    lazyConnect: true,
    connectTimeout: 2000,
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
  });
  // The 'error' event carries the cause (ECONNREFUSED…); connect() itself only says the connection closed.
  let cause: Error | undefined;
  redis.on('error', (err: Error) => (cause ??= err));
  try {
    await redis.connect();
    await redis.ping();
    return redis;
  } catch (err) {
    redis.disconnect();
    throw cause ?? err;
  }
}

async function main(variant: string): Promise<void> {
  const send = (m: ServerMessage): void => void process.send?.(m);
  let limiter: RateLimiterMiddleware | undefined;
  let redis: Redis | undefined;
  let guard: RequestHandler | undefined;
  switch (variant) {
    case 'bare':
      break;
    case 'limiter':
      limiter = rateLimiter({ policy: hugePolicy([1000, 60_000]), identify: benchIdentity, logger: pino({ level: 'warn' }) });
      guard = limiter;
      break;
    case 'noop':
      // One middleware layer that does nothing: what any middleware costs in Express, for context.
      guard = (_req, _res, next) => next();
      break;
    case 'express-rate-limit':
      // Headers off: the project's limiter sends none by default, so both do the same work.
      guard = rateLimit({ windowMs: 60_000, limit: HUGE, keyGenerator: apiKey, standardHeaders: false, legacyHeaders: false });
      break;
    case 'rlf-memory':
      guard = rlfMiddleware(new RateLimiterMemory({ points: HUGE, duration: 60 }));
      break;
    case 'rlf-redis': {
      const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
      try {
        redis = await connectRedis(url);
      } catch (err) {
        // Exit only once the message is out, or the parent would see a crash instead of a skip.
        const reason = `Redis at ${url} unreachable: ${(err as Error).message}`;
        process.send?.({ type: 'skip', reason } satisfies ServerMessage, () => process.exit(0));
        return;
      }
      guard = rlfMiddleware(new RateLimiterRedis({ storeClient: redis, keyPrefix: `bench-${process.pid}`, points: HUGE, duration: 60 }));
      break;
    }
    default:
      throw new Error(`unknown variant "${variant}" (expected one of ${VARIANTS.join(', ')})`);
  }

  const server = serveBench(guard, (port) => send({ type: 'ready', port }));

  const stop = (): void => {
    server.close();
    server.closeAllConnections();
    void limiter?.close();
    redis?.disconnect();
    process.exit(0);
  };
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'stats') send({ type: 'stats', stats: limiterStats(limiter) });
  });
  process.once('disconnect', stop);
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

// Serve only when this file is the entry point: bench.ts imports it for the parent side, the other benchmarks for the helpers.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2] ?? '').catch((err: unknown) => {
    process.stderr.write(`bench-server ${process.argv[2] ?? ''}: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}

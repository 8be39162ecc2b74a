import { fork, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { RequestHandler } from 'express';
import { rateLimit } from 'express-rate-limit';
import { pino } from 'pino';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { rateLimiter, type RateLimiterMiddleware } from '../middleware/rate-limiter.js';
import { apiKey, benchIdentity, HUGE, hugePolicy, limiterStats, rlfMiddleware, serveBench } from './bench-server.js';
import { installExitHook, liveChildren } from './exit-cleanup.js';

/**
 * The server process of one cost measurement (bench-cost.ts): a minimal Express app, as in
 * bench-server.ts, with one guard in front of GET /api/hello. Unlike bench-server.ts it takes timing
 * options (so that a run under callgrind can slow the limiter's clock-driven work by the same factor
 * as everything else), can join a fleet over Redis, and can be started under another program
 * (valgrind). Protocol over IPC: the child sends `{type:'ready', port}`; it answers `{type:'gc'}`
 * (a minor collection, so that every measured batch starts with an empty young generation) with
 * `{type:'gc-done'}` and `{type:'stats'}` with its limiter's counters; it exits when the parent
 * disconnects.
 */

/** Every guard a cost server can run; 'limiter' is this project's, standalone, 'fleet' the same as a member of a fleet over Redis. */
export const COST_VARIANTS = ['bare', 'noop', 'limiter', 'express-rate-limit', 'rlf-memory', 'fleet'] as const;
export type CostVariant = (typeof COST_VARIANTS)[number];

/** What the child is told on its command line (one JSON argument). */
export interface CostServerConfig {
  variant: CostVariant;
  /** The limiter's plan windows; @default [1000, 60000], as the throughput benchmark's limiter. */
  windowsMs?: number[];
  /** The limiter's round interval (rateLimiter's `roundMs`); @default the limiter's own default. */
  roundMs?: number;
  /** The limiter's fast-path deadline; @default the limiter's own default. */
  fastPathDeadlineMs?: number;
  /** For 'fleet': the Redis, the shared secrets and this member's node id. */
  fleet?: { redisUrl: string; keyHashSecret: string; busSecret: string; nodeId: string; prefix: string };
}

type ChildMessage = { type: 'ready'; port: number } | { type: 'gc-done' } | { type: 'stats'; stats: Record<string, unknown> | undefined };

/** A running cost server. */
export interface CostServer {
  readonly child: ChildProcess;
  readonly port: number;
  /** The server's pid: the one whose /proc/<pid>/stat and callgrind counters are read. */
  readonly pid: number;
  /** Runs a minor GC in the server and resolves when it is done. */
  gc(): Promise<void>;
  /** The limiter's counters (undefined for other guards). */
  stats(): Promise<Record<string, unknown> | undefined>;
  /** Disconnects (the child exits), SIGKILL after 5 s; resolves once it has exited. */
  stop(): Promise<void>;
}

/** Extra ways to start the child: under another program (`execPath` + `execArgv`), with its stderr captured. */
export interface LaunchOptions {
  execPath?: string;
  execArgv?: string[];
  readyTimeoutMs?: number;
}

/** Forks a cost server and resolves once it listens; rejects with its stderr if it exits or does not start in time. */
export function startCostServer(cfg: CostServerConfig, launch: LaunchOptions = {}): Promise<CostServer> {
  installExitHook();
  const child = fork(fileURLToPath(import.meta.url), [JSON.stringify(cfg)], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    ...(launch.execPath ? { execPath: launch.execPath } : {}),
    execArgv: launch.execArgv ?? ['--expose-gc'],
  });
  liveChildren.add(child);
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => void (stderr = (stderr + c.toString('utf8')).slice(-8192)));
  const exited = new Promise<void>((r) => child.once('exit', () => (liveChildren.delete(child), r())));
  const waitFor = <T extends ChildMessage['type']>(type: T, ms: number): Promise<Extract<ChildMessage, { type: T }>> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => (child.off('message', on), reject(new Error(`${cfg.variant} server: no ${type} within ${ms} ms`))), ms);
      const on = (m: ChildMessage): void => {
        if (m.type !== type) return;
        clearTimeout(timer);
        child.off('message', on);
        resolve(m as Extract<ChildMessage, { type: T }>);
      };
      child.on('message', on);
    });
  const stop = async (): Promise<void> => {
    if (child.connected) child.disconnect();
    const late = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(late);
  };
  const ready = waitFor('ready', launch.readyTimeoutMs ?? 30_000);
  const died = exited.then(() => {
    throw new Error(`${cfg.variant} server exited (code ${child.exitCode}, signal ${child.signalCode}) before it was ready; its stderr:\n${stderr}`);
  });
  return Promise.race([ready, died]).then(
    (m) => ({
      child,
      port: m.port,
      pid: child.pid!,
      stop,
      gc: async () => {
        child.send({ type: 'gc' });
        await waitFor('gc-done', 120_000);
      },
      stats: async () => {
        child.send({ type: 'stats' });
        return (await waitFor('stats', 10_000)).stats;
      },
    }),
    async (err: unknown) => {
      await stop();
      throw new Error(`${(err as Error).message}; its stderr:\n${stderr}`);
    },
  );
}

// ---- Child side ----

async function main(cfg: CostServerConfig): Promise<void> {
  const send = (m: ChildMessage): void => void process.send?.(m);
  let limiter: RateLimiterMiddleware | undefined;
  let guard: RequestHandler | undefined;
  const timing = {
    ...(cfg.roundMs !== undefined ? { roundMs: cfg.roundMs } : {}),
    ...(cfg.fastPathDeadlineMs !== undefined ? { fastPathDeadlineMs: cfg.fastPathDeadlineMs } : {}),
  };
  const policy = hugePolicy(cfg.windowsMs ?? [1000, 60_000]);
  switch (cfg.variant) {
    case 'bare':
      break;
    case 'noop':
      guard = (_req, _res, next) => next();
      break;
    case 'limiter':
      limiter = rateLimiter({ policy, identify: benchIdentity, logger: pino({ level: 'warn' }), ...timing });
      guard = limiter;
      break;
    case 'fleet': {
      const f = cfg.fleet;
      if (f === undefined) throw new Error('the fleet variant needs its fleet settings');
      limiter = rateLimiter({
        policy,
        identify: benchIdentity,
        logger: pino({ level: 'warn' }),
        nodeId: f.nodeId,
        ...timing,
        keyHash: { versions: [{ version: 'v1', secret: f.keyHashSecret }] },
        redis: { url: f.redisUrl, prefix: f.prefix, busSecret: { versions: [{ version: 'b1', secret: f.busSecret }] } },
      });
      await limiter.ready();
      guard = limiter;
      break;
    }
    case 'express-rate-limit':
      guard = rateLimit({ windowMs: 60_000, limit: HUGE, keyGenerator: apiKey, standardHeaders: false, legacyHeaders: false });
      break;
    case 'rlf-memory':
      guard = rlfMiddleware(new RateLimiterMemory({ points: HUGE, duration: 60 }));
      break;
    default:
      throw new Error(`unknown variant "${String(cfg.variant)}" (expected one of ${COST_VARIANTS.join(', ')})`);
  }
  const server = serveBench(guard, (port) => send({ type: 'ready', port }));
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'gc') {
      (globalThis.gc as ((o?: object) => void) | undefined)?.({ type: 'minor' });
      send({ type: 'gc-done' });
    } else if (m?.type === 'stats') {
      send({ type: 'stats', stats: limiterStats(limiter) });
    }
  });
  process.once('disconnect', () => {
    server.close();
    server.closeAllConnections();
    // A fleet member leaves cleanly, but never waits long for it.
    void Promise.race([limiter?.close(), sleep(2000)]).finally(() => process.exit(0));
  });
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(JSON.parse(process.argv[2] ?? '{}') as CostServerConfig).catch((err: unknown) => {
    process.stderr.write(`bench-cost-server: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}

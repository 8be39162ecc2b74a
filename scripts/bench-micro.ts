import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { rateLimit } from 'express-rate-limit';
import { pino } from 'pino';
import { RateLimiterMemory, RateLimiterRedis } from 'rate-limiter-flexible';
import { quantile } from '../lib/quantile.js';
import { rateLimiter } from '../middleware/rate-limiter.js';
import { benchIdentity, connectRedis, HUGE, hugePolicy, rlfMiddleware } from './bench-server.js';
import { median, round } from './bench-figures.js';

/**
 * The decision microbenchmark of `bench.ts`: each middleware called directly with minimal fake
 * req/res, in process (fleet-ratelimit, express-rate-limit, rate-limiter-flexible on memory and on
 * Redis), with the costs of key hashing and of one round timed apart; and its part of the report.
 */

export const MICRO = { warmup: 50_000, calls: 200_000, chunk: 10_000 };
/** rate-limiter-flexible on Redis: each call is a network round trip, so far fewer calls. */
export const MICRO_REDIS = { warmup: 2_000, calls: 20_000, chunk: 1_000 };

export interface Micro {
  nsPerCall: number;
  p50Us: number;
  p99Us: number;
}
export interface Skipped {
  skipped: string;
}
export interface MicroResult {
  limiter: Micro;
  erl: Micro;
  rlfMemory: Micro;
  rlfRedis: Micro | Skipped;
  hashNs: number;
  roundUs: number;
  timerNs: number;
}
type Log = (msg: string) => void;
type Table = (rows: (string | number | null)[][]) => string;

const fakeRes = { setHeader() {}, statusCode: 200, headersSent: false } as unknown as Response;
const noop = (() => undefined) as NextFunction;
const fakeReq = (key: string): Request => ({ headers: { 'x-api-key': key }, socket: { remoteAddress: '127.0.0.1' }, path: '/api/hello' }) as unknown as Request;
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Yields between chunks so that the limiter's round timer runs as in a server, outside the timed code. */
async function measure(fn: (i: number) => unknown, cfg: typeof MICRO = MICRO): Promise<Micro> {
  let i = 0;
  const first = fn(i++);
  const isAsync = first instanceof Promise;
  if (isAsync) await first;
  const call = isAsync ? async (): Promise<unknown> => await fn(i++) : (): unknown => fn(i++);
  let batchNs = 0n;
  for (const [calls, counted] of [
    [cfg.warmup, false],
    [cfg.calls, true],
  ] as const) {
    for (let done = 0; done < calls; done += cfg.chunk) {
      const t0 = process.hrtime.bigint();
      for (let j = 0; j < cfg.chunk; j++) isAsync ? await call() : call();
      if (counted) batchNs += process.hrtime.bigint() - t0;
      await tick();
    }
  }
  const samples = new Float64Array(cfg.calls);
  for (let k = 0; k < cfg.calls; k++) {
    const t0 = process.hrtime.bigint();
    isAsync ? await call() : call();
    samples[k] = Number(process.hrtime.bigint() - t0);
    if (k % cfg.chunk === cfg.chunk - 1) await tick();
  }
  samples.sort();
  const us = (q: number): number => round(quantile(samples, q) / 1000, 3);
  return { nsPerCall: round(Number(batchNs) / cfg.calls, 0), p50Us: us(0.5), p99Us: us(0.99) };
}

/** Calls a middleware that returns nothing (rlfMiddleware) and settles when it calls next(): each call is awaited. */
const untilNext = (mw: RequestHandler, req: Request): Promise<void> => new Promise((resolve, reject) => void mw(req, fakeRes, (err?: unknown) => (err === undefined ? resolve() : reject(err))));

/** The HTTP rlf-redis variant's middleware on a Redis of its own keys; skipped, not failed, when Redis is unreachable. */
async function rlfRedis(keys: number, key: (i: number) => string, reqs: readonly Request[], log: Log): Promise<Micro | Skipped> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const where = url.replace(/\/\/[^/@]*@/, '//'); // no credentials in the report
  const skip = (reason: string): Skipped => {
    log(`micro: skipping rate-limiter-flexible Redis: ${reason}`);
    return { skipped: reason };
  };
  const redis = await connectRedis(url).catch((err: Error) => err);
  if (redis instanceof Error) return skip(`Redis at ${where} unreachable: ${redis.message}`);
  // A prefix of this run's own, so that the keys deleted at the end are exactly the ones it created.
  const rl = new RateLimiterRedis({ storeClient: redis, keyPrefix: `bench-micro-${process.pid}-${Date.now()}`, points: HUGE, duration: 60 });
  const mw = rlfMiddleware(rl);
  try {
    log(`micro: rate-limiter-flexible Redis at ${where} (${MICRO_REDIS.calls} calls, each a round trip, each awaited)`);
    return await measure((i) => untilNext(mw, reqs[i % keys]!), MICRO_REDIS);
  } catch (err) {
    return skip(`Redis failed during the run: ${(err as Error).message}`);
  } finally {
    await redis.del(...Array.from({ length: keys }, (_, i) => rl.getKey(key(i)))).catch((err: Error) => log(`micro: could not delete the ${rl.keyPrefix}:* keys: ${err.message}`));
    redis.disconnect();
  }
}

/** Runs the microbenchmark over `keys` API keys, `key(i)` the i-th, in turn; progress goes to `log`. */
export async function micro(keys: number, key: (i: number) => string, log: Log): Promise<MicroResult> {
  const reqs = Array.from({ length: keys }, (_, i) => fakeReq(key(i)));
  const limiter = rateLimiter({ policy: hugePolicy([1000, 60_000]), identify: benchIdentity, logger: pino({ level: 'silent' }) });
  try {
    log('micro: limiter decision');
    const result = await measure((i) => limiter(reqs[i % keys]!, fakeRes, noop));
    // Two costs timed apart, as evidence of where the time goes: key hashing, and one round's work.
    let t = process.hrtime.bigint();
    for (let i = 0; i < MICRO.calls; i++) limiter.hasher.hash(key(i % keys));
    const hashNs = round(Number(process.hrtime.bigint() - t) / MICRO.calls, 0);
    const rounds: number[] = [];
    for (let r = 0; r < 20; r++) {
      for (const req of reqs) limiter(req, fakeRes, noop);
      t = process.hrtime.bigint();
      limiter.node.endRound();
      rounds.push(Number(process.hrtime.bigint() - t) / 1000);
    }
    const timer: number[] = [];
    for (let k = 0; k < 10_000; k++) {
      const t0 = process.hrtime.bigint();
      timer.push(Number(process.hrtime.bigint() - t0));
    }
    log('micro: express-rate-limit (async middleware: each call is awaited)');
    const erlMw = rateLimit({ windowMs: 60_000, limit: HUGE, keyGenerator: (req) => String(req.headers['x-api-key']), standardHeaders: false, legacyHeaders: false, validate: false });
    const erl = await measure((i) => erlMw(reqs[i % keys]!, fakeRes, noop));
    log('micro: rate-limiter-flexible memory store (each call awaited until next())');
    const rlfMw = rlfMiddleware(new RateLimiterMemory({ points: HUGE, duration: 60 }));
    const rlfMemory = await measure((i) => untilNext(rlfMw, reqs[i % keys]!));
    const rlfRedisRow = await rlfRedis(keys, key, reqs, log);
    return { limiter: result, erl, rlfMemory, rlfRedis: rlfRedisRow, hashNs, roundUs: round(median(rounds), 1), timerNs: median(timer) };
  } finally {
    await limiter.close();
  }
}

/** The microbenchmark's part of the report, for a run over `keys` keys. */
export function renderMicro(m: MicroResult, keys: number, table: Table): string[] {
  const out: string[] = [];
  out.push(`Decision in-process: ${keys} keys, ${MICRO.warmup} warm-up + ${MICRO.calls} calls; p50/p99 include ~${m.timerNs} ns timer`);
  const row = (name: string, x: Micro | Skipped): (string | number)[] => ('skipped' in x ? [name, 'skipped'] : [name, x.nsPerCall, x.p50Us, x.p99Us]);
  out.push(
    table([
      ['middleware', 'ns/call', 'p50 us', 'p99 us'],
      row('fleet-ratelimit', m.limiter),
      row('express-rate-limit (awaited)', m.erl),
      row('rate-limiter-flexible memory (awaited)', m.rlfMemory),
      row(`rate-limiter-flexible Redis (awaited, ${MICRO_REDIS.calls / 1000}k calls)`, m.rlfRedis),
    ]),
  );
  out.push(
    `  rate-limiter-flexible rows: the HTTP variants' middleware (rlfMiddleware), each call awaited until it calls next()`,
    `  rate-limiter-flexible Redis: ${'skipped' in m.rlfRedis ? `skipped: ${m.rlfRedis.skipped}` : `${MICRO_REDIS.warmup} warm-up + ${MICRO_REDIS.calls} calls, each a network round trip`}`,
  );
  out.push(`  fleet-ratelimit parts: key id (HMAC, cached by keyed fingerprint) ${m.hashNs} ns/call; one round, ${keys} keys touched: ${m.roundUs} us`, '');
  return out;
}

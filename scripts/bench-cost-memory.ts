import { setTimeout as sleep } from 'node:timers/promises';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { rateLimit } from 'express-rate-limit';
import { pino } from 'pino';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { FakeClock } from '../lib/clock.js';
import { rateLimiter } from '../middleware/rate-limiter.js';
import { settle } from './bench-memory.js';
import { apiKey, benchIdentity, HUGE, hugePolicy, rlfMiddleware } from './bench-server.js';

/**
 * Heap per active key, through each middleware as an app would call it: the middleware is built and
 * the heap settled, then `keys` distinct keys each make one request, a few rounds pass, and the heap
 * growth after GC is divided by the keys. For this limiter that is everything it keeps for a key (the
 * key-id cache entry, its counts, indexes); its fixed cost is left out. One plan window of 60 s,
 * with this limiter's clock held still, so no key's window ends and is swept while the figure is
 * taken. Each request object is made just before its call and dropped after it, so no request
 * object made before the first reading is collected before the second (which would take its size
 * off the figure: made up front and not held, 50,000 of them took ~170 bytes a key off it).
 * A reading counts ArrayBuffer memory as well as the heap (`settle`).
 */

export interface KeyMemoryRow {
  what: string;
  bytesPerKey: number;
  keys: number;
}
export interface KeyMemoryResult {
  keys: number;
  windowMs: number;
  note: string;
  rows: KeyMemoryRow[];
}

const WINDOW_MS = 60_000;
const res = {
  setHeader() {},
  statusCode: 200,
  headersSent: false,
  status() {
    return this;
  },
  json() {},
} as unknown as Response;
const fakeReq = (key: string): Request => ({ headers: { 'x-api-key': key }, socket: { remoteAddress: '127.0.0.1' }, ip: '127.0.0.1', path: '/api/hello', method: 'GET' }) as unknown as Request;

/** Calls a middleware and settles when it calls next() (or fails if it answers instead). */
const call = (mw: RequestHandler, req: Request): Promise<void> =>
  new Promise((resolve, reject) => {
    const next = ((err?: unknown) => (err === undefined ? resolve() : reject(err as Error))) as NextFunction;
    void Promise.resolve(mw(req, res, next)).catch(reject);
  });

async function perKey(what: string, keys: number, build: () => { mw: RequestHandler; close?: () => Promise<void> | void }): Promise<KeyMemoryRow> {
  const { mw, close } = build();
  try {
    await call(mw, fakeReq('warm-up-key')); // lazily built parts are in place before the first reading
    const before = await settle();
    for (let i = 0; i < keys; i++) await call(mw, fakeReq(`mem-key-${i}`));
    await sleep(200); // rounds run: per-round lists are flushed as in steady state
    const after = await settle();
    return { what, bytesPerKey: Math.round((after - before) / keys), keys };
  } finally {
    await close?.();
  }
}

/** Heap per active key of this limiter standalone and of the peers' memory stores. */
export async function keyMemory(keys: number): Promise<KeyMemoryResult> {
  const rows = [
    await perKey('fleet-ratelimit standalone', keys, () => {
      const limiter = rateLimiter({
        policy: hugePolicy([WINDOW_MS]),
        identify: benchIdentity,
        logger: pino({ level: 'silent' }),
        maxBuckets: Math.max(keys + 16, 50_000),
        clock: new FakeClock(Date.now()),
      });
      return { mw: limiter as RequestHandler, close: () => limiter.close() };
    }),
    await perKey('express-rate-limit memory', keys, () => ({
      mw: rateLimit({ windowMs: WINDOW_MS, limit: HUGE, keyGenerator: apiKey, standardHeaders: false, legacyHeaders: false, validate: false }),
    })),
    await perKey('rate-limiter-flexible memory', keys, () => ({ mw: rlfMiddleware(new RateLimiterMemory({ points: HUGE, duration: WINDOW_MS / 1000 })) })),
  ];
  return {
    keys,
    windowMs: WINDOW_MS,
    rows,
    note:
      "growth of heap + ArrayBuffer memory after GC over the keys, each key one request through the middleware; the middleware's own fixed cost left out; " +
      'for this limiter its key-id cache (16,384 entries at most), key map and counts included',
  };
}

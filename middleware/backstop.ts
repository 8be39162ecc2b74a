import { createHmac, randomBytes } from 'node:crypto';
import Joi from 'joi';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ConfigError } from '../lib/errors.js';
import { joiProblems } from '../lib/validate.js';

/** Options of `backstop()`. */
export interface BackstopOptions {
  /** The caller's key for the per-key floor (e.g. the x-api-key header); undefined skips the floor. */
  key: (req: Request) => string | undefined;
  /** Requests one key may make per `perKeyWindowMs` on this node: a generous multiple of its plan. */
  perKeyLimit: number;
  /** Length of the per-key window. @default 1000 */
  perKeyWindowMs?: number;
  /** Requests per second this node admits in total, whatever the limiter says. */
  nodeCeilingPerSecond: number;
  /** Distinct keys tracked per window; keys beyond it are held only to the node ceiling. @default 100000 */
  maxTrackedKeys?: number;
  /** Time source (wall-clock ms). @default Date.now */
  now?: () => number;
}

const schema = Joi.object({
  key: Joi.func().required(),
  perKeyLimit: Joi.number().integer().min(1).required(),
  perKeyWindowMs: Joi.number().integer().min(100).default(1000),
  nodeCeilingPerSecond: Joi.number().integer().min(1).required(),
  maxTrackedKeys: Joi.number().integer().min(1).default(100_000),
  now: Joi.func(),
});

/**
 * The backstop: a coarse per-key cap and an aggregate node ceiling, mounted before the limiter. It
 * shares no state and no request-path code with the limiter, so a limiter that throws on every request
 * (and therefore fails open) still cannot let unbounded traffic through. Deliberately inaccurate and
 * generous: it is the floor under the limiter, not a second limiter.
 */
export function backstop(options: BackstopOptions): RequestHandler {
  const { error, value } = schema.validate(options ?? {}, { abortEarly: false });
  if (error) throw new ConfigError(joiProblems(error), 'invalid backstop options');
  const keyOf = options.key;
  const now = options.now ?? Date.now;
  const windowMs: number = value.perKeyWindowMs;
  const perKeyLimit: number = value.perKeyLimit;
  const ceiling: number = value.nodeCeilingPerSecond;
  const maxTracked: number = value.maxTrackedKeys;
  // Keys are counted under a keyed hash with a secret of this process: no raw key is held.
  const secret = randomBytes(32);
  const counts = new Map<string, number>();
  let keySlot = -1;
  let nodeSlot = -1;
  let nodeCount = 0;

  return function backstopHandler(req: Request, res: Response, next: NextFunction): void {
    const t = now();
    const second = Math.floor(t / 1000);
    if (second !== nodeSlot) {
      nodeSlot = second;
      nodeCount = 0;
    }
    if (nodeCount >= ceiling) {
      refuse(res, 503, 'RL_BACKSTOP_CEILING', 'temporary-reduced-capacity', undefined);
      return;
    }
    const raw = keyOf(req);
    if (raw !== undefined) {
      const slot = Math.floor(t / windowMs);
      if (slot !== keySlot) {
        keySlot = slot;
        counts.clear();
      }
      const id = createHmac('sha256', secret).update(raw).digest('base64url');
      const n = counts.get(id) ?? 0;
      if (n >= perKeyLimit) {
        refuse(res, 429, 'RL_BACKSTOP_KEY', 'quota-exceeded', (slot + 1) * windowMs - t);
        return;
      }
      // Unauthenticated junk keys must not grow memory without bound: past the cap, only the ceiling holds.
      if (n > 0 || counts.size < maxTracked) counts.set(id, n + 1);
    }
    nodeCount++;
    next();
  };
}

function refuse(res: Response, status: 429 | 503, code: string, problem: string, waitMs: number | undefined): void {
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/problem+json');
  res.setHeader('Cache-Control', 'no-store');
  if (waitMs !== undefined) {
    res.setHeader('Retry-After', waitMs < 1000 ? '0' : String(Math.ceil(waitMs / 1000)));
    if (waitMs < 1000) res.setHeader('X-RateLimit-Reset-Ms', String(Math.max(1, Math.ceil(waitMs))));
  }
  res.end(
    JSON.stringify({
      type: `https://iana.org/assignments/http-problem-types#${problem}`,
      title: status === 429 ? 'Quota exceeded' : 'Temporarily reduced capacity',
      status,
      error: code,
    }),
  );
}

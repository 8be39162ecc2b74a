import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Logger } from '../lib/logger.js';
import type { LimitedInfo } from './quota.js';

/**
 * Decides that a request is not limited at all: a truthy answer lets it through neither counted nor
 * refused. Synchronous, or a Promise (as express-rate-limit's `skip`): only a Promise is awaited.
 */
export type SkipFn = (req: Request, res: Response) => boolean | Promise<boolean>;

/**
 * Writes the response to a request refused for its own quota (429). Called with the status, Retry-After
 * (and X-RateLimit-Reset-Ms), X-Correlation-Id and Cache-Control already set, and `req.rateLimit`
 * filled in; it writes the body (or calls `next(err)`). If it throws or its Promise rejects, the default
 * problem response is sent, if nothing was sent yet.
 */
export type OnLimited = (req: Request, res: Response, next: NextFunction, info: LimitedInfo) => void | Promise<void>;

type Handler = (req: Request, res: Response, next: NextFunction) => void;

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return typeof (v as PromiseLike<unknown> | undefined)?.then === 'function';
}

/**
 * `limit` behind `skip`: a request `skip` answers truthy goes to `skipped`; a `skip` that throws or
 * rejects is a limiter fault (`fail`). Without `skip`, `limit` itself, so it costs nothing.
 */
export function withSkip(skip: SkipFn | undefined, limit: Handler, skipped: Handler, fail: (req: Request, res: Response, next: NextFunction, err: unknown) => void): RequestHandler {
  if (skip === undefined) return limit;
  return function skipOrLimit(req: Request, res: Response, next: NextFunction): void {
    let answer: boolean | Promise<boolean>;
    try {
      answer = skip(req, res);
    } catch (err) {
      fail(req, res, next, err);
      return;
    }
    if (isThenable(answer)) {
      answer.then(
        (yes) => (yes ? skipped : limit)(req, res, next),
        (err: unknown) => fail(req, res, next, err),
      );
      return;
    }
    (answer ? skipped : limit)(req, res, next);
  };
}

/** Hands a refusal to `onLimited`; if that fails, logs it and sends the `fallback` response instead. */
export function callOnLimited(onLimited: OnLimited, req: Request, res: Response, next: NextFunction, info: LimitedInfo, fallback: () => void, logger: Logger): void {
  const failed = (err: unknown): void => {
    logger.error({ err, correlationId: info.correlationId }, 'onLimited failed: the default 429 response is sent');
    if (!res.headersSent) fallback();
  };
  try {
    const out = onLimited(req, res, next, info);
    if (isThenable(out)) out.then(undefined, failed);
  } catch (err) {
    failed(err);
  }
}

import { randomUUID } from 'node:crypto';
import type { Request, Response } from 'express';
import type { CatalogEntry } from '../lib/catalog.js';
import type { RetryHeaders } from '../lib/retry-after.js';

const CORRELATION = /^[A-Za-z0-9._:-]{1,128}$/;

/** The caller's correlation id (X-Correlation-Id or X-Request-Id, if well-formed), else a new one. */
export function correlationIdOf(req: Request): string {
  const given = req.headers['x-correlation-id'] ?? req.headers['x-request-id'];
  return typeof given === 'string' && CORRELATION.test(given) ? given : randomUUID();
}

/**
 * Status and headers of a denial: Cache-Control no-store, X-Correlation-Id and, for a 429, Retry-After
 * (and X-RateLimit-Reset-Ms under a second).
 */
export function denialHeaders(res: Response, entry: CatalogEntry, correlationId: string, retry?: RetryHeaders): void {
  res.status(entry.status);
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Correlation-Id', correlationId);
  if (retry !== undefined) {
    res.setHeader('Retry-After', retry.retryAfter);
    if (retry.resetMs !== undefined) res.setHeader('X-RateLimit-Reset-Ms', retry.resetMs);
  }
}

/**
 * Writes an RFC 9457 problem response for a denial. The body names the catalog code, the denying
 * window (429 only) and the correlation id — never a limit, a count, or anything about another tenant.
 */
export function sendProblem(res: Response, entry: CatalogEntry, correlationId: string, window?: string, retry?: RetryHeaders): void {
  denialHeaders(res, entry, correlationId, retry);
  res.setHeader('Content-Type', 'application/problem+json');
  const body: Record<string, string | number> = { type: entry.type, title: entry.title, status: entry.status, error: entry.code };
  if (window !== undefined) body.window = window;
  body.correlation_id = correlationId;
  res.end(JSON.stringify(body));
}

import { createHash, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Cluster, Redis } from 'ioredis';
import Joi from 'joi';
import type { Logger } from 'pino';
import type { Queue } from 'bullmq';
import type { EventLog } from '../bus/events.js';
import { PolicyConflict, type PolicyStore } from '../bus/policy-store.js';
import { StoreRecordError } from '../bus/store-signature.js';
import { ErrorCode, PolicyError, ValidationError, type Problem } from '../lib/errors.js';
import { KeyHasher, type HashKeyVersion } from '../lib/key-id.js';
import type { PolicyDoc } from '../lib/policy.js';
import { joiProblems } from '../lib/validate.js';

/** Inputs of the admin API. */
export interface AdminOptions {
  readonly store: PolicyStore;
  /** For the fleet's health: the bus's member list and ownership table. */
  readonly redis: Redis | Cluster;
  readonly prefix?: string;
  /** Bearer token of operators: policies, overrides, audit, health. */
  readonly adminToken: string;
  /** Separate bearer token for the kill switch only. */
  readonly breakGlassToken: string;
  /** The gateways' key-hash secrets: raw keys given here are hashed exactly as the nodes do. */
  readonly keyHash: { versions: HashKeyVersion[]; current?: string };
  readonly logger?: Logger;
  /** The maintenance queue (BullMQ) the job endpoints add runs to. */
  readonly queue?: Queue;
  /** Limit events, for subject access and erasure. */
  readonly events?: EventLog;
  /** Hours of traffic history a staged policy is judged over by default (720: 30 days). */
  readonly stageHours?: number;
}

export type Role = 'admin' | 'break-glass';

/** Why a change is made: every change and every data-subject request is audited with it. */
export const reason = Joi.string().trim().min(3).max(500).required();

/** A request rejected before anything changed; `problems` name every bad field. */
export class BadRequest extends ValidationError {
  constructor(problems: Problem[]) {
    super(ErrorCode.REQUEST, 'invalid request', problems);
  }
}

/**
 * Validates several parts of a request (body, query, a parameter) together: a 400 lists every problem
 * in all of them. `name` prefixes the paths of a part (a parameter's own name for a single value).
 */
export function valid<T extends unknown[]>(...parts: { [K in keyof T]: [schema: Joi.Schema, value: unknown, name?: string] }): T {
  const problems: Problem[] = [];
  const out = parts.map(([schema, value, name]) => {
    const { error, value: v } = schema.validate(value ?? {}, { abortEarly: false, convert: true });
    if (error) for (const p of joiProblems(error)) problems.push({ path: name === undefined ? p.path : p.path === '(root)' ? name : `${name}.${p.path}`, message: p.message });
    return v as unknown;
  });
  if (problems.length) throw new BadRequest(problems);
  return out as T;
}

/** An RFC 9457 problem response. */
export function problem(res: Response, status: number, error: string, title: string, extra: object = {}): void {
  res
    .status(status)
    .type('application/problem+json')
    .send(JSON.stringify({ type: 'about:blank', title, status, error, ...extra }));
}

/** The token of a request's `Authorization: Bearer …` header; the scheme is case-insensitive (RFC 9110 §11.1). */
export function bearerToken(req: Request): string | undefined {
  return /^Bearer +(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
}

/** Constant-time comparison of a presented token with the configured one (digests: no length leak). */
function same(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

/** What every router of the admin API shares: its options, key hashing, auth and the handler wrapper. */
export class AdminContext {
  readonly hasher: KeyHasher;
  /** Operators only. */
  readonly admin: RequestHandler;
  /** The break-glass credential only (the kill switch). */
  readonly breakGlass: RequestHandler;

  constructor(readonly o: AdminOptions) {
    this.hasher = new KeyHasher(o.keyHash.versions, o.keyHash.current);
    this.admin = this.authorize('admin');
    this.breakGlass = this.authorize('break-glass');
  }

  /** Bearer-token auth: 401 without a token, 403 with a wrong one or the wrong role. */
  private authorize(role: Role): RequestHandler {
    return (req: Request, res: Response, next: NextFunction): void => {
      const token = bearerToken(req);
      if (token === undefined) {
        res.setHeader('WWW-Authenticate', 'Bearer realm="fleet-ratelimit admin"');
        return problem(res, 401, 'UNAUTHORIZED', 'A bearer token is required');
      }
      const granted = this.roleOf(token);
      if (granted !== role) return problem(res, 403, 'FORBIDDEN', 'This credential may not do this');
      res.locals.principal = granted;
      next();
    };
  }

  /** The role a presented token grants, if any (constant time in the token). */
  roleOf(token: string): Role | undefined {
    return same(token, this.o.adminToken) ? 'admin' : same(token, this.o.breakGlassToken) ? 'break-glass' : undefined;
  }

  /** Wraps a handler: validation errors → 400, conflicts → 409, the rest → 500 (logged). */
  route(fn: (req: Request, res: Response) => Promise<void>): RequestHandler {
    return (req: Request, res: Response): void => {
      fn(req, res).catch((err: unknown) => {
        if (err instanceof BadRequest) return problem(res, 400, 'INVALID_REQUEST', 'The request is invalid; nothing was changed', { problems: err.problems });
        if (err instanceof PolicyError)
          return problem(res, 400, 'INVALID_POLICY', 'The resulting policy is invalid; nothing was changed', { problems: err.problems.map((p) => ({ path: `policy.${p.path}`, message: p.message })) });
        if (err instanceof PolicyConflict) return problem(res, 409, 'CONFLICT', err.message);
        // Someone wrote the store without the policy secret: no node applies it; a PUT replaces it.
        if (err instanceof StoreRecordError)
          return problem(
            res,
            409,
            'STORE_RECORD_REFUSED',
            `The stored record is refused (${err.reason}): ${err.message}. Nodes keep their last good one; store a policy or set the switch again to replace it`,
          );
        this.o.logger?.error({ err, path: req.path }, 'admin request failed');
        problem(res, 500, 'INTERNAL', 'The request failed; the audit trail shows any change that was made');
      });
    };
  }

  /** Applies `edit` to the stored policy (which must exist) as the next version, audited. */
  async change(res: Response, why: string, action: string, target: string, edit: (doc: PolicyDoc) => Omit<PolicyDoc, 'version'>): Promise<number> {
    const stored = await this.o.store.update(
      (doc) => {
        if (doc === undefined) throw new BadRequest([{ path: '(policy)', message: 'no policy is stored yet: PUT /admin/v1/policy first' }]);
        return edit(doc);
      },
      res.locals.principal as string,
      why,
      action,
      target,
    );
    return stored.version;
  }
}

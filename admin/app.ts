import { createHash, timingSafeEqual } from 'node:crypto';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import helmet from 'helmet';
import { collectDefaultMetrics, Counter, Registry } from 'prom-client';
import type { Cluster, Redis } from 'ioredis';
import Joi from 'joi';
import type { Logger } from 'pino';
import type { Queue } from 'bullmq';
import type { EventLog } from '../bus/events.js';
import { KeySchema, parseOwnerEntry } from '../bus/keys.js';
import { PolicyConflict, type PolicyStore } from '../bus/policy-store.js';
import { StoreRecordError } from '../bus/store-signature.js';
import { ErrorCode, PolicyError, ValidationError, type Problem } from '../lib/errors.js';
import { KeyHasher, type HashKeyVersion } from '../lib/key-id.js';
import type { PlanDef, PolicyDoc } from '../lib/policy.js';
import { joiProblems } from '../lib/validate.js';
import { metricsHandler } from '../middleware/metrics.js';

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
}

type Role = 'admin' | 'break-glass';

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const reason = Joi.string().trim().min(3).max(500).required();
const windowSchema = Joi.object({ name: Joi.string().pattern(NAME).required(), limit: Joi.number().integer().min(0).required(), windowMs: Joi.number().integer().required() }).unknown(true);
const bodies = {
  policy: Joi.object({ policy: Joi.object().required(), reason }),
  plan: Joi.object({ windows: Joi.array().items(windowSchema).min(1).required(), reason }),
  override: Joi.object({ key: Joi.string().min(8).max(256).required(), plan: Joi.string().pattern(NAME).required(), reason }),
  removeOverride: Joi.object({ key: Joi.string().min(8).max(256).required(), reason }),
  reasonOnly: Joi.object({ reason }),
  killSwitch: Joi.object({ enforce: Joi.boolean().strict().required(), reason }),
  subjects: Joi.object({ keys: Joi.array().items(Joi.string().min(8).max(256)).min(1).max(100).unique().required(), reason }),
};
const jobName = Joi.string().valid('reap', 'retention').required();
const jobId = Joi.string().pattern(/^[A-Za-z0-9:_-]{1,64}$/).required();
const planName = Joi.string().pattern(NAME).required();
const auditQuery = Joi.object({ limit: Joi.number().integer().min(1).max(1000).default(100) });

/** A request rejected before anything changed; `problems` name every bad field. */
class BadRequest extends ValidationError {
  constructor(problems: Problem[]) {
    super(ErrorCode.REQUEST, 'invalid request', problems);
  }
}

/**
 * Validates several parts of a request (body, query, a parameter) together: a 400 lists every problem
 * in all of them. `name` prefixes the paths of a part (a parameter's own name for a single value).
 */
function valid<T extends unknown[]>(...parts: { [K in keyof T]: [schema: Joi.Schema, value: unknown, name?: string] }): T {
  const problems: Problem[] = [];
  const out = parts.map(([schema, value, name]) => {
    const { error, value: v } = schema.validate(value ?? {}, { abortEarly: false, convert: true });
    if (error) for (const p of joiProblems(error)) problems.push({ path: name === undefined ? p.path : p.path === '(root)' ? name : `${name}.${p.path}`, message: p.message });
    return v as unknown;
  });
  if (problems.length) throw new BadRequest(problems);
  return out as T;
}

function problem(res: Response, status: number, error: string, title: string, extra: object = {}): void {
  res.status(status).type('application/problem+json').send(JSON.stringify({ type: 'about:blank', title, status, error, ...extra }));
}

/** Constant-time comparison of a presented token with the configured one (digests: no length leak). */
function same(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

/**
 * The admin API (A1) under `/admin/v1`: its own Express app with helmet, joi on every body, query
 * and parameter (400 listing every problem; nothing changes), bearer-token auth (401 without a token,
 * 403 with a wrong one or the wrong role), every change audited with its principal and reason. Raw
 * API keys are hashed on arrival and never stored, logged or echoed.
 */
export function createAdminApp(o: AdminOptions): Express {
  const hasher = new KeyHasher(o.keyHash.versions, o.keyHash.current);
  const keys = new KeySchema(o.prefix ?? 'frl');
  const app = express();
  app.disable('x-powered-by');
  app.use(helmet());
  // Prometheus, unauthenticated like the gateways' (no secrets in it): process metrics and requests.
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({ name: 'fleet_ratelimit_admin_requests_total', help: 'Admin API requests by route and status.', labelNames: ['method', 'route', 'status'], registers: [registry] });
  app.use((req, res, next) => {
    res.on('finish', () => requests.inc({ method: req.method, route: (req.route as { path?: string } | undefined)?.path ?? 'unmatched', status: String(res.statusCode) }));
    next();
  });
  app.get('/metrics', metricsHandler(registry));
  // Liveness for the container healthcheck; says nothing about the fleet (that is /admin/v1/health).
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.use(express.json({ limit: '1mb' }));

  const authorize =
    (role: Role) =>
    (req: Request, res: Response, next: NextFunction): void => {
      const m = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '');
      if (m === null) {
        res.setHeader('WWW-Authenticate', 'Bearer realm="fleet-ratelimit admin"');
        return problem(res, 401, 'UNAUTHORIZED', 'A bearer token is required');
      }
      const token = m[1]!;
      const granted: Role | undefined = same(token, o.adminToken) ? 'admin' : same(token, o.breakGlassToken) ? 'break-glass' : undefined;
      if (granted !== role) return problem(res, 403, 'FORBIDDEN', 'This credential may not do this');
      res.locals.principal = granted;
      next();
    };
  const admin = authorize('admin');

  /** Wraps a handler: validation errors → 400, conflicts → 409, the rest → 500 (logged). */
  const route =
    (fn: (req: Request, res: Response) => Promise<void>) =>
    (req: Request, res: Response): void => {
      fn(req, res).catch((err: unknown) => {
        if (err instanceof BadRequest) return problem(res, 400, 'INVALID_REQUEST', 'The request is invalid; nothing was changed', { problems: err.problems });
        if (err instanceof PolicyError) return problem(res, 400, 'INVALID_POLICY', 'The resulting policy is invalid; nothing was changed', { problems: err.problems.map((p) => ({ path: `policy.${p.path}`, message: p.message })) });
        if (err instanceof PolicyConflict) return problem(res, 409, 'CONFLICT', err.message);
        // Someone wrote the store without the policy secret: no node applies it; a PUT replaces it.
        if (err instanceof StoreRecordError) return problem(res, 409, 'STORE_RECORD_REFUSED', `The stored record is refused (${err.reason}): ${err.message}. Nodes keep their last good one; store a policy or set the switch again to replace it`);
        o.logger?.error({ err, path: req.path }, 'admin request failed');
        problem(res, 500, 'INTERNAL', 'The request failed; the audit trail shows any change that was made');
      });
    };

  /** Applies `change` to the stored policy (which must exist) as the next version, audited. */
  const change = async (res: Response, why: string, action: string, target: string, edit: (doc: PolicyDoc) => Omit<PolicyDoc, 'version'>): Promise<number> => {
    const stored = await o.store.update(
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
  };

  /** A stored record that does not verify, as the health view lists it (and throws anything else). */
  type Refused = { record: 'policy' | 'switch'; refused: string; message: string };
  const refusedAs =
    (record: Refused['record']) =>
    (err: unknown): Refused => {
      if (err instanceof StoreRecordError) return { record, refused: err.reason, message: err.message };
      throw err;
    };

  const v1 = express.Router();
  v1.get('/policy', admin, route(async (_req, res) => {
    const stored = await o.store.current();
    if (stored === undefined) return problem(res, 404, 'NO_POLICY', 'No policy is stored yet');
    res.json(stored);
  }));

  v1.put('/policy', admin, route(async (req, res) => {
    const [body] = valid<[{ policy: Record<string, unknown>; reason: string }]>([bodies.policy, req.body]);
    const { version: _ignored, ...policy } = body.policy;
    const stored = await o.store.update(() => policy as Omit<PolicyDoc, 'version'>, res.locals.principal as string, body.reason, 'policy.put', 'policy');
    res.json({ version: stored.version });
  }));

  v1.put('/plans/:name', admin, route(async (req, res) => {
    const [name, body] = valid<[string, { windows: PlanDef['windows']; reason: string }]>([planName, req.params.name, 'name'], [bodies.plan, req.body]);
    const version = await change(res, body.reason, 'plan.put', `plan:${name}`, (doc) => ({ ...doc, plans: { ...doc.plans, [name]: { windows: body.windows } } }));
    res.json({ plan: name, version });
  }));

  v1.delete('/plans/:name', admin, route(async (req, res) => {
    const [name, body] = valid<[string, { reason: string }]>([planName, req.params.name, 'name'], [bodies.reasonOnly, req.body]);
    const version = await change(res, body.reason, 'plan.delete', `plan:${name}`, (doc) => {
      if (!Object.hasOwn(doc.plans, name)) throw new BadRequest([{ path: 'name', message: `no plan "${name}"` }]);
      const { [name]: _gone, ...plans } = doc.plans;
      return { ...doc, plans };
    });
    res.json({ plan: name, version });
  }));

  v1.get('/overrides', admin, route(async (_req, res) => {
    const stored = await o.store.current();
    res.json(Object.entries(stored?.policy.keys ?? {}).map(([keyId, def]) => ({ keyId, ...def })));
  }));

  v1.put('/overrides', admin, route(async (req, res) => {
    const [body] = valid<[{ key: string; plan: string; reason: string }]>([bodies.override, req.body]);
    const keyId = hasher.hash(body.key);
    const version = await change(res, body.reason, 'override.put', keyId, (doc) => ({ ...doc, keys: { ...(doc.keys ?? {}), [keyId]: { plan: body.plan } } }));
    res.json({ keyId, version });
  }));

  v1.delete('/overrides', admin, route(async (req, res) => {
    const [body] = valid<[{ key: string; reason: string }]>([bodies.removeOverride, req.body]);
    const keyId = hasher.hash(body.key);
    const version = await change(res, body.reason, 'override.delete', keyId, (doc) => {
      if (!Object.hasOwn(doc.keys ?? {}, keyId)) throw new BadRequest([{ path: 'key', message: 'has no override' }]);
      const { [keyId]: _gone, ...keys } = doc.keys ?? {};
      return { ...doc, keys };
    });
    res.json({ keyId, version });
  }));

  v1.get('/audit', admin, route(async (req, res) => {
    const [q] = valid<[{ limit: number }]>([auditQuery, req.query]);
    res.json(await o.store.auditLog(q.limit));
  }));

  v1.get('/health', admin, route(async (_req, res) => {
    const [time, members, epochs, owners, statuses, policy, sw] = await Promise.all([
      o.redis.time(),
      o.redis.zrange(keys.ctl('members'), 0, -1, 'WITHSCORES'),
      o.redis.hgetall(keys.ctl('epochs')),
      o.redis.hgetall(keys.ctl('owners')),
      o.redis.hgetall(keys.ctl('status')),
      o.store.current().catch(refusedAs('policy')),
      o.store.switchState().catch(refusedAs('switch')),
    ]);
    const refused = [policy, sw].filter((x): x is Refused => x !== undefined && 'refused' in x);
    const policyOk = policy !== undefined && !('refused' in policy);
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    const nodes = [];
    for (let i = 0; i + 1 < members.length; i += 2) {
      const id = members[i]!;
      const st = statuses[id] === undefined ? undefined : (JSON.parse(statuses[id]!) as { nodeEpoch?: string; leases?: { committed: number; allowance: number } });
      // A status from an earlier process of the same node id is not this one's.
      const current = st !== undefined && st.nodeEpoch === epochs[id] ? st : undefined;
      nodes.push({ node: id, nodeEpoch: epochs[id] ?? null, lastRoundMsAgo: now - Number(members[i + 1]), status: current ?? null });
    }
    let committed = 0;
    let allowance = 0;
    for (const x of nodes) {
      const leases = (x.status as { leases?: { committed: number; allowance: number } } | null)?.leases;
      committed += leases?.committed ?? 0;
      allowance += leases?.allowance ?? 0;
    }
    const shards = Object.entries(owners)
      .map(([shard, v]) => {
        const { node, nodeEpoch, epoch, expiresAt } = parseOwnerEntry(v);
        return { shard: Number(shard), owner: node || null, ownerNodeEpoch: nodeEpoch || null, ownerEpoch: epoch, leaseMsLeft: Math.max(0, expiresAt - now) };
      })
      .sort((a, b) => a.shard - b.shard);
    const degraded = nodes.filter((x) => (x.status as { degraded?: boolean } | null)?.degraded === true).map((x) => x.node);
    const stalePolicy = nodes.filter((x) => policyOk && x.status !== null && (x.status as { policyVersion?: number }).policyVersion !== policy.version).map((x) => x.node);
    const enforcing = !('refused' in sw) && sw.enforce;
    res.json({
      at: now,
      enforcing,
      policyVersion: policyOk ? policy.version : null,
      // One answer to "is every node enforcing the right limits right now": not without a stored,
      // signed policy, nor while the store holds a record no node will apply.
      ok: policyOk && refused.length === 0 && degraded.length === 0 && stalePolicy.length === 0 && enforcing && shards.every((s) => s.owner !== null && s.leaseMsLeft > 0),
      refusedRecords: refused,
      degradedNodes: degraded,
      nodesOnAnotherPolicy: stalePolicy,
      leases: { committed, allowance },
      nodes,
      shards,
      unownedShards: shards.filter((s) => s.owner === null || s.leaseMsLeft === 0).map((s) => s.shard),
    });
  }));

  v1.post('/kill-switch', authorize('break-glass'), route(async (req, res) => {
    const [body] = valid<[{ enforce: boolean; reason: string }]>([bodies.killSwitch, req.body]);
    res.json(await o.store.setSwitch(body.enforce, res.locals.principal as string, body.reason));
  }));

  v1.post('/jobs/:name', admin, route(async (req, res) => {
    const [name, body] = valid<[string, { reason: string }]>([jobName, req.params.name, 'name'], [bodies.reasonOnly, req.body]);
    if (o.queue === undefined) return problem(res, 503, 'NO_QUEUE', 'No job queue is configured');
    // Audited before it is queued: a run is never without its audit entry.
    const jobId = `${name}-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
    await o.store.audit(res.locals.principal as string, 'job.run', name, body.reason, `job ${jobId}`);
    const job = await o.queue.add(name, { requestedBy: res.locals.principal, reason: body.reason }, { jobId });
    res.status(202).json({ id: job.id, name });
  }));

  v1.get('/jobs/:id', admin, route(async (req, res) => {
    const [id] = valid<[string]>([jobId, req.params.id, 'id']);
    // The state first, then the job: a job read as completed was read with its result.
    const state = o.queue === undefined ? 'unknown' : await o.queue.getJobState(id);
    const job = o.queue === undefined ? undefined : await o.queue.getJob(id);
    if (job === undefined || job === null || state === 'unknown') return problem(res, 404, 'NO_SUCH_JOB', 'No such job');
    res.json({ id: job.id, name: job.name, state, result: job.returnvalue ?? null, failedReason: job.failedReason ?? null, finishedOn: job.finishedOn ?? null });
  }));

  /** Every key id a raw key has had: hashed under each retained key-hash version. */
  const keyIdsOf = (keys: readonly string[]): string[] => keys.flatMap((k) => hasher.hashAll(k));

  v1.post('/subjects/events', admin, route(async (req, res) => {
    const [body] = valid<[{ keys: string[]; reason: string }]>([bodies.subjects, req.body]);
    if (o.events === undefined) return problem(res, 503, 'NO_EVENTS', 'No event log is configured');
    const keyIds = keyIdsOf(body.keys);
    const events = await o.events.find(keyIds);
    await o.store.audit(res.locals.principal as string, 'subject.access', keyIds.join(' '), body.reason, `${events.length} events`);
    res.json({ keyIds, events });
  }));

  v1.post('/subjects/erase', admin, route(async (req, res) => {
    const [body] = valid<[{ keys: string[]; reason: string }]>([bodies.subjects, req.body]);
    if (o.events === undefined) return problem(res, 503, 'NO_EVENTS', 'No event log is configured');
    const keyIds = keyIdsOf(body.keys);
    // Audited before and after: a failure half-way still leaves a record of the attempt.
    await o.store.audit(res.locals.principal as string, 'subject.erase.start', keyIds.join(' '), body.reason);
    const erased = await o.events.erase(keyIds);
    await o.store.audit(res.locals.principal as string, 'subject.erase', keyIds.join(' '), body.reason, `${erased} events erased`);
    res.json({ keyIds, erased });
  }));

  app.use('/admin/v1', v1);
  app.use((err: unknown, _req: Request, res: Response, next: NextFunction) => {
    // A body that is not JSON (express.json) is a bad request like any other.
    if ((err as { type?: string }).type === 'entity.parse.failed') return problem(res, 400, 'INVALID_REQUEST', 'The body is not JSON; nothing was changed', { problems: [{ path: '(body)', message: 'is not JSON' }] });
    next(err);
  });
  app.use((_req, res) => problem(res, 404, 'NOT_FOUND', 'No such endpoint'));
  return app;
}

import express, { type Router } from 'express';
import Joi from 'joi';
import { problem, reason, valid, type AdminContext } from './context.js';

const reasonOnly = Joi.object({ reason });
const subjects = Joi.object({ keys: Joi.array().items(Joi.string().min(8).max(256)).min(1).max(100).unique().required(), reason });
const jobName = Joi.string().valid('reap', 'retention').required();
const jobId = Joi.string()
  .pattern(/^[A-Za-z0-9:_-]{1,64}$/)
  .required();

/** Maintenance jobs (run one, read its state) and data-subject requests (access, erasure). */
export function operationsRouter(ctx: AdminContext): Router {
  const { o, admin, hasher } = ctx;
  const route = ctx.route.bind(ctx);
  const v1 = express.Router();
  v1.post(
    '/jobs/:name',
    admin,
    route(async (req, res) => {
      const [name, body] = valid<[string, { reason: string }]>([jobName, req.params.name, 'name'], [reasonOnly, req.body]);
      if (o.queue === undefined) return problem(res, 503, 'NO_QUEUE', 'No job queue is configured');
      // Audited before it is queued: a run is never without its audit entry.
      const id = `${name}-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
      await o.store.audit(res.locals.principal as string, 'job.run', name, body.reason, `job ${id}`);
      const job = await o.queue.add(name, { requestedBy: res.locals.principal, reason: body.reason }, { jobId: id });
      res.status(202).json({ id: job.id, name });
    }),
  );

  v1.get(
    '/jobs/:id',
    admin,
    route(async (req, res) => {
      const [id] = valid<[string]>([jobId, req.params.id, 'id']);
      // The state first, then the job: a job read as completed was read with its result.
      const state = o.queue === undefined ? 'unknown' : await o.queue.getJobState(id);
      const job = o.queue === undefined ? undefined : await o.queue.getJob(id);
      if (job === undefined || job === null || state === 'unknown') return problem(res, 404, 'NO_SUCH_JOB', 'No such job');
      res.json({ id: job.id, name: job.name, state, result: job.returnvalue ?? null, failedReason: job.failedReason ?? null, finishedOn: job.finishedOn ?? null });
    }),
  );

  /** Every key id a raw key has had: hashed under each retained key-hash version. */
  const keyIdsOf = (keys: readonly string[]): string[] => keys.flatMap((k) => hasher.hashAll(k));

  v1.post(
    '/subjects/events',
    admin,
    route(async (req, res) => {
      const [body] = valid<[{ keys: string[]; reason: string }]>([subjects, req.body]);
      if (o.events === undefined) return problem(res, 503, 'NO_EVENTS', 'No event log is configured');
      const keyIds = keyIdsOf(body.keys);
      // Each event counts the refusals of one key id, window and route class (first, last, count).
      const events = await o.events.find(keyIds);
      const refusals = events.reduce((n, e) => n + e.count, 0);
      await o.store.audit(res.locals.principal as string, 'subject.access', keyIds.join(' '), body.reason, `${events.length} events, ${refusals} refusals`);
      res.json({ keyIds, events, refusals });
    }),
  );

  v1.post(
    '/subjects/erase',
    admin,
    route(async (req, res) => {
      const [body] = valid<[{ keys: string[]; reason: string }]>([subjects, req.body]);
      if (o.events === undefined) return problem(res, 503, 'NO_EVENTS', 'No event log is configured');
      const keyIds = keyIdsOf(body.keys);
      // Audited before and after: a failure half-way still leaves a record of the attempt.
      await o.store.audit(res.locals.principal as string, 'subject.erase.start', keyIds.join(' '), body.reason);
      const erased = await o.events.erase(keyIds);
      await o.store.audit(res.locals.principal as string, 'subject.erase', keyIds.join(' '), body.reason, `${erased} events erased`);
      res.json({ keyIds, erased });
    }),
  );
  return v1;
}

import express, { type Router } from 'express';
import Joi from 'joi';
import { NoSuchStage, PolicyStaging, StaleStage } from '../bus/policy-stage.js';
import type { PolicyDoc } from '../lib/policy.js';
import { BadRequest, problem, reason, valid, type AdminContext } from './context.js';

/** History a candidate is judged over by default: the 30 days the retention job keeps. */
export const STAGE_HOURS = 720;

const STAGE_ID = Joi.string()
  .pattern(/^[A-Za-z0-9_-]{1,64}$/)
  .required();
const bodies = {
  stage: Joi.object({
    policy: Joi.object().required(),
    reason,
    hours: Joi.number()
      .integer()
      .min(1)
      .max(24 * 400),
  }),
  activate: Joi.object({ id: STAGE_ID, reason, acceptThrottled: Joi.boolean().strict() }),
};

/**
 * Policy staging: `POST /policy/stage` judges a candidate against the recorded traffic (which keys it
 * would newly throttle) and stores it, signed, for review; `GET /policy/staged/:id` shows it; `POST
 * /policy/activate` makes it the policy in force, only over the version it was staged on. Both writes
 * are audited.
 */
export function stageRouter(ctx: AdminContext, hours = STAGE_HOURS): Router {
  const { o, admin } = ctx;
  const route = ctx.route.bind(ctx);
  const staging = new PolicyStaging(o.store);
  const v1 = express.Router();

  v1.post(
    '/policy/stage',
    admin,
    route(async (req, res) => {
      const [body] = valid<[{ policy: Record<string, unknown>; reason: string; hours?: number }]>([bodies.stage, req.body]);
      const { version: _ignored, ...policy } = body.policy;
      const staged = await staging.stage(policy as Omit<PolicyDoc, 'version'>, res.locals.principal as string, body.reason, body.hours ?? hours);
      res.status(201).json({ id: staged.id, baseVersion: staged.baseVersion, version: staged.policy.version, report: staged.report });
    }),
  );

  v1.get(
    '/policy/staged/:id',
    admin,
    route(async (req, res) => {
      const [id] = valid<[string]>([STAGE_ID, req.params.id, 'id']);
      try {
        res.json(await staging.get(id));
      } catch (err) {
        if (err instanceof NoSuchStage) return problem(res, 404, 'NO_SUCH_STAGE', err.message);
        throw err;
      }
    }),
  );

  v1.post(
    '/policy/activate',
    admin,
    route(async (req, res) => {
      const [body] = valid<[{ id: string; reason: string; acceptThrottled?: boolean }]>([bodies.activate, req.body]);
      try {
        const staged = await staging.get(body.id);
        const n = staged.report.newlyThrottled.count;
        if (n > 0 && body.acceptThrottled !== true) {
          throw new BadRequest([{ path: 'acceptThrottled', message: `stage ${staged.id} would newly throttle ${n} (key, window); set true to activate it anyway` }]);
        }
        const done = await staging.activate(body.id, res.locals.principal as string, body.reason);
        res.json({ id: done.id, version: done.policy.version });
      } catch (err) {
        if (err instanceof NoSuchStage) return problem(res, 404, 'NO_SUCH_STAGE', err.message, { problems: [{ path: 'id', message: 'no staged policy has this id' }] });
        if (err instanceof StaleStage) return problem(res, 409, 'STALE_STAGE', err.message, { baseVersion: err.staged.baseVersion, currentVersion: err.current });
        throw err;
      }
    }),
  );
  return v1;
}

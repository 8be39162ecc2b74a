import express, { type Router } from 'express';
import Joi from 'joi';
import { RESERVED_NAMES, type PlanDef, type PolicyDoc } from '../lib/policy.js';
import { BadRequest, problem, reason, valid, type AdminContext } from './context.js';

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const windowSchema = Joi.object({ name: Joi.string().pattern(NAME).required(), limit: Joi.number().integer().min(0).required(), windowMs: Joi.number().integer().required() }).unknown(true);
const bodies = {
  policy: Joi.object({ policy: Joi.object().required(), reason }),
  plan: Joi.object({ windows: Joi.array().items(windowSchema).min(1).required(), reason }),
  override: Joi.object({ key: Joi.string().min(8).max(256).required(), plan: Joi.string().pattern(NAME).required(), reason }),
  removeOverride: Joi.object({ key: Joi.string().min(8).max(256).required(), reason }),
  reasonOnly: Joi.object({ reason }),
  killSwitch: Joi.object({ enforce: Joi.boolean().strict().required(), reason }),
};
const planName = Joi.string()
  .pattern(NAME)
  .invalid(...RESERVED_NAMES)
  .required();
const auditQuery = Joi.object({ limit: Joi.number().integer().min(1).max(1000).default(100) });

/** Policy, plans, per-key overrides, the audit trail and the kill switch. */
export function policyRouter(ctx: AdminContext): Router {
  const { o, admin, hasher } = ctx;
  const route = ctx.route.bind(ctx);
  const v1 = express.Router();
  v1.get(
    '/policy',
    admin,
    route(async (_req, res) => {
      const stored = await o.store.current();
      if (stored === undefined) return problem(res, 404, 'NO_POLICY', 'No policy is stored yet');
      res.json(stored);
    }),
  );

  v1.put(
    '/policy',
    admin,
    route(async (req, res) => {
      const [body] = valid<[{ policy: Record<string, unknown>; reason: string }]>([bodies.policy, req.body]);
      const { version: _ignored, ...policy } = body.policy;
      const stored = await o.store.update(() => policy as Omit<PolicyDoc, 'version'>, res.locals.principal as string, body.reason, 'policy.put', 'policy');
      res.json({ version: stored.version });
    }),
  );

  v1.put(
    '/plans/:name',
    admin,
    route(async (req, res) => {
      const [name, body] = valid<[string, { windows: PlanDef['windows']; reason: string }]>([planName, req.params.name, 'name'], [bodies.plan, req.body]);
      const version = await ctx.change(res, body.reason, 'plan.put', `plan:${name}`, (doc) => ({ ...doc, plans: { ...doc.plans, [name]: { windows: body.windows } } }));
      res.json({ plan: name, version });
    }),
  );

  v1.delete(
    '/plans/:name',
    admin,
    route(async (req, res) => {
      const [name, body] = valid<[string, { reason: string }]>([planName, req.params.name, 'name'], [bodies.reasonOnly, req.body]);
      const version = await ctx.change(res, body.reason, 'plan.delete', `plan:${name}`, (doc) => {
        if (!Object.hasOwn(doc.plans, name)) throw new BadRequest([{ path: 'name', message: `no plan "${name}"` }]);
        const { [name]: _gone, ...plans } = doc.plans;
        return { ...doc, plans };
      });
      res.json({ plan: name, version });
    }),
  );

  v1.get(
    '/overrides',
    admin,
    route(async (_req, res) => {
      const stored = await o.store.current();
      res.json(Object.entries(stored?.policy.keys ?? {}).map(([keyId, def]) => ({ keyId, ...def })));
    }),
  );

  v1.put(
    '/overrides',
    admin,
    route(async (req, res) => {
      const [body] = valid<[{ key: string; plan: string; reason: string }]>([bodies.override, req.body]);
      const keyId = hasher.hash(body.key);
      const version = await ctx.change(res, body.reason, 'override.put', keyId, (doc) => ({ ...doc, keys: { ...(doc.keys ?? {}), [keyId]: { plan: body.plan } } }));
      res.json({ keyId, version });
    }),
  );

  v1.delete(
    '/overrides',
    admin,
    route(async (req, res) => {
      const [body] = valid<[{ key: string; reason: string }]>([bodies.removeOverride, req.body]);
      const keyId = hasher.hash(body.key);
      const version = await ctx.change(res, body.reason, 'override.delete', keyId, (doc) => {
        if (!Object.hasOwn(doc.keys ?? {}, keyId)) throw new BadRequest([{ path: 'key', message: 'has no override' }]);
        const { [keyId]: _gone, ...keys } = doc.keys ?? {};
        return { ...doc, keys };
      });
      res.json({ keyId, version });
    }),
  );

  v1.get(
    '/audit',
    admin,
    route(async (req, res) => {
      const [q] = valid<[{ limit: number }]>([auditQuery, req.query]);
      res.json(await o.store.auditLog(q.limit));
    }),
  );

  v1.post(
    '/kill-switch',
    ctx.breakGlass,
    route(async (req, res) => {
      const [body] = valid<[{ enforce: boolean; reason: string }]>([bodies.killSwitch, req.body]);
      res.json(await o.store.setSwitch(body.enforce, res.locals.principal as string, body.reason));
    }),
  );
  return v1;
}

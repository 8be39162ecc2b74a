import express, { type Router } from 'express';
import type { AdminContext } from './context.js';
import { readFleetHealth } from './fleet-health.js';

/** `GET /health`: members, their statuses, shard ownership and the stored records, with one `ok`. */
export function healthRouter(ctx: AdminContext): Router {
  const v1 = express.Router();
  v1.get(
    '/health',
    ctx.admin,
    ctx.route(async (_req, res) => {
      res.json(await readFleetHealth(ctx.o));
    }),
  );
  return v1;
}

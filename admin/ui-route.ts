import { randomBytes } from 'node:crypto';
import express, { type Request, type Response, type Router } from 'express';
import { bearerToken, type AdminContext } from './context.js';
import { readFleetHealth } from './fleet-health.js';
import { healthPage, loginPage, unavailablePage } from './ui-page.js';

const COOKIE = 'frl_admin_ui';
/** How long a sign-in lasts. */
const SESSION_MS = 8 * 3_600_000;
/** Sessions kept at once; signing in past it ends the oldest. */
const MAX_SESSIONS = 1_000;

/**
 * Browser sessions of the health page. A browser cannot send the bearer header by itself, so the
 * operator posts the admin token once and gets a random session id in an HttpOnly, SameSite=Strict
 * cookie scoped to `/admin/ui`. The token itself is never put in a cookie or a URL. Sessions live in
 * this process only: a restart signs everyone out.
 */
class UiSessions {
  private readonly expiry = new Map<string, number>();

  open(now: number): string {
    const id = randomBytes(32).toString('base64url');
    if (this.expiry.size >= MAX_SESSIONS) this.expiry.delete(this.expiry.keys().next().value!);
    this.expiry.set(id, now + SESSION_MS);
    return id;
  }

  valid(id: string | undefined, now: number): boolean {
    if (id === undefined) return false;
    const until = this.expiry.get(id);
    if (until === undefined) return false;
    if (until > now) return true;
    this.expiry.delete(id);
    return false;
  }

  close(id: string | undefined): void {
    if (id !== undefined) this.expiry.delete(id);
  }
}

/** The value of cookie `name` in the request, if sent. */
function cookie(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Sends `html` with `status`; never cached, since it shows the fleet's live state. */
function html(res: Response, status: number, body: string): void {
  res.status(status).setHeader('Cache-Control', 'no-store').type('text/html; charset=utf-8').send(body);
}

/**
 * `GET /admin/ui`: the enforcement-health page (server-rendered HTML, reloading itself) for operators,
 * signed in by the admin token in a bearer header or through the page's own form. The break-glass
 * token does not open it.
 */
export function uiRouter(ctx: AdminContext, clock: () => number = Date.now): Router {
  const sessions = new UiSessions();
  const r = express.Router();
  const signedIn = (req: Request): boolean => {
    const token = bearerToken(req);
    return token !== undefined ? ctx.roleOf(token) === 'admin' : sessions.valid(cookie(req, COOKIE), clock());
  };

  r.get('/ui', (req, res) => {
    if (!signedIn(req)) return html(res, 401, loginPage());
    readFleetHealth(ctx.o).then(
      (h) => html(res, 200, healthPage(h)),
      (err: unknown) => {
        ctx.o.logger?.error({ err, path: req.path }, 'admin ui failed');
        html(res, 503, unavailablePage());
      },
    );
  });

  r.post('/ui/login', express.urlencoded({ extended: false, limit: '4kb' }), (req, res) => {
    const token = (req.body as { token?: unknown } | undefined)?.token;
    if (typeof token !== 'string' || ctx.roleOf(token) !== 'admin') return html(res, 401, loginPage('That is not the admin token'));
    const secure = req.secure ? '; Secure' : '';
    res.setHeader('Set-Cookie', `${COOKIE}=${sessions.open(clock())}; HttpOnly; SameSite=Strict; Path=/admin/ui; Max-Age=${SESSION_MS / 1000}${secure}`);
    ctx.o.logger?.info({ principal: 'admin' }, 'admin ui sign-in');
    res.redirect(303, '/admin/ui');
  });

  r.post('/ui/logout', (req, res) => {
    sessions.close(cookie(req, COOKIE));
    res.setHeader('Set-Cookie', `${COOKIE}=; HttpOnly; SameSite=Strict; Path=/admin/ui; Max-Age=0`);
    res.redirect(303, '/admin/ui');
  });
  return r;
}

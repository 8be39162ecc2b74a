import { expect } from 'chai';
import express, { type Request } from 'express';
import { IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import request from 'supertest';
import { ConfigError } from '../../lib/errors.js';
import type { RateLimitInfo } from '../../middleware/quota.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { RequestProperty } from '../../middleware/request-property.js';
import { captureLogger } from '../support/logs.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';

const opened: RateLimiterMiddleware[] = [];

function limiter(requestPropertyName?: string): RateLimiterMiddleware {
  const l = rateLimiter({
    policy: demoPolicy(),
    identify: () => ({ principal: 'sk_live_property', tenant: 'acme' }),
    keyHash: TEST_KEY_HASH,
    logger: captureLogger().logger,
    ...(requestPropertyName ? { requestPropertyName } : {}),
  });
  opened.push(l);
  return l;
}

const read = (req: Request, name: string): unknown => (req as unknown as Record<string, unknown>)[name];

describe('req.rateLimit: an accessor on express.request, values per request', () => {
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((l) => l.close()));
  });

  it('each request reads its own quota, assignments are read back, and the request gains no own property', async () => {
    const app = express().use(limiter());
    app.use((req, res) => {
      const before = (req.rateLimit as RateLimitInfo).remaining;
      const shape = { inReq: 'rateLimit' in req, own: Object.hasOwn(req, 'rateLimit'), listed: Object.keys(req).includes('rateLimit') };
      (req as unknown as { rateLimit: unknown }).rateLimit = { replaced: before };
      res.json({ before, after: req.rateLimit, shape });
    });
    const bodies = await Promise.all([1, 2, 3].map(() => request(app).get('/x').expect(200)));
    expect(bodies.map((r) => r.body.before).sort()).to.deep.equal([7, 8, 9]);
    for (const { body } of bodies) {
      expect(body.after).to.deep.equal({ replaced: body.before });
      expect(body.shape).to.deep.equal({ inReq: true, own: false, listed: false });
    }
    expect(Object.hasOwn(IncomingMessage.prototype, 'rateLimit')).to.equal(false);
  });

  it('a read through an object made from the request, or of a default set on an app’s prototype, finds the nearest value', async () => {
    const app = express()
      .use(limiter('nearQuota'))
      .use((req, res) => res.json({ derived: (read(Object.create(req) as Request, 'nearQuota') as RateLimitInfo).remaining }));
    expect((await request(app).get('/x').expect(200)).body).to.deep.equal({ derived: 9 });
    const unlimited = () => express().use((req, res) => res.json({ seen: read(req, 'nearQuota') ?? null }));
    const withDefault = unlimited();
    (withDefault.request as unknown as Record<string, unknown>).nearQuota = 'app default';
    expect((await request(withDefault).get('/x').expect(200)).body).to.deep.equal({ seen: 'app default' });
    expect((await request(unlimited()).get('/x').expect(200)).body).to.deep.equal({ seen: null });
  });

  it('a handler in a mounted sub-app reads the quota set by a limiter in its parent', async () => {
    const sub = express().get('/x', (req, res) => res.json({ remaining: (req.rateLimit as RateLimitInfo | undefined)?.remaining ?? null }));
    const app = express().use(limiter()).use('/sub', sub);
    expect((await request(app).get('/sub/x').expect(200)).body).to.deep.equal({ remaining: 9 });
  });

  it('a limiter in a mounted sub-app: the parent’s handler after it still reads the quota', async () => {
    const api = express().use(limiter('subQuota'));
    const app = express()
      .use('/api', api)
      .use((req, res) => res.json({ remaining: (read(req, 'subQuota') as RateLimitInfo | undefined)?.remaining ?? null, own: Object.hasOwn(req, 'subQuota') }));
    expect((await request(app).get('/api/x').expect(200)).body).to.deep.equal({ remaining: 9, own: false });
  });

  it('a name the prototype chain already has is assigned on the request, as before', async () => {
    const app = express();
    Object.defineProperty(app.request, 'quotaSeen', { value: 'default', writable: true, configurable: true });
    app.use(limiter('quotaSeen')).use((req, res) => res.json({ own: Object.hasOwn(req, 'quotaSeen'), remaining: (read(req, 'quotaSeen') as RateLimitInfo).remaining }));
    expect((await request(app).get('/x').expect(200)).body).to.deep.equal({ own: true, remaining: 9 });
    expect(Object.getOwnPropertyDescriptor(app.request, 'quotaSeen')!.value).to.equal('default');
  });

  it('without Express, a request of Node’s own class gets an own property and IncomingMessage.prototype is left alone', () => {
    const prop = RequestProperty.named('plainQuota');
    const req = new IncomingMessage(new Socket());
    prop.set(req, 42);
    expect(Object.hasOwn(req, 'plainQuota')).to.equal(true);
    expect(Object.hasOwn(IncomingMessage.prototype, 'plainQuota')).to.equal(false);
  });

  it('a request with an own property of that name keeps it; a frozen prototype is never changed', () => {
    const prop = RequestProperty.named('frozenQuota');
    const proto = Object.freeze(Object.create(IncomingMessage.prototype) as object);
    const req = Object.create(proto) as Record<string, unknown>;
    prop.set(req, 1);
    expect(Object.hasOwn(req, 'frozenQuota')).to.equal(true);
    const open = Object.create(IncomingMessage.prototype) as object;
    const a = Object.create(open) as Record<string, unknown>;
    a.frozenQuota = 'set earlier';
    prop.set(a, 2);
    expect(Object.getOwnPropertyDescriptor(a, 'frozenQuota')!.value).to.equal(2);
    const b = Object.create(open) as Record<string, unknown>;
    prop.set(b, 3);
    expect([Object.hasOwn(b, 'frozenQuota'), b.frozenQuota, 'frozenQuota' in Object.create(open)]).to.deep.equal([false, 3, true]);
  });

  it('requestPropertyName may not name __proto__ or constructor', () => {
    for (const name of ['__proto__', 'constructor']) {
      expect(() => limiter(name))
        .to.throw(ConfigError)
        .that.satisfies((e: ConfigError) => e.problems.some((p) => p.path === 'requestPropertyName'));
    }
  });
});

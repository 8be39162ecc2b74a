import { expect } from 'chai';
import { PolicyError } from '../../lib/errors.js';
import { SMALL_SHARE, smallFixedShares } from '../../lib/fixed-share-advice.js';
import { compilePolicy } from '../../lib/policy.js';
import { demoPolicy } from '../support/fixtures.js';

function problemsOf(input: unknown): string[] {
  try {
    compilePolicy(input);
  } catch (err) {
    expect(err).to.be.instanceOf(PolicyError);
    expect((err as PolicyError).code).to.equal('RL_POLICY');
    return (err as PolicyError).problems.map((p) => `${p.path}: ${p.message}`);
  }
  return expect.fail('policy should have been rejected');
}

describe('policy model and validation', () => {
  const keyId = 'v1:AAAAAAAAAAAAAAAAAAAAAA';

  it('resolves key override, then tenant plan, then default plan', () => {
    const p = compilePolicy(demoPolicy({ keys: { [keyId]: { plan: 'pro' } }, tenants: { big: { plan: 'hour', share: 0.9 } } }));
    expect(p.limitsFor(keyId, 'big').id).to.equal('plan:pro');
    expect(p.limitsFor('v1:BBBBBBBBBBBBBBBBBBBBBB', 'big').id).to.equal('plan:hour');
    expect(p.limitsFor('v1:BBBBBBBBBBBBBBBBBBBBBB', 'small').id).to.equal('plan:free');
    expect(p.limitsFor(keyId, 'small').windows.map((w) => [w.name, w.limit, w.windowMs])).to.deep.equal([
      ['burst', 100, 1000],
      ['sustained', 5000, 60_000],
    ]);
  });

  it('compiles per-key explicit windows and the RateLimit-Policy header once', () => {
    const p = compilePolicy(demoPolicy({ keys: { [keyId]: { windows: [{ name: 'special', limit: 7, windowMs: 2500 }] } } }));
    const l = p.limitsFor(keyId, 't');
    expect(l.id).to.equal(`key:${keyId}`);
    expect(l.policyHeader).to.equal('"special";q=7;w=3');
    expect(p.limitsFor('v1:CCCCCCCCCCCCCCCCCCCCCC', 't').policyHeader).to.equal('"burst";q=10;w=1, "sustained";q=100;w=60');
    expect(p.limitsFor(keyId, 't')).to.equal(l); // the same frozen object: nothing built per request
  });

  it('resolves route classes: fail mode and the anonymous plan', () => {
    const p = compilePolicy(demoPolicy({ routeClasses: { payments: { failMode: 'closed' }, public: { plan: 'free' } } }));
    expect(p.failClosed('payments')).to.equal(true);
    expect(p.failClosed('public')).to.equal(false);
    expect(p.failClosed('unknown')).to.equal(false);
    expect(p.anonymousLimitsFor('public').id).to.equal('plan:free');
    expect(p.anonymousLimitsFor('other').id).to.equal('plan:anonymous');
  });

  it('tenant share: tenant profile, else the capacity default, else unlimited', () => {
    expect(compilePolicy(demoPolicy()).tenantShare('a')).to.equal(undefined);
    const p = compilePolicy(demoPolicy({ capacity: { nodeAdmissionsPerSecond: 100, tenantShare: 0.25 }, tenants: { a: { share: 0.5 } } }));
    expect(p.tenantShare('a')).to.equal(0.5);
    expect(p.tenantShare('b')).to.equal(0.25);
  });

  it('is frozen: the compiled document cannot be changed afterwards', () => {
    const p = compilePolicy(demoPolicy());
    expect(Object.isFrozen(p.doc)).to.equal(true);
    expect(Object.isFrozen(p.doc.plans.free!.windows[0])).to.equal(true);
  });

  const bad: Array<[string, unknown, string[]]> = [
    ['not an object', 42, ['(root): must be of type object']],
    ['missing everything', {}, ['version: is required', 'plans: is required', 'defaultPlan: is required', 'anonymousPlan: is required']],
    [
      'bad windows, listed together',
      demoPolicy({
        plans: {
          free: {
            windows: [
              { name: 'a', limit: 0, windowMs: 10 },
              { name: 'a', limit: 5, windowMs: 1000 },
            ],
          },
          anonymous: { windows: [] },
        },
      }),
      [
        'plans.free.windows.0.limit: must be greater than or equal to 1',
        'plans.free.windows.0.windowMs: must be greater than or equal to 1000',
        'plans.free.windows.1: contains a duplicate value',
        'plans.anonymous.windows: must contain at least 1 items',
      ],
    ],
    [
      'unknown plan references',
      demoPolicy({ defaultPlan: 'gold', tenants: { t: { plan: 'silver' } }, routeClasses: { x: { plan: 'bronze' } } }),
      ['defaultPlan: unknown plan "gold"', 'tenants.t.plan: unknown plan "silver"', 'routeClasses.x.plan: unknown plan "bronze"'],
    ],
    ['a raw key as override key', demoPolicy({ keys: { sk_live_123: { plan: 'pro' } } }), ['keys: overrides must be keyed by key id (v1:…), never by raw key']],
    [
      'override with both plan and windows',
      demoPolicy({ keys: { [keyId]: { plan: 'pro', windows: [{ name: 'w', limit: 1, windowMs: 1000 }] } } }),
      [`keys.${keyId}: contains a conflict between exclusive peers [plan, windows]`],
    ],
    [
      'bad fail mode and share',
      demoPolicy({ routeClasses: { x: { failMode: 'maybe' as 'open' } }, tenants: { t: { share: 1.5 } } }),
      ['routeClasses.x.failMode: must be one of [open, closed]', 'tenants.t.share: must be less than or equal to 1'],
    ],
    [
      'a longer window with a smaller limit',
      demoPolicy({
        plans: {
          free: {
            windows: [
              { name: 'burst', limit: 10, windowMs: 1000 },
              { name: 'sustained', limit: 5, windowMs: 60_000 },
            ],
          },
          anonymous: { windows: [{ name: 'a', limit: 1, windowMs: 1000 }] },
        },
      }),
      ['plans.free.windows: window "sustained" (5 per 60000 ms) is longer than "burst" but allows fewer requests (10), so "burst" can never bind'],
    ],
  ];
  for (const [name, input, expected] of bad) {
    it(`rejects ${name}, naming every field`, () => {
      expect(problemsOf(input)).to.include.members(expected);
    });
  }

  it('never echoes a raw key found where a key id belongs, whatever else is wrong with its entry', () => {
    const problems = problemsOf(demoPolicy({ keys: { [keyId]: { plan: 'pro' }, sk_live_secret_123: { plan: 'gold' }, sk_live_other: { windows: [{ name: 'w', limit: -1, windowMs: 1000 }] } } }));
    expect(problems.join(' ')).to.not.include('sk_live');
    expect(problems).to.include.members(['keys[1].plan: unknown plan "gold"', 'keys[2].windows.0.limit: must be greater than or equal to 1']);
  });

  it('allocates by fixed share per plan, or for every plan that sets none; leasing by default', () => {
    const base = demoPolicy();
    const plans = { ...base.plans, pro: { ...base.plans['pro']!, allocation: 'fixed-share' as const }, hour: { ...base.plans['hour']!, allocation: 'leasing' as const } };
    const p = compilePolicy(demoPolicy({ plans, keys: { [keyId]: { windows: [{ name: 'w', limit: 7, windowMs: 1000 }] } } }));
    expect(p.limitsFor('v1:BBBBBBBBBBBBBBBBBBBBBB', 't').fixedShare).to.equal(false);
    expect(p.limitsFor(keyId, 't').fixedShare).to.equal(false);
    const tenants = { big: { plan: 'pro' }, hourly: { plan: 'hour' } };
    expect(compilePolicy(demoPolicy({ plans, tenants })).limitsFor('v1:BBBBBBBBBBBBBBBBBBBBBB', 'big').fixedShare).to.equal(true);
    // The document's setting: every plan without its own, and per-key windows.
    const global = compilePolicy(demoPolicy({ plans, tenants, allocation: 'fixed-share', keys: { [keyId]: { windows: [{ name: 'w', limit: 7, windowMs: 1000 }] } } }));
    expect(global.limitsFor('v1:BBBBBBBBBBBBBBBBBBBBBB', 't').fixedShare).to.equal(true);
    expect(global.limitsFor(keyId, 't').fixedShare).to.equal(true);
    expect(global.limitsFor('v1:BBBBBBBBBBBBBBBBBBBBBB', 'hourly').fixedShare).to.equal(false);
  });

  it('warns of fixed-share windows whose share per node is small for the fleet (policy:check --fleet)', () => {
    const base = demoPolicy();
    const plans = { ...base.plans, pro: { ...base.plans['pro']!, allocation: 'fixed-share' as const } };
    // pro: burst 100, sustained 5000. On 20 nodes burst's share is 5 (< SMALL_SHARE); sustained's 250.
    const doc = compilePolicy(demoPolicy({ plans })).doc;
    const w = smallFixedShares(doc, 20);
    expect(w.map((x) => x.path)).to.deep.equal(['plans.pro.windows.0']);
    expect(w[0]!.message).to.include('on 20 nodes each gets 5').and.include('retry at the window');
    // The remainder is named: 100 on 30 nodes is 3 each and 10 left.
    expect(smallFixedShares(doc, 30)[0]!.message).to.include('each gets 3, and 10 are a reserve');
    // A share of exactly SMALL_SHARE passes; leasing plans are never warned about.
    expect(smallFixedShares(doc, 100 / SMALL_SHARE)).to.deep.equal([]);
    expect(smallFixedShares(compilePolicy(demoPolicy()).doc, 1000)).to.deep.equal([]);
    // The document's allocation: every plan without its own, and per-key windows.
    const all = compilePolicy(demoPolicy({ allocation: 'fixed-share', keys: { [keyId]: { windows: [{ name: 'w', limit: 7, windowMs: 1000 }] } } })).doc;
    expect(smallFixedShares(all, 3).map((x) => x.path)).to.deep.equal(['plans.free.windows.0', 'plans.anonymous.windows.0', `keys.${keyId}.windows.0`]);
  });

  it('rejects an unknown allocation, and fixed share written as a mode, naming the field', () => {
    const base = demoPolicy();
    expect(problemsOf(demoPolicy({ allocation: 'fixed' as never }))).to.deep.equal(['allocation: must be "leasing" or "fixed-share"']);
    expect(problemsOf(demoPolicy({ plans: { ...base.plans, pro: { ...base.plans['pro']!, mode: 'fixed-share' as never } } }))).to.deep.equal([
      'plans.pro.mode: must be "enforce" or "shadow" (a fixed share of credit per node is "allocation": "fixed-share")',
    ]);
  });

  it('refuses plan and route-class names an object inherits, an own __proto__ key included', () => {
    for (const name of ['constructor', 'toString', 'hasOwnProperty']) {
      expect(() => compilePolicy({ ...demoPolicy(), plans: { ...demoPolicy().plans, [name]: { windows: [{ name: 'w', limit: 1, windowMs: 1000 }] } } }), name).to.throw(
        PolicyError,
        new RegExp(`plans\\.${name}`),
      );
    }
    const smuggled = JSON.parse(JSON.stringify(demoPolicy()).replace('"plans":{', '"plans":{"__proto__":{"windows":[{"name":"w","limit":1,"windowMs":1000}]},'));
    expect(() => compilePolicy(smuggled)).to.throw(PolicyError, /plans\.__proto__: is a reserved name/);
    expect(() => compilePolicy({ ...demoPolicy(), tenants: { constructor: { plan: 'pro' } } })).to.throw(PolicyError, /tenants\.constructor/);
  });
});

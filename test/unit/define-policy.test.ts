import { expect } from 'chai';
import { definePolicy, type PolicyInput } from '../../lib/define-policy.js';
import { PolicyError, ValidationError } from '../../lib/errors.js';
import { compilePolicy, type PolicyDoc } from '../../lib/policy.js';
// Typed as TypeScript types JSON: every string widened (failMode: string). No cast below.
import demo from '../../demo/policy.json' with { type: 'json' };

function problemsOf(input: PolicyInput): string[] {
  try {
    definePolicy(input);
  } catch (err) {
    expect(err).to.be.instanceOf(PolicyError).and.instanceOf(ValidationError);
    expect((err as PolicyError).code).to.equal('RL_POLICY');
    return (err as PolicyError).problems.map((p) => `${p.path}: ${p.message}`);
  }
  return expect.fail('policy should have been rejected');
}

describe('definePolicy: a policy from JSON, typed without a cast', () => {
  it('returns the JSON document as a PolicyDoc, validated, frozen and copied', () => {
    const doc: PolicyDoc = definePolicy(demo.policy);
    expect(doc).to.deep.equal(demo.policy);
    expect(doc).to.not.equal(demo.policy);
    expect(Object.isFrozen(doc) && Object.isFrozen(doc.plans.free?.windows[0])).to.equal(true);
    expect(doc.routeClasses?.payments?.failMode).to.equal('closed');
    expect(compilePolicy(doc).failClosed('payments')).to.equal(true);
    expect(Object.isFrozen(demo.policy)).to.equal(false);
  });

  it('rejects a failMode outside open/closed with a coded PolicyError naming the field', () => {
    expect(problemsOf({ ...demo.policy, routeClasses: { payments: { failMode: 'sometimes' } } })).to.deep.equal(['routeClasses.payments.failMode: must be one of [open, closed]']);
  });

  it('types a plan’s mode and allocation, and the document’s, as JSON does (strings), and checks them', () => {
    const json = {
      ...demo.policy,
      allocation: 'fixed-share' as string,
      plans: { ...demo.policy.plans, free: { ...demo.policy.plans.free, mode: 'shadow' as string, allocation: 'leasing' as string } },
    };
    const doc: PolicyDoc = definePolicy(json);
    expect([doc.allocation, doc.plans.free?.allocation, doc.plans.free?.mode]).to.deep.equal(['fixed-share', 'leasing', 'shadow']);
    expect(problemsOf({ ...json, allocation: 'fixed' })).to.deep.equal(['allocation: must be "leasing" or "fixed-share"']);
  });

  it('reports every problem at once, the cross-references included', () => {
    const problems = problemsOf({ ...demo.policy, defaultPlan: 'gold', routeClasses: { a: { failMode: 'shut', plan: 'nope' } } });
    expect(problems).to.have.members(['routeClasses.a.failMode: must be one of [open, closed]', 'defaultPlan: unknown plan "gold"', 'routeClasses.a.plan: unknown plan "nope"']);
  });
});

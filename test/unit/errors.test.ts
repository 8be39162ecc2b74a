import { expect } from 'chai';
import { EnvelopeError } from '../../bus/codec.js';
import { PolicyConflict } from '../../bus/policy-store.js';
import { StoreRecordError } from '../../bus/store-signature.js';
import { FakeClock } from '../../lib/clock.js';
import { ConfigError, ErrorCode, PolicyError, RateLimiterError } from '../../lib/errors.js';
import { InvariantViolation } from '../../lib/fold-owner.js';

describe('errors: every one the package throws is a RateLimiterError with a code', () => {
  const cases: Array<[RateLimiterError, string, string]> = [
    [new ConfigError([{ path: 'a', message: 'b' }]), ErrorCode.CONFIG, 'ConfigError'],
    [new PolicyError([{ path: 'version', message: 'b' }]), ErrorCode.POLICY, 'PolicyError'],
    [new InvariantViolation('x'), ErrorCode.INTERNAL, 'InvariantViolation'],
    [new EnvelopeError('mac', 'mac: does not match'), ErrorCode.REFUSED, 'EnvelopeError'],
    [new StoreRecordError('replay', 'policy: older'), ErrorCode.REFUSED, 'StoreRecordError'],
    [new PolicyConflict(7), ErrorCode.CONFLICT, 'PolicyConflict'],
  ];
  for (const [err, code, name] of cases) {
    it(`${name}: ${code}`, () => {
      expect(err).to.be.instanceOf(RateLimiterError);
      expect(err.code).to.equal(code);
      expect(err.name).to.equal(name);
    });
  }

  it('FakeClock misuse is RL_CONFIG', () => {
    expect(() => new FakeClock().advance(-1))
      .to.throw(RateLimiterError)
      .with.property('code', ErrorCode.CONFIG);
  });
});

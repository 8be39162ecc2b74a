import { expect } from 'chai';
import { EnvelopeCodec } from '../../bus/codec.js';
import { StoreRecordError, StoreSigner } from '../../bus/store-signature.js';
import { ConfigError } from '../../lib/errors.js';

const P1 = { version: 'p1', secret: 'policy-secret-one-0123' };
const P2 = { version: 'p2', secret: 'policy-secret-two-0123' };

/** The reason `verify` refuses with, or undefined if it accepts. */
function refusal(signer: StoreSigner, ...args: Parameters<StoreSigner['verify']>): string | undefined {
  try {
    signer.verify(...args);
    return undefined;
  } catch (err) {
    expect(err).to.be.instanceOf(StoreRecordError);
    return (err as StoreRecordError).reason;
  }
}

describe('store signatures: the policy and kill switch as a node accepts them', () => {
  it('verifies what it signed, and nothing changed by a byte, moved to the other kind, or unsigned', () => {
    const s = new StoreSigner([P1]);
    const { kid, mac } = s.sign('policy', '{"version":2}');
    expect(kid).to.equal('p1');
    expect(refusal(s, 'policy', '{"version":2}', kid, mac)).to.equal(undefined);
    expect(refusal(s, 'policy', '{"version":3}', kid, mac)).to.equal('mac');
    expect(refusal(s, 'switch', '{"version":2}', kid, mac)).to.equal('mac');
    expect(refusal(s, 'policy', '{"version":2}', undefined, undefined)).to.equal('unsigned');
    expect(refusal(s, 'policy', '{"version":2}', 'p9', mac)).to.equal('secret');
    expect(refusal(s, 'policy', '{"version":2}', kid, 42)).to.equal('mac');
  });

  it('rotates like the bus secret: records signed under a retained version still verify', () => {
    const old = new StoreSigner([P1]);
    const rotated = new StoreSigner([P1, P2]);
    const before = old.sign('switch', '["0","1","ops","drill"]');
    expect(refusal(rotated, 'switch', '["0","1","ops","drill"]', before.kid, before.mac)).to.equal(undefined);
    expect(rotated.sign('switch', 'x').kid).to.equal('p2');
    expect(refusal(old, 'switch', 'x', 'p2', rotated.sign('switch', 'x').mac)).to.equal('secret');
  });

  it('a bus envelope under the same secret never verifies as a store record (domain separation)', () => {
    const codec = new EnvelopeCodec([{ version: 'p1', secret: P1.secret }]);
    const env = codec.seal('hello', { nonce: 'abc' });
    expect(refusal(new StoreSigner([P1]), 'policy', env.b, env.kid, env.mac)).to.equal('mac');
  });

  it('refuses weak or inconsistent secrets, naming the policySecret fields', () => {
    try {
      new StoreSigner([{ version: 'p1', secret: 'short' }], 'p2');
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as ConfigError).problems.map((p) => p.path)).to.deep.equal(['policySecret.versions[0].secret', 'policySecret.current']);
    }
  });
});

import { expect } from 'chai';
import { AdmissionCapacity, CapacityVerdict } from '../../lib/capacity.js';
import { FakeClock } from '../../lib/clock.js';

describe('tenant fairness on a node (P3)', () => {
  function drive(cap: AdmissionCapacity, tenant: string, n: number, capacity: number, share: number): number {
    let ok = 0;
    for (let i = 0; i < n; i++) {
      if (cap.check(tenant, capacity, share) === CapacityVerdict.Ok) {
        cap.record(tenant);
        ok++;
      }
    }
    return ok;
  }

  it('no tenant takes more than its share; a second tenant still gets its own', () => {
    const cap = new AdmissionCapacity(new FakeClock());
    expect(drive(cap, 'noisy', 1000, 100, 0.4)).to.equal(40);
    expect(cap.check('noisy', 100, 0.4)).to.equal(CapacityVerdict.TenantShare);
    expect(drive(cap, 'quiet', 30, 100, 0.4)).to.equal(30);
  });

  it('the node ceiling binds across tenants', () => {
    const cap = new AdmissionCapacity(new FakeClock());
    expect(drive(cap, 'a', 60, 100, 0.6)).to.equal(60);
    expect(drive(cap, 'b', 60, 100, 0.6)).to.equal(40);
    expect(cap.check('c', 100, 0.6)).to.equal(CapacityVerdict.NodeFull);
  });

  it('starts afresh each second', () => {
    const clock = new FakeClock();
    const cap = new AdmissionCapacity(clock);
    expect(drive(cap, 'a', 10, 10, 0.5)).to.equal(5);
    clock.advance(1000);
    expect(drive(cap, 'a', 10, 10, 0.5)).to.equal(5);
  });

  it('a tiny share still admits one request per second', () => {
    const cap = new AdmissionCapacity(new FakeClock());
    expect(drive(cap, 'a', 5, 10, 0.01)).to.equal(1);
  });
});

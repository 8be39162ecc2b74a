import { expect } from 'chai';
import { clientAddress, networkRange } from '../../lib/network.js';

describe('anonymous class: network ranges (D5)', () => {
  const ranges: Array<[string | undefined, string | undefined]> = [
    ['203.0.113.7', '203.0.113.0/24'],
    ['203.0.113.250', '203.0.113.0/24'],
    ['::ffff:198.51.100.9', '198.51.100.0/24'],
    ['2001:db8:aaaa:bbbb:1:2:3:4', '2001:db8:aaaa:bbbb::/64'],
    ['2001:DB8:AAAA:BBBB::1', '2001:db8:aaaa:bbbb::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['2001:db8:1:2:3:4:192.0.2.1', '2001:db8:1:2::/64'],
    ['203.0.113.7:5678', '203.0.113.0/24'],
    ['[2001:db8:aaaa:bbbb::1]:443', '2001:db8:aaaa:bbbb::/64'],
    ['0:0:0:0:0:ffff:198.51.100.9', '198.51.100.0/24'],
    ['::ffff:c633:6409', '198.51.100.0/24'],
    ['not-an-ip', undefined],
    [undefined, undefined],
  ];
  for (const [ip, range] of ranges) {
    it(`${ip} → ${range}`, () => expect(networkRange(ip)).to.equal(range));
  }

  it('trusts X-Forwarded-For only as far as the configured proxy hops', () => {
    expect(clientAddress('10.0.0.1', '1.2.3.4', 0)).to.equal('10.0.0.1');
    expect(clientAddress('10.0.0.1', 'spoofed, 1.2.3.4', 1)).to.equal('1.2.3.4');
    expect(clientAddress('10.0.0.1', 'spoofed, 1.2.3.4, 10.0.0.9', 2)).to.equal('1.2.3.4');
    expect(clientAddress('10.0.0.1', ['a, 1.2.3.4', '5.6.7.8'], 1)).to.equal('5.6.7.8');
    expect(clientAddress('10.0.0.1', '1.2.3.4', 3)).to.equal('10.0.0.1');
    expect(clientAddress('10.0.0.1', undefined, 1)).to.equal('10.0.0.1');
  });
});

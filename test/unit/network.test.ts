import { expect } from 'chai';
import { clientAddress, networkRange } from '../../lib/network.js';

describe('anonymous class: network ranges (D5)', () => {
  // At /24 and /64: every spelling of an address lands in one range.
  const ranges: Array<[string | undefined, string | undefined]> = [
    ['203.0.113.7', '203.0.113.0/24'],
    ['203.0.113.250', '203.0.113.0/24'],
    ['::ffff:198.51.100.9', '198.51.100.0/24'],
    ['2001:db8:aaaa:bbbb:1:2:3:4', '2001:db8:aaaa:bbbb:0:0:0:0/64'],
    ['2001:DB8:AAAA:BBBB::1', '2001:db8:aaaa:bbbb:0:0:0:0/64'],
    ['2001:db8::1', '2001:db8:0:0:0:0:0:0/64'],
    ['::1', '0:0:0:0:0:0:0:0/64'],
    ['fe80::1%eth0', 'fe80:0:0:0:0:0:0:0/64'],
    ['2001:db8:1:2:3:4:192.0.2.1', '2001:db8:1:2:0:0:0:0/64'],
    ['203.0.113.7:5678', '203.0.113.0/24'],
    ['[2001:db8:aaaa:bbbb::1]:443', '2001:db8:aaaa:bbbb:0:0:0:0/64'],
    ['0:0:0:0:0:ffff:198.51.100.9', '198.51.100.0/24'],
    ['::ffff:c633:6409', '198.51.100.0/24'],
    ['not-an-ip', undefined],
    [undefined, undefined],
  ];
  for (const [ip, range] of ranges) {
    it(`${ip} → ${range}`, () => expect(networkRange(ip, 24, 64)).to.equal(range));
  }

  it('defaults to one IPv4 address and an IPv6 /56; any prefix length masks bit by bit', () => {
    const cases: Array<[string, number | undefined, number | undefined, string]> = [
      ['203.0.113.7', undefined, undefined, '203.0.113.7/32'],
      ['::ffff:203.0.113.7', undefined, undefined, '203.0.113.7/32'],
      ['2001:db8:aaaa:bbff:1:2:3:4', undefined, undefined, '2001:db8:aaaa:bb00:0:0:0:0/56'],
      ['203.0.113.7', 8, 56, '203.0.0.0/8'],
      ['255.255.255.255', 20, 56, '255.255.240.0/20'],
      ['198.51.100.200', 25, 56, '198.51.100.128/25'],
      ['2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff', 32, 128, '2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff/128'],
      ['2001:db8:aaaa:bbbb:1:2:3:4', 32, 36, '2001:db8:a000:0:0:0:0:0/36'],
      ['2001:db8:aaaa:bbbb:1:2:3:4', 32, 48, '2001:db8:aaaa:0:0:0:0:0/48'],
    ];
    for (const [ip, v4, v6, range] of cases) expect(networkRange(ip, v4, v6), `${ip} /${v4} /${v6}`).to.equal(range);
  });

  it('trusts X-Forwarded-For only as far as the configured proxy hops', () => {
    expect(clientAddress('10.0.0.1', '1.2.3.4', 0)).to.equal('10.0.0.1');
    expect(clientAddress('10.0.0.1', 'spoofed, 1.2.3.4', 1)).to.equal('1.2.3.4');
    expect(clientAddress('10.0.0.1', 'spoofed, 1.2.3.4, 10.0.0.9', 2)).to.equal('1.2.3.4');
    expect(clientAddress('10.0.0.1', ['a, 1.2.3.4', '5.6.7.8'], 1)).to.equal('5.6.7.8');
    expect(clientAddress('10.0.0.1', '1.2.3.4', 3)).to.equal('10.0.0.1');
    expect(clientAddress('10.0.0.1', undefined, 1)).to.equal('10.0.0.1');
  });
});

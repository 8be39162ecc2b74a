import { expect } from 'chai';
import { retryHeaders } from '../../lib/retry-after.js';

describe('Retry-After (H2)', () => {
  const cases: Array<[number | undefined, 'zero' | 'round-up', string | undefined, string | undefined]> = [
    [0, 'zero', '0', '1'],
    [1, 'zero', '0', '1'],
    [319.2, 'zero', '0', '320'],
    [999, 'zero', '0', '999'],
    [999.5, 'zero', '0', '1000'],
    [1000, 'zero', '1', undefined],
    [1001, 'zero', '2', undefined],
    [59_000.1, 'zero', '60', undefined],
    [250, 'round-up', '1', '250'],
    [2500, 'round-up', '3', undefined],
  ];
  for (const [wait, mode, retryAfter, resetMs] of cases) {
    it(`wait ${wait} ms (${mode}) → Retry-After ${retryAfter}, reset-ms ${resetMs}`, () => {
      expect(retryHeaders(wait, mode)).to.deep.equal({ retryAfter, resetMs });
    });
  }
  for (const wait of [undefined, Number.NaN, -5, Number.POSITIVE_INFINITY]) {
    it(`an uncomputable wait (${wait}) omits the header`, () => {
      expect(retryHeaders(wait, 'zero')).to.equal(undefined);
    });
  }
});

import { expect } from 'chai';
import { quantile } from '../../lib/quantile.js';

describe('quantile: nearest rank over sorted values', () => {
  it('takes the value at ⌊q · n⌋, the last for q = 1, NaN for none', () => {
    const v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    expect([0, 0.5, 0.9, 0.99, 1].map((q) => quantile(v, q))).to.deep.equal([1, 6, 10, 10, 10]);
    expect(quantile(Float64Array.from([5]), 0.99)).to.equal(5);
    expect(quantile([], 0.5)).to.be.NaN;
  });
});

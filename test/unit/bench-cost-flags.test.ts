import { expect } from 'chai';
import { costFlags } from '../../scripts/bench-cost.js';

/** The cost pass's flags as `npm run bench` parses them: each bad value is refused naming its flag. */
describe('bench cost flags', () => {
  const num = (name: string, raw: string | undefined, dflt: number, min: number, max: number, int: boolean): number => {
    const n = raw === undefined ? dflt : Number(raw);
    if (raw?.trim() === '' || !Number.isFinite(n) || n < min || n > max || (int && !Number.isInteger(n))) throw new Error(`--${name}: bad "${raw}"`);
    return n;
  };
  const parse = (v: Parameters<typeof costFlags>[0]): ReturnType<typeof costFlags> => costFlags(v, num, (m) => new Error(m));

  it("runs this limiter's CPU pass over the 1 s and 60 s windows unless told otherwise", () => {
    expect(parse({}).windowsMs).to.deep.equal([1000, 60_000]);
  });

  it('takes the windows of --cost-windows, in ms', () => {
    expect(parse({ 'cost-windows': '60000' }).windowsMs).to.deep.equal([60_000]);
    expect(parse({ 'cost-windows': '1000, 3600000' }).windowsMs).to.deep.equal([1000, 3_600_000]);
  });

  it('refuses windows a policy would refuse, a repeated window, and an empty item, naming the flag', () => {
    for (const bad of ['500', '1000,', 'x', '1000.5', '1000,1000', '1000,2000,3000,4000,5000,6000,7000,8000,9000']) {
      expect(() => parse({ 'cost-windows': bad }), bad).to.throw(/--cost-windows/);
    }
  });

  it('refuses --cost-windows with --skip-cost, which would ignore it', () => {
    expect(() => parse({ 'skip-cost': true, 'cost-windows': '60000' })).to.throw(/--cost-windows tunes the cost figures/);
  });
});

import { expect } from 'chai';
import { phaseOffset, windowEndMs, windowIdAt, windowStartMs } from '../../lib/window.js';
import { fnv1a32 } from '../../lib/hash.js';

describe('windows with per-key phase offsets', () => {
  const cases = [
    { now: 0, W: 1000, offset: 0, id: 0, start: 0, end: 1000 },
    { now: 999, W: 1000, offset: 0, id: 0, start: 0, end: 1000 },
    { now: 1000, W: 1000, offset: 0, id: 1, start: 1000, end: 2000 },
    { now: 1249, W: 1000, offset: 250, id: 0, start: 250, end: 1250 },
    { now: 1250, W: 1000, offset: 250, id: 1, start: 1250, end: 2250 },
    { now: 100, W: 1000, offset: 250, id: -1, start: -750, end: 250 },
    { now: 1_700_000_030_000, W: 60_000, offset: 12_345, id: 28_333_333, start: 1_699_999_992_345, end: 1_700_000_052_345 },
  ];
  for (const c of cases) {
    it(`now=${c.now} W=${c.W} offset=${c.offset} → window ${c.id} [${c.start}, ${c.end})`, () => {
      const id = windowIdAt(c.now, c.W, c.offset);
      expect(id).to.equal(c.id);
      expect(windowStartMs(id, c.W, c.offset)).to.equal(c.start);
      expect(windowEndMs(id, c.W, c.offset)).to.equal(c.end);
      expect(c.now).to.be.at.least(c.start).and.below(c.end);
    });
  }

  it('offset is hash(key id) mod W, the same on every node and different across keys', () => {
    expect(phaseOffset('v1:aaaaaaaaaaaaaaaaaaaaaa', 1000)).to.equal(fnv1a32('v1:aaaaaaaaaaaaaaaaaaaaaa') % 1000);
    const offsets = new Set<number>();
    for (let i = 0; i < 200; i++) offsets.add(phaseOffset(`v1:key-${i}`, 60_000));
    // 200 keys over 60,000 phases: collisions are possible but rare; a constant offset would give 1.
    expect(offsets.size).to.be.above(190);
    for (const o of offsets) expect(o).to.be.at.least(0).and.below(60_000);
  });

  it('two keys with different offsets roll over at different instants', () => {
    const W = 1000;
    const a = phaseOffset('v1:alpha', W);
    const b = phaseOffset('v1:bravo', W);
    expect(a).to.not.equal(b);
    const t = 10_000 + Math.max(a, b);
    expect(windowEndMs(windowIdAt(t, W, a), W, a)).to.not.equal(windowEndMs(windowIdAt(t, W, b), W, b));
  });
});

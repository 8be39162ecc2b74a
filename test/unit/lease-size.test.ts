import { expect } from 'chai';
import { leaseTarget } from '../../lib/lease-size.js';

describe('lease size: what a lease should hold for its demand', () => {
  // demand = requests expected over the next 3 rounds; h = 1.25.
  const cases: Array<[string, number, number, number]> = [
    ['seen less than about once a round: nothing (each request asks for its need)', 0.5, 40, 0],
    ['one request over the next rounds: one', 0.8, 4, 1],
    ['early in the window: more, as much as it would spend in a quarter of the rounds left', 0.8, 40, 2],
    ['a busy node early in the window: twice demand × h plus one', 30, 40, 76],
    ['later in the window: only what the node would spend in a quarter of the rounds left…', 30, 20, 50],
    ['…but never below demand × h', 30, 0, 37],
    ['a slow key mid-window: what it would spend in a quarter of the rounds left', 1.5, 20, 2],
  ];
  for (const [what, demand, roundsLeft, want] of cases) {
    it(`${what}: demand ${demand}, ${roundsLeft} rounds left → ${want}`, () => {
      expect(leaseTarget(demand, roundsLeft, 3, 1.25)).to.equal(want);
    });
  }
});

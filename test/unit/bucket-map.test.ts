import { expect } from 'chai';
import { BucketMap } from '../../lib/bucket-map.js';
import { compilePolicy } from '../../lib/policy.js';
import { windowIdAt } from '../../lib/window.js';
import { demoPolicy } from '../support/fixtures.js';

describe('bucket map: LRU cap that only evicts empty or past buckets (D4)', () => {
  const policy = compilePolicy(demoPolicy());
  const hour = policy.limitsFor('v1:x', 'none'); // free plan: two windows per key
  const now = 1_000_000;

  function fill(map: BucketMap, n: number, credit: number): void {
    for (let i = 0; i < n; i++) {
      const s = map.get(`k${i}`, hour, now, 0);
      s.touchedRound = 0;
      s.buckets.forEach((b) => {
        // The window running now: it has not ended.
        b.roll(windowIdAt(now, b.windowMs, b.offset));
        b.issued = credit;
      });
    }
  }

  it('counts buckets, not keys, against the cap', () => {
    const map = new BucketMap(8);
    fill(map, 4, 0);
    expect(map.size).to.equal(8);
    expect(map.keys).to.equal(4);
  });

  it('evicts the least recently used key with zero credit', () => {
    const map = new BucketMap(8);
    fill(map, 4, 0);
    map.get('k0', hour, now, 1); // k0 becomes most recently used
    map.get('new', hour, now, 1);
    expect(map.peek('k1')).to.equal(undefined);
    expect(map.peek('k0')).to.not.equal(undefined);
    expect(map.size).to.equal(8);
    expect(map.evictions).to.equal(1);
  });

  it('never evicts a key that holds credit in a current window; grows past the cap and counts it', () => {
    const map = new BucketMap(8);
    fill(map, 4, 5);
    map.get('new', hour, now, 1);
    for (let i = 0; i < 4; i++) expect(map.peek(`k${i}`)).to.not.equal(undefined);
    expect(map.size).to.equal(10);
    expect(map.overCap).to.equal(1);
    expect(map.evictions).to.equal(0);
  });

  it('evicts a key holding credit only once its window is past', () => {
    const map = new BucketMap(8);
    fill(map, 4, 5);
    map.get('new', hour, now + 60_000, 1);
    expect(map.evictions).to.equal(1);
    expect(map.size).to.equal(8);
  });

  it('skips credit-holding keys and evicts an empty one behind them', () => {
    const map = new BucketMap(8);
    fill(map, 3, 5);
    map.get('empty', hour, now, 0);
    map.get('new', hour, now, 1);
    expect(map.peek('empty')).to.equal(undefined);
    expect(map.keys).to.equal(4);
  });

  it('under pressure, gives back the credit of the least recently used key not seen this round and evicts it', () => {
    const released: string[] = [];
    const map = new BucketMap(8, (subject) => released.push(subject.keyId));
    fill(map, 4, 5);
    map.get('new', hour, now, 1);
    expect(released).to.deep.equal(['k0']);
    expect(map.peek('k0')).to.equal(undefined);
    expect(map.size).to.equal(8);
    expect(map.overCap).to.equal(0);
  });

  it('keeps a key touched this round (not yet reported) even with zero credit', () => {
    const map = new BucketMap(8);
    fill(map, 4, 0);
    map.get('new', hour, now, 0);
    expect(map.evictions).to.equal(0);
    expect(map.overCap).to.equal(1);
  });

  it('rebuilds a key whose limits changed (policy update), keeping windows of the same length', () => {
    const map = new BucketMap(100);
    const before = map.get('k', hour, now);
    const single = policy.anonymousLimitsFor('x'); // one 1 s window
    const s = map.get('k', single, now);
    expect(s.buckets).to.have.length(1);
    expect(s.buckets[0]).to.equal(before.buckets[0]); // same lease: the owner's count still applies
    expect(map.size).to.equal(1);
  });
});

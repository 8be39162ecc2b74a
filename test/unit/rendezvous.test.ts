import { expect } from 'chai';
import { RendezvousShards, rendezvousOwner } from '../../bus/rendezvous.js';

describe('RendezvousShards', () => {
  const byShard = (shards: number, ids: Set<string>, me: string): number[] => [...Array(shards).keys()].filter((s) => rendezvousOwner(s, ids) === me);

  it('names the shards rendezvousOwner gives the member, whatever the order of the list', () => {
    const r = new RendezvousShards();
    const ids = new Set(['a', 'b', 'c']);
    for (const me of ids) {
      const got = r.of(64, ids, me);
      expect(got.wanted).to.deep.equal(byShard(64, ids, me));
      for (let s = 0; s < 64; s++) expect(got.owns(s)).to.equal(rendezvousOwner(s, ids) === me);
      expect(r.of(64, new Set(['c', 'a', 'b']), me).wanted).to.deep.equal(got.wanted);
    }
  });

  it('works the shards out again when a member joins or leaves, or the shard count changes', () => {
    const r = new RendezvousShards();
    const two = new Set(['a', 'b']);
    const three = new Set(['a', 'b', 'c']);
    const before = r.of(64, two, 'a').wanted;
    expect(r.of(64, two, 'a').wanted).to.equal(before); // the list is the same: nothing worked out again
    expect(r.of(64, three, 'a').wanted).to.deep.equal(byShard(64, three, 'a'));
    expect(r.of(64, two, 'a').wanted).to.deep.equal(before);
    expect(r.of(16, two, 'a').wanted).to.deep.equal(byShard(16, two, 'a'));
    expect(r.of(16, two, 'b').wanted).to.deep.equal(byShard(16, two, 'b'));
    // A member whose id holds the separator a joined key would use is still told apart.
    expect(r.of(16, new Set(['a","b']), 'a').wanted).to.deep.equal([]);
  });
});

import { fnv1a32 } from '../lib/hash.js';

/**
 * Rendezvous (highest random weight) choice of a shard's owner among `ids`: every member computes
 * the same answer from the same member list, and a member joining or leaving moves only its own
 * share of the shards.
 */
export function rendezvousOwner(shard: number, ids: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestScore = -1;
  for (const id of ids) {
    const score = fnv1a32(`${shard}/${id}`);
    if (score > bestScore || (score === bestScore && best !== undefined && id < best)) {
      best = id;
      bestScore = score;
    }
  }
  return best;
}

/**
 * The shards one member is the rendezvous owner of, worked out again only when the member list
 * changes: every control round asks, and the list changes only as members join and leave.
 */
export class RendezvousShards {
  private key = '';
  private wanted: readonly number[] = [];
  private mine = new Uint8Array(0);

  /** Of shards 0 to `shards` − 1, those `me` owns among `ids` (ascending), and whether it owns `s`. */
  of(shards: number, ids: ReadonlySet<string>, me: string): { readonly wanted: readonly number[]; owns(s: number): boolean } {
    const key = JSON.stringify([shards, me, ...ids]);
    if (key !== this.key) {
      const wanted: number[] = [];
      this.mine = new Uint8Array(shards);
      for (let s = 0; s < shards; s++) {
        if (rendezvousOwner(s, ids) !== me) continue;
        wanted.push(s);
        this.mine[s] = 1;
      }
      this.key = key;
      this.wanted = wanted;
    }
    const mine = this.mine;
    return { wanted: this.wanted, owns: (s) => mine[s] === 1 };
  }
}

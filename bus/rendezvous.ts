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

import type { HeldRange } from '../lib/node-contract.js';
import type { HeldStatement } from '../lib/owner/held.js';
import type { Member, Ownership } from './fleet-table.js';
import type { NodeIdentity } from './types.js';

/**
 * Per shard, what the heartbeat statement of the process the ownership table names its owner, at the
 * table's owner epoch, lets process `me` take itself (`lib/owner/held.ts`): a window starting after
 * both the held part's start and `me`'s `since` (or ending after its reach), and by both its end and
 * `me`'s `until` — in a shard
 * `me` owns too, by its own statement. Nothing from a statement that does not verify or names another
 * process: a deposed
 * owner's statement no longer counts once the table has moved on, and until then what it lets a member
 * take is on record in the log the next owner replays.
 */
export function heldRanges(table: ReadonlyArray<Ownership | undefined>, members: ReadonlyMap<string, Member>, me: NodeIdentity | undefined): Array<HeldRange | undefined> {
  return Array.from(table, (o, s) => heldRange(o, s, members, me));
}

/** `heldRanges` of one shard, `s`, whose table entry is `o`. */
function heldRange(o: Ownership | undefined, s: number, members: ReadonlyMap<string, Member>, me: NodeIdentity | undefined): HeldRange | undefined {
  if (o === undefined || me === undefined) return undefined;
  const m = members.get(o.owner);
  const held = m?.verified === true && m.epoch === o.ownerProcess ? m.beat?.held : undefined;
  const h = held?.shards.get(s);
  // Its latest entry: one that left and came back is listed again after its ended one.
  let x: HeldStatement['holders'][number] | undefined;
  if (h?.ownerEpoch === o.epoch) for (const y of held!.holders) if (y.nodeEpoch === me.nodeEpoch) x = y;
  if (h === undefined || x === undefined) return undefined;
  const after = Math.max(h.startsAfter, x.since);
  const by = Math.min(h.startsBy, x.until ?? h.startsBy);
  // A record listing `me` was taken (`by` is past its `since`): one reaching back, if the statement says so.
  return by > after ? { after, by, min: h.min, ...(h.reach === undefined ? {} : { reach: h.reach }) } : undefined;
}

/**
 * `heldRanges` as of the last round reply, a shard's worked out when first asked after it: a node asks
 * at the first sight of a window there, and nothing changes the table or the members between replies.
 */
export class HeldRanges {
  private readonly ranges: Array<HeldRange | undefined> = [];
  /** Per shard, the reply its range was worked out after. */
  private readonly at: number[] = [];
  private replies = 0;
  /** This process as of the last reply. */
  private me: NodeIdentity | undefined;

  /** A round reply was taken in; `me`, this process then. */
  replied(me: NodeIdentity | undefined): void {
    this.me = me;
    this.replies++;
  }

  /** What `me` may take itself in `shard`, by the table and members that reply left. */
  of(shard: number, table: ReadonlyArray<Ownership | undefined>, members: ReadonlyMap<string, Member>): HeldRange | undefined {
    if (this.at[shard] !== this.replies) {
      this.at[shard] = this.replies;
      this.ranges[shard] = heldRange(table[shard], shard, members, this.me);
    }
    return this.ranges[shard];
  }
}

import type { Clock } from '../lib/clock.js';
import { presentAt, seen as heardFrom, SILENT_ROUNDS, unsettled, withinReach, type Presence } from '../lib/membership.js';
import { heartbeat, type BeatStatements } from './beats.js';
import { parseOwnerEntry } from './keys.js';
import type { RedisBusOptions } from './redis-bus-types.js';
import type { RoundReply } from './scripts.js';
import type { HeldRange } from '../lib/node-contract.js';
import { HeldRanges } from './held-ranges.js';
import type { NodeIdentity } from './types.js';

/** The largest fleet whose owners list members in their blankets (`holders`). */
export const HELD_MEMBERS_MAX = 16;

/** Rounds an owner's lease on a shard lasts without renewal; also the silence after which a member is taken for gone. */
export const LEASE_ROUNDS = 10;
/** An owner epoch further ahead of Redis time (ms) than this was written in, never claimed (`lua/round.lua`). */
const EPOCH_AHEAD_MAX = 1e9;

/** The table entry of one shard, in this process's monotonic time. */
export interface Ownership {
  /** Node id and node epoch of the owning process. */
  readonly owner: string;
  readonly ownerProcess: string;
  readonly epoch: number;
  /** When the lease lapses (monotonic), counted from when the round was sent: never after Redis lets it lapse. */
  readonly expiresAt: number;
  /** This very process, under an epoch its own round script claimed or renewed: never a written-in entry. */
  readonly ours: boolean;
}

export interface Member extends Presence {
  epoch: string;
  /**
   * Whether its last heartbeat statement verified (sealed with the bus secret, naming it): only such
   * members may own shards. One that does not still counts in the fleet's size and is held back as
   * if it stated nothing fresh (`lib/membership.ts`): a Redis writer can add members, never settle one.
   */
  verified: boolean;
  /**
   * Node side: whether, by Redis's clock, it had checked in within REACH_ROUNDS when our last round
   * reply was made. Judged apart from our own round's age, so neither eats the other's margin.
   */
  fresh: boolean;
}

/** A shard the table names this very process the owner of, as a round reply listed it. */
export interface OursEntry {
  readonly shard: number;
  readonly epoch: number;
  /** When the lease lapses, in Redis ms. */
  readonly expiresAt: number;
}

/**
 * The fleet and the ownership table as this process knows them from its round replies
 * (`lua/round.lua`): the members, with their presence and verified statements, and who owns each shard.
 */
export class FleetTable {
  readonly members = new Map<string, Member>();
  /** The ownership table as last read, by shard. */
  readonly table: Array<Ownership | undefined>;
  /** Whether a round reply has been applied yet. */
  hadTable = false;
  /** This process's monotonic time when its last round reply came back. */
  lastRoundOk = Number.NEGATIVE_INFINITY;
  /** This process's own node's self-grants as its owner side knows them at once: shard → batch round. */
  readonly ownSelfGrants = new Map<number, number>();
  /** Per shard, what this process may take itself there (`heldFor`). */
  private readonly held = new HeldRanges();
  /** The last owner epoch seen per shard, kept while a shard has no owner. */
  private readonly knownEpochs: Array<number | undefined> = [];
  /** After an outage of our own, members heard before it still count for a while (they may not have checked in yet). */
  private graceUntil = 0;
  private graceIds: string[] = [];
  /** Highest owner epoch seen on any shard: a claim never goes below it, whatever Redis's clock says. */
  private maxEpoch = 0;

  constructor(
    private readonly opts: RedisBusOptions,
    private readonly clock: Clock,
    private readonly beats: BeatStatements,
    private readonly identity: () => NodeIdentity | undefined,
  ) {
    this.table = new Array<Ownership | undefined>(opts.shards);
  }

  /** The highest owner epoch seen, for the next claim. */
  get highestEpoch(): number {
    return this.maxEpoch;
  }

  /** An owner epoch seen elsewhere (a log's fence): no claim goes below it. */
  learnEpoch(epoch: number): void {
    this.maxEpoch = Math.max(this.maxEpoch, epoch);
  }

  /**
   * Takes in the fleet and the ownership table of a round reply sent at `sent` and back at `got`
   * (monotonic). Returns Redis's time then, the shards the table names this process the owner of (in
   * the reply's order), and those claimed with no record at all (`blind`).
   */
  take(sent: number, got: number, [nowStr, flatMembers, flatOwners, blind, flatLeft, flatHeld]: RoundReply): { redisNow: number; ours: OursEntry[]; blind: Set<number> } {
    const redisNow = Number(nowStr);
    const roundMs = this.opts.roundMs;
    if (got - this.lastRoundOk > LEASE_ROUNDS * roundMs && this.hadTable) {
      // We were cut off: members heard before still count until they have had time to check in.
      this.graceUntil = got + LEASE_ROUNDS * roundMs;
      this.graceIds = [...this.members].filter(([, m]) => m.verified).map(([id]) => id);
    }
    this.lastRoundOk = got;
    const seen = new Set<string>();
    // Redis times as this process's monotonic time: as if Redis had run the script when it was sent,
    // which is never later than it did — a member never looks fresher than it was, however late this
    // reply is taken in (a pause right after it came back).
    const local = (t: number): number => sent - (redisNow - t);
    for (let i = 0; i + 3 < flatMembers.length; i += 4) {
      const id = flatMembers[i]!;
      const checkedIn = Number(flatMembers[i + 1]);
      const lastSeen = local(checkedIn);
      const stated = this.beats.open(id, flatMembers[i + 3]!);
      // The epoch its own sealed statement names; the epochs hash, which anyone can write, only for
      // a member that states nothing verifiable (it owns nothing and settles nothing anyway).
      const epoch = stated?.nodeEpoch ?? flatMembers[i + 2]!;
      const verified = stated !== undefined && stated.left !== true;
      const fresh = withinReach(checkedIn, redisNow, roundMs);
      seen.add(id);
      let m = this.members.get(id);
      if (m === undefined) this.members.set(id, (m = { ...presentAt(lastSeen), epoch, fresh, verified }));
      else {
        m.fresh = fresh;
        // Back after a silence: withheld a round (L5), it may have granted itself credit (F4). A new
        // process under the same name has none: it starts at zero (L6).
        heardFrom(m, lastSeen, roundMs, got, m.epoch === epoch);
        m.epoch = epoch;
        m.verified = verified;
      }
      if (verified) m.beat = heartbeat(stated.statement, local);
      else delete m.beat;
    }
    // A member missing from the list is kept until it could no longer be granting itself credit
    // (F5): Redis may simply have lost the list (restarted empty). Only a clean leave drops it at once.
    // A clean leave counts only with the member's own sealed leave statement, of the process we knew.
    const left = new Map<string, number>();
    for (let i = 0; i + 2 < flatLeft.length; i += 3) {
      const id = flatLeft[i]!;
      const m = this.members.get(id);
      if (m === undefined || seen.has(id)) continue;
      const farewell = this.beats.open(id, flatLeft[i + 2]!);
      if (farewell?.left === true && farewell.nodeEpoch === m.epoch) left.set(id, local(Number(flatLeft[i + 1])));
    }
    for (const [id, m] of this.members) {
      if (!seen.has(id)) m.fresh = false;
      const leftAt = left.get(id);
      if (!seen.has(id) && ((leftAt !== undefined && leftAt >= m.lastSeen) || got - m.lastSeen > this.memberExpiryMs())) {
        this.members.delete(id);
        this.beats.forget(id);
      }
    }
    const held = new Map<number, number>();
    for (let i = 0; i + 1 < flatHeld.length; i += 2) held.set(Number(flatHeld[i]), Number(flatHeld[i + 1]));

    const seenEpoch = this.maxEpoch;
    const me = this.identity();
    const ours: OursEntry[] = [];
    this.table.fill(undefined);
    for (let i = 0; i + 1 < flatOwners.length; i += 2) {
      const s = Number(flatOwners[i]);
      const { node: owner, nodeEpoch: ownerProcess, epoch, expiresAt: exp } = parseOwnerEntry(flatOwners[i + 1]!);
      // An epoch far ahead of Redis time was never made by a claim (they are seeded from it and grow
      // by one a change): taken as no owner, and never learnt, so it cannot stop epochs growing.
      if (!(s >= 0 && s < this.opts.shards) || owner === '' || exp <= redisNow || !(epoch <= Math.max(redisNow, seenEpoch) + EPOCH_AHEAD_MAX)) continue;
      const isOurs = owner === me?.nodeId && ownerProcess === me.nodeEpoch && held.get(s) === epoch;
      this.table[s] = { owner, ownerProcess, epoch, expiresAt: local(exp), ours: isOurs };
      this.maxEpoch = Math.max(this.maxEpoch, epoch);
      if (isOurs) ours.push({ shard: s, epoch, expiresAt: exp });
    }
    this.held.replied(me);
    return { redisNow, ours, blind: new Set(blind.map(Number)) };
  }

  /**
   * Shards whose owner changed since the last reply (against the last epoch known, even if the shard
   * had no owner in between); learns the current epochs.
   */
  ownersChanged(): Set<number> {
    const changed = new Set<number>();
    this.table.forEach((o, s) => {
      if (o === undefined) return;
      if (this.knownEpochs[s] !== undefined && o.epoch !== this.knownEpochs[s]) changed.add(s);
      this.knownEpochs[s] = o.epoch;
    });
    return changed;
  }

  /** Members in the fleet, at least one (this node). */
  size(): number {
    return Math.max(1, this.members.size);
  }

  /**
   * Whether every member's last verified statement says it counts blankets (`lib/owner/blankets.ts`), or a
   * held part's reach (`Held.reach`): one stating nothing verifiable, or older, turns them off everywhere.
   */
  counts(what: 'blankets' | 'reaches'): boolean {
    for (const m of this.members.values()) if (m.beat?.[what] !== true) return false;
    return true;
  }

  /**
   * The members an owner's blankets list as taking credit themselves (`lib/owner/held.ts`): every
   * member, once each states it counts that credit; none while one does not (an older release taking
   * a shard over would not count it), nor in a fleet of more than HELD_MEMBERS_MAX (every member's
   * statement lists them all, and every member reads every statement each round).
   */
  holders(): Array<{ nodeId: string; nodeEpoch: string }> {
    const out: Array<{ nodeId: string; nodeEpoch: string }> = [];
    if (this.members.size > HELD_MEMBERS_MAX) return out;
    for (const [nodeId, m] of this.members) {
      if (m.beat?.holds !== true) return [];
      out.push({ nodeId, nodeEpoch: m.epoch });
    }
    return out;
  }

  /** What this process may take itself in `shard` (`OwnerLink.held`), as of the last round reply. */
  heldFor(shard: number): HeldRange | undefined {
    return this.held.of(shard, this.table, this.members);
  }

  /**
   * Whether the table names this very process (node id and epoch) as the shard's owner, under the
   * epoch its own last round claimed or renewed: an entry someone wrote into the table naming it is
   * not its claim, and could stand beside the lease of an owner still serving.
   */
  mine(shard: number): boolean {
    return this.table[shard]?.ours === true;
  }

  /**
   * Members whose boundary self-grant the owner may not have seen (`lib/membership.ts`), as of now, so a
   * freeze of Redis counts.
   */
  unsettled(shard: number, folded: (nodeEpoch: string, shard: number) => number): string[] {
    const mono = this.clock.monotonic();
    const roundMs = this.opts.roundMs;
    const out: string[] = [];
    for (const [id, m] of this.members) {
      if (id !== this.identity()?.nodeId && unsettled(m, shard, folded(m.epoch, shard), mono, roundMs)) out.push(id);
    }
    // This process's own node too: out of touch with Redis, its owner side stops serving and its node
    // may grant itself credit in these very shards; the owner side knows of it the moment it does,
    // and holds it back until that node's batch carrying it is folded (in process, at its next round).
    const me = this.identity();
    const own = this.ownSelfGrants.get(shard);
    if (me !== undefined && own !== undefined) {
      if (folded(me.nodeEpoch, shard) < own) out.push(me.nodeId);
      else this.ownSelfGrants.delete(shard);
    }
    return out;
  }

  /** How long a silent member is remembered: while it may still be granting itself credit (F4, F5). */
  private memberExpiryMs(): number {
    return this.opts.degradedAfterMs + SILENT_ROUNDS * this.opts.roundMs;
  }

  /**
   * After a blind takeover (at `takenAt`): whether every member has run two rounds since (the first
   * tells it of the new owner, the second's batch reports its buckets again) and a round has passed
   * for that batch to be read. With the log lost, a member's reports are the only record of the
   * credit it holds, which can be any part of a window (a lease, not only a self-grant): a silent one
   * holds the shard back until it reports or is forgotten (`memberExpiryMs`, when it could only be
   * degraded), however long that takes. `checkedIn` keeps each member's first check-in since.
   */
  everyoneReportedSince(takenAt: number, checkedIn: Map<string, number>): boolean {
    const roundMs = this.opts.roundMs;
    let all = true;
    for (const [id, m] of this.members) {
      if (m.lastSeen < takenAt + 2 * roundMs) {
        all = false;
        continue;
      }
      // Its first check-in since is where it learns the shard changed hands; the batch of its next
      // round reports every bucket it holds there, and is read a round later.
      const first = checkedIn.get(id) ?? (checkedIn.set(id, m.lastSeen), m.lastSeen);
      if (m.lastSeen < first + 2 * roundMs) all = false;
    }
    return all;
  }

  /**
   * Members that may own shards: those whose statement verified, heard within a lease, plus (after an
   * outage of ours) those heard before it.
   */
  candidates(mono: number): Set<string> {
    const ids = new Set([this.identity()!.nodeId, ...(mono < this.graceUntil ? this.graceIds : [])]);
    for (const [id, m] of this.members) if (m.verified && mono - m.lastSeen < LEASE_ROUNDS * this.opts.roundMs) ids.add(id);
    return ids;
  }
}

import { phaseOffset, windowEndMs } from './window.js';

/** Node epoch prefix of a float's lease: `float.<holder's node epoch>`, its lease number the owner epoch. */
export const FLOAT_PREFIX = 'float.';

/** Credit a blanket lets each member it lists take itself in each window it covers (`lib/owner/held.ts`). */
export const HELD = 1;

/** One lease (a node epoch's bucket life) in one ledger, as merged from requests and reports. */
export interface Lease {
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly lease: number;
  /** An owner's float (`FLOAT_PREFIX`): credit it logged as issued to itself, for asks. */
  readonly float: boolean;
  issued: number;
  /** Part of `issued` moved out of a float: committed already, as the float's. */
  floated: number;
  /**
   * Part of `issued` the node says came out of a float (its reports' and asks' `floated`): beyond
   * `floated`, out of an earlier owner's float whose grant to it the log lost (`tally`).
   */
  saidFloated: number;
  /** Part of `issued` the node says it took itself under a blanket that lists it (`Report.blanketed`). */
  saidBlanketed: number;
  /**
   * Largest `issued − floated` of a grant of this lease known to be on record in the log, under owner
   * epoch `recordEpoch` (after a change of epoch — Redis may have lost the log — nothing is known).
   */
  onRecord: number;
  recordEpoch: number;
  /**
   * Largest `issued` the node itself reported for this window (live reports only, not a replayed
   * log): credit it had applied, so it cannot have granted itself credit at this window's boundary.
   */
  reported: number;
  grantSeq: number;
  spent: number;
  /** Requests the node saw on this lease, admitted or not (its reports' `seen`; 0 when never said). */
  seen: number;
  selfIssued: number;
  released: number;
  seq: number;
  demand: number;
  /** Round (owner clock) of the last recall, to send at most one per round. */
  noticeAt: number;
  /** Round of the last exhaustion notice, and of the last grant (a grant clears the node's flag). */
  exhaustedAt: number;
  grantedAt: number;
}

/** The owner's account of one (key id, window id). */
export interface Ledger {
  readonly keyId: string;
  readonly windowId: number;
  readonly windowMs: number;
  readonly windowEnd: number;
  /** `shardOf(keyId, windowId)`: fixed for the ledger's life, computed once. */
  readonly shard: number;
  allowance: number;
  reserveReleased: boolean;
  /** Leases were told the window has nothing left; when released credit comes back they are told so. */
  announced: boolean;
  /** Few per ledger (one per node epoch and bucket life): an array beats a Map here. */
  leases: Lease[];
  /** This owner's float in this window, if it has one (`FoldOwner.refillFloats`). */
  float?: Float;
  /** Credit remote asks wanted since the last refill, and the most in one refill period. */
  asks: number;
  askPeak: number;
  /** Whether this window had remote asks of its own (not only a size inherited from the one before). */
  asked: boolean;
  /** Fixed-share allocation (`lib/owner/fixed-share.ts`), as the latest request or report says. */
  fixed: boolean;
  /**
   * Made by a replayed grant, its allowance not stated yet by a node's request or report (nothing is
   * issued meanwhile): members' credit counts here whatever the allowance (`lib/owner/held.ts`).
   */
  unstated?: boolean;
  /**
   * Node epochs a blanket lets hold `HELD` credit here that they took themselves (`lib/owner/held.ts`):
   * committed whether they took it or not. Only ever added to.
   */
  heldBy?: string[];
}

/** An owner's float in one window, under one owner epoch. */
export interface Float {
  readonly lease: Lease;
  /** The lease's `issued` when this owner took it up (a replayed float is not this owner's to use). */
  readonly base: number;
  /** Largest cumulative `issued` of the float known to be on record in the log. */
  onRecord: number;
  /** Credit moved out of it to asking leases. */
  moved: number;
  /** Refills waited for its last log write to come back. */
  waited: number;
  /** Made under a blanket (`lib/owner/blankets.ts`): its first credit is on record only as the blanket says. */
  blanket: boolean;
}

/** One shard's ledgers, and the earliest window end among them (the sweep skips a shard before it). */
interface ShardLedgers {
  list: Ledger[];
  firstEnd: number;
}

const NONE: readonly Ledger[] = [];

/**
 * The owner's ledgers, found two ways: by (key id, window length, window id) for every request and
 * report, and by shard for a shard's checkpoint and the sweep. A ledger's shard is fixed (it is a
 * hash of its key id and window id), so it is computed once, when the ledger is made, and a shard's
 * checkpoint visits that shard's ledgers only — not every ledger once per shard.
 */
export class LedgerStore {
  /** By key id: its few ledgers (one per window length and window id held). */
  private readonly byKey = new Map<string, Ledger[]>();
  /** By shard number. */
  private readonly byShard: Array<ShardLedgers | undefined> = [];
  private count = 0;

  constructor(
    private readonly shardOf: (keyId: string, windowId: number) => number,
    /** Hears of every ledger as it is made, and again when its allowance grows (an owner counts blankets in it). */
    private readonly made?: (l: Ledger, stated?: boolean) => void,
  ) {}

  /** Number of ledgers held. */
  get size(): number {
    return this.count;
  }

  find(keyId: string, windowMs: number, windowId: number): Ledger | undefined {
    const list = this.byKey.get(keyId);
    if (list !== undefined) for (const l of list) if (l.windowId === windowId && l.windowMs === windowMs) return l;
    return undefined;
  }

  /**
   * The ledger of a (key, window), made if there is none; its allowance set to `limit`, and its
   * allocation to fixed share or leasing if `fixed` is given.
   */
  ledgerFor(keyId: string, windowId: number, windowMs: number, limit: number, fixed?: boolean): Ledger {
    let l = this.find(keyId, windowMs, windowId);
    if (l === undefined) {
      const windowEnd = windowEndMs(windowId, windowMs, phaseOffset(keyId, windowMs));
      const shard = this.shardOf(keyId, windowId);
      l = { keyId, windowId, windowMs, windowEnd, shard, allowance: limit, reserveReleased: false, announced: false, leases: [], asks: 0, askPeak: 0, asked: false, fixed: false };
      if (limit === 0) l.unstated = true;
      const list = this.byKey.get(keyId);
      if (list === undefined) this.byKey.set(keyId, [l]);
      else list.push(l);
      const s = this.byShard[shard];
      if (s === undefined) this.byShard[shard] = { list: [l], firstEnd: windowEnd };
      else {
        s.list.push(l);
        if (windowEnd < s.firstEnd) s.firstEnd = windowEnd;
      }
      this.count++;
      this.made?.(l);
    }
    // A policy change mid-window moves the allowance; credit already committed stays committed. A
    // larger one may bring the window under a blanket's members' credit: counted at once. The first
    // stated is heard of as such (what was counted before it may be undone).
    const before = l.allowance;
    l.allowance = limit;
    if (l.unstated === true && limit > 0) {
      delete l.unstated;
      this.made?.(l, true);
    } else if (limit > before) this.made?.(l);
    if (fixed !== undefined) l.fixed = fixed;
    return l;
  }

  /** The ledgers of one shard (none: an empty list). Not to be kept: the sweep replaces it. */
  inShard(shard: number): readonly Ledger[] {
    return this.byShard[shard]?.list ?? NONE;
  }

  /** Every ledger, shard by shard. */
  *all(): IterableIterator<Ledger> {
    for (const s of this.byShard) if (s !== undefined) yield* s.list;
  }

  /**
   * Drops the ledgers of windows that ended at or before `endedBy` (window end ≤ it), each handed to
   * `dropped` first. A shard none of whose ledgers has ended yet costs one comparison.
   */
  sweep(endedBy: number, dropped?: (l: Ledger) => void): void {
    for (let shard = 0; shard < this.byShard.length; shard++) {
      const s = this.byShard[shard];
      if (s === undefined || s.firstEnd > endedBy) continue;
      const live: Ledger[] = [];
      let firstEnd = Number.POSITIVE_INFINITY;
      for (const l of s.list) {
        if (l.windowEnd > endedBy) {
          live.push(l);
          if (l.windowEnd < firstEnd) firstEnd = l.windowEnd;
        } else {
          dropped?.(l);
          this.forget(l);
        }
      }
      if (live.length === 0) this.byShard[shard] = undefined;
      else {
        s.list = live;
        s.firstEnd = firstEnd;
      }
    }
  }

  /** Takes an ended ledger out of the key index. */
  private forget(l: Ledger): void {
    this.count--;
    const list = this.byKey.get(l.keyId);
    if (list === undefined) return;
    const i = list.indexOf(l);
    if (i < 0) return;
    if (list.length === 1) this.byKey.delete(l.keyId);
    else list.splice(i, 1);
  }
}

/** The lease of `l` with this node epoch and lease number, made if there is none. */
export function leaseFor(l: Ledger, nodeId: string, nodeEpoch: string, leaseNo: number): Lease {
  const found = leaseIn(l, nodeEpoch, leaseNo);
  if (found !== undefined) return found;
  const lease: Lease = {
    nodeId,
    nodeEpoch,
    lease: leaseNo,
    float: nodeEpoch.startsWith(FLOAT_PREFIX),
    issued: 0,
    floated: 0,
    saidFloated: 0,
    saidBlanketed: 0,
    onRecord: 0,
    recordEpoch: 0,
    reported: 0,
    grantSeq: 0,
    spent: 0,
    seen: 0,
    selfIssued: 0,
    released: 0,
    seq: -1,
    demand: 0,
    noticeAt: -1,
    exhaustedAt: -1,
    grantedAt: -1,
  };
  // Most ledgers only ever have one lease; a pushed-to empty array reserves room for sixteen.
  if (l.leases.length === 0) l.leases = [lease];
  else l.leases.push(lease);
  return lease;
}

/** The lease of `l` with this node epoch and lease number. */
export function leaseIn(l: Ledger, nodeEpoch: string, leaseNo: number): Lease | undefined {
  for (const lease of l.leases) if (lease.lease === leaseNo && lease.nodeEpoch === nodeEpoch) return lease;
  return undefined;
}

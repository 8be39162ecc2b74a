import { ASK_AHEAD_ROUNDS, SKEW_ROUNDS } from '../lease-node.js';
import { FLOAT_PREFIX, HELD, leaseFor, leaseIn, type Float, type Lease, type Ledger, type LedgerStore } from '../ledger-store.js';
import type { Grant } from '../protocol/messages.js';
import type { Blanket, Blankets } from './blankets.js';
import { HELD_MIN_ALLOWANCE } from './held.js';
import type { FoldOwnerConfig, FoldOwnerStats } from './config.js';
import type { EndedMarks } from './ended.js';
import type { Issuer } from './issuer.js';
import { directOf } from './ledger-sums.js';
import type { CreditPool } from './pool.js';

/** Refills a float waits for its log write before writing its grant again. */
const RELOG_ROUNDS = 4;

/** How far ahead of a window's start a node's report makes its float: its rounds ahead, and skew. */
const AHEAD_FLOAT_ROUNDS = ASK_AHEAD_ROUNDS + SKEW_ROUNDS;

/** A float holds at least this much (while the window has it), and at most a quarter of the allowance (at least 1). */
const FLOAT_MIN = 2;

/**
 * The owner's floats — credit it logs as issued to itself, so an ask the float covers is answered
 * without waiting for a log write — and what it knows of its grants' log writes: which windows want
 * a float, their refills, and which grants are on record.
 */
export class Floats {
  /** Ledgers whose window had remote asks, while floats are on (the first `refillFloats`). */
  private readonly floatWanted = new Set<Ledger>();
  private turnedOn = false;

  constructor(
    private readonly cfg: FoldOwnerConfig,
    private readonly ledgers: LedgerStore,
    private readonly pool: CreditPool,
    private readonly issuer: Issuer,
    private readonly stats: FoldOwnerStats,
    private readonly blankets: Blankets,
    private readonly marks: EndedMarks,
  ) {}

  /** Whether floats are on: `refillFloats` was called once. */
  get on(): boolean {
    return this.turnedOn;
  }

  /**
   * An ask wanting `want` may draw on `l`'s float: it sizes the float's refills, puts `l` on the list,
   * and a window with no float yet gets one of one credit if its shard's blanket covers it (`cover`).
   */
  asked(l: Ledger, want: number): void {
    l.asks += want;
    l.asked = true;
    this.floatWanted.add(l);
    this.cover(l);
  }

  /**
   * Whether a node's report of `l` comes in the rounds before it starts: of a key the node will ask
   * for there (too rare for a lease), the window gets a float before its first ask, not after it.
   * This owner's own node too: its asks wait for their grant's log write like any other's.
   */
  aheadOf(l: Ledger, now: number): boolean {
    const ahead = l.windowEnd - l.windowMs - now;
    return !l.fixed && ahead > 0 && ahead <= AHEAD_FLOAT_ROUNDS * this.cfg.roundMs;
  }

  /** Puts `l` on the list of windows `refillFloats` tops up. */
  markWanted(l: Ledger): void {
    this.floatWanted.add(l);
  }

  /**
   * Tops up the floats of windows that had remote asks lately (and of the next window of each, in
   * its last two rounds, as of one a node reported ahead for a key it will ask for), on shards
   * `serving` says are this owner's: the grants to log. A float's credit counts as issued from the
   * moment it is made, so a later owner replaying the log never issues it again; it is usable only
   * once `logged` says its grant is on record. Sized to twice the most credit asks wanted between
   * two refills, at least FLOAT_MIN, at most a quarter of the allowance (at least 1), from the pool
   * without the reserve. The first call turns floats on.
   */
  refillFloats(serving: (shard: number) => boolean): Grant[] {
    const holder = this.cfg.floatHolder;
    if (holder === undefined) return [];
    this.turnedOn = true;
    const now = this.cfg.clock.now();
    const out: Grant[] = [];
    for (const l of this.floatWanted) {
      const shard = l.shard;
      // Ended, or moved to fixed share (a policy change after a leasing ask marked it): no float, nor
      // the next window's from it. A fixed share is issued to nodes only (`fixed-share.ts`).
      if (l.windowEnd <= now || l.fixed) {
        this.floatWanted.delete(l);
        continue;
      }
      // Not served now (a lost shard, or Redis briefly out of reach): kept, so a float whose write is
      // still out is written again once it is.
      if (!serving(shard)) continue;
      const asked = l.asks > 0;
      l.askPeak = Math.max(l.askPeak, l.asks);
      l.asks = 0;
      if (l.asked && l.windowEnd - now <= 2 * this.cfg.roundMs && serving(this.cfg.shardOf(l.keyId, l.windowId + 1))) {
        // Visited later in this loop (a Set iterates what is added while it runs).
        const next = this.ledgers.find(l.keyId, l.windowMs, l.windowId + 1) ?? this.ledgers.ledgerFor(l.keyId, l.windowId + 1, l.windowMs, l.allowance);
        next.askPeak = Math.max(next.askPeak, l.askPeak);
        this.floatWanted.add(next);
      }
      const f = this.floatOf(l, holder, shard);
      // Credit not yet on record counts: a refill waits for the one before it, and a write that did
      // not come back is written again (the grant is cumulative) a few rounds on.
      if (f.lease.issued > f.onRecord) {
        if (++f.waited % RELOG_ROUNDS === 0) out.push(this.issuer.restate(l, f.lease));
        continue;
      }
      f.waited = 0;
      const size = Math.min(Math.max(1, Math.floor(l.allowance / 4)), Math.max(FLOAT_MIN, 2 * l.askPeak));
      const amount = Math.min(size - (f.lease.issued - f.base - f.moved), this.pool.available(l));
      if (amount > 0) {
        out.push(this.issuer.issue(l, f.lease, amount));
        this.stats.floatRefills++;
      } else if (!asked && l.windowEnd - now > 2 * this.cfg.roundMs) {
        // Settled and not asked since the last refill: off the list until an ask or a report ahead
        // puts it back, so rounds cost what changed, not every key seen this window.
        this.floatWanted.delete(l);
      }
    }
    return out;
  }

  /**
   * The blankets to log now on the shards this owner serves (`Blankets.due`): none until floats are
   * on, nor while a member may not count them (`FleetView.countsBlankets`). They list the members
   * that may take credit themselves under them (`FleetView.holders`), this process's own node too: in
   * process, its ask would wait for the log whenever the answer is more than the float holds.
   */
  blanketsDue(shards: Iterable<number>, serving: (shard: number) => boolean): Blanket[] {
    const holder = this.cfg.floatHolder;
    if (holder === undefined || !this.turnedOn) return [];
    const members = this.cfg.fleet.holders?.() ?? [];
    const held = {
      members,
      min: this.cfg.heldMinAllowance ?? HELD_MIN_ALLOWANCE,
      inShard: (shard: number) => this.ledgers.inShard(shard),
      room: (l: Ledger) => this.pool.available(l, { includeReserve: true, signed: true }),
      ...(this.cfg.fleet.countsReach?.() === true ? { reachFrom: (shard: number) => Math.max(Math.floor(this.cfg.clock.now()), this.marks.latest(shard)) } : {}),
    };
    return this.blankets.due(holder, serving, shards, this.cfg.ownerEpoch, this.cfg.clock.now(), this.cfg.fleet.countsBlankets?.() === true, held);
  }

  /**
   * A window with no float of this owner's yet, covered by its shard's taken blanket: a float of one
   * credit, usable at once — the blanket is its grant on record (`lib/owner/blankets.ts`). So the
   * window's first ask is answered without a log write. From the pool without the reserve.
   */
  private cover(l: Ledger): void {
    const holder = this.cfg.floatHolder;
    const epoch = this.cfg.ownerEpoch(l.shard);
    if (holder === undefined || l.fixed || l.float?.lease.lease === epoch || !this.blankets.covers(l, epoch) || this.pool.available(l) < 1) return;
    const f = this.floatOf(l, holder, l.shard);
    // A float lease of this epoch already issued to (it cannot be, as `l.float` was not it): no blanket.
    if (f.lease.issued !== 0) return;
    f.lease.issued = 1;
    // Numbered as a grant of 1, so a checkpoint and the blanket's retirement can state it (`retireBlanket`).
    f.lease.grantSeq = 1;
    f.onRecord = 1;
    f.blanket = true;
    this.stats.blanketFloats++;
  }

  /**
   * The shard is given up cleanly (`Blankets.retire`): its blanket's retirement to log, if any, with
   * the grants of the floats made under it that gave credit out and have no refill on record — the
   * blanket was their only record, and a later owner that counts what moved out of them must count
   * them, not let another earlier owner's float stand for it (one that gave nothing is relied on by
   * no grant, and costs nothing). Such a float then gives nothing until a grant of it is on record:
   * should this owner serve the shard again under the same owner epoch, the retirement may not have
   * been taken.
   */
  retireBlanket(shard: number): { blanket: Blanket; grants: Grant[] } | undefined {
    const blanket = this.blankets.retire(shard);
    const grants: Grant[] = [];
    for (const l of this.ledgers.inShard(shard)) {
      const f = l.float;
      if (f?.blanket !== true || f.onRecord > 1) continue;
      f.onRecord = 0;
      if (blanket !== undefined && f.moved > 0) grants.push({ ...this.issuer.restate(l, f.lease), ownerEpoch: blanket.ownerEpoch });
    }
    return blanket === undefined ? undefined : { blanket, grants };
  }

  /**
   * Grants whose log write came back in time (`taken`): what they state is on record, floats' credit
   * usable. Not taken, one with float credit (answered before its write) keeps its shard's blanket
   * from being retired.
   */
  logged(grants: readonly Grant[], taken = true): void {
    for (const g of grants) {
      if (!taken) {
        if ((g.floated ?? 0) > 0) this.blankets.lost(this.cfg.shardOf(g.keyId, g.windowId), g.ownerEpoch);
        continue;
      }
      const found = this.granted(g);
      if (found === undefined || g.ownerEpoch !== this.cfg.ownerEpoch(found.l.shard)) continue;
      const { l, lease } = found;
      if (!lease.float) {
        const direct = directOf(g);
        lease.onRecord = lease.recordEpoch === g.ownerEpoch ? Math.max(lease.onRecord, direct) : direct;
        lease.recordEpoch = g.ownerEpoch;
      } else if (l.float?.lease === lease) {
        l.float.onRecord = Math.max(l.float.onRecord, g.issued);
        this.issuer.announceRefilled(l);
      }
    }
  }

  /**
   * Whether all `g` states is on record already: its credit beyond what came from a float was in a
   * grant whose log write came back. Such a grant may go out before its own log write does.
   */
  onRecord(g: Grant): boolean {
    const found = this.granted(g);
    if (found === undefined || found.lease.float) return false;
    const { l, lease } = found;
    // What the node took itself under a blanket is on record as the blanket's, under any epoch.
    const took = lease.saidBlanketed > 0 && this.blankets.recordsHeld(l, lease.nodeEpoch) ? Math.min(HELD, lease.saidBlanketed) : 0;
    const direct = directOf(g);
    return direct <= took || (lease.recordEpoch === g.ownerEpoch && direct <= lease.onRecord);
  }

  /** The ledger and lease a grant of this owner's went to, if still known. */
  private granted(g: Grant): { l: Ledger; lease: Lease } | undefined {
    const l = this.ledgers.find(g.keyId, g.windowMs, g.windowId);
    if (l === undefined) return undefined;
    const lease = leaseIn(l, g.nodeEpoch, g.lease);
    return lease === undefined ? undefined : { l, lease };
  }

  /** The ledger's float under the current owner epoch: a new one after a change of owner. */
  private floatOf(l: Ledger, holder: { nodeId: string; nodeEpoch: string }, shard: number): Float {
    const epoch = this.cfg.ownerEpoch(shard);
    if (l.float?.lease.lease !== epoch) {
      const lease = leaseFor(l, holder.nodeId, FLOAT_PREFIX + holder.nodeEpoch, epoch);
      l.float = { lease, base: lease.issued, onRecord: lease.issued, moved: 0, waited: 0, blanket: false };
    }
    return l.float;
  }
}

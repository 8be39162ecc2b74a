import { Exhaustion, type Bucket } from '../bucket.js';
import { HELD } from '../ledger-store.js';
import type { Subject } from '../bucket-map.js';
import { ADMITTED, type Acquired, type Denied } from '../node-contract.js';
import { shardOf, type CreditRequest, type Grant } from '../protocol/messages.js';
import { NodeMessages } from './messages.js';

/** How a request is denied: `refused` for want of credit, `unavailable` when the node cannot decide (F5). */
type Denial = 'refused' | 'unavailable';

/**
 * The fast path and the decision: a request the credit held cannot cover asks the owners of its short
 * windows, under a hard deadline and across the network at most once per bucket per round (D2); the
 * answer is applied, then the request takes credit from every window or is denied, with the wait to
 * retry (H2).
 */
export abstract class NodeAsks extends NodeMessages {
  /** Fast-path asks across the network in flight, by subject: requests arriving meanwhile wait for the answer. */
  private readonly asking = new Map<Subject, Promise<void>>();

  /** Admits: takes `cost` from every window of `subject` (each holds it). */
  protected take(subject: Subject, cost: number): typeof ADMITTED {
    for (const b of subject.buckets) b.spent += cost;
    return ADMITTED;
  }

  /** A request the credit held cannot cover: asks the owners (or waits for an ask on its way), then decides. */
  protected fastPath(subject: Subject, cost: number): Acquired | Promise<Acquired> {
    // An ask for this key is on its way: share its answer instead of asking again (a second ask
    // would outlast the hard deadline). Whatever happens to the ask, the waiters are answered.
    const asking = this.asking.get(subject);
    if (asking !== undefined) {
      const recheck = (): Acquired => this.recheck(subject, cost);
      return asking.then(recheck, recheck);
    }
    const sent = this.ask(subject, cost);
    if (!('requests' in sent)) return sent;
    const { requests, answer, blocked, remote } = sent;
    if (!isPromise(answer)) {
      if (remote) this.askAnswered();
      this.settle(requests, answer);
      return blocked ? this.deny(subject, cost, 'refused') : this.recheck(subject, cost);
    }
    const settled = answer.then(
      (grants) => {
        this.asking.delete(subject);
        if (grants === undefined) {
          // An owner side in this process that missed the deadline (it waits for its round reply)
          // says nothing about the network: no hedging for it.
          if (remote) this.askMissed();
          this.stats.fastPathTimeouts++;
        } else {
          if (remote) this.askAnswered();
          this.settle(requests, grants);
        }
      },
      (err: unknown) => {
        // Never left pending: a stuck ask would send every later request of this key to fail-open.
        this.asking.delete(subject);
        throw err;
      },
    );
    this.asking.set(subject, settled);
    return settled.then(() => (blocked ? this.deny(subject, cost, 'refused') : this.recheck(subject, cost)));
  }

  /**
   * Asks the owners of every window short of `cost` for it: the requests and the answer (a promise
   * across the network, settled by the hard deadline), or a denial when no window may ask now.
   */
  private ask(subject: Subject, cost: number): Denied | { requests: CreditRequest[]; answer: readonly Grant[] | Promise<readonly Grant[] | undefined>; blocked: boolean; remote: boolean } {
    const windows = subject.limits.windows;
    const requests: CreditRequest[] = [];
    // A short window that cannot ask now dooms this request, but the others still ask (once per
    // round): their answers say which windows are really spent, for an honest Retry-After.
    let blocked = false;
    let remote = false;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      if (b.credit >= cost) continue;
      const shard = shardOf(subject.keyId, b.windowId, this.cfg.shards);
      const silence = this.silenceMs(shard);
      // F5: degraded and out of credit — the limiter cannot decide; the backstop is the bound.
      if (silence > this.cfg.degradedAfterMs) return this.deny(subject, cost, 'unavailable');
      // F2: two missed rounds — no fast path, enforce with what is held. D2 across the network (an
      // owner in this process answers for free): see `settle`. And no asking when the owner said
      // the window has nothing left for us.
      const local = this.link.local?.(shard) === true;
      if (silence >= this.cfg.missedRoundsLimit * this.cfg.roundMs || (!local && b.fastRound >= this.roundNo) || b.exhausted !== Exhaustion.None) {
        blocked = true;
        continue;
      }
      const w = windows[i]!;
      b.fastRound = this.roundNo;
      remote ||= !local;
      requests.push({
        keyId: subject.keyId,
        windowId: b.windowId,
        windowMs: w.windowMs,
        limit: w.limit,
        nodeId: this.cfg.nodeId,
        nodeEpoch: this.cfg.nodeEpoch,
        lease: b.lease,
        spent: b.spent,
        selfIssued: b.selfIssued,
        released: b.released,
        issued: b.issued,
        ...(b.floated > 0 ? { floated: b.floated } : {}),
        ...(b.blanketed ? { blanketed: HELD } : {}),
        need: cost - b.credit,
        demand: this.demandOf(b, w.limit),
        fastPath: true,
        ...(subject.limits.fixedShare ? { fixedShare: true } : {}),
      });
    }
    if (requests.length === 0) return this.deny(subject, cost, 'refused');
    this.stats.fastPath++;
    const answer = this.link.requestCredit(requests, this.cfg.fastPathDeadlineMs);
    if (answer === undefined) {
      if (remote) this.askMissed();
      return this.deny(subject, cost, 'refused');
    }
    return { requests, answer, blocked, remote };
  }

  /**
   * Applies a fast-path answer. D2 as this node keeps it: a remote ask that went unanswered blocks
   * asks for the rest of the round; one answered with nothing for the next round too (the owner has
   * recalled idle credit, which lands in the pool a round later); one answered with credit blocks
   * nothing, so a key seen a few times a second on a node gets one ask per request and holds no
   * lease. Denials say "one round", not "until the window ends": only the owner's exhaustion notice
   * says the window is spent.
   */
  private settle(requests: readonly CreditRequest[], grants: readonly Grant[]): void {
    for (const r of requests) this.heard(shardOf(r.keyId, r.windowId, this.cfg.shards));
    for (const g of grants) this.applyGrant(g);
    for (const r of requests) {
      const b = this.bucketFor(r.keyId, r.windowMs, r.nodeEpoch, r.lease);
      if (b === undefined || b.windowId !== r.windowId) continue;
      // Granted: the next request may ask again (each grant is credit, so this is bounded by the
      // allowance). Nothing: no ask this round or the next.
      b.fastRound = b.credit > 0 ? -1 : this.roundNo + 1;
    }
  }

  /**
   * After the fast path: take credit if every window now has it, else deny. A window that ended while
   * the ask was out still counts what it holds (`usable`): the request came in it. A bucket another
   * request or a round rolled meanwhile holds only the new window's credit.
   */
  private recheck(subject: Subject, cost: number): Acquired {
    const now = this.clock.now();
    for (const b of subject.buckets) if (!usable(b, cost, now)) return this.deny(subject, cost, 'refused');
    // Reported even if the answer came after the round that counted the request: a quiet round
    // whose demand did not move reports nothing else (`endRound`).
    for (const b of subject.buckets) b.dirty = true;
    this.touch(subject);
    return this.take(subject, cost);
  }

  /**
   * Denial for `subject`: `unavailable` names a window and no wait (F5: the node cannot decide). A
   * `refused` one gives the wait to retry. A window could deny this key now if it is short here and the owner said it
   * has nothing left (exhausted): Retry-After is the wait to the latest such boundary (H2). A window
   * that is only short here (its ask is spent for this round, or the owner is out of reach) may get
   * credit next round: then the wait is one round, not a whole window.
   */
  private deny(subject: Subject, cost: number, kind: Denial): Denied {
    const now = this.clock.now();
    let spent: Bucket | undefined;
    let spentName = '';
    let short: Bucket | undefined;
    let shortName = '';
    subject.limits.windows.forEach((w, i) => {
      const b = subject.buckets[i] as Bucket;
      if (usable(b, cost, now)) return;
      if (b.exhausted === Exhaustion.Spent && (spent === undefined || b.windowEnd > spent.windowEnd)) {
        spent = b;
        spentName = w.name;
      } else if (short === undefined) {
        short = b;
        shortName = w.name;
      }
    });
    if (kind === 'unavailable') return { admitted: false, window: spentName || shortName, retryAfterMs: undefined, unavailable: true };
    if (spent !== undefined) return { admitted: false, window: spentName, retryAfterMs: Math.max(0, spent.windowEnd - now), unavailable: false };
    const wait = short === undefined ? undefined : Math.min(this.cfg.roundMs, Math.max(0, short.windowEnd - now));
    subject.shortRound = this.roundNo;
    return { admitted: false, window: shortName || subject.limits.windows[0]!.name, retryAfterMs: wait, unavailable: false };
  }
}

/**
 * Whether `b` covers `cost`. Once its window has ended (an ask was out at the boundary), only if no
 * grant that landed after the end lacked `late`: a grant that says it was issued by an owner keeping
 * complete ended marks for the window, which never issues for a window whose ledger any owner of the
 * shard dropped, so it is the window's allowance, on record there. A grant without it (an older
 * release, or a shard an older release owned lately) may have been issued from a ledger made again
 * after its sweep, as if nothing had been issued: it covers nothing once the window ended.
 */
function usable(b: Bucket, cost: number, now: number): boolean {
  return b.credit >= cost && !(b.lateUnsure && b.windowEnd <= now);
}

function isPromise<T>(v: T | Promise<T>): v is Promise<T> {
  return typeof (v as { then?: unknown })?.then === 'function';
}

import { ErrorCode, RateLimiterError } from '../errors.js';
import type { Lease, Ledger } from '../ledger-store.js';
import type { Adjust, Grant, OwnerMessage } from '../protocol/messages.js';
import { roundNow, type FoldOwnerConfig, type FoldOwnerStats } from './config.js';
import type { EndedMarks } from './ended.js';
import { committed, held } from './ledger-sums.js';
import type { CreditPool } from './pool.js';
import type { GrantSizing } from './sizing.js';

/** Thrown if a grant would break sum(committed) ≤ allowance (L2); it must be unreachable. */
export class InvariantViolation extends RateLimiterError {
  constructor(message: string) {
    super(ErrorCode.INTERNAL, message);
  }
}

/**
 * What an owner sends: grants (each checked against L2 before it is made), recalls, and the notices
 * that a window is exhausted or has credit again. Messages not returned to a caller collect in an
 * outbox the bus drains.
 */
export class Issuer {
  private outbox: OwnerMessage[] = [];

  constructor(
    private readonly cfg: FoldOwnerConfig,
    private readonly pool: CreditPool,
    private readonly sizing: GrantSizing,
    private readonly stats: FoldOwnerStats,
    private readonly marks: EndedMarks,
  ) {}

  /** Queues a message for the outbox. */
  post(m: OwnerMessage): void {
    this.outbox.push(m);
  }

  /** Messages produced for other nodes (recalls, notices) since the last call. */
  takeOutbox(): OwnerMessage[] {
    const out = this.outbox;
    this.outbox = [];
    return out;
  }

  /** Issues `amount` to `lease`, `fromFloat` of it moved out of the ledger's float (committed already). */
  issue(ledger: Ledger, lease: Lease, amount: number, fromFloat = 0): Grant {
    // Credit moved out of the float commits nothing more: the float's own bound (`floatLeft`) holds it.
    const after = committed(ledger) + amount - fromFloat;
    if ((amount > fromFloat && after > ledger.allowance) || fromFloat > this.pool.floatLeft(ledger)) {
      throw new InvariantViolation(`grant of ${amount} (${fromFloat} from the float) would raise committed credit to ${after} > allowance ${ledger.allowance}`);
    }
    lease.issued += amount;
    if (fromFloat > 0) {
      lease.floated += fromFloat;
      ledger.float!.moved += fromFloat;
    }
    lease.grantSeq++;
    lease.grantedAt = roundNow(this.cfg);
    this.stats.grants++;
    return this.restate(ledger, lease);
  }

  /**
   * The lease's latest grant, cumulative: re-sending it repairs a lost grant and adds nothing. Every
   * grant is made here, so every one says `late` exactly when this owner's ended marks are complete
   * for its window (`EndedMarks.complete`): only then may a node spend it once the window has ended.
   */
  restate(ledger: Ledger, lease: Lease): Grant {
    return {
      type: 'grant',
      keyId: ledger.keyId,
      windowId: ledger.windowId,
      windowMs: ledger.windowMs,
      nodeId: lease.nodeId,
      nodeEpoch: lease.nodeEpoch,
      lease: lease.lease,
      grantSeq: lease.grantSeq,
      ownerEpoch: this.cfg.ownerEpoch(ledger.shard),
      issued: lease.issued,
      ...(lease.floated > 0 ? { floated: lease.floated } : {}),
      ...(this.marks.complete(ledger.shard, ledger.windowEnd) ? { late: 1 as const } : {}),
    };
  }

  /**
   * The pool is dry for `asking`: ask leases holding more than their own demand needs to give the
   * surplus back. If none has any and even the reserve is gone, tell every lease of the window that
   * it is exhausted, so none of them spends a fast path on asking again.
   */
  recall(l: Ledger, asking: Lease): void {
    const round = roundNow(this.cfg);
    let recalled = false;
    for (const lease of l.leases) {
      if (lease === asking || lease.float || lease.noticeAt === round) continue;
      const keep = this.sizing.keepOnRecall(lease);
      if (held(lease) > keep) {
        lease.noticeAt = round;
        this.outbox.push(this.adjust(l, lease, { keep, exhausted: false }));
        this.stats.recalls++;
        recalled = true;
      }
    }
    if (!recalled) this.announceExhausted(l);
  }

  /**
   * Once nothing is left, reserve included, every lease of the window is told so (once, until a grant
   * changes it): none of them spends a fast path on asking, and their denials name this window.
   * What is held back for unsettled nodes is not spent: it comes back to the pool the round they are
   * heard from, so a pool emptied only by it is not announced (its leases would wait for the
   * window's end). In a fleet of one that share is the whole allowance.
   */
  announceExhausted(l: Ledger): void {
    // A float whose write is still out counts: its credit is the window's, usable once on record.
    if (Math.max(0, l.allowance - committed(l)) + this.pool.floatLeft(l, { includePending: true }) > 0) return;
    l.announced = true;
    const round = roundNow(this.cfg);
    for (const lease of l.leases) {
      if (lease.float || (lease.exhaustedAt >= 0 && lease.exhaustedAt >= lease.grantedAt)) continue;
      lease.exhaustedAt = round;
      this.outbox.push(this.adjust(l, lease, { keep: -1, exhausted: true }));
      this.stats.exhaustedNotices++;
    }
  }

  /** Tells one lease the window has nothing left for it (a fixed share: its share and the reserve are gone). */
  exhaust(l: Ledger, lease: Lease): void {
    if (lease.exhaustedAt >= 0 && lease.exhaustedAt >= lease.grantedAt) return;
    lease.exhaustedAt = roundNow(this.cfg);
    this.outbox.push(this.adjust(l, lease, { keep: -1, exhausted: true }));
    this.stats.exhaustedNotices++;
  }

  /**
   * Credit came back after the window was announced exhausted (a node gave back what it stopped
   * using): the leases told so may ask again, or requests under the limit would be refused while the
   * pool has credit. Sent as an adjustment that neither recalls nor exhausts (keep −1, not exhausted).
   */
  announceRefilled(l: Ledger): void {
    if (!l.announced || this.pool.available(l, { includeReserve: true }) + this.pool.floatLeft(l) <= 0) return;
    l.announced = false;
    for (const lease of l.leases) {
      if (lease.float || lease.exhaustedAt < 0 || lease.exhaustedAt < lease.grantedAt) continue;
      lease.exhaustedAt = -1;
      this.outbox.push(this.adjust(l, lease, { keep: -1, exhausted: false }));
      this.stats.refills++;
    }
  }

  /** An adjustment of `lease`: keep at most `keep` (−1: no recall), and whether the window is exhausted. */
  private adjust(l: Ledger, lease: Lease, { keep, exhausted }: { readonly keep: number; readonly exhausted: boolean }): Adjust {
    return {
      type: 'adjust',
      keyId: l.keyId,
      windowId: l.windowId,
      windowMs: l.windowMs,
      nodeId: lease.nodeId,
      nodeEpoch: lease.nodeEpoch,
      lease: lease.lease,
      ownerEpoch: this.cfg.ownerEpoch(l.shard),
      keep,
      exhausted,
      grantSeq: lease.grantSeq,
    };
  }
}

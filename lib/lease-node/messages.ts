import { Exhaustion } from '../bucket.js';
import { shardOf, type Adjust, type Grant, type OwnerMessage } from '../protocol/messages.js';
import { NodeBoundary } from './boundary.js';

/**
 * What owners send a node: grants (credit on a lease, for the current window or the next) and
 * adjustments (a recall, an exhaustion notice, a refill). Each applies once whatever the order, and
 * only from an owner no older than one already heard from for its shard (L4).
 */
export abstract class NodeMessages extends NodeBoundary {
  /** Highest owner epoch heard from for each shard: fencing against a deposed owner. */
  protected readonly ownerEpochs = new Float64Array(this.cfg.shards);

  /** Applies a message from an owner; returns whether it changed anything. */
  onMessage(m: OwnerMessage): boolean {
    return m.type === 'grant' ? this.applyGrant(m) : this.applyAdjust(m);
  }

  /** Rejects a message from an owner older than one already heard from for its shard (L4). */
  private fenced(m: OwnerMessage): boolean {
    const shard = shardOf(m.keyId, m.windowId, this.cfg.shards);
    if (m.ownerEpoch < this.ownerEpochs[shard]!) {
      this.stats.staleOwnerEpoch++;
      return true;
    }
    this.ownerEpochs[shard] = m.ownerEpoch;
    return false;
  }

  /** Applies a grant if it is new for its lease (current or next window); a grant only raises credit. */
  applyGrant(g: Grant): boolean {
    if (this.fenced(g)) return false;
    const b = this.bucketFor(g.keyId, g.windowMs, g.nodeEpoch, g.lease);
    if (b !== undefined) this.heard(shardOf(g.keyId, g.windowId, this.cfg.shards));
    if (b !== undefined && g.windowId === b.windowId && g.grantSeq > b.grantSeq) {
      b.grantSeq = g.grantSeq;
      // Credit that lands once the window ended counts only if its owner keeps complete ended marks.
      if (g.issued > b.issued && g.late !== 1 && this.clock.now() >= b.windowEnd) b.lateUnsure = true;
      if (g.issued > b.issued) b.issued = g.issued;
      if (g.floated !== undefined && g.floated > b.floated) b.floated = g.floated;
      // A grant sized under an older, higher limit is cut to the one in force.
      this.trim(b, this.limitOf(g.keyId, g.windowMs));
      if (g.grantSeq > b.exhaustedSeq) b.exhausted = Exhaustion.None;
      // What it holds moved: a quiet subject is gone through again (it may give some back, or report a trim).
      this.wake(this.buckets.peek(g.keyId)!);
      this.stats.grantsApplied++;
      return true;
    }
    if (b !== undefined && g.windowId === b.windowId + 1 && (b.nextWindowId !== g.windowId || g.grantSeq > b.nextGrantSeq)) {
      b.nextWindowId = g.windowId;
      b.nextGrantSeq = g.grantSeq;
      b.nextIssued = Math.max(b.nextIssued, g.issued);
      b.nextFloated = Math.max(b.nextFloated, g.floated ?? 0);
      // Listed, so the round after the rollover rolls it in even if no request comes (`endRound`).
      this.touch(this.buckets.peek(g.keyId)!);
      this.stats.grantsApplied++;
      return true;
    }
    this.stats.grantsIgnored++;
    return false;
  }

  /** Applies a recall (release what is held above `keep`) and/or an exhaustion notice. */
  applyAdjust(a: Adjust): boolean {
    if (this.fenced(a)) return false;
    const b = this.bucketFor(a.keyId, a.windowMs, a.nodeEpoch, a.lease);
    if (b === undefined || a.windowId !== b.windowId) return false;
    this.heard(shardOf(a.keyId, a.windowId, this.cfg.shards));
    if (a.keep >= 0 && b.credit > a.keep) {
      b.giveBack(b.credit - a.keep);
      const s = this.buckets.peek(a.keyId);
      if (s !== undefined) {
        this.touch(s);
        this.reportNow(s, b, a.windowMs);
      }
    }
    // Exhausted: when what is held runs out, deny without asking (until a later grant, or until the
    // owner says credit came back: neither a recall nor exhausted).
    if (a.exhausted && a.grantSeq >= b.exhaustedSeq && a.grantSeq >= b.grantSeq) {
      b.exhausted = Exhaustion.Spent;
      b.exhaustedSeq = a.grantSeq;
    } else if (!a.exhausted && a.keep < 0 && a.grantSeq >= b.exhaustedSeq) {
      b.exhausted = Exhaustion.None;
    }
    this.stats.adjustsApplied++;
    return true;
  }
}

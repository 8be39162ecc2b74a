import type { Bucket } from './bucket.js';
import { NodeRound } from './lease-node/round.js';
import { ADMITTED, type Acquired, type Denied, type Enforcer, type LeaseNodeConfig, type LeaseNodeStats, type OwnerLink } from './node-contract.js';
import type { ResolvedLimits } from './policy.js';

export { ADMITTED, type Acquired, type Denied, type LeaseNodeConfig, type LeaseNodeStats, type OwnerLink };
export { ASK_AHEAD_ROUNDS, SKEW_ROUNDS } from './lease-node/boundary.js';

/**
 * Node side of the leasing protocol: buckets of leased credit, decremented all-or-nothing across a
 * key's windows; a request the credit held cannot cover asks the owner (the fast path, under a hard
 * deadline, rationed per round as in `settle`); each round one report batch per shard. Tracks owner
 * contact per shard for the failure states F2–F5. No timers or I/O inside: the caller drives `endRound()` and the link.
 *
 * One class built in layers, one file each under `lib/lease-node/`, each resting on those before it:
 * `state` (settings, buckets, owner contact), `demand` (advertised demand, credit given back),
 * `reports`, `boundary` (window rollover, the boundary self-grant), `messages` (grants, adjustments),
 * `asks` (the fast path, the decision), `round`; this file is the admission path on top. Layers rather
 * than separate objects: a request calls across them, and an inherited method costs what an own one
 * does, where a call into another object would add a hop to every request.
 */
export class LeaseNode extends NodeRound implements Enforcer {
  /**
   * Takes `cost` credit from every window of `limits` or from none. Synchronous when credit is held
   * or the owner is local; a promise only when the fast path has to cross the network.
   */
  acquire(keyId: string, limits: ResolvedLimits, cost = 1): Acquired | Promise<Acquired> {
    const now = this.clock.now();
    const subject = this.buckets.get(keyId, limits, now, this.roundNo);
    this.touch(subject);
    const windows = limits.windows;
    let short = false;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      this.rollToNow(keyId, b, windows[i]!, now);
      b.roundDemand += cost;
      if (b.credit < cost) this.takeHeld(keyId, b, windows[i]!);
      if (b.credit < cost) short = true;
    }
    if (!short) return this.take(subject, cost);
    return this.fastPath(subject, cost);
  }

  /**
   * Charges `cost` to every window of `limits` for a request admitted without credit (the middleware
   * failing open while this node is degraded, F5): spent like any admission, so it is reported once
   * owners are back and the window holds no credit for it afterwards. Credit goes below zero; grants
   * fill that first.
   */
  charge(keyId: string, limits: ResolvedLimits, cost = 1): void {
    const now = this.clock.now();
    const subject = this.buckets.get(keyId, limits, now, this.roundNo);
    this.wake(subject);
    const windows = limits.windows;
    for (let i = 0; i < windows.length; i++) {
      const b = subject.buckets[i] as Bucket;
      this.rollToNow(keyId, b, windows[i]!, now);
      b.spent += cost;
      b.dirty = true;
    }
    this.touch(subject);
    this.stats.charged += cost;
  }
}

import type { Logger } from '../lib/logger.js';
import { compilePolicy, type CompiledPolicy } from '../lib/policy.js';
import { PolicyStore } from './policy-store.js';
import type { SharedRedis } from './channels.js';
import { StoreRecordError, type SignedKind, type StoreRejectReason, type StoreSigner } from './store-signature.js';

/** A stored policy version as a node holds it: its number and when the admin API stored it. */
export interface StoredVersion {
  readonly version: number;
  readonly at: number;
}

/** What a node does with what the feed brings. */
export interface PolicyFeedTarget {
  /** The stored version in force on this node; undefined while it runs the policy it started with. */
  inForce(): StoredVersion | undefined;
  /** Applies a stored policy that replaces the one in force. */
  apply(policy: CompiledPolicy, stored: StoredVersion): void;
  /** Turns enforcement on or off (the kill switch). */
  enforce(on: boolean): void;
}

/**
 * A node's view of the live policy (P4): it loads the stored policy and the kill switch at start and
 * again whenever the store announces a change (and every `pollMs`, in case an announcement was missed
 * while disconnected). A stored version replaces the one in force if it is higher, or — when Redis
 * lost the store and the policy was applied again from version 1 — if it was stored later. A record
 * not signed under the policy secret, an older signed one written back (a replay), a policy that does
 * not compile, or Redis out of reach leaves the last good policy and switch in force; every such
 * failure is counted and logged. `close()` waits for the loads in flight, and what they read after
 * it is neither applied nor counted nor logged.
 */
export class PolicyFeed {
  private readonly store: PolicyStore;
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** The loads in flight (the start's, the poll's, an announcement's), which `close()` waits for. */
  private readonly loads = new Set<Promise<void>>();
  /** When the switch in force was set (a signed switch set earlier is a replay). */
  private switchAt = 0;
  /** The last refusal of each kind, so a record left in the store is counted once. */
  private readonly refused = new Map<SignedKind, string>();
  /** Loads that failed (Redis out of reach, or a stored policy that did not compile). */
  failures = 0;
  /** Stored records refused, by reason. */
  readonly rejected: Record<StoreRejectReason, number> = { unsigned: 0, secret: 0, mac: 0, malformed: 0, replay: 0 };

  constructor(
    redis: SharedRedis,
    prefix: string | undefined,
    signer: StoreSigner,
    private readonly target: PolicyFeedTarget,
    private readonly logger?: Logger,
    pollMs = 5000,
  ) {
    this.store = new PolicyStore(redis.command, signer, prefix);
    // A failed subscription is made up for by the poll; errors are reported through load() failures.
    redis.subscribe(this.store.channel, () => void this.load()).catch(() => undefined);
    this.timer = setInterval(() => void this.load(), pollMs);
    this.timer.unref();
    void this.load();
  }

  /** Reads the store and applies what is newer, unless closed meanwhile; never throws. */
  load(): Promise<void> {
    if (this.closed) return Promise.resolve();
    const run = this.loadBoth()
      .catch((err: unknown) => this.fail('policy', err, 'live policy not applied; the last good policy stays in force'))
      .finally(() => this.loads.delete(run));
    this.loads.add(run);
    return run;
  }

  private async loadBoth(): Promise<void> {
    // The switch and the policy are read apart: a policy that cannot be loaded never keeps the
    // kill switch from working.
    await Promise.all([
      this.store.switchState().then(
        (sw) => {
          if (this.closed) return;
          if (sw.at < this.switchAt) {
            const what = sw.at === 0 ? 'no longer stored' : `set at ${sw.at}, before the one in force (${this.switchAt})`;
            return this.refuse('switch', new StoreRecordError('replay', `switch: ${what}; the last signed one stays in force`));
          }
          this.switchAt = sw.at;
          this.refused.delete('switch');
          this.target.enforce(sw.enforce);
        },
        (err: unknown) => this.fail('switch', err, 'kill switch not read; enforcement stays as it was'),
      ),
      this.store.current().then(
        (stored) => {
          if (this.closed || stored === undefined) return;
          const now = this.target.inForce();
          const same = now !== undefined && stored.version === now.version && stored.at === now.at;
          if (!same && now !== undefined && stored.version <= now.version && stored.at <= now.at) {
            return this.refuse('policy', new StoreRecordError('replay', `policy: version ${stored.version} stored at ${stored.at} is not newer than version ${now.version} in force`));
          }
          this.refused.delete('policy');
          if (same) return;
          if (now !== undefined && stored.version <= now.version) this.logger?.warn({ version: stored.version, inForce: now.version }, 'policy store was reset: taking the lower version stored later');
          let compiled: CompiledPolicy;
          try {
            compiled = compilePolicy(stored.policy);
          } catch (err) {
            return this.fail('policy', err, 'live policy not loaded; the last good policy stays in force');
          }
          this.target.apply(compiled, { version: stored.version, at: stored.at });
        },
        (err: unknown) => this.fail('policy', err, 'live policy not loaded; the last good policy stays in force'),
      ),
    ]);
  }

  /** Counts and logs a refused record once, not at every poll while it stays in the store. */
  private refuse(kind: SignedKind, err: StoreRecordError): void {
    if (this.closed || this.refused.get(kind) === err.message) return;
    this.refused.set(kind, err.message);
    this.rejected[err.reason]++;
    this.logger?.warn({ reason: err.reason, err: err.message }, 'stored record refused; the last good one stays in force');
  }

  private fail(kind: SignedKind, err: unknown, msg: string): void {
    if (this.closed) return;
    if (err instanceof StoreRecordError) return this.refuse(kind, err);
    this.failures++;
    this.logger?.warn({ err }, msg);
  }

  /**
   * Stops polling and resolves once no load is in flight (never rejects); a load ending meanwhile
   * applies nothing. The connections are the bus's: close it after this resolves.
   */
  close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    return Promise.allSettled(this.loads).then(() => undefined);
  }
}

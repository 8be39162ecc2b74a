import type { Logger } from 'pino';
import type { CompiledPolicy } from '../lib/policy.js';
import { PolicyStore } from './policy-store.js';
import { connect, type RedisConnectionOptions } from './redis-connection.js';

/** What a node does with what the feed brings. */
export interface PolicyFeedTarget {
  /** The version in force on this node. */
  version(): number;
  /** Applies a newer compiled policy. */
  apply(policy: CompiledPolicy): void;
  /** Turns enforcement on or off (the kill switch). */
  enforce(on: boolean): void;
}

/**
 * A node's view of the live policy (P4): it loads the stored policy and the kill switch at start and
 * again whenever the store announces a change (and every `pollMs`, in case an announcement was missed
 * while disconnected). A policy that does not compile, or Redis out of reach, leaves the last good
 * one in force; every such failure is logged.
 */
export class PolicyFeed {
  private readonly redis;
  private readonly sub;
  private readonly store: PolicyStore;
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** Loads that failed (Redis out of reach, or a stored policy that did not compile). */
  failures = 0;

  constructor(
    opts: RedisConnectionOptions,
    private readonly target: PolicyFeedTarget,
    private readonly logger?: Logger,
    pollMs = 5000,
  ) {
    this.redis = connect(opts, { commandTimeout: 2000 });
    this.sub = connect(opts, {});
    for (const c of [this.redis, this.sub]) c.on('error', () => undefined); // reported through load() failures
    this.store = new PolicyStore(this.redis, opts.prefix);
    this.sub.on('message', () => void this.load());
    void this.sub.subscribe(this.store.channel).catch(() => undefined);
    this.timer = setInterval(() => void this.load(), pollMs);
    this.timer.unref();
    void this.load();
  }

  /** Reads the store and applies what is newer; never throws. */
  async load(): Promise<void> {
    if (this.closed) return;
    try {
      await this.loadBoth();
    } catch (err) {
      this.fail(err, 'live policy not applied; the last good policy stays in force');
    }
  }

  private async loadBoth(): Promise<void> {
    // The switch and the policy are read apart: a policy that cannot be loaded never keeps the
    // kill switch from working.
    await Promise.all([
      this.store.switchState().then(
        (sw) => this.target.enforce(sw.enforce),
        (err: unknown) => this.fail(err, 'kill switch not read; enforcement stays as it was'),
      ),
      this.store.compiled().then(
        (policy) => {
          if (policy !== undefined && policy.version > this.target.version()) this.target.apply(policy);
        },
        (err: unknown) => this.fail(err, 'live policy not loaded; the last good policy stays in force'),
      ),
    ]);
  }

  private fail(err: unknown, msg: string): void {
    this.failures++;
    this.logger?.warn({ err }, msg);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.sub.disconnect();
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}

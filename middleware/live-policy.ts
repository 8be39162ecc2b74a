import type { Logger } from '../lib/logger.js';
import { PolicyFeed, type StoredVersion } from '../bus/policy-feed.js';
import type { SharedRedis } from '../bus/channels.js';
import type { RedisConnectionOptions } from '../bus/redis-options.js';
import { StoreSigner } from '../bus/store-signature.js';
import type { CompiledPolicy } from '../lib/policy.js';

/** Where a limiter keeps what the store decides: its policy and the kill switch. */
export interface LiveState {
  setPolicy(policy: CompiledPolicy): void;
  readonly enforcing: boolean;
  setEnforcing(on: boolean): void;
}

/**
 * With Redis, the live policy and the kill switch come from the store (P4). The stored policy wins
 * over the one the node started with (that is only the bootstrap), then only a newer stored version
 * replaces it.
 */
export function followStore(redis: RedisConnectionOptions, shared: SharedRedis, state: LiveState, logger: Logger): PolicyFeed {
  let stored: StoredVersion | undefined;
  const secret = redis.policySecret ?? redis.busSecret;
  return new PolicyFeed(
    shared,
    redis.prefix,
    new StoreSigner(secret.versions, secret.current),
    {
      inForce: () => stored,
      apply: (p, version) => {
        state.setPolicy(p);
        stored = version;
        logger.info({ version: p.version }, 'live policy applied');
      },
      enforce: (on) => {
        if (on === state.enforcing) return;
        state.setEnforcing(on);
        logger.warn({ enforcing: on }, on ? 'kill switch: enforcement back on' : 'kill switch: enforcement OFF fleet-wide');
      },
    },
    logger,
  );
}

import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { joinFleet } from '../../bus/member.js';
import type { RedisConnectionOptions } from '../../bus/redis-options.js';
import { RedisBus } from '../../bus/redis.js';
import { StoreSigner } from '../../bus/store-signature.js';
import { systemClock } from '../../lib/clock.js';
import type { FoldOwner } from '../../lib/fold-owner.js';
import type { LeaseNode } from '../../lib/lease-node.js';
import { compilePolicy, type ResolvedLimits } from '../../lib/policy.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import type { RateLimiterOptions } from '../../middleware/options.js';
import { demoPolicy, TEST_KEY_HASH } from './fixtures.js';
import { captureLogger } from './logs.js';
import { waitFor } from './wait.js';

export const BUS_SECRET = { versions: [{ version: 'b1', secret: 'integration-bus-secret' }] };
/** What the admin side signs the policy store with: the bus secret, as the limiters' default `policySecret`. */
export const POLICY_SIGNER = new StoreSigner(BUS_SECRET.versions);
export const SHARDS = 8;
export const ROUND_MS = 25;

/** One fleet member over Redis, in this process: node, owner, bus and its round timer. */
export interface Member {
  readonly nodeId: string;
  readonly nodeEpoch: string;
  readonly bus: RedisBus;
  readonly node: LeaseNode;
  readonly owner: FoldOwner;
  /** Leaves cleanly (hands shards over); idempotent. */
  stop(): Promise<void>;
  /** Stops (false) or restarts (true) its rounds: no heartbeats, reports or renewals meanwhile. */
  rounds(on: boolean): void;
}

/**
 * Joins the Redis at `url` (or the Redis Cluster with these seed URLs) under `prefix` as `nodeId`,
 * driving rounds every 25 ms like the middleware does.
 */
export function joinRedisFleet(url: string | string[], prefix: string, nodeId: string, degradedAfterMs = 30_000, extra: Partial<RedisConnectionOptions> = {}): Member {
  const where = typeof url === 'string' ? { url } : { clusterNodes: url };
  const bus = new RedisBus({ ...where, ...extra, prefix, busSecret: BUS_SECRET, shards: SHARDS, roundMs: ROUND_MS, degradedAfterMs, snapshotMs: 200 });
  const nodeEpoch = randomUUID();
  const { node, owner } = joinFleet(
    bus,
    { nodeId, nodeEpoch, shards: SHARDS, maxBuckets: 10_000, roundMs: ROUND_MS, fastPathDeadlineMs: 1, headroom: 1.25, reserveRatio: 0.02, degradedAfterMs },
    systemClock,
  );
  const tick = (): void => {
    node.endRound();
    owner.sweep(Date.now());
  };
  let timer: NodeJS.Timeout | undefined = setInterval(tick, ROUND_MS);
  let stopped: Promise<void> | undefined;
  return {
    nodeId,
    nodeEpoch,
    bus,
    node,
    owner,
    stop: () =>
      (stopped ??= (async () => {
        clearInterval(timer);
        await bus.close();
      })()),
    rounds: (on) => {
      clearInterval(timer);
      timer = on && stopped === undefined ? setInterval(tick, ROUND_MS) : undefined;
    },
  };
}

/** `m` as if a member of an older release were in its fleet: its owner side writes and uses no blankets. */
export function withoutBlankets(m: Member): Member {
  const fleet = (m.bus as unknown as { fleet: { counts: (what: string) => boolean } }).fleet;
  const counts = fleet.counts.bind(fleet);
  fleet.counts = (what) => what !== 'blankets' && counts(what);
  return m;
}

/**
 * `m` whose owner side keeps no floats (nor, so, blankets): every grant it issues waits for its own log
 * write, and it writes nothing to a shard's log but grants asked for.
 */
export function withoutFloats(m: Member): Member {
  m.owner.refillFloats = () => [];
  return m;
}

/** Polls `check` every 10 ms until it holds; throws with `what` after `ms` (`waitFor`, positionally). */
export function until(check: () => boolean | Promise<boolean>, what: string, ms = 5000): Promise<void> {
  return waitFor(check, { what, timeoutMs: ms });
}

/** A plan of one window: `limit` per `windowMs`. */
export function limits(limit: number, windowMs = 60_000): ResolvedLimits {
  const p = compilePolicy({ version: 1, plans: { p: { windows: [{ name: 'w', windowMs, limit }] } }, defaultPlan: 'p', anonymousPlan: 'p' });
  return p.limitsFor('v1:AAAAAAAAAAAAAAAAAAAAAA', 't');
}

/** A plain client for poking at the bus's keys. */
export function client(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: 1 });
}

/**
 * A limiter on the demo policy that joins the Redis at `url` under `prefix` as `nodeId`, every request
 * from `principal` (tenant acme); `extra` overrides any option.
 */
export function redisLimiter(url: string, prefix: string, nodeId: string, principal: string, extra: Partial<RateLimiterOptions> = {}): RateLimiterMiddleware {
  return rateLimiter({
    policy: demoPolicy(),
    identify: () => ({ principal, tenant: 'acme' }),
    keyHash: TEST_KEY_HASH,
    nodeId,
    logger: captureLogger().logger,
    redis: { url, prefix, busSecret: BUS_SECRET },
    ...extra,
  });
}

/** A suite's private redis-server, a client on it, this test's key prefix, and a way to join. */
export interface FleetSuite {
  readonly redis: RedisProcess;
  readonly raw: Redis;
  /** A fresh prefix for each test, so no test sees another's keys. */
  readonly prefix: string;
  /** Joins as `nodeId` under this test's prefix; stopped after the test. */
  join(nodeId: string, degradedAfterMs?: number, extra?: Partial<RedisConnectionOptions>): Member;
}

/**
 * Registers the hooks of a suite of fleet members in this process over one private redis-server:
 * started before the suite, a new prefix (`tag` + a counter) for each test, every member stopped
 * after it, the server stopped at the end.
 */
export function fleetSuite(tag: string): FleetSuite {
  let redis: RedisProcess | undefined;
  let raw: Redis | undefined;
  let prefix = '';
  let n = 0;
  const members: Member[] = [];
  before(async () => {
    redis = await startRedis();
    raw = client(redis.url);
  });
  beforeEach(() => {
    prefix = `${tag}${++n}`;
  });
  afterEach(async () => {
    await Promise.all(members.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    raw?.disconnect();
    await redis?.stop();
  });
  return {
    get redis() {
      return redis!;
    },
    get raw() {
      return raw!;
    },
    get prefix() {
      return prefix;
    },
    join(nodeId, degradedAfterMs, extra) {
      const m = joinRedisFleet(redis!.url, prefix, nodeId, degradedAfterMs, extra);
      members.push(m);
      return m;
    },
  };
}

/** The window id and shard of `keyId`'s current window of `windowMs`. */
export function placeOf(keyId: string, windowMs = 60_000): { windowId: number; shard: number } {
  const windowId = windowIdAt(Date.now(), windowMs, phaseOffset(keyId, windowMs));
  return { windowId, shard: shardOf(keyId, windowId, SHARDS) };
}

/**
 * Milliseconds left in `keyId`'s current window of `windowMs`. A test that counts admissions against
 * one window's allowance picks a key with time to spare: past the window's end the key moves to
 * another shard with a fresh allowance, and the count would mix two windows.
 */
export function windowLeftMs(keyId: string, windowMs = 60_000): number {
  const offset = phaseOffset(keyId, windowMs);
  return windowEndMs(windowIdAt(Date.now(), windowMs, offset), windowMs, offset) - Date.now();
}

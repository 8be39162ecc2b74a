/** Public API of the rate limiter. */
export { rateLimiter, type RateLimiterMiddleware, type LimiterStats } from './middleware/rate-limiter.js';
export { backstop, type BackstopOptions } from './middleware/backstop.js';
export { metricsHandler } from './middleware/metrics.js';
export type { RateLimiterOptions, Identity } from './middleware/options.js';
export type { RateLimitInfo, LimitedInfo } from './middleware/quota.js';
export type { SkipFn, OnLimited } from './middleware/hooks.js';
export {
  compilePolicy,
  CompiledPolicy,
  type PolicyDoc,
  type PlanDef,
  type Allocation,
  type WindowDef,
  type WindowSpec,
  type TenantDef,
  type KeyOverrideDef,
  type RouteClassDef,
  type CapacityDef,
  type ResolvedLimits,
} from './lib/policy.js';
export { definePolicy, type PolicyInput, type PlanInput, type RouteClassInput } from './lib/define-policy.js';
export { KeyHasher, type HashKeyVersion } from './lib/key-id.js';
export { Catalog, PROBLEM_QUOTA_EXCEEDED, PROBLEM_REDUCED_CAPACITY, type CatalogEntry, type ProblemBody } from './lib/catalog.js';
export type { SubSecondMode, RetryHeaders } from './lib/retry-after.js';
export { ConfigError, PolicyError, RateLimiterError, ValidationError, ErrorCode, WarningCode, type ErrorCodeValue, type Problem } from './lib/errors.js';
export { systemClock, FakeClock, type Clock } from './lib/clock.js';
export type { Logger } from './lib/logger.js';
export type { LeaseNode } from './lib/lease-node.js';
export type { LocalCounters } from './lib/local-counters.js';
export type { Enforcer, WindowQuota } from './lib/node-contract.js';
export { MemoryBus } from './bus/memory.js';
export { RedisBus, type RedisBusOptions, type RedisBusStats } from './bus/redis.js';
export type { RedisConnectionOptions } from './bus/redis-options.js';
export type { BusSecretVersion } from './bus/codec.js';
export type { Bus, CreditOwner, NodeIdentity } from './bus/types.js';
export type { LimitClass, LimitEvent, LimitEventOptions, LimitEventSink, LimitEventStats, LimitRefusal } from './bus/limit-event.js';

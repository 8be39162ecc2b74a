/** Public API of the rate limiter. */
export { rateLimiter, type RateLimiterMiddleware, type LimiterStats } from './middleware/rate-limiter.js';
export { backstop, type BackstopOptions } from './middleware/backstop.js';
export { metricsHandler } from './middleware/metrics.js';
export type { RateLimiterOptions, Identity } from './middleware/options.js';
export type { RateLimitInfo, LimitedInfo } from './middleware/quota.js';
export type { SkipFn, OnLimited } from './middleware/hooks.js';
export { compilePolicy, CompiledPolicy, type PolicyDoc, type PlanDef, type WindowDef } from './lib/policy.js';
export { KeyHasher, type HashKeyVersion } from './lib/key-id.js';
export { Catalog } from './lib/catalog.js';
export { ConfigError, PolicyError, RateLimiterError, ErrorCode, WarningCode } from './lib/errors.js';
export { systemClock, FakeClock, type Clock } from './lib/clock.js';
export { MemoryBus } from './bus/memory.js';
export { RedisBus, type RedisBusStats } from './bus/redis.js';
export type { RedisConnectionOptions } from './bus/redis-connection.js';
export type { BusSecretVersion } from './bus/codec.js';
export type { Bus, CreditOwner } from './bus/types.js';

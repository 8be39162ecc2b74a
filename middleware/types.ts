import type { RequestHandler } from 'express';
import type { Registry } from 'prom-client';
import type { LimitEventSink } from '../bus/limit-event.js';
import type { Bus } from '../bus/types.js';
import type { KeyHasher } from '../lib/key-id.js';
import type { Enforcer } from '../lib/node-contract.js';
import type { CompiledPolicy, PolicyDoc } from '../lib/policy.js';

/** Counters of one limiter instance. */
export interface LimiterStats {
  admitted: number;
  quotaDenied: number;
  capacityDenied: number;
  failOpen: number;
  failClosed: number;
  /** Admitted unchecked while the kill switch has enforcement off. */
  bypassed: number;
  /** Let through by the `skip` option: neither counted nor refused. */
  skipped: number;
  /** Would-be refusals admitted because the plan or route class is in shadow mode. */
  shadowDenied: number;
  /** Refusals the plan run beside the enforced one (a dual run) would have made. */
  dualRunDenied: number;
}

/** The Express middleware returned by `rateLimiter()`, with its handles. */
export interface RateLimiterMiddleware extends RequestHandler {
  /**
   * The decision side: in a fleet the node side of the protocol (`LeaseNode`: leased credit, the fast
   * path, rounds); in a fleet of one (no `redis`, no `bus`) a count per key and window (`LocalCounters`).
   */
  readonly node: Enforcer;
  /** Key hashing; use it to find a key's id (the raw key is never kept). */
  readonly hasher: KeyHasher;
  /** Decision counters. */
  readonly stats: Readonly<LimiterStats>;
  /**
   * Prometheus metrics (O1), each series labelled `node`: the `registry` option, else a registry of
   * its own. Every open limiter of the process shares the metric objects, so the registries merge and
   * each serves them all. Serve it with `metricsHandler(limiter.metrics)`.
   */
  readonly metrics: Registry;
  /** This limiter's node id (its name in the fleet, the logs and the metrics' `node` label). */
  readonly nodeId: string;
  /** The policy in force. */
  policy(): CompiledPolicy;
  /** False while the kill switch has enforcement off fleet-wide (with `redis`). */
  readonly enforcing: boolean;
  /** Limit events (with `redis`): 429s and 503s aggregated per key id and window, written to Redis off the request path. */
  readonly events: LimitEventSink | undefined;
  /**
   * Replaces the policy without a restart. Throws a `PolicyError` for an invalid document and a
   * `PolicyError` naming `version` for a version not above the current one; either way nothing changes.
   */
  updatePolicy(doc: PolicyDoc | CompiledPolicy): void;
  /** The bus between this node and the shard owners; undefined in a fleet of one. */
  readonly bus: Bus | undefined;
  /**
   * Settles once every shard has a reachable owner (at once in memory; with `redis`, after the first
   * control rounds). Start accepting traffic after it: until then first sights of keys are denied.
   */
  ready(): Promise<void>;
  /** Stops the round timer and the bus it created (leaving the fleet cleanly); idempotent. */
  close(): Promise<void>;
}

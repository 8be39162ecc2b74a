import Joi from 'joi';
import { PolicyError, type Problem } from './errors.js';
import { crossCheck, maskKeyPaths } from './policy-rules.js';
import { joiProblems } from './validate.js';

/** One fixed window of a plan: at most `limit` requests per `windowMs`. */
export interface WindowDef {
  readonly name: string;
  readonly limit: number;
  readonly windowMs: number;
}

/**
 * How a plan or route class treats a refusal: `enforce` (429) or `shadow` (every decision computed,
 * a would-be refusal counted in metrics and events, and the request admitted).
 */
export type LimitMode = 'enforce' | 'shadow';

/**
 * How a window's allowance reaches the nodes: `leasing` (credit granted on demand and moved to where
 * requests are) or `fixed-share` (every node gets ⌊allowance / fleet⌋, issued by the window's owner,
 * plus the reserve through the fast path; nothing moves between nodes). Fixed share is the simpler
 * design, as accurate only while each key's traffic is evenly spread over the nodes (`npm run
 * concentration` measures it).
 */
export type Allocation = 'leasing' | 'fixed-share';

/** A plan: a named set of windows a request needs credit in, all or none. */
export interface PlanDef {
  readonly windows: readonly WindowDef[];
  readonly mode?: LimitMode;
  /** How its windows' credit reaches the nodes; the document's `allocation` when absent. */
  readonly allocation?: Allocation;
  /**
   * Another plan run beside this one in shadow (a dual run): its decisions are computed on counts of
   * their own and its refusals counted, while this plan's are enforced.
   */
  readonly shadow?: string;
}

/** Per-tenant profile: the plan its keys get by default and its share of shared capacity. */
export interface TenantDef {
  readonly plan?: string;
  /** Largest fraction (0–1] of a node's admission capacity this tenant may take per second. */
  readonly share?: number;
}

/** Per-key override, keyed by key id (`v1:…`): another plan or explicit windows. */
export interface KeyOverrideDef {
  readonly plan?: string;
  readonly windows?: readonly WindowDef[];
}

/** Route class: how a group of routes fails and which plan anonymous callers get there. */
export interface RouteClassDef {
  /** `open` admits on a limiter fault (counted, logged); `closed` answers 503. */
  readonly failMode?: 'open' | 'closed';
  /** Plan for callers without identity on this route class (defaults to `anonymousPlan`). */
  readonly plan?: string;
  /** `shadow`: refusals on this route class are counted, not enforced, whatever the plan's mode. */
  readonly mode?: LimitMode;
}

/** Shared admission capacity of one node, split between tenants (tenant fairness). */
export interface CapacityDef {
  /** Admissions per second one node accepts across all tenants; beyond it, 503 capacity class. */
  readonly nodeAdmissionsPerSecond: number;
  /** Default largest fraction of that capacity one tenant may take. */
  readonly tenantShare: number;
}

/** The policy document as written by an operator (JSON), validated by `compilePolicy`. */
export interface PolicyDoc {
  /** Monotonic document version; a node only moves to a higher one. */
  readonly version: number;
  readonly plans: Readonly<Record<string, PlanDef>>;
  readonly defaultPlan: string;
  readonly anonymousPlan: string;
  readonly tenants?: Readonly<Record<string, TenantDef>>;
  readonly keys?: Readonly<Record<string, KeyOverrideDef>>;
  readonly routeClasses?: Readonly<Record<string, RouteClassDef>>;
  readonly capacity?: CapacityDef;
  /** Allocation of every plan that sets none, and of per-key windows (default `leasing`). */
  readonly allocation?: Allocation;
}

/** A compiled window: the definition plus the index it has in its plan. */
export interface WindowSpec extends WindowDef {
  readonly index: number;
}

/** Limits resolved for one request: shared, frozen objects built once per policy version. */
export interface ResolvedLimits {
  /** `plan:<name>` or `key:<key id>`; buckets are rebuilt when it changes. */
  readonly id: string;
  readonly windows: readonly WindowSpec[];
  /** Precomputed `RateLimit-Policy` value (draft-ietf-httpapi-ratelimit-headers-10). */
  readonly policyHeader: string;
  /** True in shadow mode: a refusal is counted and the request admitted. */
  readonly shadow: boolean;
  /** The plan run beside these limits in shadow (a dual run), with counts of its own. */
  readonly beside: ResolvedLimits | undefined;
  /** True under `allocation: fixed-share`: owners issue each node a fixed share, nodes keep it. */
  readonly fixedShare: boolean;
}

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const DAY_MS = 86_400_000;

const windowSchema = Joi.object({
  name: Joi.string().pattern(NAME).required(),
  limit: Joi.number().integer().min(1).max(1_000_000_000).required(),
  windowMs: Joi.number()
    .integer()
    .min(1000)
    .max(31 * DAY_MS)
    .required(),
});
const windowsSchema = Joi.array().items(windowSchema).min(1).max(8).unique('name');
/** Names a plan or route class may not take: they are Object.prototype's (`__proto__`, `constructor` …). */
export const RESERVED_NAMES: readonly string[] = Object.freeze(Object.getOwnPropertyNames(Object.prototype));
const nameKeys = Joi.string()
  .pattern(NAME)
  .invalid(...RESERVED_NAMES);
const mode = Joi.string().valid('enforce', 'shadow').messages({ 'any.only': '{{#label}} must be "enforce" or "shadow" (a fixed share of credit per node is "allocation": "fixed-share")' });
const allocation = Joi.string().valid('leasing', 'fixed-share').messages({ 'any.only': '{{#label}} must be "leasing" or "fixed-share"' });

/** joi schema of a policy document (cross-references are checked after it). */
const policySchema = Joi.object({
  version: Joi.number().integer().min(1).required(),
  plans: Joi.object()
    .pattern(nameKeys, Joi.object({ windows: windowsSchema.required(), mode, allocation, shadow: Joi.string().pattern(NAME) }))
    .min(1)
    .required(),
  defaultPlan: Joi.string().pattern(NAME).required(),
  anonymousPlan: Joi.string().pattern(NAME).required(),
  tenants: Joi.object().pattern(
    Joi.string()
      .min(1)
      .max(128)
      .invalid(...RESERVED_NAMES),
    Joi.object({ plan: Joi.string().pattern(NAME), share: Joi.number().greater(0).max(1) }),
  ),
  keys: Joi.object().pattern(Joi.string(), Joi.object({ plan: Joi.string().pattern(NAME), windows: windowsSchema }).xor('plan', 'windows')),
  routeClasses: Joi.object().pattern(nameKeys, Joi.object({ failMode: Joi.string().valid('open', 'closed'), plan: Joi.string().pattern(NAME), mode })),
  capacity: Joi.object({
    nodeAdmissionsPerSecond: Joi.number().integer().min(1).required(),
    tenantShare: Joi.number().greater(0).max(1).required(),
  }),
  allocation,
});

/** A validated policy, ready for the decision path. Immutable. */
export class CompiledPolicy {
  readonly version: number;
  readonly doc: PolicyDoc;
  private readonly plans = new Map<string, ResolvedLimits>();
  private readonly keyLimits = new Map<string, ResolvedLimits>();
  private readonly tenantPlans = new Map<string, ResolvedLimits>();
  private readonly tenantShares = new Map<string, number>();
  private readonly routeFailClosed = new Set<string>();
  private readonly routeShadow = new Set<string>();
  private readonly routeAnonymous = new Map<string, ResolvedLimits>();
  private readonly defaultLimits: ResolvedLimits;
  private readonly anonymousLimits: ResolvedLimits;

  constructor(doc: PolicyDoc) {
    this.doc = doc;
    this.version = doc.version;
    const fixed = (plan?: PlanDef): boolean => (plan?.allocation ?? doc.allocation) === 'fixed-share';
    for (const [name, plan] of Object.entries(doc.plans)) {
      const other = plan.shadow === undefined ? undefined : doc.plans[plan.shadow];
      const beside = other === undefined ? undefined : compileLimits(`dual:${name}:${plan.shadow!}`, other.windows, true, undefined, fixed(other));
      this.plans.set(name, compileLimits(`plan:${name}`, plan.windows, plan.mode === 'shadow', beside, fixed(plan)));
    }
    for (const [keyId, o] of Object.entries(doc.keys ?? {})) {
      this.keyLimits.set(keyId, o.plan !== undefined ? this.plan(o.plan) : compileLimits(`key:${keyId}`, o.windows ?? [], false, undefined, fixed()));
    }
    for (const [tenant, t] of Object.entries(doc.tenants ?? {})) {
      if (t.plan !== undefined) this.tenantPlans.set(tenant, this.plan(t.plan));
      if (t.share !== undefined) this.tenantShares.set(tenant, t.share);
    }
    this.defaultLimits = this.plan(doc.defaultPlan);
    this.anonymousLimits = this.plan(doc.anonymousPlan);
    for (const [name, rc] of Object.entries(doc.routeClasses ?? {})) {
      if (rc.failMode === 'closed') this.routeFailClosed.add(name);
      if (rc.mode === 'shadow') this.routeShadow.add(name);
      if (rc.plan !== undefined) this.routeAnonymous.set(name, this.plan(rc.plan));
    }
    Object.freeze(this);
  }

  /** Limits for an authenticated caller: key override, else tenant plan, else the default plan. */
  limitsFor(keyId: string, tenant: string | undefined): ResolvedLimits {
    return this.keyLimits.get(keyId) ?? (tenant === undefined ? undefined : this.tenantPlans.get(tenant)) ?? this.defaultLimits;
  }

  /** Limits for a caller without identity on `routeClass`. */
  anonymousLimitsFor(routeClass: string): ResolvedLimits {
    return this.routeAnonymous.get(routeClass) ?? this.anonymousLimits;
  }

  /** Whether a limiter fault on `routeClass` answers 503 instead of admitting. */
  failClosed(routeClass: string): boolean {
    return this.routeFailClosed.has(routeClass);
  }

  /** Whether refusals on `routeClass` are counted instead of enforced. */
  shadowRoute(routeClass: string): boolean {
    return this.routeShadow.size !== 0 && this.routeShadow.has(routeClass);
  }

  /** The tenant's largest share of node admission capacity, or undefined if capacity is unlimited. */
  tenantShare(tenant: string): number | undefined {
    const cap = this.doc.capacity;
    if (cap === undefined) return undefined;
    return this.tenantShares.get(tenant) ?? cap.tenantShare;
  }

  private plan(name: string): ResolvedLimits {
    return this.plans.get(name) as ResolvedLimits;
  }
}

function compileLimits(id: string, defs: readonly WindowDef[], shadow = false, beside?: ResolvedLimits, fixedShare = false): ResolvedLimits {
  const windows = defs.map((w, index) => Object.freeze({ name: w.name, limit: w.limit, windowMs: w.windowMs, index }));
  const policyHeader = windows.map((w) => `"${w.name}";q=${w.limit};w=${Math.ceil(w.windowMs / 1000)}`).join(', ');
  return Object.freeze({ id, windows: Object.freeze(windows), policyHeader, shadow, beside, fixedShare });
}

/**
 * Validates a policy document and compiles it. Throws a `PolicyError` listing every problem (schema
 * and cross-references: unknown plans, windows that can never bind); nothing is partly applied.
 */
export function compilePolicy(input: unknown): CompiledPolicy {
  const { error, value } = policySchema.validate(input, { abortEarly: false, convert: false });
  const problems: Problem[] = error ? joiProblems(error) : [];
  // Cross-references are checked even when the schema failed, so one pass reports everything.
  const doc = (error ? input : value) as Partial<PolicyDoc> | null;
  if (doc !== null && typeof doc === 'object') crossCheck(doc, problems, input as Partial<PolicyDoc>);
  if (problems.length) throw new PolicyError(maskKeyPaths(problems, doc));
  return new CompiledPolicy(deepFreeze(structuredClone(value as PolicyDoc)));
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

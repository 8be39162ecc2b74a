import { compilePolicy, type PlanDef, type PolicyDoc, type RouteClassDef } from './policy.js';

/** A route class as a JSON import types it: `failMode` is any string until it is checked. */
export interface RouteClassInput extends Omit<RouteClassDef, 'failMode'> {
  /** `open` or `closed`; anything else is a `PolicyError` naming this field. */
  readonly failMode?: string;
}

/**
 * A policy document as TypeScript types one imported from JSON (`resolveJsonModule` widens string
 * literals to `string`): the shape of `PolicyDoc`, with the literal-typed fields widened.
 */
export interface PolicyInput extends Omit<PolicyDoc, 'routeClasses' | 'plans' | 'allocation'> {
  readonly plans: Readonly<Record<string, PlanInput>>;
  readonly routeClasses?: Readonly<Record<string, RouteClassInput>>;
  /** `leasing` or `fixed-share`; anything else is a `PolicyError` naming this field. */
  readonly allocation?: string;
}

/** A plan as a JSON import types it: `mode` and `allocation` are any string until they are checked. */
export interface PlanInput extends Omit<PlanDef, 'mode' | 'allocation'> {
  readonly mode?: string;
  readonly allocation?: string;
}

/**
 * Checks a policy document and returns it typed as a `PolicyDoc`, so a policy imported from a JSON
 * file needs no cast: `rateLimiter({ policy: definePolicy(policyJson), … })`. What the type cannot
 * say is checked here, at once: an invalid document throws a `PolicyError` (code `RL_POLICY`) whose
 * `problems` name every bad field. The result is a frozen copy; the input is not changed.
 */
export function definePolicy(input: PolicyInput): PolicyDoc {
  return compilePolicy(input).doc;
}

import { compilePolicy, type PolicyDoc, type RouteClassDef } from './policy.js';

/** A route class as a JSON import types it: `failMode` is any string until it is checked. */
export interface RouteClassInput extends Omit<RouteClassDef, 'failMode'> {
  /** `open` or `closed`; anything else is a `PolicyError` naming this field. */
  readonly failMode?: string;
}

/**
 * A policy document as TypeScript types one imported from JSON (`resolveJsonModule` widens string
 * literals to `string`): the shape of `PolicyDoc`, with the literal-typed fields widened.
 */
export interface PolicyInput extends Omit<PolicyDoc, 'routeClasses'> {
  readonly routeClasses?: Readonly<Record<string, RouteClassInput>>;
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

import type { Problem } from './errors.js';
import { KEY_ID_PATTERN } from './key-id.js';
import type { KeyOverrideDef, PlanDef, PolicyDoc, RouteClassDef, TenantDef, WindowDef } from './policy.js';

// What a policy document must satisfy beyond its joi schema: references between its parts, and
// windows that can bind. Checked on the raw document too, so one pass reports every problem.

/** Checks what joi cannot: plan references, key-id shaped override keys, windows that never bind. */
export function crossCheck(doc: Partial<PolicyDoc>, problems: Problem[], raw: Partial<PolicyDoc>): void {
  const plans = isRecord(doc.plans) ? doc.plans : {};
  // joi's copy of a document drops an own `__proto__` key (it sets the prototype instead), so its
  // schema never sees one; the raw document is checked here.
  for (const field of ['plans', 'tenants', 'routeClasses'] as const) {
    const o = raw[field];
    if (isRecord(o) && Object.hasOwn(o, '__proto__')) problems.push({ path: `${field}.__proto__`, message: 'is a reserved name' });
  }
  const known = (name: unknown, path: string): void => {
    if (typeof name === 'string' && !Object.hasOwn(plans, name)) problems.push({ path, message: `unknown plan "${name}"` });
  };
  known(doc.defaultPlan, 'defaultPlan');
  known(doc.anonymousPlan, 'anonymousPlan');
  for (const [t, def] of entries<TenantDef>(doc.tenants)) known(def?.plan, `tenants.${t}.plan`);
  for (const [k, def] of entries<KeyOverrideDef>(doc.keys)) {
    // The offending name is not echoed: it may be a raw key pasted by mistake.
    if (!KEY_ID_PATTERN.test(k)) problems.push({ path: 'keys', message: 'overrides must be keyed by key id (v1:…), never by raw key' });
    known(def?.plan, `keys.${k}.plan`);
    if (Array.isArray(def?.windows)) checkWindowOrder(def.windows, `keys.${k}.windows`, problems);
  }
  for (const [r, def] of entries<RouteClassDef>(doc.routeClasses)) known(def?.plan, `routeClasses.${r}.plan`);
  for (const [p, def] of entries<PlanDef>(plans)) {
    if (Array.isArray(def?.windows)) checkWindowOrder(def.windows, `plans.${p}.windows`, problems);
    known(def?.shadow, `plans.${p}.shadow`);
    if (def?.shadow === p) problems.push({ path: `plans.${p}.shadow`, message: 'must name another plan' });
  }
}

/**
 * An override keyed by something that is not a key id may be a raw API key pasted by mistake: error
 * paths name it by position (`keys[2]`), never by the key itself.
 */
export function maskKeyPaths(problems: Problem[], doc: Partial<PolicyDoc> | null): Problem[] {
  const names = isRecord(doc?.keys) ? Object.keys(doc.keys) : [];
  return problems.map((p) => {
    for (const [i, name] of names.entries()) {
      if (!KEY_ID_PATTERN.test(name) && (p.path === `keys.${name}` || p.path.startsWith(`keys.${name}.`))) {
        return { path: `keys[${i}]${p.path.slice(`keys.${name}`.length)}`, message: p.message.split(name).join(`keys[${i}]`) };
      }
    }
    return p;
  });
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function entries<T>(v: unknown): Array<[string, T | undefined]> {
  return isRecord(v) ? (Object.entries(v) as Array<[string, T | undefined]>) : [];
}

/**
 * A longer window with a smaller limit than a shorter one makes the shorter one unreachable: the
 * operator almost certainly swapped two numbers, so it is rejected rather than silently ignored.
 */
function checkWindowOrder(windows: readonly WindowDef[], path: string, problems: Problem[]): void {
  const valid = windows.filter((w) => Number.isFinite(w?.windowMs) && Number.isFinite(w?.limit));
  for (const a of valid) {
    for (const b of valid) {
      if (a !== b && a.windowMs === b.windowMs && a.name < b.name) {
        problems.push({ path, message: `windows "${a.name}" and "${b.name}" have the same length; keep the one that binds` });
      }
      if (a.windowMs > b.windowMs && a.limit < b.limit) {
        problems.push({
          path,
          message: `window "${a.name}" (${a.limit} per ${a.windowMs} ms) is longer than "${b.name}" but allows fewer requests (${b.limit}), so "${b.name}" can never bind`,
        });
      }
    }
  }
}

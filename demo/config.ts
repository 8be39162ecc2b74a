import { readFileSync } from 'node:fs';
import Joi from 'joi';
import { ConfigError, PolicyError } from '../lib/errors.js';
import type { KeyHasher } from '../lib/key-id.js';
import { compilePolicy, type CompiledPolicy, type PolicyDoc } from '../lib/policy.js';
import { joiProblems } from '../lib/validate.js';

/** A demo API key: which tenant it belongs to and which plan it gets. */
export interface DemoKey {
  readonly tenant: string;
  readonly plan: string;
}

/** The demo gateway's configuration file: its key table, the limiter policy and the backstop. */
export interface DemoConfigFile {
  readonly demoKeys: Readonly<Record<string, DemoKey>>;
  readonly policy: PolicyDoc;
  readonly backstop: { perKeyLimit: number; perKeyWindowMs: number; nodeCeilingPerSecond: number };
}

/** The file after validation: the policy compiled with each demo key's plan under its key id. */
export interface DemoConfig {
  readonly keys: ReadonlyMap<string, DemoKey>;
  readonly policy: CompiledPolicy;
  readonly backstop: DemoConfigFile['backstop'];
}

const fileSchema = Joi.object({
  demoKeys: Joi.object()
    .pattern(Joi.string().min(8).max(256), Joi.object({ tenant: Joi.string().min(1).max(128).required(), plan: Joi.string().required() }))
    .min(1)
    .required(),
  policy: Joi.object().required(),
  backstop: Joi.object({
    perKeyLimit: Joi.number().integer().min(1).required(),
    perKeyWindowMs: Joi.number().integer().min(100).required(),
    nodeCeilingPerSecond: Joi.number().integer().min(1).required(),
  }).required(),
});

/**
 * Validates the demo configuration. Demo keys are hashed on load, as the admin API does with keys it is
 * given: the compiled policy only knows key ids. Throws a `ConfigError` naming every bad field.
 */
export function parseDemoConfig(input: unknown, hasher: KeyHasher): DemoConfig {
  const { error, value } = fileSchema.validate(input, { abortEarly: false });
  // Demo keys are API keys: errors name them by position, never by the key.
  const names = Object.keys((input as { demoKeys?: object } | null)?.demoKeys ?? {});
  const mask = (path: string): string => {
    const i = names.findIndex((n) => path === `demoKeys.${n}` || path.startsWith(`demoKeys.${n}.`));
    return i < 0 ? path : `demoKeys[${i}]${path.slice(`demoKeys.${names[i]}`.length)}`;
  };
  if (error)
    throw new ConfigError(
      joiProblems(error).map((p) => ({ path: mask(p.path), message: p.message })),
      'invalid demo configuration',
    );
  const file = value as DemoConfigFile;
  const plans = (file.policy as { plans?: Record<string, unknown> }).plans ?? {};
  const problems = Object.entries(file.demoKeys)
    .filter(([, k]) => !Object.hasOwn(plans, k.plan))
    .map(([name, k]) => ({ path: mask(`demoKeys.${name}.plan`), message: `unknown plan "${k.plan}"` }));
  const keys = { ...(file.policy.keys ?? {}) };
  for (const [raw, k] of Object.entries(file.demoKeys)) keys[hasher.hash(raw)] = { plan: k.plan };
  let policy: CompiledPolicy | undefined;
  try {
    policy = compilePolicy({ ...file.policy, keys });
  } catch (err) {
    if (!(err instanceof PolicyError)) throw err;
    problems.push(...err.problems.map((p) => ({ path: `policy.${p.path}`, message: p.message })));
  }
  if (problems.length || policy === undefined) throw new ConfigError(problems, 'invalid demo configuration');
  return { keys: new Map(Object.entries(file.demoKeys)), policy, backstop: file.backstop };
}

/** Reads and validates a demo configuration file. */
export function loadDemoConfig(path: string, hasher: KeyHasher): DemoConfig {
  let input: unknown;
  try {
    input = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ConfigError([{ path, message: `cannot read as JSON: ${(err as Error).message}` }], 'invalid demo configuration');
  }
  return parseDemoConfig(input, hasher);
}

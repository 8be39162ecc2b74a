import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parse } from 'yaml';

/**
 * `node dist/scripts/compose-service.js --service NAME --write-env PATH [--set NAME=VALUE …]`: what
 * `docker compose up` would give one service of docker-compose.yml, for running the image without
 * Docker (`scripts/image-check.sh`). Writes the service's environment to PATH (`NAME=VALUE` lines,
 * mode 600: it holds secrets), with `${VAR}`, `${VAR:?message}` and `${VAR:-default}` taken from this
 * process's environment as compose takes them from `.env`; `--set` replaces a variable the service
 * sets (its network addresses, which differ outside compose's network) and refuses one it does not
 * set, so a renamed variable in the compose file fails here rather than going unnoticed. Prints the
 * service's `command`, one word a line (nothing when it runs the image's own CMD).
 */

const USAGE = 'usage: compose-service --service NAME --write-env PATH [--file docker-compose.yml] [--set NAME=VALUE ...]';

/** The part of a compose service this reads. */
interface Service {
  command?: string[] | string;
  environment?: Record<string, string | number | boolean | null> | string[];
}

function fail(message: string): never {
  process.stderr.write(`compose-service: ${message}\n${USAGE}\n`);
  process.exit(2);
}

/** `text` with compose's variable references replaced from `env`; throws naming the first it cannot fill. */
function interpolate(text: string, env: NodeJS.ProcessEnv, where: string): string {
  return text.replace(/\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[?-])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))/g, (whole, _body, braced?: string, op?: string, arg?: string, bare?: string) => {
    if (whole === '$$') return '$';
    const name = (braced ?? bare)!;
    const value = env[name];
    const unset = value === undefined || (op?.startsWith(':') === true && value === '');
    if (!unset) return value!;
    if (op === '?' || op === ':?') throw new Error(`${where}: ${name} is not set: ${arg || 'required'}`);
    if (op === '-' || op === ':-') return arg ?? '';
    return '';
  });
}

/** A service's environment as `[name, value]` pairs, in the file's order, interpolated. */
function serviceEnvironment(svc: Service, env: NodeJS.ProcessEnv, where: string): Array<[string, string]> {
  const raw = svc.environment ?? {};
  const pairs: Array<[string, string]> = Array.isArray(raw)
    ? raw.map((line) => {
        const i = line.indexOf('=');
        return i < 0 ? [line, env[line] ?? ''] : [line.slice(0, i), line.slice(i + 1)];
      })
    : Object.entries(raw).map(([k, v]) => [k, v === null ? (env[k] ?? '') : String(v)]);
  return pairs.map(([k, v]) => [k, interpolate(v, env, `${where}.environment.${k}`)]);
}

const { values } = (() => {
  try {
    return parseArgs({ strict: true, options: { service: { type: 'string' }, 'write-env': { type: 'string' }, file: { type: 'string' }, set: { type: 'string', multiple: true } } });
  } catch (err) {
    return fail((err as Error).message);
  }
})();
if (!values.service) fail('--service is required');
if (!values['write-env']) fail('--write-env is required');
const file = values.file ?? 'docker-compose.yml';
const compose = parse(readFileSync(file, 'utf8'), { merge: true }) as { services?: Record<string, Service> };
const svc = compose.services?.[values.service];
if (svc === undefined) fail(`${file} has no service "${values.service}"`);

let env: Array<[string, string]>;
try {
  env = serviceEnvironment(svc, process.env, `services.${values.service}`);
} catch (err) {
  fail((err as Error).message);
}
for (const setting of values.set ?? []) {
  const i = setting.indexOf('=');
  if (i < 1) fail(`--set must be NAME=VALUE, got "${setting}"`);
  const name = setting.slice(0, i);
  const at = env.findIndex(([k]) => k === name);
  if (at < 0) fail(`services.${values.service} sets no ${name}; the compose file and this check disagree`);
  env[at] = [name, setting.slice(i + 1)];
}
for (const [k, v] of env) if (/[\n\r\0]/.test(v)) fail(`services.${values.service}.environment.${k} holds a line break`);
writeFileSync(values['write-env'], env.map(([k, v]) => `${k}=${v}\n`).join(''), { mode: 0o600 });
const command = typeof svc.command === 'string' ? svc.command.split(/\s+/).filter(Boolean) : (svc.command ?? []);
process.stdout.write(command.map((w) => `${w}\n`).join(''));

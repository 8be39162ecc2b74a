import { parseArgs } from 'node:util';
import { startFleet, type Fleet, type GatewayNode } from './fleet.js';

/**
 * `npm run cluster -- [--nodes 3] [--redis URL] [--base-port 4000]`: N demo gateways on one Redis, on
 * ports base-port … base-port+N-1, their logs on this terminal. Ctrl-C (SIGINT) or SIGTERM stops them
 * all and exits 0. A node that dies on its own is reported; the rest keep running.
 */
const USAGE = 'usage: npm run cluster -- [--nodes 3] [--redis redis://127.0.0.1:6379 (default $REDIS_URL)] [--base-port 4000]';
const MAX_NODES = 32;

/** What the command line asks for. */
interface ClusterArgs {
  nodes: number;
  redisUrl: string;
  basePort: number;
}

/** Prints every problem and the usage line to stderr and exits 2, before anything was started. */
function fail(problems: readonly string[]): never {
  process.stderr.write(`cluster: ${problems.join('\ncluster: ')}\n${USAGE}\n`);
  process.exit(2);
}

/** `text` as a whole number in [min, max], or a problem naming `--flag`. */
function intFlag(flag: string, text: string | undefined, fallback: number, min: number, max: number): number | string {
  if (text === undefined) return fallback;
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) return `--${flag} must be a whole number from ${min} to ${max}, got "${text}"`;
  return n;
}

/** The flags in `argv`, validated; the problems (each naming its flag) when any is wrong. */
function parseClusterArgs(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): ClusterArgs | { problems: string[] } {
  let values: { nodes?: string; redis?: string; 'base-port'?: string };
  try {
    ({ values } = parseArgs({ args: [...argv], strict: true, allowPositionals: false, options: { nodes: { type: 'string' }, redis: { type: 'string' }, 'base-port': { type: 'string' } } }));
  } catch (err) {
    return { problems: [(err as Error).message] };
  }
  const problems: string[] = [];
  const nodes = intFlag('nodes', values.nodes, 3, 1, MAX_NODES);
  if (typeof nodes === 'string') problems.push(nodes);
  const count = typeof nodes === 'number' ? nodes : 1;
  const basePort = intFlag('base-port', values['base-port'], 4000, 1, 65535 - count);
  if (typeof basePort === 'string') problems.push(basePort);
  const redisUrl = values.redis ?? env.REDIS_URL;
  if (redisUrl === undefined || redisUrl === '') problems.push('--redis is required when REDIS_URL is not set');
  else if (!isRedisUrl(redisUrl)) problems.push(`--redis must be a redis:// or rediss:// URL, got "${redisUrl}"`);
  if (problems.length > 0 || typeof nodes === 'string' || typeof basePort === 'string' || !redisUrl) return { problems };
  return { nodes, redisUrl, basePort };
}

/** True for a parseable redis:// or rediss:// URL. */
function isRedisUrl(text: string): boolean {
  try {
    return ['redis:', 'rediss:'].includes(new URL(text).protocol);
  } catch {
    return false;
  }
}

/** Reports a node that died on its own, and gives up (exit 1) once none is left. */
function reportExit(fleet: () => Fleet | undefined, node: GatewayNode, code: number | null, signal: NodeJS.Signals | null): void {
  const left = fleet()?.nodes.filter((n) => n.running) ?? [];
  process.stderr.write(`cluster: ${node.nodeId} (${node.url}) exited unexpectedly (code ${code}, signal ${signal}); ${left.length} node(s) still running\n`);
  if (fleet() && left.length === 0) {
    process.stderr.write('cluster: no node left, exiting\n');
    process.exit(1);
  }
}

async function main(): Promise<void> {
  const args = parseClusterArgs(process.argv.slice(2));
  if ('problems' in args) fail(args.problems);
  let fleet: Fleet | undefined;
  let stopping = false;
  // Before the fleet is up there is nothing to stop gracefully: exiting SIGKILLs the half-started nodes (fleet.ts's exit hook).
  const shutdown = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`\ncluster: ${signal}, stopping ${fleet?.nodes.length ?? 0} node(s)\n`);
    void (fleet?.stop() ?? Promise.resolve()).then(() => process.exit(0));
  };
  // `on`, not `once`: a second Ctrl-C must not kill this process before the nodes are down.
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
  try {
    fleet = await startFleet({ nodes: args.nodes, redisUrl: args.redisUrl, basePort: args.basePort, stdio: 'inherit', onExit: (node, code, signal) => reportExit(() => fleet, node, code, signal) });
  } catch (err) {
    process.stderr.write(`cluster: ${(err as Error).message}\n`);
    process.exit(1);
  }
  const first = fleet.nodes[0]!;
  process.stdout.write(
    [
      '',
      `  ${fleet.nodes.length} demo gateway node(s) on ${redactUrl(args.redisUrl)}:`,
      ...fleet.nodes.map((n) => `    ${n.nodeId}  ${n.url}  (pid ${n.pid})`),
      '',
      `  Try: curl -i -H 'x-api-key: demo-hour' http://127.0.0.1:${first.port}/api/hello`,
      '  Ctrl-C stops them all.',
      '',
      '',
    ].join('\n'),
  );
}

/** The URL without its password, for printing. */
function redactUrl(text: string): string {
  const url = new URL(text);
  if (url.password) url.password = '***';
  return url.toString();
}

void main();

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { freePorts } from './free-port.js';
import { installExitHook, liveChildren } from './exit-cleanup.js';

/**
 * Starts demo gateway processes (dist/demo/server.js) sharing one Redis: the library behind
 * `npm run cluster` and the end-to-end tests. Every child is killed (SIGKILL, synchronously) when this
 * process exits, so a caller that forgets stop() leaves nothing running.
 */

/** One demo gateway process. */
export interface GatewayNode {
  /** 0-based position in the fleet. */
  readonly index: number;
  /** `node-<index+1>`, passed as NODE_ID. */
  readonly nodeId: string;
  readonly port: number;
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  /** The current process's pid (a new one after restart()). */
  readonly pid: number | undefined;
  /** True while the current process has not exited. */
  readonly running: boolean;
  /** Sends `signal` (default SIGKILL) and resolves once the process has exited. Only for signals that end it. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Stops the process's whole world for `ms` (SIGSTOP, then SIGCONT), as a long GC or a starved CPU would. */
  pause(ms: number): Promise<void>;
  /**
   * Starts the node again with the same env, port and nodeId (stopping it first if it still runs);
   * resolves when /healthz is 200. `server` swaps its program for another build's demo server, as a
   * rolling upgrade (or rollback) does.
   */
  restart(server?: string): Promise<void>;
  /** The demo server script the node runs. */
  readonly server: string;
  /** SIGTERM, then SIGKILL after 3 s; idempotent. */
  stop(): Promise<void>;
  /** Captured stdout+stderr so far, across restarts (empty with stdio 'inherit'). */
  output(): string;
}

export interface FleetOptions {
  /** How many gateways. */
  nodes: number;
  /** REDIS_URL for every node. */
  redisUrl: string;
  /** Node i listens on basePort + i; 0 or absent picks free ports. */
  basePort?: number;
  /** Overrides for every node's environment, applied last. */
  env?: Record<string, string>;
  /** 'pipe' (default) captures output for output(); 'inherit' shows it on this process's stdout/stderr. */
  stdio?: 'pipe' | 'inherit';
  /** The demo server script node `index` runs (another build's `dist/demo/server.js`); this build's by default. */
  server?: (index: number) => string;
  /** Called when a node's process exits without kill(), stop() or restart() having been asked for. */
  onExit?: (node: GatewayNode, code: number | null, signal: NodeJS.Signals | null) => void;
}

/** A started fleet. */
export interface Fleet {
  readonly nodes: GatewayNode[];
  /** The environment every node shares (before PORT and NODE_ID), including the generated secrets. */
  readonly env: Readonly<Record<string, string>>;
  /** Stops every node; idempotent. */
  stop(): Promise<void>;
}

const SERVER = fileURLToPath(new URL('../demo/server.js', import.meta.url));
const READY_TIMEOUT_MS = 15_000;
const POLL_MS = 50;
const STOP_GRACE_MS = 3000;
const MAX_OUTPUT = 256 * 1024;
/** Secrets that must be equal on every node: taken from opts.env or process.env, else generated once per fleet. */
const SHARED_SECRETS = ['KEY_HASH_SECRET', 'BUS_SECRET', 'POLICY_SECRET'] as const;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** True once the child has exited (or failed to spawn). */
function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** The environment shared by all nodes: process.env, REDIS_URL, the shared secrets, LOG_LEVEL, then opts.env. */
export function fleetEnv(opts: Pick<FleetOptions, 'redisUrl' | 'env'>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  env.REDIS_URL = opts.redisUrl;
  for (const name of SHARED_SECRETS) env[name] = opts.env?.[name] ?? process.env[name] ?? randomBytes(32).toString('base64url');
  env.LOG_LEVEL = process.env.LOG_LEVEL ?? 'warn';
  return { ...env, ...opts.env };
}

/** One gateway child process and its lifecycle. */
class Gateway implements GatewayNode {
  readonly nodeId: string;
  readonly url: string;
  private child: ChildProcess | undefined;
  private exitedPromise: Promise<void> = Promise.resolve();
  private captured = '';
  /** Why the current process could not be spawned at all (e.g. a bad execPath). */
  private spawnError: Error | undefined;
  /** True once the current process has answered /healthz: only then is its exit worth reporting. */
  private up = false;
  /** Set while this side is ending the process on purpose, so its exit is not reported as unexpected. */
  private ending = false;
  private stopping: Promise<void> | undefined;

  constructor(
    readonly index: number,
    readonly port: number,
    private readonly env: Readonly<Record<string, string>>,
    public server: string,
    private readonly stdio: 'pipe' | 'inherit',
    private readonly onExit: FleetOptions['onExit'],
  ) {
    this.nodeId = `node-${index + 1}`;
    this.url = `http://127.0.0.1:${port}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined && !exited(this.child);
  }

  output(): string {
    return this.captured;
  }

  /** Spawns the process and resolves once GET /healthz answers 200; rejects with its output if it dies or is not ready in 15 s. */
  async start(): Promise<void> {
    installExitHook();
    this.ending = false;
    this.up = false;
    this.spawnError = undefined;
    this.stopping = undefined;
    const child = spawn(process.execPath, [this.server], {
      env: { ...this.env, PORT: String(this.port), NODE_ID: this.nodeId },
      stdio: this.stdio === 'inherit' ? ['ignore', 'inherit', 'inherit'] : ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    liveChildren.add(child);
    const keep = (chunk: Buffer): void => {
      this.captured += chunk.toString('utf8');
      if (this.captured.length > MAX_OUTPUT) this.captured = this.captured.slice(-MAX_OUTPUT);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    this.exitedPromise = new Promise<void>((resolve) => {
      child.once('error', (err) => {
        this.spawnError = err;
        liveChildren.delete(child);
        resolve();
      });
      child.once('exit', (code, signal) => {
        liveChildren.delete(child);
        if (this.up && !this.ending && this.child === child) this.onExit?.(this, code, signal);
        resolve();
      });
    });
    await this.waitHealthy(child);
    this.up = true;
  }

  /** Polls /healthz every 50 ms until 200. */
  private async waitHealthy(child: ChildProcess): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (this.spawnError) throw new Error(`${this.nodeId}: could not run ${process.execPath} ${this.server}: ${this.spawnError.message}`);
      if (exited(child)) {
        throw new Error(`${this.nodeId} (port ${this.port}) exited before it was ready (code ${child.exitCode}, signal ${child.signalCode}); its output:\n${this.outputForError()}`);
      }
      try {
        const res = await fetch(`${this.url}/healthz`, { signal: AbortSignal.timeout(1000) });
        await res.body?.cancel();
        if (res.status === 200) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) {
        throw new Error(`${this.nodeId} (port ${this.port}) did not answer GET /healthz with 200 within ${READY_TIMEOUT_MS / 1000} s; its output:\n${this.outputForError()}`);
      }
      await sleep(POLL_MS);
    }
  }

  /** The captured output, or a note on where it went. */
  private outputForError(): string {
    return this.stdio === 'inherit' ? '(shown above: stdio is inherit)' : this.captured || '(none)';
  }

  async pause(ms: number): Promise<void> {
    const child = this.child;
    if (!child || exited(child)) throw new Error(`${this.nodeId} is not running`);
    child.kill('SIGSTOP');
    try {
      await sleep(ms);
    } finally {
      child.kill('SIGCONT');
    }
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.child;
    if (!child || exited(child)) return this.exitedPromise;
    this.ending = true;
    child.kill(signal);
    await this.exitedPromise;
  }

  stop(): Promise<void> {
    this.stopping ??= (async () => {
      const child = this.child;
      if (!child || exited(child)) return this.exitedPromise;
      this.ending = true;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      await this.exitedPromise;
      clearTimeout(timer);
    })();
    return this.stopping;
  }

  async restart(server?: string): Promise<void> {
    await this.stop();
    if (server !== undefined) this.server = server;
    await this.start();
  }
}

/**
 * Starts `opts.nodes` demo gateways concurrently (node i is NODE_ID `node-<i+1>` on basePort + i, or
 * on free ports) and resolves once every one answers GET /healthz with 200. If any fails to come up,
 * stops the others and rejects with every failure, each with its node's output.
 */
export async function startFleet(opts: FleetOptions): Promise<Fleet> {
  if (!Number.isInteger(opts.nodes) || opts.nodes < 1) throw new Error(`startFleet: nodes must be a whole number ≥ 1, got ${opts.nodes}`);
  if (opts.basePort && (!Number.isInteger(opts.basePort) || opts.basePort < 1 || opts.basePort + opts.nodes - 1 > 65535)) {
    throw new Error(`startFleet: basePort must be a whole number from 1 to ${65536 - opts.nodes} for ${opts.nodes} node(s), got ${opts.basePort}`);
  }
  const env = fleetEnv(opts);
  // On free ports, each node's fast-path listener gets one of its own too, picked with the others: left
  // to the kernel in the node, it could take a port picked here for another node's HTTP listener.
  const free = opts.basePort ? [] : await freePorts(2 * opts.nodes);
  const ports = opts.basePort ? Array.from({ length: opts.nodes }, (_, i) => opts.basePort! + i) : free.slice(0, opts.nodes);
  const nodeEnv = (i: number): Readonly<Record<string, string>> => (free.length === 0 || env.FAST_PATH_PORT !== undefined ? env : { ...env, FAST_PATH_PORT: String(free[opts.nodes + i]) });
  const nodes = ports.map((port, i) => new Gateway(i, port, nodeEnv(i), opts.server?.(i) ?? SERVER, opts.stdio ?? 'pipe', opts.onExit));
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopping ??= Promise.all(nodes.map((n) => n.stop())).then(() => undefined));
  const results = await Promise.allSettled(nodes.map((n) => n.start()));
  const failures = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as Error] : []));
  if (failures.length > 0) {
    await stop();
    throw new Error(`${failures.length} of ${opts.nodes} gateway node(s) failed to start:\n\n${failures.map((e) => e.message).join('\n\n')}`);
  }
  return { nodes, env, stop };
}

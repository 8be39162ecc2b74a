import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from './free-port.js';
import { installExitHook, liveChildren, liveDirs } from './exit-cleanup.js';

/**
 * Private redis-server processes for tests, so no test touches the shared Redis on :6379.
 *
 * Every process started here is killed (SIGKILL, synchronously) and its temp dir removed when this
 * Node process exits, so a failing test or a forgotten stop() leaves nothing running. Set REDIS_URL to
 * run the tests against a Redis of your own instead; fault tests then skip (see {@link RedisProcess.external}).
 */

/** A redis-server the tests can talk to, and (when private) stop, pause or restart. */
export interface RedisProcess {
  /** `redis://127.0.0.1:<port>` (or REDIS_URL when external). */
  readonly url: string;
  readonly port: number;
  /** True when REDIS_URL was used: then pause/resume/restart throw, and fault tests should `this.skip()`. */
  readonly external: boolean;
  /** Freezes the server (SIGSTOP): connections stay open, commands get no answer. */
  pause(): void;
  /** Thaws a paused server (SIGCONT). */
  resume(): void;
  /**
   * Stops the server and starts it again on the same port and data dir; resolves once it answers PING.
   * `empty: true` also wipes the data dir (without persistence, the default, data is gone anyway).
   */
  restart(opts?: { empty?: boolean }): Promise<void>;
  /** Terminates the server (SIGKILL if it has not exited within 2 s) and removes its temp dir; idempotent. */
  stop(): Promise<void>;
}

/** A Redis Cluster of private masters with all 16384 slots assigned and `cluster_state:ok` on every node. */
export interface RedisClusterProcess {
  /** Seed nodes for `new Cluster(nodes)`. */
  readonly nodes: ReadonlyArray<{ host: string; port: number }>;
  /** The masters themselves, for fault tests (pause one, restart one…). */
  readonly processes: readonly RedisProcess[];
  /** Stops every node and removes their dirs; idempotent. */
  stop(): Promise<void>;
}

const HOST = '127.0.0.1';
const READY_TIMEOUT_MS = 10_000;
const CLUSTER_TIMEOUT_MS = 20_000;
const STOP_GRACE_MS = 2000;
const MAX_OUTPUT = 64 * 1024;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** True once the child has exited (or never started). */
function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** A started redis-server child with its captured output. */
interface Spawned {
  readonly child: ChildProcess;
  /** Resolves when the child has exited, or failed to spawn at all. */
  readonly done: Promise<void>;
  /** Captured stdout+stderr (redis-server logs to stdout), the last 64 KiB. */
  output(): string;
  /** The spawn error (e.g. ENOENT: redis-server not on PATH), if any. */
  spawnError(): Error | undefined;
}

/** Runs `redis-server` with our fixed flags plus `args`, capturing its output and tracking it for the exit hook. */
function spawnRedis(port: number, dir: string, args: readonly string[]): Spawned {
  installExitHook();
  const child = spawn('redis-server', ['--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no', '--dir', dir, '--protected-mode', 'no', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let error: Error | undefined;
  const keep = (chunk: Buffer): void => {
    out += chunk.toString('utf8');
    if (out.length > MAX_OUTPUT) out = out.slice(-MAX_OUTPUT);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  liveChildren.add(child);
  const done = new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.once('error', (err) => {
      error = err;
      resolve();
    });
  }).then(() => void liveChildren.delete(child));
  return { child, done, output: () => out, spawnError: () => error };
}

/** One `PING` over raw TCP: true when the answer is `+PONG` within 500 ms. */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: HOST, port });
    let reply = '';
    const finish = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => finish(false));
    socket.once('error', () => finish(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString('utf8');
      if (reply.includes('\r\n')) finish(reply.startsWith('+PONG'));
    });
  });
}

/** Resolves once the server on `port` answers PING; rejects with its output if it exits first or after 10 s. */
async function waitForPing(port: number, spawned: Spawned): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    const err = spawned.spawnError();
    if (err) throw new Error(`could not run redis-server (is it on PATH?): ${err.message}`);
    if (exited(spawned.child)) {
      throw new Error(`redis-server on port ${port} exited (code ${spawned.child.exitCode}, signal ${spawned.child.signalCode}) before answering PING; its output:\n${spawned.output()}`);
    }
    if (await ping(port)) return;
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer PING within ${READY_TIMEOUT_MS / 1000} s; its output:\n${spawned.output()}`);
    await sleep(50);
  }
}

/** Ends a child: SIGCONT (a paused process cannot act on SIGTERM), SIGTERM, then SIGKILL after `graceMs`. */
async function terminate(spawned: Spawned, graceMs: number): Promise<void> {
  const { child } = spawned;
  if (!exited(child) && child.pid !== undefined) {
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await spawned.done;
    clearTimeout(timer);
  }
  await spawned.done;
}

/** A redis-server of our own, in its own temp dir. */
class PrivateRedis implements RedisProcess {
  readonly external = false;
  readonly url: string;
  private stopping: Promise<void> | undefined;

  constructor(
    readonly port: number,
    private readonly dir: string,
    /** The extra redis-server flags it runs with (kept for restart). */
    readonly args: readonly string[],
    private spawned: Spawned,
  ) {
    this.url = `redis://${HOST}:${port}`;
  }

  pause(): void {
    this.running('pause').kill('SIGSTOP');
  }

  resume(): void {
    this.running('resume').kill('SIGCONT');
  }

  async restart(opts: { empty?: boolean } = {}): Promise<void> {
    if (this.stopping) throw new Error(`restart(): the redis-server on port ${this.port} was stopped`);
    await terminate(this.spawned, STOP_GRACE_MS);
    if (opts.empty) {
      rmSync(this.dir, { recursive: true, force: true });
      mkdirSync(this.dir);
    }
    this.spawned = spawnRedis(this.port, this.dir, this.args);
    await waitForPing(this.port, this.spawned);
  }

  stop(): Promise<void> {
    this.stopping ??= terminate(this.spawned, STOP_GRACE_MS).then(() => {
      rmSync(this.dir, { recursive: true, force: true });
      liveDirs.delete(this.dir);
    });
    return this.stopping;
  }

  /** The live child, or a clear error naming `what` when it has been stopped or has died. */
  private running(what: string): ChildProcess {
    if (this.stopping || exited(this.spawned.child)) throw new Error(`${what}(): the redis-server on port ${this.port} is not running`);
    return this.spawned.child;
  }
}

/** The Redis named by REDIS_URL: usable, but not ours to stop, pause or restart. */
class ExternalRedis implements RedisProcess {
  readonly external = true;
  readonly port: number;

  constructor(readonly url: string) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new Error(`REDIS_URL is not a URL: "${url}"`);
    }
    this.port = Number(parsed.port || 6379);
  }

  pause(): void {
    this.refuse('pause');
  }

  resume(): void {
    this.refuse('resume');
  }

  async restart(): Promise<void> {
    this.refuse('restart');
  }

  /** Nothing to do: the server is not ours, and its data is left alone. */
  async stop(): Promise<void> {}

  private refuse(what: string): never {
    throw new Error(`${what}() needs a private redis-server, but REDIS_URL points at an external one (port ${this.port}); fault tests should this.skip() when external is true`);
  }
}

/**
 * Starts a private redis-server on a free port and resolves once it answers PING. `args` are extra
 * redis-server flags (e.g. `['--maxmemory', '10mb']`). A port taken by someone else between picking and
 * binding it is retried with a new one. Returns a handle for REDIS_URL instead when that is set.
 */
export async function startRedis(opts: { args?: string[] } = {}): Promise<RedisProcess> {
  const url = process.env.REDIS_URL;
  if (url) return new ExternalRedis(url);
  return startPrivate(async () => opts.args ?? []);
}

/** Starts a private redis-server with `argsFor(port)` as extra flags, retrying on a port someone else took. */
async function startPrivate(argsFor: (port: number) => Promise<string[]>): Promise<PrivateRedis> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const args = await argsFor(port);
    const dir = mkdtempSync(join(tmpdir(), 'rl-redis-'));
    liveDirs.add(dir);
    const spawned = spawnRedis(port, dir, args);
    try {
      await waitForPing(port, spawned);
      return new PrivateRedis(port, dir, args, spawned);
    } catch (err) {
      await terminate(spawned, 0);
      rmSync(dir, { recursive: true, force: true });
      liveDirs.delete(dir);
      if (attempt < 3 && spawned.output().includes('Address already in use')) continue;
      throw err;
    }
  }
}

/** True when an executable called `name` is on PATH. */
function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** A short-lived ioredis connection to one node that fails fast instead of retrying. */
async function withNode<T>(port: number, fn: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis({ host: HOST, port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000 });
  redis.on('error', () => {}); // the command's rejection carries the cause
  try {
    await redis.connect();
    return await fn(redis);
  } finally {
    redis.disconnect();
  }
}

/** Runs `redis-cli --cluster create` over `ports` with no replicas; rejects with its output on failure. */
function createWithRedisCli(ports: readonly number[]): Promise<void> {
  const child = spawn('redis-cli', ['--cluster', 'create', ...ports.map((p) => `${HOST}:${p}`), '--cluster-replicas', '0', '--cluster-yes'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), CLUSTER_TIMEOUT_MS);
    child.once('error', (err) => reject(new Error(`could not run redis-cli: ${err.message}`)));
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else reject(new Error(`redis-cli --cluster create failed (code ${code}, signal ${signal}):\n${out}`));
    });
  });
}

/** Splits the 16384 slots into `n` contiguous ranges, as evenly as possible. */
export function slotRanges(n: number): Array<[number, number]> {
  return Array.from({ length: n }, (_, i) => [Math.floor((i * 16384) / n), Math.floor(((i + 1) * 16384) / n) - 1]);
}

/** Forms the cluster by hand: each node takes a slot range (ADDSLOTSRANGE), then the first MEETs the rest. */
async function createWithCommands(nodes: ReadonlyArray<{ port: number; busPort: number }>): Promise<void> {
  const ranges = slotRanges(nodes.length);
  await Promise.all(nodes.map((n, i) => withNode(n.port, (r) => r.call('CLUSTER', 'ADDSLOTSRANGE', ranges[i]![0], ranges[i]![1]))));
  await withNode(nodes[0]!.port, async (r) => {
    for (const n of nodes.slice(1)) await r.call('CLUSTER', 'MEET', HOST, n.port, n.busPort);
  });
}

/** Resolves once every node reports `cluster_state:ok` and knows all `ports.length` nodes. */
async function waitClusterOk(ports: readonly number[]): Promise<void> {
  const deadline = Date.now() + CLUSTER_TIMEOUT_MS;
  for (;;) {
    const infos = await Promise.all(ports.map((p) => withNode(p, (r) => r.call('CLUSTER', 'INFO')).then(String, (err: Error) => `error: ${err.message}`)));
    const ok = (info: string): boolean => info.includes('cluster_state:ok') && info.includes(`cluster_known_nodes:${ports.length}\r\n`);
    if (infos.every(ok)) return;
    const last = infos.map((info, i) => `port ${ports[i]}: ${info.split('\r\n').slice(0, 3).join(' ')}`).join('\n');
    if (Date.now() > deadline) throw new Error(`the cluster did not reach cluster_state:ok within ${CLUSTER_TIMEOUT_MS / 1000} s:\n${last}`);
    await sleep(100);
  }
}

/**
 * Starts `masters` private redis-servers in cluster mode, each in its own temp dir with its own
 * cluster-bus port (so the client port need not be ≤ 55535), assigns all slots with no replicas and
 * resolves once `CLUSTER INFO` says `cluster_state:ok` on every node. Uses `redis-cli --cluster create`
 * when redis-cli is on PATH and there are at least 3 masters (its minimum); otherwise, or with
 * `via: 'commands'`, CLUSTER ADDSLOTSRANGE and CLUSTER MEET. Ignores REDIS_URL.
 */
export async function startRedisCluster(masters = 3, opts: { via?: 'redis-cli' | 'commands' } = {}): Promise<RedisClusterProcess> {
  if (!Number.isInteger(masters) || masters < 1) throw new Error(`startRedisCluster: masters must be a whole number ≥ 1, got ${masters}`);
  const argsFor = async (port: number): Promise<string[]> => {
    let busPort = await freePort();
    while (busPort === port) busPort = await freePort();
    return ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '2000', '--cluster-port', String(busPort)];
  };
  const started = await Promise.allSettled(Array.from({ length: masters }, () => startPrivate(argsFor)));
  const processes = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const stop = async (): Promise<void> => void (await Promise.all(processes.map((p) => p.stop())));
  try {
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    const ports = processes.map((p) => p.port);
    const useCli = (opts.via ?? 'redis-cli') === 'redis-cli' && masters >= 3 && onPath('redis-cli');
    if (useCli) await createWithRedisCli(ports);
    else await createWithCommands(processes.map((p) => ({ port: p.port, busPort: busPortOf(p) })));
    await waitClusterOk(ports);
  } catch (err) {
    await stop();
    throw err;
  }
  return { nodes: processes.map((p) => ({ host: HOST, port: p.port })), processes, stop };
}

/** The cluster-bus port `p` was started with (the value after `--cluster-port` in its args). */
function busPortOf(p: PrivateRedis): number {
  return Number(p.args[p.args.indexOf('--cluster-port') + 1]);
}

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './free-port.js';
import { installExitHook, liveChildren, liveDirs } from './exit-cleanup.js';

/**
 * Private redis-server processes for tests, so no test touches the shared Redis on :6379.
 *
 * Every process started here is killed (SIGKILL, synchronously) and its temp dir removed when this
 * Node process exits, so a failing test or a forgotten stop() leaves nothing running. Set REDIS_URL to
 * run the tests against a Redis of your own instead; fault tests then skip (see {@link RedisProcess.external}).
 * Redis Clusters of such servers are in ./redis-cluster.ts, which starts its masters with startPrivate.
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

export const HOST = '127.0.0.1';
const READY_TIMEOUT_MS = 10_000;
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
export class PrivateRedis implements RedisProcess {
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
export async function startPrivate(argsFor: (port: number) => Promise<string[]>): Promise<PrivateRedis> {
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

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Agent, get } from 'node:http';

/**
 * The load of the cost measurements (bench-cost.ts): sequential keep-alive requests for the runs
 * under callgrind, a fixed offered rate for the CPU-time runs, and a process's CPU time from /proc.
 */

/** Which API key each request carries. */
export type KeyPlan = { kind: 'one'; key: string } | { kind: 'cycle'; keys: number; prefix: string } | { kind: 'fresh'; prefix: string };

/** What a run of requests got back. */
export interface Outcome {
  requests: number;
  /** Answers other than 200, plus errors and timeouts: must be 0, every request is admitted. */
  non2xx: number;
  /** Answers by status code (200 included), errors as 'error'. */
  statuses: Record<string, number>;
  ms: number;
}

/** A key source: a function of the request's index (fresh keys use a counter of their own, never repeating). */
export function keySource(plan: KeyPlan): (i: number) => string {
  if (plan.kind === 'one') return () => plan.key;
  if (plan.kind === 'cycle') return (i) => `${plan.prefix}${i % plan.keys}`;
  let n = 0;
  return () => `${plan.prefix}${n++}`;
}

/**
 * `n` requests one after another on one keep-alive connection (the next is sent once the previous
 * answer is read), so the server's work per request is all that is counted, one request at a time.
 */
export async function sequential(port: number, n: number, key: (i: number) => string, agent: Agent): Promise<Outcome> {
  const statuses: Record<string, number> = {};
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const status = await new Promise<string>((resolve) => {
      const req = get({ host: '127.0.0.1', port, path: '/api/hello', agent, headers: { 'x-api-key': key(i) } }, (res) => {
        res.resume();
        res.once('end', () => resolve(String(res.statusCode)));
        res.once('error', () => resolve('error'));
      });
      req.setTimeout(120_000, () => req.destroy(new Error('timeout')));
      req.once('error', () => resolve('error'));
    });
    statuses[status] = (statuses[status] ?? 0) + 1;
  }
  const ms = performance.now() - t0;
  return { requests: n, non2xx: n - (statuses['200'] ?? 0), statuses, ms };
}

/** One keep-alive connection for sequential(); destroy it when done. */
export const oneConnection = (): Agent => new Agent({ keepAlive: true, maxSockets: 1 });

/**
 * An open-loop load: request i is sent at `i / rate` seconds (checked every millisecond), on one of
 * `connections` keep-alive connections, queued for the next free one when all are busy; the keys are
 * taken in turn. Unlike autocannon's per-second rate (a burst at the top of each second, then
 * silence), this spreads the requests evenly, as independent callers would.
 */
export async function paced(port: number, rate: number, seconds: number, keys: number, prefix: string, connections = 16): Promise<Outcome> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const statuses: Record<string, number> = {};
  const total = Math.round(rate * seconds);
  const pending = new Set<Promise<void>>();
  const send = (i: number): void => {
    const p = new Promise<void>((resolve) => {
      const done = (status: string): void => {
        statuses[status] = (statuses[status] ?? 0) + 1;
        resolve();
      };
      const req = get({ host: '127.0.0.1', port, path: '/api/hello', agent, headers: { 'x-api-key': `${prefix}${i % keys}` } }, (res) => {
        res.resume();
        res.once('end', () => done(String(res.statusCode)));
        res.once('error', () => done('error'));
      });
      req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
      req.once('error', () => done('error'));
    });
    pending.add(p);
    void p.then(() => pending.delete(p));
  };
  const t0 = performance.now();
  try {
    for (let sent = 0; sent < total;) {
      const due = Math.min(total, Math.floor(((performance.now() - t0) * rate) / 1000) + 1);
      while (sent < due) send(sent++);
      await new Promise((r) => setTimeout(r, 1));
    }
    await Promise.all(pending);
  } finally {
    agent.destroy();
  }
  return { requests: total, non2xx: total - (statuses['200'] ?? 0), statuses, ms: performance.now() - t0 };
}

let clockTick: number | undefined;

/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`, 100 if that cannot be run). */
export function ticksPerSecond(): number {
  if (clockTick === undefined) {
    try {
      clockTick = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTick = 100;
    }
  }
  return clockTick;
}

/** utime + stime of a process (all its threads), in ms, from /proc/<pid>/stat. */
export function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name, which is in parentheses and may hold spaces: state is field 3.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) throw new Error(`cannot read the CPU times in /proc/${pid}/stat: ${stat}`);
  return ((utime + stime) * 1000) / ticksPerSecond();
}

import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../scripts/free-port.js';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** Each server entry point, with what it needs besides REDIS_URL and its port. */
const ENTRY_POINTS = [
  { name: 'demo gateway', file: 'dist/demo/server.js', portVar: 'PORT', env: { KEY_HASH_SECRET: 'e2e-key-hash-secret-0123', BUS_SECRET: 'e2e-bus-secret-0123456' } },
  {
    name: 'admin API',
    file: 'dist/admin/server.js',
    portVar: 'ADMIN_PORT',
    env: {
      ADMIN_TOKEN: 'admin-token-0123456789-0123456789-abc',
      BREAK_GLASS_TOKEN: 'glass-token-0123456789-0123456789-abc',
      KEY_HASH_SECRET: 'e2e-key-hash-secret-0123',
      POLICY_SECRET: 'e2e-bus-secret-0123456',
    },
  },
  { name: 'maintenance worker', file: 'dist/admin/worker.js', portVar: undefined, env: {} },
] as const;

interface Run {
  readonly code: number | null;
  readonly stderr: string;
  readonly stdout: string;
  readonly ms: number;
}

/** Runs `file` until it exits (or `limitMs` pass: then it is killed and `code` is null). */
function run(file: string, env: Record<string, string>, limitMs = 20_000): Promise<Run> {
  const base: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: 'warn', ...env };
  delete base.REDIS_CLUSTER_NODES;
  const started = Date.now();
  const child = spawn(process.execPath, [join(ROOT, file)], { env: base, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const killer = setTimeout(() => child.kill('SIGKILL'), limitMs);
  return new Promise((resolve) => {
    child.once('exit', (code) => {
      clearTimeout(killer);
      resolve({ code, stderr, stdout, ms: Date.now() - started });
    });
  });
}

/** A TCP server that accepts connections and never answers: a Redis that hangs. */
async function silentServer(): Promise<{ port: number; close: () => void }> {
  const sockets: Socket[] = [];
  const server: Server = createServer((s) => void sockets.push(s));
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { port, close: () => (sockets.forEach((s) => s.destroy()), server.close()) };
}

describe('server entry points: a clear one-line exit when Redis or the port is not there', function () {
  this.timeout(60_000);

  it('each exits 1 at once naming Redis (never its password) when nothing listens at REDIS_URL', async () => {
    const closed = await freePort();
    const runs = await Promise.all(ENTRY_POINTS.map((e) => run(e.file, { ...e.env, REDIS_URL: `redis://user:hunter2-secret@127.0.0.1:${closed}`, ...(e.portVar ? { [e.portVar]: '0' } : {}) })));
    runs.forEach((r, i) => {
      const e = ENTRY_POINTS[i]!;
      expect(r.code, `${e.name}: ${r.stderr}`).to.equal(1);
      expect(r.stderr.trim().split('\n'), e.name).to.deep.equal([`${e.name}: cannot connect to Redis at 127.0.0.1:${closed}: connect ECONNREFUSED 127.0.0.1:${closed}`]);
      expect(r.stderr + r.stdout).to.not.include('hunter2');
      expect(r.ms, e.name).to.be.below(15_000);
    });
  });

  it('each exits 1 after the startup timeout (5 s), not retrying forever, when Redis accepts but never answers', async () => {
    const silent = await silentServer();
    try {
      const runs = await Promise.all(ENTRY_POINTS.map((e) => run(e.file, { ...e.env, REDIS_URL: `redis://127.0.0.1:${silent.port}`, ...(e.portVar ? { [e.portVar]: '0' } : {}) })));
      runs.forEach((r, i) => {
        const e = ENTRY_POINTS[i]!;
        expect(r.code, `${e.name}: ${r.stderr}`).to.equal(1);
        expect(r.stderr.trim().split('\n'), e.name).to.deep.equal([`${e.name}: cannot connect to Redis at 127.0.0.1:${silent.port}: no answer within 5 s`]);
        expect(r.ms, e.name).to.be.within(4900, 19_000);
      });
    } finally {
      silent.close();
    }
  });

  describe('with a live Redis', () => {
    let redis: RedisProcess;
    before(async () => {
      redis = await startRedis();
    });
    after(async () => {
      await redis?.stop();
    });

    it('the demo gateway and the admin API exit 1 naming the port when it is in use', async () => {
      const taken = createServer();
      const port = await freePort();
      await new Promise<void>((r) => taken.listen(port, '0.0.0.0', r));
      try {
        const servers = ENTRY_POINTS.filter((e) => e.portVar !== undefined);
        const runs = await Promise.all(servers.map((e, i) => run(e.file, { ...e.env, REDIS_URL: redis.url, REDIS_PREFIX: `ep${i}`, [e.portVar!]: String(port) })));
        runs.forEach((r, i) => {
          const e = servers[i]!;
          expect(r.code, `${e.name}: ${r.stderr}`).to.equal(1);
          expect(r.stderr.trim().split('\n'), e.name).to.have.length(1);
          expect(r.stderr, e.name).to.match(new RegExp(`^${e.name}: cannot listen on port ${port}: .*EADDRINUSE`));
        });
      } finally {
        taken.close();
      }
    });

    it('the worker starts against it and stops cleanly on SIGTERM (the startup check lets a healthy Redis through)', async () => {
      const base: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: 'info', REDIS_URL: redis.url, REDIS_PREFIX: 'epw' };
      delete base.REDIS_CLUSTER_NODES;
      const child = spawn(process.execPath, [join(ROOT, 'dist/admin/worker.js')], { env: base, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      try {
        for (let i = 0; i < 200 && !out.includes('maintenance worker running'); i++) {
          if (child.exitCode !== null) break;
          await new Promise((r) => setTimeout(r, 50));
        }
        expect(out).to.include('maintenance worker running');
      } finally {
        child.kill('SIGTERM');
      }
      expect(await exited, out).to.equal(0);
    });
  });
});

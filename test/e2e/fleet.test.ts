import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../scripts/free-port.js';
import { startFleet, type Fleet, type GatewayNode } from '../../scripts/fleet.js';
import { statusAfterRetries } from '../support/http.js';
import { startRedis, type RedisProcess } from '../../scripts/redis-server.js';

const CLI = fileURLToPath(new URL('../../scripts/cluster.js', import.meta.url));

/** The status of GET `url`, or 0 when nothing answers. */
async function statusOf(url: string, headers: Record<string, string> = {}): Promise<number> {
  try {
    const res = await fetch(url, { headers, signal: AbortSignal.timeout(2000) });
    await res.body?.cancel();
    return res.status;
  } catch {
    return 0;
  }
}

/** True when `port` can be bound on 127.0.0.1 right now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A port p such that p … p+n-1 were all free a moment ago. */
async function freeRun(n: number): Promise<number> {
  for (;;) {
    const p = await freePort();
    if (p + n - 1 > 65535) continue;
    let ok = true;
    for (let i = 1; i < n && ok; i++) ok = await bindable(p + i);
    if (ok) return p;
  }
}

describe('fleet of demo gateway processes (scripts/fleet.ts)', function () {
  let redis: RedisProcess;
  let fleet: Fleet | undefined;
  let cli: ChildProcess | undefined;

  before(async () => {
    redis = await startRedis();
  });

  afterEach(async () => {
    await fleet?.stop();
    fleet = undefined;
    if (cli && cli.exitCode === null && cli.signalCode === null) {
      cli.kill('SIGKILL');
      await new Promise((r) => cli!.once('exit', r));
    }
    cli = undefined;
  });

  after(async () => {
    await redis?.stop();
  });

  it('starts nodes that share their secrets, and kills, restarts and stops them', async () => {
    const unexpected: Array<{ node: string; signal: string | null }> = [];
    fleet = await startFleet({ nodes: 2, redisUrl: redis.url, onExit: (node, _code, signal) => unexpected.push({ node: node.nodeId, signal }) });
    const [a, b] = fleet.nodes as [GatewayNode, GatewayNode];
    expect([a.nodeId, b.nodeId]).to.deep.equal(['node-1', 'node-2']);
    expect(a.port).to.not.equal(b.port);
    expect(a.url).to.equal(`http://127.0.0.1:${a.port}`);
    expect(fleet.env.REDIS_URL).to.equal(redis.url);
    expect(fleet.env.LOG_LEVEL).to.equal(process.env.LOG_LEVEL ?? 'warn');
    for (const name of ['KEY_HASH_SECRET', 'BUS_SECRET']) expect(fleet.env[name], name).to.match(process.env[name] ? /./ : /^[\w-]{43}$/);
    for (const n of fleet.nodes) expect(await statusOf(`${n.url}/healthz`)).to.equal(200);

    // A kill asked for is not "unexpected"; restart brings it back on the same port with a new pid.
    const oldPid = a.pid;
    await a.kill();
    expect(a.running).to.equal(false);
    expect(await statusOf(`${a.url}/healthz`)).to.equal(0);
    await a.restart();
    expect(a.pid).to.not.equal(oldPid);
    expect(await statusOf(`${a.url}/healthz`)).to.equal(200);
    expect(await statusAfterRetries(`${a.url}/api/hello`, 'demo-hour')).to.equal(200);

    // A node that dies on its own is reported.
    process.kill(b.pid!, 'SIGKILL');
    for (let i = 0; i < 100 && unexpected.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(unexpected).to.deep.equal([{ node: 'node-2', signal: 'SIGKILL' }]);

    await Promise.all([fleet.stop(), fleet.stop(), a.stop()]);
    expect(a.running).to.equal(false);
    expect(unexpected).to.have.length(1);
  });

  it('rejects with the node output when a node cannot start, and leaves nothing running', async () => {
    const err = await startFleet({ nodes: 2, redisUrl: redis.url, env: { POLICY_FILE: '/nonexistent/policy.json' } }).then(
      (f) => ((fleet = f), undefined),
      (e: Error) => e,
    );
    expect(err?.message).to.include('2 of 2 gateway node(s) failed to start');
    expect(err?.message).to.match(/node-1 \(port \d+\) exited before it was ready \(code 1/);
    expect(err?.message).to.include('/nonexistent/policy.json');
  });

  it('npm run cluster: serves on base-port … base-port+N-1 and stops every node on SIGINT, exit 0', async function () {
    this.timeout(60_000);
    const base = await freeRun(2);
    cli = spawn(process.execPath, [CLI, '--nodes', '2', '--redis', redis.url, '--base-port', String(base)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    cli.stdout!.on('data', (c: Buffer) => (out += c.toString('utf8')));
    cli.stderr!.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exit = new Promise<number | null>((r) => cli!.once('exit', (code) => r(code)));
    // Each node waits until it reaches every shard's owner (up to 15 s): on a loaded machine, longer.
    for (let i = 0; i < 600 && !out.includes('Ctrl-C stops them all') && cli.exitCode === null; i++) await new Promise((r) => setTimeout(r, 50));
    expect(out, `exit ${cli.exitCode}; output:\n${out}`).to.include('Ctrl-C stops them all');
    expect(out).to.include(`node-1  http://127.0.0.1:${base}`);
    expect(out).to.include(`node-2  http://127.0.0.1:${base + 1}`);
    expect(out).to.include(`curl -i -H 'x-api-key: demo-hour' http://127.0.0.1:${base}/api/hello`);
    for (const port of [base, base + 1]) expect(await statusAfterRetries(`http://127.0.0.1:${port}/api/hello`, 'demo-hour'), out).to.equal(200);
    cli.kill('SIGINT');
    expect(await exit, out).to.equal(0);
    for (const port of [base, base + 1]) expect(await statusOf(`http://127.0.0.1:${port}/healthz`)).to.equal(0);
  });
});

import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { writeFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KeyHasher } from '../../lib/key-id.js';
import { freePort } from '../../scripts/free-port.js';
import { phaseOffset } from '../../lib/window.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SERVER = join(ROOT, 'dist/demo/server.js');
const SECRET = 'e2e-demo-secret-0123456789';

async function waitReady(url: string, child: ChildProcess): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('server did not start');
}

describe('demo server process (npm start)', () => {
  it('serves the demo: 12 quick demo-free requests give 10 × 200 then 429 with Retry-After 0', async function () {
    const port = await freePort();
    const child = spawn(process.execPath, [SERVER], { env: { ...process.env, PORT: String(port), LOG_LEVEL: 'warn', KEY_HASH_SECRET: SECRET }, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      await waitReady(`http://127.0.0.1:${port}/healthz`, child);
      // Start just after this key's own burst boundary so the 12 requests share one 1 s window.
      const offset = phaseOffset(new KeyHasher([{ version: 'v1', secret: SECRET }]).hash('demo-free'), 1000);
      await new Promise((r) => setTimeout(r, (offset - (Date.now() % 1000) + 1000 + 5) % 1000)); // computed: to that boundary
      const results: Array<{ status: number; retryAfter: string | null; resetMs: string | null; body: string }> = [];
      for (let i = 0; i < 12; i++) {
        const res = await fetch(`http://127.0.0.1:${port}/api/hello`, { headers: { 'x-api-key': 'demo-free' } });
        results.push({ status: res.status, retryAfter: res.headers.get('retry-after'), resetMs: res.headers.get('x-ratelimit-reset-ms'), body: await res.text() });
      }
      // The 1 s burst window may roll over during the run; then more than 10 are admitted, never fewer.
      const first429 = results.findIndex((r) => r.status === 429);
      expect(first429).to.be.at.least(10);
      if (first429 === 10) {
        expect(results.slice(0, 10).every((r) => r.status === 200)).to.equal(true);
        const denial = results[10]!;
        expect(denial.retryAfter).to.equal('0');
        expect(Number(denial.resetMs)).to.be.within(1, 1000);
        expect(JSON.parse(denial.body)).to.include({ error: 'RL_QUOTA_EXCEEDED', window: 'burst', status: 429 });
      }
      const unknown = await fetch(`http://127.0.0.1:${port}/api/hello`, { headers: { 'x-api-key': 'who-is-this' } });
      expect(unknown.status).to.equal(401);
    } finally {
      child.kill('SIGTERM');
    }
  });

  it('refuses to start on an invalid policy file, naming the bad fields', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rl-demo-'));
    const file = join(dir, 'policy.json');
    const good = JSON.parse(readFileSync(join(ROOT, 'demo/policy.json'), 'utf8'));
    good.policy.plans.free.windows[0].limit = -1;
    good.demoKeys['demo-free'].plan = 'platinum';
    writeFileSync(file, JSON.stringify(good));
    const run = spawnSync(process.execPath, [SERVER], { env: { ...process.env, PORT: '0', POLICY_FILE: file }, encoding: 'utf8', timeout: 10_000 });
    expect(run.status).to.equal(1);
    expect(run.stderr).to.include('demoKeys[0].plan: unknown plan "platinum"');
    expect(run.stderr).to.not.include('demo-free');
    expect(run.stderr).to.include('policy.plans.free.windows.0.limit');
  });

  it('with REDIS_URL, refuses to start without the shared secrets, naming them; nothing is contacted', () => {
    const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0', REDIS_URL: 'redis://127.0.0.1:1' };
    delete env.KEY_HASH_SECRET;
    delete env.BUS_SECRET;
    const noKey = spawnSync(process.execPath, [SERVER], { env, encoding: 'utf8', timeout: 10_000 });
    expect(noKey.status).to.equal(1);
    expect(noKey.stderr).to.include('KEY_HASH_SECRET must be set');
    const noBus = spawnSync(process.execPath, [SERVER], { env: { ...env, KEY_HASH_SECRET: SECRET }, encoding: 'utf8', timeout: 10_000 });
    expect(noBus.status).to.equal(1);
    expect(noBus.stderr).to.include('BUS_SECRET must be set');
  });
});

describe('demo server on a port already in use', () => {
  it('exits 1 naming the port instead of running without serving', async () => {
    const port = await freePort();
    const taken = (await import('node:net')).createServer().listen(port, '0.0.0.0');
    await new Promise((r) => taken.once('listening', r));
    try {
      const run = spawnSync(process.execPath, [SERVER], { env: { ...process.env, PORT: String(port), LOG_LEVEL: 'warn', KEY_HASH_SECRET: SECRET }, encoding: 'utf8', timeout: 15_000 });
      expect(run.status, run.stderr).to.equal(1);
      expect(run.stderr).to.include(`cannot listen on port ${port}`);
    } finally {
      taken.close();
    }
  });
});

describe('admin API process (npm run admin)', () => {
  it('refuses to start with the .env.example placeholders', () => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      REDIS_URL: 'redis://127.0.0.1:1',
      ADMIN_TOKEN: 'replace-with-an-admin-token',
      BREAK_GLASS_TOKEN: 'replace-with-a-break-glass-token',
      KEY_HASH_SECRET: 'replace-with-a-random-secret',
      POLICY_SECRET: 'replace-with-a-third-random-secret',
    };
    const run = spawnSync(process.execPath, [join(ROOT, 'dist/admin/server.js')], { env, encoding: 'utf8', timeout: 10_000 });
    expect(run.status).to.equal(1);
    for (const name of ['ADMIN_TOKEN', 'BREAK_GLASS_TOKEN', 'KEY_HASH_SECRET', 'POLICY_SECRET']) expect(run.stderr).to.include(`${name} still holds the .env.example placeholder`);
  });

  it('refuses to start without its tokens, naming every missing setting', () => {
    const env: NodeJS.ProcessEnv = { ...process.env, REDIS_URL: 'redis://127.0.0.1:1', ADMIN_TOKEN: 'same-token-0123456789', BREAK_GLASS_TOKEN: 'same-token-0123456789' };
    delete env.KEY_HASH_SECRET;
    const run = spawnSync(process.execPath, [join(ROOT, 'dist/admin/server.js')], { env, encoding: 'utf8', timeout: 10_000 });
    expect(run.status).to.equal(1);
    expect(run.stderr).to.include('KEY_HASH_SECRET must be set');
    expect(run.stderr).to.include('BREAK_GLASS_TOKEN must differ from ADMIN_TOKEN');
    delete env.ADMIN_TOKEN;
    const none = spawnSync(process.execPath, [join(ROOT, 'dist/admin/server.js')], { env, encoding: 'utf8', timeout: 10_000 });
    expect(none.status).to.equal(1);
    expect(none.stderr).to.include('ADMIN_TOKEN must be set');
  });
});

describe('policy check (npm run policy:check)', () => {
  it('accepts the demo policy and rejects a bad one with every problem, exit 1', () => {
    const ok = spawnSync(process.execPath, [join(ROOT, 'dist/admin/policy-check.js'), join(ROOT, 'demo/policy.json')], { encoding: 'utf8' });
    expect(ok.status).to.equal(0);
    expect(ok.stdout).to.include('valid, version 1');
    const dir = mkdtempSync(join(tmpdir(), 'rl-check-'));
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ version: 1, plans: { p: { windows: [{ name: 'w', limit: 5, windowMs: 10 }] } }, defaultPlan: 'p', anonymousPlan: 'q' }));
    const run = spawnSync(process.execPath, [join(ROOT, 'dist/admin/policy-check.js'), bad], { encoding: 'utf8' });
    expect(run.status).to.equal(1);
    expect(run.stdout).to.include('plans.p.windows.0.windowMs: must be greater than or equal to 1000');
    expect(run.stdout).to.include('anonymousPlan: unknown plan "q"');
  });
});

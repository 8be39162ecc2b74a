import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';
import { consumerProjects, TYPES_EXPRESS, TYPES_NODE } from './pack-consumers.js';

/**
 * `npm run test:pack`: the install story, checked the way a gateway team meets it. Packs this
 * repository, installs the tarball next to Express 5 in a scratch app, and asserts: few packages beyond
 * Express's own, one express, no dependency with an install script, the entry point loads from ESM
 * and from CommonJS, the admin stays out until its peers are installed, the bins run, and small
 * TypeScript consumers compile (ESM, CommonJS node16 and commonjs). Needs the npm registry; CI runs it
 * after `npm test` (`.ci/run`). Prints the measured figures; asserts no wall-clock time.
 */

/** Packages the tarball may add beyond Express's own (see the CHANGELOG for what they are). */
const MAX_EXTRA_PACKAGES = 13;
const root = fileURLToPath(new URL('../..', import.meta.url));
const tsc = join(root, 'node_modules/typescript/bin/tsc');
const failures: string[] = [];
const figures: Array<[string, string, string]> = [];

function check(ok: boolean, what: string): void {
  process.stdout.write(`${ok ? 'ok  ' : 'FAIL'} ${what}\n`);
  if (!ok) failures.push(what);
}

function run(cmd: string, args: string[], cwd: string, timeoutMs = 300_000): { code: number | null; out: string; stdout: string; ms: number } {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: timeoutMs, env: { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false' } });
  return { code: r.status, stdout: r.stdout ?? '', out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}`, ms: performance.now() - t0 };
}

/** Runs a command that must succeed; its stdout. */
function must(cmd: string, args: string[], cwd: string, timeoutMs?: number): string {
  const r = run(cmd, args, cwd, timeoutMs);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.code}):\n${r.out}`);
  return r.stdout;
}

/** Lock entries reachable from `start` through dependencies, resolved the way Node looks them up. */
function closure(lock: Record<string, { dependencies?: Record<string, string>; peerDependencies?: Record<string, string> }>, start: string): Set<string> {
  const seen = new Set<string>();
  const visit = (path: string): void => {
    if (seen.has(path)) return;
    seen.add(path);
    for (const dep of Object.keys({ ...lock[path]?.dependencies, ...lock[path]?.peerDependencies })) {
      for (let base = path; ;) {
        const candidate = `${base ? `${base}/` : ''}node_modules/${dep}`;
        if (lock[candidate]) {
          visit(candidate);
          break;
        }
        if (!base) break;
        const i = base.lastIndexOf('/node_modules/');
        base = i < 0 ? '' : base.slice(0, i);
      }
    }
  };
  visit(start);
  return seen;
}

/** Bytes of a package directory, not counting packages nested in it. */
function bytes(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) total += e.name === 'node_modules' ? 0 : bytes(join(dir, e.name));
    else if (e.isFile()) total += statSync(join(dir, e.name)).size;
  }
  return total;
}

/** `npm start` in this repository until the demo answers /healthz; the milliseconds it took. */
async function timeStart(): Promise<number> {
  const port = await freePort();
  const t0 = performance.now();
  const child = spawn('npm', ['start'], { cwd: root, detached: true, stdio: 'ignore', env: { ...process.env, PORT: String(port), LOG_LEVEL: 'warn' } });
  try {
    for (const deadline = t0 + 120_000; performance.now() < deadline;) {
      const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return performance.now() - t0;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('npm start did not serve /healthz within 120 s');
  } finally {
    if (child.pid !== undefined) process.kill(-child.pid, 'SIGTERM');
  }
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), 'frl-pack-'));
  try {
    const packed = JSON.parse(must('npm', ['pack', '--json', '--pack-destination', tmp], root).replace(/^[^]*?^\[$/m, '[')) as Array<{
      filename: string;
      size: number;
      unpackedSize: number;
      files: Array<{ path: string }>;
    }>;
    const pack = packed[0]!;
    const paths = pack.files.map((f) => f.path);
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/cjs/index.cjs', 'dist/cjs/index.d.ts', 'dist/admin/index.js', 'dist/bus/lua/round.lua', 'LICENSE', 'CHANGELOG.md', 'README.md'])
      check(paths.includes(f), `the tarball holds ${f}`);
    check(!paths.some((p) => /^dist\/(test|demo|scripts)\//.test(p)), 'the tarball holds no tests, demo or scripts');
    const shebangs = ['server', 'worker', 'policy-check'].filter((b) => readFileSync(join(root, `dist/admin/${b}.js`), 'utf8').startsWith('#!/usr/bin/env node\n'));
    check(shebangs.length === 3, 'the three bins start with a node shebang');
    const map = JSON.parse(readFileSync(join(root, 'dist/middleware/rate-limiter.js.map'), 'utf8')) as { sourcesContent?: string[] };
    check(typeof map.sourcesContent?.[0] === 'string' && map.sourcesContent[0].includes('export function rateLimiter'), 'source maps carry their sources');
    figures.push(['tarball', `${(pack.size / 1024).toFixed(0)} kB packed, ${(pack.unpackedSize / 1024).toFixed(0)} kB unpacked, ${paths.length} files`, 'npm pack']);

    const app = join(tmp, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    const install = run('npm', ['install', 'express@5', join(tmp, pack.filename)], app);
    check(install.code === 0, 'npm install express@5 <tarball> succeeds');
    if (install.code !== 0) throw new Error(install.out);
    // npm lists a tarball's own `prepare` (it would run for a git or folder install, never from the
    // registry); any other package named there would need approval from every adopter.
    const scriptWarnings = install.out.split('\n').filter((l) => /install-scripts\s+\S+@/.test(l) && !/fleet-ratelimit@[^ ]+ \(prepare:/.test(l));
    check(scriptWarnings.length === 0, `no dependency has an install script${scriptWarnings.length ? `: ${scriptWarnings.join('; ')}` : ''}`);

    const lock = (JSON.parse(readFileSync(join(app, 'package-lock.json'), 'utf8')) as { packages: Parameters<typeof closure>[0] }).packages;
    const installed = Object.keys(lock).filter((k) => k !== '');
    const expressOwn = closure(lock, 'node_modules/express');
    const extra = installed.filter((k) => !expressOwn.has(k));
    const extraBytes = extra.reduce((n, k) => n + bytes(join(app, k)), 0);
    check(extra.length <= MAX_EXTRA_PACKAGES, `${extra.length} packages beyond Express's ${expressOwn.size} (at most ${MAX_EXTRA_PACKAGES})`);
    for (const banned of ['bullmq', 'helmet', 'msgpackr', 'ioredis', 'pino']) check(!installed.some((k) => k.endsWith(`node_modules/${banned}`)), `${banned} is not installed`);
    check(installed.filter((k) => /(^|\/)node_modules\/express$/.test(k)).length === 1, 'one copy of express in the lock');
    const copies = run('npm', ['ls', 'express', '--all', '--parseable'], app)
      .out.split('\n')
      .filter((l) => /node_modules[\\/]express$/.test(l.trim()));
    check(copies.length === 1, `npm ls express --all: ${copies.length} copy`);
    figures.push([
      'install',
      `${installed.length} packages, ${(installed.reduce((n, k) => n + bytes(join(app, k)), 0) / 1e6).toFixed(1)} MB; beyond Express: ${extra.length} packages, ${(extraBytes / 1e6).toFixed(1)} MB`,
      'npm install express@5 <tarball>',
    ]);

    const esm = run(
      'node',
      [
        '--input-type=module',
        '-e',
        "import * as f from 'fleet-ratelimit'; import { createRequire } from 'node:module'; const c = createRequire(import.meta.url)('fleet-ratelimit'); console.log(typeof f.rateLimiter, typeof f.definePolicy, c.PolicyError === f.PolicyError);",
      ],
      app,
    );
    check(esm.out.trim() === 'function function true', 'the entry point loads from ESM, and require() gives the same module');
    writeFileSync(join(app, 'load.cjs'), "const { rateLimiter, PolicyError } = require('fleet-ratelimit'); console.log(typeof rateLimiter, PolicyError.name);\n");
    check(run('node', ['load.cjs'], app).out.trim() === 'function PolicyError', 'the entry point loads from CommonJS (require)');
    const fleet = run(
      'node',
      [
        '--input-type=module',
        '-e',
        "import { rateLimiter } from 'fleet-ratelimit'; try { rateLimiter({ policy: { version: 1, defaultPlan: 'p', anonymousPlan: 'p', plans: { p: { windows: [{ name: 'w', limit: 1, windowMs: 1000 }] } } }, identify: () => undefined, keyHash: { versions: [{ version: 'v1', secret: 'k'.repeat(32) }] }, redis: { busSecret: { versions: [{ version: 'b1', secret: 'b'.repeat(32) }] } } }); console.log('no error'); } catch (e) { console.log(e.code, e.problems?.[0]?.path); }",
      ],
      app,
    );
    check(fleet.out.trim() === 'RL_CONFIG redis', `joining a fleet without ioredis installed is a coded error naming redis (${fleet.out.trim()})`);
    const admin = run('node', ['--input-type=module', '-e', "import('fleet-ratelimit/admin').then(() => console.log('loaded'), (e) => console.log(e.code))"], app);
    check(admin.out.trim() === 'ERR_MODULE_NOT_FOUND', 'fleet-ratelimit/admin needs its optional peers (not installed here)');
    const policyFile = join(app, 'policy.json');
    writeFileSync(policyFile, readFileSync(join(root, 'demo/policy.json')));
    const checked = run(join(app, 'node_modules/.bin/fleet-ratelimit-policy-check'), [policyFile], app);
    check(checked.code === 0 && checked.out.includes('valid, version 1'), 'the fleet-ratelimit-policy-check bin validates a policy');

    for (const withTypes of [false, true]) {
      if (withTypes) must('npm', ['install', '--save-dev', TYPES_EXPRESS, TYPES_NODE], app);
      else must('npm', ['install', '--save-dev', TYPES_NODE], app);
      for (const p of consumerProjects(withTypes)) {
        const dir = join(app, p.name);
        mkdirSync(dir, { recursive: true });
        for (const [file, text] of Object.entries(p.files)) writeFileSync(join(dir, file), text);
        const r = run('node', [tsc, '-p', dir], app);
        const ok = p.expectError !== undefined ? r.code !== 0 && r.out.includes(p.expectError) : r.code === 0;
        check(ok, `TypeScript consumer ${p.name}: ${p.what}${ok ? '' : `\n${r.out}`}`);
        if (ok && p.run !== undefined) {
          const out = run('node', [join(dir, p.run)], app);
          check(out.code === 0 && out.out.includes('consumer ok'), `${p.name} runs${out.code === 0 ? '' : `\n${out.out}`}`);
        }
      }
    }

    const startMs = await timeStart();
    figures.push(['npm start → first served request', `${(startMs / 1000).toFixed(1)} s (dist already built)`, 'npm start; poll GET /healthz']);
    const pc = run('npm', ['run', 'policy:check', '--', 'demo/policy.json'], root);
    check(pc.code === 0, 'npm run policy:check -- demo/policy.json passes');
    figures.push(['policy:check', `${(pc.ms / 1000).toFixed(1)} s`, 'npm run policy:check -- demo/policy.json']);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  process.stdout.write(`\n| figure | measured | command |\n|---|---|---|\n${figures.map((f) => `| ${f.join(' | ')} |`).join('\n')}\n`);
  if (failures.length) {
    process.stderr.write(`\npack check: ${failures.length} failed:\n${failures.map((f) => `  - ${f.split('\n')[0]}`).join('\n')}\n`);
    process.exitCode = 1;
  } else process.stdout.write('\npack check: all passed\n');
}

await main();

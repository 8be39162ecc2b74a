import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

/*
 * No Docker engine runs where the tests run, so the compose file is checked here: its structure (what
 * `docker compose config` would reject, and what this project requires of it) and that the variables
 * it sets are exactly ones the programs read, including every one they refuse to start without.
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const read = (path: string): string => readFileSync(`${ROOT}${path}`, 'utf8');

interface Service {
  image?: string;
  build?: string;
  command?: string[];
  environment?: Record<string, string>;
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  volumes?: string[];
}

const compose = parse(read('docker-compose.yml'), { merge: true }) as { services: Record<string, Service>; volumes?: Record<string, unknown> };

/** The program a service runs, and the variables it cannot start without. */
const PROGRAMS: Record<string, { entry: string; required: string[] }> = {
  'dist/demo/server.js': { entry: 'demo/server.ts', required: ['REDIS_URL', 'KEY_HASH_SECRET', 'BUS_SECRET', 'POLICY_SECRET'] },
  'dist/admin/server.js': { entry: 'admin/server.ts', required: ['REDIS_URL', 'ADMIN_TOKEN', 'BREAK_GLASS_TOKEN', 'KEY_HASH_SECRET', 'POLICY_SECRET'] },
  'dist/admin/worker.js': { entry: 'admin/worker.ts', required: ['REDIS_URL'] },
};

/** Environment variables a source file reads (`env.X` or `process.env.X`). */
function readsOf(path: string): Set<string> {
  return new Set([...read(path).matchAll(/\benv\.([A-Z][A-Z0-9_]*)/g)].map((m) => m[1]!));
}

describe('docker-compose.yml and the image (K2)', () => {
  it('has Redis with persistence, three gateways on distinct ports, the admin API and the worker', () => {
    const s = compose.services;
    expect(Object.keys(s).sort()).to.deep.equal(['admin', 'gateway-1', 'gateway-2', 'gateway-3', 'grafana', 'prometheus', 'redis', 'worker']);
    expect(s.redis!.command).to.include('--appendonly');
    const hostPorts = Object.values(s).flatMap((x) => (x.ports ?? []).map((p) => p.split(':')[0]));
    expect(new Set(hostPorts).size).to.equal(hostPorts.length);
    const nodeIds = ['gateway-1', 'gateway-2', 'gateway-3'].map((g) => s[g]!.environment!.NODE_ID);
    expect(new Set(nodeIds).size).to.equal(3);
  });

  it('gives every service a healthcheck, and starts each only once what it depends on is healthy', () => {
    for (const [name, svc] of Object.entries(compose.services)) {
      expect(svc.healthcheck?.test, `${name}.healthcheck`).to.be.an('array').that.is.not.empty;
      for (const [dep, cond] of Object.entries(svc.depends_on ?? {})) {
        expect(compose.services, `${name} depends on ${dep}`).to.have.property(dep);
        expect(cond.condition, `${name} → ${dep}`).to.equal('service_healthy');
      }
      if (!['redis', 'prometheus', 'grafana'].includes(name)) expect(svc.depends_on, `${name}.depends_on`).to.have.property('redis');
    }
  });

  it('sets for each program exactly variables it reads, and every one it cannot start without', () => {
    for (const [name, svc] of Object.entries(compose.services)) {
      if (['redis', 'prometheus', 'grafana'].includes(name)) continue;
      const program = PROGRAMS[svc.command?.[1] ?? 'dist/demo/server.js'];
      expect(program, `${name} runs a known program`).to.not.equal(undefined);
      const reads = readsOf(program!.entry);
      const sets = Object.keys(svc.environment ?? {});
      expect(
        sets.filter((v) => !reads.has(v)),
        `${name} sets variables ${program!.entry} never reads`,
      ).to.deep.equal([]);
      expect(
        program!.required.filter((v) => !sets.includes(v)),
        `${name} lacks required variables`,
      ).to.deep.equal([]);
    }
  });

  it('takes every secret from .env, and .env.example lists exactly those', () => {
    const interpolated = new Set([...read('docker-compose.yml').matchAll(/\$\{([A-Z][A-Z0-9_]*):\?/g)].map((m) => m[1]!));
    const example = read('.env.example')
      .split('\n')
      .filter((l) => /^[A-Z]/.test(l))
      .map((l) => l.split('=')[0]!);
    expect([...interpolated].sort()).to.deep.equal([...example].sort());
    expect([...interpolated].sort()).to.deep.equal(['ADMIN_TOKEN', 'BREAK_GLASS_TOKEN', 'BUS_SECRET', 'GRAFANA_ADMIN_PASSWORD', 'KEY_HASH_SECRET', 'POLICY_SECRET']);
    // No secret is written into the compose file itself.
    for (const svc of Object.values(compose.services)) {
      for (const [k, v] of Object.entries(svc.environment ?? {})) if (/SECRET|TOKEN|PASSWORD/.test(k)) expect(v, k).to.match(/^\$\{/);
    }
  });

  it('builds one multi-stage image (npm ci, build, production deps only) that runs as a non-root user with a healthcheck', () => {
    const dockerfile = read('Dockerfile');
    expect(dockerfile.match(/^FROM /gm)).to.have.length(2);
    expect(dockerfile).to.match(/RUN npm ci/);
    // The gateway, admin API and worker need the package's peers, which are devDependencies here: the
    // install that drops the dev dependencies names each and moves it to the production ones first
    // (under --omit=dev npm leaves out a listed dev dependency even when it is named). That the
    // image then runs is what scripts/image-check.sh shows.
    const install = dockerfile.slice(dockerfile.indexOf('npm install --save-prod'));
    expect(install).to.match(/^npm install --save-prod --save-exact --omit=dev /);
    const peers = Object.keys((JSON.parse(read('package.json')) as { peerDependencies: Record<string, string> }).peerDependencies).filter((n) => !n.startsWith('@types/'));
    for (const peer of peers) expect(install).to.include(`'${peer}'`);
    expect(dockerfile).to.not.match(/--no-save/);
    expect(dockerfile).to.match(/^USER node$/m);
    expect(dockerfile).to.match(/^HEALTHCHECK /m);
    expect(dockerfile).to.match(/\/healthz/);
  });

  it('has Prometheus scrape every gateway and the admin app, with the alert rules mounted where its config reads them', () => {
    const prom = parse(read('deploy/prometheus/prometheus.yml')) as { rule_files: string[]; scrape_configs: Array<{ static_configs: Array<{ targets: string[] }> }> };
    const targets = prom.scrape_configs.flatMap((c) => c.static_configs.flatMap((x) => x.targets)).sort();
    expect(targets).to.deep.equal(['admin:3001', 'gateway-1:3000', 'gateway-2:3000', 'gateway-3:3000']);
    const mounts = compose.services.prometheus!.volumes ?? [];
    for (const file of prom.rule_files)
      expect(
        mounts.some((m) => m.split(':')[1] === file),
        file,
      ).to.equal(true);
  });

  it('provisions Grafana with Prometheus and the enforcement-health dashboard, mounted where the provisioning points', () => {
    const mounts = compose.services.grafana!.volumes ?? [];
    const provider = parse(read('deploy/grafana/provisioning/dashboards/dashboards.yml')) as { providers: Array<{ options: { path: string } }> };
    const dashboardsDir = provider.providers[0]!.options.path;
    expect(mounts.some((m) => m.split(':')[1] === dashboardsDir && read(`${m.split(':')[0]!.replace(/^\.\//, '')}/enforcement-health.json`).length > 0)).to.equal(true);
    const ds = parse(read('deploy/grafana/provisioning/datasources/prometheus.yml')) as { datasources: Array<{ url: string; uid: string }> };
    expect(ds.datasources[0]!.url).to.equal('http://prometheus:9090');
    expect(compose.services.grafana!.depends_on).to.have.property('prometheus');
  });
});

import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { parse } from 'yaml';
import { MemoryBus } from '../../bus/memory.js';
import { systemClock } from '../../lib/clock.js';
import { rateLimiter, type RateLimiterMiddleware } from '../../middleware/rate-limiter.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';

/*
 * The alert rules as npm test sees them, promtool or not: every rule well formed, the alerts the
 * operators need present, every metric an expression names one the limiter exports, and every alert
 * unit-tested in deploy/prometheus/alerts.test.yml, which `npm run test:alerts` runs with promtool.
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

interface Rule {
  alert: string;
  expr: string;
  for: string;
  labels: { severity: string };
  annotations: { summary: string };
}

/** A fleet member (an owner too, over the in-memory bus), so the owner's series are exported as well. */
const member = (): RateLimiterMiddleware =>
  rateLimiter({
    policy: demoPolicy(),
    identify: () => undefined,
    keyHash: TEST_KEY_HASH,
    nodeId: 'alerts-node',
    bus: new MemoryBus({ shards: 64, roundMs: 25, clock: systemClock }),
    logger: captureLogger().logger,
  });
/** The metric names `text` exports: a histogram's series are its name with _bucket, _count or _sum. */
function exportedNames(text: string): (name: string) => boolean {
  const types = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)/gm)].map((m) => [m[1]!, m[2]!]));
  return (name) => types.has(name) || types.get(name.replace(/_(bucket|count|sum)$/, '')) === 'histogram';
}
const rules = (parse(readFileSync(`${ROOT}deploy/prometheus/alerts.yml`, 'utf8')) as { groups: Array<{ name: string; rules: Rule[] }> }).groups.flatMap((g) => g.rules);

interface AlertTest {
  eval_time: string;
  alertname: string;
  exp_alerts?: Array<{ exp_labels?: Record<string, string>; exp_annotations?: Record<string, string> }>;
}

const promtoolTests = parse(readFileSync(`${ROOT}deploy/prometheus/alerts.test.yml`, 'utf8')) as {
  rule_files: string[];
  tests: Array<{ name: string; input_series: Array<{ series: string; values: string }>; alert_rule_test?: AlertTest[] }>;
};

describe('Prometheus alert rules (deploy/prometheus/alerts.yml)', () => {
  it('are well formed: name, expression, duration, severity, summary', () => {
    expect(rules.length).to.be.at.least(5);
    for (const r of rules) {
      expect(r.alert, 'alert').to.match(/^[A-Z][A-Za-z]+$/);
      expect(r.expr, `${r.alert}.expr`).to.be.a('string').that.is.not.empty;
      expect(r.for, `${r.alert}.for`).to.match(/^\d+[smh]$/);
      expect(r.labels?.severity, `${r.alert}.severity`).to.be.oneOf(['page', 'ticket']);
      expect(r.annotations?.summary, `${r.alert}.summary`).to.be.a('string').that.is.not.empty;
      // Balanced parentheses and braces: the cheapest syntax check promtool would also make.
      for (const [open, close] of [
        ['(', ')'],
        ['{', '}'],
      ] as const) {
        expect(r.expr.split(open).length, `${r.alert}: ${open}${close}`).to.equal(r.expr.split(close).length);
      }
    }
  });

  it('cover capacity 503s over budget, fast path over 1 %, fold age over two rounds, a degraded node, reports missing', () => {
    const byName = new Map(rules.map((r) => [r.alert, r.expr]));
    expect(byName.get('RateLimiterCapacityErrorBudget')).to.match(/class=~"capacity\|fail_closed"/);
    expect(byName.get('RateLimiterFastPathHigh')).to.match(/> 0\.01\b/);
    expect(byName.get('RateLimiterFoldAgeHigh')).to.match(/fleet_ratelimit_fold_age_seconds\) > 0\.05\b/);
    expect(byName.get('RateLimiterNodeDegraded')).to.match(/fleet_ratelimit_degraded/);
    expect(byName.get('RateLimiterReportsMissing')).to.match(/fleet_ratelimit_reports_total/);
    // A fleet of one admits and never reports (test/http/metrics.test.ts): it must not page.
    expect(byName.get('RateLimiterReportsMissing')).to.match(/fleet_ratelimit_fleet_size\) > 1\b/);
  });

  it('each have a promtool test that fires with their labels and summary, and one that stays quiet', () => {
    expect(promtoolTests.rule_files).to.deep.equal(['alerts.yml']);
    const cases = promtoolTests.tests.flatMap((t) => (t.alert_rule_test ?? []).map((c) => ({ test: t.name, ...c })));
    const known = new Set(rules.map((r) => r.alert));
    for (const c of cases) expect(known.has(c.alertname), `${c.test}: ${c.alertname} is not in alerts.yml`).to.equal(true);
    for (const r of rules) {
      const mine = cases.filter((c) => c.alertname === r.alert);
      const firing = mine.flatMap((c) => c.exp_alerts ?? []);
      expect(firing, `${r.alert}: no promtool case where it fires`).to.not.be.empty;
      for (const a of firing) {
        expect(a.exp_labels?.severity, `${r.alert}: expected severity`).to.equal(r.labels.severity);
        expect(a.exp_annotations?.summary, `${r.alert}: expected summary`).to.be.a('string').that.is.not.empty;
      }
      expect(
        mine.filter((c) => (c.exp_alerts ?? []).length === 0),
        `${r.alert}: no promtool case where it stays quiet`,
      ).to.not.be.empty;
    }
  });

  it('name only metrics the limiter exports', async () => {
    const limiter = member();
    try {
      const exported = exportedNames(await limiter.metrics.metrics());
      for (const r of rules) {
        for (const [name] of r.expr.matchAll(/fleet_ratelimit_[a-z_]+/g)) expect(exported(name), `${r.alert} names ${name}`).to.equal(true);
      }
    } finally {
      await limiter.close();
    }
  });

  it('are tested by promtool on series shaped as the limiter exports them: names, labels, classes', async () => {
    const limiter = member();
    try {
      // Every label each exported series carries, and every value of it, by metric name.
      const exported = new Map<string, Map<string, Set<string>>>();
      for (const [, name, labels] of (await limiter.metrics.metrics()).matchAll(/^(fleet_ratelimit_\w+)\{([^}]*)\} /gm)) {
        const byLabel = exported.get(name!) ?? new Map<string, Set<string>>();
        exported.set(name!, byLabel);
        for (const [, label, value] of labels!.matchAll(/(\w+)="([^"]*)"/g)) byLabel.set(label!, (byLabel.get(label!) ?? new Set()).add(value!));
      }
      for (const t of promtoolTests.tests) {
        for (const { series } of t.input_series) {
          const m = /^(\w+)\{(.*)\}$/.exec(series);
          expect(m, `${t.name}: ${series}`).to.not.equal(null);
          const [, name, labels] = m!;
          // What Prometheus adds to every scraped series: job and instance, and up itself.
          const labelNames = [...labels!.matchAll(/(\w+)="([^"]*)"/g)].map(([, label, value]) => [label!, value!] as const).filter(([label]) => label !== 'job' && label !== 'instance');
          if (name === 'up') {
            expect(labelNames, `${t.name}: ${series}`).to.be.empty;
            continue;
          }
          const byLabel = exported.get(name!);
          expect(byLabel, `${t.name}: ${name} is not exported`).to.not.equal(undefined);
          expect(labelNames.map(([label]) => label).sort(), `${t.name}: labels of ${series}`).to.deep.equal([...byLabel!.keys()].sort());
          for (const [label, value] of labelNames) if (label !== 'node') expect(byLabel!.get(label), `${t.name}: ${series}`).to.include(value);
        }
      }
    } finally {
      await limiter.close();
    }
  });

  it('group by node over series that carry node, also once merged into the app’s registry', async () => {
    const limiter = member();
    try {
      const merged = await Registry.merge([new Registry(), limiter.metrics]).metrics();
      const byNode = rules.filter((r) => /by \(node\)/.test(r.expr));
      expect(byNode.map((r) => r.alert)).to.include.members(['RateLimiterFoldAgeHigh', 'RateLimiterNodeDegraded', 'RateLimiterReportsMissing']);
      for (const r of byNode) {
        for (const [name] of r.expr.matchAll(/fleet_ratelimit_[a-z_]+/g)) {
          const series = merged.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
          expect(series, `${r.alert}: ${name}`).to.not.be.empty;
          for (const line of series) expect(line, `${r.alert}: ${line}`).to.include('node="alerts-node"');
        }
      }
    } finally {
      await limiter.close();
    }
  });

  it('the Grafana dashboard answers the on-call question with metrics the limiter exports', async () => {
    const dash = JSON.parse(readFileSync(`${ROOT}deploy/grafana/dashboards/enforcement-health.json`, 'utf8')) as {
      uid: string;
      panels: Array<{ title: string; datasource: { uid: string }; targets: Array<{ expr: string }> }>;
    };
    const titles = dash.panels.map((p) => p.title);
    for (const needed of ['Degraded nodes', 'Worst fold age', 'Fast path share', 'Credit on lease / allowance', 'Decisions by class (per second)']) expect(titles).to.include(needed);
    const limiter = member();
    try {
      const exported = exportedNames(await limiter.metrics.metrics());
      for (const p of dash.panels) {
        expect(p.datasource.uid, p.title).to.equal('prometheus');
        for (const t of p.targets) {
          for (const [name] of t.expr.matchAll(/fleet_ratelimit_[a-z_]+/g)) {
            expect(exported(name), `${p.title} names ${name}`).to.equal(true);
          }
        }
      }
    } finally {
      await limiter.close();
    }
  });
});

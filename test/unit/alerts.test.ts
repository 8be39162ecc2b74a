import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { parse } from 'yaml';
import { rateLimiter } from '../../middleware/rate-limiter.js';
import { demoPolicy, TEST_KEY_HASH } from '../support/fixtures.js';
import { captureLogger } from '../support/logs.js';

/*
 * The alert rules, checked without promtool (not available here): every rule well formed, the five
 * alerts the operators need present, and every metric an expression names one the limiter exports.
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

interface Rule {
  alert: string;
  expr: string;
  for: string;
  labels: { severity: string };
  annotations: { summary: string };
}

const rules = (parse(readFileSync(`${ROOT}deploy/prometheus/alerts.yml`, 'utf8')) as { groups: Array<{ name: string; rules: Rule[] }> }).groups.flatMap((g) => g.rules);

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
      for (const [open, close] of [['(', ')'], ['{', '}']] as const) {
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

  it('name only metrics the limiter exports', async () => {
    const limiter = rateLimiter({ policy: demoPolicy(), identify: () => undefined, keyHash: TEST_KEY_HASH, logger: captureLogger().logger });
    try {
      const exported = new Set([...(await limiter.metrics.metrics()).matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
      for (const r of rules) {
        for (const [name] of r.expr.matchAll(/fleet_ratelimit_[a-z_]+/g)) expect(exported.has(name), `${r.alert} names ${name}`).to.equal(true);
      }
    } finally {
      await limiter.close();
    }
  });

  it('group by node over series that carry node, also once merged into the app’s registry', async () => {
    const limiter = rateLimiter({ policy: demoPolicy(), identify: () => undefined, keyHash: TEST_KEY_HASH, nodeId: 'alerts-node', logger: captureLogger().logger });
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
    const limiter = rateLimiter({ policy: demoPolicy(), identify: () => undefined, keyHash: TEST_KEY_HASH, logger: captureLogger().logger });
    try {
      const exported = new Set([...(await limiter.metrics.metrics()).matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
      for (const p of dash.panels) {
        expect(p.datasource.uid, p.title).to.equal('prometheus');
        for (const t of p.targets) {
          for (const [name] of t.expr.matchAll(/fleet_ratelimit_[a-z_]+/g)) {
            expect(exported.has(name.replace(/_bucket$/, '')), `${p.title} names ${name}`).to.equal(true);
          }
        }
      }
    } finally {
      await limiter.close();
    }
  });
});

import type { ConcentrationSummary, GateVerdict } from '../lib/owner/concentration.js';
import type { FleetHealth, NodeHealth } from './fleet-health.js';

/** How often the page reloads itself, seconds. */
export const REFRESH_SECONDS = 5;

/** `text` safe inside HTML text and double-quoted attributes. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d1d1f;background:#fafafa}
h1{font-size:1.2rem;margin:0 0 1rem}
.verdict{padding:.8rem 1rem;border-radius:6px;font-size:1.1rem;font-weight:600;margin-bottom:1rem}
.verdict.ok{background:#e3f6e5;color:#14532d;border:1px solid #86c98f}
.verdict.bad{background:#fde8e8;color:#7f1d1d;border:1px solid #e49a9a}
.verdict ul{margin:.4rem 0 0;font-weight:400;font-size:.95rem}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem;margin:0 0 1rem}
dl.summary dt{color:#555}dl.summary dd{margin:0;font-variant-numeric:tabular-nums}
table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #ddd;padding:.3rem .6rem;text-align:left;font-variant-numeric:tabular-nums}
th{background:#f0f0f0}td:first-child{white-space:nowrap}td.bad{background:#fde8e8;color:#7f1d1d;font-weight:600}
footer{margin-top:1rem;color:#666;font-size:.85rem}
form{display:inline}`;

/** A whole page around `body`, reloading itself when `refresh`. */
function page(title: string, body: string, refresh: boolean): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>${refresh ? `<meta http-equiv="refresh" content="${REFRESH_SECONDS}">` : ''}
<meta name="viewport" content="width=device-width,initial-scale=1"><style>${STYLE}</style></head>
<body>${body}</body></html>`;
}

/** The sign-in form: the operator's admin token, posted once for a session cookie. */
export function loginPage(message?: string): string {
  return page(
    'fleet-ratelimit: sign in',
    `<h1>fleet-ratelimit: enforcement health</h1>
${message === undefined ? '' : `<p class="verdict bad" role="alert">${escapeHtml(message)}</p>`}
<form method="post" action="/admin/ui/login">
<label>Admin token <input type="password" name="token" autocomplete="current-password" required minlength="1"></label>
<button type="submit">Sign in</button>
</form>`,
    false,
  );
}

/** Said instead of the page when the fleet's state cannot be read; it reloads itself like the page. */
export function unavailablePage(): string {
  return page(
    'fleet-ratelimit: unavailable',
    `<h1>fleet-ratelimit: enforcement health</h1>
<p class="verdict bad" role="alert">The fleet’s state could not be read from Redis; trying again in ${REFRESH_SECONDS} s</p>`,
    true,
  );
}

/** A table cell, marked bad when `bad`. */
function cell(text: string | number, bad = false): string {
  return `<td${bad ? ' class="bad"' : ''}>${escapeHtml(String(text))}</td>`;
}

/** p50 / p95 ratio to uniform and the key windows measured; '-' with none. */
function concentrationText(c: ConcentrationSummary | undefined): string {
  return c === undefined || c.samples === 0 ? '-' : `${c.p50 ?? '-'} / ${c.p95 ?? '-'} (${c.samples})`;
}

/** What the fleet's concentration says of the leasing protocol, in words. */
const GATE_WORDS: Readonly<Record<GateVerdict, string>> = {
  leasing: 'busy keys’ traffic is concentrated: leasing is needed',
  'fixed-share': 'busy keys’ traffic is evenly spread: a fixed share per node would do for them',
  insufficient: 'too few busy key windows measured yet',
};

/** One row of the nodes table. */
function nodeRow(n: NodeHealth, h: FleetHealth): string {
  const s = n.status;
  if (s === null) return `<tr>${cell(n.node)}<td class="bad" colspan="10">no status from this process yet</td>${cell(`${Math.round(n.lastRoundMsAgo)} ms`)}</tr>`;
  const policyBad = h.policyVersion !== null && s.policyVersion !== h.policyVersion;
  const leases = s.leases.allowance > 0 ? `${s.leases.committed} / ${s.leases.allowance} (${((100 * s.leases.committed) / s.leases.allowance).toFixed(1)} %)` : `${s.leases.committed} / 0`;
  const schemaBad = h.releases.length > 0 && (s.schemaVersion ?? 1) !== h.releases[0]!.schemaVersion;
  return `<tr>${cell(n.node)}${cell(`${s.release ?? 'unknown'} (schema ${s.schemaVersion ?? 1})`, schemaBad)}${cell(s.policyVersion, policyBad)}${cell(s.enforcing ? 'yes' : 'no', !s.enforcing)}${cell(s.degraded ? 'yes' : 'no', s.degraded)}${cell(`${Math.round(s.foldAgeMs)} ms`)}${cell(s.ownedShards)}${cell(leases)}${cell(s.buckets)}${cell(concentrationText(s.concentration))}${cell(s.eventsDropped, s.eventsDropped > 0)}${cell(`${Math.round(n.lastRoundMsAgo)} ms`)}</tr>`;
}

/** The enforcement-health page: one verdict, the fleet's figures, then every node. */
export function healthPage(h: FleetHealth): string {
  const verdict = h.ok
    ? '<div class="verdict ok" data-ok="true">Every node is enforcing the stored policy</div>'
    : `<div class="verdict bad" data-ok="false">Not ok<ul>${h.problems.map((p) => `<li>${escapeHtml(p)}</li>`).join('')}</ul></div>`;
  const owned = h.shards.length - h.unownedShards.length;
  const share = h.leases.allowance > 0 ? ` (${((100 * h.leases.committed) / h.leases.allowance).toFixed(1)} %)` : '';
  return page(
    `fleet-ratelimit: ${h.ok ? 'ok' : 'NOT OK'}`,
    `<h1>fleet-ratelimit: enforcement health</h1>
${verdict}
<dl class="summary">
<dt>Policy version</dt><dd>${h.policyVersion ?? 'none'}</dd>
<dt>Kill switch</dt><dd>${h.enforcing ? 'enforcing' : 'enforcement off'}</dd>
<dt>Nodes</dt><dd>${h.nodes.length}</dd>
<dt>Shards owned</dt><dd>${owned} / ${h.shards.length}</dd>
<dt>Credit leased / allowance</dt><dd>${h.leases.committed} / ${h.leases.allowance}${share}</dd>
<dt>Concentration p50 / p95</dt><dd data-verdict="${h.concentration.verdict}">${escapeHtml(concentrationText(h.concentration))}: ${GATE_WORDS[h.concentration.verdict]} (gate: p95 ≤ ${h.concentration.gateRatio}× uniform, ≥ ${h.concentration.minSamples} windows)</dd>
</dl>
<table>
<thead><tr><th>Node</th><th>Release</th><th>Policy</th><th>Enforcing</th><th>Degraded</th><th>Fold age</th><th>Shards owned</th><th>Credit leased / allowance</th><th>Buckets</th><th>Concentration p50 / p95 (windows)</th><th>Events dropped</th><th>Last round</th></tr></thead>
<tbody>${[...h.nodes]
      .sort((a, b) => (a.node < b.node ? -1 : 1))
      .map((n) => nodeRow(n, h))
      .join('\n')}</tbody>
</table>
<footer>As of ${new Date(h.at).toISOString()} (Redis's clock); this page reloads every ${REFRESH_SECONDS} s.
<form method="post" action="/admin/ui/logout"><button type="submit">Sign out</button></form></footer>`,
    true,
  );
}

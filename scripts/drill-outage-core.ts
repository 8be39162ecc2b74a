import { parseArgs } from 'node:util';
import { KeyHasher } from '../lib/key-id.js';
import { phaseOffset, windowEndMs, windowIdAt, windowStartMs } from '../lib/window.js';

/**
 * The pure part of `npm run drill:outage` (scripts/drill-outage.ts): its flags, the choice of a window
 * the run fits in, and the counts and verdict over what the gateways answered. Nothing here starts a
 * process, reads a clock or touches the network.
 */

export const USAGE = 'usage: npm run drill:outage -- [--rate 30] [--seconds 110] [--outage-at 10] [--outage-seconds 40] [--limit 1000] [--degraded-after-ms 30000] [--nodes 3] [--json]';

/** The hourly window of the drill's plan. */
export const WINDOW_MS = 3_600_000;
/** Time the window must still have left when the drill picks it, beyond the run itself (start-up, warm-up). */
export const WINDOW_MARGIN_MS = 30_000;

/** What the command line asks for. */
export interface DrillOptions {
  /** Requests a second, round robin over the gateways. */
  rate: number;
  /** Length of the request loop, s. */
  seconds: number;
  /** When Redis is frozen (SIGSTOP), s after the first request. */
  outageAt: number;
  /** How long it stays frozen, s. */
  outageSeconds: number;
  /** The key's allowance per hour. */
  limit: number;
  /** DEGRADED_AFTER_MS of every gateway. */
  degradedAfterMs: number;
  /** Gateway processes. */
  nodes: number;
  /** Also print the result as one JSON object. */
  json: boolean;
}

const FLAGS = ['rate', 'seconds', 'outage-at', 'outage-seconds', 'limit', 'degraded-after-ms', 'nodes'] as const;

/** `text` as a whole number in [min, max] (`fallback` when absent), or a problem naming `--flag`. */
function intFlag(flag: string, text: string | undefined, fallback: number, min: number, max: number): number | string {
  if (text === undefined) return fallback;
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) return `--${flag} must be a whole number from ${min} to ${max}, got "${text}"`;
  return n;
}

/** The flags in `argv`, validated; or every problem, each naming its flag. */
export function parseDrillArgs(argv: readonly string[]): DrillOptions | { problems: string[] } {
  let values: Partial<Record<(typeof FLAGS)[number], string>> & { json?: boolean };
  try {
    const options = Object.fromEntries(FLAGS.map((f) => [f, { type: 'string' as const }]));
    ({ values } = parseArgs({ args: [...argv], strict: true, allowPositionals: false, options: { ...options, json: { type: 'boolean' } } }));
  } catch (err) {
    return { problems: [(err as Error).message] };
  }
  const problems: string[] = [];
  const take = (flag: (typeof FLAGS)[number], fallback: number, min: number, max: number): number => {
    const n = intFlag(flag, values[flag], fallback, min, max);
    if (typeof n === 'string') {
      problems.push(n);
      return NaN;
    }
    return n;
  };
  // The backstop of the demo policy allows 1,000 a second per key and each node 2,000 per tenant.
  const rate = take('rate', 30, 1, 500);
  const seconds = take('seconds', 110, 2, (WINDOW_MS - WINDOW_MARGIN_MS) / 1000 - 1);
  const outageAt = take('outage-at', 10, 0, 86_400);
  const outageSeconds = take('outage-seconds', 40, 1, 86_400);
  const limit = take('limit', 1000, 1, 1_000_000);
  const degradedAfterMs = take('degraded-after-ms', 30_000, 100, WINDOW_MS);
  const nodes = take('nodes', 3, 1, 16);
  if (problems.length === 0 && outageAt + outageSeconds >= seconds) {
    problems.push(`--outage-at plus --outage-seconds must end before --seconds (${seconds}), so that something is sent after recovery; got ${outageAt} + ${outageSeconds}`);
  }
  if (problems.length > 0) return { problems };
  return { rate, seconds, outageAt, outageSeconds, limit, degradedAfterMs, nodes, json: values.json === true };
}

/** The window a key id is in at `nowMs`, and how long it has left. */
export interface WindowFit {
  keyId: string;
  windowId: number;
  startMs: number;
  endMs: number;
  leftMs: number;
}

/** Where `keyId`'s window of `windowMs` stands at `nowMs` (its phase offset is the library's). */
export function windowAt(keyId: string, windowMs: number, nowMs: number): WindowFit {
  const offset = phaseOffset(keyId, windowMs);
  const windowId = windowIdAt(nowMs, windowMs, offset);
  const endMs = windowEndMs(windowId, windowMs, offset);
  return { keyId, windowId, startMs: windowStartMs(windowId, windowMs, offset), endMs, leftMs: endMs - nowMs };
}

/**
 * The first key-hash secret among `candidates` under which `apiKey`'s window (hashed as the demo
 * gateway does: version v1) has at least `needMs` left at `nowMs`, with that window; undefined when
 * none does.
 */
export function pickKeyHashSecret(candidates: Iterable<string>, apiKey: string, nowMs: number, needMs: number, windowMs = WINDOW_MS): { secret: string; window: WindowFit; tried: number } | undefined {
  let tried = 0;
  for (const secret of candidates) {
    tried++;
    const keyId = new KeyHasher([{ version: 'v1', secret }], 'v1', 0).hash(apiKey);
    const window = windowAt(keyId, windowMs, nowMs);
    if (window.leftMs >= needMs) return { secret, window, tried };
  }
  return undefined;
}

/** One request of the drill, as the driver saw it. */
export interface Sample {
  /** When it was sent, ms after the first request. */
  sentMs: number;
  /** When its answer (or its failure) came, ms after the first request. */
  doneMs: number;
  /** HTTP status, 0 when nothing answered. */
  status: number;
  /** The answer carried `X-RateLimit-Degraded: true`. */
  degraded: boolean;
}

export type PhaseName = 'before' | 'during' | 'after';
export const PHASES: readonly PhaseName[] = ['before', 'during', 'after'];

/** Counts of one phase (or of the whole run). */
export interface PhaseCounts {
  sent: number;
  admitted: number;
  /** Admitted with `X-RateLimit-Degraded: true`. */
  degradedAdmitted: number;
  refused: number;
  /** Every other answer by status ("0": no answer). */
  other: Record<string, number>;
}

/** The drill's result: counts per phase, and its two bounds. */
export interface DrillReport {
  /** When Redis was frozen and thawed, ms after the first request. */
  outage: { fromMs: number; toMs: number };
  phases: Record<PhaseName, PhaseCounts>;
  total: PhaseCounts;
  limit: number;
  /** Total admitted ≤ limit + degraded admissions while Redis was down. */
  window: { admitted: number; bound: number; ok: boolean };
  /**
   * After recovery, once the total admitted reached the limit: `spentAtMs` when it did (its answer's
   * arrival; null when it never did), `fromMs` the later of that and the thaw, and what was sent from
   * then on and admitted (must be 0).
   */
  afterSpent: { spentAtMs: number | null; fromMs: number | null; sent: number; admitted: number; ok: boolean };
  ok: boolean;
}

const emptyCounts = (): PhaseCounts => ({ sent: 0, admitted: 0, degradedAdmitted: 0, refused: 0, other: {} });

function add(c: PhaseCounts, s: Sample): void {
  c.sent++;
  if (s.status === 200) {
    c.admitted++;
    if (s.degraded) c.degradedAdmitted++;
  } else if (s.status === 429) c.refused++;
  else c.other[String(s.status)] = (c.other[String(s.status)] ?? 0) + 1;
}

/** The phase a request sent at `sentMs` belongs to, for an outage over [fromMs, toMs). */
export function phaseOf(sentMs: number, outage: { fromMs: number; toMs: number }): PhaseName {
  if (sentMs < outage.fromMs) return 'before';
  return sentMs < outage.toMs ? 'during' : 'after';
}

/** Counts `samples` by phase and checks both bounds against `limit`. */
export function summarize(samples: readonly Sample[], outage: { fromMs: number; toMs: number }, limit: number): DrillReport {
  const phases = { before: emptyCounts(), during: emptyCounts(), after: emptyCounts() };
  const total = emptyCounts();
  for (const s of samples) {
    add(phases[phaseOf(s.sentMs, outage)], s);
    add(total, s);
  }
  const bound = limit + phases.during.degradedAdmitted;
  const window = { admitted: total.admitted, bound, ok: total.admitted <= bound };

  // The instant the admissions reached the limit, in the order their answers came.
  let spentAtMs: number | null = null;
  let admitted = 0;
  for (const s of [...samples].sort((a, b) => a.doneMs - b.doneMs)) {
    if (s.status === 200 && ++admitted === limit) {
      spentAtMs = s.doneMs;
      break;
    }
  }
  const fromMs = spentAtMs === null ? null : Math.max(spentAtMs, outage.toMs);
  const later = fromMs === null ? [] : samples.filter((s) => s.sentMs >= fromMs);
  const afterAdmitted = later.filter((s) => s.status === 200).length;
  const afterSpent = { spentAtMs, fromMs, sent: later.length, admitted: afterAdmitted, ok: afterAdmitted === 0 };
  return { outage, phases, total, limit, window, afterSpent, ok: window.ok && afterSpent.ok };
}

/**
 * Per second of the run (by when each request was sent): admitted, of which degraded, refused, other.
 * For `--json`: a run whose totals look off can be read second by second.
 */
export function perSecond(samples: readonly Sample[]): Array<[admitted: number, degraded: number, refused: number, other: number]> {
  const out: Array<[number, number, number, number]> = [];
  for (const s of samples) {
    const i = Math.max(0, Math.floor(s.sentMs / 1000));
    while (out.length <= i) out.push([0, 0, 0, 0]);
    const row = out[i]!;
    if (s.status === 200) {
      row[0]++;
      if (s.degraded) row[1]++;
    } else if (s.status === 429) row[2]++;
    else row[3]++;
  }
  return out;
}

/** 1234567 → "1,234,567". */
const n = (x: number): string => x.toLocaleString('en-US');
const s1 = (ms: number): string => (ms / 1000).toFixed(1);

/** "0" or e.g. "503×2, no answer×1". */
function otherText(other: Record<string, number>): string {
  const parts = Object.entries(other).map(([status, count]) => `${status === '0' ? 'no answer' : status}×${n(count)}`);
  return parts.length ? parts.join(', ') : '0';
}

/**
 * The markdown table of `report`, one row per phase and a total; `failOpen` (optional) is the
 * gateways' own fail-open count per phase (their metrics, read at the phase boundaries).
 */
export function renderTable(report: DrillReport, runMs: number, failOpen?: Partial<Record<PhaseName | 'total', number>>): string {
  const span: Record<PhaseName, string> = {
    before: `0–${s1(report.outage.fromMs)}`,
    during: `${s1(report.outage.fromMs)}–${s1(report.outage.toMs)}`,
    after: `${s1(report.outage.toMs)}–${s1(runMs)}`,
  };
  const fo = (k: PhaseName | 'total'): string => {
    const v = failOpen?.[k];
    return v === undefined || !Number.isFinite(v) ? '–' : n(v);
  };
  const row = (name: string, span: string, c: PhaseCounts, k: PhaseName | 'total'): string =>
    `| ${name} | ${span} | ${n(c.sent)} | ${n(c.admitted)} | ${n(c.degradedAdmitted)} | ${n(c.refused)} | ${otherText(c.other)} | ${fo(k)} |`;
  return [
    '| phase | sent at, s | sent | admitted (200) | of which degraded | refused (429) | other | fail-open (gateway metrics) |',
    '|---|---|---:|---:|---:|---:|---|---:|',
    ...PHASES.map((p) => row(p === 'during' ? 'during (Redis frozen)' : p === 'after' ? 'after recovery' : 'before the outage', span[p], report.phases[p], p)),
    row('**total**', `0–${s1(runMs)}`, report.total, 'total'),
  ].join('\n');
}

/** The two bound lines and the verdict line of `report`. */
export function renderVerdict(report: DrillReport): string {
  const w = report.window;
  const a = report.afterSpent;
  const first = `window bound: admitted ${n(w.admitted)} ${w.ok ? '≤' : '>'} ${n(report.limit)} + ${n(report.phases.during.degradedAdmitted)} degraded admissions during the outage = ${n(w.bound)}: ${w.ok ? 'holds' : 'VIOLATED'}`;
  const second =
    a.spentAtMs === null
      ? `after recovery, once the window is spent: not reached (${n(w.admitted)} admitted of ${n(report.limit)}: the window was never spent)`
      : `after recovery, once the window is spent (admissions reached ${n(report.limit)} at ${s1(a.spentAtMs)} s, counted from ${s1(a.fromMs!)} s): admitted ${n(a.admitted)} of ${n(a.sent)} sent: ${a.ok ? 'holds' : 'VIOLATED'}`;
  const verdict = report.ok
    ? `verdict: PASS — no more than the allowance plus what degraded mode admitted${a.spentAtMs === null ? ' (the window was not spent, so the second bound was not exercised)' : ', and nothing once the window was spent'}`
    : `verdict: FAIL — ${[w.ok ? '' : 'the window admitted past its bound', a.ok ? '' : 'admissions after the window was spent'].filter(Boolean).join('; ')}`;
  return [first, second, verdict].join('\n');
}

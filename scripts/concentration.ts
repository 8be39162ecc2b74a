import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { KeySchema, type StoredNodeStatus } from '../bus/keys.js';
import { gateVerdict, GATE_RATIO, mergeConcentration, MIN_PER_NODE, MIN_SAMPLES, type ConcentrationSummary, type GateVerdict } from '../lib/owner/concentration.js';

/**
 * `npm run concentration -- [--redis URL] [--prefix frl] [--json]`: the per-node-per-key concentration
 * a running fleet's owners measured (what each publishes in its status once a second), merged over
 * the members: the distribution of the ratio to uniform, p50 and p95, and the gate's verdict —
 * fixed share when the p95 is within GATE_RATIO × uniform, leasing above it. Reads Redis only.
 */
const USAGE = 'usage: npm run concentration -- [--redis redis://127.0.0.1:6379 (default $REDIS_URL)] [--prefix frl (default $REDIS_PREFIX)] [--json]';

/** The verdict in words: of the key windows measured (busy ones); quieter keys are not measured. */
const VERDICT: Readonly<Record<GateVerdict, string>> = {
  leasing: `the busy keys measured are concentrated on some nodes: keep leasing (a fixed share would refuse their callers under their limit); keys under ${MIN_PER_NODE} requests per node a window are not measured`,
  'fixed-share': `the busy keys measured are evenly spread: a fixed 1/fleet share per node plus the reserve would do for them ("allocation": "fixed-share"); keys under ${MIN_PER_NODE} requests per node a window are not measured (check small plans with policy:check --fleet)`,
  insufficient: `fewer than ${MIN_SAMPLES} key windows with ${MIN_PER_NODE} requests per node measured yet: no verdict`,
};

function fail(message: string): never {
  process.stderr.write(`concentration: ${message}\n${USAGE}\n`);
  process.exit(2);
}

/** Every member's latest status of its current process, as the health view takes them. */
async function statuses(redis: Redis, prefix: string): Promise<Array<{ node: string; concentration: ConcentrationSummary | undefined }>> {
  const keys = new KeySchema(prefix);
  const [members, epochs, stored] = await Promise.all([redis.zrange(keys.ctl('members'), 0, -1), redis.hgetall(keys.ctl('epochs')), redis.hgetall(keys.ctl('status'))]);
  return members.map((node) => {
    let st: StoredNodeStatus | undefined;
    try {
      st = stored[node] === undefined ? undefined : (JSON.parse(stored[node]!) as StoredNodeStatus);
    } catch {
      st = undefined;
    }
    return { node, concentration: st !== undefined && st.nodeEpoch === epochs[node] ? st.concentration : undefined };
  });
}

function render(fleet: ConcentrationSummary, verdict: GateVerdict, nodes: Array<{ node: string; concentration: ConcentrationSummary | undefined }>, where: string): string {
  const lines = [
    'per-node-per-key concentration: ratio to uniform = fleet size × the busiest node’s share of one key window,',
    `measured by each window's owner when it ends (windows with ≥ ${MIN_PER_NODE} requests per node); 1 = evenly spread, fleet size = one node took all`,
    `fleet ${where}: ${nodes.length} member(s), ${fleet.samples} key window(s) measured`,
    '',
  ];
  if (fleet.samples > 0) {
    lines.push('ratio ≤   windows   share   cumulative');
    let cum = 0;
    for (const [bound, n] of fleet.histogram) {
      cum += n;
      lines.push(`${String(bound).padStart(7)}  ${String(n).padStart(8)}  ${((100 * n) / fleet.samples).toFixed(1).padStart(5)} %  ${((100 * cum) / fleet.samples).toFixed(1).padStart(7)} %`);
    }
    lines.push('', `p50 ≤ ${fleet.p50}, p95 ≤ ${fleet.p95} (upper bounds of their buckets)`);
  }
  lines.push(`gate (p95 ≤ ${GATE_RATIO}× uniform, ≥ ${MIN_SAMPLES} windows): ${verdict} — ${VERDICT[verdict]}`, '', 'node                      windows   p50    p95');
  for (const { node, concentration: c } of nodes) lines.push(`${node.padEnd(24)}  ${String(c?.samples ?? 0).padStart(7)}  ${String(c?.p50 ?? '-').padStart(5)}  ${String(c?.p95 ?? '-').padStart(5)}`);
  return `${lines.join('\n')}\n`;
}

async function main(): Promise<void> {
  let values: { redis?: string; prefix?: string; json?: boolean; help?: boolean };
  try {
    ({ values } = parseArgs({ options: { redis: { type: 'string' }, prefix: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean' } } }));
  } catch (err) {
    fail((err as Error).message);
  }
  if (values.help) return void process.stdout.write(`${USAGE}\n`);
  const url = values.redis ?? process.env.REDIS_URL;
  if (!url) fail('--redis is required when REDIS_URL is not set');
  const prefix = values.prefix ?? process.env.REDIS_PREFIX ?? 'frl';
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false, retryStrategy: () => null });
  try {
    await redis.connect();
    const nodes = await statuses(redis, prefix);
    const fleet = mergeConcentration(nodes.map((n) => n.concentration));
    const verdict = gateVerdict(fleet);
    if (values.json) process.stdout.write(`${JSON.stringify({ ...fleet, verdict, gateRatio: GATE_RATIO, minSamples: MIN_SAMPLES, minPerNode: MIN_PER_NODE, nodes })}\n`);
    else {
      const shown = new URL(url);
      if (shown.password) shown.password = '***';
      process.stdout.write(render(fleet, verdict, nodes, `"${prefix}" on ${shown.toString()}`));
    }
  } catch (err) {
    process.stderr.write(`concentration: cannot read the fleet: ${(err as Error).message}\n`);
    process.exitCode = 1;
  } finally {
    redis.disconnect();
  }
}

void main();

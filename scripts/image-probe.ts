import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { KeyHasher } from '../lib/key-id.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../lib/window.js';

/**
 * `node dist/scripts/image-probe.js --standalone URL --gateway URL (×3) --admin URL`: the probes
 * `scripts/image-check.sh` runs against processes started from the container image, from outside it, as
 * a client would: a standalone gateway (the image's own CMD, no Redis) and a fleet of three gateways
 * with the admin API and the worker on one Redis. Environment: ADMIN_TOKEN and KEY_HASH_SECRET (the fleet's; the secret only
 * places the keys' windows, so runs start just after a boundary rather than straddle one). One line per
 * probe (`ok` or `FAIL`, seconds, what was seen); exits 1 when any failed.
 */

const USAGE = 'usage: image-probe --standalone URL --gateway URL --gateway URL --gateway URL --admin URL [--policy-file demo/policy.json]';
const failures: string[] = [];

function check(ok: boolean, what: string, started: number): void {
  const secs = ((performance.now() - started) / 1000).toFixed(1).padStart(5);
  process.stdout.write(`${ok ? 'ok  ' : 'FAIL'} ${secs} s  ${what}\n`);
  if (!ok) failures.push(what);
}

const { values } = (() => {
  try {
    return parseArgs({ strict: true, options: { standalone: { type: 'string' }, gateway: { type: 'string', multiple: true }, admin: { type: 'string' }, 'policy-file': { type: 'string' } } });
  } catch (err) {
    process.stderr.write(`image-probe: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
})();
const gateways = values.gateway ?? [];
const problems = [
  ...(gateways.length === 3 ? [] : [`--gateway must be given three times, got ${gateways.length}`]),
  ...(values.standalone ? [] : ['--standalone is required']),
  ...(values.admin ? [] : ['--admin is required']),
  ...(process.env.ADMIN_TOKEN ? [] : ['ADMIN_TOKEN must be set']),
  ...(process.env.KEY_HASH_SECRET ? [] : ['KEY_HASH_SECRET must be set']),
];
if (problems.length) {
  process.stderr.write(`image-probe: ${problems.join('\nimage-probe: ')}\n${USAGE}\n`);
  process.exit(2);
}
const admin = `${values.admin}/admin/v1`;
const bearer = { authorization: `Bearer ${process.env.ADMIN_TOKEN}` };
const hasher = new KeyHasher([{ version: 'v1', secret: process.env.KEY_HASH_SECRET! }]);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Milliseconds until `key`'s window of `windowMs` next starts. */
function untilNextWindow(key: string, windowMs: number): number {
  const offset = phaseOffset(hasher.hash(key), windowMs);
  const now = Date.now();
  return windowEndMs(windowIdAt(now, windowMs, offset), windowMs, offset) - now;
}

/** One GET as `key`: status, the headers a denial carries, and the body. */
async function hello(url: string, key: string): Promise<{ status: number; retryAfter: string | null; resetMs: string | null; type: string | null; body: string }> {
  const res = await fetch(`${url}/api/hello`, { headers: { 'x-api-key': key }, signal: AbortSignal.timeout(5000) });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), resetMs: res.headers.get('x-ratelimit-reset-ms'), type: res.headers.get('content-type'), body: await res.text() };
}

/** JSON of an admin call, with its status. */
async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = bearer): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${admin}${path}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  try {
    return { status: res.status, json: JSON.parse(text) as Record<string, unknown> };
  } catch {
    return { status: res.status, json: { unparsed: text.slice(0, 200) } };
  }
}

/**
 * The README's quick-start contract, on the image run as `docker run fleet-ratelimit` runs it (its own
 * CMD, no Redis): 12 quick demo-free requests inside one 1 s burst window give 10 × 200, then 429 with
 * Retry-After and an RFC 9457 problem body. They start just after the key's window boundary, on a
 * connection warmed by another key; a run that still outlasted the window (a starved machine) is
 * repeated, at most twice, and says so.
 */
async function demoContract(url: string): Promise<void> {
  const t0 = performance.now();
  await hello(url, 'demo-pro');
  for (let attempt = 1; ; attempt++) {
    await sleep(untilNextWindow('demo-free', 1000) + 5);
    const started = Date.now();
    const seen: Array<Awaited<ReturnType<typeof hello>>> = [];
    for (let i = 0; i < 12; i++) seen.push(await hello(url, 'demo-free'));
    const took = Date.now() - started;
    const statuses = seen.map((r) => r.status);
    if (took >= 1000 - 5 && attempt < 3) {
      process.stdout.write(`     12 requests took ${took} ms, past the 1 s window (${statuses.join(' ')}); again in the next window\n`);
      continue;
    }
    const denial = seen[10];
    let problem: Record<string, unknown> = {};
    try {
      problem = JSON.parse(denial?.body ?? '') as Record<string, unknown>;
    } catch {
      // reported below
    }
    const ok =
      statuses.slice(0, 10).every((s) => s === 200) &&
      statuses.slice(10).every((s) => s === 429) &&
      /^\d+$/.test(denial?.retryAfter ?? '') &&
      (denial?.type ?? '').startsWith('application/problem+json') &&
      problem.error === 'RL_QUOTA_EXCEEDED' &&
      problem.window === 'burst' &&
      problem.status === 429;
    check(
      ok,
      `demo contract on ${url}: ${statuses.join(' ')}; 11th: Retry-After ${denial?.retryAfter}, X-RateLimit-Reset-Ms ${denial?.resetMs}, ${denial?.type}, ${String(problem.error)} window ${String(problem.window)} (${took} ms)`,
      t0,
    );
    return;
  }
}

/**
 * One allowance across the fleet: 1500 demo-hour requests (1000 an hour) round-robin over the three
 * gateways, four at a time. Three separate allowances would admit all 1500; one shared admits 1000
 * within the fleet's documented slack (970..1020, as the cluster tests hold it), and every gateway
 * both admits and denies. The client is a well-behaved one: a 429 that says "within the second"
 * (Retry-After 0 with X-RateLimit-Reset-Ms: a fast-path ask that missed its deadline on a starved
 * machine) is retried after that wait, for up to 5 s, as README's headers section tells clients to.
 */
async function sharedAllowance(): Promise<void> {
  const t0 = performance.now();
  const left = untilNextWindow('demo-hour', 3_600_000);
  if (left < 120_000) {
    process.stdout.write(`     demo-hour's hourly window ends in ${Math.round(left / 1000)} s; waiting for the next one\n`);
    await sleep(left + 1000);
  }
  const counts = gateways.map(() => ({ 200: 0, 429: 0, other: 0 }));
  let retried = 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < 1500; i = next++) {
      const end = Date.now() + 5000;
      let res = await hello(gateways[i % 3]!, 'demo-hour');
      while (res.status === 429 && res.retryAfter === '0' && res.resetMs !== null && Date.now() < end) {
        retried++;
        await sleep(Number(res.resetMs));
        res = await hello(gateways[i % 3]!, 'demo-hour');
      }
      const c = counts[i % 3]!;
      if (res.status === 200 || res.status === 429) c[res.status]++;
      else c.other++;
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  const admitted = counts.reduce((n, c) => n + c[200], 0);
  const other = counts.reduce((n, c) => n + c.other, 0);
  const ok = admitted >= 970 && admitted <= 1020 && other === 0 && counts.every((c) => c[200] > 0 && c[429] > 0);
  const per = counts.map((c, i) => `:${new URL(gateways[i]!).port} ${c[200]}/${c[429]}`).join(', ');
  check(
    ok,
    `shared allowance: 1500 demo-hour requests over three gateways admitted ${admitted} (want 970..1020), 200/429 per gateway ${per}${other ? `, ${other} other statuses` : ''}; ${retried} "within the second" answers retried`,
    t0,
  );

  // Spent fleet-wide: each gateway now refuses demo-hour until its hourly window ends.
  const t1 = performance.now();
  const after = await Promise.all(gateways.map((g) => hello(g, 'demo-hour')));
  const refusals = after.map((r) => {
    let p: Record<string, unknown> = {};
    try {
      p = JSON.parse(r.body) as Record<string, unknown>;
    } catch {
      // not JSON: reported below
    }
    const ok = r.status === 429 && Number(r.retryAfter) >= 1 && (r.type ?? '').startsWith('application/problem+json') && p.error === 'RL_QUOTA_EXCEEDED' && p.window === 'hourly';
    return { ok, text: `${r.status} Retry-After ${r.retryAfter} ${String(p.error)} ${String(p.window)}` };
  });
  check(
    refusals.every((r) => r.ok),
    `demo-hour spent on every gateway: ${refusals.map((r) => r.text).join('; ')}`,
    t1,
  );
}

/** Polls `probe` every 250 ms until it returns a value or `ms` pass; the last value (or undefined). */
async function until<T>(ms: number, probe: () => Promise<T | undefined>): Promise<T | undefined> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined || Date.now() > end) return v;
    await sleep(250);
  }
}

/**
 * The admin API: 401 without the token; `/health` with it lists the three gateways, none degraded,
 * every shard owned. Then the demo policy stored through the API (signed under POLICY_SECRET): every
 * gateway must apply it, so `/health` says `ok`.
 */
async function adminHealth(): Promise<void> {
  let t0 = performance.now();
  const anonymous = await call('GET', '/health', undefined, {});
  check(anonymous.status === 401, `admin /health without the token: ${anonymous.status} (want 401)`, t0);
  t0 = performance.now();
  type Health = {
    ok: boolean;
    policyVersion: number | null;
    nodes: Array<{ node: string; status: { policyVersion?: number } | null }>;
    degradedNodes: string[];
    shards: unknown[];
    unownedShards: number[];
  };
  const health = async (): Promise<{ status: number; h: Health }> => {
    const r = await call('GET', '/health');
    return { status: r.status, h: r.json as unknown as Health };
  };
  const first = await until(15_000, async () => {
    const r = await health();
    return r.status === 200 && r.h.nodes.filter((n) => n.status !== null).length === 3 && r.h.unownedShards.length === 0 ? r : undefined;
  });
  const seen = first ?? (await health());
  const names = (seen.h.nodes ?? [])
    .map((n) => n.node)
    .sort()
    .join(' ');
  check(
    first !== undefined && seen.h.degradedNodes.length === 0,
    `admin /health with the token: ${seen.status}, nodes [${names}], degraded [${(seen.h.degradedNodes ?? []).join(' ')}], ${seen.h.shards?.length ?? 0} shards, ${seen.h.unownedShards?.length ?? '?'} unowned`,
    t0,
  );

  t0 = performance.now();
  const demo = JSON.parse(readFileSync(values['policy-file'] ?? 'demo/policy.json', 'utf8')) as { policy: Record<string, unknown> };
  const put = await call('PUT', '/policy', { policy: demo.policy, reason: 'image check: store the demo policy' });
  const version = put.json.version as number | undefined;
  const applied =
    put.status === 200
      ? await until(30_000, async () => {
          const r = await health();
          return r.h.ok === true && r.h.policyVersion === version ? r : undefined;
        })
      : undefined;
  const last = applied ?? (await health());
  const onIt = (last.h.nodes ?? []).filter((n) => n.status?.policyVersion === version).length;
  check(applied !== undefined, `policy stored through the admin API: ${put.status} version ${String(version)}; /health ok ${String(last.h.ok)}, ${onIt} of 3 gateways on it`, t0);
}

/** A reap run asked of the admin API (202 and a job id) that the worker completes. */
async function reapJob(): Promise<void> {
  const t0 = performance.now();
  const asked = await call('POST', '/jobs/reap', { reason: 'image check: reap on demand' });
  const id = typeof asked.json.id === 'string' ? asked.json.id : undefined;
  const done =
    id === undefined
      ? undefined
      : await until(60_000, async () => {
          const r = await call('GET', `/jobs/${encodeURIComponent(id)}`);
          return r.json.state === 'completed' || r.json.state === 'failed' ? r.json : undefined;
        });
  const result = done ?? (id === undefined ? asked.json : (await call('GET', `/jobs/${encodeURIComponent(id)}`)).json);
  check(
    asked.status === 202 && done?.state === 'completed',
    `reap job through the admin API: ${asked.status} id ${String(id)}, state ${String(result.state)}${result.failedReason ? ` (${String(result.failedReason)})` : ''}, result ${JSON.stringify(result.result ?? null)}`,
    t0,
  );
}

await demoContract(values.standalone!);
await sharedAllowance();
await adminHealth();
await reapJob();
process.stdout.write(failures.length ? `image-probe: ${failures.length} probe(s) failed\n` : 'image-probe: every probe passed\n');
process.exit(failures.length ? 1 : 0);

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { KeyHasher } from '../../lib/key-id.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import type { GatewayNode } from '../../scripts/fleet.js';

/** The demo's `hour` plan: 1000 an hour, so a test's requests never cross a window boundary. */
export const HOUR = 3_600_000;
/** Candidate keys per scenario: one of them has minutes left in its hourly window. */
const PER_SCENARIO = 4;

/** A scenario's key, its key id, and the shard of its current hourly window. */
export interface HourKey {
  key: string;
  keyId: string;
  shard: number;
}

/**
 * Writes the demo policy with four 1000-per-hour keys per scenario (each scenario needs a fresh
 * allowance) and a `policy-probe` key, without the capacity cap, into `dir`; returns its path.
 */
export function writeHourPolicy(dir: string, scenarios: readonly string[]): string {
  const demo = JSON.parse(readFileSync(fileURLToPath(new URL('../../../demo/policy.json', import.meta.url)), 'utf8')) as {
    demoKeys: Record<string, unknown>;
    policy: Record<string, unknown>;
  };
  for (const s of scenarios) for (let i = 0; i < PER_SCENARIO; i++) demo.demoKeys[`hour-${s}-${i}`] = { tenant: `t-${s}-${i}`, plan: 'hour' };
  demo.demoKeys['policy-probe'] = { tenant: 't-probe', plan: 'hour' };
  delete demo.policy.capacity;
  const path = join(dir, 'policy.json');
  writeFileSync(path, JSON.stringify(demo));
  return path;
}

/** A scenario's key whose hourly window does not end within the next two minutes. */
export function hourKey(hasher: KeyHasher, scenario: string): HourKey {
  for (let i = 0; i < PER_SCENARIO; i++) {
    const key = `hour-${scenario}-${i}`;
    const keyId = hasher.hash(key);
    const offset = phaseOffset(keyId, HOUR);
    const windowId = windowIdAt(Date.now(), HOUR, offset);
    if (windowEndMs(windowId, HOUR, offset) - Date.now() > 120_000) return { key, keyId, shard: shardOf(keyId, windowId, 64) };
  }
  throw new Error('every candidate key is about to roll over');
}

/**
 * Sends `n` GETs as `key`, spread over `nodes` by `pick`, four at a time; counts the statuses. A
 * request whose kept-alive connection was reset (a process just back from SIGSTOP closing sockets
 * idle past its keep-alive timeout as the client reuses them) counts as status 0: it may or may not
 * have been admitted.
 */
export async function drive(nodes: readonly GatewayNode[], key: string, n: number, pick: (i: number) => number): Promise<Record<number, number>> {
  const counts: Record<number, number> = {};
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < n; i = next++) {
      let status = 0;
      try {
        const res = await fetch(`${nodes[pick(i) % nodes.length]!.url}/api/hello`, { headers: { 'x-api-key': key } });
        await res.body?.cancel();
        status = res.status;
      } catch (err) {
        if ((err as { cause?: { code?: string } }).cause?.code !== 'ECONNRESET') throw err;
      }
      counts[status] = (counts[status] ?? 0) + 1;
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  return counts;
}

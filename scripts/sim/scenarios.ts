import { fnv1a32 } from '../../lib/hash.js';

/** Traffic of one key in a simulated run. */
export interface KeyTraffic {
  /** Its key id (default: one made from its index). */
  readonly keyId?: string;
  readonly limit: number;
  /** Mean requests per second while the key is sending. */
  readonly rate: number;
  /** Every request of the key lands on this node (connection pinning); otherwise a random node. */
  readonly pinnedNode?: number;
  /** Otherwise node i gets a request with probability weights[i] − weights[i−1] (cumulative weights, a skew). */
  readonly nodeWeights?: readonly number[];
  /** On/off traffic: sends for `onMs` out of every `periodMs`, starting at `phaseMs`. */
  readonly burst?: { readonly onMs: number; readonly periodMs: number; readonly phaseMs: number };
  /** Ramping traffic: the rate climbs from 0 to twice `rate` over every `rampMs` (mean `rate`), then drops back. */
  readonly rampMs?: number;
  /** Sends only in [fromMs, toMs) of the run: a key that comes and goes (churn). */
  readonly life?: { readonly fromMs: number; readonly toMs: number };
  /** Counted in the accuracy figures (the hot-key scenario counts only the hot key). */
  readonly evaluated: boolean;
}

/** A fault schedule entry: node `node` isolated from every other node during [fromMs, toMs). */
export interface Isolation {
  readonly node: number;
  readonly fromMs: number;
  readonly toMs: number;
  /** The load balancer stops sending to it (an outage) or keeps sending (a partition). */
  readonly drained: boolean;
}

/** A node process restarted: down (drained, isolated) at `atMs` for `downMs`, back with a new epoch. */
export interface Restart {
  readonly node: number;
  readonly atMs: number;
  readonly downMs: number;
}

/**
 * A stop-the-world pause of node `node`'s process (GC, CPU starvation, SIGSTOP) during [atMs, atMs +
 * ms): its timers, the messages sent to it and the requests sent to it wait and run when it resumes.
 */
export interface Pause {
  readonly node: number;
  readonly atMs: number;
  readonly ms: number;
}

/**
 * A step of node `node`'s wall clock at `atMs` (as NTP makes one): from then on it reads virtual time
 * plus `toMs` (forward or back). Its monotonic clock never steps.
 */
export interface ClockStep {
  readonly node: number;
  readonly atMs: number;
  readonly toMs: number;
}

/** One simulated situation. Times are relative to the start of the run. */
export interface Scenario {
  readonly name: string;
  readonly description: string;
  readonly keys: (nodes: number, random: () => number, layout: { readonly shards: number; readonly windowMs: number }) => KeyTraffic[];
  readonly isolations?: readonly Isolation[];
  readonly restarts?: readonly Restart[];
  readonly pauses?: readonly Pause[];
  /** Each node's wall clock at the start: virtual time plus this many ms (0 for nodes not listed). */
  readonly clockOffsets?: readonly number[];
  readonly clockSteps?: readonly ClockStep[];
  readonly duplicate?: number;
  readonly reorderMs?: number;
  readonly loss?: number;
}

const LIMIT = 1000;
const KEYS = 20;
/** Offered load over allowance: enough to exhaust every window, so both error directions show. */
const OVERLOAD = 1.2;

const uniformKeys = (): KeyTraffic[] => Array.from({ length: KEYS }, () => ({ limit: LIMIT, rate: LIMIT * OVERLOAD, evaluated: true }));

const HOT = `v1:hot${'0'.repeat(19)}`;
const STORM_RATE = 10_000;
const CO_TENANTS = 2000;

/**
 * `count` key ids on the same shard as `keyId` in every window of length `windowMs`. A key's phase
 * offset is hash(key) mod W and its shard (hash(key) xor f(window id)) mod shards, so with a
 * power-of-two shard count the keys whose hashes agree with its own modulo lcm(W, shards) have its
 * windows, and the same shard in each.
 */
export function coTenants(keyId: string, { shards, windowMs }: { readonly shards: number; readonly windowMs: number }, count: number): string[] {
  if ((shards & (shards - 1)) !== 0) throw new Error(`co-tenants on one shard in every window need a power-of-two shard count, got ${shards}`);
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
  const period = (windowMs / gcd(windowMs, shards)) * shards;
  const want = fnv1a32(keyId) % period;
  const out: string[] = [];
  // FNV-1a carried on from a prefix's hash over three more characters: a candidate costs one step.
  const step = (h: number, c: number): number => Math.imul(h ^ c, 0x01000193);
  for (let p = 0; out.length < count; p++) {
    const prefix = `v1:cot${String(p).padStart(16, '0')}`;
    const h0 = fnv1a32(prefix);
    for (const a of ID_CHARS) {
      const h1 = step(h0, a.charCodeAt(0));
      for (const b of ID_CHARS) {
        const h2 = step(h1, b.charCodeAt(0));
        for (const c of ID_CHARS) {
          if ((step(h2, c.charCodeAt(0)) >>> 0) % period !== want) continue;
          out.push(prefix + a + b + c);
          if (out.length === count) return out;
        }
      }
    }
  }
  return out;
}

const ID_CHARS = [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'];

/** Every scenario the simulator knows, by name. */
export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'uniform',
    description: `${KEYS} keys, ${LIMIT}/s each, offered ${OVERLOAD}× spread evenly over the fleet`,
    keys: uniformKeys,
  },
  {
    name: 'pinned',
    description: `${KEYS} keys, ${LIMIT}/s each, offered ${OVERLOAD}×, each key's traffic on one node`,
    keys: (nodes) => Array.from({ length: KEYS }, (_, i) => ({ limit: LIMIT, rate: LIMIT * OVERLOAD, pinnedNode: i % nodes, evaluated: true })),
  },
  {
    name: 'bursty',
    description: `${KEYS} keys, ${LIMIT}/s each, bursts of 4× for 300 ms in every second (1.2× on average), random nodes`,
    keys: (_nodes, random) => Array.from({ length: KEYS }, () => ({ limit: LIMIT, rate: LIMIT * 4, burst: { onMs: 300, periodMs: 1000, phaseMs: Math.floor(random() * 1000) }, evaluated: true })),
  },
  {
    name: 'hot-key',
    description: 'one key at 150 req/s (limit 100/s) beside 10,000 background keys at 0.1 req/s (limit 10/s); figures for the hot key',
    keys: () => [{ limit: 100, rate: 150, evaluated: true }, ...Array.from({ length: 10_000 }, () => ({ limit: 10, rate: 0.1, evaluated: false }))],
  },
  {
    name: 'hot-key-storm',
    description: `one key at ${STORM_RATE.toLocaleString('en')} req/s (100× its limit of 100/s) spread over every node, beside ${CO_TENANTS.toLocaleString('en')} keys at 1 req/s (limit 10/s) on its shard in every window; figures for the hot key`,
    keys: (_nodes, _random, layout) => [
      { keyId: HOT, limit: 100, rate: STORM_RATE, evaluated: true },
      ...coTenants(HOT, layout, CO_TENANTS).map((keyId) => ({ keyId, limit: 10, rate: 1, evaluated: false })),
    ],
  },
  {
    name: 'restart',
    description: 'uniform traffic; node 3 restarts mid-window (100 ms down, back with a new epoch and no credit)',
    keys: uniformKeys,
    restarts: [{ node: 3, atMs: 4500, downMs: 100 }],
  },
  {
    name: 'owner-outage',
    description: 'uniform traffic; node 0 — owner of 1/fleet of the shards — unreachable for 5 s, its clients moved away',
    keys: uniformKeys,
    isolations: [{ node: 0, fromMs: 3200, toMs: 8200, drained: true }],
  },
  {
    name: 'partition',
    description: 'uniform traffic; node 1 cut off from the bus for 5 s while its clients keep sending to it',
    keys: uniformKeys,
    isolations: [{ node: 1, fromMs: 3200, toMs: 8200, drained: false }],
  },
  {
    name: 'dup-reorder',
    description: 'uniform traffic; every message delivered twice, each copy up to 5 ms late (out of order)',
    keys: uniformKeys,
    duplicate: 1,
    reorderMs: 5,
  },
];

/** Traffic of one key in a simulated run. */
export interface KeyTraffic {
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
  readonly keys: (nodes: number, random: () => number) => KeyTraffic[];
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

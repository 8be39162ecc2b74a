import { setTimeout as sleep } from 'node:timers/promises';
import type { NextFunction, Request, Response } from 'express';
import { pino } from 'pino';
import { FakeClock, systemClock } from '../lib/clock.js';
import { FoldOwner } from '../lib/fold-owner.js';
import { LeaseNode, type OwnerLink } from '../lib/lease-node.js';
import { compilePolicy } from '../lib/policy.js';
import { shardOf, type CreditRequest, type Grant } from '../lib/protocol/messages.js';
import { rateLimiter } from '../middleware/rate-limiter.js';
import { benchIdentity, hugePolicy } from './bench-server.js';

/** Heap growth of one structure holding `count` entries. */
export interface Footprint {
  readonly what: string;
  readonly windowsMs: number[];
  readonly count: number;
  readonly bytesEach: number;
  readonly mib: number;
}

const round = (x: number): number => Math.round(x);

/**
 * Collects and waits until two readings agree (a reading right after gc() still sees unswept
 * garbage). A reading is the V8 heap in use plus ArrayBuffer memory (typed arrays and Buffers keep
 * their bytes outside the heap): what a structure holds either way is counted.
 */
export async function settle(): Promise<number> {
  const gc = globalThis.gc as () => void;
  let last = Number.POSITIVE_INFINITY;
  for (let k = 0; k < 10; k++) {
    gc();
    await sleep(50);
    const m = process.memoryUsage();
    const used = m.heapUsed + m.arrayBuffers;
    if (Math.abs(last - used) < 64 * 1024) return used;
    last = used;
  }
  return last;
}

async function measure(what: string, windowsMs: number[], count: number, fill: () => Promise<unknown>): Promise<Footprint> {
  const before = await settle();
  const keep = await fill(); // held until the second reading
  const delta = (await settle()) - before;
  void keep;
  return { what, windowsMs, count, bytesEach: round(delta / count), mib: Math.round((delta / 2 ** 20) * 100) / 100 };
}

/** A link whose grants cover each request exactly, keeping no state: the node's memory alone. */
const statelessLink: OwnerLink = {
  requestCredit: (reqs: readonly CreditRequest[]): Grant[] =>
    reqs.map((r) => ({
      type: 'grant' as const,
      keyId: r.keyId,
      windowId: r.windowId,
      windowMs: r.windowMs,
      nodeId: r.nodeId,
      nodeEpoch: r.nodeEpoch,
      lease: r.lease,
      grantSeq: 1,
      ownerEpoch: 1,
      issued: r.spent + r.need,
    })),
  publish: () => true,
  heartbeat: () => undefined,
  reachable: () => true,
  fleetSize: () => 1,
};

/**
 * Memory for `keys` fresh keys: the node's buckets alone (the N4 figure), the owner's ledgers alone
 * (in a fleet each node holds only its shards' share of those), and the standalone limiter: a fleet of one,
 * which keeps a count per key and window instead (its clock held still, so no key's window ends and is
 * swept while the figure is taken).
 */
export async function memoryFootprints(keys: number, windowsMs: number[]): Promise<Footprint[]> {
  const policy = compilePolicy(hugePolicy(windowsMs));
  const keyIds = Array.from({ length: keys }, (_, i) => `v1:mem${String(i).padStart(19, '0')}`);
  const buckets = keys * windowsMs.length;
  const node = await measure('node buckets', windowsMs, buckets, async () => {
    const n = new LeaseNode(
      { nodeId: 'bench', nodeEpoch: 'bench-1', shards: 64, maxBuckets: buckets, roundMs: 25, fastPathDeadlineMs: 1, demandRounds: 3, headroom: 1.25, missedRoundsLimit: 2, degradedAfterMs: 30_000 },
      systemClock,
      statelessLink,
    );
    for (const k of keyIds) n.acquire(k, policy.limitsFor(k, 't1'));
    n.endRound();
    if (n.buckets.size !== buckets) throw new Error(`memory: expected ${buckets} buckets, the node holds ${n.buckets.size}`);
    return n;
  });
  const owner = await measure('owner ledgers', windowsMs, buckets, async () => {
    const fleet = { size: () => 1, unsettled: () => [], rejoining: () => false };
    const o = new FoldOwner({ ownerEpoch: () => 1, shardOf: (k, w) => shardOf(k, w, 64), headroom: 1.25, demandRounds: 3, reserveRatio: 0.02, roundMs: 25, fleet, clock: systemClock });
    const now = Date.now();
    for (const k of keyIds) {
      for (const windowMs of windowsMs) {
        o.onCreditRequest({
          keyId: k,
          windowId: Math.floor(now / windowMs),
          windowMs,
          limit: 1000,
          nodeId: 'bench',
          nodeEpoch: 'bench-1',
          lease: 1,
          spent: 0,
          selfIssued: 0,
          released: 0,
          need: 1,
          demand: 1,
          fastPath: true,
        });
      }
    }
    return o;
  });
  const standalone = await measure('standalone limiter', windowsMs, buckets, async () => {
    const limiter = rateLimiter({ policy: hugePolicy(windowsMs), identify: benchIdentity, logger: pino({ level: 'silent' }), maxBuckets: buckets, clock: new FakeClock(Date.now()) });
    const res = { setHeader() {}, statusCode: 200, headersSent: false } as unknown as Response;
    const next = (() => undefined) as NextFunction;
    for (let i = 0; i < keys; i++) limiter({ headers: { 'x-api-key': `mem-key-${i}` }, socket: { remoteAddress: '127.0.0.1' }, path: '/' } as unknown as Request, res, next);
    await sleep(100); // a few rounds, so the per-round touched list is flushed as in steady state
    if (limiter.node.buckets.size !== buckets) throw new Error(`memory: expected ${buckets} buckets, the limiter holds ${limiter.node.buckets.size}`);
    await limiter.close();
    return limiter;
  });
  return [node, owner, standalone];
}

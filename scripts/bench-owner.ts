import { parseArgs } from 'node:util';
import { EnvelopeCodec } from '../bus/codec.js';
import { FakeClock } from '../lib/clock.js';
import { FoldOwner } from '../lib/fold-owner.js';
import { shardOf, type Report } from '../lib/protocol/messages.js';

/**
 * `node dist/scripts/bench-owner.js [--shards 64] [--per-shard 16,64,256] [--reps 15] [--count N --only OP]`: the owner's
 * per-round and per-checkpoint costs in one process, no Redis. For each size, an owner holds about
 * shards × per-shard ledgers (a 60 s and a 1 s window per key, one or two leases each), and the script
 * times, as the median of `reps` repetitions, in CPU time:
 *   - snapshot: `FoldOwner.snapshot(s)` for every shard — what an owner serving them all builds each
 *     second (`ShardLog.snapshots`), per pass and per shard;
 *   - sealed: the same checkpoints sealed as bus envelopes (JSON and HMAC) as `ShardLog` writes them;
 *   - sweep: `FoldOwner.sweep` with nothing to drop (what every round's call costs in steady state);
 *   - seal/open: one report batch of a shard (16 reports) sealed and opened, per envelope.
 * CPU time on a shared VM counts the time its other tenants took (steal), so it swings. `--count N
 * --only OP` runs operation OP (snapshot, sealed, sweep, seal, open) exactly N times per size,
 * untimed, for an instruction count that does not: run it under `valgrind --tool=callgrind` with
 * `--count 0` and with `--count N`, and divide the difference of the totals by N.
 */

const USAGE = 'usage: node dist/scripts/bench-owner.js [--shards 64] [--per-shard 16,64,256] [--reps 15] [--count N --only snapshot|sealed|sweep|seal|open]';
const OPS = ['snapshot', 'sealed', 'sweep', 'seal', 'open'] as const;
const W_LONG = 60_000;
const W_SHORT = 1000;

function cpuUs(): number {
  const c = process.cpuUsage();
  return c.user + c.system;
}

/** Median CPU µs of `reps` runs of `f`, each repeated until it took at least ~20 ms. */
function time(reps: number, f: () => void): number {
  let n = 1;
  for (;;) {
    const t = cpuUs();
    for (let i = 0; i < n; i++) f();
    if (cpuUs() - t >= 20_000 || n >= 1 << 20) break;
    n *= 2;
  }
  const runs: number[] = [];
  for (let r = 0; r < reps; r++) {
    const t = cpuUs();
    for (let i = 0; i < n; i++) f();
    runs.push((cpuUs() - t) / n);
  }
  runs.sort((a, b) => a - b);
  return runs[Math.floor(runs.length / 2)]!;
}

function owner(shards: number, perShard: number, clock: FakeClock): FoldOwner {
  const fleet = { size: () => 3, unsettled: () => [], rejoining: () => false };
  const o = new FoldOwner({ ownerEpoch: () => 1, shardOf: (k, w) => shardOf(k, w, shards), headroom: 1.25, demandRounds: 3, reserveRatio: 0.02, roundMs: 25, fleet, clock });
  const now = clock.now();
  const keys = Math.ceil((shards * perShard) / 2);
  for (let i = 0; i < keys; i++) {
    const keyId = `v1:owner${String(i).padStart(17, '0')}`;
    for (const windowMs of [W_LONG, W_SHORT]) {
      const windowId = Math.floor(now / windowMs);
      for (const node of i % 3 === 0 ? ['a', 'b'] : ['a']) {
        o.onCreditRequest({ keyId, windowId, windowMs, limit: 1_000_000, nodeId: node, nodeEpoch: `${node}-1`, lease: 1, spent: 0, selfIssued: 0, released: 0, need: 1, demand: 3, fastPath: false });
      }
    }
  }
  o.takeOutbox();
  return o;
}

function main(): void {
  let v;
  try {
    v = parseArgs({ options: { shards: { type: 'string' }, 'per-shard': { type: 'string' }, reps: { type: 'string' }, count: { type: 'string' }, only: { type: 'string' } }, strict: true }).values;
  } catch (err) {
    process.stderr.write(`bench-owner: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  const shards = Number(v.shards ?? 64);
  const sizes = (v['per-shard'] ?? '16,64,256').split(',').map(Number);
  const reps = Number(v.reps ?? 15);
  const count = v.count === undefined ? undefined : Number(v.count);
  const only = v.only as (typeof OPS)[number] | undefined;
  const ok = (n: number | undefined, min: number): boolean => n === undefined || (Number.isInteger(n) && n >= min);
  if (!ok(shards, 1) || sizes.some((n) => !ok(n, 1)) || !ok(reps, 1) || !ok(count, 0) || (count !== undefined) !== (only !== undefined) || (only !== undefined && !OPS.includes(only))) {
    process.stderr.write(`${USAGE}\n`);
    process.exit(2);
  }
  // The clock stands 10 s into a minute: no window of either length near its end.
  const clock = new FakeClock(1_800_000_010_000);
  const codec = new EnvelopeCodec([{ version: 'b1', secret: 'bench-owner-secret-0123' }]);
  const reports: Report[] = Array.from({ length: 16 }, (_, i) => ({
    keyId: `v1:owner${String(i).padStart(17, '0')}`,
    windowId: 1_800_000,
    windowMs: W_SHORT,
    limit: 1_000_000,
    lease: 1,
    seq: 40,
    spent: 120,
    issued: 150,
    selfIssued: 0,
    released: 0,
    demand: 3.25,
    held: 30,
    selfGrant: false,
  }));
  const batch = { shard: 7, nodeId: 'node-1', nodeEpoch: '6f1c3a52-1c8e-4a55-9d3e-6a0f2b7c9e11', round: 1234, reports };
  const fields = codec.seal('reports', batch);
  const ops = (o: FoldOwner): Record<(typeof OPS)[number], () => void> => ({
    snapshot: () => {
      for (let s = 0; s < shards; s++) o.snapshot(s);
    },
    sealed: () => {
      for (let s = 0; s < shards; s++) codec.seal('snapshot', { shard: s, entries: o.snapshot(s), epoch: 1 });
    },
    sweep: () => o.sweep(clock.now()),
    seal: () => codec.seal('reports', batch),
    open: () => codec.open(fields),
  });
  if (count !== undefined) {
    for (const perShard of sizes) {
      const op = ops(owner(shards, perShard, clock))[only!];
      for (let i = 0; i < count; i++) op();
    }
    process.stdout.write(`ran ${only} ${count} times per size\n`);
    return;
  }
  const out = [`owner costs, CPU time, median of ${reps}; ${shards} shards`, '', '  ledgers  per shard  snapshot all µs  per shard µs  sealed all µs  sweep µs'];
  for (const perShard of sizes) {
    const o = owner(shards, perShard, clock);
    const op = ops(o);
    const snapshot = time(reps, op.snapshot);
    const sealed = time(reps, op.sealed);
    const sweep = time(reps, op.sweep);
    out.push(
      `  ${String(o.size).padStart(7)}  ${(o.size / shards).toFixed(0).padStart(9)}  ${snapshot.toFixed(0).padStart(15)}  ${(snapshot / shards).toFixed(1).padStart(12)}  ${sealed.toFixed(0).padStart(13)}  ${sweep.toFixed(1).padStart(8)}`,
    );
  }
  const { seal, open } = ops(owner(1, 1, clock));
  out.push('', `  one report batch of ${reports.length} reports (${fields.b.length} B): seal ${time(reps, seal).toFixed(2)} µs, open ${time(reps, open).toFixed(2)} µs`, '');
  process.stdout.write(out.join('\n'));
}

main();

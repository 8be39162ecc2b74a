import { KeySchema, parseOwnerEntry, type StoredNodeStatus } from '../bus/keys.js';
import { gateVerdict, GATE_RATIO, mergeConcentration, MIN_SAMPLES, type ConcentrationSummary, type GateVerdict } from '../lib/owner/concentration.js';
import { StoreRecordError } from '../bus/store-signature.js';
import type { AdminOptions } from './context.js';

/** A stored record that does not verify, as the health view lists it. */
export type Refused = { record: 'policy' | 'switch'; refused: string; message: string };

/** One member of the fleet: its process, how long since its last round, its latest status. */
export interface NodeHealth {
  node: string;
  nodeEpoch: string | null;
  lastRoundMsAgo: number;
  status: StoredNodeStatus | null;
}

/** One shard: who owns it and how long its lease has left. */
export interface ShardHealth {
  shard: number;
  owner: string | null;
  ownerNodeEpoch: string | null;
  ownerEpoch: number;
  leaseMsLeft: number;
}

/**
 * Per-node-per-key concentration over the fleet: every owner's samples merged, and the gate's verdict
 * (`lib/owner/concentration.ts`): `fixed-share` when the p95 ratio to uniform is within `gateRatio`.
 */
export interface FleetConcentration extends ConcentrationSummary {
  verdict: GateVerdict;
  gateRatio: number;
  minSamples: number;
}

/** The answer to "is every node enforcing the right limits right now", and what it is made of. */
export interface FleetHealth {
  at: number;
  enforcing: boolean;
  policyVersion: number | null;
  ok: boolean;
  /** Why it is not ok, one line each (empty when it is). */
  problems: string[];
  refusedRecords: Refused[];
  degradedNodes: string[];
  nodesOnAnotherPolicy: string[];
  /** The releases the nodes run, each with its bus schema version and nodes; more than one schema is not ok. */
  releases: Array<{ release: string; schemaVersion: number; nodes: string[] }>;
  leases: { committed: number; allowance: number };
  /** How unevenly keys' traffic falls on the nodes, as the owners measured it: informs, never fails `ok`. */
  concentration: FleetConcentration;
  nodes: NodeHealth[];
  shards: ShardHealth[];
  unownedShards: number[];
}

/** Turns a refused stored record into its health entry; throws anything else. */
const refusedAs =
  (record: Refused['record']) =>
  (err: unknown): Refused => {
    if (err instanceof StoreRecordError) return { record, refused: err.reason, message: err.message };
    throw err;
  };

/**
 * The nodes by release and bus schema version. Nodes on different schema versions reject each other's
 * envelopes, so the fleet cannot enforce as one; releases on one schema can mix (a rolling deploy).
 */
function releasesOf(nodes: readonly NodeHealth[]): FleetHealth['releases'] {
  const out = new Map<string, { release: string; schemaVersion: number; nodes: string[] }>();
  for (const { node, status } of nodes) {
    if (status === null) continue;
    // A status without these fields comes from a release before they were published: schema 1.
    const release = status.release ?? 'unknown';
    const schemaVersion = status.schemaVersion ?? 1;
    const k = `${release}|${schemaVersion}`;
    const entry = out.get(k) ?? { release, schemaVersion, nodes: [] };
    entry.nodes.push(node);
    out.set(k, entry);
  }
  return [...out.values()].sort((a, b) => b.nodes.length - a.nodes.length || a.schemaVersion - b.schemaVersion || (a.release < b.release ? -1 : 1));
}

/** Reads members, their statuses, shard ownership and the stored records from Redis, at Redis's time. */
export async function readFleetHealth(o: Pick<AdminOptions, 'redis' | 'prefix' | 'store'>): Promise<FleetHealth> {
  const keys = new KeySchema(o.prefix ?? 'frl');
  const [time, members, epochs, owners, statuses, policy, sw] = await Promise.all([
    o.redis.time(),
    o.redis.zrange(keys.ctl('members'), 0, -1, 'WITHSCORES'),
    o.redis.hgetall(keys.ctl('epochs')),
    o.redis.hgetall(keys.ctl('owners')),
    o.redis.hgetall(keys.ctl('status')),
    o.store.current().catch(refusedAs('policy')),
    o.store.switchState().catch(refusedAs('switch')),
  ]);
  const refused = [policy, sw].filter((x): x is Refused => x !== undefined && 'refused' in x);
  const policyOk = policy !== undefined && !('refused' in policy);
  const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
  const nodes: NodeHealth[] = [];
  for (let i = 0; i + 1 < members.length; i += 2) {
    const id = members[i]!;
    const st = statuses[id] === undefined ? undefined : (JSON.parse(statuses[id]!) as StoredNodeStatus);
    // A status from an earlier process of the same node id is not this one's.
    const current = st !== undefined && st.nodeEpoch === epochs[id] ? st : undefined;
    // Redis's TIME is read before the members: a round in between is "just now", not in the future.
    nodes.push({ node: id, nodeEpoch: epochs[id] ?? null, lastRoundMsAgo: Math.max(0, now - Number(members[i + 1])), status: current ?? null });
  }
  let committed = 0;
  let allowance = 0;
  for (const x of nodes) {
    committed += x.status?.leases?.committed ?? 0;
    allowance += x.status?.leases?.allowance ?? 0;
  }
  const shards = Object.entries(owners)
    .map(([shard, v]): ShardHealth => {
      const { node, nodeEpoch, epoch, expiresAt } = parseOwnerEntry(v);
      return { shard: Number(shard), owner: node || null, ownerNodeEpoch: nodeEpoch || null, ownerEpoch: epoch, leaseMsLeft: Math.max(0, expiresAt - now) };
    })
    .sort((a, b) => a.shard - b.shard);
  const degraded = nodes.filter((x) => x.status?.degraded === true).map((x) => x.node);
  const stalePolicy = nodes.filter((x) => policyOk && x.status !== null && x.status.policyVersion !== policy.version).map((x) => x.node);
  const enforcing = !('refused' in sw) && sw.enforce;
  const releases = releasesOf(nodes);
  const merged = mergeConcentration(nodes.map((x) => x.status?.concentration));
  const health = {
    at: now,
    enforcing,
    policyVersion: policyOk ? policy.version : null,
    refusedRecords: refused,
    degradedNodes: degraded,
    nodesOnAnotherPolicy: stalePolicy,
    releases,
    leases: { committed, allowance },
    concentration: { ...merged, verdict: gateVerdict(merged), gateRatio: GATE_RATIO, minSamples: MIN_SAMPLES },
    nodes,
    shards,
    unownedShards: shards.filter((s) => s.owner === null || s.leaseMsLeft === 0).map((s) => s.shard),
  };
  const problems = problemsOf(health);
  return { ...health, ok: problems.length === 0, problems };
}

/**
 * Why the fleet is not ok, one line each; empty when it is: not without a stored, signed policy, nor
 * while the store holds a record no node will apply, nor with no node at all.
 */
function problemsOf(h: Omit<FleetHealth, 'ok' | 'problems'>): string[] {
  const out: string[] = [];
  for (const r of h.refusedRecords) out.push(`The stored ${r.record} record is refused (${r.refused}): nodes keep their last good one`);
  if (h.policyVersion === null && !h.refusedRecords.some((r) => r.record === 'policy')) out.push('No policy is stored');
  if (!h.enforcing) out.push('The kill switch has enforcement off: every request is admitted');
  if (h.nodes.length === 0) out.push('No node is a member of the fleet');
  if (h.degradedNodes.length > 0) out.push(`Degraded: ${h.degradedNodes.join(', ')}`);
  if (h.nodesOnAnotherPolicy.length > 0) out.push(`Not on policy version ${h.policyVersion ?? '?'}: ${h.nodesOnAnotherPolicy.join(', ')}`);
  if (new Set(h.releases.map((r) => r.schemaVersion)).size > 1)
    out.push(`Nodes speak different bus schema versions and refuse each other’s messages: ${h.releases.map((r) => `${r.release} (schema ${r.schemaVersion}): ${r.nodes.join(', ')}`).join('; ')}`);
  if (h.shards.length === 0) out.push('No shard has an owner yet');
  else if (h.unownedShards.length > 0) out.push(`${h.unownedShards.length} of ${h.shards.length} shards have no live owner: ${h.unownedShards.join(', ')}`);
  return out;
}

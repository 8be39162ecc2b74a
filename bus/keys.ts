/**
 * The Redis bus's key layout (prefix `frl`, hash tags so a Redis Cluster spreads shards over slots
 * and keeps the control keys in one), and the formats of the names and table entries stored there:
 *
 * - `frl:{ctl}:members` zset, `frl:{ctl}:epochs` hash, `frl:{ctl}:owners` hash — membership and the
 *   ownership table, changed only by `lua/round.lua`, run once per round by every member.
 * - `frl:{s<N>}:reports` — shard N's stream: one entry per node per round (B2), read by the owner
 *   through consumer group `owners`, acked once folded; a new owner claims the old one's pending.
 * - `frl:{s<N>}:log` — grants the owner issued and its periodic snapshots: what a new owner replays.
 * - `frl:{s<N>}:dead` — entries that can never be folded (bad MAC, version, field), with the reason.
 * - `frl:{s<N>}:fence` — the log's fence: no grant or checkpoint from a lower owner epoch.
 * - channel `frl:node:<nodeId>` — fast-path asks to an owner and owner messages (grants, recalls) to a node.
 *
 * The bus, the admin API and the maintenance jobs all build their keys here.
 */

import type { ConcentrationSummary } from '../lib/owner/concentration.js';

/** A control key: one Redis Cluster slot for all of them. */
export type ControlKey = 'members' | 'epochs' | 'owners' | 'left' | 'beats' | 'status' | `peer:${string}`;

/** A per-shard key: `{s<N>}` puts all of one shard's keys in one slot. */
export type ShardKey = 'reports' | 'log' | 'dead' | 'fence';

/** The consumer group of every shard's report stream. */
export const GROUP = 'owners';

/** Key and channel names under one prefix. */
export class KeySchema {
  constructor(readonly prefix = 'frl') {}

  ctl(name: ControlKey): string {
    return `${this.prefix}:{ctl}:${name}`;
  }

  shard(shard: number, name: ShardKey): string {
    return `${this.prefix}:{s${shard}}:${name}`;
  }

  /** A node's pub/sub channel. */
  channel(nodeId: string): string {
    return `${this.prefix}:node:${nodeId}`;
  }
}

/** A process (node id and node epoch) as the ownership table and the log's fence name it. */
export function processName(nodeId: string, nodeEpoch: string): string {
  return `${nodeId}/${nodeEpoch}`;
}

/** A process's consumer name in the shards' report groups. */
export function consumerName(nodeId: string, nodeEpoch: string): string {
  return `${nodeId}:${nodeEpoch}`;
}

/** One field of `frl:{ctl}:owners`, as `lua/round.lua` writes it: `nodeId/nodeEpoch|ownerEpoch|expiresAt`. */
export interface OwnerEntry {
  /** Node id of the owning process ('' when the entry names none). */
  readonly node: string;
  readonly nodeEpoch: string;
  /** The fencing epoch (NaN when the entry holds no number). */
  readonly epoch: number;
  /** When the lease lapses, in Redis ms (NaN when the entry holds no number). */
  readonly expiresAt: number;
}

/** Reads an owners-table field; anything missing reads as empty, or as 0 for the numbers. */
export function parseOwnerEntry(value: string): OwnerEntry {
  const token = part(value, '|', 0)!;
  return { node: part(token, '/', 0)!, nodeEpoch: part(token, '/', 1) ?? '', epoch: Number(part(value, '|', 1) ?? '0'), expiresAt: Number(part(value, '|', 2) ?? '0') };
}

/** `s.split(sep)[n]`, without the array: every round reads the whole owners table. */
function part(s: string, sep: string, n: number): string | undefined {
  let from = 0;
  for (let i = 0; i < n; i++) {
    const at = s.indexOf(sep, from);
    if (at < 0) return undefined;
    from = at + 1;
  }
  const end = s.indexOf(sep, from);
  return s.slice(from, end < 0 ? s.length : end);
}

/** What a node publishes of itself, once a second, in `frl:{ctl}:status` (the admin API's health view). */
export interface NodeStatus {
  /** Whether some shard's owner has been out of reach for longer than `degradedAfterMs`. */
  readonly degraded: boolean;
  /** The longest silence of any shard's owner toward the node, ms. */
  readonly foldAgeMs: number;
  /** False while the kill switch has enforcement off. */
  readonly enforcing: boolean;
  readonly policyVersion: number;
  readonly buckets: number;
  /** As a shard owner: credit committed over the windows running, and their allowance. */
  readonly leases: { readonly ledgers: number; readonly committed: number; readonly allowance: number };
  readonly eventsDropped: number;
  /** The package version the node runs (absent from releases before it was published). */
  readonly release?: string;
  /** The bus envelope schema version it speaks (absent from releases before it was published: 1). */
  readonly schemaVersion?: number;
  /**
   * As a shard owner: per-node-per-key concentration of the windows it swept lately (absent from a
   * fleet of one, and from releases before it was published).
   */
  readonly concentration?: ConcentrationSummary;
}

/** A status as stored: stamped by the bus with the process, the shards it owns and the time. */
export interface StoredNodeStatus extends NodeStatus {
  readonly nodeEpoch: string;
  readonly ownedShards: number;
  readonly at: number;
}

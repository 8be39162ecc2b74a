import type { Clock } from '../lib/clock.js';
import type { FleetView } from '../lib/fold-owner.js';
import type { OwnerLink } from '../lib/lease-node.js';
import { shardOf, type CreditRequest, type Grant, type OwnerMessage, type ReportBatch } from '../lib/protocol/messages.js';
import { presentAt, rejoining, seen, statedContact, unsettled, withinReach, type Heartbeat, type NodeBeat, type Presence } from '../lib/membership.js';
import { rendezvousOwner } from './rendezvous.js';
import { SimNetwork, type BusFaults, type Scheduler } from './sim-network.js';
import type { Bus, CreditOwner, LogEntry, NodeIdentity } from './types.js';

export type { BusFaults, Scheduler } from './sim-network.js';

/** Options of the in-memory bus. */
export interface MemoryBusOptions {
  readonly shards: number;
  readonly roundMs: number;
  /** Monotonic clock for presence (silence, rejoining) and log retention. */
  readonly clock: Clock;
  /** Without a scheduler every delivery is a synchronous call (standalone mode). */
  readonly scheduler?: Scheduler;
  readonly faults?: BusFaults;
  /** Random source for faults (seeded in the simulator). */
  readonly random?: () => number;
  /** Keep each shard's log this long (ms) so a restarted owner can replay it; 0 keeps none. */
  readonly logRetentionMs?: number;
}

interface NodeEntry {
  epoch: string;
  deliver: (m: OwnerMessage) => void;
}

/**
 * In-process bus. Standalone (`npm start`): one node owns every shard and every exchange is a
 * synchronous call — a fleet of one running the cluster's protocol code. Simulator: many nodes on a
 * virtual clock, shard owners chosen by rendezvous hashing, per-shard logs a restarted owner replays,
 * and injected latency, loss, duplication, reordering and partitions.
 */
export class MemoryBus implements Bus {
  private readonly nodes = new Map<string, NodeEntry>();
  private readonly owners = new Map<string, CreditOwner>();
  private readonly ownerOfShard: string[] = [];
  private readonly epochs: number[] = [];
  /** presence.get(owner).get(node): what the owner knows of the node's heartbeats (`lib/membership.ts`). */
  private readonly presence = new Map<string, Map<string, Presence>>();
  /** reach.get(node).get(owner): monotonic ms of the node's last round that reached the owner. */
  private readonly reach = new Map<string, Map<string, number>>();
  /** Monotonic ms of each member's last heartbeat: a paused or cut-off owner's goes stale, as in Redis. */
  private readonly beats = new Map<string, number>();
  private readonly logs: Array<Array<{ at: number; entry: LogEntry }>> = [];
  private closed = false;
  /** Counters for the simulator: fast paths that missed the deadline, messages sent, lost. */
  readonly stats = { fastPathTimeouts: 0, messages: 0, lost: 0, fastPathRttMs: [] as number[] };

  /** Latency, loss, duplication and pauses between members (none in one process without a scheduler). */
  private readonly net: SimNetwork;

  constructor(private readonly opts: MemoryBusOptions) {
    this.net = new SimNetwork(opts.clock, opts.scheduler, opts.faults, opts.random ?? Math.random, this.stats);
  }

  connectNode(node: NodeIdentity, onMessage: (message: OwnerMessage) => void): OwnerLink {
    this.nodes.set(node.nodeId, { epoch: node.nodeEpoch, deliver: onMessage });
    const now = this.opts.clock.monotonic();
    for (const heard of this.presence.values()) if (!heard.has(node.nodeId)) heard.set(node.nodeId, presentAt(now));
    this.reach.set(node.nodeId, new Map([...this.presence.keys()].map((o) => [o, now])));
    return {
      requestCredit: (requests, deadlineMs) => this.requestCredit(node, requests, deadlineMs),
      // Sent is sent: what the simulated network loses, the node never learns.
      publish: (batch) => {
        this.publish(node, batch);
        return true;
      },
      heartbeat: (beat) => this.heartbeat(node.nodeId, beat),
      reachable: (shard) => this.reachable(node.nodeId, shard),
      fleetSize: () => this.fleetSize(),
      local: (shard) => this.opts.scheduler === undefined || this.ownerOfShard[shard] === node.nodeId,
    };
  }

  serveOwner(node: NodeIdentity, owner: CreditOwner): void {
    this.owners.set(node.nodeId, owner);
    const now = this.opts.clock.monotonic();
    if (!this.presence.has(node.nodeId)) {
      this.presence.set(node.nodeId, new Map([...this.nodes.keys()].map((n) => [n, presentAt(now)])));
      for (const r of this.reach.values()) r.set(node.nodeId, now);
    }
    this.assignShards(node.nodeId);
  }

  fleetView(node: NodeIdentity): FleetView {
    const roundMs = this.opts.roundMs;
    return {
      size: () => this.fleetSize(),
      unsettled: (shard, folded) => {
        const now = this.opts.clock.monotonic();
        const out: string[] = [];
        for (const [n, p] of this.presence.get(node.nodeId) ?? []) {
          if (n !== node.nodeId && unsettled(p, shard, folded(this.nodes.get(n)?.epoch ?? '', shard), now, roundMs)) out.push(n);
        }
        return out;
      },
      rejoining: (nodeId) => rejoining(this.presence.get(node.nodeId)?.get(nodeId), this.opts.clock.monotonic(), roundMs),
    };
  }

  ownerEpoch(shard: number): number {
    return this.epochs[shard] ?? 1;
  }

  fleetSize(): number {
    return Math.max(1, this.nodes.size);
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /**
   * Rendezvous hashing of shards over the owners. A shard that changes hands gets a higher fencing
   * epoch, and its new owner (or the same node's new process) folds the shard's retained log first.
   */
  private assignShards(changed?: string): void {
    const ids = [...this.owners.keys()];
    const replay = new Map<string, LogEntry[]>();
    for (let s = 0; s < this.opts.shards; s++) {
      const before = this.ownerOfShard[s];
      const best = rendezvousOwner(s, ids)!;
      this.ownerOfShard[s] = best;
      if (before !== best || best === changed) {
        this.epochs[s] = (this.epochs[s] ?? 0) + 1;
        const entries = replay.get(best) ?? [];
        for (const e of this.logs[s] ?? []) entries.push(e.entry);
        replay.set(best, entries);
      }
    }
    for (const [id, entries] of replay) if (entries.length) this.owners.get(id)!.replay(entries);
  }

  /** As over Redis: an owner is in reach while the node's rounds have reached it lately. */
  private reachable(from: string, shard: number): boolean {
    const owner = this.ownerOfShard[shard];
    if (this.closed || owner === undefined) return false;
    if (owner === from) return true;
    const at = this.reach.get(from)?.get(owner);
    return at !== undefined && withinReach(at, this.opts.clock.monotonic(), this.opts.roundMs);
  }

  private requestCredit(node: NodeIdentity, requests: readonly CreditRequest[], deadlineMs: number): readonly Grant[] | undefined {
    if (this.closed) return undefined;
    const grants: Grant[] = [];
    let missed = false;
    for (const r of requests) {
      const shard = shardOf(r.keyId, r.windowId, this.opts.shards);
      const ownerId = this.ownerOfShard[shard];
      const owner = ownerId === undefined ? undefined : this.owners.get(ownerId);
      if (owner === undefined || ownerId === undefined) {
        missed = true;
        continue;
      }
      if (ownerId === node.nodeId || this.opts.scheduler === undefined) {
        const g = this.answer(owner, shard, r);
        if (g !== undefined) grants.push(g);
        continue;
      }
      // Remote owner: the request and its answer each cross the network once.
      const there = this.net.transit(node.nodeId, ownerId);
      if (there === undefined) {
        missed = true;
        continue;
      }
      // A request is a sign of life too: the owner learns the node is back before it answers.
      this.heard(ownerId, node.nodeId);
      const resume = this.net.pausedUntil(ownerId, there);
      if (resume !== undefined) {
        // A paused owner answers when it resumes: far too late for this request.
        this.stats.fastPathTimeouts++;
        missed = true;
        this.opts.scheduler.after(resume, () => {
          const g = this.answer(owner, shard, r);
          if (g !== undefined) this.net.send(ownerId, node.nodeId, () => this.deliverNow(g));
        });
        continue;
      }
      const g = this.answer(owner, shard, r);
      const back = this.net.transit(ownerId, node.nodeId);
      const rtt = back === undefined ? Number.POSITIVE_INFINITY : there + back;
      if (rtt <= deadlineMs) {
        this.stats.fastPathRttMs.push(rtt);
        if (g !== undefined) grants.push(g);
      } else {
        // Too late for this request; a grant that was issued still lands and is applied then.
        this.stats.fastPathTimeouts++;
        missed = true;
        if (g !== undefined && back !== undefined) this.opts.scheduler.after(back + there, () => this.deliverNow(g));
      }
    }
    return missed ? this.deliverAndMiss(grants) : grants;
  }

  /** Some owner did not answer in time: apply what did arrive, and report the miss (no exhaustion). */
  private deliverAndMiss(grants: readonly Grant[]): undefined {
    for (const g of grants) this.deliverNow(g);
    return undefined;
  }

  private answer(owner: CreditOwner, shard: number, r: CreditRequest): Grant | undefined {
    const g = owner.onCreditRequest(r);
    if (g !== undefined) this.log(shard, { kind: 'grant', grant: g });
    for (const m of owner.takeOutbox()) this.send(m);
    return g;
  }

  private publish(node: NodeIdentity, batch: ReportBatch): void {
    if (this.closed) return;
    const ownerId = this.ownerOfShard[batch.shard];
    if (ownerId === undefined) return;
    const sentAt = this.opts.clock.monotonic();
    const deliver = (): void => {
      // Whoever owns the shard when the batch lands folds it: a deposed owner never sees it.
      const current = this.ownerOfShard[batch.shard];
      const owner = current === undefined ? undefined : this.owners.get(current);
      if (owner === undefined || this.closed) return;
      this.log(batch.shard, { kind: 'report', batch });
      for (const m of owner.onReports(batch, sentAt)) this.send(m);
    };
    if (ownerId === node.nodeId || this.opts.scheduler === undefined) deliver();
    else this.net.send(node.nodeId, ownerId, deliver);
  }

  /**
   * A node's round is its heartbeat to every owner it can reach, and its sign that they are reachable;
   * with it, what it states (`NodeBeat`).
   */
  private heartbeat(nodeId: string, beat: NodeBeat): void {
    if (this.closed) return;
    // Its owner side's round too: top-ups held back from members that were withheld (L5, F4).
    for (const m of this.owners.get(nodeId)?.topUpWithheld?.((s) => this.ownerOfShard[s] === nodeId) ?? []) this.send(m);
    const now = this.opts.clock.monotonic();
    this.beats.set(nodeId, now);
    const reach = this.reach.get(nodeId);
    const heard: string[] = [];
    for (const ownerId of this.presence.keys()) {
      if (ownerId !== nodeId && this.opts.faults?.blocked(nodeId, ownerId)) continue;
      heard.push(ownerId);
      // In reach only while the owner's own heartbeats are fresh (a paused owner's are not).
      const last = this.beats.get(ownerId);
      if (last === undefined || withinReach(last, now, this.opts.roundMs)) reach?.set(ownerId, now);
    }
    // The member table is Redis's: written whether or not the owner is running to read it. The times
    // are the node's own (one clock here).
    const { contact, ...said } = beat;
    const stated = { ...said, ...statedContact(contact, (t) => t) };
    for (const ownerId of heard) this.heard(ownerId, nodeId, stated);
  }

  /** Owner `ownerId` hears from `nodeId`; after a silence that is a return (L5, `lib/membership.ts`). */
  private heard(ownerId: string, nodeId: string, beat?: Heartbeat): void {
    const heard = this.presence.get(ownerId);
    if (heard === undefined || ownerId === nodeId) return;
    const now = this.opts.clock.monotonic();
    let p = heard.get(nodeId);
    if (p === undefined) heard.set(nodeId, (p = presentAt(now)));
    else seen(p, now, this.opts.roundMs);
    if (beat !== undefined) p.beat = beat;
  }

  /** Sends an owner's message to its node; grants also go to the shard's log. */
  private send(m: OwnerMessage): void {
    if (m.type === 'grant') this.log(shardOf(m.keyId, m.windowId, this.opts.shards), { kind: 'grant', grant: m });
    const from = this.ownerOfShard[shardOf(m.keyId, m.windowId, this.opts.shards)] ?? m.nodeId;
    if (from === m.nodeId || this.opts.scheduler === undefined) this.deliverNow(m);
    else this.net.send(from, m.nodeId, () => this.deliverNow(m));
  }

  private deliverNow(m: OwnerMessage): void {
    const n = this.nodes.get(m.nodeId);
    if (n !== undefined && n.epoch === m.nodeEpoch && !this.closed) n.deliver(m);
  }

  private log(shard: number, entry: LogEntry): void {
    const keep = this.opts.logRetentionMs ?? 0;
    if (keep <= 0) return;
    const now = this.opts.clock.monotonic();
    const log = (this.logs[shard] ??= []);
    log.push({ at: now, entry });
    let drop = 0;
    while (drop < log.length && log[drop]!.at < now - keep) drop++;
    if (drop > 64) log.splice(0, drop);
  }
}

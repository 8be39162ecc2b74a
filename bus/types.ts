import type { FleetView } from '../lib/fold-owner.js';
import type { OwnerLink } from '../lib/lease-node.js';
import type { Blanket, HeldStatement } from '../lib/owner/blankets.js';
import type { LogEntry } from '../lib/protocol/log.js';
import type { CreditRequest, Grant, OwnerMessage, ReportBatch } from '../lib/protocol/messages.js';
import type { NodeStatus } from './keys.js';

export type { LogEntry };

/** Counters a transport may keep; the metrics read those present. */
export interface BusCounters {
  /** Entries and messages rejected, by reason. */
  readonly rejected: Readonly<Record<string, number>>;
  /** Messages from a deposed owner. */
  readonly staleMessages: number;
  /** Fast-path asks sent to remote owners, and those of them sent over the direct channel. */
  readonly asksSent: number;
  readonly asksDirect: number;
  /** As an owner: grants issued but never sent (log write failed or fenced). */
  readonly grantsWithheld: number;
}

/** What the bus needs from an owner: the owner side of the protocol (`FoldOwner` implements it). */
export interface CreditOwner {
  onCreditRequest(req: CreditRequest): Grant | undefined;
  /** Folds a node's report batch; `queuedAt` (the owner's monotonic clock): when it entered the bus. */
  onReports(batch: ReportBatch, queuedAt?: number): OwnerMessage[];
  /** Messages for other nodes produced while answering a request (recalls, exhaustion notices). */
  takeOutbox(): OwnerMessage[];
  /** Rebuilds ledgers from a shard's retained log (a restarted or new owner), before serving it. */
  replay(entries: readonly LogEntry[]): void;
  /** A checkpoint of one shard's ledgers as log entries, so the log behind it can be trimmed. */
  snapshot(shard: number): LogEntry[];
  /** Each round: the top-ups reports asked for while their node was withheld (L5, F4), now that it is not. */
  topUpWithheld?(serving: (shard: number) => boolean): OwnerMessage[];
  /** Tops up the owner's floats on the shards it serves: grants to log, never to send (turns floats on). */
  refillFloats?(serving: (shard: number) => boolean): Grant[];
  /** Grants whose log write came back: taken (their shard still ours, within the lease), or not. */
  logged?(grants: readonly Grant[], taken?: boolean): void;
  /** Whether all a grant states is on record already, so it may go out before its own log write. */
  onRecord?(grant: Grant): boolean;
  /** The blankets to log now on the shards it serves (`lib/owner/blankets.ts`), and whether each write was taken. */
  blanketsDue?(shards: Iterable<number>, serving: (shard: number) => boolean): Blanket[];
  blanketLogged?(blanket: Blanket, taken: boolean): void;
  /** A shard given up cleanly, every write back: its blanket's retirement to log, if any, with its floats' grants. */
  retireBlanket?(shard: number): { blanket: Blanket; grants: Grant[] } | undefined;
  /** Its blankets' taken held parts, for its heartbeat statement (`lib/owner/held.ts`). */
  heldStatement?(serving: (shard: number) => boolean): HeldStatement;
}

/** Identity of a connected node process. */
export interface NodeIdentity {
  readonly nodeId: string;
  readonly nodeEpoch: string;
}

/**
 * A transport between nodes and shard owners. The in-memory bus (standalone mode, simulator) and the
 * Redis Streams bus (clusters) implement it; nothing outside `bus/` knows how messages travel.
 */
export interface Bus {
  /**
   * Connects a node; messages addressed to it (grants, recalls) are handed to `onMessage`, and the
   * shards whose owner changed (when a new owner may lack a log to replay) to `onOwnersChanged`.
   */
  connectNode(node: NodeIdentity, onMessage: (message: OwnerMessage) => void, onOwnersChanged?: (shards: ReadonlySet<number>) => void): OwnerLink;
  /** Offers this process's owner to the bus, which routes the shards it owns to it. */
  serveOwner(node: NodeIdentity, owner: CreditOwner): void;
  /** The fleet as the owner on `node` sees it (heartbeats). */
  fleetView(node: NodeIdentity): FleetView;
  /** Current fencing epoch of a shard's owner. */
  ownerEpoch(shard: number): number;
  /** Number of nodes in the fleet. */
  fleetSize(): number;
  /** Settles once the node can reach every shard's owner (immediately for the in-memory bus). */
  ready?(): Promise<void>;
  /** Publishes this node's status where the admin API's health view reads it (the Redis bus does). */
  publishStatus?(status: NodeStatus): void;
  /** Counters some transports keep (the Redis bus does), for the metrics. */
  readonly counters?: BusCounters;
  /** Stops delivery; idempotent. */
  close(): Promise<void>;
}

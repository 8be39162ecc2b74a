import type { OwnerLink } from '../lib/lease-node.js';
import type { CreditRequest, Grant, ReportBatch } from '../lib/protocol/messages.js';

/** What the bus needs from an owner: the owner side of the protocol (`FoldOwner` implements it). */
export interface CreditOwner {
  onCreditRequest(req: CreditRequest): Grant | undefined;
  onReports(batch: ReportBatch): Grant[];
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
  /** Connects a node; grants addressed to it are handed to `onGrant`. */
  connectNode(node: NodeIdentity, onGrant: (grant: Grant) => void): OwnerLink;
  /** Offers this process's owner to the bus, which routes the shards it owns to it. */
  serveOwner(node: NodeIdentity, owner: CreditOwner): void;
  /** Number of live nodes in the fleet. */
  fleetSize(): number;
  /** Stops delivery; idempotent. */
  close(): Promise<void>;
}

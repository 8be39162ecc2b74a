import type { OwnerLink } from '../lib/lease-node.js';
import type { CreditRequest, Grant, ReportBatch } from '../lib/protocol/messages.js';
import type { Bus, CreditOwner, NodeIdentity } from './types.js';

/**
 * In-process bus: one owner serves every shard and messages are delivered synchronously. This is the
 * standalone mode behind `npm start` — a fleet of one in memory, running the same protocol code as a
 * cluster — and the base the simulator builds on.
 */
export class MemoryBus implements Bus {
  private owner: CreditOwner | undefined;
  private readonly nodes = new Map<string, (grant: Grant) => void>();
  private closed = false;

  connectNode(node: NodeIdentity, onGrant: (grant: Grant) => void): OwnerLink {
    this.nodes.set(node.nodeEpoch, onGrant);
    return {
      requestCredit: (requests: readonly CreditRequest[]): readonly Grant[] | undefined => {
        const owner = this.owner;
        if (this.closed || owner === undefined) return undefined;
        const grants: Grant[] = [];
        for (const r of requests) {
          const g = owner.onCreditRequest(r);
          if (g !== undefined) grants.push(g);
        }
        return grants;
      },
      publish: (batch: ReportBatch): void => {
        if (this.closed || this.owner === undefined) return;
        for (const g of this.owner.onReports(batch)) this.nodes.get(g.nodeEpoch)?.(g);
      },
      connected: () => !this.closed && this.owner !== undefined,
    };
  }

  serveOwner(_node: NodeIdentity, owner: CreditOwner): void {
    this.owner = owner;
  }

  fleetSize(): number {
    return Math.max(1, this.nodes.size);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.nodes.clear();
  }
}

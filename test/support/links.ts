import type { OwnerLink } from '../../lib/lease-node.js';
import type { NodeBeat } from '../../lib/membership.js';
import type { CreditRequest, Grant, ReportBatch } from '../../lib/protocol/messages.js';

/** An OwnerLink that records what the node sends and answers with a function the test controls. */
export class RecordingLink implements OwnerLink {
  readonly requests: CreditRequest[][] = [];
  readonly published: ReportBatch[] = [];
  up = true;

  constructor(public answer: (reqs: readonly CreditRequest[]) => readonly Grant[] | Promise<readonly Grant[] | undefined> = () => []) {}

  requestCredit(requests: readonly CreditRequest[]): readonly Grant[] | undefined | Promise<readonly Grant[] | undefined> {
    this.requests.push([...requests]);
    return this.up ? this.answer(requests) : undefined;
  }

  publish(batch: ReportBatch): boolean {
    this.published.push(batch);
    return true;
  }

  /** What each heartbeat stated. */
  readonly beats: NodeBeat[] = [];

  heartbeat(beat: NodeBeat): void {
    this.beats.push(beat);
  }

  reachable(): boolean {
    return this.up;
  }

  fleetSize(): number {
    return this.fleet;
  }

  fleet = 4;
}

/** A grant for `req` raising this node's cumulative credit to `issued`. */
export function grantFor(req: CreditRequest, issued: number, grantSeq: number, ownerEpoch = 1): Grant {
  return { type: 'grant', keyId: req.keyId, windowId: req.windowId, windowMs: req.windowMs, nodeId: req.nodeId, nodeEpoch: req.nodeEpoch, lease: req.lease, grantSeq, ownerEpoch, issued };
}

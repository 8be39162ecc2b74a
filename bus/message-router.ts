import type { OwnerMessage } from '../lib/protocol/messages.js';
import { EnvelopeCodec } from './codec.js';
import type { OwnerContext } from './owner-context.js';
import type { RedisClient } from './redis-connection.js';
import type { ShardLog } from './shard-log.js';

/** Where an ask's answer goes: the asker, the ask's id, and the connection it came by, if direct. */
export interface Answer {
  readonly re: number;
  readonly to: string;
  readonly reply?: (frame: string) => void;
}

/**
 * Sends owner messages to nodes, each once what it states is on record in the grant log, in the order
 * they were made per node.
 */
export class MessageRouter {
  /** Messages to a node waiting for an earlier one (or its grants' log write), as one promise per node. */
  private readonly sends = new Map<string, Promise<void>>();

  /**
   * `fast`: the fast-path connection (not auto-pipelined), for answers. `deliver`: this process's own
   * node's message handler.
   */
  constructor(
    private readonly ctx: OwnerContext,
    private readonly log: ShardLog,
    private readonly fast: RedisClient,
    private readonly deliver: (m: OwnerMessage) => void,
  ) {}

  /**
   * Sends owner messages: to this node in process, to others on their Redis channel, and an ask's
   * answer (`answer`) on the connection it came by, or the asker's channel. Grants go to the log, and
   * to other nodes only once the log has all they state: a later owner replays the log, and must not
   * issue that credit again. A grant whose credit beyond the float's was on record already (an ask
   * the owner's float covered) goes first and is logged after. A grant the log could not take is
   * withheld (the ledger counts it issued, which costs accuracy, never safety), and after a write that
   * was taken the owner knows its grants are on record. Messages to one node leave in the order they
   * were made, this node's own included.
   */
  route(messages: readonly OwnerMessage[], answer?: Answer): void {
    const { ctx } = this;
    const byNode = new Map<string, OwnerMessage[]>();
    if (answer !== undefined) byNode.set(answer.to, []);
    for (const m of messages) {
      const list = byNode.get(m.nodeId);
      if (list === undefined) byNode.set(m.nodeId, [m]);
      else list.push(m);
    }
    // An ask's answer takes the connection that is not auto-pipelined (no wait for the next turn).
    const conn = answer === undefined ? ctx.redis : this.fast;
    // Written once the asker's answer has gone if it need not wait for it (the float covered it).
    let logged: Promise<boolean> | undefined;
    const log = (): Promise<boolean> => (logged ??= this.log.logGrants(messages, conn));
    for (const [nodeId, list] of byNode) {
      const asker = nodeId === answer?.to;
      // This process's own node too gets grants only once they are on record, in order.
      const own = nodeId === ctx.identity()?.nodeId && !asker;
      const send = (out: OwnerMessage[], re: number): void => {
        if (own) {
          for (const m of out) this.deliver(m);
          return;
        }
        const frame = EnvelopeCodec.toJson(ctx.codec.seal('messages', { re, nodeId, messages: out }));
        ctx.stats.messagesSent++;
        if (asker && answer.reply !== undefined) answer.reply(frame);
        else conn.publish(ctx.keys.channel(nodeId), frame).catch((err: Error) => ctx.warn(err, 'publish failed'));
      };
      const re = asker ? answer.re : 0;
      // A grant all of whose credit is on record already (an ask the float covered) need not wait.
      const waits = list.some((m) => m.type === 'grant' && ctx.owner()!.onRecord?.(m) !== true);
      this.inOrder(nodeId, waits ? log() : undefined, (ok) => {
        const rest = ok ? list : list.filter((m) => m.type !== 'grant');
        ctx.stats.grantsWithheld += list.length - rest.length;
        if (ok || rest.length > 0) send(rest, ok ? re : 0);
      });
    }
    void log();
  }

  /**
   * Runs `go` once `ready` (a log write) has settled and everything sent to `nodeId` before has
   * gone — at once when nothing is waiting — so a recall never overtakes the grant before it.
   */
  private inOrder(nodeId: string, ready: Promise<boolean> | undefined, go: (ok: boolean) => void): void {
    const prev = this.sends.get(nodeId);
    if (prev === undefined && ready === undefined) return go(true);
    const next = (prev ?? Promise.resolve())
      .then(() => ready ?? true)
      .then(go)
      .catch((err: unknown) => this.ctx.warn(err, 'owner messages not sent'));
    this.sends.set(nodeId, next);
    void next.finally(() => {
      if (this.sends.get(nodeId) === next) this.sends.delete(nodeId);
    });
  }
}

import { hostname } from 'node:os';
import type { Clock } from '../lib/clock.js';
import { EnvelopeCodec, type Envelope, type PeerAddress } from './codec.js';
import { PeerLink } from './peer-link.js';
import type { RedisClient } from './redis-connection.js';

/** Rounds between refreshes of the address records (this process's own, and the others'). */
export const REFRESH_ROUNDS = 40;
/** A process's record lapses this many rounds after its last refresh. */
const RECORD_TTL_ROUNDS = 4 * REFRESH_ROUNDS;

/** What the direct channel needs of its Redis bus. */
export interface DirectChannelHost {
  readonly codec: EnvelopeCodec;
  readonly redis: RedisClient;
  readonly clock: Clock;
  readonly roundMs: number;
  /** The Redis key of `nodeId`'s address record. */
  recordKey(nodeId: string): string;
  /** Live members by node id, with the node epoch of their current process. */
  members(): ReadonlyMap<string, { readonly epoch: string }>;
  /** Opens an envelope, counting a rejection; undefined if it does not open. */
  open(fields: Readonly<Record<string, unknown>>): Envelope | undefined;
  /** A frame from a peer (an ask, with `reply`; or an answer). */
  onFrame(frame: string, reply?: (frame: string) => void): void;
  warn(err: unknown, msg: string): void;
}

/**
 * The fast path's direct channel as the Redis bus uses it: this process's listener and its sealed
 * address record in Redis (`<prefix>:{ctl}:peer:<nodeId>`, expiring unless refreshed), the other
 * members' records, and the connections to them (`bus/peer-link.ts`).
 */
export class DirectChannel {
  private readonly link: PeerLink;
  private readonly peers = new Map<string, PeerAddress>();
  private record?: string;
  private selfId?: string;
  private readAt = Number.NEGATIVE_INFINITY;
  private closed = false;

  constructor(
    private readonly host: DirectChannelHost,
    private readonly settings: { host?: string; port?: number; advertise?: string },
  ) {
    this.link = new PeerLink(host.codec, { onFrame: (frame, reply) => host.onFrame(frame, reply), onProblem: (err, what) => host.warn(err, what) });
  }

  /** Starts the listener and publishes where it is; a listener that cannot start leaves asks to Redis. */
  listen(node: { nodeId: string; nodeEpoch: string }): void {
    this.selfId = node.nodeId;
    const host = this.settings.host ?? '127.0.0.1';
    const port = this.settings.port ?? 0;
    const advertise = this.settings.advertise ?? (host === '0.0.0.0' || host === '::' ? hostname() : host);
    this.link
      .listen(node, host, port, advertise)
      .then((addr) => {
        if (this.closed) return;
        this.record = EnvelopeCodec.toJson(this.host.codec.seal('peer', addr));
        this.publish();
      })
      .catch((err: unknown) => this.host.warn(err, `fast-path listener could not start on ${host}:${port}; asks to this node go over Redis`));
  }

  /** Where this process takes direct asks, once its listener is up. */
  address(): PeerAddress | undefined {
    return this.record === undefined ? undefined : (this.host.codec.open(EnvelopeCodec.fromJson(this.record)).body as PeerAddress);
  }

  /**
   * Sends a frame to `owner`'s current process if a greeted connection to it is up. Otherwise
   * returns false (the caller uses Redis) and gets ready for the next one: connects, or re-reads the
   * records when the owner's names no process or an older one.
   */
  send(owner: string, frame: string): boolean {
    const peer = this.peers.get(owner);
    const epoch = this.host.members().get(owner)?.epoch;
    if (peer !== undefined && peer.nodeEpoch === epoch && this.link.send(peer, frame)) return true;
    if (peer === undefined || peer.nodeEpoch !== epoch) void this.read(true);
    return false;
  }

  /** Every REFRESH_ROUNDS rounds: refreshes this process's record and reads the others'. */
  refresh(): void {
    this.publish();
    void this.read();
  }

  /**
   * Reads the other members' records; each must be sealed with the bus secret and name the node it
   * is stored under. `soon`: an owner had none, so read now unless read within a round.
   */
  async read(soon = false): Promise<void> {
    const now = this.host.clock.monotonic();
    if (this.closed || (soon && now - this.readAt < this.host.roundMs)) return;
    this.readAt = now;
    const members = this.host.members();
    const ids = [...members.keys()].filter((id) => id !== this.selfId);
    for (const id of this.peers.keys()) if (!members.has(id)) this.peers.delete(id);
    if (ids.length === 0) return;
    try {
      const records = await this.host.redis.mget(...ids.map((id) => this.host.recordKey(id)));
      ids.forEach((id, i) => {
        const env = records[i] == null ? undefined : this.host.open(EnvelopeCodec.fromJson(records[i]!));
        if (env?.t === 'peer' && env.body.nodeId === id) this.peers.set(id, env.body);
        else this.peers.delete(id);
      });
    } catch (err) {
      this.host.warn(err, 'fast-path addresses not read');
    }
  }

  /** Closes every connection and the listener, and removes this process's record. */
  async close(): Promise<void> {
    this.closed = true;
    this.link.close();
    if (this.record !== undefined && this.selfId !== undefined) await this.host.redis.del(this.host.recordKey(this.selfId)).catch(() => undefined);
  }

  /** Writes this process's record (it expires unless refreshed, so a dead process's goes away). */
  private publish(): void {
    if (this.record === undefined || this.closed) return;
    this.host.redis.set(this.host.recordKey(this.selfId!), this.record, 'PX', RECORD_TTL_ROUNDS * this.host.roundMs).catch((err: Error) => this.host.warn(err, 'fast-path address not published'));
  }
}

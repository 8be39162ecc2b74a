import { createServer, connect as tcpConnect, type AddressInfo, type Server, type Socket } from 'node:net';
import { EnvelopeCodec, EnvelopeError, type PeerAddress } from './codec.js';

/** A frame longer than this closes its connection: fast-path envelopes are a few kilobytes. */
const MAX_FRAME = 1 << 20;
/** After a failed connection, the next attempt to the same process waits this long (asks use pub/sub meanwhile). */
const RETRY_MS = 1000;
/** A connection whose greeting has not come within this long is dropped. */
const GREETING_MS = 2000;

/** What the link reports to its bus. */
export interface PeerLinkEvents {
  /** A frame from a peer: an ask on the server side (with `reply` to answer on the same connection), an answer on the client side. */
  onFrame(frame: string, reply?: (frame: string) => void): void;
  /** A connection was dropped for a reason worth counting (bad greeting, oversize frame, socket error). */
  onProblem(err: Error, what: string): void;
}

/** One outgoing connection, to one node process. */
interface Outgoing {
  readonly to: PeerAddress;
  readonly socket: Socket;
  greeted: boolean;
}

/**
 * The fast path's direct channel: a TCP listener per node process, and one connection from each
 * node to each owner it asks. Frames are envelopes (the bus's, HMAC-sealed) as JSON, one per line.
 * A server greets each connection with its sealed `peer` record; a client sends nothing before the
 * greeting has named the very process it meant to reach (node id and epoch), so an address that has
 * gone to another process, or a listener that is not a fleet member, gets no asks. Anything not
 * sealed with the bus secret closes the connection. Nothing here decides credit: the bus does.
 */
export class PeerLink {
  private server?: Server;
  private self?: PeerAddress;
  private readonly out = new Map<string, Outgoing>();
  private readonly retryAt = new Map<string, number>();
  private readonly accepted = new Set<Socket>();
  private closed = false;

  constructor(
    private readonly codec: EnvelopeCodec,
    private readonly events: PeerLinkEvents,
  ) {}

  /** Starts the listener; resolves with the address to advertise (`advertise` host, the port bound). */
  async listen(identity: { nodeId: string; nodeEpoch: string }, host: string, port: number, advertise: string): Promise<PeerAddress> {
    const server = createServer((socket) => this.accept(socket));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err: Error) => this.events.onProblem(err, 'fast-path listener error'));
    this.self = { ...identity, host: advertise, port: (server.address() as AddressInfo).port };
    return this.self;
  }

  /**
   * Sends a frame to a node process if a greeted connection to it is up; otherwise starts connecting
   * (unless a recent attempt failed) and returns false, so the caller takes another way.
   */
  send(to: PeerAddress, frame: string): boolean {
    if (this.closed) return false;
    const o = this.out.get(to.nodeId);
    if (o !== undefined && (o.to.nodeEpoch !== to.nodeEpoch || o.to.host !== to.host || o.to.port !== to.port)) this.drop(o);
    else if (o !== undefined) {
      if (!o.greeted) return false;
      o.socket.write(`${frame}\n`);
      return true;
    }
    if ((this.retryAt.get(to.nodeId) ?? 0) <= performance.now()) this.open(to);
    return false;
  }

  /** Whether a greeted connection to this process is up. */
  connected(to: PeerAddress): boolean {
    const o = this.out.get(to.nodeId);
    return o !== undefined && o.greeted && o.to.nodeEpoch === to.nodeEpoch;
  }

  close(): void {
    this.closed = true;
    for (const o of [...this.out.values()]) this.drop(o);
    for (const s of this.accepted) s.destroy();
    this.server?.close();
  }

  // ---- server side ------------------------------------------------------------------------------

  private accept(socket: Socket): void {
    if (this.closed || this.self === undefined) {
      socket.destroy();
      return;
    }
    this.accepted.add(socket);
    socket.setNoDelay(true);
    socket.on('close', () => this.accepted.delete(socket));
    socket.on('error', () => socket.destroy());
    const reply = (frame: string): void => {
      if (!socket.destroyed) socket.write(`${frame}\n`);
    };
    socket.write(`${EnvelopeCodec.toJson(this.codec.seal('peer', this.self))}\n`);
    this.frames(socket, (frame) => this.events.onFrame(frame, reply));
  }

  // ---- client side ------------------------------------------------------------------------------

  private open(to: PeerAddress): void {
    if (!(to.port > 0 && to.port < 65536)) return;
    const socket = tcpConnect({ host: to.host, port: to.port });
    const o: Outgoing = { to, socket, greeted: false };
    this.out.set(to.nodeId, o);
    socket.setNoDelay(true);
    socket.setTimeout(GREETING_MS, () => {
      if (!o.greeted) this.fail(o, new Error(`no greeting from ${to.host}:${to.port} within ${GREETING_MS} ms`));
    });
    socket.on('error', (err: Error) => this.fail(o, err));
    socket.on('close', () => this.drop(o));
    this.frames(socket, (frame) => {
      if (o.greeted) return this.events.onFrame(frame);
      const env = this.codec.open(EnvelopeCodec.fromJson(frame));
      if (env.t !== 'peer' || env.body.nodeId !== to.nodeId || env.body.nodeEpoch !== to.nodeEpoch) {
        throw new EnvelopeError('malformed', `greeting: ${to.host}:${to.port} is not node ${to.nodeId} (process ${to.nodeEpoch})`);
      }
      o.greeted = true;
      socket.setTimeout(0);
    });
  }

  private fail(o: Outgoing, err: Error): void {
    this.retryAt.set(o.to.nodeId, performance.now() + RETRY_MS);
    if (this.out.get(o.to.nodeId) === o) this.events.onProblem(err, 'fast-path connection failed; asks go over Redis');
    this.drop(o);
  }

  private drop(o: Outgoing): void {
    if (this.out.get(o.to.nodeId) === o) this.out.delete(o.to.nodeId);
    o.socket.destroy();
  }

  /**
   * Splits a socket's bytes into lines and hands each to `each`. A frame over the size cap, or one
   * `each` throws on (a bad greeting), closes the socket: a peer that sends such is not one of ours.
   */
  private frames(socket: Socket, each: (frame: string) => void): void {
    let buffered = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const frame = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        try {
          each(frame);
        } catch (err) {
          this.events.onProblem(err as Error, 'fast-path frame rejected; connection closed');
          socket.destroy();
          return;
        }
      }
      if (buffered.length > MAX_FRAME) {
        this.events.onProblem(new Error(`a frame over ${MAX_FRAME} bytes`), 'fast-path frame rejected; connection closed');
        socket.destroy();
      }
    });
  }
}

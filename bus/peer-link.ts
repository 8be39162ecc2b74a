import { randomBytes } from 'node:crypto';
import { createServer, connect as tcpConnect, type AddressInfo, type Server, type Socket } from 'node:net';
import { EnvelopeCodec, EnvelopeError, type PeerAddress } from './codec.js';

/** Longest ask a listener takes (64 requests are about 15 KB), and longest answer a node takes. */
const MAX_ASK = 256 << 10;
const MAX_ANSWER = 4 << 20;
/** Connections a listener holds at once (a fleet is at most a few dozen nodes, each with one). */
const MAX_ACCEPTED = 256;
/** A connection that has not said hello (listener side) or been greeted (node side) within this long is dropped. */
const HANDSHAKE_MS = 2000;
/** After a failed connection, the next attempt to the same process waits this long (asks use pub/sub meanwhile). */
const RETRY_MS = 1000;
/**
 * A connection that has had asks out and heard nothing for this long is taken for dead (a path that
 * drops packets): longer than a log write may take (its command timeout is 2 s).
 */
const SILENT_MS = 3000;
/** Bytes queued on a socket beyond which its peer is taken for stuck. */
const MAX_QUEUED = 1 << 20;
const KEEPALIVE_MS = 10_000;
const NONCE = /^[A-Za-z0-9_-]{16,64}$/;

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
  readonly nonce: string;
  greeted: boolean;
  /** When the first frame still unanswered went out (anything received answers them all); 0: none out. */
  waitingSince: number;
}

/**
 * The fast path's direct channel: a TCP listener per node process, and one connection from each
 * node to each owner it asks. Frames are envelopes (the bus's, HMAC-sealed) as JSON, one per line.
 * A node opens with a sealed `hello` carrying a fresh nonce; the listener answers with a sealed
 * `greeting` — its node id, node epoch and address, and that nonce — and the node sends nothing
 * before the greeting names the very process it meant to reach: an address that has gone to another
 * process, a listener outside the fleet, or one replaying an old greeting gets no asks. Anything not
 * sealed with the bus secret closes the connection; so do oversized frames, a handshake not done
 * within 2 s, a peer that stops reading, and (node side) 3 s with asks out and nothing back, after
 * which asks go over Redis until a new connection is greeted. Nothing here decides credit: the bus does.
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
    if (this.closed) server.close(); // closed while it was starting
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
      const now = performance.now();
      if ((o.waitingSince > 0 && now - o.waitingSince > SILENT_MS) || o.socket.writableLength > MAX_QUEUED) {
        this.fail(o, new Error(`nothing from ${o.to.host}:${o.to.port} for ${(now - o.waitingSince).toFixed(0)} ms with asks out, ${o.socket.writableLength} bytes queued`));
        return false;
      }
      if (o.waitingSince === 0) o.waitingSince = now;
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
    if (this.closed || this.self === undefined || this.accepted.size >= MAX_ACCEPTED) {
      socket.destroy();
      return;
    }
    const self = this.self;
    this.accepted.add(socket);
    socket.setNoDelay(true);
    socket.setKeepAlive(true, KEEPALIVE_MS);
    const handshake = setTimeout(() => socket.destroy(), HANDSHAKE_MS);
    socket.on('close', () => {
      clearTimeout(handshake);
      this.accepted.delete(socket);
    });
    socket.on('error', () => socket.destroy());
    const reply = (frame: string): void => {
      if (socket.destroyed) return;
      if (socket.writableLength > MAX_QUEUED) socket.destroy();
      else socket.write(`${frame}\n`);
    };
    let hello = false;
    this.frames(socket, MAX_ASK, (frame) => {
      if (hello) return this.events.onFrame(frame, reply);
      const env = this.codec.open(EnvelopeCodec.fromJson(frame));
      if (env.t !== 'hello' || !NONCE.test(env.body.nonce)) throw new EnvelopeError('malformed', 'hello: the first frame must be a hello with a nonce of 16-64 of A-Z a-z 0-9 _ -');
      hello = true;
      clearTimeout(handshake);
      socket.write(`${EnvelopeCodec.toJson(this.codec.seal('greeting', { ...self, nonce: env.body.nonce }))}\n`);
    });
  }

  // ---- client side ------------------------------------------------------------------------------

  private open(to: PeerAddress): void {
    if (!(to.port > 0 && to.port < 65536)) return;
    const socket = tcpConnect({ host: to.host, port: to.port });
    const o: Outgoing = { to, socket, nonce: randomBytes(18).toString('base64url'), greeted: false, waitingSince: 0 };
    this.out.set(to.nodeId, o);
    socket.setNoDelay(true);
    socket.setKeepAlive(true, KEEPALIVE_MS);
    socket.setTimeout(HANDSHAKE_MS, () => {
      if (!o.greeted) this.fail(o, new Error(`no greeting from ${to.host}:${to.port} within ${HANDSHAKE_MS} ms`));
    });
    socket.on('connect', () => socket.write(`${EnvelopeCodec.toJson(this.codec.seal('hello', { nonce: o.nonce }))}\n`));
    socket.on('error', (err: Error) => this.fail(o, err));
    socket.on('close', () => this.drop(o));
    this.frames(socket, MAX_ANSWER, (frame) => {
      o.waitingSince = 0;
      if (o.greeted) return this.events.onFrame(frame);
      const env = this.codec.open(EnvelopeCodec.fromJson(frame));
      if (env.t !== 'greeting' || env.body.nodeId !== to.nodeId || env.body.nodeEpoch !== to.nodeEpoch || env.body.nonce !== o.nonce) {
        throw new EnvelopeError('malformed', `greeting: ${to.host}:${to.port} is not node ${to.nodeId} (process ${to.nodeEpoch}) answering this connection`);
      }
      o.greeted = true;
      this.retryAt.delete(to.nodeId);
      socket.setTimeout(0);
    });
  }

  private fail(o: Outgoing, err: Error): void {
    const now = performance.now();
    for (const [id, at] of this.retryAt) if (at <= now) this.retryAt.delete(id);
    this.retryAt.set(o.to.nodeId, now + RETRY_MS);
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
  private frames(socket: Socket, max: number, each: (frame: string) => void): void {
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
      if (buffered.length > max) {
        this.events.onProblem(new Error(`a frame over ${max} bytes`), 'fast-path frame rejected; connection closed');
        socket.destroy();
      }
    });
  }
}

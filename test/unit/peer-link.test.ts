import { expect } from 'chai';
import { createServer, connect, type AddressInfo, type Server } from 'node:net';
import { EnvelopeCodec, type PeerAddress } from '../../bus/codec.js';
import { PeerLink } from '../../bus/peer-link.js';
import { waitFor } from '../support/wait.js';

const codec = new EnvelopeCodec([{ version: 'b1', secret: 'peer-link-secret-0123' }]);

/** A link that records what reaches it; a server-side link echoes each frame back as `echo:<frame>`. */
function link(): { link: PeerLink; frames: string[]; problems: string[] } {
  const frames: string[] = [];
  const problems: string[] = [];
  const l = new PeerLink(codec, {
    onFrame: (frame, reply) => {
      if (frame === 'throw') throw new Error('not an envelope');
      frames.push(frame);
      reply?.(`echo:${frame}`);
    },
    onProblem: (err, what) => problems.push(`${what}: ${err.message}`),
  });
  return { link: l, frames, problems };
}

const until = (check: () => boolean, what: string): Promise<void> => waitFor(check, { what, timeoutMs: 3000, intervalMs: 5 });

/** Sends until the link takes the frame (the first sends only open the connection). */
async function sendWhenUp(l: PeerLink, to: PeerAddress, frame: string): Promise<void> {
  await until(() => l.send(to, frame), 'the connection to be greeted');
}

describe('PeerLink: the fast path’s direct channel', () => {
  const open: Array<PeerLink | Server> = [];
  afterEach(() => {
    for (const x of open.splice(0)) x.close();
  });

  it('connects on first use, sends only after the greeting names the process it meant, and carries answers back', async () => {
    const server = link();
    const client = link();
    open.push(server.link, client.link);
    const addr = await server.link.listen({ nodeId: 'owner', nodeEpoch: 'e1' }, '127.0.0.1', 0, '127.0.0.1');
    expect(addr).to.include({ nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1' });
    expect(client.link.send(addr, 'first')).to.equal(false); // not connected yet: the caller takes Redis
    await sendWhenUp(client.link, addr, 'ask-1');
    expect(client.link.connected(addr)).to.equal(true);
    await until(() => client.frames.includes('echo:ask-1'), 'the answer');
    expect(server.frames).to.deep.equal(['ask-1']);
  });

  it('drops a listener that greets as another process (a reused address), and does not retry at once', async () => {
    const impostor = link();
    const client = link();
    open.push(impostor.link, client.link);
    const addr = await impostor.link.listen({ nodeId: 'owner', nodeEpoch: 'e2' }, '127.0.0.1', 0, '127.0.0.1');
    const meant = { ...addr, nodeEpoch: 'e1' };
    client.link.send(meant, 'ask');
    await until(() => client.problems.length > 0, 'the greeting to be refused');
    expect(client.problems[0]).to.match(/is not node owner \(process e1\)/);
    expect(client.link.send(meant, 'ask')).to.equal(false);
    await new Promise((r) => setTimeout(r, 50)); // fixed: proves no frame reaches the impostor within it
    expect(impostor.frames).to.deep.equal([]);
  });

  /** A listener that answers each hello with `greet(nonce)`, then swallows everything. */
  async function fakeListener(greet: (nonce: string) => string): Promise<{ to: PeerAddress; received: string[] }> {
    const received: string[] = [];
    const fake = createServer((s) => {
      s.setEncoding('utf8');
      s.on('data', (d: string) => {
        if (received.length === 0) {
          const hello = codec.open(EnvelopeCodec.fromJson(d.split('\n')[0]!));
          if (hello.t === 'hello') s.write(`${greet(hello.body.nonce)}\n`);
        }
        received.push(d);
      });
      s.on('error', () => undefined);
    });
    await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
    open.push(fake);
    return { to: { nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1', port: (fake.address() as AddressInfo).port }, received };
  }

  it('drops a listener whose greeting is not sealed with the bus secret, or answers another nonce (a replay)', async () => {
    const forger = new EnvelopeCodec([{ version: 'b1', secret: 'someone-elses-secret' }]);
    const cases: Array<[(nonce: string) => string, RegExp]> = [
      [(nonce) => EnvelopeCodec.toJson(forger.seal('greeting', { nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1', port: 1, nonce })), /mac/],
      [() => EnvelopeCodec.toJson(codec.seal('greeting', { nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1', port: 1, nonce: 'an-old-nonce-0123456789' })), /answering this connection/],
      [() => EnvelopeCodec.toJson(codec.seal('peer', { nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1', port: 1 })), /answering this connection/],
    ];
    for (const [greet, why] of cases) {
      const { to } = await fakeListener(greet);
      const client = link();
      open.push(client.link);
      client.link.send(to, 'ask');
      await until(() => client.problems.length > 0, 'the greeting to be refused');
      expect(client.problems[0]).to.match(why);
      expect(client.link.connected(to)).to.equal(false);
    }
  });

  it('takes a connection that answers nothing for 3 s with asks out for dead, and sends over it no more', async function () {
    this.timeout(10_000);
    const { to, received } = await fakeListener((nonce) => EnvelopeCodec.toJson(codec.seal('greeting', { nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1', port: 1, nonce })));
    const client = link();
    open.push(client.link);
    await sendWhenUp(client.link, to, 'ask-0');
    // Many asks out at once are no sign of a dead path: only silence is.
    for (let i = 1; i <= 100; i++) expect(client.link.send(to, `ask-${i}`)).to.equal(true);
    await new Promise((r) => setTimeout(r, 3100)); // fixed: the 3 s of silence is the point, and only a send checks it
    expect(client.link.send(to, 'ask-late')).to.equal(false);
    expect(client.problems[0]).to.match(/nothing from .* with asks out/);
    expect(client.link.connected(to)).to.equal(false);
    await new Promise((r) => setTimeout(r, 20)); // fixed: time for a wrongly written ask-late to arrive
    expect(received.join('')).to.include('ask-100').and.not.include('ask-late');
  });

  it('closes a connection that sends no sealed hello, a frame the bus refuses, or one over the size cap', async () => {
    const server = link();
    open.push(server.link);
    const addr = await server.link.listen({ nodeId: 'owner', nodeEpoch: 'e1' }, '127.0.0.1', 0, '127.0.0.1');
    const hello = EnvelopeCodec.toJson(codec.seal('hello', { nonce: 'nonce-0123456789abcdef' }));
    const unsealed = JSON.stringify({ v: '1', kid: 'b1', t: 'hello', b: JSON.stringify({ nonce: 'nonce-0123456789abcdef' }), mac: 'AAAA' });
    for (const payload of [`${hello}\nthrow\n`, 'not a hello\n', `${unsealed}\n`, 'x'.repeat(300 * 1024)]) {
      const s = connect(addr.port, '127.0.0.1');
      let closed = false;
      s.on('close', () => (closed = true));
      s.on('error', () => undefined);
      s.resume(); // read the greeting, so the close is seen
      s.on('connect', () => s.write(payload));
      await until(() => closed, 'the connection to be closed');
    }
    expect(server.problems.map((p) => p.replace(/:.*/, ''))).to.deep.equal(Array(4).fill('fast-path frame rejected; connection closed'));
    expect(server.frames).to.deep.equal([]);
  });
});

import { expect } from 'chai';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { EnvelopeCodec, type PeerAddress } from '../../bus/codec.js';
import { PeerLink } from '../../bus/peer-link.js';

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

async function until(check: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 3000;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

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
    await new Promise((r) => setTimeout(r, 50));
    expect(impostor.frames).to.deep.equal([]);
  });

  it('drops a listener whose greeting is not sealed with the bus secret', async () => {
    const sockets: Socket[] = [];
    const forger = new EnvelopeCodec([{ version: 'b1', secret: 'someone-elses-secret' }]);
    const fake = createServer((s) => {
      sockets.push(s);
      s.write(`${EnvelopeCodec.toJson(forger.seal('peer', { nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1', port: 1 }))}\n`);
    });
    await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
    open.push(fake);
    const client = link();
    open.push(client.link);
    const to = { nodeId: 'owner', nodeEpoch: 'e1', host: '127.0.0.1', port: (fake.address() as AddressInfo).port };
    client.link.send(to, 'ask');
    await until(() => client.problems.length > 0, 'the forged greeting to be refused');
    expect(client.problems[0]).to.match(/mac/);
    expect(client.link.connected(to)).to.equal(false);
    for (const s of sockets) s.destroy();
  });

  it('closes a connection that sends a frame the bus refuses, or one over the size cap', async () => {
    const server = link();
    open.push(server.link);
    const addr = await server.link.listen({ nodeId: 'owner', nodeEpoch: 'e1' }, '127.0.0.1', 0, '127.0.0.1');
    for (const payload of ['throw\n', 'x'.repeat(1.5 * 2 ** 20)]) {
      const s = connect(addr.port, '127.0.0.1');
      let closed = false;
      s.on('close', () => (closed = true));
      s.on('error', () => undefined);
      s.resume(); // read the greeting, so the close is seen
      s.on('connect', () => s.write(payload));
      await until(() => closed, 'the connection to be closed');
    }
    expect(server.problems.map((p) => p.replace(/:.*/, ''))).to.deep.equal(['fast-path frame rejected; connection closed', 'fast-path frame rejected; connection closed']);
    expect(server.frames).to.deep.equal([]);
  });
});

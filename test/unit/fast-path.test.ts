import { expect } from 'chai';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { FastPath, type FastPathStats } from '../../bus/fast-path.js';
import type { CreditRequest, Grant, OwnerMessage } from '../../lib/protocol/messages.js';
import { waitFor } from '../support/wait.js';

const EPOCH = 'e1';

function grant(): Grant {
  return { type: 'grant', keyId: 'v1:k', windowId: 1, windowMs: 1000, nodeId: 'n', nodeEpoch: EPOCH, lease: 1, ownerEpoch: 1, grantSeq: 1, issued: 1 };
}

const request: CreditRequest = {
  keyId: 'v1:k',
  windowId: 1,
  windowMs: 1000,
  limit: 10,
  nodeId: 'n',
  nodeEpoch: EPOCH,
  lease: 1,
  spent: 0,
  selfIssued: 0,
  released: 0,
  need: 1,
  demand: 1,
  fastPath: true,
};

/** Busy for `ms`: the event loop runs nothing meanwhile, as in a GC pause or a starved CPU. */
function block(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* stall */
  }
}

/**
 * A fast path whose answers come back over a real socket, so they are read in the loop's poll phase
 * as an owner's are: `reply()` writes one (the "owner" answering now).
 */
async function overSocket(): Promise<{ fp: FastPath; stats: FastPathStats; delivered: OwnerMessage[]; reply: () => void; close: () => void }> {
  const stats: FastPathStats = { asksSent: 0, asksDirect: 0, answersLate: 0, fastPathTimeouts: 0 };
  const delivered: OwnerMessage[] = [];
  let lastAsk = 0;
  const fp = new FastPath({
    stats,
    send: (_owner, ask) => {
      lastAsk = ask.id;
      return true;
    },
    deliver: (m) => delivered.push(m),
    current: (ms) => [...ms],
    nodeEpoch: () => EPOCH,
  });
  const server: Server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
  const owner = await accepted;
  client.on('data', (buf) => {
    for (const id of buf.toString().split(',').filter(Boolean)) fp.answer(Number(id), [grant()]);
  });
  return {
    fp,
    stats,
    delivered,
    reply: () => owner.write(`${lastAsk},`),
    close: () => {
      client.destroy();
      owner.destroy();
      server.close();
    },
  };
}

describe('FastPath deadline', () => {
  it('an answer that arrived while this process was stalled counts: its own lag is not the owner’s', async () => {
    const t = await overSocket();
    try {
      const answer = t.fp.ask('n', new Map([['owner', [request]]]), { local: [], missed: false, deadlineMs: 1 });
      t.reply(); // the owner answers at once
      block(20); // …but this loop only gets to read it long after the deadline
      const grants = await answer;
      expect(grants, 'the answer was waiting to be read when the deadline passed').to.have.length(1);
      expect(t.stats.fastPathTimeouts).to.equal(0);
    } finally {
      t.close();
    }
  });

  it('an owner that has not answered by the deadline misses it, and its late answer is kept for later', async () => {
    const t = await overSocket();
    try {
      const start = performance.now();
      const grants = await t.fp.ask('n', new Map([['owner', [request]]]), { local: [], missed: false, deadlineMs: 1 });
      expect(grants).to.equal(undefined);
      expect(performance.now() - start, 'settled about when the deadline passed').to.be.lessThan(500);
      expect(t.stats.fastPathTimeouts).to.equal(1);
      t.reply();
      await waitFor(() => t.delivered.length > 0, { what: 'the late answer to be read', timeoutMs: 2000 });
      expect(t.delivered, 'the late grant is applied all the same').to.have.length(1);
      expect(t.stats.answersLate).to.equal(1);
    } finally {
      t.close();
    }
  });
});

describe('FastPath: grants made in process whose log write is out', () => {
  it('settles with them once on record, with nothing if the log refused them, like an owner’s answer', async () => {
    const t = await overSocket();
    try {
      const g = grant();
      expect(await t.fp.ask('n', new Map(), { local: [], missed: false, deadlineMs: 1000, unrecorded: [Promise.resolve([g])] })).to.deep.equal([g]);
      expect(await t.fp.ask('n', new Map(), { local: [], missed: false, deadlineMs: 1000, unrecorded: [Promise.resolve([])] })).to.deep.equal([]);
      expect(t.stats.fastPathTimeouts).to.equal(0);
    } finally {
      t.close();
    }
  });

  it('a write that comes back after the deadline misses it; its grant is applied then, never before', async () => {
    const t = await overSocket();
    try {
      let written!: (grants: readonly Grant[]) => void;
      const out = new Promise<readonly Grant[]>((r) => (written = r));
      expect(await t.fp.ask('n', new Map(), { local: [], missed: false, deadlineMs: 1, unrecorded: [out] })).to.equal(undefined);
      expect(t.stats.fastPathTimeouts).to.equal(1);
      expect(t.delivered).to.deep.equal([]);
      written([grant()]);
      await out;
      await new Promise((r) => setImmediate(r));
      expect(t.delivered).to.have.length(1);
    } finally {
      t.close();
    }
  });
});

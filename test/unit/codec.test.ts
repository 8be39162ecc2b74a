import { expect } from 'chai';
import { createHmac } from 'node:crypto';
import { EnvelopeCodec, EnvelopeError, type EnvelopeFields } from '../../bus/codec.js';
import { ConfigError } from '../../lib/errors.js';
import type { CreditRequest, Grant, ReportBatch } from '../../lib/protocol/messages.js';

const SECRET = 'bus-secret-0123456789';
const codec = new EnvelopeCodec([{ version: 'b1', secret: SECRET }]);

const batch: ReportBatch = {
  shard: 3,
  nodeId: 'node-1',
  nodeEpoch: 'e-1',
  round: 12,
  reports: [
    { keyId: 'v1:AAAAAAAAAAAAAAAAAAAAAA', windowId: 5, windowMs: 1000, limit: 100, lease: 2, seq: 12, spent: 7, issued: 10, selfIssued: 0, released: 1, demand: 2.5, held: 2, selfGrant: false },
  ],
};
/** A credit request, leasing, stating no issued credit (a previous release's). */
const request: CreditRequest = {
  keyId: 'v1:AAAAAAAAAAAAAAAAAAAAAA',
  windowId: 5,
  windowMs: 1000,
  limit: 100,
  nodeId: 'node-1',
  nodeEpoch: 'e-1',
  lease: 2,
  spent: 0,
  selfIssued: 0,
  released: 0,
  need: 1,
  demand: 1,
  fastPath: true,
};
const grant: Grant = { type: 'grant', keyId: 'v1:AAAAAAAAAAAAAAAAAAAAAA', windowId: 5, windowMs: 1000, nodeId: 'node-1', nodeEpoch: 'e-1', lease: 2, ownerEpoch: 7, grantSeq: 3, issued: 10 };

/** Re-signs a tampered body with the real secret: only the field checks stand between it and the owner. */
function resign(f: EnvelopeFields, body: unknown, v = f.v): EnvelopeFields {
  const b = JSON.stringify(body);
  const mac = createHmac('sha256', SECRET).update(`${v}\n${f.t}\n`).update(b).digest('base64url');
  return { ...f, v, b, mac };
}

function rejects(f: Readonly<Record<string, unknown>>, reason: string, message: RegExp): void {
  let err: unknown;
  try {
    codec.open(f);
  } catch (e) {
    err = e;
  }
  expect(err, 'must be rejected').to.be.instanceOf(EnvelopeError);
  expect((err as EnvelopeError).reason).to.equal(reason);
  expect((err as EnvelopeError).message).to.match(message);
}

describe('bus envelopes (B3): versioned, authenticated, all-or-nothing', () => {
  it('round-trips every body type', () => {
    expect(codec.open(codec.seal('reports', batch))).to.deep.equal({ t: 'reports', body: batch });
    expect(codec.open(codec.seal('grants', { shard: 3, grants: [grant] }))).to.deep.equal({ t: 'grants', body: { shard: 3, grants: [grant] } });
    // The writer's owner epoch, signed (an older release's entries have none).
    expect(codec.open(codec.seal('grants', { shard: 3, grants: [grant], epoch: 4 })).body).to.deep.equal({ shard: 3, grants: [grant], epoch: 4 });
    const adjust = { ...grant, type: 'adjust' as const, keep: -1, exhausted: true };
    const { issued: _, ...adjustOnly } = adjust;
    expect(codec.open(codec.seal('messages', { re: 4, nodeId: 'node-1', messages: [grant, adjustOnly] })).body).to.deep.equal({ re: 4, nodeId: 'node-1', messages: [grant, adjustOnly] });
    const entries = [
      { kind: 'report' as const, batch },
      { kind: 'grant' as const, grant },
    ];
    expect(codec.open(codec.seal('snapshot', { shard: 3, entries })).body).to.deep.equal({ shard: 3, entries });
  });

  it('carries a blanket in a log entry of no grants and in a checkpoint, and a statement that blankets are counted', () => {
    const blanket = { shard: 3, nodeId: 'node-1', nodeEpoch: 'e-1', ownerEpoch: 4, startsAfter: 1_700_000_000_000, startsBy: 1_700_000_002_000, retired: false };
    const entry = codec.seal('grants', { shard: 3, grants: [], epoch: 4, blanket });
    expect(codec.open(entry).body).to.deep.equal({ shard: 3, grants: [], epoch: 4, blanket });
    const entries = [
      { kind: 'grant' as const, grant },
      { kind: 'blanket' as const, blanket },
    ];
    expect(codec.open(codec.seal('snapshot', { shard: 3, entries, epoch: 4 })).body).to.deep.equal({ shard: 3, entries, epoch: 4 });
    const statement = { freshAt: 5, stale: [], selfGranted: [] };
    expect(codec.open(codec.seal('beat', { nodeId: 'n', nodeEpoch: 'e', statement: { ...statement, blankets: true } })).body).to.deep.include({ statement: { ...statement, blankets: true } });
    expect(codec.open(codec.seal('beat', { nodeId: 'n', nodeEpoch: 'e', statement })).body, 'an older release states nothing').to.deep.include({ statement });
    const bad = JSON.parse(entry.b) as Record<string, unknown[]>;
    bad.blanket![5] = -1;
    rejects(resign(entry, bad), 'malformed', /blanket\.startsBy/);
  });

  it('tolerates fields of a newer release: extra body keys, extra trailing record fields, extra envelope fields', () => {
    const f = codec.seal('reports', batch);
    const body = JSON.parse(f.b) as { reports: unknown[][] } & Record<string, unknown>;
    body.compression = 'none';
    // After the last fields this release knows (`fixedShare`, 0 when not set, `seen`, `floated` and `blanketed`).
    body.reports[0]!.push(0, 0, 0, 0, 42, 'future');
    const opened = codec.open({ ...resign(f, body), trace: 'abc' });
    expect(opened).to.deep.equal({ t: 'reports', body: { ...batch, reports: [{ ...batch.reports[0]!, seen: 0 }] } });
  });

  it('carries the fixed-share flag of reports and asks only when set; without it, leasing', () => {
    const fixed: ReportBatch = { ...batch, reports: [{ ...batch.reports[0]!, fixedShare: true }] };
    const f = codec.seal('reports', fixed);
    expect(codec.open(f)).to.deep.equal({ t: 'reports', body: fixed });
    expect((JSON.parse(f.b) as { reports: unknown[][] }).reports[0]).to.have.length(14);
    // A leasing report without `seen` (a report ahead for the next window) is written as before the
    // flag existed: 13 fields. A report of a running window carries `seen`, so it is 15 — the flag
    // written 0, then `seen` — and a peer of the previous release reads the first 13 (trailing
    // fields are tolerated, above) as leasing.
    expect((JSON.parse(codec.seal('reports', batch).b) as { reports: unknown[][] }).reports[0]).to.have.length(13);
    const current: ReportBatch = { ...batch, reports: [{ ...batch.reports[0]!, seen: 3 }] };
    expect((JSON.parse(codec.seal('reports', current).b) as { reports: unknown[][] }).reports[0]).to.have.length(15);
    const ask = { id: 1, nodeId: 'node-1', nodeEpoch: 'e-1', requests: [{ ...request, fixedShare: true }, request] };
    expect(codec.open(codec.seal('ask', ask)).body).to.deep.equal(ask);
    // Requests seen, after the flag (written 0 when not set); a report without it is a previous release's.
    const seen: ReportBatch = {
      ...batch,
      reports: [
        { ...batch.reports[0]!, seen: 9 },
        { ...batch.reports[0]!, seen: 9, fixedShare: true },
      ],
    };
    const sealed = codec.seal('reports', seen);
    expect((JSON.parse(sealed.b) as { reports: unknown[][] }).reports.map((r) => r.slice(13))).to.deep.equal([
      [0, 9],
      [1, 9],
    ]);
    expect(codec.open(sealed).body).to.deep.equal(seen);
    // A flag that is not 0 or 1 rejects the whole entry, naming it.
    const body = JSON.parse(f.b) as { reports: unknown[][] };
    body.reports[0]![13] = 2;
    rejects(resign(f, body), 'malformed', /^reports\[0\]\.fixedShare: must be 0 or 1/);
  });

  it('writes every field in its place: records whose fields all differ survive the round trip, in wire order', () => {
    // Distinct values per field, so a swapped pair of fields in an encoder or decoder cannot pass.
    const report = {
      keyId: 'v1:r',
      windowId: 11,
      windowMs: 12,
      limit: 13,
      lease: 14,
      seq: 15,
      spent: 16,
      issued: 17,
      selfIssued: 18,
      released: 19,
      demand: 20.5,
      held: 21.5,
      selfGrant: true,
      fixedShare: true,
      seen: 22,
      floated: 17,
    };
    const reports: ReportBatch = { shard: 1, nodeId: 'n', nodeEpoch: 'e', round: 2, reports: [report] };
    const f = codec.seal('reports', reports);
    expect((JSON.parse(f.b) as { reports: unknown[][] }).reports[0]).to.deep.equal(['v1:r', 11, 12, 13, 14, 15, 16, 17, 18, 19, 20.5, 21.5, 1, 1, 22, 17]);
    expect(codec.open(f).body).to.deep.equal(reports);
    const g: Grant = { type: 'grant', keyId: 'v1:g', windowId: 31, windowMs: 32, nodeId: 'gn', nodeEpoch: 'ge', lease: 33, ownerEpoch: 34, grantSeq: 35, issued: 36, floated: 7, late: 1 };
    const adjust = { type: 'adjust' as const, keyId: 'v1:a', windowId: 41, windowMs: 42, nodeId: 'an', nodeEpoch: 'ae', lease: 43, ownerEpoch: 44, keep: -1, exhausted: true, grantSeq: 45 };
    const m = codec.seal('messages', { re: 3, nodeId: 'n', messages: [g, adjust] });
    expect((JSON.parse(m.b) as { messages: unknown[][] }).messages).to.deep.equal([
      ['g', ['v1:g', 31, 32, 'gn', 'ge', 33, 34, 35, 36, 7, 1]],
      ['a', ['v1:a', 41, 42, 'an', 'ae', 43, 44, -1, 1, 45]],
    ]);
    expect(codec.open(m).body).to.deep.equal({ re: 3, nodeId: 'n', messages: [g, adjust] });
    const request = {
      keyId: 'v1:q',
      windowId: 51,
      windowMs: 52,
      limit: 53,
      nodeId: 'qn',
      nodeEpoch: 'qe',
      lease: 54,
      spent: 55,
      selfIssued: 56,
      released: 57,
      need: 58,
      demand: 59.5,
      fastPath: true,
      fixedShare: true,
      issued: 60,
      floated: 51,
    };
    const a = codec.seal('ask', { id: 4, nodeId: 'qn', nodeEpoch: 'qe', requests: [request] });
    expect((JSON.parse(a.b) as { requests: unknown[][] }).requests[0]).to.deep.equal(['v1:q', 51, 52, 53, 'qn', 'qe', 54, 55, 56, 57, 58, 59.5, 1, 1, 60, 51]);
    expect(codec.open(a).body).to.deep.equal({ id: 4, nodeId: 'qn', nodeEpoch: 'qe', requests: [request] });
  });

  it('carries the part of issued that came out of a float in reports and asks, never more than issued', () => {
    const floated: ReportBatch = { ...batch, reports: [{ ...batch.reports[0]!, seen: 9, floated: 4 }] };
    const f = codec.seal('reports', floated);
    expect((JSON.parse(f.b) as { reports: unknown[][] }).reports[0]!.slice(13)).to.deep.equal([0, 9, 4]);
    expect(codec.open(f).body).to.deep.equal(floated);
    // Without `seen` (a report ahead), it is written as `spent`: what an owner reads when absent.
    const ahead: ReportBatch = { ...batch, reports: [{ ...batch.reports[0]!, floated: 4 }] };
    expect(codec.open(codec.seal('reports', ahead)).body).to.deep.equal({ ...batch, reports: [{ ...batch.reports[0]!, seen: 7, floated: 4 }] });
    const body = JSON.parse(f.b) as { reports: unknown[][] };
    body.reports[0]![15] = 11;
    rejects(resign(f, body), 'malformed', /^reports\[0\]\.floated: must not be more than issued/);

    const ask = { id: 1, nodeId: 'node-1', nodeEpoch: 'e-1', requests: [{ ...request, spent: 7, issued: 10, floated: 3 }, { ...request, spent: 7, issued: 10 }, request] };
    const a = codec.seal('ask', ask);
    expect((JSON.parse(a.b) as { requests: unknown[][] }).requests.map((r) => r.slice(13))).to.deep.equal([[0, 10, 3], [0, 10], []]);
    expect(codec.open(a).body).to.deep.equal(ask);
    const ab = JSON.parse(a.b) as { requests: unknown[][] };
    ab.requests[1]!.push(11);
    rejects(resign(a, ab), 'malformed', /^requests\[1\]\.floated: must not be more than issued/);
  });

  it('carries the credit a node took itself under a blanket in reports and asks, and a blanket’s members, naming a bad field', () => {
    const took: ReportBatch = { ...batch, reports: [{ ...batch.reports[0]!, seen: 9, blanketed: 1 }] };
    const f = codec.seal('reports', took);
    expect((JSON.parse(f.b) as { reports: unknown[][] }).reports[0]!.slice(13)).to.deep.equal([0, 9, 0, 1]);
    expect(codec.open(f).body).to.deep.equal(took);
    const body = JSON.parse(f.b) as { reports: unknown[][] };
    body.reports[0]![16] = 11;
    rejects(resign(f, body), 'malformed', /^reports\[0\]\.blanketed: must not be more than issued/);
    // An ask that says nothing of `issued` but what it took writes that as its `issued`.
    const ask = {
      id: 1,
      nodeId: 'node-1',
      nodeEpoch: 'e-1',
      requests: [
        { ...request, issued: 10, blanketed: 1 },
        { ...request, blanketed: 1 },
      ],
    };
    expect(codec.open(codec.seal('ask', ask)).body).to.deep.equal({ ...ask, requests: [ask.requests[0], { ...request, issued: 1, blanketed: 1 }] });

    const holders = [
      { nodeId: 'n1', nodeEpoch: 'n1-e', since: 1_700_000_000_000, until: 1_700_000_002_000 },
      { nodeId: 'n2', nodeEpoch: 'n2-e', since: 1_700_000_002_000 },
    ];
    const blanket = {
      shard: 3,
      nodeId: 'node-1',
      nodeEpoch: 'e-1',
      ownerEpoch: 4,
      startsAfter: 1_699_999_999_000,
      startsBy: 1_700_000_004_000,
      retired: true,
      held: { min: 16_384, startsBy: 1_700_000_003_000, holders },
    };
    const entry = codec.seal('grants', { shard: 3, grants: [], epoch: 4, blanket });
    expect(codec.open(entry).body).to.deep.equal({ shard: 3, grants: [], epoch: 4, blanket });
    const bad = JSON.parse(entry.b) as { blanket: unknown[] };
    (bad.blanket[7] as unknown[])[1] = 1_700_000_005_000;
    rejects(resign(entry, bad), 'malformed', /^blanket\.held\.startsBy: must not be after the blanket/);
    ((bad.blanket[7] as unknown[])[2] as unknown[][])[1]![2] = 'soon';
    rejects(resign(entry, bad), 'malformed', /^blanket\.held\.holders\[1\]\[2\]/);
  });

  it('names the bad field however deep it is, and whichever record of a list holds it', () => {
    const two: ReportBatch = { ...batch, reports: [batch.reports[0]!, { ...batch.reports[0]!, seen: 1 }] };
    const f = codec.seal('reports', two);
    const body = JSON.parse(f.b) as { reports: unknown[][] };
    body.reports[1]![14] = -1;
    rejects(resign(f, body), 'malformed', /^reports\[1\]\.seen: must be a non-negative integer/);
    const m = codec.seal('messages', { re: 0, nodeId: 'node-1', messages: [grant, { ...grant, floated: 2 }] });
    const mb = JSON.parse(m.b) as { messages: Array<[string, unknown[]]> };
    mb.messages[1]![1][9] = 99;
    rejects(resign(m, mb), 'malformed', /^messages\[1\]\.grant\.floated: must not be more than issued/);
    const s = codec.seal('snapshot', {
      shard: 3,
      entries: [
        { kind: 'grant', grant },
        { kind: 'report', batch },
      ],
    });
    const sb = JSON.parse(s.b) as { entries: Array<[string, { reports: unknown[][] }]> };
    sb.entries[1]![1].reports[0]![0] = 'no spaces allowed';
    rejects(resign(s, sb), 'malformed', /^entries\[1\]\.batch\.reports\[0\]\.keyId: must be an id string/);
  });

  it('rejects an unknown schema version whole', () => {
    const f = codec.seal('reports', batch);
    rejects(resign(f, JSON.parse(f.b), '2'), 'version', /^v: unknown schema version "2"/);
  });

  it('rejects an entry without a MAC, with a wrong MAC, or signed with a secret nobody shares (forged)', () => {
    const f = codec.seal('grants', { shard: 3, grants: [grant] });
    rejects({ ...f, mac: undefined }, 'malformed', /mac/);
    rejects({ ...f, mac: f.mac.slice(1) + 'A' }, 'mac', /^mac: does not match/);
    const forger = new EnvelopeCodec([{ version: 'b1', secret: 'not-the-bus-secret!!' }]);
    rejects(forger.seal('grants', { shard: 3, grants: [{ ...grant, issued: 1_000_000 }] }), 'mac', /does not match/);
    rejects({ ...f, kid: 'b9' }, 'secret', /^kid: unknown bus secret version "b9"/);
    // A body changed after signing.
    rejects({ ...f, b: f.b.replace('10]', '9999]') }, 'mac', /does not match/);
  });

  it('rejects any bad field whole, naming it', () => {
    const f = codec.seal('reports', batch);
    const body = JSON.parse(f.b) as { reports: unknown[][]; nodeId: unknown };
    const spent = structuredClone(body);
    spent.reports[0]![6] = -3;
    rejects(resign(f, spent), 'malformed', /^reports\[0\]\.spent: must be a non-negative integer/);
    const node = structuredClone(body);
    node.nodeId = 'a b';
    rejects(resign(f, node), 'malformed', /^nodeId: must be an id string/);
    const short = structuredClone(body);
    short.reports[0] = short.reports[0]!.slice(0, 5);
    rejects(resign(f, short), 'malformed', /^reports\[0\]: must be an array of at least 13 fields/);
    rejects({ ...f, t: 'drop-table' }, 'malformed', /^t: unknown type/);
    rejects(resign(f, 'not an object'), 'malformed', /must be an object/);
    const g = codec.seal('grants', { shard: 3, grants: [grant] });
    const stale = JSON.parse(g.b) as { grants: unknown[][] };
    stale.grants[0]![6] = 0;
    rejects(resign(g, stale), 'malformed', /^grants\[0\]\.ownerEpoch: must be a positive integer/);
  });

  it('accepts entries under every retained secret version, writes under the current one', () => {
    const old = new EnvelopeCodec([{ version: 'b1', secret: SECRET }]);
    const rotated = new EnvelopeCodec(
      [
        { version: 'b1', secret: SECRET },
        { version: 'b2', secret: 'second-bus-secret-xyz' },
      ],
      'b2',
    );
    expect(rotated.seal('reports', batch).kid).to.equal('b2');
    expect(rotated.open(old.seal('reports', batch)).body).to.deep.equal(batch);
    expect(() => old.open(rotated.seal('reports', batch))).to.throw(EnvelopeError, /unknown bus secret version "b2"/);
  });

  it('refuses weak or inconsistent secrets at construction, naming every field', () => {
    let err: ConfigError | undefined;
    try {
      new EnvelopeCodec(
        [
          { version: 'b 1', secret: 'short' },
          { version: 'b2', secret: SECRET },
        ],
        'b3',
      );
    } catch (e) {
      err = e as ConfigError;
    }
    expect(err).to.be.instanceOf(ConfigError);
    expect(err!.problems.map((p) => p.path)).to.deep.equal(['busSecret.versions[0].version', 'busSecret.versions[0].secret', 'busSecret.current']);
  });
});

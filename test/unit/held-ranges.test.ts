import { expect } from 'chai';
import { BeatStatements } from '../../bus/beats.js';
import { EnvelopeCodec } from '../../bus/codec.js';
import { FleetTable, type Member, type Ownership } from '../../bus/fleet-table.js';
import { heldRanges } from '../../bus/held-ranges.js';
import type { RedisBusOptions } from '../../bus/redis-bus-types.js';
import type { RoundReply } from '../../bus/scripts.js';
import { FakeClock } from '../../lib/clock.js';
import type { Heartbeat } from '../../lib/membership.js';
import type { HeldShard, HeldStatement } from '../../lib/owner/held.js';
import { randomUUID } from 'node:crypto';
const BUS_SECRET = { versions: [{ version: 'b1', secret: 'held-ranges-test-secret' }] };

/**
 * What a member may take itself under its owners' blankets, as the bus tells its node: only by the
 * statement of the process the ownership table names a shard's owner, at the table's owner epoch, and
 * only within both the held part's range and the member's own; and owners list members only while
 * every one states it counts such credit.
 */
const ME = { nodeId: 'me', nodeEpoch: 'me-e1' };
const owns = (owner: string, ownerProcess: string, epoch: number, ours = false): Ownership => ({ owner, ownerProcess, epoch, expiresAt: Number.MAX_SAFE_INTEGER, ours });
const part = (shard: number, ownerEpoch: number, startsBy = 5000): HeldShard => ({ shard, ownerEpoch, startsAfter: 1000, startsBy, min: 16_384 });
function member(epoch: string, holders: HeldStatement['holders'], shards: HeldShard[], verified = true): Member {
  const held = { holders, shards: new Map(shards.map((h) => [h.shard, h])) };
  const beat: Heartbeat = { freshAt: 0, stale: new Map(), selfGranted: new Map(), blankets: true, holds: true, held };
  return { lastSeen: 0, rejoinedAt: Number.NEGATIVE_INFINITY, epoch, verified, fresh: true, beat };
}

describe('members’ credit under blankets, as the bus states it', () => {
  it('lets a member take only by the current owner process’s statement at the table’s epoch, within both ranges', () => {
    const members = new Map<string, Member>([
      ['a', member('a-e1', [{ nodeEpoch: 'me-e1', since: 2000 }], [part(0, 5), part(1, 5, 1500), part(2, 4), part(6, 5)])],
      ['b', member('b-e2', [{ nodeEpoch: 'me-e1', since: 0 }], [part(5, 5)], false)],
      ['c', member('c-e1', [{ nodeEpoch: 'other', since: 0 }], [part(3, 5)])],
      [
        'd',
        member(
          'd-e1',
          [
            { nodeEpoch: 'me-e1', since: 0, until: 3000 },
            { nodeEpoch: 'me-e1', since: 4000 },
          ],
          [part(4, 5)],
        ),
      ],
      ['me', member('me-e1', [{ nodeEpoch: 'me-e1', since: 0 }], [part(7, 5)])],
    ]);
    const table = [
      owns('a', 'a-e1', 5),
      owns('a', 'a-e1', 5),
      owns('a', 'a-e1', 5),
      owns('c', 'c-e1', 5),
      owns('d', 'd-e1', 5),
      owns('b', 'b-e2', 5),
      owns('a', 'a-e0', 5),
      owns('me', 'me-e1', 5, true),
    ];
    expect(heldRanges(table, members, ME)).to.deep.equal([
      { after: 2000, by: 5000, min: 16_384 }, // its own since is later than the shard's start
      undefined, // the shard's end is before its own since
      undefined, // the statement is of an earlier owner epoch than the table's
      undefined, // it is not listed
      { after: 4000, by: 5000, min: 16_384 }, // listed again after it left: its latest entry
      undefined, // the owner's statement does not verify
      undefined, // the table names another process of the owner
      { after: 1000, by: 5000, min: 16_384 }, // a shard it owns itself, by its own statement
    ]);
    expect(heldRanges(table, members, undefined)).to.deep.equal(new Array(8).fill(undefined));
  });

  it('has owners list every member only while each states it counts such credit', () => {
    const opts = { shards: 8, roundMs: 25, degradedAfterMs: 30_000 } as RedisBusOptions;
    const fleet = new FleetTable(opts, new FakeClock(), new BeatStatements(new EnvelopeCodec(BUS_SECRET.versions), { rejected: {} } as never, () => {}), () => ME);
    fleet.members.set('a', member('a-e1', [], []));
    fleet.members.set('b', member('b-e2', [], []));
    expect(fleet.holders()).to.deep.equal([
      { nodeId: 'a', nodeEpoch: 'a-e1' },
      { nodeId: 'b', nodeEpoch: 'b-e2' },
    ]);
    const older = member('c-e1', [], []);
    fleet.members.set('c', { ...older, beat: { ...older.beat!, holds: undefined } });
    expect(fleet.holders(), 'a member of an older release').to.deep.equal([]);
  });

  it('seals an owner’s held parts into its heartbeat statement as far as they fit, its members once, and opens them', () => {
    const codec = new EnvelopeCodec(BUS_SECRET.versions);
    const beats = new BeatStatements(codec, { rejected: {} } as never, () => {});
    const holders = Array.from({ length: 16 }, (_, i) => ({ nodeEpoch: randomUUID(), since: 1_700_000_000_000 + i, until: 1_700_000_009_000 }));
    const shards = Array.from({ length: 1024 }, (_, s) => ({ shard: s, ownerEpoch: 1_700_000_000_123, startsAfter: 1_700_000_000_000, startsBy: 1_700_000_004_000, min: 16_384 }));
    const sealed = beats.seal({ selfGranted: new Map(), contact: [] }, { nodeId: 'o', nodeEpoch: 'o-e1' }, 'stay', { holders, shards });
    expect(sealed.length).to.be.below(65_536);
    const opened = beats.open('o', sealed)!;
    expect(opened.statement.holds).to.equal(true);
    const stated = opened.statement.held!;
    expect(stated.holders).to.deep.equal(holders);
    expect(stated.shards.length).to.be.within(64, 1023);
    expect(stated.shards).to.deep.equal(shards.slice(0, stated.shards.length));
    // Nothing to state: no key at all (an older release reads the same).
    expect(beats.open('o', beats.seal({ selfGranted: new Map(), contact: [] }, { nodeId: 'o', nodeEpoch: 'o-e1' }, 'stay'))!.statement.held).to.equal(undefined);
  });

  describe('a held part carried whole only when it changed, and by its tag between', () => {
    const codec = new EnvelopeCodec(BUS_SECRET.versions);
    const statements = () => new BeatStatements(codec, { rejected: {} } as never, () => {});
    const O = { nodeId: 'o', nodeEpoch: 'o-e1' };
    const held = (startsBy: number): HeldStatement => ({ holders: [{ nodeEpoch: 'me-e1', since: 0 }], shards: [part(0, 5, startsBy), part(3, 5, startsBy)] });
    // Each statement differs from the last, as a member's do every round (its contact, here its self-grants).
    let round = 0;
    const seal = (w: BeatStatements, h: HeldStatement, who = O) => w.seal({ selfGranted: new Map([[0, ++round]]), contact: [] }, who, 'stay', h);
    const statementOf = (field: string) => (JSON.parse((JSON.parse(field) as { b: string }).b) as { statement: { held?: unknown; heldTag?: number } }).statement;
    const whole = (field: string): boolean => statementOf(field).held !== undefined;

    it('carries it whole the round it changed, the 7 after and every 20th; a reader that has it reads the rest as that part', () => {
      const [writer, reader] = [statements(), statements()];
      const fields = Array.from({ length: 81 }, () => seal(writer, held(5000)));
      expect(fields.map((f, i) => (whole(f) ? i : -1)).filter((i) => i >= 0)).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7, 20, 40, 60, 80]);
      for (const f of fields) expect(reader.open('o', f)!.statement.held).to.deep.equal(held(5000));
    });

    it('states none to a reader that missed every whole one, until the next whole one', () => {
      const writer = statements();
      const fields = Array.from({ length: 21 }, () => seal(writer, held(5000)));
      const late = statements();
      expect(late.open('o', fields[8]!)!.statement.held, 'a tag it does not have').to.equal(undefined);
      expect(late.open('o', fields[19]!)!.statement.held).to.equal(undefined);
      expect(late.open('o', fields[20]!)!.statement.held).to.deep.equal(held(5000));
    });

    it('tags a changed part anew, so a reader holding the old one never reads it for the new', () => {
      const [writer, reader] = [statements(), statements()];
      reader.open('o', seal(writer, held(5000)));
      const changed = Array.from({ length: 9 }, () => seal(writer, held(6000)));
      expect(changed.map(whole)).to.deep.equal([true, true, true, true, true, true, true, true, false]);
      expect(reader.open('o', changed[8]!)!.statement.held, 'missed all eight whole ones').to.equal(undefined);
      expect(reader.open('o', changed[7]!)!.statement.held).to.deep.equal(held(6000));
      expect(reader.open('o', changed[8]!)!.statement.held).to.deep.equal(held(6000));
    });

    it('tags anew at a change of any field it carries, not at the same part made again', () => {
      const writer = statements();
      const tagOf = (h: HeldStatement): number => statementOf(seal(writer, h)).heldTag!;
      const base = (): HeldStatement => ({
        holders: [
          { nodeEpoch: 'me-e1', since: 0 },
          { nodeEpoch: 'x-e1', since: 7, until: 9 },
        ],
        shards: [part(0, 5), { ...part(3, 5), reach: 900 }],
      });
      const changes: Array<(h: HeldStatement) => HeldStatement> = [
        (h) => ({ ...h, holders: [{ ...h.holders[0]!, nodeEpoch: 'me-e2' }, h.holders[1]!] }),
        (h) => ({ ...h, holders: [{ ...h.holders[0]!, since: 1 }, h.holders[1]!] }),
        (h) => ({ ...h, holders: [{ ...h.holders[0]!, until: 3 }, h.holders[1]!] }),
        (h) => ({ ...h, holders: [h.holders[0]!] }),
        ...(['shard', 'ownerEpoch', 'startsAfter', 'startsBy', 'min', 'reach'] as const).map((f) => (h: HeldStatement) => ({ ...h, shards: [h.shards[0]!, { ...h.shards[1]!, [f]: 4 }] })),
        (h) => ({ ...h, shards: [h.shards[0]!, part(3, 5)] }),
        (h) => ({ ...h, shards: [h.shards[1]!, h.shards[0]!] }),
      ];
      let tag = tagOf(base());
      for (const [i, change] of changes.entries()) {
        expect(tagOf(base()), `the same part, made again (before change ${i})`).to.equal(tag);
        const changed = tagOf(change(base()));
        expect(changed, `change ${i}`).to.not.equal(tag);
        tag = tagOf(base());
        expect(tag, `back from change ${i}`).to.not.equal(changed);
      }
    });

    it('never lends one process’s part to another under the same node id and tag', () => {
      const reader = statements();
      const first = statements();
      const firstField = seal(first, held(5000));
      reader.open('o', firstField);
      const restarted = statements();
      const fields = Array.from({ length: 9 }, () => seal(restarted, held(9000), { nodeId: 'o', nodeEpoch: 'o-e2' }));
      expect(reader.open('o', fields[8]!)!.statement.held).to.equal(undefined);
      const tag = statementOf(firstField).heldTag!;
      reader.open('o', firstField);
      // A part carried whole is read as carried, even under the tag the reader holds another part under.
      const again = EnvelopeCodec.toJson(codec.seal('beat', { ...O, statement: { freshAt: 1, stale: [], selfGranted: [], holds: true, held: held(2000), heldTag: tag } }));
      expect(reader.open('o', again)!.statement.held).to.deep.equal(held(2000));
      const tagOnly = EnvelopeCodec.toJson(codec.seal('beat', { ...O, statement: { freshAt: 2, stale: [], selfGranted: [], holds: true, heldTag: tag } }));
      expect(reader.open('o', tagOnly)!.statement.held).to.deep.equal(held(2000));
      const sameTag = EnvelopeCodec.toJson(codec.seal('beat', { nodeId: 'o', nodeEpoch: 'o-e2', statement: { freshAt: 3, stale: [], selfGranted: [], holds: true, heldTag: tag } }));
      expect(reader.open('o', sameTag)!.statement.held, 'another process under the tag the reader holds').to.equal(undefined);
    });

    it('reads an older release’s statement, whole every time and untagged, as it is', () => {
      const reader = statements();
      // As an older release seals it: the part whole, no tag.
      const older = (startsBy: number): string =>
        EnvelopeCodec.toJson(codec.seal('beat', { ...O, statement: { freshAt: 1, stale: [], selfGranted: [], blankets: true, holds: true, held: held(startsBy) } }));
      expect(reader.open('o', older(5000))!.statement.held!.shards[0]!.startsBy).to.equal(5000);
      expect(reader.open('o', older(7000))!.statement.held!.shards[0]!.startsBy).to.equal(7000);
    });
  });

  it('works a shard’s range out from the last round reply, not an earlier one', () => {
    const codec = new EnvelopeCodec(BUS_SECRET.versions);
    const opts = { shards: 8, roundMs: 25, degradedAfterMs: 30_000 } as RedisBusOptions;
    const fleet = new FleetTable(opts, new FakeClock(), new BeatStatements(codec, { rejected: {} } as never, () => {}), () => ME);
    const statement = new BeatStatements(codec, { rejected: {} } as never, () => {}).seal({ selfGranted: new Map(), contact: [] }, { nodeId: 'o', nodeEpoch: 'o-e1' }, 'stay', {
      holders: [{ nodeEpoch: 'me-e1', since: 0 }],
      shards: [part(0, 5), part(1, 5)],
    });
    const reply = (epoch: number): RoundReply => ['10000', ['o', '10000', 'o-e1', statement], ['0', `o/o-e1|${epoch}|20000`, '1', 'o/o-e1|5|20000'], [], [], []];
    fleet.take(0, 0, reply(5));
    expect(fleet.heldFor(0)).to.deep.equal({ after: 1000, by: 5000, min: 16_384 });
    fleet.take(0, 0, reply(6));
    expect(fleet.heldFor(0), 'the table moved to another owner epoch').to.equal(undefined);
    expect(fleet.heldFor(1), 'first asked after the second reply').to.deep.equal({ after: 1000, by: 5000, min: 16_384 });
    fleet.take(0, 0, reply(5));
    expect(fleet.heldFor(0)).to.deep.equal({ after: 1000, by: 5000, min: 16_384 });
  });
});

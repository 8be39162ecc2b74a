import { expect } from 'chai';
import { presentAt, SILENT_ROUNDS, STALE_LISTED, statedContact, unsettled, type Heartbeat, type Presence } from '../../lib/membership.js';

const T = 25;

/** A member last heard at `lastSeen`, stating `beat` (times in the owner's clock). */
function member(lastSeen: number, beat?: Partial<Heartbeat>): Presence {
  const p = presentAt(lastSeen);
  if (beat !== undefined) p.beat = { selfGranted: new Map(), freshAt: lastSeen, stale: new Map(), ...beat };
  return p;
}

describe('membership: when an owner holds back a member’s possible self-grant (F4), in its own time', () => {
  it('while the member is silent: SILENT_ROUNDS without a heartbeat', () => {
    const p = member(1000, {});
    expect(unsettled(p, 3, 0, 1000 + (SILENT_ROUNDS - 1) * T, T)).to.equal(false);
    expect(unsettled(p, 3, 0, 1000 + SILENT_ROUNDS * T, T)).to.equal(true);
  });

  it('while its heartbeats keep coming but it has not heard from this shard’s owner (that owner was paused or cut off)', () => {
    // Heard from every owner at 1000 except shard 3's, last heard at 900.
    const p = member(1000, { freshAt: 1000, stale: new Map([[3, 900]]) });
    expect(unsettled(p, 3, 0, 900 + SILENT_ROUNDS * T - 1, T)).to.equal(false);
    expect(unsettled(p, 3, 0, 900 + SILENT_ROUNDS * T, T)).to.equal(true);
    // Other shards count from freshAt.
    expect(unsettled(p, 4, 0, 900 + SILENT_ROUNDS * T, T)).to.equal(false);
  });

  it('in a shard where it granted itself credit, until its first batch since is folded, however late', () => {
    const p = member(1000, { selfGranted: new Map([[5, 42]]) });
    expect(unsettled(p, 5, 41, 1010, T)).to.equal(true);
    expect(unsettled(p, 5, 41, 1010 + 1000 * T, T)).to.equal(true); // silent by then too
    expect(unsettled(p, 5, 42, 1010, T)).to.equal(false);
    expect(unsettled(p, 6, 0, 1010, T)).to.equal(false); // no self-grant there
  });

  it('a member that states nothing the owner can trust (a release that sends none, a statement that does not verify): always', () => {
    const p = member(1000);
    expect(unsettled(p, 0, Number.MAX_SAFE_INTEGER, 1010, T)).to.equal(true);
    p.lastSeen = 1000 + 1000 * T;
    expect(unsettled(p, 0, Number.MAX_SAFE_INTEGER, 1000 + 1000 * T, T)).to.equal(true);
  });
});

describe('membership: a node’s contact times as its heartbeat states them', () => {
  it('lists only the shards behind the freshest contact, and past STALE_LISTED states every shard as stale as the oldest', () => {
    expect(statedContact([500, 500, 420, 500], (t) => t - 1)).to.deep.equal({ freshAt: 499, stale: new Map([[2, 419]]) });
    const many = Array.from({ length: STALE_LISTED + 8 }, (_, s) => (s <= STALE_LISTED ? 100 + s : 900));
    expect(statedContact(many, (t) => t)).to.deep.equal({ freshAt: 100, stale: new Map() });
  });
});

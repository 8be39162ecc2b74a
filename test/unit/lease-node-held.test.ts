import { expect } from 'chai';
import { FakeClock } from '../../lib/clock.js';
import { LeaseNode, type Denied } from '../../lib/lease-node.js';
import type { HeldRange } from '../../lib/node-contract.js';
import { compilePolicy, type ResolvedLimits } from '../../lib/policy.js';
import { shardOf } from '../../lib/protocol/messages.js';
import { phaseOffset, windowEndMs, windowIdAt } from '../../lib/window.js';
import { RecordingLink } from '../support/links.js';
import { nodeConfig } from '../support/protocol.js';

/**
 * A node's side of members' credit under blankets (`NodeBoundary.takeHeld`): at first sight of a
 * window whose owner's blanket lists it, the node takes one credit itself and admits with no ask. What
 * must hold: only in a window the blanket's range covers, of a limit at least its least, with nothing
 * issued there yet; once per window whatever the map does (a bucket holding it is kept, one a policy
 * change made takes none in its first window, a full map takes none); and every report and ask of
 * the window says so.
 */
const KEY = 'v1:HELDHELDHELDHELDHELD1';
const W = 1000;
const MIN = 16_384;
const limits = (windows: Array<{ windowMs: number; limit: number }>, version = 1): ResolvedLimits =>
  compilePolicy({ version, plans: { p: { windows: windows.map((w, i) => ({ name: `w${i}`, ...w })) } }, defaultPlan: 'p', anonymousPlan: 'p' }).limitsFor(KEY, 't');
const big = limits([{ windowMs: W, limit: 100_000 }]);

/** A link whose owners answer nothing and let this node take credit in windows starting in (after, by]. */
class HoldingLink extends RecordingLink {
  range: HeldRange | undefined = { after: 0, by: Number.MAX_SAFE_INTEGER, min: MIN };
  readonly asked: number[] = [];
  held(shard: number): HeldRange | undefined {
    this.asked.push(shard);
    return this.range;
  }
}

/** The start of KEY's window of length `windowMs` running at `now`. */
const startAt = (now: number, windowMs = W): number => windowEndMs(windowIdAt(now, windowMs, phaseOffset(KEY, windowMs)), windowMs, phaseOffset(KEY, windowMs)) - windowMs;

function setup(maxBuckets = 1000): { node: LeaseNode; link: HoldingLink; clock: FakeClock } {
  const link = new HoldingLink(() => []);
  const clock = new FakeClock(1_700_000_000_000);
  return { node: new LeaseNode(nodeConfig({ maxBuckets }), clock, link), link, clock };
}

describe('lease node: credit taken under a blanket', () => {
  it('takes one credit itself at first sight of a window its owner’s blanket covers and admits with no ask; the next request asks', () => {
    const { node, link, clock } = setup();
    expect(node.acquire(KEY, big)).to.deep.equal({ admitted: true });
    expect(link.requests).to.have.length(0);
    expect(link.asked).to.deep.equal([shardOf(KEY, windowIdAt(clock.now(), W, phaseOffset(KEY, W)), 8)]);
    expect(node.stats.heldTaken).to.equal(1);
    const second = node.acquire(KEY, big);
    expect((second as Denied).admitted).to.equal(false);
    expect(link.requests[0]![0]).to.deep.include({ issued: 1, spent: 1, blanketed: 1 });
    const [report] = node.endRound().flatMap((b) => b.reports);
    expect(report).to.deep.include({ issued: 1, spent: 1, blanketed: 1 });
  });

  it('takes nothing outside the blanket’s range, under its least limit, or without one', () => {
    for (const range of [
      { after: startAt(1_700_000_000_000), by: Number.MAX_SAFE_INTEGER, min: MIN },
      { after: 0, by: startAt(1_700_000_000_000) - 1, min: MIN },
      { after: 0, by: Number.MAX_SAFE_INTEGER, min: 100_001 },
      undefined,
    ]) {
      const { node, link } = setup();
      link.range = range;
      expect((node.acquire(KEY, big) as Denied).admitted, JSON.stringify(range)).to.equal(false);
      expect(node.stats.heldTaken).to.equal(0);
    }
  });

  it('takes one in a window that started before the range if it ends after the reach, and none if it ends by it', () => {
    const now = 1_700_000_000_000;
    const after = startAt(now);
    for (const [reach, took] of [
      [after + W - 1, 1],
      [after + W, 0],
    ] as const) {
      const { node, link } = setup();
      link.range = { after, by: Number.MAX_SAFE_INTEGER, min: MIN, reach };
      expect((node.acquire(KEY, big) as Denied).admitted !== false, `reach ${reach - after}`).to.equal(took === 1);
      expect(node.stats.heldTaken).to.equal(took);
    }
    // Never past the range's end, whatever it reaches back to.
    const { node, link } = setup();
    link.range = { after: 0, by: after - 1, min: MIN, reach: 0 };
    expect((node.acquire(KEY, big) as Denied).admitted).to.equal(false);
  });

  it('takes one in each window of a key, and in each new window again', () => {
    const { node, link, clock } = setup();
    const two = limits([
      { windowMs: W, limit: 100_000 },
      { windowMs: 60_000, limit: 1_000_000 },
    ]);
    expect(node.acquire(KEY, two)).to.deep.equal({ admitted: true });
    expect(node.stats.heldTaken).to.equal(2);
    clock.set(startAt(clock.now()) + W);
    // The 1 s window is new; the 60 s one took already.
    expect((node.acquire(KEY, two) as Denied).admitted).to.equal(false);
    expect(node.stats.heldTaken).to.equal(3);
    expect(link.requests.at(-1)!.map((r) => r.windowMs)).to.deep.equal([60_000]);
  });

  /** Pushes KEY out of a map of `cap` with other keys' requests, a round apart. */
  function evictKey(node: LeaseNode, cap: number): void {
    const other = limits([{ windowMs: W, limit: 10 }]);
    for (let i = 0; i <= cap; i++) {
      node.endRound();
      node.acquire(`v1:OTHEROTHEROTHEROTHER${String(i).padStart(2, '0')}`, other);
    }
    expect(node.buckets.peek(KEY), 'KEY evicted').to.equal(undefined);
  }

  it('takes none in a window again once the bucket that took there was evicted', () => {
    const { node, clock } = setup(3);
    node.acquire(KEY, big);
    evictKey(node, 3);
    expect((node.acquire(KEY, big) as Denied).admitted, 'made again in the same window').to.equal(false);
    expect(node.stats.heldTaken).to.equal(1);
    // The next window takes again.
    clock.set(startAt(clock.now()) + W);
    expect(node.acquire(KEY, big)).to.deep.equal({ admitted: true });
    expect(node.stats.heldTaken).to.equal(2);
  });

  it('takes none in a window again after a policy change left its bucket out and brought it back, evicted between', () => {
    const { node } = setup(3);
    node.acquire(KEY, big);
    // A change drops the 1 s window; the key is evicted; the 1 s window comes back in the same window.
    node.acquire(KEY, limits([{ windowMs: 3_600_000, limit: 10 }], 2));
    evictKey(node, 3);
    expect((node.acquire(KEY, limits([{ windowMs: W, limit: 100_000 }], 3)) as Denied).admitted).to.equal(false);
    expect(node.stats.heldTaken).to.equal(1);
  });

  it('takes none again in a window it took in, rolled out of, and was brought back to by a clock stepped back after an eviction', () => {
    const { node, link, clock } = setup(3);
    node.acquire(KEY, big);
    // Into the next window, with nothing to take there (its shard's range is not given), then out.
    link.range = undefined;
    clock.set(startAt(clock.now()) + W + 1);
    node.acquire(KEY, big);
    evictKey(node, 3);
    link.range = { after: 0, by: Number.MAX_SAFE_INTEGER, min: MIN };
    clock.step(-30);
    expect((node.acquire(KEY, big) as Denied).admitted).to.equal(false);
    expect(node.stats.heldTaken).to.equal(1);
  });

  it('takes none while it remembers as many keys’ takes as its map holds buckets', () => {
    const { node } = setup(1);
    node.acquire(KEY, big);
    evictKey(node, 1);
    expect((node.acquire('v1:ANOTHERANOTHERANOTHER1', big) as Denied).admitted).to.equal(false);
    expect(node.stats.heldTaken).to.equal(1);
  });
});

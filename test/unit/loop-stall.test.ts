import { expect } from 'chai';
import { systemClock } from '../../lib/clock.js';
import { LoopStalls } from '../../bus/loop-stall.js';

function block(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* the loop runs nothing meanwhile */
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('LoopStalls', () => {
  let loop: LoopStalls;
  beforeEach(async () => {
    loop = new LoopStalls(systemClock).start();
    await sleep(30); // a few ticks in
  });
  afterEach(() => loop.stop());

  it('counts a running loop as awake: only its stalls are taken off', async () => {
    const since = performance.now();
    const stalled = loop.stalledMs;
    await sleep(60);
    const awake = loop.awakeSince(since);
    const elapsed = performance.now() - since;
    expect(awake).to.be.at.most(elapsed);
    // On a busy machine the loop may itself be late now and then: that, and nothing else, is off.
    expect(awake).to.be.at.least(elapsed - (loop.stalledMs - stalled) - 15);
  });

  it('does not count a stall of this loop, while it lasts or after', async () => {
    const since = performance.now();
    block(120);
    expect(loop.awakeSince(since), 'during the stall (the tick is overdue)').to.be.lessThan(30);
    await sleep(30);
    const after = loop.awakeSince(since);
    expect(after, 'after it: the 30 ms since, not the 120 ms stall').to.be.lessThan(80);
    expect(loop.stalledMs).to.be.greaterThan(100);
  });

  it('counts only the part of a stall after `since`', async () => {
    block(100);
    const since = performance.now() - 40; // inside the stall, 40 ms before its end
    await sleep(40);
    const awake = loop.awakeSince(since);
    expect(awake).to.be.greaterThan(25);
    expect(awake).to.be.lessThan(75);
  });

  it('reports the worst lateness since the last read, then starts over', async () => {
    block(60);
    await sleep(20);
    expect(loop.takeWorstLag()).to.be.greaterThan(40);
    await sleep(40);
    expect(loop.takeWorstLag()).to.be.lessThan(40);
  });

  it('once stopped, counts every millisecond', async () => {
    loop.stop();
    const since = performance.now();
    block(50);
    expect(loop.awakeSince(since)).to.be.at.least(50);
  });
});

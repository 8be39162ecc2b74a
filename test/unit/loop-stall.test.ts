import { expect } from 'chai';
import { systemClock } from '../../lib/clock.js';
import { LoopStalls } from '../../bus/loop-stall.js';
import { waitFor } from '../support/wait.js';

function block(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* the loop runs nothing meanwhile */
  }
}

// The sleeps here are fixed on purpose: the monitor measures elapsed time, so each lets a known span
// pass with the loop free (it exposes no tick count a test could wait on).
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('LoopStalls', () => {
  let loop: LoopStalls;
  beforeEach(async () => {
    loop = new LoopStalls(systemClock).start();
    await sleep(30); // fixed: a few 10 ms ticks in, so the monitor is armed and steady
  });
  afterEach(() => loop.stop());

  it('counts a running loop as awake: only its stalls are taken off', async () => {
    const since = performance.now();
    const stalled = loop.stalledMs;
    await sleep(60); // fixed: a span of running loop to measure
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
    await sleep(30); // fixed: 30 ms awake after the stall, the figure asserted below
    const after = loop.awakeSince(since);
    expect(after, 'after it: the 30 ms since, not the 120 ms stall').to.be.lessThan(80);
    expect(loop.stalledMs).to.be.greaterThan(100);
  });

  it('counts only the part of a stall after `since`', async () => {
    const before = loop.stalledMs;
    block(100);
    const since = performance.now() - 40; // inside the stall, 40 ms before its end
    await waitFor(() => loop.stalledMs > before, { what: 'the overdue tick to record the stall', timeoutMs: 2000, intervalMs: 1 });
    // The stall ends where the tick that recorded it ran: at the latest now.
    const recorded = performance.now();
    const stalledThen = loop.stalledMs;
    await sleep(40); // fixed: a span awake after the stall
    const awake = loop.awakeSince(since);
    const elapsed = performance.now() - since;
    // The 40 ms of the stall after `since` are taken off, whatever else happened.
    expect(awake).to.be.at.most(elapsed - 40);
    // The 60 ms before `since` are not: only the stall's part after it, and the loop's later stalls on a
    // busy machine (recorded, or overdue now: the 15 ms), are off.
    expect(awake).to.be.at.least(elapsed - (recorded - since) - (loop.stalledMs - stalledThen) - 15);
  });

  it('reports the worst lateness since the last read, then starts over', async () => {
    const stalled = loop.stalledMs;
    block(60);
    await waitFor(() => loop.stalledMs > stalled, { what: 'the overdue tick to record the stall', timeoutMs: 2000, intervalMs: 1 });
    expect(loop.takeWorstLag()).to.be.greaterThan(40);
    await sleep(40); // fixed: a few on-time ticks, to show the worst lag starts over
    expect(loop.takeWorstLag()).to.be.lessThan(40);
  });

  it('once stopped, counts every millisecond', async () => {
    loop.stop();
    const since = performance.now();
    block(50);
    expect(loop.awakeSince(since)).to.be.at.least(50);
  });
});

import { expect } from 'chai';
import { waitFor } from '../support/wait.js';

describe('test support: waitFor', () => {
  it('returns once the condition holds, sync or async, having looked as often as it needed', async () => {
    let looks = 0;
    await waitFor(() => ++looks === 3, { what: 'the third look', intervalMs: 1 });
    expect(looks).to.equal(3);
    let asyncLooks = 0;
    await waitFor(async () => ++asyncLooks === 2, { what: 'the second look', intervalMs: 1 });
    expect(asyncLooks).to.equal(2);
  });

  it('gives up after its timeout with a message naming what it waited for', async () => {
    const start = Date.now();
    const err = await waitFor(() => false, { what: 'a thing that never happens', timeoutMs: 30, intervalMs: 5 }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.equal('timed out after 30 ms waiting for a thing that never happens');
    expect(Date.now() - start).to.be.at.least(30);
  });

  it('fails at once when the check itself throws (an assertion inside it)', async () => {
    let looks = 0;
    const err = await waitFor(
      () => {
        if (++looks === 2) throw new Error('credit applied before the log has it');
        return false;
      },
      { what: 'never reached', timeoutMs: 5000, intervalMs: 1 },
    ).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).to.equal('credit applied before the log has it');
    expect(looks).to.equal(2);
  });
});

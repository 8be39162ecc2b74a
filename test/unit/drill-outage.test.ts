import { expect } from 'chai';
import { KeyHasher } from '../../lib/key-id.js';
import { phaseOffset } from '../../lib/window.js';
import { parseDrillArgs, perSecond, pickKeyHashSecret, renderVerdict, summarize, WINDOW_MS, type DrillOptions, type Sample } from '../../scripts/drill-outage-core.js';

describe('npm run drill:outage: flags, window and verdict', () => {
  it('defaults to the issue drill: 30/s for 110 s, Redis frozen from 10 s for 40 s, 1,000 per hour, degraded after 30 s, 3 nodes', () => {
    expect(parseDrillArgs([])).to.deep.equal({ rate: 30, seconds: 110, outageAt: 10, outageSeconds: 40, limit: 1000, degradedAfterMs: 30_000, nodes: 3, json: false });
    const short = parseDrillArgs(['--seconds', '40', '--outage-at', '5', '--outage-seconds', '15', '--degraded-after-ms', '5000', '--json']) as DrillOptions;
    expect(short).to.include({ seconds: 40, outageAt: 5, outageSeconds: 15, degradedAfterMs: 5000, json: true });
  });

  for (const [args, flag] of [
    [['--rate', '0'], '--rate'],
    [['--rate', '2.5'], '--rate'],
    [['--seconds', 'abc'], '--seconds'],
    [['--limit', '-1'], '--limit'],
    [['--degraded-after-ms', '50'], '--degraded-after-ms'],
    [['--nodes', '0'], '--nodes'],
    [['--outage-at', '100', '--outage-seconds', '10'], '--outage-seconds'],
    [['--bogus'], '--bogus'],
  ] as const) {
    it(`${args.join(' ')} is refused, naming ${flag}`, () => {
      const r = parseDrillArgs(args);
      expect(r).to.have.property('problems');
      expect((r as { problems: string[] }).problems.join('\n')).to.include(flag);
    });
  }

  it('picks the first key-hash secret whose window for the key has the time the run needs', () => {
    const now = 1_700_000_000_000;
    const left = (secret: string): number => {
      const offset = phaseOffset(new KeyHasher([{ version: 'v1', secret }]).hash('demo-hour'), WINDOW_MS);
      return WINDOW_MS - ((((now - offset) % WINDOW_MS) + WINDOW_MS) % WINDOW_MS);
    };
    const secrets = Array.from({ length: 40 }, (_, i) => `drill-secret-${String(i).padStart(4, '0')}`);
    const need = 1_800_000; // half the window: some candidates fail
    const picked = pickKeyHashSecret(secrets, 'demo-hour', now, need)!;
    const first = secrets.findIndex((s) => left(s) >= need);
    expect(first).to.be.at.least(0);
    expect(picked.secret).to.equal(secrets[first]);
    expect(picked.tried).to.equal(first + 1);
    expect(picked.window.leftMs).to.equal(left(picked.secret));
    expect(picked.window.endMs - picked.window.startMs).to.equal(WINDOW_MS);
    expect(now).to.be.at.least(picked.window.startMs).and.below(picked.window.endMs);
    expect(pickKeyHashSecret(secrets, 'demo-hour', now, WINDOW_MS + 1)).to.equal(undefined);
  });

  /** `count` requests one a second from `fromS`, all with `status` (and the degraded header when asked). */
  const run = (fromS: number, count: number, status: number, degraded = false): Sample[] =>
    Array.from({ length: count }, (_, i) => ({ sentMs: (fromS + i) * 1000, doneMs: (fromS + i) * 1000 + 5, status, degraded }));
  const outage = { fromMs: 10_000, toMs: 50_000 };

  it('counts by phase and passes a run shaped like the issue one, scaled down: 5 + 30 (11 degraded) + 6 = 41 ≤ 41 + 11, then nothing', () => {
    const samples = [
      ...run(0, 5, 200), // 5 before
      ...run(5, 5, 429),
      ...run(10, 19, 200), // held credit during the outage
      ...run(29, 10, 429),
      ...run(39, 11, 200, true), // failing open, degraded
      ...run(50, 6, 200), // after recovery: the window's rest
      ...run(56, 10, 429), // spent: nothing more
    ];
    const r = summarize(samples, outage, 41);
    expect(r.phases.before).to.deep.equal({ sent: 10, admitted: 5, degradedAdmitted: 0, refused: 5, other: {} });
    expect(r.phases.during).to.deep.equal({ sent: 40, admitted: 30, degradedAdmitted: 11, refused: 10, other: {} });
    expect(r.phases.after).to.deep.equal({ sent: 16, admitted: 6, degradedAdmitted: 0, refused: 10, other: {} });
    expect(r.window).to.deep.equal({ admitted: 41, bound: 52, ok: true });
    expect(r.afterSpent).to.deep.equal({ spentAtMs: 55_005, fromMs: 55_005, sent: 10, admitted: 0, ok: true });
    expect(r.ok).to.equal(true);
    expect(renderVerdict(r)).to.include('verdict: PASS');
  });

  it('fails when the window admits past limit + degraded admissions, or admits after it is spent', () => {
    const over = summarize([...run(0, 10, 200), ...run(10, 3, 200, true), ...run(50, 5, 200)], outage, 10);
    expect(over.window).to.deep.equal({ admitted: 18, bound: 13, ok: false });
    expect(over.afterSpent).to.include({ spentAtMs: 9005, fromMs: 50_000, admitted: 5, ok: false });
    expect(renderVerdict(over)).to.match(/VIOLATED[\s\S]*verdict: FAIL/);
  });

  it('a window spent during the outage is checked from the thaw; one never spent does not fail; no answer counts as other', () => {
    // Failing open while Redis is down is allowed past the limit; afterwards nothing is.
    const spentInOutage = summarize([...run(0, 5, 200), ...run(40, 10, 200, true), ...run(50, 5, 429)], outage, 8);
    expect(spentInOutage.afterSpent).to.include({ fromMs: 50_000, sent: 5, admitted: 0, ok: true });
    expect(spentInOutage.ok).to.equal(true);
    const unspent = summarize([...run(0, 5, 200), ...run(20, 2, 0), ...run(60, 1, 503)], outage, 100);
    expect(unspent.afterSpent).to.deep.equal({ spentAtMs: null, fromMs: null, sent: 0, admitted: 0, ok: true });
    expect(unspent.total.other).to.deep.equal({ '0': 2, '503': 1 });
    expect(renderVerdict(unspent)).to.include('not reached');
  });

  it('counts each second of the run for --json: admitted, degraded, refused, other', () => {
    const samples = [...run(0, 1, 200), { sentMs: 400, doneMs: 401, status: 429, degraded: false }, ...run(2, 1, 200, true), ...run(2.5, 1, 0)];
    expect(perSecond(samples)).to.deep.equal([
      [1, 0, 1, 0],
      [0, 0, 0, 0],
      [1, 1, 0, 1],
    ]);
  });
});

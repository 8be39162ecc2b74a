import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { Footprint } from '../../scripts/bench-memory.js';

/**
 * The memory targets, held by every test run rather than only by `npm run bench`: a field added to
 * the bucket once pushed 50,000 buckets past N4's 16 MiB and nothing noticed until the next bench.
 * Heap figures after a settled GC are the same from run to run within a few bytes per entry, unlike
 * times, so a bound on them is a fair test. Measured in a child process of its own (`--expose-gc`,
 * no other test's garbage), with the bench's own code (`scripts/bench-memory.ts`).
 */
describe('memory budget (N4, and bytes per key standalone)', function () {
  this.timeout(60_000);
  let rows: Footprint[];

  before(() => {
    const script = fileURLToPath(new URL('../../scripts/bench-memory.js', import.meta.url));
    const code = `import(${JSON.stringify(script)}).then((m) => m.memoryFootprints(50_000, [60_000])).then((r) => process.stdout.write(JSON.stringify(r)))`;
    rows = JSON.parse(execFileSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', code], { encoding: 'utf8' })) as Footprint[];
  });

  const row = (what: string): Footprint => rows.find((r) => r.what === what) as Footprint;

  it('50,000 node buckets fit in 16 MiB (N4)', () => {
    const node = row('node buckets');
    expect(node.count).to.equal(50_000);
    expect(node.mib, `node buckets: ${node.bytesEach} B each, ${node.mib} MiB (npm run bench -- --skip-cost --skip-http shows the same figure)`).to.be.at.most(16);
  });

  it('the standalone limiter keeps at most 300 B per active key with one window', () => {
    const standalone = row('standalone limiter');
    expect(standalone.bytesEach, `standalone limiter: ${standalone.bytesEach} B per key`).to.be.at.most(300);
  });
});

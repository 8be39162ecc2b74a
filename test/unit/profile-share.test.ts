import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../../scripts/profile-share.js', import.meta.url));

/** A V8 CPU profile: round → send → seal, round → send → round (recursion), round itself, and idle. */
function profile(): object {
  const at = (id: number, functionName: string, url: string, children: number[] = []): object => ({ id, callFrame: { functionName, url, lineNumber: id, columnNumber: 0 }, children });
  return {
    nodes: [
      at(1, '(root)', '', [2, 3, 7]),
      at(2, '(idle)', ''),
      at(3, 'endRound', 'file:///x/dist/lib/lease-node/round.js', [4, 6]),
      at(4, 'send', 'file:///x/dist/lib/lease-node/reports.js', [5, 8]),
      at(5, 'seal', 'file:///x/dist/bus/codec.js'),
      at(6, 'demandOf', 'file:///x/dist/lib/lease-node/demand.js'),
      at(7, 'parserOnIncoming', 'node:_http_server'),
      at(8, 'endRound', 'file:///x/dist/lib/lease-node/round.js'),
    ],
    // 1 ms each: idle 2, endRound itself 1, send 1, seal 3, demandOf 1, the nested endRound 1, http 2.
    samples: [2, 2, 3, 4, 5, 5, 5, 6, 8, 7, 7],
    timeDeltas: Array.from({ length: 11 }, () => 1000),
  };
}

describe('profile-share: where a CPU profile went', () => {
  let dir: string;
  let file: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'profile-share-'));
    file = join(dir, 'one.cpuprofile');
    writeFileSync(file, JSON.stringify(profile()));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const run = (...args: string[]): string => execFileSync(process.execPath, [SCRIPT, file, ...args], { encoding: 'utf8' });

  it('gives inclusive shares of busy time, each sample once however often the function recurs', () => {
    const out = run('--fn', 'endRound', '--fn', 'seal@bus/codec.js', '--fn', 'seal@lib/other.js');
    expect(out).to.contain('busy 9 ms, idle 2 ms');
    expect(out).to.match(/77\.78 %\s+7\.0 ms {2}endRound\n/);
    expect(out).to.match(/33\.33 %\s+3\.0 ms {2}seal@bus\/codec\.js\n/);
    expect(out).to.match(/0\.00 %\s+0\.0 ms {2}seal@lib\/other\.js\n/);
  });

  it('--under splits a function by what it called directly, from its outermost call', () => {
    const out = run('--under', 'endRound', '--top', '5');
    const inside = out.slice(out.indexOf('inside endRound'), out.indexOf('top 5 by self time'));
    expect(inside).to.contain('inside endRound (7.0 ms)');
    // send's own sample, seal's three and the nested endRound's: all of it under send.
    expect(inside).to.match(/55\.56 %\s+5\.0 ms {2}send dist\/lib\/lease-node\/reports\.js:5\n/);
    expect(inside).to.match(/11\.11 %\s+1\.0 ms {2}demandOf dist\/lib\/lease-node\/demand\.js:7\n/);
    expect(inside).to.match(/11\.11 %\s+1\.0 ms {2}\(self\)\n/);
    expect(inside).not.to.contain('parserOnIncoming');
  });
});

import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../scripts/cluster.js', import.meta.url));

/** Runs the CLI with `args` and a REDIS_URL nothing listens on (nothing may be started anyway). */
function run(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 10_000, env: { ...process.env, REDIS_URL: 'redis://127.0.0.1:1' } });
}

describe('npm run cluster: argument checks', () => {
  for (const [args, flag] of [
    [['--nodes', '0'], '--nodes'],
    [['--nodes', '33'], '--nodes'],
    [['--nodes', '2.5'], '--nodes'],
    [['--base-port', 'abc'], '--base-port'],
    [['--nodes', '4', '--base-port', '65532'], '--base-port'],
    [['--redis', 'http://127.0.0.1:6379'], '--redis'],
    [['--bogus'], '--bogus'],
  ] as const) {
    it(`${args.join(' ')} → exit 2, naming ${flag}, starting nothing`, () => {
      const r = run(...args);
      expect(r.status, r.stderr).to.equal(2);
      expect(r.stderr).to.include(flag);
      expect(r.stderr).to.include('usage: npm run cluster');
      expect(r.stdout).to.not.include('http://127.0.0.1');
    });
  }

  it('--redis is required when REDIS_URL is not set', () => {
    const env = { ...process.env };
    delete env.REDIS_URL;
    const r = spawnSync(process.execPath, [CLI, '--nodes', '1'], { encoding: 'utf8', timeout: 10_000, env });
    expect(r.status).to.equal(2);
    expect(r.stderr).to.include('--redis is required');
  });
});

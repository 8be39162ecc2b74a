import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** The first fenced block of `lang` in the README section headed `heading` that contains `marker`. */
function block(heading: string, lang: string, marker: string): string {
  const start = readme.indexOf(`\n${heading}\n`);
  expect(start, `README has a section ${heading}`).to.be.at.least(0);
  const fence = new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g');
  fence.lastIndex = start;
  for (let m = fence.exec(readme); m !== null; m = fence.exec(readme)) if (m[1]!.includes(marker)) return m[1]!;
  throw new Error(`no ${lang} block with ${marker} under ${heading}`);
}

/**
 * The README's examples, as a reader copies them. They import `fleet-ratelimit` by name: written inside
 * this package (under dist/), the name resolves to the package itself through its `exports` map.
 */
describe('README examples run as written', function () {
  this.timeout(60_000);
  let dir = '';
  let app: ChildProcess | undefined;
  before(() => {
    dir = mkdtempSync(join(root, 'dist', 'readme-'));
  });
  after(() => {
    app?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('Usage (JavaScript): ten requests a second pass, then a 429 problem; an unknown key gets 401', async () => {
    writeFileSync(join(dir, 'app.mjs'), block('## Usage', 'js', 'app.listen'));
    app = spawn(process.execPath, ['app.mjs'], { cwd: dir, env: { ...process.env, PORT: '0', LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const url = await new Promise<string>((resolve, reject) => {
      app!.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/[\d.:]+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      app!.stderr!.on('data', (d: Buffer) => (out += d.toString()));
      app!.once('exit', (code) => reject(new Error(`the example exited (${code}): ${out}`)));
    });
    const get = (key?: string): Promise<Response> => fetch(`${url}/hello`, { headers: key === undefined ? {} : { 'x-api-key': key } });
    const first = await get('key-of-alice');
    expect(first.status).to.equal(200);
    const body = (await first.json()) as { hello: string; remaining: number };
    expect(body.hello).to.equal('acme');
    expect(body.remaining).to.be.a('number');
    const statuses: number[] = [];
    let refused: Response | undefined;
    // Twelve in a row: a 1 s burst window's boundary may fall among them, so up to two windows' worth pass.
    for (let i = 0; i < 30 && refused === undefined; i++) {
      const res = await get('key-of-alice');
      statuses.push(res.status);
      if (res.status === 429) refused = res;
      else await res.body?.cancel();
    }
    expect(refused, statuses.join(' ')).to.not.equal(undefined);
    expect(statuses.filter((s) => s === 200).length + 1, statuses.join(' ')).to.be.at.least(10);
    expect(refused!.headers.get('content-type')).to.match(/^application\/problem\+json/);
    expect(refused!.headers.get('retry-after')).to.match(/^\d+$/);
    expect(((await refused!.json()) as { error: string }).error).to.equal('RL_QUOTA_EXCEEDED');
    const unknown = await get('key-of-mallory');
    expect(unknown.status).to.equal(401);
    await unknown.body?.cancel();
  });

  it('Usage (TypeScript): a JSON policy through definePolicy compiles under --strict, declarations checked', () => {
    const ts = join(dir, 'ts');
    mkdirSync(ts);
    writeFileSync(join(ts, 'app.ts'), block('## Usage', 'ts', 'definePolicy(doc)'));
    writeFileSync(join(ts, 'policy.json'), block('### Policy', 'json', '"plans"'));
    const compilerOptions = { strict: true, target: 'ES2022', module: 'nodenext', moduleResolution: 'nodenext', resolveJsonModule: true, noEmit: true, skipLibCheck: false, types: ['node'] };
    writeFileSync(join(ts, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['app.ts'] }));
    const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', ts], { encoding: 'utf8' });
    expect(tsc.status, tsc.stdout + tsc.stderr).to.equal(0);
  });
});

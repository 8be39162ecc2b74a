import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { usableBuild } from '../support/previous-release.js';

describe('the previous release kept between runs', () => {
  let root: string;
  let build: string;
  let deps: string;
  let server: string;

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'frl-previous-'));
    build = join(root, 'release');
    deps = join(root, 'checkout-node_modules');
    server = join(build, 'dist', 'demo', 'server.js');
    mkdirSync(deps);
    mkdirSync(join(build, 'dist', 'demo'), { recursive: true });
    writeFileSync(server, '');
    symlinkSync(deps, join(build, 'node_modules'), 'dir');
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('is reused once finished, while the dependencies it links to are there', () => {
    expect(usableBuild(build, server)).to.equal(false);
    writeFileSync(join(build, '.built'), 'commit\n');
    expect(usableBuild(build, server)).to.equal(true);
  });

  it('is built again when the checkout whose dependencies it linked is gone', () => {
    writeFileSync(join(build, '.built'), 'commit\n');
    rmSync(deps, { recursive: true });
    expect(usableBuild(build, server)).to.equal(false);
  });

  it('is built again when its server script is missing', () => {
    writeFileSync(join(build, '.built'), 'commit\n');
    rmSync(server);
    expect(usableBuild(build, server)).to.equal(false);
  });
});

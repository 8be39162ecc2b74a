import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The release a fleet running this one must interoperate with, one release older (the seed's
 * evolution rule: "a node must accept reports from a peer running one release older"). Nothing is
 * tagged yet, so it is the commit of main that the last release of the fleet ran: move it forward
 * when a release ships, never past a commit the fleet may still run.
 */
export const PREVIOUS_RELEASE = '13676de5ce1846a766d4d23e62f29f2ca45c082e';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** What `git` printed, or undefined when it failed. */
function git(...args: string[]): Buffer | undefined {
  const r = spawnSync('git', ['-C', ROOT, ...args], { maxBuffer: 256 * 1024 * 1024 });
  return r.status === 0 ? r.stdout : undefined;
}

/**
 * The demo server script of `commit`, built from this repository's history into a folder of the
 * system's temp directory (kept and reused for the same commit). Its dependencies are this
 * checkout's when its lockfile is the same, else installed with `npm ci`. Returns why not when this
 * checkout has no history of it (an export, or a shallow clone).
 */
export function buildRelease(commit: string = PREVIOUS_RELEASE): { server: string } | { missing: string } {
  if (git('cat-file', '-e', `${commit}^{commit}`) === undefined) return { missing: `this checkout has no commit ${commit} (an export or a shallow clone): run the test in a full clone` };
  const dir = join(tmpdir(), `fleet-ratelimit-release-${commit.slice(0, 12)}`);
  const server = join(dir, 'dist', 'demo', 'server.js');
  if (usableBuild(dir, server)) return { server };
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const tar = git('archive', '--format=tar', commit);
  if (tar === undefined) throw new Error(`git archive ${commit} failed`);
  execFileSync('tar', ['-x', '-C', dir], { input: tar });
  const sameLock = git('show', `${commit}:package-lock.json`)?.equals(readFileSync(join(ROOT, 'package-lock.json')));
  if (sameLock) symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
  else execFileSync('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'ignore' });
  execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: dir, stdio: 'ignore' });
  if (!existsSync(server)) throw new Error(`building ${commit} made no ${server}`);
  writeFileSync(join(dir, '.built'), `${commit}\n`);
  return { server };
}

/**
 * Whether the build kept in `dir` can run `server`: it was finished, and the dependencies it uses are
 * still there. Linked ones belong to the checkout that built it, which may have been removed since
 * (a worktree, a clone in a temp folder): its link then dangles, and the build is made again.
 */
export function usableBuild(dir: string, server: string): boolean {
  return existsSync(join(dir, '.built')) && existsSync(join(dir, 'node_modules')) && existsSync(server);
}

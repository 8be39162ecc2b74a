// `npm run build` (`--tests`: tests too) and the step before every script that runs dist/: compiles
// with `tsc -b` only when a source is newer than the last build (so `npm start` and
// `npm run policy:check` do not pay for loading the compiler), copies the Lua scripts next to the
// compiled bus, and lays out the CommonJS entry points in dist/cjs: a `require` of the package loads
// the one ESM build (Node ≥ 20.19 requires ESM), and TypeScript projects compiled as CommonJS read
// the same declarations as CommonJS ones.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const cjs = join(dist, 'cjs');
const stamp = join(cjs, 'package.json');
const tests = process.argv.includes('--tests');
const mtime = (f) => (existsSync(f) ? statSync(f).mtimeMs : -Infinity);

/** Newest modification time under the given files and folders. */
function newest(paths) {
  let max = -Infinity;
  for (const p of paths) {
    const s = existsSync(p) ? statSync(p) : undefined;
    if (s?.isDirectory()) max = Math.max(max, s.mtimeMs, newest(readdirSync(p).map((f) => join(p, f))));
    else if (s) max = Math.max(max, s.mtimeMs);
  }
  return max;
}

const runtime = ['index.ts', 'lib', 'middleware', 'bus', 'admin', 'demo', 'scripts', 'tsconfig.base.json', 'tsconfig.build.json', 'package-lock.json'];
const projects = [['tsconfig.build.json', 'dist/.runtime.tsbuildinfo', runtime]];
if (tests) projects.push(['tsconfig.json', 'dist/.test.tsbuildinfo', [...runtime, 'test', 'tsconfig.json']]);
const [config] = projects.findLast(([, info, inputs]) => newest(inputs.map((p) => join(root, p))) >= mtime(join(root, info))) ?? [];
if (config !== undefined) {
  const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-b', config], { cwd: root, stdio: 'inherit' });
  if (tsc.status !== 0) process.exit(tsc.status ?? 1);
}

// The layout is redone only when tsc wrote something since the last one.
const infos = readdirSync(dist)
  .filter((f) => f.endsWith('.tsbuildinfo'))
  .map((f) => join(dist, f));
if (existsSync(stamp) && newest([...infos, join(root, 'bus/lua')]) < mtime(stamp)) process.exit(0);

cpSync(join(root, 'bus/lua'), join(dist, 'bus/lua'), { recursive: true });
rmSync(cjs, { recursive: true, force: true });
mkdirSync(cjs, { recursive: true });
for (const dir of ['lib', 'middleware', 'bus', 'admin']) copyDeclarations(join(dist, dir));
cpSync(join(dist, 'index.d.ts'), join(cjs, 'index.d.ts'));
for (const entry of ['index', 'admin/index']) {
  const target = relative(dirname(join(cjs, entry)), join(dist, `${entry}.js`)).replaceAll('\\', '/');
  writeFileSync(join(cjs, `${entry}.cjs`), `'use strict';\nmodule.exports = require('${target.startsWith('.') ? target : `./${target}`}');\n`);
}
// Written last: it marks the layout complete.
writeFileSync(stamp, '{ "type": "commonjs" }\n');

function copyDeclarations(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const from = join(dir, e.name);
    if (e.isDirectory()) copyDeclarations(from);
    else if (e.name.endsWith('.d.ts')) {
      const to = join(cjs, relative(dist, from));
      mkdirSync(dirname(to), { recursive: true });
      cpSync(from, to);
    }
  }
}

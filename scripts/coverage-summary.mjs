// `npm run coverage`, after c8 has run the unit and http layers: line and branch coverage of each
// runtime folder, from c8's json-summary report (source-mapped to the .ts files).
import { readFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'coverage');

const summary = JSON.parse(readFileSync(join(dir, 'coverage-summary.json'), 'utf8'));
const folders = new Map();
for (const [file, s] of Object.entries(summary)) {
  if (file === 'total') continue;
  const folder = relative(root, file).split(sep)[0];
  if (!['lib', 'bus', 'middleware', 'admin'].includes(folder)) continue;
  const f = folders.get(folder) ?? { lines: [0, 0], branches: [0, 0] };
  f.lines[0] += s.lines.covered;
  f.lines[1] += s.lines.total;
  f.branches[0] += s.branches.covered;
  f.branches[1] += s.branches.total;
  folders.set(folder, f);
}
const pct = ([covered, total]) => (total === 0 ? '–' : `${((100 * covered) / total).toFixed(1)} % (${covered}/${total})`);
console.log('\ncoverage of the unit and http layers (npm run coverage):');
console.log('| folder | lines | branches |\n|---|---|---|');
for (const [folder, f] of [...folders].sort()) console.log(`| ${folder}/ | ${pct(f.lines)} | ${pct(f.branches)} |`);

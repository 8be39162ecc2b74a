import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

/**
 * `node dist/scripts/profile-share.js FILE.cpuprofile… [--fn NAME]… [--top 15]`: what share of a
 * process's CPU went through each named function, from a V8 CPU profile (`node --cpu-prof`). A
 * sample counts for a function when the function is anywhere on its stack (inclusive time, each
 * sample once however often the function recurs); shares are of the busy samples (not `(idle)`),
 * so a process that waited on its sockets most of the time still shows where its work went. `NAME`
 * matches a function's name, or `Class.method` as V8 names methods; `NAME@FILE` only in a file whose
 * path ends so (`open@bus/codec.js`: the codec's, not the file system's). `--top` lists the functions with
 * the most self time. `--under NAME` (matched the same way) splits the time spent inside NAME by the
 * function it called directly, `(self)` for its own code: where a round's or a write's time went.
 * Several files are summed (the members of one fleet, say).
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const USAGE = 'usage: node dist/scripts/profile-share.js FILE.cpuprofile… [--fn NAME]… [--under NAME] [--top 15]';

/** Whether `n` is the function `name` names (`NAME` or `NAME@FILE`). */
function named(n: ProfileNode, name: string): boolean {
  const [fn = '', file] = name.split('@');
  return (n.callFrame.functionName === fn || n.callFrame.functionName.endsWith(`.${fn}`)) && (file === undefined || n.callFrame.url.endsWith(file));
}

/** A frame as the listings print it: its name, and its file and line unless it is V8's own. */
function frame(n: ProfileNode): string {
  const fn = n.callFrame.functionName || '(anonymous)';
  return n.callFrame.url === '' ? fn : `${fn} ${n.callFrame.url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${n.callFrame.lineNumber + 1}`;
}

function main(): void {
  const { values, positionals } = parseArgs({ options: { fn: { type: 'string', multiple: true }, under: { type: 'string' }, top: { type: 'string' } }, allowPositionals: true, strict: true });
  if (positionals.length === 0) {
    process.stderr.write(`${USAGE}\n`);
    process.exit(2);
  }
  const names = values.fn ?? [];
  const top = Number(values.top ?? 15);
  let busy = 0;
  let idle = 0;
  const inclusive = new Map<string, number>(names.map((n) => [n, 0]));
  const self = new Map<string, number>();
  const under = values.under;
  const inside = new Map<string, number>();
  let insideTotal = 0;
  for (const file of positionals) {
    const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
    const parent = new Map<number, ProfileNode>();
    const byId = new Map<number, ProfileNode>();
    for (const n of p.nodes) {
      byId.set(n.id, n);
      for (const c of n.children ?? []) parent.set(c, n);
    }
    // The names on each node's stack that a --fn matches, computed once per node.
    const matched = new Map<number, string[]>();
    const matchesOf = (n: ProfileNode): string[] => {
      let m = matched.get(n.id);
      if (m !== undefined) return m;
      const up = parent.get(n.id);
      const own = names.filter((x) => named(n, x));
      m = [...new Set([...(up === undefined ? [] : matchesOf(up)), ...own])];
      matched.set(n.id, m);
      return m;
    };
    // For --under: the outermost call of that function on each node's stack, and the frame right
    // inside it ('(self)' at that call itself; null when the function is not on the stack).
    const outermost = new Map<number, number | null>();
    const outermostOf = (n: ProfileNode): number | null => {
      let r = outermost.get(n.id);
      if (r !== undefined) return r;
      const up = parent.get(n.id);
      r = (up === undefined ? null : outermostOf(up)) ?? (under !== undefined && named(n, under) ? n.id : null);
      outermost.set(n.id, r);
      return r;
    };
    const innerOf = (n: ProfileNode): string | null => {
      const top = outermostOf(n);
      if (top === null) return null;
      if (top === n.id) return '(self)';
      const up = parent.get(n.id)!;
      return up.id === top ? frame(n) : innerOf(up);
    };
    p.samples.forEach((id, i) => {
      const dt = (p.timeDeltas[i] ?? 0) / 1000;
      const n = byId.get(id)!;
      if (n.callFrame.functionName === '(idle)') {
        idle += dt;
        return;
      }
      busy += dt;
      const where = frame(n);
      self.set(where, (self.get(where) ?? 0) + dt);
      const callee = innerOf(n);
      if (callee !== null) {
        inside.set(callee, (inside.get(callee) ?? 0) + dt);
        insideTotal += dt;
      }
      for (const x of matchesOf(n)) inclusive.set(x, inclusive.get(x)! + dt);
    });
  }
  const pct = (x: number): string => `${((100 * x) / busy).toFixed(2).padStart(6)} %`;
  const out = [`${positionals.length} profile(s): busy ${busy.toFixed(0)} ms, idle ${idle.toFixed(0)} ms`, '', 'inclusive share of busy time:'];
  for (const [n, ms] of inclusive) out.push(`  ${pct(ms)}  ${ms.toFixed(1).padStart(9)} ms  ${n}`);
  if (under !== undefined) {
    out.push('', `inside ${under} (${insideTotal.toFixed(1)} ms), by what it called directly:`);
    for (const [w, ms] of [...inside].sort((a, b) => b[1] - a[1]).slice(0, top)) out.push(`  ${pct(ms)}  ${ms.toFixed(1).padStart(9)} ms  ${w}`);
  }
  out.push('', `top ${top} by self time:`);
  for (const [w, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) out.push(`  ${pct(ms)}  ${ms.toFixed(1).padStart(9)} ms  ${w}`);
  process.stdout.write(`${out.join('\n')}\n`);
}

main();

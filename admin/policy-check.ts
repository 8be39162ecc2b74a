#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { PolicyError } from '../lib/errors.js';
import { smallFixedShares } from '../lib/fixed-share-advice.js';
import { compilePolicy } from '../lib/policy.js';

const USAGE = 'usage: fleet-ratelimit-policy-check [--fleet N] FILE [FILE…]\n';

/**
 * `npm run policy:check -- [--fleet N] FILE…` (installed: `fleet-ratelimit-policy-check`): validates
 * policy documents before they are rolled out, printing every problem with its field path. With
 * `--fleet N` (the number of nodes), also warns of fixed-share windows whose share per node is small
 * (`lib/fixed-share-advice.ts`); a warning does not fail the check. Exit code 0 when all are valid,
 * 1 otherwise, 2 on bad usage.
 * A file with a top-level `policy` member (the demo configuration) is checked on that member.
 */
function main(args: string[]): number {
  let fleet: number | undefined;
  const at = args.indexOf('--fleet');
  if (at >= 0) {
    fleet = Number(args[at + 1]);
    if (!Number.isSafeInteger(fleet) || fleet < 1) {
      process.stderr.write(`--fleet: must be a whole number of nodes ≥ 1, got "${args[at + 1] ?? ''}"\n${USAGE}`);
      return 2;
    }
    args = [...args.slice(0, at), ...args.slice(at + 2)];
  }
  const files = args;
  if (files.length === 0) {
    process.stderr.write(USAGE);
    return 2;
  }
  let failed = 0;
  for (const file of files) {
    try {
      const json = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      const doc = json !== null && typeof json === 'object' && 'policy' in json ? json.policy : json;
      const p = compilePolicy(doc);
      const plans = Object.entries(p.doc.plans).map(([name, plan]) => `${name} (${plan.windows.map((w) => `${w.name} ${w.limit}/${w.windowMs / 1000}s`).join(', ')})`);
      process.stdout.write(`${file}: valid, version ${p.version}; plans: ${plans.join('; ')}\n`);
      for (const w of fleet === undefined ? [] : smallFixedShares(p.doc, fleet)) process.stdout.write(`  warning: ${w.path}: ${w.message}\n`);
    } catch (err) {
      failed++;
      if (err instanceof PolicyError) {
        process.stdout.write(`${file}: invalid\n${err.problems.map((q) => `  - ${q.path}: ${q.message}`).join('\n')}\n`);
      } else {
        process.stdout.write(`${file}: cannot be read: ${(err as Error).message}\n`);
      }
    }
  }
  return failed ? 1 : 0;
}

process.exitCode = main(process.argv.slice(2));

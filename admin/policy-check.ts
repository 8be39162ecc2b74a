#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { PolicyError } from '../lib/errors.js';
import { compilePolicy } from '../lib/policy.js';

/**
 * `npm run policy:check -- FILE…` (installed: `fleet-ratelimit-policy-check FILE…`): validates policy
 * documents before they are rolled out, printing every problem with its field path. Exit code 0 when
 * all are valid, 1 otherwise, 2 on bad usage.
 * A file with a top-level `policy` member (the demo configuration) is checked on that member.
 */
function main(files: string[]): number {
  if (files.length === 0) {
    process.stderr.write('usage: fleet-ratelimit-policy-check FILE [FILE…]\n');
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

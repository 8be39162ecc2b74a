import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The type packages the consumer projects install (as an Express 5 app on Node 20 would). */
export const TYPES_EXPRESS = '@types/express@5';
export const TYPES_NODE = '@types/node@20';

/** A tiny TypeScript project that uses the packed tarball; `tsc -p` must pass (or fail as documented). */
export interface ConsumerProject {
  readonly name: string;
  readonly what: string;
  readonly files: Readonly<Record<string, string>>;
  /** Text tsc's output must contain: a documented requirement, shown to fail without it. */
  readonly expectError?: string;
  /** The emitted entry to run with node; it prints `consumer ok`. */
  readonly run?: string;
}

const policyJson = readFileSync(fileURLToPath(new URL('../../demo/policy.json', import.meta.url)), 'utf8');

/** Built through `definePolicy` from the JSON import: no cast, and a bad document is a coded PolicyError. */
const POLICY_BODY = `
const policy: PolicyDoc = definePolicy(demo.policy);
const payments: RouteClassDef | undefined = policy.routeClasses?.payments;
if (payments?.failMode !== 'closed') throw new Error('payments should be fail-closed');
try {
  definePolicy({ ...demo.policy, routeClasses: { x: { failMode: 'sometimes' } } });
  throw new Error('a bad failMode was accepted');
} catch (err) {
  if (!(err instanceof PolicyError) || !(err instanceof ValidationError) || err.code !== 'RL_POLICY') throw err;
  const problems: readonly Problem[] = err.problems;
  if (problems[0]?.path !== 'routeClasses.x.failMode') throw new Error(\`unexpected problems \${JSON.stringify(problems)}\`);
}
`;

/** An Express app with the backstop and the limiter; 12 requests of the free plan see 429s. */
const APP_BODY = `
async function main(): Promise<void> {
${POLICY_BODY}
  const identify = (req: Request): Identity | undefined => {
    const key = req.get('x-api-key');
    return key ? { principal: key, tenant: 'acme' } : undefined;
  };
  // One window of a day: the 12 requests below straddle its boundary (at a per-key time of day) only
  // if it falls in the second they take.
  const daily = definePolicy({ ...demo.policy, version: 2, plans: { ...demo.policy.plans, free: { windows: [{ name: 'daily', limit: 10, windowMs: 86_400_000 }] } } });
  const options: RateLimiterOptions = { policy: daily, identify, routeClass: (req) => (req.path.startsWith('/payments') ? 'payments' : 'default') };
  const limiter = rateLimiter(options);
  const app = express();
  app.use(backstop({ key: (req) => req.get('x-api-key'), perKeyLimit: 1000, nodeCeilingPerSecond: 20000 }));
  app.use(limiter);
  app.get('/hello', (_req, res) => { res.send('hi'); });
  await limiter.ready();
  const server = app.listen(0);
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as { port: number };
  const codes: number[] = [];
  let denial: ProblemBody | undefined;
  for (let i = 0; i < 12; i++) {
    const res = await fetch(\`http://127.0.0.1:\${port}/hello\`, { headers: { 'x-api-key': 'k' } });
    codes.push(res.status);
    if (res.status === 429) denial = (await res.json()) as ProblemBody;
  }
  server.close();
  await limiter.close();
  if (codes.filter((c) => c === 200).length !== 10 || denial?.error !== 'RL_QUOTA_EXCEEDED') throw new Error(\`codes \${codes.join(' ')}\`);
  console.log('consumer ok');
}
main().catch((err) => { console.error(err); process.exitCode = 1; });
`;

const NAMES = 'backstop, definePolicy, PolicyError, rateLimiter, ValidationError, type Identity, type PolicyDoc, type Problem, type ProblemBody, type RateLimiterOptions, type RouteClassDef';

const tsconfig = (options: Record<string, unknown>): string =>
  JSON.stringify({ compilerOptions: { strict: true, target: 'es2022', outDir: 'out', resolveJsonModule: true, types: ['node'], ...options }, files: ['main.ts'] }, null, 2);

/** The projects: without @types/express (policy only) or with it (a whole Express app, run). */
export function consumerProjects(withTypesExpress: boolean): ConsumerProject[] {
  if (!withTypesExpress) {
    const main = `import { definePolicy, PolicyError, ValidationError, type PolicyDoc, type Problem, type RouteClassDef } from 'fleet-ratelimit';
import demo from './policy.json' with { type: 'json' };
${POLICY_BODY}
console.log('consumer ok');
`;
    return [
      {
        name: 'esm-no-types-express',
        what: 'ESM (nodenext), strict, skipLibCheck, no @types/express: compiles',
        files: { 'main.ts': main, 'policy.json': policyJson, 'tsconfig.json': tsconfig({ module: 'nodenext', skipLibCheck: true }) },
        run: 'out/main.js',
      },
      {
        name: 'esm-no-types-express-libcheck',
        what: 'ESM, strict, skipLibCheck off, no @types/express: fails as documented (TS7016 express)',
        files: { 'main.ts': main, 'policy.json': policyJson, 'tsconfig.json': tsconfig({ module: 'nodenext', skipLibCheck: false }) },
        expectError: "TS7016: Could not find a declaration file for module 'express'",
      },
    ];
  }
  const cjsHeader = `import express = require('express');
import { ${NAMES} } from 'fleet-ratelimit';
import type { Request } from 'express';
import demo = require('./policy.json');
`;
  return [
    {
      name: 'esm-nodenext',
      what: 'ESM (module nodenext), strict, skipLibCheck off, with @types/express',
      files: {
        'main.ts': `import express, { type Request } from 'express';\nimport { ${NAMES} } from 'fleet-ratelimit';\nimport demo from './policy.json' with { type: 'json' };\n${APP_BODY}`,
        'policy.json': policyJson,
        'tsconfig.json': tsconfig({ module: 'nodenext', skipLibCheck: false }),
      },
      run: 'out/main.js',
    },
    {
      name: 'cjs-node16',
      what: 'CommonJS (module node16), strict, skipLibCheck off, with @types/express',
      files: { 'main.ts': cjsHeader + APP_BODY, 'policy.json': policyJson, 'package.json': '{ "type": "commonjs" }', 'tsconfig.json': tsconfig({ module: 'node16', skipLibCheck: false }) },
      run: 'out/main.js',
    },
    {
      name: 'cjs-commonjs',
      what: 'CommonJS (module commonjs), strict, skipLibCheck off, with @types/express',
      files: {
        'main.ts': cjsHeader + APP_BODY,
        'policy.json': policyJson,
        'package.json': '{ "type": "commonjs" }',
        'tsconfig.json': tsconfig({ module: 'commonjs', esModuleInterop: true, skipLibCheck: false }),
      },
      run: 'out/main.js',
    },
    {
      name: 'cjs-commonjs-no-interop',
      what: 'CommonJS (module commonjs, no esModuleInterop), strict, skipLibCheck off',
      files: {
        'main.ts': cjsHeader + APP_BODY,
        'policy.json': policyJson,
        'package.json': '{ "type": "commonjs" }',
        'tsconfig.json': tsconfig({ module: 'commonjs', esModuleInterop: false, skipLibCheck: false }),
      },
      run: 'out/main.js',
    },
  ];
}

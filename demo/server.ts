import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { ConfigError } from '../lib/errors.js';
import { createDemoApp } from './app.js';

/**
 * `npm start`: the demo gateway as a fleet of one, in memory. Environment: PORT (3000),
 * POLICY_FILE (demo/policy.json), KEY_HASH_SECRET (random per process if unset), LOG_LEVEL (info).
 */
const logger = pino({ name: 'demo-gateway', level: process.env.LOG_LEVEL ?? 'info' });
const port = Number(process.env.PORT ?? 3000);
const configFile = process.env.POLICY_FILE ?? fileURLToPath(new URL('../../demo/policy.json', import.meta.url));
const secret = process.env.KEY_HASH_SECRET ?? randomBytes(32).toString('base64url');

try {
  const { app, limiter } = createDemoApp({ configFile, keyHash: { versions: [{ version: 'v1', secret }] }, logger, rateLimitHeaders: true });
  const server = app.listen(port, () => {
    logger.info({ port, configFile }, `demo gateway listening on http://127.0.0.1:${port}`);
    process.stdout.write(`\n  Demo gateway: http://127.0.0.1:${port}\n  Try: curl -i -H 'x-api-key: demo-free' http://127.0.0.1:${port}/api/hello\n\n`);
  });
  const stop = (): void => {
    server.close();
    void limiter.close();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`demo gateway: ${configFile} is not valid:\n${err.problems.map((p) => `  - ${p.path}: ${p.message}`).join('\n')}\n`);
    process.exit(1);
  }
  throw err;
}

import { createRequire } from 'node:module';

/** This package's version, as its package.json says (the runtime is built to `dist/middleware/`). */
export const RELEASE: string = (createRequire(import.meta.url)('../../package.json') as { version: string }).version;

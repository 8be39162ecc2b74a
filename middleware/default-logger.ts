import { createRequire } from 'node:module';
import type { Logger } from '../lib/logger.js';

const LEVELS = { debug: 20, info: 30, warn: 40, error: 50 } as const;
type Level = keyof typeof LEVELS;

/**
 * The logger a limiter uses when given none: pino at `LOG_LEVEL` (info) when the app has pino
 * installed (an optional peer), else `jsonLinesLogger`, which writes the same lines.
 */
export function defaultLogger(name: string): Logger {
  const level = process.env.LOG_LEVEL ?? 'info';
  try {
    const { pino } = createRequire(import.meta.url)('pino') as typeof import('pino');
    return pino({ name, level });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw err;
  }
  return jsonLinesLogger(name, level);
}

/**
 * pino's line format without pino: one JSON object per line with `level` as pino's numbers, `time`,
 * `pid`, `name`, the fields (an `err` as its type, message, code and stack) and `msg`. Lines below
 * `level` (or every line, for `silent`) are dropped.
 */
export function jsonLinesLogger(name: string, level: string, write = (line: string): unknown => process.stdout.write(line)): Logger {
  const min = level === 'silent' ? Number.POSITIVE_INFINITY : (LEVELS[level as Level] ?? LEVELS.info);
  const at =
    (lvl: Level) =>
    (fields: object, msg?: string): void => {
      if (LEVELS[lvl] < min) return;
      const { err, ...rest } = fields as { err?: unknown };
      const out: Record<string, unknown> = { level: LEVELS[lvl], time: Date.now(), pid: process.pid, name, ...rest };
      if (err instanceof Error) out.err = { type: err.name, message: err.message, code: (err as NodeJS.ErrnoException).code, stack: err.stack };
      else if (err !== undefined) out.err = err;
      if (msg !== undefined) out.msg = msg;
      write(`${JSON.stringify(out)}\n`);
    };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

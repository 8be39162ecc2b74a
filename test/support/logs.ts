import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';

/** A pino logger at debug level whose lines are kept (parsed) for assertions. */
export function captureLogger(): { logger: Logger; lines: Array<Record<string, unknown>>; text: () => string } {
  const raw: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      raw.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const logger = pino({ level: 'debug' }, stream);
  return {
    logger,
    get lines() {
      return raw.map((l) => JSON.parse(l) as Record<string, unknown>);
    },
    text: () => raw.join('\n'),
  };
}

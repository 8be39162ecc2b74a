/**
 * What the limiter logs through: pino's calling convention, `logger.warn({ …fields }, 'message')`. A
 * pino logger fits as it is, and so does any logger with these four methods.
 */
export interface Logger {
  debug(fields: object, msg?: string): void;
  info(fields: object, msg?: string): void;
  warn(fields: object, msg?: string): void;
  error(fields: object, msg?: string): void;
}

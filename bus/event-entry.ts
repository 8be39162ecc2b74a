import Joi from 'joi';
import { ConfigError } from '../lib/errors.js';
import { joiProblems } from '../lib/validate.js';
import type { LimitEvent, LimitEventOptions } from './limit-event.js';

/**
 * A limit event as a stream entry, and the bound on its size that turns the byte budget into a
 * stream length. Every field is capped (longer values are cut), so no entry exceeds the bound
 * whatever a route-class function returns.
 */

/** Field names in entry order, with the most bytes each value may take. */
const FIELDS = [
  ['keyId', 32],
  ['class', 11],
  ['status', 3],
  ['window', 64],
  ['routeClass', 64],
  ['node', 128],
  ['first', 15],
  ['last', 15],
  ['count', 15],
  ['firstCorrelationId', 128],
  ['lastCorrelationId', 128],
] as const;

/**
 * Redis's cost of an entry beyond its names and values (listpack headers, the entry id, its share of
 * the stream's node and radix tree), rounded up; the integration tests check the bound with MEMORY USAGE.
 */
const ENTRY_OVERHEAD = 160;

/** The most bytes one stored limit event takes in Redis. */
export const MAX_ENTRY_BYTES = FIELDS.reduce((n, [name, max]) => n + name.length + max, ENTRY_OVERHEAD);

/** The stream length a byte budget allows (at least one entry). */
export function maxEntries(maxBytes: number): number {
  return Math.max(1, Math.floor(maxBytes / MAX_ENTRY_BYTES));
}

/** `s` cut to at most `max` UTF-8 bytes, on a character boundary. */
export function clip(s: string, max: number): string {
  if (s.length <= max / 4 || Buffer.byteLength(s) <= max) return s;
  let bytes = 0;
  let end = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch);
    if (bytes + n > max) break;
    bytes += n;
    end += ch.length;
  }
  return s.slice(0, end);
}

/** The entry's field-value list for XADD. */
export function encodeEvent(e: LimitEvent): string[] {
  const values: Record<(typeof FIELDS)[number][0], string> = {
    keyId: e.keyId,
    class: e.class,
    status: String(e.status),
    window: e.window,
    routeClass: e.routeClass,
    node: e.node,
    first: String(e.first),
    last: String(e.last),
    count: String(e.count),
    firstCorrelationId: e.firstCorrelationId,
    lastCorrelationId: e.lastCorrelationId,
  };
  return FIELDS.flatMap(([name, max]) => [name, clip(values[name], max)]);
}

/**
 * A stream entry's fields as a limit event. An entry of the earlier one-per-refusal shape (`at`,
 * `correlationId`) reads as an event counting one refusal.
 */
export function decodeEvent(flat: readonly string[]): LimitEvent {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) f[flat[i]!] = flat[i + 1]!;
  const at = f.at !== undefined ? Number(f.at) : undefined;
  return {
    keyId: f.keyId ?? '',
    class: (f.class ?? 'quota') as LimitEvent['class'],
    status: Number(f.status ?? 0),
    window: f.window ?? '',
    routeClass: f.routeClass ?? '',
    node: f.node ?? '',
    first: at ?? Number(f.first ?? 0),
    last: at ?? Number(f.last ?? 0),
    count: at !== undefined ? 1 : Number(f.count ?? 0),
    firstCorrelationId: f.firstCorrelationId ?? f.correlationId ?? '',
    lastCorrelationId: f.lastCorrelationId ?? f.correlationId ?? '',
  };
}

/** Joi schema of `LimitEventOptions` (also used inside the limiter's `redis` option). */
export const eventOptionsSchema = Joi.object({
  maxBytes: Joi.number()
    .integer()
    .min(65_536)
    .max(2 ** 40),
  flushMs: Joi.number().integer().min(1000).max(3_600_000),
  maxPending: Joi.number().integer().min(1).max(1_000_000),
});

/** Event-log options with every default filled in. */
export type EventConfig = Readonly<Required<LimitEventOptions>>;

export const EVENT_DEFAULTS: EventConfig = Object.freeze({ maxBytes: 256 * 1024 * 1024, flushMs: 60_000, maxPending: 10_000 });

/** Validates event-log options; a `ConfigError` names each bad field under `path`. */
export function parseEventOptions(o: unknown, path = 'events'): EventConfig {
  const { error, value } = eventOptionsSchema.validate(o ?? {}, { abortEarly: false });
  if (error)
    throw new ConfigError(
      joiProblems(error).map((p) => ({ path: p.path === '(root)' ? path : `${path}.${p.path}`, message: p.message })),
      'invalid limit event options',
    );
  return Object.freeze({ ...EVENT_DEFAULTS, ...(value as LimitEventOptions) });
}

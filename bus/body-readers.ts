import { ErrorCode, RateLimiterError } from '../lib/errors.js';

/*
 * The field readers the envelope bodies are decoded with (`bus/bodies.ts`): each names the offending
 * path, and any bad field rejects the whole body with an `EnvelopeError`.
 */

/** Why an envelope was rejected; counted per reason. */
export type RejectReason = 'version' | 'secret' | 'mac' | 'malformed';

/** A rejected envelope: `reason` for counting, `message` names the bad field. */
export class EnvelopeError extends RateLimiterError {
  constructor(
    readonly reason: RejectReason,
    message: string,
  ) {
    super(ErrorCode.REFUSED, message);
  }
}

export type Reader<T> = (v: unknown, path: string) => T;

/**
 * The path readers are given on a first, quiet pass (`quietly`): no path is built for any field, since
 * nearly every body is well formed. A body that fails is read again with paths, for the error.
 */
const QUIET = '\u0000';

/** `p` + `suffix`, unless `p` is quiet. */
export const at = (p: string, suffix: string): string => (p === QUIET ? QUIET : p + suffix);

/**
 * `r`, reading without building paths; a body it rejects is read again with them, so the error names
 * the field as a loud pass would. Readers are pure, so the second pass fails the same way.
 */
export function quietly<T>(r: Reader<T>): Reader<T> {
  return (v, p) => {
    try {
      return r(v, QUIET);
    } catch (err) {
      if (err instanceof EnvelopeError) return r(v, p);
      throw err;
    }
  };
}

export function bad(path: string, what: string): never {
  throw new EnvelopeError('malformed', `${path}: ${what}`);
}

const ID = /^[A-Za-z0-9_.:-]{1,128}$/;
export const str: Reader<string> = (v, p) => (typeof v === 'string' && ID.test(v) ? v : bad(p, 'must be an id string (1-128 of A-Z a-z 0-9 _ . : -)'));
export const uint: Reader<number> = (v, p) => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : bad(p, 'must be a non-negative integer'));
export const int: Reader<number> = (v, p) => (typeof v === 'number' && Number.isSafeInteger(v) ? v : bad(p, 'must be an integer'));
export const posint: Reader<number> = (v, p) => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : bad(p, 'must be a positive integer'));
export const num: Reader<number> = (v, p) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : bad(p, 'must be a non-negative number'));
export const optional =
  <T>(r: Reader<T>): Reader<T | undefined> =>
  (v, p) =>
    v === undefined ? undefined : r(v, p);
export const bool: Reader<boolean> = (v, p) => (v === 0 || v === 1 ? v === 1 : bad(p, 'must be 0 or 1'));

/** A record's fields in wire order; the encoder writes them as an array, the decoder reads them back. */
export type Fields<T> = ReadonlyArray<readonly [keyof T & string, Reader<unknown>]>;

/**
 * A record's encoder and decoder. Both run for every report, grant and ask on the bus: plain loops over
 * arrays kept from the start, where a `map` with a destructuring callback cost several times more.
 */
export function record<T>(fields: Fields<T>): { encode: (x: T) => unknown[]; decode: Reader<T> } {
  const n = fields.length;
  const keys = fields.map(([k]) => k);
  const readers = fields.map(([, r]) => r);
  const suffixes = keys.map((k) => `.${k}`);
  return {
    encode: (x) => {
      const out = new Array<unknown>(n);
      for (let i = 0; i < n; i++) out[i] = readers[i] === bool ? (x[keys[i]!] ? 1 : 0) : x[keys[i]!];
      return out;
    },
    decode: (v, p) => {
      if (!Array.isArray(v) || v.length < n) bad(p, `must be an array of at least ${n} fields`);
      const out: Record<string, unknown> = {};
      // Trailing elements are fields of a newer release: ignored.
      for (let i = 0; i < n; i++) out[keys[i]!] = readers[i]!(v[i], at(p, suffixes[i]!));
      return out as T;
    },
  };
}

export function list<T>(r: Reader<T>, max = 100_000): Reader<T[]> {
  return (v, p) => {
    if (!Array.isArray(v) || v.length > max) bad(p, `must be an array of at most ${max} items`);
    const out = new Array<T>(v.length);
    for (let i = 0; i < v.length; i++) out[i] = r(v[i], p === QUIET ? QUIET : `${p}[${i}]`);
    return out;
  };
}

export function object<T>(fields: { [K in keyof T]: Reader<T[K]> }): Reader<T> {
  const keys = Object.keys(fields);
  return (v, p) => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) bad(p, 'must be an object');
    const out: Record<string, unknown> = {};
    // Keys not listed are a newer release's: ignored.
    for (const k of keys) {
      const x = (fields as Record<string, Reader<unknown>>)[k]!((v as Record<string, unknown>)[k], p === QUIET ? QUIET : p ? `${p}.${k}` : k);
      if (x !== undefined) out[k] = x; // an optional field left out stays out
    }
    return out as T;
  };
}

export const pair =
  <A, B>(a: Reader<A>, b: Reader<B>): Reader<[A, B]> =>
  (v, p) => {
    if (!Array.isArray(v) || v.length < 2) bad(p, 'must be a pair');
    return [a(v[0], at(p, '[0]')), b(v[1], at(p, '[1]'))];
  };

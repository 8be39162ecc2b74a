import { timingSafeEqual } from 'node:crypto';
import { ConfigError } from '../lib/errors.js';
import { HmacSha256 } from '../lib/hmac-sha256.js';
import { decoders, encoders, EnvelopeError, type Bodies, type Envelope, type EnvelopeType } from './bodies.js';

export { EnvelopeError, type BeatStatement, type Bodies, type Envelope, type EnvelopeType, type PeerAddress, type RejectReason } from './bodies.js';

/*
 * Envelopes of the Redis bus (B3). Every entry and message is `{v, kid, t, b, mac}`: schema version,
 * bus-secret version, type, body (a JSON string) and an HMAC-SHA-256 over `v`, `t` and `b` under
 * secret `kid`. Bodies are compact: records are arrays in a fixed field order. A peer one release
 * newer may append fields to a record or add keys to a body; they are ignored. An unknown schema
 * version, an unknown secret version, a bad MAC or any bad field rejects the whole envelope: nothing
 * of it is applied. The decoder is hand-written because it runs for every bus entry (joi costs ~10×).
 */

/** Schema version written by this release. */
export const SCHEMA_VERSION = 1;

/** One version of the bus secret. */
export interface BusSecretVersion {
  /** Label carried in every envelope, e.g. `b1`. */
  readonly version: string;
  /** HMAC secret, at least 16 bytes. */
  readonly secret: string | Buffer;
}

/** Flat fields of an envelope, as stored in a stream entry or serialised for pub/sub. */
export type EnvelopeFields = {
  v: string;
  kid: string;
  t: string;
  b: string;
  mac: string;
};

/**
 * HMAC keys of a versioned secret (the bus's, or the policy store's, named `path` in errors), and the
 * version to write under: `current`, else the last one. Throws a `ConfigError` naming every bad field.
 * Each key MACs with its pads computed once (`HmacSha256`): every bus entry is sealed or opened.
 */
export function secretKeys(versions: readonly BusSecretVersion[], current: string | undefined, path: string): { keys: ReadonlyMap<string, HmacSha256>; current: string } {
  const problems: Array<{ path: string; message: string }> = [];
  const keys = new Map<string, HmacSha256>();
  versions.forEach((v, i) => {
    const bytes = typeof v.secret === 'string' ? Buffer.from(v.secret, 'utf8') : v.secret;
    if (!/^[A-Za-z0-9_-]{1,32}$/.test(v.version)) problems.push({ path: `${path}.versions[${i}].version`, message: 'must be 1-32 of A-Z a-z 0-9 _ -' });
    else if (keys.has(v.version)) problems.push({ path: `${path}.versions[${i}].version`, message: `duplicate version "${v.version}"` });
    if (bytes.length < 16) problems.push({ path: `${path}.versions[${i}].secret`, message: 'must be at least 16 bytes' });
    keys.set(v.version, new HmacSha256(bytes));
  });
  const chosen = current ?? versions[versions.length - 1]?.version ?? '';
  if (versions.length === 0) problems.push({ path: `${path}.versions`, message: 'must hold at least one version' });
  else if (!keys.has(chosen)) problems.push({ path: `${path}.current`, message: `names no version: "${chosen}"` });
  if (problems.length) throw new ConfigError(problems, `invalid ${path === 'busSecret' ? 'bus' : 'policy'} secret`);
  return { keys, current: chosen };
}

/** Whether `got` is the base64url MAC `want`, compared in constant time. */
export function sameMac(want: string, got: unknown): boolean {
  const w = Buffer.from(want, 'base64url');
  const g = typeof got === 'string' ? Buffer.from(got, 'base64url') : Buffer.alloc(0);
  return g.length === w.length && timingSafeEqual(g, w);
}

/**
 * Seals and opens envelopes with the bus secret. Writes under the current version; accepts any
 * retained version, so the secret can be rotated one node at a time.
 */
export class EnvelopeCodec {
  private readonly keys: ReadonlyMap<string, HmacSha256>;
  readonly current: string;

  constructor(versions: readonly BusSecretVersion[], current?: string) {
    ({ keys: this.keys, current: this.current } = secretKeys(versions, current, 'busSecret'));
  }

  /** Encodes and signs a body. */
  seal<T extends EnvelopeType>(t: T, body: Bodies[T]): EnvelopeFields {
    const v = String(SCHEMA_VERSION);
    const b = JSON.stringify(encoders[t](body));
    return { v, kid: this.current, t, b, mac: this.mac(this.keys.get(this.current)!, v, t, b) };
  }

  /** Verifies and decodes an envelope; throws an `EnvelopeError` and applies nothing if anything is off. */
  open(f: Readonly<Record<string, unknown>>): Envelope {
    if (f.v !== String(SCHEMA_VERSION)) throw new EnvelopeError('version', `v: unknown schema version ${JSON.stringify(f.v)}`);
    const key = typeof f.kid === 'string' ? this.keys.get(f.kid) : undefined;
    if (key === undefined) throw new EnvelopeError('secret', `kid: unknown bus secret version ${JSON.stringify(f.kid)}`);
    if (typeof f.t !== 'string' || !Object.hasOwn(decoders, f.t)) throw new EnvelopeError('malformed', `t: unknown type ${JSON.stringify(f.t)}`);
    if (typeof f.b !== 'string' || typeof f.mac !== 'string') throw new EnvelopeError('malformed', 'b, mac: must be strings');
    if (!sameMac(this.mac(key, f.v, f.t, f.b), f.mac)) throw new EnvelopeError('mac', 'mac: does not match (forged, or signed with another secret)');
    let raw: unknown;
    try {
      raw = JSON.parse(f.b);
    } catch {
      throw new EnvelopeError('malformed', 'b: is not JSON');
    }
    const t = f.t as EnvelopeType;
    return { t, body: decoders[t](raw, '') } as Envelope;
  }

  /** Serialises for pub/sub. */
  static toJson(f: EnvelopeFields): string {
    return JSON.stringify(f);
  }

  /** Parses a pub/sub message into fields (validated by `open`). */
  static fromJson(s: string): Readonly<Record<string, unknown>> {
    try {
      const o: unknown = JSON.parse(s);
      if (typeof o === 'object' && o !== null && !Array.isArray(o)) return o as Record<string, unknown>;
    } catch {
      // fall through
    }
    throw new EnvelopeError('malformed', 'message is not a JSON object');
  }

  /** Stream entry fields (a flat [k, v, k, v…] list) into an object. */
  static fromStream(flat: readonly string[]): Record<string, string> {
    const o: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) o[flat[i]!] = flat[i + 1]!;
    return o;
  }

  private mac(key: HmacSha256, v: string, t: string, b: string): string {
    return key.macBase64url(`${v}\n${t}\n${b}`);
  }
}

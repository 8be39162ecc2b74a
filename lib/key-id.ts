import { randomBytes } from 'node:crypto';
import { ConfigError, type Problem } from './errors.js';
import { halfSipHash53 } from './hash.js';
import { HmacSha256 } from './hmac-sha256.js';

/** One version of the key-hashing secret. */
export interface HashKeyVersion {
  /** Version label used as the key id prefix, e.g. `v1`. */
  readonly version: string;
  /** The HMAC secret (at least 16 bytes). */
  readonly secret: string | Buffer;
}

const VERSION = /^v[0-9]{1,6}$/;
/** Base64url characters of HMAC-SHA-256 kept in a key id: 22 chars = 132 bits. */
const ID_CHARS = 22;

/** Shape of a key id: `v<N>:` followed by the truncated base64url HMAC. */
export const KEY_ID_PATTERN = /^v[0-9]{1,6}:[A-Za-z0-9_-]{22}$/;

/**
 * Turns raw API keys into key ids: a version prefix plus a keyed hash (HMAC-SHA-256). The raw key
 * never leaves the request; only key ids reach buckets, the bus, logs and metrics. Old versions are
 * kept so that events recorded under them can still be found (subject access, erasure).
 */
export class KeyHasher {
  readonly current: string;
  private readonly keys: ReadonlyMap<string, HmacSha256>;
  /**
   * Key ids of recent principals, by a keyed 53-bit HalfSipHash of the principal: an HMAC costs
   * ~1.6 µs, most of a decision; the fingerprint a fraction of that. No raw key is kept in memory, and
   * with the fingerprint key random per process nobody can aim two principals at one entry; by chance
   * two share one with probability ~n²/2⁵⁴ (≈ 10⁻⁸ for 16k cached keys).
   */
  private readonly cache = new Map<number, string>();
  private readonly fp = randomBytes(8);
  private readonly fp0 = this.fp.readInt32LE(0);
  private readonly fp1 = this.fp.readInt32LE(4);

  /**
   * @param versions every retained secret version
   * @param current the version new key ids are made with (defaults to the highest version)
   * @param cacheSize fingerprints kept before the cache starts afresh (0 disables it)
   */
  constructor(
    versions: readonly HashKeyVersion[],
    current?: string,
    private readonly cacheSize = 16_384,
  ) {
    const problems: Problem[] = [];
    const keys = new Map<string, HmacSha256>();
    if (versions.length === 0) problems.push({ path: 'keyHash.versions', message: 'must list at least one version' });
    versions.forEach((v, i) => {
      if (!VERSION.test(v.version)) problems.push({ path: `keyHash.versions.${i}.version`, message: 'must look like v1, v2, …' });
      else if (keys.has(v.version)) problems.push({ path: `keyHash.versions.${i}.version`, message: `duplicate version ${v.version}` });
      const len = typeof v.secret === 'string' ? Buffer.byteLength(v.secret) : (v.secret?.length ?? 0);
      if (len < 16) problems.push({ path: `keyHash.versions.${i}.secret`, message: 'must be at least 16 bytes' });
      else keys.set(v.version, new HmacSha256(typeof v.secret === 'string' ? Buffer.from(v.secret) : v.secret));
    });
    const chosen = current ?? [...keys.keys()].sort((a, b) => Number(b.slice(1)) - Number(a.slice(1)))[0];
    if (chosen !== undefined && !keys.has(chosen)) problems.push({ path: 'keyHash.current', message: `unknown version ${chosen}` });
    if (problems.length) throw new ConfigError(problems, 'invalid key hashing configuration');
    this.keys = keys;
    this.current = chosen as string;
  }

  /** Key id of `raw` under the current version. */
  hash(raw: string): string {
    if (this.cacheSize === 0) return this.hashWith(this.current, raw);
    const fp = halfSipHash53(raw, this.fp0, this.fp1);
    let id = this.cache.get(fp);
    if (id === undefined) {
      id = this.hashWith(this.current, raw);
      if (this.cache.size >= this.cacheSize) this.cache.clear();
      this.cache.set(fp, id);
    }
    return id;
  }

  /** Key ids of `raw` under every retained version (for subject access and erasure). */
  hashAll(raw: string): string[] {
    return [...this.keys.keys()].map((v) => this.hashWith(v, raw));
  }

  /** Retained versions. */
  versions(): string[] {
    return [...this.keys.keys()];
  }

  /**
   * `v<N>:` and the first 22 base64url characters of HMAC-SHA-256(secret, raw) — the first 132 bits
   * of the MAC, as `createHmac('sha256', secret).update(raw).digest('base64url').slice(0, 22)`.
   */
  private hashWith(version: string, raw: string): string {
    return `${version}:${(this.keys.get(version) as HmacSha256).macBase64url(raw).slice(0, ID_CHARS)}`;
  }
}

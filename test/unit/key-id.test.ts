import { createHmac } from 'node:crypto';
import { expect } from 'chai';
import { ConfigError } from '../../lib/errors.js';
import { halfSipHash53 } from '../../lib/hash.js';
import { KEY_ID_PATTERN, KeyHasher } from '../../lib/key-id.js';
import { seededRandom } from '../../scripts/sim/queue.js';

describe('key ids: versioned keyed hashes of API keys', () => {
  const raw = 'sk_live_4f9a2c7e1b';
  const hasher = new KeyHasher([
    { version: 'v1', secret: 'first-secret-0123456789' },
    { version: 'v2', secret: 'second-secret-0123456789' },
  ]);

  it('prefixes the current (highest) version and never contains the raw key', () => {
    const id = hasher.hash(raw);
    expect(id).to.match(KEY_ID_PATTERN);
    expect(id.startsWith('v2:')).to.equal(true);
    expect(id).to.not.include(raw);
    expect(id).to.not.include(Buffer.from(raw).toString('base64url'));
  });

  it('is deterministic across instances with the same secret and differs with another secret', () => {
    const again = new KeyHasher([{ version: 'v2', secret: 'second-secret-0123456789' }]);
    expect(again.hash(raw)).to.equal(hasher.hash(raw));
    const other = new KeyHasher([{ version: 'v2', secret: 'another-secret-012345678' }]);
    expect(other.hash(raw)).to.not.equal(hasher.hash(raw));
  });

  it('hashes under every retained version for subject access and erasure', () => {
    const all = hasher.hashAll(raw);
    expect(all).to.have.length(2);
    expect(all.map((id) => id.slice(0, 3))).to.have.members(['v1:', 'v2:']);
    expect(all).to.include(hasher.hash(raw));
  });

  it('honours an explicit current version', () => {
    expect(
      new KeyHasher(
        [
          { version: 'v1', secret: 'first-secret-0123456789' },
          { version: 'v2', secret: 'second-secret-0123456789' },
        ],
        'v1',
      ).hash(raw),
    ).to.match(/^v1:/);
  });

  it('rejects bad configuration listing every problem', () => {
    try {
      new KeyHasher(
        [
          { version: 'one', secret: 'short' },
          { version: 'v1', secret: 'long-enough-secret-000' },
          { version: 'v1', secret: 'long-enough-secret-111' },
        ],
        'v9',
      );
      expect.fail('should throw');
    } catch (err) {
      expect(err).to.be.instanceOf(ConfigError);
      const paths = (err as ConfigError).problems.map((p) => p.path);
      expect(paths).to.include.members(['keyHash.versions.0.version', 'keyHash.versions.0.secret', 'keyHash.versions.2.version', 'keyHash.current']);
    }
  });
});

describe('key ids are HMAC-SHA-256, truncated', () => {
  /** Strings of every kind of UTF-16: ASCII, two- and three-byte code points, pairs and lone surrogates. */
  function text(rand: () => number, length: number): string {
    let s = '';
    for (let i = 0; i < length; i++) {
      const r = rand();
      const code = r < 0.6 ? 32 + Math.floor(rand() * 95) : r < 0.75 ? Math.floor(rand() * 0x800) : r < 0.9 ? Math.floor(rand() * 0x10000) : 0xd800 + Math.floor(rand() * 0x800);
      s += String.fromCharCode(code);
    }
    return s;
  }

  it("equals node:crypto's HMAC for keys short and long, of any text and length", () => {
    const rand = seededRandom(13);
    const secrets: Array<string | Buffer> = ['test-secret-test-secret', 'x'.repeat(64), 'y'.repeat(65), 's'.repeat(200), Buffer.from(Array.from({ length: 17 }, (_, i) => i * 15))];
    for (const secret of secrets) {
      const hasher = new KeyHasher([{ version: 'v12', secret }], undefined, 0);
      for (let i = 0; i < 600; i++) {
        const raw = text(rand, Math.floor(rand() * (i < 400 ? 70 : 300)));
        const want = `v12:${createHmac('sha256', secret).update(raw).digest('base64url').slice(0, 22)}`;
        expect(hasher.hash(raw), JSON.stringify(raw)).to.equal(want);
      }
    }
  });
});

describe('key id cache', () => {
  it('returns the same ids with and without the cache, over many keys and past the cache size', () => {
    const cached = new KeyHasher([{ version: 'v1', secret: 'cache-secret-0123456789' }], undefined, 64);
    const plain = new KeyHasher([{ version: 'v1', secret: 'cache-secret-0123456789' }], undefined, 0);
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 200; i++) {
        const raw = `sk_${i}_${'x'.repeat(i % 7)}`;
        expect(cached.hash(raw)).to.equal(plain.hash(raw));
      }
    }
  });

  it('keeps no raw key: the cache holds keyed fingerprints and key ids only', () => {
    const h = new KeyHasher([{ version: 'v1', secret: 'cache-secret-0123456789' }]);
    h.hash('sk_live_very_secret_key');
    const cache = (h as unknown as { cache: Map<unknown, unknown> }).cache;
    expect(cache.size).to.equal(1);
    for (const [k, v] of cache) {
      expect(k).to.be.a('number');
      expect(String(v)).to.not.include('sk_live');
    }
  });
});

describe('keyed fingerprint (HalfSipHash-2-4)', () => {
  it('depends on every code unit, the length and the key; 53 bits; no collisions over 200,000 keys', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 200_000; i++) {
      const h = halfSipHash53(`sk_live_${i}`, 0x1234, 0x5678);
      expect(Number.isSafeInteger(h) && h >= 0).to.equal(true);
      seen.add(h);
    }
    expect(seen.size).to.equal(200_000);
    expect(halfSipHash53('abc', 1, 2)).to.equal(halfSipHash53('abc', 1, 2));
    expect(halfSipHash53('abc', 1, 2)).to.not.equal(halfSipHash53('abc', 1, 3));
    expect(halfSipHash53('abc', 1, 2)).to.not.equal(halfSipHash53('abd', 1, 2));
    expect(halfSipHash53('ab', 1, 2)).to.not.equal(halfSipHash53('ab\u0000', 1, 2));
    expect(halfSipHash53('', 1, 2)).to.not.equal(halfSipHash53('\u0000', 1, 2));
  });
});

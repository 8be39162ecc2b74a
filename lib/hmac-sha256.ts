import { createHash, createHmac, createSecretKey, hash, type KeyObject } from 'node:crypto';

/** SHA-256's block size: the HMAC key is padded (or first hashed) to it. */
const BLOCK = 64;
/**
 * Texts longer than this (UTF-16 code units) go to `createHmac`: the pad buffer is kept for the
 * instance's life, and a checkpoint of a busy shard must not leave megabytes behind in it. At that
 * length the per-call cost `createHmac` adds is nothing beside hashing the text.
 */
const LONG_TEXT = 16_384;

/**
 * HMAC-SHA-256 (RFC 2104) of strings under one key, equal to
 * `createHmac('sha256', key).update(text).digest('base64url')`, computed as
 * `SHA-256((K ⊕ opad) ‖ SHA-256((K ⊕ ipad) ‖ text))` with node's one-shot `crypto.hash` over pad
 * blocks kept from the constructor. `createHmac` builds a Hmac object and a stream per call and
 * derives the pads again; this does neither. SHA-256 itself stays node's (OpenSSL's).
 */
export class HmacSha256 {
  /** `K ⊕ ipad`, then room for the text (grown for long ones); the text is wiped after each use. */
  private inner: Buffer;
  /** `K ⊕ opad`, then the inner hash. */
  private readonly outer = Buffer.alloc(BLOCK + 32);
  /** The key for long texts (`LONG_TEXT`). */
  private readonly key: KeyObject;

  constructor(key: Uint8Array) {
    this.key = createSecretKey(key);
    const k = key.length > BLOCK ? createHash('sha256').update(key).digest() : key;
    this.inner = Buffer.alloc(BLOCK + 256);
    for (let i = 0; i < BLOCK; i++) {
      const b = k[i] ?? 0;
      this.inner[i] = b ^ 0x36;
      this.outer[i] = b ^ 0x5c;
    }
  }

  /**
   * The MAC of `text` (UTF-8) in base64url, all 43 characters. No Buffer is made for it: the inner
   * hash comes back as a 'binary' (latin1) string (a character per byte, written back unchanged) and the outer
   * one as the encoding wanted. Each Buffer a hash returns is memory allocated outside the heap and
   * freed by a finalizer; both cost more than the two strings (about 9k of 29k instructions a call).
   */
  macBase64url(text: string): string {
    if (text.length > LONG_TEXT) return createHmac('sha256', this.key).update(text).digest('base64url');
    // UTF-16 code units take at most 3 bytes each in UTF-8: the exact count only for long texts.
    if (BLOCK + 3 * text.length > this.inner.length) this.fit(Buffer.byteLength(text, 'utf8'));
    const n = this.inner.write(text, BLOCK, 'utf8');
    const innerHash = hash('sha256', this.inner.subarray(0, BLOCK + n), 'binary');
    this.inner.fill(0, BLOCK, BLOCK + n); // no key's bytes left behind
    this.outer.write(innerHash, BLOCK, 'binary');
    return hash('sha256', this.outer, 'base64url');
  }

  /** Grows the inner buffer to hold `bytes` of text after the pad, if it cannot yet. */
  private fit(bytes: number): void {
    if (BLOCK + bytes <= this.inner.length) return;
    const grown = Buffer.alloc(BLOCK + bytes);
    this.inner.copy(grown, 0, 0, BLOCK);
    this.inner.fill(0);
    this.inner = grown;
  }
}

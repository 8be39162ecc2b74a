import { createHash } from 'node:crypto';

const K = Int32Array.from([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
  0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = Int32Array.from([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);

/** The message schedule, and the message's bytes (grown for long ones): scratch shared by every call. */
const W = new Int32Array(64);
let bytes = new Uint8Array(256);

/** SHA-256's compression function: `state` absorbs the 16 words `W[0..16)`. */
function compress(state: Int32Array): void {
  for (let t = 16; t < 64; t++) {
    const x = W[t - 15]!;
    const y = W[t - 2]!;
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[t] = (W[t - 16]! + s0 + W[t - 7]! + s1) | 0;
  }
  let a = state[0]!, b = state[1]!, c = state[2]!, d = state[3]!, e = state[4]!, f = state[5]!, g = state[6]!, h = state[7]!;
  for (let t = 0; t < 64; t++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[t]! + W[t]!) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  state[0] = (state[0]! + a) | 0;
  state[1] = (state[1]! + b) | 0;
  state[2] = (state[2]! + c) | 0;
  state[3] = (state[3]! + d) | 0;
  state[4] = (state[4]! + e) | 0;
  state[5] = (state[5]! + f) | 0;
  state[6] = (state[6]! + g) | 0;
  state[7] = (state[7]! + h) | 0;
}

/** `text` as UTF-8 into `bytes` (lone surrogates as U+FFFD, as Node encodes them), with room after it for padding; its length. */
function utf8(text: string): number {
  if (bytes.length < text.length * 3 + 72) bytes = new Uint8Array(text.length * 3 + 72);
  let p = 0;
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      bytes[p++] = c;
      continue;
    }
    if (c < 0x800) {
      bytes[p++] = 0xc0 | (c >> 6);
    } else {
      const d = c >= 0xd800 && c < 0xdc00 && i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (d >= 0xdc00 && d < 0xe000) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
        bytes[p++] = 0xf0 | (c >> 18);
        bytes[p++] = 0x80 | ((c >> 12) & 63);
      } else {
        if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
        bytes[p++] = 0xe0 | (c >> 12);
      }
      bytes[p++] = 0x80 | ((c >> 6) & 63);
    }
    bytes[p++] = 0x80 | (c & 63);
  }
  return p;
}

/** The state after one block of `key` (padded to 64 bytes) XOR `pad`. */
function padState(key: Uint8Array, pad: number): Int32Array {
  const state = Int32Array.from(IV);
  for (let i = 0; i < 16; i++) {
    let word = 0;
    for (let j = 0; j < 4; j++) word = (word << 8) | ((key[i * 4 + j] ?? 0) ^ pad);
    W[i] = word;
  }
  compress(state);
  W.fill(0);
  return state;
}

/**
 * HMAC-SHA-256 (RFC 2104) of strings under one key, as `createHmac('sha256', key).update(text)`
 * gives it, computed in JavaScript with the states after the key's inner and outer pad blocks kept
 * (RFC 2104's own implementation note): a MAC is two compressions for a text of up to 55 UTF-8
 * bytes, and no object, Buffer or native call. The text's bytes are wiped after use.
 */
export class HmacSha256 {
  readonly #inner: Int32Array;
  readonly #outer: Int32Array;
  readonly #state = new Int32Array(8);

  constructor(key: Uint8Array) {
    const k = key.length > 64 ? createHash('sha256').update(key).digest() : key;
    this.#inner = padState(k, 0x36);
    this.#outer = padState(k, 0x5c);
  }

  /** The MAC of `text`'s UTF-8, as eight big-endian 32-bit words (valid until the next call). */
  mac(text: string): Int32Array {
    const n = utf8(text);
    let end = n;
    bytes[end++] = 0x80;
    while (end % 64 !== 56) bytes[end++] = 0;
    const bits = (64 + n) * 8;
    const high = Math.floor(bits / 0x100000000);
    for (let i = 3; i >= 0; i--) bytes[end++] = (high >>> (i * 8)) & 0xff;
    for (let i = 3; i >= 0; i--) bytes[end++] = (bits >>> (i * 8)) & 0xff;
    const state = this.#state;
    state.set(this.#inner);
    for (let off = 0; off < end; off += 64) {
      for (let i = 0; i < 16; i++) {
        const p = off + i * 4;
        W[i] = (bytes[p]! << 24) | (bytes[p + 1]! << 16) | (bytes[p + 2]! << 8) | bytes[p + 3]!;
      }
      compress(state);
    }
    bytes.fill(0, 0, n); // no key's bytes left behind
    // The outer hash: the outer pad's state absorbs the inner digest, padded to one block of 96 bytes' worth.
    for (let i = 0; i < 8; i++) W[i] = state[i]!;
    W[8] = 0x80000000;
    W.fill(0, 9, 15);
    W[15] = (64 + 32) * 8;
    state.set(this.#outer);
    compress(state);
    W.fill(0);
    return state;
  }
}

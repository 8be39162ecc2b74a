/**
 * 32-bit FNV-1a over a string's UTF-16 code units. Not a security primitive: it spreads key ids
 * (already keyed hashes) over window phases and shards, identically on every node.
 */
export function fnv1a32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * HalfSipHash-2-4 (the 32-bit SipHash made for hash tables, as in the Linux kernel) over a string's
 * UTF-16 code units packed two to a word, with 64 bits of output folded to a 53-bit number. Keyed:
 * without the key nobody can choose two strings that land on the same value.
 */
export function halfSipHash53(text: string, k0: number, k1: number): number {
  let v0 = k0 | 0;
  let v1 = k1 | 0;
  let v2 = (0x6c796765 ^ k0) | 0;
  let v3 = (0x74656462 ^ k1) | 0;
  v1 ^= 0xee;
  const round = (): void => {
    v0 = (v0 + v1) | 0;
    v1 = (v1 << 5) | (v1 >>> 27);
    v1 ^= v0;
    v0 = (v0 << 16) | (v0 >>> 16);
    v2 = (v2 + v3) | 0;
    v3 = (v3 << 8) | (v3 >>> 24);
    v3 ^= v2;
    v0 = (v0 + v3) | 0;
    v3 = (v3 << 7) | (v3 >>> 25);
    v3 ^= v0;
    v2 = (v2 + v1) | 0;
    v1 = (v1 << 13) | (v1 >>> 19);
    v1 ^= v2;
    v2 = (v2 << 16) | (v2 >>> 16);
  };
  const n = text.length;
  const whole = n & ~1;
  for (let i = 0; i < whole; i += 2) {
    const m = text.charCodeAt(i) | (text.charCodeAt(i + 1) << 16);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  // Last word: the length (mod 2^16) and a possible odd code unit.
  const b = ((n & 0xffff) << 16) | (n & 1 ? text.charCodeAt(n - 1) : 0);
  v3 ^= b;
  round();
  round();
  v0 ^= b;
  v2 ^= 0xee;
  for (let r = 0; r < 4; r++) round();
  const hi = (v1 ^ v3) >>> 0;
  v1 ^= 0xdd;
  for (let r = 0; r < 4; r++) round();
  const lo = (v1 ^ v3) >>> 0;
  return hi * 0x200000 + (lo & 0x1fffff);
}

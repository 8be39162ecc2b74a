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
 * 53-bit fingerprint of a string (two independent 32-bit FNV-1a variants), used to look up a key id
 * already computed for the same principal without keeping the principal itself in memory.
 */
export function fingerprint53(text: string): number {
  let a = 0x811c9dc5;
  let b = 0x050c5d1f;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  return (a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff);
}

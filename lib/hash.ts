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


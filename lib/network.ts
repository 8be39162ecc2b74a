import { isIPv4, isIPv6 } from 'node:net';

/** Prefix lengths of the anonymous class by default: one IPv4 address, an IPv6 /56 (a typical customer site). */
export const DEFAULT_IPV4_PREFIX = 32;
export const DEFAULT_IPV6_PREFIX = 56;

/**
 * Network range of a client address for the anonymous class: the address masked to `v4Bits` (IPv4)
 * or `v6Bits` (IPv6; IPv4-mapped IPv6 counts as IPv4), written `address/bits`. Returns undefined for
 * anything that is not an address.
 */
export function networkRange(address: string | undefined, v4Bits = DEFAULT_IPV4_PREFIX, v6Bits = DEFAULT_IPV6_PREFIX): string | undefined {
  if (address === undefined) return undefined;
  const ip = stripPort(address.trim());
  if (isIPv4(ip)) return v4Range(ip, v4Bits);
  const bare = ip.replace(/%.*$/, '');
  if (!isIPv6(bare)) return undefined;
  const h = expandIPv6(bare);
  // IPv4-mapped (::ffff:a.b.c.d in any spelling) is an IPv4 client.
  if (h.slice(0, 5).every((x) => x === 0) && h[5] === 0xffff) {
    const [hi, lo] = [h[6]!, h[7]!];
    return v4Range(`${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`, v4Bits);
  }
  const masked = h.map((x, i) => x & hextetMask(v6Bits - 16 * i));
  return `${masked.map((x) => x.toString(16)).join(':')}/${v6Bits}`;
}

/** The mask of a 16-bit hextet of which the first `bits` (clamped to 0..16) belong to the prefix. */
function hextetMask(bits: number): number {
  return bits >= 16 ? 0xffff : bits <= 0 ? 0 : (0xffff << (16 - bits)) & 0xffff;
}

function v4Range(ip: string, bits: number): string {
  const n = ip.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const masked = bits >= 32 ? n : bits <= 0 ? 0 : n - (n % 2 ** (32 - bits));
  return `${masked >>> 24}.${(masked >>> 16) & 255}.${(masked >>> 8) & 255}.${masked & 255}/${bits}`;
}

/** `1.2.3.4:5678` → `1.2.3.4`; `[2001:db8::1]:443` → `2001:db8::1`; anything else unchanged. */
function stripPort(address: string): string {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(address);
  if (bracketed) return bracketed[1]!;
  const v4 = /^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(address);
  return v4 ? v4[1]! : address;
}

/** The eight hextets of an IPv6 address, as numbers. */
function expandIPv6(ip: string): number[] {
  let text = ip.toLowerCase();
  // A trailing dotted quad stands for the last two hextets.
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (quad) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    text = text.slice(0, quad.index) + `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const fill = tail === undefined ? [] : Array(8 - left.length - right.length).fill('0');
  return [...left, ...fill, ...right].map((h) => parseInt(h, 16));
}

/**
 * The client address of a request by an explicit hop count: the socket peer, or — only when
 * `trustedProxyHops` > 0 — the address that many hops back in X-Forwarded-For (the part a client
 * cannot forge past its own proxy).
 */
export function clientAddress(socketAddress: string | undefined, forwardedFor: string | string[] | undefined, trustedProxyHops: number): string | undefined {
  if (trustedProxyHops <= 0 || forwardedFor === undefined) return socketAddress;
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  return hops[hops.length - trustedProxyHops] ?? socketAddress;
}

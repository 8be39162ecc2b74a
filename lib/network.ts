import { isIPv4, isIPv6 } from 'node:net';

/**
 * Network range of a client address for the anonymous class: the /24 of an IPv4 address, the /64 of
 * an IPv6 one (IPv4-mapped IPv6 counts as IPv4). Returns undefined for anything that is not an address.
 */
export function networkRange(address: string | undefined): string | undefined {
  if (address === undefined) return undefined;
  const ip = stripPort(address.trim());
  if (isIPv4(ip)) return v4Range(ip);
  const bare = ip.replace(/%.*$/, '');
  if (!isIPv6(bare)) return undefined;
  const h = expandIPv6(bare);
  // IPv4-mapped (::ffff:a.b.c.d in any spelling) is an IPv4 client.
  if (h.slice(0, 5).every((x) => x === '0') && h[5] === 'ffff') {
    const [hi, lo] = [parseInt(h[6]!, 16), parseInt(h[7]!, 16)];
    return v4Range(`${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`);
  }
  return `${h.slice(0, 4).join(':')}::/64`;
}

function v4Range(ip: string): string {
  const [a, b, c] = ip.split('.');
  return `${a}.${b}.${c}.0/24`;
}

/** `1.2.3.4:5678` → `1.2.3.4`; `[2001:db8::1]:443` → `2001:db8::1`; anything else unchanged. */
function stripPort(address: string): string {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(address);
  if (bracketed) return bracketed[1]!;
  const v4 = /^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(address);
  return v4 ? v4[1]! : address;
}

/** The eight hextets of an IPv6 address, lower-case, without leading zeros. */
function expandIPv6(ip: string): string[] {
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
  return [...left, ...fill, ...right].map((h) => parseInt(h, 16).toString(16));
}

/**
 * The client address of a request: the socket peer, or — only when `trustedProxyHops` > 0 — the
 * address that many hops back in X-Forwarded-For (the part a client cannot forge past its own proxy).
 */
export function clientAddress(
  socketAddress: string | undefined,
  forwardedFor: string | string[] | undefined,
  trustedProxyHops: number,
): string | undefined {
  if (trustedProxyHops <= 0 || forwardedFor === undefined) return socketAddress;
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  return hops[hops.length - trustedProxyHops] ?? socketAddress;
}

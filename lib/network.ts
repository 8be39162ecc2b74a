import { isIPv4, isIPv6 } from 'node:net';

/**
 * Network range of a client address for the anonymous class: the /24 of an IPv4 address, the /64 of
 * an IPv6 one (IPv4-mapped IPv6 counts as IPv4). Returns undefined for anything that is not an address.
 */
export function networkRange(address: string | undefined): string | undefined {
  if (address === undefined) return undefined;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  const ip = mapped ? mapped[1]! : address;
  if (isIPv4(ip)) {
    const [a, b, c] = ip.split('.');
    return `${a}.${b}.${c}.0/24`;
  }
  const bare = ip.replace(/%.*$/, '');
  if (!isIPv6(bare)) return undefined;
  return `${expandIPv6(bare).slice(0, 4).join(':')}::/64`;
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

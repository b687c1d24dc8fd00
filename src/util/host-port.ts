// host:port as an operator writes and a URL needs it: an IPv6 address in brackets
// ([::1]:5672), as ha-brokers-url reads it; `::1:5672` leaves the port unclear.
import { isIP } from 'node:net';

export function hostPort(host: string, port: number | string): string {
  return `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
}

/** A client's address as logs and login throttles key it: IPv4 clients of a dual-stack listener appear as ::ffff:a.b.c.d. */
export function clientAddress(address: string | undefined): string {
  const a = address ?? 'unknown';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

/**
 * The address a client is held to a share by (connections at once, handshakes): an IPv4
 * address as it is; an IPv6 one by its /64 ("2001:db8:1:2::/64"), as a host is given a
 * whole /64 (SLAAC, privacy addresses) and could take a new address for every socket.
 */
export function addressGroup(address: string | undefined): string {
  const a = clientAddress(address);
  if (isIP(a) !== 6) return a;
  const [head = '', tail] = a.split('%', 1)[0]!.split('::');
  const first = head === '' ? [] : head.split(':');
  const last = tail === undefined || tail === '' ? [] : tail.split(':');
  // A dotted IPv4 tail (::ffff:a.b.c.d, 64:ff9b::a.b.c.d) is two groups, both in the last 64 bits.
  const lastGroups = last.length + (last.some((g) => g.includes('.')) ? 1 : 0);
  const groups = [...first, ...Array<string>(Math.max(0, 8 - first.length - lastGroups)).fill('0'), ...last];
  return `${groups.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(':')}::/64`;
}

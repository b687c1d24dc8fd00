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

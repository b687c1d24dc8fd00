// host:port as an operator writes and a URL needs it: an IPv6 address in brackets
// ([::1]:5672), as ha-brokers-url reads it; `::1:5672` leaves the port unclear.
import { isIP } from 'node:net';

export function hostPort(host: string, port: number | string): string {
  return `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
}

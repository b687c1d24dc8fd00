// ha-brokers-url: "[amqp[s]:][user[/password]@]host[:port](,host[:port])*", as qpidd
// reads it. Credentials given once apply to every address; so does the scheme.
import { isIPv6 } from 'node:net';
import { ConfigError } from '../ops/config.js';

export interface BrokerEndpoint {
  host: string;
  port: number;
}

export interface BrokersUrl {
  endpoints: BrokerEndpoint[];
  user: string | undefined;
  password: string | undefined;
  /** amqps: every address is a TLS port, and links to it are TLS, verified (src/admin/link-tls.ts). */
  tls: boolean;
}

/** The scheme in front of the URL or of one address: 'amqp', 'amqps', or undefined. */
function schemeOf(text: string): { scheme: string | undefined; rest: string } {
  const m = /^(amqps?):(\/\/)?/i.exec(text);
  return m ? { scheme: m[1]!.toLowerCase(), rest: text.slice(m[0].length) } : { scheme: undefined, rest: text };
}

/** Brokers a URL lists at most (a cluster is a handful; DR sources and HA peers alike). */
export const MAX_ENDPOINTS = 64;
/** A DNS name's longest spelling (RFC 1035: 255 octets on the wire, 253 written). */
export const MAX_HOST_LENGTH = 253;
/** User and password: what a tandem broker's SASL PLAIN takes (src/amqp/engine/sasl.ts). */
export const MAX_CREDENTIAL_LENGTH = 255;
/** The whole URL: every broker at the longest, plus credentials. */
const MAX_URL_LENGTH = MAX_ENDPOINTS * (MAX_HOST_LENGTH + 16) + 2 * MAX_CREDENTIAL_LENGTH + 16;

/** Part of the URL quoted in a refusal, cut so a huge one does not fill the log. */
function quoted(text: string): string {
  return text.length <= 80 ? `'${text}'` : `'${text.slice(0, 80)}...' (${text.length} characters)`;
}

// C0 controls, DEL, and NUL: never in a user name; NUL ends a SASL PLAIN field.
const CONTROL = /[\u0000-\u001f\u007f]/;
const LABEL = /^[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?$/;

/** Why `host` (without brackets) is no host name, IPv4 or (bracketed) IPv6 address, or undefined. */
function hostProblem(host: string, bracketed: boolean): string | undefined {
  if (host.length > MAX_HOST_LENGTH) return `a host name of ${host.length} characters (at most ${MAX_HOST_LENGTH})`;
  if (bracketed) {
    const [addr, zone] = host.split('%', 2) as [string, string | undefined];
    if (isIPv6(addr) && (zone === undefined || /^[A-Za-z0-9_.-]{1,64}$/.test(zone))) return undefined;
    return 'not an IPv6 address between the brackets';
  }
  const labels = (host.endsWith('.') ? host.slice(0, -1) : host).split('.');
  if (labels.some((l) => l.length === 0 || l.length > 63 || !LABEL.test(l))) return 'not a host name (dot-separated labels of 1-63 letters, digits, - or _, not starting or ending with -) or an IPv4 address';
  return undefined;
}

/**
 * One scheme for the whole URL: `amqps:` in front makes every address a TLS port (5671
 * by default). An address may repeat the URL's scheme but not contradict it: a cluster
 * whose links are encrypted to some brokers only would send the password in clear to
 * the others. Bounded: at most MAX_ENDPOINTS brokers, host names of MAX_HOST_LENGTH,
 * user and password of MAX_CREDENTIAL_LENGTH; anything else malformed is refused
 * (ConfigError) with what is wrong, never quoting a password.
 */
export function parseBrokersUrl(text: string, defaultPort = 5672): BrokersUrl {
  if (typeof text !== 'string') throw new ConfigError('ha-brokers-url must be text: [amqp[s]:][user[/password]@]host[:port],...');
  if (text.length > MAX_URL_LENGTH) throw new ConfigError(`ha-brokers-url is ${text.length} characters long; at most ${MAX_URL_LENGTH} (${MAX_ENDPOINTS} brokers)`);
  const head = schemeOf(text.trim());
  const tls = head.scheme === 'amqps';
  let rest = head.rest;
  let user: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    const cred = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const slash = cred.search(/[/:]/);
    user = slash >= 0 ? cred.slice(0, slash) : cred;
    password = slash >= 0 ? cred.slice(slash + 1) : undefined;
    if (user === '') throw new ConfigError("ha-brokers-url: the user name before '@' is empty: write user[/password]@host, or leave out the '@'");
    if (user.length > MAX_CREDENTIAL_LENGTH) throw new ConfigError(`ha-brokers-url: a user name of ${user.length} characters (at most ${MAX_CREDENTIAL_LENGTH})`);
    if (CONTROL.test(user)) throw new ConfigError(`ha-brokers-url: the user name ${quoted(JSON.stringify(user).slice(1, -1))} holds a control character`);
    if (password === '') throw new ConfigError(`ha-brokers-url: the password after '${cred[slash]}' is empty: write user@host to log in without one`);
    if (password !== undefined && password.length > MAX_CREDENTIAL_LENGTH) throw new ConfigError(`ha-brokers-url: a password of ${password.length} characters (at most ${MAX_CREDENTIAL_LENGTH})`);
    if (password?.includes('\u0000')) throw new ConfigError('ha-brokers-url: the password holds a NUL character, which SASL PLAIN cannot carry');
  }
  if (rest.trim() === '') throw new ConfigError('ha-brokers-url lists no broker: [amqp[s]:][user[/password]@]host[:port],...');
  const parts = rest.split(',');
  if (parts.length > MAX_ENDPOINTS) throw new ConfigError(`ha-brokers-url lists ${parts.length} brokers; at most ${MAX_ENDPOINTS}`);
  const endpoints = parts.map((part) => {
    const own = schemeOf(part.trim());
    if (own.scheme !== undefined && (own.scheme === 'amqps') !== tls) {
      throw new ConfigError(
        `ha-brokers-url: ${quoted(part.trim())} is ${own.scheme}: but the URL is ${tls ? 'amqps' : 'amqp'}: every address of a URL uses one scheme (amqps: in front makes every link TLS)`,
      );
    }
    if (own.rest === '') throw new ConfigError('ha-brokers-url: an empty address (two commas, or one at an end); use host[:port] separated by commas');
    const m = /^(\[[^\]]+\]|[^:\s]+)(?::(\d{1,5}))?$/.exec(own.rest);
    if (!m) throw new ConfigError(`ha-brokers-url: cannot read ${quoted(part)}; use host[:port] separated by commas ([address] for IPv6)`);
    const port = m[2] ? Number(m[2]) : tls ? 5671 : defaultPort;
    if (port < 1 || port > 65535) throw new ConfigError(`ha-brokers-url: bad port in ${quoted(part)} (1 to 65535)`);
    const bracketed = m[1]!.startsWith('[');
    const host = bracketed ? m[1]!.slice(1, -1) : m[1]!;
    const why = hostProblem(host, bracketed);
    if (why !== undefined) throw new ConfigError(`ha-brokers-url: ${quoted(part.trim())}: ${why}`);
    return { host, port };
  });
  return { endpoints, user, password, tls };
}

export const endpointKey = (e: BrokerEndpoint): string => `${e.host}:${e.port}`;

// ha-brokers-url: "[amqp[s]:][user[/password]@]host[:port](,host[:port])*", as qpidd
// reads it. Credentials given once apply to every address; so does the scheme.
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

/**
 * One scheme for the whole URL: `amqps:` in front makes every address a TLS port (5671
 * by default). An address may repeat the URL's scheme but not contradict it: a cluster
 * whose links are encrypted to some brokers only would send the password in clear to
 * the others.
 */
export function parseBrokersUrl(text: string, defaultPort = 5672): BrokersUrl {
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
  }
  const endpoints = rest.split(',').map((part) => {
    const own = schemeOf(part.trim());
    if (own.scheme !== undefined && (own.scheme === 'amqps') !== tls) {
      throw new ConfigError(
        `ha-brokers-url: '${part.trim()}' is ${own.scheme}: but the URL is ${tls ? 'amqps' : 'amqp'}: every address of a URL uses one scheme (amqps: in front makes every link TLS)`,
      );
    }
    const m = /^(\[[^\]]+\]|[^:\s]+)(?::(\d+))?$/.exec(own.rest);
    if (!m) throw new ConfigError(`ha-brokers-url: cannot read '${part}'; use host[:port] separated by commas`);
    const port = m[2] ? Number(m[2]) : tls ? 5671 : defaultPort;
    if (port < 1 || port > 65535) throw new ConfigError(`ha-brokers-url: bad port in '${part}'`);
    return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
  });
  if (endpoints.length === 0) throw new ConfigError('ha-brokers-url lists no broker');
  return { endpoints, user, password, tls };
}

export const endpointKey = (e: BrokerEndpoint): string => `${e.host}:${e.port}`;

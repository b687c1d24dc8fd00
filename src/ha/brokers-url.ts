// ha-brokers-url: "[amqp:][user[/password]@]host[:port](,host[:port])*", as qpidd
// reads it. Credentials given once apply to every address. amqps: is refused (below).
import { ConfigError } from '../ops/config.js';

export interface BrokerEndpoint {
  host: string;
  port: number;
}

export interface BrokersUrl {
  endpoints: BrokerEndpoint[];
  user: string | undefined;
  password: string | undefined;
}

/**
 * Brokers talk to each other in plain AMQP only (TLS for HA links is not built yet), so an
 * amqps: address would be a promise of encryption the broker cannot keep: refuse it
 * rather than connect in clear.
 */
const TLS_REFUSAL =
  'ha-brokers-url: amqps: is not supported: replication between brokers runs over plain AMQP (TLS for HA links is not implemented yet); use amqp: addresses on a network you trust';

export function parseBrokersUrl(text: string, defaultPort = 5672): BrokersUrl {
  if (/(^|,)\s*amqps:/i.test(text.trim())) throw new ConfigError(TLS_REFUSAL);
  let rest = text.trim().replace(/^amqp:(\/\/)?/, '');
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
    const p = part.trim().replace(/^amqp:(\/\/)?/, '');
    const m = /^(\[[^\]]+\]|[^:\s]+)(?::(\d+))?$/.exec(p);
    if (!m) throw new ConfigError(`ha-brokers-url: cannot read '${part}'; use host[:port] separated by commas`);
    const port = m[2] ? Number(m[2]) : defaultPort;
    if (port < 1 || port > 65535) throw new ConfigError(`ha-brokers-url: bad port in '${part}'`);
    return { host: m[1].replace(/^\[|\]$/g, ''), port };
  });
  if (endpoints.length === 0) throw new ConfigError('ha-brokers-url lists no broker');
  return { endpoints, user, password };
}

export const endpointKey = (e: BrokerEndpoint): string => `${e.host}:${e.port}`;

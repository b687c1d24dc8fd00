// The brokers a broker (or its agent, or `tandem ha -c`) talks to, as addresses
// with their identity and TLS: the other brokers of ha-brokers-url, DR sources,
// and the local broker. The scheme of the URL decides TLS; the CA, and the client
// certificate when there is one, come from ha-tls-* or dr-tls-* (read once).
import { ConfigError, type Settings } from '../ops/config.js';
import type { BrokerEndpoint, BrokersUrl } from '../ha/brokers-url.js';
import type { BrokerAddress } from './client.js';
import { readLinkTls, type LinkTls, type LinkTlsFiles } from './link-tls.js';

const cache = new Map<string, LinkTls>();

function linkTls(files: LinkTlsFiles, prefix: 'ha' | 'dr'): LinkTls {
  const key = `${files.ca}\0${files.cert}\0${files.key}`;
  let tls = cache.get(key);
  if (!tls) {
    tls = readLinkTls(files, { ca: `${prefix}-tls-ca`, cert: `${prefix}-tls-cert`, key: `${prefix}-tls-key` }, (m) => new ConfigError(m));
    cache.set(key, tls);
  }
  return tls;
}

/** TLS of links to the other brokers of the cluster (ha-tls-*). */
export const haLinkTls = (s: Settings): LinkTls => linkTls(s.haTls, 'ha');
/** TLS of links to DR sources (dr-tls-*). */
export const drLinkTls = (s: Settings): LinkTls => linkTls(s.drTls, 'dr');

/** One broker of a URL as an address: the URL's scheme, `tls` applied when it is amqps:. */
export function endpointAddress(e: BrokerEndpoint, url: Pick<BrokersUrl, 'tls'>, identity: { user?: string; password?: string; external?: boolean }, tls: LinkTls): BrokerAddress {
  return { host: e.host, port: e.port, user: identity.user, password: identity.password, ...(url.tls ? { tls: true, ...tls, external: identity.external } : {}) };
}

/** Who brokers are to each other: ha-username and its password, ha-tls-cert's user (EXTERNAL), or none (ANONYMOUS). */
export function haIdentity(s: Settings): { user?: string; password?: string; external?: boolean } {
  if (s.haMechanism === 'EXTERNAL') return { external: true };
  return s.haMechanism === 'PLAIN' ? { user: s.haUsername, password: s.haPassword } : {};
}

/**
 * The local broker of a config file, for its agent and `tandem ha -c`: the plaintext
 * port when it listens there (and the brokers do not log in by certificate) (a connection to one's own address never crosses the
 * network), else its TLS port, verified with ha-tls-ca like any other broker. A
 * wildcard host is reached on 127.0.0.1, which its certificate must then name.
 */
export function localAdminAddress(s: Settings): BrokerAddress {
  const host = s.host === '0.0.0.0' || s.host === '::' ? '127.0.0.1' : s.host;
  const identity = haIdentity(s);
  // A certificate proves nothing on the plain port: EXTERNAL goes to the TLS port.
  if (s.listenPlain && !identity.external) return { host, port: s.port, ...identity };
  return { host, port: s.tlsPort ?? 5671, ...identity, tls: true, ...haLinkTls(s) };
}

// The brokers a broker (or its agent, or `tandem ha -c`) talks to, as addresses
// with their identity and TLS: the other brokers of ha-brokers-url, DR sources,
// and the local broker. The scheme of the URL decides TLS; the CA, and the client
// certificate when there is one, come from ha-tls-* or dr-tls-* (read once; the
// CRLs again on SIGHUP, reloadLinkCrls).
import { ConfigError, type Settings } from '../ops/config.js';
import type { BrokerEndpoint, BrokersUrl } from '../ha/brokers-url.js';
import type { BrokerAddress } from './client.js';
import { crlWarnings, readCrlFile } from './crl.js';
import { readLinkTls, type LinkTls, type LinkTlsFiles } from './link-tls.js';

const cache = new Map<string, { files: LinkTlsFiles; prefix: 'ha' | 'dr'; tls: LinkTls }>();

function linkTls(files: LinkTlsFiles, prefix: 'ha' | 'dr'): LinkTls {
  const key = `${prefix}\0${files.ca}\0${files.cert}\0${files.key}\0${files.crl}`;
  let entry = cache.get(key);
  if (!entry) {
    entry = { files, prefix, tls: readLinkTls(files, { ca: `${prefix}-tls-ca`, cert: `${prefix}-tls-cert`, key: `${prefix}-tls-key`, crl: `${prefix}-tls-crl` }, (m) => new ConfigError(m)) };
    cache.set(key, entry);
  }
  return entry.tls;
}

/**
 * Read ha-tls-crl and dr-tls-crl again (SIGHUP: cron fetched new lists). Each LinkTls
 * in use gets the new lists in place, so followers, bridges and clients holding it use
 * them from their next connection; a file that no longer reads keeps the lists it had.
 * Returns what to warn about (expired lists) and what failed.
 */
export function reloadLinkCrls(): { warnings: string[]; errors: string[]; reloaded: string[]; failed: string[] } {
  const warnings: string[] = [];
  const errors: string[] = [];
  // The keys read (or not), for the SIGHUP line to say what it did.
  const reloaded: string[] = [];
  const failed: string[] = [];
  for (const { files, prefix, tls } of cache.values()) {
    if (files.crl === undefined || tls.crl === undefined) continue;
    try {
      const bundle = readCrlFile(files.crl, `${prefix}-tls-crl`, (m) => new ConfigError(m));
      tls.crl.splice(0, tls.crl.length, ...bundle.pems);
      warnings.push(...crlWarnings(`${prefix}-tls-crl`, files.crl, bundle, tls.ca !== undefined ? { key: `${prefix}-tls-ca`, pem: tls.ca } : undefined));
      reloaded.push(`${prefix}-tls-crl`);
    } catch (err) {
      errors.push(`${(err as Error).message}: still using the CRLs read before`);
      failed.push(`${prefix}-tls-crl`);
    }
  }
  return { warnings, errors, reloaded, failed };
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

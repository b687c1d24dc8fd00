// TLS for the links tandem opens itself: HA replication and status between
// brokers, DR bridges, the CLI and the Pacemaker agent. One place decides how
// an outgoing connection is encrypted, so no caller can forget to verify: the
// peer's certificate is checked against a CA and must name the host dialled,
// and an amqps: address never becomes a plaintext connection.
import { isIP } from 'node:net';
import { readCrlFile } from './crl.js';
import { readTlsFile } from '../ops/tls-file-read.js';

/** PEM contents (not paths) for one kind of outgoing link. */
export interface LinkTls {
  /** CA bundle the peer's certificate must chain to; undefined: the system's CAs. */
  ca?: string;
  /** Our client certificate chain and key, for peers that ask for one (and for SASL EXTERNAL). */
  cert?: string;
  key?: string;
  /**
   * CRLs, one PEM string each, that the peer's chain is checked against (src/admin/crl.ts:
   * every CA of the chain needs one). Refreshed in place on SIGHUP (peer-addresses.ts), so
   * every holder of this array sees the new lists at its next connection.
   */
  crl?: string[];
}

/** The files a LinkTls is read from (config keys such as ha-tls-ca, or CLI options). */
export interface LinkTlsFiles {
  ca?: string;
  cert?: string;
  key?: string;
  crl?: string;
}

/**
 * Read a LinkTls from its files. `names` says which option each file came from, for
 * the error: a file that cannot be read is a mistake to report, never a reason to
 * connect without it.
 */
export function readLinkTls(files: LinkTlsFiles, names: { ca: string; cert: string; key: string; crl: string }, fail: (message: string) => Error): LinkTls {
  if ((files.cert === undefined) !== (files.key === undefined)) throw fail(`${names.cert} and ${names.key} must be given together`);
  const read = (path: string | undefined, name: string): string | undefined => {
    if (path === undefined) return undefined;
    try {
      // As text, as readFileSync(path, 'utf8') gave it: callers keep PEM strings.
      return readTlsFile(path, name).toString('utf8');
    } catch (err) {
      throw fail((err as Error).message);
    }
  };
  const tls: LinkTls = { ca: read(files.ca, names.ca), cert: read(files.cert, names.cert), key: read(files.key, names.key) };
  if (files.crl !== undefined) tls.crl = readCrlFile(files.crl, names.crl, fail).pems;
  return tls;
}

/**
 * tls.connect options for a link to `host`: the certificate verified against
 * `tls.ca` (or the system's CAs) and checked against `host`, our certificate given
 * when we have one.
 */
export function tlsConnectOptions(host: string, tls: LinkTls): Record<string, unknown> {
  return {
    rejectUnauthorized: true,
    ...(tls.ca !== undefined ? { ca: [tls.ca] } : {}),
    ...(tls.cert !== undefined ? { cert: tls.cert, key: tls.key } : {}),
    // A copy: the array is refreshed in place on SIGHUP, a connection keeps what it started with.
    ...(tls.crl !== undefined ? { crl: [...tls.crl] } : {}),
    // SNI may not carry an IP address (RFC 6066); the certificate is still checked against
    // the IP (Node's checkServerIdentity uses the host when servername is empty).
    servername: isIP(host) ? '' : host,
    minVersion: 'TLSv1.2',
  };
}

/** Node's error codes for a peer certificate that does not verify or does not name the host. */
export function isCertificateError(code: string | undefined): boolean {
  return code !== undefined && /CERT|SELF_SIGNED|LEAF|ALTNAME|ISSUER|UNABLE_TO_VERIFY|HOSTNAME|CRL/.test(code);
}

/**
 * The revocation errors OpenSSL reports, in words naming the CRL option (`crlOption`:
 * ha-tls-crl, dr-tls-crl, --tls-crl, tls-crl) and whose certificate it is (`whose`);
 * undefined for any other error.
 */
export function describeRevocation(code: string | undefined, crlOption: string, whose = "the peer's"): string | undefined {
  switch (code) {
    case 'CERT_REVOKED':
      return `${whose} TLS certificate (or a CA certificate of its chain) is revoked by ${crlOption} (CERT_REVOKED)`;
    case 'UNABLE_TO_GET_CRL':
      return `${crlOption} holds no CRL of a CA in ${whose} chain (UNABLE_TO_GET_CRL): every CA of the chain needs its CRL there`;
    case 'CRL_HAS_EXPIRED':
      return `a CRL in ${crlOption} is past its nextUpdate (CRL_HAS_EXPIRED): fetch a current one`;
    case 'CRL_NOT_YET_VALID':
      return `a CRL in ${crlOption} is not valid yet (CRL_NOT_YET_VALID): check this host's clock`;
    case 'CRL_SIGNATURE_FAILURE':
    case 'UNABLE_TO_DECRYPT_CRL_SIGNATURE':
      return `a CRL in ${crlOption} does not carry a valid signature of its CA (${code})`;
    default:
      return undefined;
  }
}

/**
 * A TLS failure in words an operator can act on, naming the option to look at
 * (`prefix`: ha-tls or dr-tls). An alert from the peer (ERR_SSL_..._ALERT_...) is the
 * peer refusing our client certificate, or the lack of one; anything else is the
 * peer's certificate failing here.
 */
export function describeTlsFailure(err: (Error & { code?: string }) | undefined, prefix: 'ha-tls' | 'dr-tls', hasCa: boolean): string | undefined {
  if (!err || !isCertificateError(err.code)) return undefined;
  if (/_ALERT_/.test(err.code!)) {
    return `the peer refused this broker's TLS client certificate, or wants one (${err.code}): set ${prefix}-cert/${prefix}-key to a certificate its tls-ca signed`;
  }
  const revocation = describeRevocation(err.code, `${prefix}-crl`);
  if (revocation) return revocation;
  const ca = `${prefix}-ca`;
  const why = err.code === 'ERR_TLS_CERT_ALTNAME_INVALID' ? 'does not name the address dialled' : `does not verify (${err.code})`;
  return hasCa ? `the peer's TLS certificate ${why} against ${ca}` : `the peer's TLS certificate ${why} against the system CAs: set ${ca} to the CA that signed it`;
}

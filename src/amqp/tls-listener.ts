// The AMQPS listener's TLS files and what it says about clients it does not trust.
// The files (tls-cert, tls-key, tls-ca, tls-crl) are read into a secure context at
// start and again on SIGHUP, when cron has fetched a new CRL (or a renewed
// certificate): the new context applies to new handshakes only, so connected
// clients stay. Node refuses a client certificate that does not verify (revoked,
// wrong CA) once the handshake is done, by closing the socket: with TLS 1.3 the
// client sees its connection closed rather than an alert, so the broker's log is
// where the reason is; one line per reason and address per interval.
import type { Socket } from 'node:net';
import type { Server, TLSSocket } from 'node:tls';
import { crlWarnings, readCrlFile } from '../admin/crl.js';
import { describeRevocation } from '../admin/link-tls.js';
import { LogThrottle } from '../ops/log-throttle.js';
import { readTlsFile } from '../ops/tls-file-read.js';
import type { Logger } from '../ops/log.js';
import { hostPort } from '../util/host-port.js';

export interface ListenerTlsFiles {
  cert: string;
  key: string;
  ca?: string;
  crl?: string;
}

/** Secure-context options read from the files, and what their CRLs warrant a warning for. */
export function listenerContext(files: ListenerTlsFiles): { options: { cert: Buffer; key: Buffer; ca?: Buffer; crl?: string[] }; warnings: string[] } {
  // Bounded, each refusal naming its key and path (readFileSync filled the heap from /dev/zero).
  const ca = files.ca !== undefined ? readTlsFile(files.ca, 'tls-ca') : undefined;
  const options = { cert: readTlsFile(files.cert, 'tls-cert'), key: readTlsFile(files.key, 'tls-key'), ...(ca ? { ca } : {}) };
  if (files.crl === undefined) return { options, warnings: [] };
  const bundle = readCrlFile(files.crl, 'tls-crl', (m) => new Error(m));
  const warnings = crlWarnings('tls-crl', files.crl, bundle, ca ? { key: 'tls-ca', pem: ca.toString('utf8') } : undefined);
  return { options: { ...options, crl: bundle.pems }, warnings };
}

/**
 * SIGHUP: read the files again and use them for the handshakes from now on. A file
 * that no longer reads or parses (a half-written download) keeps the context in force.
 */
export function reloadListenerTls(server: Server, files: ListenerTlsFiles, log: Logger): boolean {
  let context: ReturnType<typeof listenerContext>;
  try {
    context = listenerContext(files);
    server.setSecureContext(context.options);
  } catch (err) {
    log.error({ err: (err as Error).message }, `TLS listener not reloaded, still using the files read before: ${(err as Error).message}`);
    return false;
  }
  for (const warning of context.warnings) log.warn({ file: files.crl }, warning);
  log.info({ cert: files.cert, ca: files.ca, crl: files.crl, crls: context.options.crl?.length ?? 0 }, 'TLS listener reloaded: new handshakes use the files as they are now');
  return true;
}

/** Logs clients the listener refused, or let in without trusting their certificate. */
export class TlsRefusalLog {
  private readonly throttle = new LogThrottle();
  /**
   * Per reason, whatever the address: a client that changes its address at each try (a
   * host's IPv6 /64, a botnet; 127.0.0.0/8 in the tests) started a line for each, 3,600
   * a second of bytes that are not TLS. At most one a second per reason then.
   */
  private readonly anyAddress = new LogThrottle(1_000);

  constructor(private readonly log: Logger) {}

  /** Watch `server` for handshakes that fail (tlsClientError). */
  watch(server: Server): void {
    // Node reads the peer's address lazily and forgets it with the handle: read it while
    // the TCP socket is new, so a refusal after the handshake can still say who it was.
    server.on('connection', (raw: Socket) => void raw.remoteAddress);
    server.on('tlsClientError', (err: Error & { code?: string }, socket: TLSSocket) => this.refused(err, socket));
  }

  /**
   * A handshake that failed. A client certificate that did not verify shows as the
   * socket's authorizationError (Node closed it for that); anything else is the
   * handshake's own error (no certificate, not TLS at all). Node has closed the socket
   * by now, so the certificate's subject is no longer to be had: the address is.
   */
  private refused(err: Error & { code?: string }, socket: TLSSocket): void {
    const remote = remoteOf(socket);
    const reason = (socket as TLSSocket & { authorizationError?: string }).authorizationError;
    if (reason !== undefined) {
      this.line('warn', reason, socket, { remote, reason }, `TLS client ${remote} refused: ${whyUntrusted(reason)}`);
    } else {
      this.line('info', err.code ?? err.message, socket, { remote, reason: err.code, err: err.message }, `TLS handshake with ${remote} failed: ${err.message}`);
    }
  }

  /**
   * A client let in (no tls-require-client-cert) whose certificate did not verify: it
   * is not offered EXTERNAL and may log in only with a password.
   */
  untrusted(socket: TLSSocket): void {
    const reason = (socket as TLSSocket & { authorizationError?: string }).authorizationError;
    const subject = subjectOf(socket);
    // No certificate at all is the ordinary PLAIN client, not news.
    if (socket.authorized || reason === undefined || subject === undefined) return;
    const remote = remoteOf(socket);
    this.line('warn', reason, socket, { remote, reason, subject }, `TLS client ${remote} shows a certificate that is not trusted, so it cannot log in by it (no SASL EXTERNAL): ${whyUntrusted(reason)}`);
  }

  private line(level: 'warn' | 'info', reason: string, socket: TLSSocket, fields: Record<string, unknown>, message: string): void {
    const fromHost = this.throttle.admit(`${reason}\0${hostOf(socket)}`);
    if (fromHost === undefined) return;
    // Those this held back came from addresses the first throttle let through: counted here.
    const fromOthers = this.anyAddress.admit(reason);
    if (fromOthers === undefined) return;
    const held = fromHost + fromOthers;
    this.log[level]({ ...fields, ...(held > 0 ? { held } : {}) }, held > 0 ? `${message} (and ${held} more like it)` : message);
  }
}

/**
 * host:port of a client. A socket Node closed after the handshake no longer knows it;
 * the TCP socket under it (`_parent`, Node's own link between the two) read it at
 * accept (watch above).
 */
function remoteOf(socket: TLSSocket): string {
  const s = addressed(socket);
  return hostPort(s.remoteAddress ?? 'unknown', s.remotePort ?? '?');
}

function hostOf(socket: TLSSocket): string {
  return addressed(socket).remoteAddress ?? 'unknown';
}

function addressed(socket: TLSSocket): Socket {
  if (socket.remoteAddress !== undefined) return socket;
  return tcpSocketOf(socket) ?? socket;
}

/** The TCP socket a listener's TLS socket runs on (`_parent`, Node's own link between the two). */
export function tcpSocketOf(socket: TLSSocket): Socket | undefined {
  return (socket as TLSSocket & { _parent?: Socket })._parent;
}

function whyUntrusted(reason: string): string {
  return describeRevocation(reason, 'tls-crl', 'its') ?? `its certificate does not verify against tls-ca (${reason})`;
}

/** The subject of the client's certificate, while the socket still has it. */
function subjectOf(socket: TLSSocket): string | undefined {
  try {
    const cert = socket.getPeerCertificate();
    if (!cert || !cert.subject) return undefined;
    return Object.entries(cert.subject).map(([k, v]) => `${k}=${String(v)}`).join(', ');
  } catch {
    return undefined;
  }
}

// SASL EXTERNAL on the broker's side: a client certificate, verified by the TLS
// handshake against tls-ca, logs in as the user it names (tls-external-user: the
// subject's CN, or the first e-mail subject-alternative-name). The user must be in
// the users file, which also says whether it is an admin; a certificate naming
// nobody there is refused. Offered only on TLS connections whose client sent a
// certificate that verified: elsewhere there is nothing external to trust.
import type { PeerCertificate, TLSSocket } from 'node:tls';
import type { Connection } from 'rhea';
import type { UserDirectory } from '../admin/users.js';
import type { Logger } from '../ops/log.js';

export type ExternalUserMapping = 'cn' | 'san-email';
export const EXTERNAL_USER_MAPPINGS: readonly ExternalUserMapping[] = ['cn', 'san-email'];

/** The user name a certificate carries under `mapping`, or undefined when it has none. */
export function userOfCertificate(cert: PeerCertificate, mapping: ExternalUserMapping): string | undefined {
  if (mapping === 'cn') {
    const cn = cert.subject?.CN as string | string[] | undefined;
    // Two CNs name no one in particular.
    return typeof cn === 'string' && cn !== '' ? cn : undefined;
  }
  for (const entry of splitAltNames(cert.subjectaltname ?? '')) {
    if (entry.startsWith('email:')) return unquote(entry.slice('email:'.length)) || undefined;
  }
  return undefined;
}

/** Node lists subject-alternative-names as "type:value, type:value", quoting values that hold a comma. */
function splitAltNames(text: string): string[] {
  const out: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (ch === '"' && text[i - 1] !== '\\') quoted = !quoted;
    if (ch === ',' && !quoted) {
      out.push(current.trim());
      current = '';
    } else current += ch;
  }
  if (current.trim() !== '') out.push(current.trim());
  return out;
}

function unquote(value: string): string {
  if (!value.startsWith('"')) return value;
  try {
    return String(JSON.parse(value));
  } catch {
    return '';
  }
}

export interface ExternalServerOptions {
  users: UserDirectory;
  mapping: ExternalUserMapping;
  log: Logger;
}

/** The object rhea's SASL server drives for EXTERNAL (outcome, and username on success). */
class ExternalMechanism {
  outcome: boolean | undefined;
  username: string | undefined;

  constructor(
    private readonly options: ExternalServerOptions,
    private readonly socket: TLSSocket,
  ) {}

  start(response: Buffer | string | undefined): void {
    const { log, mapping, users } = this.options;
    const remote = `${this.socket.remoteAddress}:${this.socket.remotePort}`;
    const name = userOfCertificate(this.socket.getPeerCertificate(), mapping);
    // RFC 4422 appendix A: a non-empty authorization identity asks to act as that user;
    // only the certificate's own is allowed.
    const asked = Buffer.isBuffer(response) ? response.toString('utf8') : (response ?? '');
    if (name === undefined) {
      log.warn({ remote, mapping }, `authentication failed: the client certificate from ${remote} has no ${mapping === 'cn' ? 'common name' : 'e-mail subject-alternative-name'} (tls-external-user=${mapping})`);
    } else if (asked !== '' && asked !== name) {
      log.warn({ remote, user: name, asked }, `authentication failed: the client certificate of '${name}' from ${remote} asked to act as '${asked}'`);
    } else if (users.role(name) === undefined) {
      log.warn({ remote, user: name }, `authentication failed: the client certificate from ${remote} names '${name}', who is not in users-file`);
    } else {
      this.username = name;
      this.outcome = true;
      return;
    }
    this.outcome = false;
  }
}

/** rhea's per-connection SASL server, as far as offering EXTERNAL needs it. */
interface RheaSaslServerMechanisms {
  mechanisms?: Record<string, () => unknown>;
  transports?: Record<number, { mechanisms?: Record<string, () => unknown> }>;
}

/**
 * Connection options for an accepted TLS socket: rhea offers EXTERNAL (as the last
 * mechanism) when the socket is encrypted and its client certificate verified.
 */
export function externalConnectionOptions(socket: TLSSocket): Record<string, unknown> {
  return socket.authorized ? { enable_sasl_external: true } : {};
}

/**
 * Put our EXTERNAL in the place of rhea's own, which accepts any verified certificate
 * as nobody in particular. The list rhea offers is this connection's own copy, so
 * nothing else changes; the factory is called only when the client picks EXTERNAL.
 */
export function installExternal(conn: Connection, socket: TLSSocket, options: ExternalServerOptions): void {
  if (!socket.authorized) return;
  const sasl = (conn as unknown as { sasl_transport?: RheaSaslServerMechanisms }).sasl_transport;
  const mechanisms = sasl?.mechanisms ?? sasl?.transports?.[3]?.mechanisms;
  if (!mechanisms || !('EXTERNAL' in mechanisms)) {
    // Not the rhea this was written against: offer no EXTERNAL rather than rhea's.
    socket.destroy();
    throw new Error('rhea did not set up SASL EXTERNAL where expected; connection dropped');
  }
  mechanisms.EXTERNAL = () => new ExternalMechanism(options, socket);
}

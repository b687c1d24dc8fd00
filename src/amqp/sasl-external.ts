// SASL EXTERNAL on the broker's side: a client certificate, verified by the TLS
// handshake against tls-ca, logs in as the user it names (tls-external-user: the
// subject's CN, or the first e-mail subject-alternative-name). The user must be in
// the users file, which also says whether it is an admin; a certificate naming
// nobody there is refused. Offered only on TLS connections whose client sent a
// certificate that verified: elsewhere there is nothing external to trust.
import type { PeerCertificate, TLSSocket } from 'node:tls';
import type { UserDirectory } from '../admin/users.js';
import type { Logger } from '../ops/log.js';
import { peerText } from '../ops/log-fields.js';
import { LogThrottle, suppressedField } from '../ops/log-throttle.js';
import { hostPort } from '../util/host-port.js';

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

/** Refused EXTERNAL logins, per reason and certificate name: one line each per interval. */
const externalRefusals = new LogThrottle();

export interface ExternalServerOptions {
  users: UserDirectory;
  mapping: ExternalUserMapping;
  log: Logger;
}

/**
 * The engine's EXTERNAL check for an accepted TLS socket, or undefined when there is
 * nothing external to trust (no client certificate, or one tls-ca did not sign): then
 * EXTERNAL is not offered at all. The check resolves with the user the certificate
 * names, or undefined (logged with the reason) to refuse.
 */
export function externalVerifier(socket: TLSSocket, options: ExternalServerOptions): ((authzid: string) => Promise<string | undefined>) | undefined {
  if (!socket.authorized) return undefined;
  return async (asked) => {
    const { log, mapping, users } = options;
    const remote = hostPort(socket.remoteAddress ?? 'unknown', socket.remotePort ?? '?');
    const name = userOfCertificate(socket.getPeerCertificate(), mapping);
    // EXTERNAL has no password to slow down (no login throttle): a certificate's holder
    // could repeat a refused login as fast as it makes TLS handshakes, each a line.
    const refused = (kind: string, fields: Record<string, unknown>, message: string): undefined => {
      const held = externalRefusals.admit(`${kind}\0${name ?? ''}`);
      if (held !== undefined) log.warn({ remote, ...fields, ...suppressedField(held) }, message);
      return undefined;
    };
    // RFC 4422 appendix A: a non-empty authorization identity asks to act as that user;
    // only the certificate's own is allowed.
    if (name === undefined) {
      return refused('no-name', { mapping }, `authentication failed: the client certificate has no ${mapping === 'cn' ? 'common name' : 'e-mail subject-alternative-name'} (tls-external-user=${mapping})`);
    } else if (asked !== '' && asked !== name) {
      return refused('asked', { user: name, asked: peerText(asked) }, `authentication failed: the client certificate of '${name}' asked to act as another user`);
    } else if (users.role(name) === undefined) {
      return refused('unknown', { user: name }, `authentication failed: the client certificate names '${name}', who is not in users-file`);
    }
    return name;
  };
}

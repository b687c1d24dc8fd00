// The one place credentials are taken out of text before it leaves the process:
// log lines, status replies, metrics, error descriptions. Two nets, both always
// cast: the password of any broker URL (`user/password@host`, `user:password@host`)
// is cut structurally, and every password the broker was given (ha-password, DR
// source passwords) is replaced wherever it appears, whatever text carries it.

const CENSOR = '***';

/**
 * Passwords shorter than this are not searched for in free text: replacing every "ab"
 * would garble logs and tell a reader the password. URLs are still cut structurally.
 */
const MIN_SEARCHED = 4;

const known = new Set<string>();
let pattern: RegExp | undefined;

/** Remember a password the broker holds, so redact() removes it from any text. */
export function registerSecret(secret: string | undefined): void {
  registerSecrets([secret]);
}

/**
 * Remember several passwords at once: the pattern is built once for all of them
 * (built per password, a thousand DR sources cost a million sorted alternatives).
 */
export function registerSecrets(secrets: Iterable<string | undefined>): void {
  let added = false;
  for (const secret of secrets) {
    if (secret === undefined || secret.length < MIN_SEARCHED || known.has(secret)) continue;
    known.add(secret);
    // As a JSON log line spells it, if that differs (quotes, backslashes, control characters).
    const escaped = JSON.stringify(secret).slice(1, -1);
    if (escaped !== secret) known.add(escaped);
    added = true;
  }
  if (!added) return;
  // Longest first, so a password that contains another is removed whole.
  const alternatives = [...known].sort((a, b) => b.length - a.length).map(escapeRegExp);
  pattern = new RegExp(alternatives.join('|'), 'g');
}

/**
 * `user/password@` or `user:password@` before a host: the credential part of a
 * broker URL. The user is the characters tandem allows in user names; the password
 * runs to the last `@` before the host (a password may itself hold an `@`), or before
 * the end of the text (a URL cut short, or one that names no host, quoted in an error).
 */
const URL_CREDENTIALS = /(amqps?:(?:\/\/)?|^|[\s,'"=(\[])([A-Za-z0-9_.@-]{1,64})[/:]([^\s'"]*)@(?=\[|[A-Za-z0-9]|$)/g;

/** The text with every password in it replaced by ***. */
export function redact(text: string): string {
  let out = text.replace(URL_CREDENTIALS, (_m, lead: string, user: string) => `${lead}${user}/${CENSOR}@`);
  if (pattern) out = out.replace(pattern, CENSOR);
  return out;
}

/** A value about to be shown (status, metrics, a reply): strings redacted, objects deeply. */
export function redactValue<T>(value: T): T {
  if (typeof value === 'string') return redact(value) as T;
  if (Array.isArray(value)) return value.map((v) => redactValue(v)) as T;
  const proto = value && typeof value === 'object' ? Object.getPrototypeOf(value) : undefined;
  // Plain objects only: a Buffer, Date or an AMQP typed value is passed as it is.
  if (proto === Object.prototype || proto === null) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = redactValue(v);
    return out as T;
  }
  return value;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// DR queues in tandemd.conf, one line per queue in a [dr] section:
//
//   [dr]
//   orders = source=primary1:5672,primary2:5672 mode=enqueue-and-dequeue
//   audit  = source=dr@primary1,primary2 source-password-file=/etc/tandem/dr-password mode=enqueue-only
//
// The source lists every broker of the primary cluster (credentials once, as in
// ha-brokers-url; `dr/secret@primary1` works too, but keeps the password in this
// file). Lines are applied each time the broker starts serving; a queue added with
// `tandem dr add` is kept in the journal instead. Either way the journal holds the
// source without its password (credentials.ts keeps that).
import { DR_MODES, type DrMode } from '../broker/changes.js';
import { invalidArgument } from '../broker/errors.js';
import { parseBrokersUrl } from '../ha/brokers-url.js';
import { hostPort } from '../util/host-port.js';
import { normaliseExchangeFilter } from './topology.js';
import { readSecretFile } from '../ops/secret-files.js';
import { knownPassword, rememberPassword } from './credentials.js';
import { redact } from '../ops/secrets.js';
import { shownValue } from '../util/safe-string.js';

export interface DrQueueSpec {
  queue: string;
  /** `[amqps:][user@]host:port,...`: never a password. */
  source: string;
  password: string | undefined;
  mode: DrMode;
  /** Which exchanges binding the queue are copied with it (src/dr/topology.ts). */
  exchanges: string;
}

export function parseDrMode(value: unknown): DrMode {
  if (typeof value === 'string' && (DR_MODES as readonly string[]).includes(value)) return value as DrMode;
  throw invalidArgument(`DR mode must be enqueue-and-dequeue or enqueue-only, not ${JSON.stringify(value)}`);
}

/**
 * Check a source URL and split it into its canonical spelling without the password
 * (what the journal keeps and bridges are keyed by) and the password, if it has one.
 */
export function parseSource(value: unknown): { source: string; password: string | undefined } {
  if (typeof value !== 'string' || value.trim() === '') throw invalidArgument('a DR source lists the brokers of the primary cluster: host:port,host:port');
  let url;
  try {
    url = parseBrokersUrl(value);
  } catch (err) {
    throw invalidArgument(`DR source '${redact(value)}': ${(err as Error).message.replace(/^ha-brokers-url: /, '')}`);
  }
  const user = url.user ? `${url.user}@` : '';
  // The scheme is part of the source as the journal keeps it, so that a copy made over
  // TLS stays over TLS after a restart, and on this site's HA backups. An IPv6 address
  // keeps its brackets: `::1:5672` would read back as host ::1:5672 on the default port.
  return { source: (url.tls ? 'amqps:' : '') + user + url.endpoints.map((e) => hostPort(e.host, e.port)).join(','), password: url.password };
}

/**
 * A source in its canonical spelling without the password (what the journal keeps),
 * the password, if it came with one, kept apart (credentials.ts).
 */
export function normaliseSource(value: unknown): string {
  const { source, password } = parseSource(value);
  if (password !== undefined) rememberPassword(source, password);
  return source;
}

/** The source with its kept password, for a request that hands it to the other site. */
export function sourceWithPassword(source: string): string {
  const password = knownPassword(source);
  const at = source.lastIndexOf('@');
  return password === undefined || at < 0 ? source : `${source.slice(0, at)}/${password}${source.slice(at)}`;
}

/** Without credentials, for status and logs (the scheme kept: whether the copy is encrypted matters). */
export function displaySource(source: string): string {
  const at = source.lastIndexOf('@');
  if (at < 0) return source;
  return (/^amqps:/.test(source) ? 'amqps:' : '') + source.slice(at + 1);
}

/** One `QUEUE = source=URL mode=MODE` line of the [dr] section. */
export function parseDrLine(queue: string, value: unknown): DrQueueSpec {
  const fields: Record<string, string> = {};
  for (const part of String(value ?? '').trim().split(/\s+/)) {
    const eq = part.indexOf('=');
    if (eq < 1) throw invalidArgument(`[dr] ${queue}: expected source=HOST:PORT,... mode=MODE, not '${part}'`);
    fields[part.slice(0, eq)] = part.slice(eq + 1);
  }
  const known = ['source', 'source-password-file', 'mode', 'exchanges'];
  for (const k of Object.keys(fields)) if (!known.includes(k)) throw invalidArgument(`[dr] ${queue}: unknown field '${k}' (known: ${known.join(', ')})`);
  if (!fields.source) throw invalidArgument(`[dr] ${queue}: source=HOST:PORT,HOST:PORT (every broker of the primary cluster) is required`);
  const { source, password } = parseSource(fields.source);
  const file = fields['source-password-file'];
  if (file !== undefined && password !== undefined) throw invalidArgument(`[dr] ${queue}: give the password in source or in source-password-file, not both`);
  return {
    queue,
    source,
    password: file !== undefined ? readSecretFile(file, `[dr] ${queue}: source-password-file`) : password,
    mode: fields.mode === undefined ? 'enqueue-and-dequeue' : parseDrMode(fields.mode),
    exchanges: normaliseExchangeFilter(fields.exchanges),
  };
}

/** The most names one management request may list (as many as a peer's JSON lists). */
export const MAX_LISTED_NAMES = 10_000;

/**
 * A list of names in a management body: a list of names or a comma-separated string;
 * absent or empty, none (which DR-ACTIVATE and DR-STATUS take as "every DR queue").
 * Anything else is refused: taken as none, `{queues: 42}` activated every copy.
 */
export function listOf(v: unknown, what = 'queues'): string[] {
  let names: string[] | undefined;
  if (v === undefined || v === null) names = [];
  else if (typeof v === 'string') names = v.split(',').map((s) => s.trim()).filter((s) => s !== '');
  else if (Array.isArray(v) && v.every((s) => typeof s === 'string' && s !== '')) names = v as string[];
  if (names === undefined || names.length > MAX_LISTED_NAMES) {
    throw invalidArgument(`${what}: expected up to ${MAX_LISTED_NAMES} names, as a list of names or a comma-separated string, not ${shownValue(v)}`);
  }
  return names;
}

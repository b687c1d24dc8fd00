// DR queues in tandemd.conf, one line per queue in a [dr] section:
//
//   [dr]
//   orders = source=primary1:5672,primary2:5672 mode=enqueue-and-dequeue
//   audit  = source=dr/secret@primary1,primary2 mode=enqueue-only
//
// The source lists every broker of the primary cluster (credentials once, as in
// ha-brokers-url). Lines are applied each time the broker starts serving; a
// queue added with `tandem dr add` is kept in the journal instead.
import { DR_MODES, type DrMode } from '../broker/changes.js';
import { invalidArgument } from '../broker/errors.js';
import { parseBrokersUrl } from '../ha/brokers-url.js';
import { normaliseExchangeFilter } from './topology.js';

export interface DrQueueSpec {
  queue: string;
  source: string;
  mode: DrMode;
  /** Which exchanges binding the queue are copied with it (src/dr/topology.ts). */
  exchanges: string;
}

export function parseDrMode(value: unknown): DrMode {
  if (typeof value === 'string' && (DR_MODES as readonly string[]).includes(value)) return value as DrMode;
  throw invalidArgument(`DR mode must be enqueue-and-dequeue or enqueue-only, not ${JSON.stringify(value)}`);
}

/** Check a source URL and return it in a canonical spelling (the key positions are kept under). */
export function normaliseSource(value: unknown): string {
  if (typeof value !== 'string' || value.trim() === '') throw invalidArgument('a DR source lists the brokers of the primary cluster: host:port,host:port');
  let url;
  try {
    url = parseBrokersUrl(value);
  } catch (err) {
    throw invalidArgument(`DR source '${value}': ${(err as Error).message.replace(/^ha-brokers-url: /, '')}`);
  }
  const cred = url.user ? `${url.user}${url.password !== undefined ? `/${url.password}` : ''}@` : '';
  return cred + url.endpoints.map((e) => `${e.host}:${e.port}`).join(',');
}

/** Without credentials, for status and logs. */
export function displaySource(source: string): string {
  const at = source.lastIndexOf('@');
  return at >= 0 ? source.slice(at + 1) : source;
}

/** One `QUEUE = source=URL mode=MODE` line of the [dr] section. */
export function parseDrLine(queue: string, value: unknown): DrQueueSpec {
  const fields: Record<string, string> = {};
  for (const part of String(value ?? '').trim().split(/\s+/)) {
    const eq = part.indexOf('=');
    if (eq < 1) throw invalidArgument(`[dr] ${queue}: expected source=HOST:PORT,... mode=MODE, not '${part}'`);
    fields[part.slice(0, eq)] = part.slice(eq + 1);
  }
  for (const k of Object.keys(fields)) if (k !== 'source' && k !== 'mode' && k !== 'exchanges') throw invalidArgument(`[dr] ${queue}: unknown field '${k}' (known: source, mode, exchanges)`);
  if (!fields.source) throw invalidArgument(`[dr] ${queue}: source=HOST:PORT,HOST:PORT (every broker of the primary cluster) is required`);
  return {
    queue,
    source: normaliseSource(fields.source),
    mode: fields.mode === undefined ? 'enqueue-and-dequeue' : parseDrMode(fields.mode),
    exchanges: normaliseExchangeFilter(fields.exchanges),
  };
}

/** A list of names in a management body: a JSON-ish list or a comma-separated string. */
export function listOf(v: unknown): string[] {
  if (Array.isArray(v)) return v.map(String).filter((s) => s !== '');
  if (typeof v === 'string') return v.split(',').map((s) => s.trim()).filter((s) => s !== '');
  return [];
}

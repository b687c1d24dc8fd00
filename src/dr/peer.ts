// One management request to the other site of a DR pair (switchover, reattach,
// the fenced side asking how a switchover ended): tried on each broker of its URL
// in turn, since only the primary of an HA cluster answers. The credentials are
// the URL's, as for the bridge.
//
// What the other site answers is read here too, strictly (fenceAnswer, peerStateRows,
// namesIn): a buggy or hostile broker at the DR address, or another version, may answer
// anything, and a value taken unchecked was recorded as a position (NaN), unfenced or
// activated a queue, or threw from a timer (the fenced side's tick ended the process).
// An answer that is not what a tandem site writes is refused (PeerAnswerError): the
// caller changes nothing and stays on the safe side (fenced, not activated, not
// reattached).
import { ConnectError, ManagementClient } from '../admin/client.js';
import type { LinkTls } from '../admin/link-tls.js';
import { endpointAddress } from '../admin/peer-addresses.js';
import type { DrMode } from '../broker/changes.js';
import { TandemError } from '../broker/errors.js';
import { parseBrokersUrl } from '../ha/brokers-url.js';
import { shownValue } from '../util/safe-string.js';
import { displaySource, parseDrMode, parseSource } from './config.js';
import { knownPassword } from './credentials.js';
import { MAX_EPOCH } from './roles.js';
import { normaliseExchangeFilter } from './topology.js';
import { hostPort } from '../util/host-port.js';

export type PeerReply = Record<string, unknown>;

/** A refusal of the other site is passed on in its words, cut to this (they go to our logs and answers). */
const MAX_REFUSAL_CHARS = 2000;

/**
 * Send `op` to the first broker of `url` that serves it (over TLS verified with `tls`,
 * dr-tls-*, when the URL is amqps:; `givenPassword`: one the caller has and that is not
 * kept yet). A TandemError from the peer (it understood and said no) is returned as it
 * is; when no broker answers, a TandemError naming the site and the reason of each.
 */
export async function peerRequest(url: string, tls: LinkTls, op: string, body: Record<string, unknown>, timeoutMs: number, givenPassword?: string): Promise<PeerReply> {
  const parsed = parseBrokersUrl(url);
  const { endpoints, user } = parsed;
  // Sources are kept without their password (credentials.ts keeps it).
  const password = givenPassword ?? parsed.password ?? knownPassword(parseSource(url).source);
  const failures: string[] = [];
  for (const e of endpoints) {
    let client: ManagementClient | undefined;
    try {
      client = await ManagementClient.connect(endpointAddress(e, parsed, { user, password, external: user === undefined && tls.cert !== undefined }, tls), { timeoutMs });
      const reply = await client.request(op, 'broker', 'broker', body);
      // Every answer of a tandem site to these operations is a map.
      if (!isMap(reply)) throw answerError(url, op, `an answer that is no map (${shownValue(reply)})`);
      return reply as PeerReply;
    } catch (err) {
      // The peer's refusal, in its words (cut: they end up in our logs and answers).
      if (err instanceof PeerAnswerError) throw err;
      if (err instanceof TandemError) throw err.message.length > MAX_REFUSAL_CHARS ? new TandemError(err.code, `${err.message.slice(0, MAX_REFUSAL_CHARS)}... (${err.message.length} characters)`) : err;
      failures.push(`${hostPort(e.host, e.port)}: ${(err as Error).message}`);
      if (!(err instanceof ConnectError)) break;
    } finally {
      client?.close();
    }
  }
  throw new TandemError('TANDEM_ERR_PRECONDITION', `the other DR site ${displaySource(url)} cannot be reached (${failures.join('; ')}); nothing was changed there`);
}

/** The other site answered, but not as a tandem site does: nothing is taken from it. */
export class PeerAnswerError extends TandemError {
  constructor(message: string) {
    super('TANDEM_ERR_PRECONDITION', message);
    this.name = 'PeerAnswerError';
  }
}

function answerError(url: string, op: string, what: string): PeerAnswerError {
  return new PeerAnswerError(`the other DR site ${displaySource(url)} answered ${op} with ${what}, which a tandem site does not write: nothing was taken from that answer`);
}

/** Queues one answer may name at most (as a request). */
const MAX_ANSWER_QUEUES = 10_000;
/** Id ranges a DR-PEER-STATE row names at most (switchover.ts heldOf). */
export const MAX_HELD_RANGES = 10_000;
/** The roles a DR-PEER-STATE row names ('none': not a DR queue there). */
const PEER_STATES = ['none', 'passive', 'active', 'fenced', 'diverged'] as const;

const isPosition = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isEpoch = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 1 && (v as number) <= MAX_EPOCH;
const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v) && !Buffer.isBuffer(v) && !(v instanceof Date);

/** Sorted, disjoint id ranges [lo, hi, lo, hi, ...] of safe integers, at most MAX_HELD_RANGES of them. */
export function isRanges(v: unknown): v is number[] {
  if (!Array.isArray(v) || v.length % 2 !== 0 || v.length > 2 * MAX_HELD_RANGES) return false;
  let prev = -1;
  for (let i = 0; i < v.length; i += 2) {
    const lo = v[i] as unknown;
    const hi = v[i + 1] as unknown;
    if (!Number.isSafeInteger(lo) || !Number.isSafeInteger(hi) || (lo as number) <= prev || (hi as number) < (lo as number)) return false;
    prev = hi as number;
  }
  return true;
}

/**
 * The names listed under `key` of an answer (DR-FOLLOW's `following`, DR-UNFENCE's
 * `unfenced`, DR-DEMOTE's `demoted` and `already`), or undefined when it is no list of
 * at most 10,000 names.
 */
export function namesIn(reply: PeerReply, key: string): string[] | undefined {
  const v = reply[key];
  if (!Array.isArray(v) || v.length > MAX_ANSWER_QUEUES || !v.every((n) => typeof n === 'string')) return undefined;
  return v as string[];
}

/**
 * DR-FENCE's answer: every queue asked fenced, and the source's log position once that
 * was safe (a fence is a change of that log, so at least 1). Anything else is refused:
 * a position taken as 0 (null, '', a list) let the drain finish at once and activated
 * the copies while the source had changes they lacked.
 */
export function fenceAnswer(url: string, reply: PeerReply, queues: readonly string[]): number {
  const fenced = namesIn(reply, 'fenced');
  if (fenced === undefined) throw answerError(url, 'DR-FENCE', `fenced: ${shownValue(reply.fenced)} (not a list of queue names)`);
  const missing = queues.filter((q) => !fenced.includes(q));
  if (missing.length > 0) throw answerError(url, 'DR-FENCE', `fenced: ${shownValue(fenced)}, not naming ${shownValue(missing)}`);
  if (!Number.isSafeInteger(reply.lsn) || (reply.lsn as number) < 1) throw answerError(url, 'DR-FENCE', `lsn: ${shownValue(reply.lsn)} (not a log position from 1 to 2^53 - 1)`);
  return reply.lsn as number;
}

/** One row of a DR-PEER-STATE answer, read (switchover.ts peerState writes it). */
export interface PeerStateRow {
  queue: string;
  state: (typeof PEER_STATES)[number];
  epoch: number;
  /** The other site's position at activation. */
  since: number;
  /** The last change of this site the other had applied at activation. */
  divergence: number;
  mode: DrMode | null;
  switching: boolean;
  /** The pair's exchange filter there (absent from older sites). */
  exchanges?: string;
  /** What the other site holds from before its activation (both or neither). */
  crossed?: { floor: number; held: number[] };
}

/**
 * A DR-PEER-STATE answer: at most one row per queue asked, each naming one of them.
 * `rows` holds the rows read; `bad` why each other row was not (that queue changes
 * nothing). An answer whose `queues` is no such list is refused whole (PeerAnswerError).
 */
export function peerStateRows(url: string, reply: PeerReply, asked: readonly string[]): { rows: Map<string, PeerStateRow>; bad: Map<string, string> } {
  const list = reply.queues;
  if (!Array.isArray(list) || list.length > asked.length) {
    throw answerError(url, 'DR-PEER-STATE', `queues: ${shownValue(list)} (not a list of at most ${asked.length} rows, one per queue asked)`);
  }
  const wanted = new Set(asked);
  const rows = new Map<string, PeerStateRow>();
  const bad = new Map<string, string>();
  for (const row of list as unknown[]) {
    const queue = isMap(row) ? row.queue : undefined;
    if (typeof queue !== 'string' || !wanted.has(queue)) throw answerError(url, 'DR-PEER-STATE', `a row ${shownValue(row)} for no queue asked`);
    if (rows.has(queue) || bad.has(queue)) throw answerError(url, 'DR-PEER-STATE', `two rows for queue ${shownValue(queue)}`);
    const why = rowProblem(row as Record<string, unknown>);
    if (why !== undefined) bad.set(queue, answerError(url, 'DR-PEER-STATE', `${why} for queue ${shownValue(queue)}`).message);
    else rows.set(queue, readRow(row as Record<string, unknown>));
  }
  return { rows, bad };
}

/** What is wrong with one row, or undefined. */
function rowProblem(r: Record<string, unknown>): string | undefined {
  if (typeof r.state !== 'string' || !(PEER_STATES as readonly string[]).includes(r.state)) return `state: ${shownValue(r.state)}`;
  if (!isEpoch(r.epoch)) return `epoch: ${shownValue(r.epoch)} (not an integer from 1 to 2^32)`;
  if (!isPosition(r.since)) return `since: ${shownValue(r.since)} (not a log position)`;
  if (!isPosition(r.divergence)) return `divergence: ${shownValue(r.divergence)} (not a log position)`;
  if (r.state === 'none' ? r.mode !== null && !modeOk(r.mode) : !modeOk(r.mode)) return `mode: ${shownValue(r.mode)}`;
  if (typeof r.switching !== 'boolean') return `switching: ${shownValue(r.switching)} (not true or false)`;
  if (r.exchanges !== undefined && r.exchanges !== null && !exchangesOk(r.exchanges)) return `exchanges: ${shownValue(r.exchanges)} (not an exchange filter in its canonical spelling)`;
  const named = r.held !== undefined || r.floor !== undefined;
  if (named && !(isRanges(r.held) && isPosition(r.floor))) return `held ${shownValue(r.held)} and floor ${shownValue(r.floor)} (sorted disjoint id ranges, at most ${MAX_HELD_RANGES}, and a floor from 0)`;
  return undefined;
}

function readRow(r: Record<string, unknown>): PeerStateRow {
  return {
    queue: r.queue as string,
    state: r.state as PeerStateRow['state'],
    epoch: r.epoch as number,
    since: r.since as number,
    divergence: r.divergence as number,
    mode: r.mode === null || r.mode === undefined ? null : (r.mode as DrMode),
    switching: r.switching as boolean,
    ...(typeof r.exchanges === 'string' ? { exchanges: r.exchanges } : {}),
    ...(r.held !== undefined ? { crossed: { floor: r.floor as number, held: r.held as number[] } } : {}),
  };
}

export function exchangesOk(v: unknown): boolean {
  try {
    return normaliseExchangeFilter(v) === v;
  } catch {
    return false;
  }
}

/** Whether `v` names a DR mode (parseDrMode). */
export function modeOk(v: unknown): boolean {
  try {
    parseDrMode(v);
    return true;
  } catch {
    return false;
  }
}

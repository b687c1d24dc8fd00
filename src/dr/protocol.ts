// The DR stream between a primary cluster (source) and a DR bridge on another
// cluster (secondary), over AMQP.
//
// The bridge opens a receiver from DR_ADDRESS on the source, naming in the link
// properties the queues it wants, each with its mode and the source position it
// has applied. The source answers the attach with DR_SOURCE_PROP (a broker that
// does not is not a tandem DR source) and sends transfers whose application
// property `k` says what they carry; records are encoded with the journal's codec
// (as in the HA stream). The bridge grants credit as it applies, which is all the
// flow control there is: the source keeps no per-bridge acknowledgement state.
import type { DrMode, LoggedChange } from '../broker/changes.js';
import { decodeRecordBatch } from '../replication/protocol.js';
import { encodeChange } from '../store/record-codec.js';
import { DEDUP_ROW_BYTES } from '../broker/dedup-window.js';
import { BATCH_BYTES } from '../peer-link/outbound.js';
import { DATA_SECTION_HEADER, applicationPropertiesSection, bodyBytes, writeDataSectionHeader } from '../peer-link/sections.js';
import { peerWholeNumber } from '../peer-link/peer-values.js';
import { safeString } from '../util/safe-string.js';

export const DR_ADDRESS = '$dr.replication';

export const DrProps = {
  /** Link property (bridge -> source): JSON of DrRequestQueue[]. */
  queues: 'tandem.dr.queues',
  /** Link property (source -> bridge): present on a tandem DR source. */
  source: 'tandem.dr.source',
  /** Link property (source -> bridge): JSON {queue: the pair's epoch here}. */
  epochs: 'tandem.dr.epochs',
  /** Connection property: who is connecting (for the source's log). */
  bridge: 'tandem.dr.bridge',
  /** Link property (bridge -> source): true when the bridge applies `restart` (older bridges get a snapshot instead). */
  gaps: 'tandem.dr.gaps',
  /**
   * Link property (bridge -> source): true when the bridge takes `dedup-keys` records in a
   * copy of a queue's contents (the source's duplicate-detection window); older bridges
   * are sent none, and older sources send none.
   */
  dedupKeys: 'tandem.dr.dedup-keys',
} as const;

export interface DrRequestQueue {
  queue: string;
  mode: DrMode;
  /** Source LSN this queue has applied (0 = nothing yet: copy its contents first). */
  from: number;
  /** The pair's epoch on the secondary (absent from older bridges: 1). */
  epoch?: number;
  /**
   * A reattached copy: the ids it holds, as sorted inclusive ranges [lo, hi, lo, hi...].
   * The source first sends what it held before its activation and the copy lacks
   * (the messages its old site consumed after the divergence point), then the log.
   */
  fill?: number[];
  /** Which exchanges binding it travel with it (src/dr/topology.ts; absent: none, as older bridges expect). */
  exchanges?: string;
  /** The copy asks for a snapshot though it has a position (a mirror that found it lacks what a restarted source holds). */
  copy?: boolean;
}

/**
 * Rows per dedup-keys record of a copy (8192): a stream batch's size, 256 KiB, so a window
 * of a million keys goes in 128 batches, none larger than a batch of messages. A bridge
 * refuses a record of more.
 */
export const DR_DEDUP_ROWS = BATCH_BYTES / DEDUP_ROW_BYTES;

/** Ranges a fill request may carry (a copy with more gaps than this starts over with a snapshot). */
export const MAX_FILL_RANGES = 100_000;
/** Queues one bridge's request may name (a secondary copies thousands at most). */
export const MAX_REQUEST_QUEUES = 10_000;

/**
 * declares: queue-declare records of the requested queues that exist (lsn 0).
 * changes: log records in source LSN order, filtered to the queues and modes asked for.
 * snapshot-begin / snapshot / snapshot-end: a copy of `queues` as of source LSN `lsn`: per queue,
 *   its duplicate-detection window first (`dedup-keys` records, to a bridge that says
 *   DrProps.dedupKeys), then its messages (enqueue records).
 * heartbeat: nothing new up to `lsn`.
 * fill-end: the messages a reattached copy lacked (sent as `snapshot`) are all sent, for `queues`.
 * restart: the source restarted and its log goes on after `lsn` (its reservation): nothing of
 *   `queues` was journaled between the copy's position and `lsn`, so they resume from `lsn`.
 *   Messages with ids below `floor` are from before the restart; `held` gives, per mirror, the
 *   ones the source still holds (id ranges), so a mirror drops what the restart lost there
 *   (non-durable messages) and notices what it lacks (then it asks for a copy).
 */
export type DrStreamKind = 'declares' | 'changes' | 'snapshot-begin' | 'snapshot' | 'snapshot-end' | 'heartbeat' | 'fill-end' | 'restart';
const STREAM_KINDS: readonly DrStreamKind[] = ['declares', 'changes', 'snapshot-begin', 'snapshot', 'snapshot-end', 'heartbeat', 'fill-end', 'restart'];

export interface DrStreamMessage {
  kind: DrStreamKind;
  /** Source position covered once this message is applied (0: none, e.g. snapshot content). */
  lsn: number;
  /** Source clock (ms) when the change at `lsn` was made (heartbeat: now). */
  time: number;
  /** Source's newest position it could send (for lag). */
  head: number;
  /** Source clock now. */
  now: number;
  queues?: string[];
  reason?: string;
  entries?: LoggedChange[];
  /** When sending: the records already encoded by the record codec (instead of `entries`). */
  records?: Buffer[];
  /** restart: message ids below this existed before the source's restart. */
  floor?: number;
  /** restart: per mirror queue, the ids below `floor` the source holds, as sorted inclusive ranges. */
  held?: Record<string, number[]>;
}

/**
 * The AMQP message: application-properties, then one data section holding the
 * records, each after its u32 length. Written here into one buffer of the exact
 * size: rhea's message.encode copied a batch (up to 256 KiB) three times into
 * zero-filled buffers it grew as it went, which made most of a DR source's
 * garbage while it streamed (profile in bench/RESULTS.md).
 */
export function encodeDrMessage(m: DrStreamMessage): Buffer {
  const props: Record<string, unknown> = { k: m.kind, lsn: m.lsn, time: m.time, head: m.head, now: m.now };
  if (m.queues) props.queues = JSON.stringify(m.queues);
  if (m.reason) props.reason = m.reason;
  if (m.floor !== undefined) props.floor = m.floor;
  if (m.held) props.held = JSON.stringify(m.held);
  const head = applicationPropertiesSection(props);
  const records = m.records ?? (m.entries ?? []).map((e) => encodeChange(e));
  let bodyLength = 0;
  for (const r of records) bodyLength += 4 + r.length;
  const out = Buffer.allocUnsafe(head.length + DATA_SECTION_HEADER + bodyLength);
  let at = head.copy(out, 0);
  at = writeDataSectionHeader(out, at, bodyLength);
  for (const r of records) {
    at = out.writeUInt32BE(r.length, at);
    at += r.copy(out, at);
  }
  return out;
}

export function decodeDrMessage(message: { application_properties?: Record<string, unknown>; body?: unknown }): DrStreamMessage {
  const p = message.application_properties ?? {};
  const kind = p.k as DrStreamKind;
  if (!STREAM_KINDS.includes(kind)) {
    throw new Error(`DR stream: unknown message kind ${safeString(kind)}`);
  }
  const whole = (name: string) => peerWholeNumber(p[name], `DR stream: ${kind}.${name}`);
  const out: DrStreamMessage = { kind, lsn: whole('lsn'), time: whole('time'), head: whole('head'), now: whole('now') };
  if (typeof p.queues === 'string') out.queues = queueNames(parsed(p.queues, 'queues'));
  if (typeof p.reason === 'string') out.reason = p.reason;
  if (p.floor !== undefined) out.floor = whole('floor');
  if (typeof p.held === 'string') out.held = heldRanges(parsed(p.held, 'held'));
  const bytes = bodyBytes(message);
  if (bytes && bytes.length > 0) out.entries = decodeRecordBatch(bytes, 'DR stream');
  return out;
}

export function parseRequest(raw: unknown): DrRequestQueue[] {
  if (typeof raw !== 'string') throw new Error(`link property ${DrProps.queues} is missing: is this a tandem DR bridge?`);
  const list = JSON.parse(raw) as DrRequestQueue[];
  if (!Array.isArray(list)) throw new Error(`link property ${DrProps.queues} must be a JSON list`);
  if (list.length > MAX_REQUEST_QUEUES) throw new Error(`a DR request names ${list.length} queues; at most ${MAX_REQUEST_QUEUES} are taken on one link`);
  // Named twice, a queue was copied twice, and declared twice (a redeclare drops and recreates it).
  const named = new Set<string>();
  for (const q of list) {
    if (typeof q?.queue === 'string' && named.has(q.queue)) throw new Error(`a DR request names queue ${quotePeerValue(q.queue)} twice`);
    if (typeof q?.queue === 'string') named.add(q.queue);
    const epochOk = (q?.epoch === undefined || (Number.isSafeInteger(q.epoch) && q.epoch >= 1)) && (q?.exchanges === undefined || (typeof q.exchanges === 'string' && q.exchanges.length <= 4096));
    if (typeof q?.queue !== 'string' || (q.mode !== 'enqueue-and-dequeue' && q.mode !== 'enqueue-only') || !Number.isSafeInteger(q.from) || q.from < 0 || !epochOk || !fillOk(q.fill) || (q.copy !== undefined && typeof q.copy !== 'boolean')) {
      throw new Error(`bad DR queue request ${quotePeerValue(q)}`);
    }
  }
  return list;
}

/** Characters of a peer's value an error quotes (the error goes back in one frame, and a peer may take 512 bytes). */
const QUOTE_CHARS = 200;

/**
 * A value a peer sent, as JSON, cut to QUOTE_CHARS. Quoted whole, a bad request of
 * 14 KB came back whole in the detach, to a peer that had allowed frames of 512 bytes.
 */
export function quotePeerValue(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? safeString(value);
  } catch {
    // Nested past the stack's depth: what it is, not what it holds.
    text = Object.prototype.toString.call(value);
  }
  return clipPeerText(text);
}

/** Text a peer chose (a queue name), cut to QUOTE_CHARS for an error it is sent back in. */
export function clipPeerText(text: string): string {
  return text.length <= QUOTE_CHARS ? text : `${text.slice(0, QUOTE_CHARS)}... (${text.length} characters)`;
}

/** A property that holds JSON, parsed; refused naming the property. */
function parsed(text: string, name: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`DR stream: ${name} is not JSON`);
  }
}

/**
 * A message's queue names: a list of strings, no more than a request may name (the
 * source only names queues the bridge asked for). Taken as whatever the JSON was, a
 * string was walked a character at a time as queue names, and a map or a number
 * failed far from here, in the bridge, with "m.queues is not iterable".
 */
function queueNames(raw: unknown): string[] {
  if (!Array.isArray(raw) || raw.length > MAX_REQUEST_QUEUES || !raw.every((q) => typeof q === 'string')) {
    throw new Error(`DR stream: queues must be a JSON list of at most ${MAX_REQUEST_QUEUES} queue names`);
  }
  return raw as string[];
}

/** A restart message's held ids: per queue, ranges as fillOk takes them (a secondary counts the ids in each). */
function heldRanges(raw: unknown): Record<string, number[]> {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error('DR stream: held must be a JSON object of id ranges per queue');
  const out: Record<string, number[]> = Object.create(null) as Record<string, number[]>;
  for (const [queue, ranges] of Object.entries(raw)) {
    if (!fillOk(ranges) || (ranges as number[]).some((v, i, all) => i % 2 === 1 && i + 1 < all.length && all[i + 1]! <= v)) {
      throw new Error(`DR stream: held ids of ${JSON.stringify(queue)} are not sorted, separate ranges of at most ${MAX_FILL_RANGES}`);
    }
    out[queue] = ranges as number[];
  }
  return out;
}

/** Sorted, non-overlapping inclusive id ranges, bounded in number. */
function fillOk(fill: unknown): boolean {
  if (fill === undefined) return true;
  if (!Array.isArray(fill) || fill.length % 2 !== 0 || fill.length > 2 * MAX_FILL_RANGES) return false;
  let last = -1;
  for (const v of fill) {
    if (!Number.isSafeInteger(v) || (v as number) < last) return false;
    last = v as number;
  }
  return true;
}

/** The sorted ids as inclusive ranges, or undefined when there are more than MAX_FILL_RANGES. */
export function idRanges(ids: Iterable<number>): number[] | undefined {
  const out: number[] = [];
  for (const id of ids) {
    if (out.length > 0 && out[out.length - 1] === id - 1) out[out.length - 1] = id;
    else {
      if (out.length >= 2 * MAX_FILL_RANGES) return undefined;
      out.push(id, id);
    }
  }
  return out;
}

/** Whether `id` is in the ranges (binary search). */
export function inRanges(ranges: readonly number[], id: number): boolean {
  let lo = 0;
  let hi = ranges.length / 2 - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (id < ranges[2 * mid]!) hi = mid - 1;
    else if (id > ranges[2 * mid + 1]!) lo = mid + 1;
    else return true;
  }
  return false;
}

// The HA replication stream between a primary and its backups, over AMQP.
//
// A backup opens a receiver from REPLICATION_ADDRESS on the primary, saying in
// the link properties who it is and what log position it has. The primary sends
// transfers whose application property `k` says what they carry; `changes`
// transfers hold one or more change records, encoded with the journal's codec.
// The backup accepts a transfer once what it carries is applied (and, for
// durable changes, in its journal): those acceptances are the acknowledgements
// the primary waits for before settling publishers.
import { DATA_SECTION_HEADER, applicationPropertiesSection, bodyBytes, writeDataSectionHeader } from '../peer-link/sections.js';
import { peerWholeNumber } from '../peer-link/peer-values.js';
import { safeString } from '../util/safe-string.js';
import { decodeChange, encodeChangeBatch } from '../store/record-codec.js';
import type { LoggedChange } from '../broker/changes.js';

export const REPLICATION_ADDRESS = '$ha.replication';

/** Link error telling a backup the primary dropped it: it is no longer up to date. */
export const DROPPED = 'tandem:ha:dropped';
/** Link error refusing a backup for a reason retrying cannot fix (an ha-replicate mismatch). */
export const FATAL = 'tandem:ha:fatal';

/** Connection properties a broker sends when it connects to another broker. */
export const Props = {
  haAdmin: 'qpid.ha-admin',
  instance: 'tandem.instance',
  brokerId: 'tandem.broker-id',
  lsn: 'tandem.lsn',
  epoch: 'tandem.epoch',
  replicate: 'tandem.replicate',
  /** The newest change in the backup's journal, even when it cannot resume from it (`lsn` is then 0). */
  journalLsn: 'tandem.journal-lsn',
} as const;

export type StreamKind = 'changes' | 'snapshot-begin' | 'snapshot-end' | 'ready' | 'heartbeat' | 'membership' | 'dr-credentials';

export interface StreamMessage {
  kind: StreamKind;
  /** Primary LSN this message brings the backup to (changes: last record; snapshot-end: the snapshot point). */
  lsn: number;
  epoch?: number;
  /** changes: the records. */
  entries?: LoggedChange[];
  /**
   * changes: the records as the record codec encoded them (when sending: instead of
   * `entries`; when received: beside them, views into the transfer).
   */
  records?: Buffer[];
  /** membership: broker ids of the ready backups. */
  ready?: string[];
  /**
   * dr-credentials: DR source passwords by source, which the journal never holds
   * (src/dr/credentials.ts): a backup keeps them in its own dr-credentials file, so a
   * DR copy goes on after this cluster fails over.
   */
  credentials?: Record<string, string>;
  /** snapshot-begin: why (for the log line). */
  reason?: string;
  /**
   * snapshot-begin: the backup's journal holds changes this primary's log lacks,
   * those after `divergedAfter` up to `divergedThrough`: it keeps them aside.
   */
  divergedAfter?: number;
  divergedThrough?: number;
}

/**
 * Encode as one transfer's payload: an application-properties section
 * (peer-link/sections.ts) then a data section holding the record batch, written straight
 * into one buffer. Going through rhea.message.encode copied every batch once more
 * and, with a body per record, cost a primary sending a large snapshot a sixth of
 * its CPU in allocations and the garbage collections they bring.
 */
export function encodeStreamMessage(m: StreamMessage): Buffer {
  const props: Record<string, unknown> = { k: m.kind, lsn: m.lsn };
  if (m.epoch !== undefined) props.epoch = m.epoch;
  if (m.ready) props.ready = m.ready.join(',');
  if (m.reason) props.reason = m.reason;
  if (m.divergedAfter !== undefined) props['diverged-after'] = m.divergedAfter;
  if (m.divergedThrough !== undefined) props['diverged-through'] = m.divergedThrough;
  if (m.credentials) props.credentials = JSON.stringify(m.credentials);
  const head = applicationPropertiesSection(props);
  const reserve = head.length + DATA_SECTION_HEADER;
  let out: Buffer;
  if (m.records) {
    out = Buffer.allocUnsafe(reserve + m.records.reduce((n, r) => n + 4 + r.length, 0));
    let offset = reserve;
    for (const r of m.records) {
      out.writeUInt32BE(r.length, offset);
      r.copy(out, offset + 4);
      offset += 4 + r.length;
    }
  } else {
    const entries = m.entries ?? [];
    out = encodeChangeBatch(entries, reserve, entries.reduce((n, e) => n + (e.change.kind === 'enqueue' ? e.change.message.bytes.length : 0), 0));
  }
  head.copy(out, 0);
  writeDataSectionHeader(out, head.length, out.length - reserve);
  return out;
}

/** Change records, each length-prefixed (u32), in one buffer: the body of a stream message (HA and DR). */
export function encodeRecordBatch(entries: LoggedChange[] | undefined): Buffer {
  return encodeChangeBatch(entries ?? []);
}

/** Inverse of encodeRecordBatch; `what` names the stream in errors. Each message body is a copy of its own. */
export function decodeRecordBatch(bytes: Buffer, what: string): LoggedChange[] {
  return decodeRecords(bytes, what, true).entries;
}

/**
 * The records of a batch, decoded, and each one's bytes as the sender encoded it.
 * `copyBodies` false: bodies and records are views into `bytes` (no allocation per
 * message: small buffers cost an HA backup a fifth of its CPU while catching up),
 * which then lives as long as any body in it. Only for a buffer nobody reuses (the
 * engine hands over views of fresh socket reads or of the delivery it assembled).
 */
export function decodeRecords(bytes: Buffer, what: string, copyBodies: boolean): { entries: LoggedChange[]; records: Buffer[] } {
  const entries: LoggedChange[] = [];
  const records: Buffer[] = [];
  for (let offset = 0; offset < bytes.length; ) {
    const left = bytes.length - offset - 4;
    if (left < 0) throw new Error(`${what}: a batch of ${bytes.length} bytes ends ${bytes.length - offset} byte(s) after its last record, too few for a record's length (the batch was cut short)`);
    const len = bytes.readUInt32BE(offset);
    if (len > left) throw new Error(`${what}: record ${entries.length + 1} of a batch is said to be ${len} bytes, but ${left} are left (the batch was cut short)`);
    const record = bytes.subarray(offset + 4, offset + 4 + len);
    const r = decodeChange(record, 0, { copyBodies });
    if (r.status !== 'ok') throw new Error(`${what}: undecodable record (${r.status === 'invalid' ? r.reason : 'truncated'})`);
    // Its bytes go into the backup's journal as they are (rememberEncoding), where
    // trailing bytes would make the frame fail its check at the next start.
    if (r.size !== len) throw new Error(`${what}: record ${entries.length + 1} of a batch is said to be ${len} bytes, but its encoding ends after ${r.size}`);
    const e = r.entry as LoggedChange;
    entries.push({ lsn: e.lsn, change: e.change, durable: e.durable });
    records.push(record);
    offset += 4 + len;
  }
  return { entries, records };
}

/** What a backup says of itself when it attaches (the link properties of its attach). */
export interface BackupHelloFields {
  brokerId: string;
  lsn: number;
  /** Undefined: a backup of a version that does not send it. */
  journalLsn: number | undefined;
  epoch: number;
  replicate: string;
}

/**
 * Longest broker id a backup may give (a uuid is 36 characters): it is logged, shown
 * in status and sent to every backup in the comma-joined membership list.
 */
const MAX_BROKER_ID = 256;

/**
 * Read a backup's hello; throws, saying what is wrong, when a field is malformed.
 * Positions and the epoch must be whole numbers (peerWholeNumber): taken with
 * Number(), an LSN of "abc" made the backup's acknowledged position NaN, which no
 * comparison holds back, so the backup was ready at once and every settlement
 * waiting for the backups was released without any acknowledgement.
 */
export function decodeBackupHello(props: Record<string, unknown>): BackupHelloFields {
  const whole = (name: string) => peerWholeNumber(props[name], `replication hello: ${name}`);
  const id = props[Props.brokerId] ?? 'unknown';
  // No commas: membership messages carry the ids joined by them.
  if (typeof id !== 'string' || id === '' || id.length > MAX_BROKER_ID || id.includes(',')) {
    throw new Error(`replication hello: ${Props.brokerId} must be a string of 1 to ${MAX_BROKER_ID} characters without commas`);
  }
  const replicate = props[Props.replicate];
  return {
    brokerId: id,
    lsn: whole(Props.lsn),
    journalLsn: props[Props.journalLsn] === undefined ? undefined : whole(Props.journalLsn),
    epoch: whole(Props.epoch),
    // Anything but a string is a mismatch, said as such.
    replicate: typeof replicate === 'string' ? replicate : '',
  };
}

/** Decode a stream message as the peer link hands it over (its application properties and binary body). */
export function decodeStreamMessage(message: { application_properties?: Record<string, unknown>; body?: unknown }): StreamMessage {
  const p = message.application_properties ?? {};
  const kind = p.k as StreamKind;
  // safeString: a kind that is a map with a `toString` of its own made this label throw a TypeError.
  const whole = (name: string) => peerWholeNumber(p[name], `replication: ${safeString(kind)}.${name}`);
  const out: StreamMessage = { kind, lsn: whole('lsn') };
  if (p.epoch !== undefined) out.epoch = whole('epoch');
  if (typeof p.ready === 'string') out.ready = p.ready === '' ? [] : p.ready.split(',');
  if (typeof p.reason === 'string') out.reason = p.reason;
  if (p['diverged-after'] !== undefined && p['diverged-through'] !== undefined) {
    out.divergedAfter = whole('diverged-after');
    out.divergedThrough = whole('diverged-through');
  }
  if (kind === 'dr-credentials') out.credentials = credentialsOf(p.credentials);
  if (kind === 'changes') {
    const bytes = bodyBytes(message);
    if (!bytes) throw new Error('replication: changes message without a binary body');
    const { entries, records } = decodeRecords(bytes, 'replication', false);
    out.entries = entries;
    out.records = records;
  }
  return out;
}

/**
 * Most DR sources a dr-credentials message may name (a source is a cluster this site
 * copies from: a handful in practice). A backup keeps the map with one write of its
 * credentials file (src/dr/credentials.ts); kept a source at a time, a primary's map
 * of 3,000 held the backup's event loop for 12 s. The bound keeps what one message
 * may make a backup write and redact small whatever the primary sends.
 */
export const MAX_DR_CREDENTIALS = 1000;

/** A dr-credentials message's map: source -> password, strings only (anything else is refused). */
function credentialsOf(value: unknown): Record<string, string> {
  let parsed: unknown;
  try {
    parsed = typeof value === 'string' ? JSON.parse(value) : undefined;
  } catch {
    // Not JSON.parse's message: it quotes the text, which holds passwords.
    throw new Error('replication: dr-credentials message that is not JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('replication: dr-credentials message without a map of credentials');
  const entries = Object.entries(parsed as Record<string, unknown>);
  if (entries.length > MAX_DR_CREDENTIALS) throw new Error(`replication: dr-credentials message naming ${entries.length} sources, more than ${MAX_DR_CREDENTIALS}`);
  const out: Record<string, string> = {};
  for (const [source, password] of entries) {
    if (typeof password !== 'string') throw new Error('replication: dr-credentials message with a password that is not a string');
    out[source] = password;
  }
  return out;
}

// The HA replication stream between a primary and its backups, over AMQP.
//
// A backup opens a receiver from REPLICATION_ADDRESS on the primary, saying in
// the link properties who it is and what log position it has. The primary sends
// transfers whose application property `k` says what they carry; `changes`
// transfers hold one or more change records, encoded with the journal's codec.
// The backup accepts a transfer once what it carries is applied (and, for
// durable changes, in its journal): those acceptances are the acknowledgements
// the primary waits for before settling publishers.
import rhea from 'rhea';
import { decodeChange, encodeChange } from '../store/record-codec.js';
import type { LoggedChange } from '../broker/changes.js';

export const REPLICATION_ADDRESS = '$ha.replication';

/** Connection properties a broker sends when it connects to another broker. */
export const Props = {
  haAdmin: 'qpid.ha-admin',
  instance: 'tandem.instance',
  brokerId: 'tandem.broker-id',
  lsn: 'tandem.lsn',
  epoch: 'tandem.epoch',
  replicate: 'tandem.replicate',
} as const;

export type StreamKind = 'changes' | 'snapshot-begin' | 'snapshot-end' | 'ready' | 'heartbeat' | 'membership';

export interface StreamMessage {
  kind: StreamKind;
  /** Primary LSN this message brings the backup to (changes: last record; snapshot-end: the snapshot point). */
  lsn: number;
  epoch?: number;
  /** changes: the records. */
  entries?: LoggedChange[];
  /** changes, when sending: the records already encoded by the record codec (instead of `entries`). */
  records?: Buffer[];
  /** membership: broker ids of the ready backups. */
  ready?: string[];
  /** snapshot-begin: why (for the log line). */
  reason?: string;
}

/** Encode for rhea's sender.send(bytes, tag, 0). */
export function encodeStreamMessage(m: StreamMessage): Buffer {
  const props: Record<string, unknown> = { k: m.kind, lsn: m.lsn };
  if (m.epoch !== undefined) props.epoch = m.epoch;
  if (m.ready) props.ready = m.ready.join(',');
  if (m.reason) props.reason = m.reason;
  const body = m.records ? lengthPrefixed(m.records) : encodeRecordBatch(m.entries);
  return rhea.message.encode({ application_properties: props, body: rhea.message.data_section(body) }) as Buffer;
}

/** Change records, each length-prefixed (u32), in one buffer: the body of a stream message (HA and DR). */
export function encodeRecordBatch(entries: LoggedChange[] | undefined): Buffer {
  return lengthPrefixed((entries ?? []).map((e) => encodeChange(e)));
}

/** Records already encoded, each after its u32 length, in one buffer (HA and DR). */
export function lengthPrefixed(records: Buffer[]): Buffer {
  const out = Buffer.allocUnsafe(records.reduce((n, r) => n + 4 + r.length, 0));
  let offset = 0;
  for (const r of records) {
    out.writeUInt32BE(r.length, offset);
    r.copy(out, offset + 4);
    offset += 4 + r.length;
  }
  return out;
}

/** The binary body of a stream message as rhea hands it over (data section or buffer). */
export function bodyBytes(message: { body?: unknown }): Buffer | undefined {
  const body = message.body as { content?: unknown } | Buffer | undefined;
  if (Buffer.isBuffer(body)) return body;
  return Buffer.isBuffer((body as { content?: unknown } | undefined)?.content) ? (body as { content: Buffer }).content : undefined;
}

/** Inverse of encodeRecordBatch; `what` names the stream in errors. */
export function decodeRecordBatch(bytes: Buffer, what: string): LoggedChange[] {
  const entries: LoggedChange[] = [];
  for (let offset = 0; offset < bytes.length; ) {
    const len = bytes.readUInt32BE(offset);
    const r = decodeChange(bytes.subarray(offset + 4, offset + 4 + len));
    if (r.status !== 'ok') throw new Error(`${what}: undecodable record (${r.status === 'invalid' ? r.reason : 'truncated'})`);
    const e = r.entry as LoggedChange;
    entries.push({ lsn: e.lsn, change: e.change, durable: e.durable });
    offset += 4 + len;
  }
  return entries;
}

/** Decode a message rhea handed us (fully decoded or lazy). */
export function decodeStreamMessage(message: { application_properties?: Record<string, unknown>; body?: unknown }): StreamMessage {
  const p = message.application_properties ?? {};
  const kind = p.k as StreamKind;
  const out: StreamMessage = { kind, lsn: Number(p.lsn ?? 0) };
  if (p.epoch !== undefined) out.epoch = Number(p.epoch);
  if (typeof p.ready === 'string') out.ready = p.ready === '' ? [] : p.ready.split(',');
  if (typeof p.reason === 'string') out.reason = p.reason;
  if (kind === 'changes') {
    const bytes = bodyBytes(message);
    if (!bytes) throw new Error('replication: changes message without a binary body');
    out.entries = decodeRecordBatch(bytes, 'replication');
  }
  return out;
}

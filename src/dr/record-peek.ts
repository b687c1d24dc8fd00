// Which queue an encoded enqueue or dequeue record is about, read from its bytes
// without decoding it. The DR source filters every change of its window by
// queue; decoding would copy each message body only to encode it again.
//
// The layout is the record codec's (src/store/record-codec.ts): u8 code | u64
// lsn | u8 flags | fields in table order. Enqueue and dequeue both start with the
// queue name (u32 length, little endian, then UTF-8); that is checked against
// the codec's table when this module loads, so a change there cannot go unseen.
import { RECORD_HEADER_BYTES, RECORD_KINDS } from '../store/record-codec.js';

function codeStartingWithQueue(name: 'enqueue' | 'dequeue'): number {
  const kind = RECORD_KINDS.find((k) => k.name === name);
  const first = kind?.fields[0];
  if (!kind || first?.[0] !== 'queue' || first[1] !== 'string') throw new Error(`record-peek: the codec's ${name} record no longer starts with its queue name`);
  return kind.code;
}

const ENQUEUE = codeStartingWithQueue('enqueue');
const DEQUEUE = codeStartingWithQueue('dequeue');

/** The queue of an enqueue or dequeue record; undefined for any other kind (or a record too short to say). */
export function peekQueueChange(record: Buffer): { queue: string; dequeue: boolean } | undefined {
  const code = record[0];
  if (code !== ENQUEUE && code !== DEQUEUE) return undefined;
  const at = RECORD_HEADER_BYTES;
  if (record.length < at + 4) return undefined;
  const length = record.readUInt32LE(at);
  if (record.length < at + 4 + length) return undefined;
  return { queue: record.toString('utf8', at + 4, at + 4 + length), dequeue: code === DEQUEUE };
}

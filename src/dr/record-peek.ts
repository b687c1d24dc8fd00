// Which queue an encoded enqueue or dequeue record is about, read from its bytes
// without decoding it. The DR source filters every change of its window by
// queue; decoding would copy each message body only to encode it again.
//
// The layout is the record codec's (src/store/record-codec.ts): u8 code | u64
// lsn | u8 flags | fields in table order. Enqueue and dequeue both start with the
// queue name (u32 length, little endian, then UTF-8); that is checked against
// the codec's table when this module loads, so a change there cannot go unseen.
import { RECORD_HEADER_BYTES, RECORD_KINDS } from '../store/record-codec.js';

/** The codes of a kind (its current one and any legacy ones: a window may hold records read from an old journal). */
function codesStartingWithQueue(name: 'enqueue' | 'dequeue'): Set<number> {
  const kinds = RECORD_KINDS.filter((k) => k.name === name);
  for (const kind of kinds) {
    const first = kind.fields[0];
    if (first?.[0] !== 'queue' || first[1] !== 'string') throw new Error(`record-peek: the codec's ${name} record (code ${kind.code}) no longer starts with its queue name`);
  }
  if (kinds.length === 0) throw new Error(`record-peek: the codec has no ${name} record`);
  return new Set(kinds.map((k) => k.code));
}

const ENQUEUE = codesStartingWithQueue('enqueue');
const DEQUEUE = codesStartingWithQueue('dequeue');

/** The queue of an enqueue or dequeue record; undefined for any other kind (or a record too short to say). */
export function peekQueueChange(record: Buffer): { queue: string; dequeue: boolean } | undefined {
  const code = record[0]!;
  const dequeue = DEQUEUE.has(code);
  if (!dequeue && !ENQUEUE.has(code)) return undefined;
  const at = RECORD_HEADER_BYTES;
  if (record.length < at + 4) return undefined;
  const length = record.readUInt32LE(at);
  if (record.length < at + 4 + length) return undefined;
  return { queue: record.toString('utf8', at + 4, at + 4 + length), dequeue };
}

// Reads a message's group (queue argument qpid.message-groups, src/broker/message-groups.ts)
// from its encoded bytes: properties.group-id (spec 3.2.4), as the key a queue groups it
// by. Only queues with message groups call it, once per message. Malformed bytes are no
// group, never a throw: the bytes were checked at receipt, but a journal or a peer hands
// them back too. The sections are found and stepped over as the dedup key reader does.
import { encodedValueSize, sectionValueAt } from './message-codec.js';

const PROPERTIES = 0x73;
/** group-id's place in the properties list. */
const GROUP_ID = 10;

/**
 * The latin1 of the group-id's first `maxBytes` bytes (one character per byte, so two ids
 * are one key exactly when those bytes are the same); undefined when the message has none,
 * or it is not a string or symbol, or the bytes do not read.
 */
export function readGroupKey(bytes: Buffer, maxBytes: number): string | undefined {
  try {
    const at = sectionValueAt(bytes, PROPERTIES);
    if (at < 0) return undefined;
    const stop = at + encodedValueSize(bytes, at);
    const list = bytes[at];
    let count: number;
    let pos: number;
    if (list === 0xc0) {
      count = bytes[at + 2]!;
      pos = at + 3;
    } else if (list === 0xd0) {
      count = bytes.readUInt32BE(at + 5);
      pos = at + 9;
    } else return undefined; // 0x45 (an empty list) or not a list: no group-id
    if (count <= GROUP_ID) return undefined;
    // Bounded: ten fields, each within the list (encodedValueSize throws past the bytes).
    for (let i = 0; i < GROUP_ID; i++) {
      pos += encodedValueSize(bytes, pos);
      if (pos >= stop) return undefined;
    }
    const c = bytes[pos]!;
    if (c !== 0xa1 && c !== 0xa3 && c !== 0xb1 && c !== 0xb3) return undefined; // null, or not a string
    const wide = c >= 0xb0;
    if (pos + (wide ? 5 : 2) > stop) return undefined;
    const n = wide ? bytes.readUInt32BE(pos + 1) : bytes[pos + 1]!;
    const from = pos + (wide ? 5 : 2);
    if (n > stop - from) return undefined;
    return bytes.toString('latin1', from, from + Math.min(n, maxBytes));
  } catch {
    return undefined;
  }
}

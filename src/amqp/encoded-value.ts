// The size of one encoded AMQP value (types spec 1.2: a constructor, then its fixed width
// or its size field and that many bytes), read without decoding it, and the refusal of
// bytes that do not read so. The readers of a message's sections step over the values
// they do not want by it.
import { TandemError } from '../broker/errors.js';

/** Bytes that do not read as an AMQP message: the sender's refusal (amqp:invalid-field). */
export class MalformedMessage extends TandemError {
  constructor(detail: string) {
    super('TANDEM_ERR_INVALID_ARGUMENT', `malformed message: ${detail}`);
  }
}

/**
 * Size in bytes of the encoded AMQP value starting at `offset` (constructor included).
 * A described value is a descriptor and then a value, either of which may be
 * described again: those are counted, not recursed into, so a sender's nesting
 * (a message of nothing but 0x00 bytes, say) cannot exhaust the stack.
 */
export function encodedValueSize(buf: Buffer, offset: number): number {
  const start = offset;
  // Values still to skip: a described value's 0x00 turns one into two.
  for (let pending = 1; pending > 0; pending--) {
    while (buf[offset] === 0x00) {
      offset++;
      pending++;
    }
    if (offset >= buf.length) throw new MalformedMessage('truncated value');
    const code = buf[offset++]!;
    let size: number;
    switch (code >> 4) {
      case 0x4: size = 0; break;
      case 0x5: size = 1; break;
      case 0x6: size = 2; break;
      case 0x7: size = 4; break;
      case 0x8: size = 8; break;
      case 0x9: size = 16; break;
      case 0xa: case 0xc: case 0xe:
        if (offset >= buf.length) throw new MalformedMessage('truncated size');
        size = 1 + buf[offset]!;
        break;
      case 0xb: case 0xd: case 0xf:
        if (offset + 4 > buf.length) throw new MalformedMessage('truncated size');
        size = 4 + buf.readUInt32BE(offset);
        break;
      default:
        throw new MalformedMessage(`unknown type code 0x${code.toString(16)}`);
    }
    if (offset + size > buf.length) throw new MalformedMessage('value runs past the end of the message');
    offset += size;
  }
  return offset - start;
}

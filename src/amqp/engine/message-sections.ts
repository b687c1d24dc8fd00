// The sections of an AMQP message (spec 3.2), declared once: a message is a
// sequence of described values, each one of these. checkMessage() lets only such
// a sequence through to a decoder that would otherwise print what it does not
// know (rhea's message decoder writes an unknown section's descriptor, client
// text, with console.warn).
import { Decoder } from './decoder.js';
import { decodeError } from './errors.js';
import type { AmqpValue } from './types.js';

export const MESSAGE_SECTIONS = [
  { name: 'header', code: 0x70, symbol: 'amqp:header:list' },
  { name: 'delivery-annotations', code: 0x71, symbol: 'amqp:delivery-annotations:map' },
  { name: 'message-annotations', code: 0x72, symbol: 'amqp:message-annotations:map' },
  { name: 'properties', code: 0x73, symbol: 'amqp:properties:list' },
  { name: 'application-properties', code: 0x74, symbol: 'amqp:application-properties:map' },
  { name: 'data', code: 0x75, symbol: 'amqp:data:binary' },
  { name: 'amqp-sequence', code: 0x76, symbol: 'amqp:amqp-sequence:list' },
  { name: 'amqp-value', code: 0x77, symbol: 'amqp:amqp-value:*' },
  { name: 'footer', code: 0x78, symbol: 'amqp:footer:map' },
] as const;

const codes = new Set<bigint>(MESSAGE_SECTIONS.map((s) => BigInt(s.code)));
const codeBySymbol = new Map<string, number>(MESSAGE_SECTIONS.map((s) => [s.symbol, s.code]));

/** The longest section symbol, in bytes: a longer descriptor names no section, and is not read. */
export const LONGEST_SECTION_SYMBOL = Math.max(...MESSAGE_SECTIONS.map((s) => s.symbol.length));

/** The code of the section a symbolic descriptor names ("amqp:properties:list": 0x73), or undefined. */
export function sectionCodeOfSymbol(symbol: string): number | undefined {
  return codeBySymbol.get(symbol);
}

/**
 * The code a decoded section descriptor stands for (spec 3.2: a section is described
 * by its code or by its symbol): a ulong as it is, a section's symbol as its code,
 * another symbol as -1 (no section's). Undefined: a descriptor of neither type.
 */
export function sectionCodeOf(descriptor: AmqpValue): number | undefined {
  if (descriptor.type === 'ulong') return Number(descriptor.value);
  if (descriptor.type === 'symbol') return codeBySymbol.get(descriptor.value) ?? -1;
  return undefined;
}

/**
 * Check that `bytes` is a sequence of well-formed message sections (the
 * decoder's bounds on every size, count and depth, and a known section
 * descriptor on each). Throws an AmqpError (amqp:decode-error) otherwise.
 */
export function checkMessage(bytes: Buffer): void {
  const d = new Decoder(bytes);
  while (d.remaining > 0) {
    const at = d.pos;
    const v = d.value();
    if (v.type !== 'described') throw decodeError(`a message section at offset ${at} is a ${v.type}, not a described section`);
    const desc = v.descriptor;
    const known = (desc.type === 'ulong' && codes.has(desc.value)) || (desc.type === 'symbol' && codeBySymbol.has(desc.value));
    if (!known) throw decodeError(`the message section at offset ${at} has a descriptor that is not one of the spec's sections`);
  }
}

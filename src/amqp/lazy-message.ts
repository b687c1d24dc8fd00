// A full decode of a message's sections, for the few places that read every field
// (management requests, the message codec's header and properties). The broker
// itself keeps messages as the bytes they came in; this decodes only on request.
// The engine checks the sections first (engine/message-sections.ts): rhea's message
// decoder, used here as a value reader, is not safe on hostile bytes (an array32 of
// 2^32-1 nulls loops 2^32 times) and prints the descriptor of a section it does not
// know; what the check refuses is an AmqpError (amqp:decode-error).
import rhea from 'rhea';
import { checkMessage } from './engine/message-sections.js';

const rheaDecode = rhea.message.decode as (buffer: Buffer) => Record<string, unknown>;

/** Decode fully (for code that needs every field, e.g. management requests). */
export function decodeMessage(bytes: Buffer): Record<string, unknown> {
  checkMessage(bytes);
  return rheaDecode(bytes);
}

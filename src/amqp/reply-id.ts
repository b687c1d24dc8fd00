// The id a reply carries (AMQP Management, and request-response in general): the
// request's correlation-id, else its message-id, with the AMQP type it arrived in.
// A client may put anything in those fields on the wire, but a message-id may only be
// a ulong, uuid, binary or string (spec 3.2.11-3.2.15), so an id of another type (a
// list, a map, a boolean, a negative long) cannot go into a reply: it is refused here
// rather than found out when the reply is encoded. The id is read as the engine's
// decoder types it, and that typed value is what the reply is encoded with.
import { Decoder } from './engine/decoder.js';
import type { AmqpValue } from './engine/types.js';

/** The types a message-id may have (spec 3.2.11-3.2.15). */
const MESSAGE_ID_TYPES = new Set<AmqpValue['type']>(['ulong', 'uuid', 'binary', 'string']);

const PROPERTIES_CODE = 0x73n;
const PROPERTIES_NAME = 'amqp:properties:list';
/** Positions in the properties list (spec 3.2.4). */
const MESSAGE_ID = 0;
const CORRELATION_ID = 5;

export type ReplyId =
  /** `id` is the typed value for the reply's encoder, or undefined when the request had none. */
  | { ok: true; id: AmqpValue | undefined }
  | { ok: false; reason: string };

/** The id a reply to this encoded request must carry, or why it cannot carry one (the bytes decode: the caller checked). */
export function replyIdOf(bytes: Buffer): ReplyId {
  const properties = propertiesOf(bytes);
  if (!properties) return { ok: true, id: undefined };
  for (const [position, name] of [[CORRELATION_ID, 'correlation-id'], [MESSAGE_ID, 'message-id']] as const) {
    const field = properties[position];
    if (!field || field.type === 'null') continue;
    if (!MESSAGE_ID_TYPES.has(field.type)) {
      return { ok: false, reason: `the request's ${name} is of a type a reply cannot carry (${field.type}); use a ulong, uuid, binary or string` };
    }
    return { ok: true, id: field };
  }
  return { ok: true, id: undefined };
}

function propertiesOf(bytes: Buffer): AmqpValue[] | undefined {
  const d = new Decoder(bytes);
  // Each section takes at least one byte: bounded by the message's size.
  while (d.remaining > 0) {
    const section = d.value();
    if (section.type !== 'described') continue;
    const code = section.descriptor;
    const isProperties = (code.type === 'ulong' && code.value === PROPERTIES_CODE) || (code.type === 'symbol' && code.value === PROPERTIES_NAME);
    if (isProperties) return section.value.type === 'list' ? section.value.value : [];
  }
  return undefined;
}

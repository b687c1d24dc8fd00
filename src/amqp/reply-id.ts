// The id a reply carries (AMQP Management, and request-response in general): the
// request's correlation-id, else its message-id, with the AMQP type it arrived in.
// A client may put anything in those fields on the wire, but a message-id may only be
// a ulong, uuid, binary or string (spec 3.2.11-3.2.15), so an id of another type (a
// list, a map, a boolean, a negative long) cannot go into a reply: it is refused here
// rather than found out when the reply is encoded.
//
// rhea's full decode loses the type (a binary and a uuid are both Buffers, a ulong
// over 2^53 a Buffer too), so the id is read from the sections as rhea's reader types
// them, and the typed value is what the reply is encoded with.
import rhea from 'rhea';

/** rhea's names for the encodings a message-id may have. */
const MESSAGE_ID_ENCODINGS = new Set(['Ulong0', 'SmallUlong', 'Ulong', 'Uuid', 'Vbin8', 'Vbin32', 'Str8', 'Str32']);

const PROPERTIES_CODE = 0x73;
const PROPERTIES_NAME = 'amqp:properties:list';
/** Positions in the properties list (spec 3.2.4). */
const MESSAGE_ID = 0;
const CORRELATION_ID = 5;

interface Typed {
  type: { name: string };
  value: unknown;
  descriptor?: { value: unknown };
}

export type ReplyId =
  /** `id` is a typed value for rhea's encoder, or undefined when the request had none. */
  | { ok: true; id: unknown }
  | { ok: false; reason: string };

/** The id a reply to this encoded request must carry, or why it cannot carry one. */
export function replyIdOf(bytes: Buffer): ReplyId {
  const properties = propertiesOf(bytes);
  if (!properties) return { ok: true, id: undefined };
  for (const [position, name] of [[CORRELATION_ID, 'correlation-id'], [MESSAGE_ID, 'message-id']] as const) {
    const field = properties[position];
    if (!field || field.type.name === 'Null') continue;
    if (!MESSAGE_ID_ENCODINGS.has(field.type.name)) {
      return { ok: false, reason: `the request's ${name} is of a type a reply cannot carry (${field.type.name}); use a ulong, uuid, binary or string` };
    }
    return { ok: true, id: field };
  }
  return { ok: true, id: undefined };
}

function propertiesOf(bytes: Buffer): Typed[] | undefined {
  const { Reader } = rhea.types as unknown as { Reader: new (b: Buffer) => { remaining(): number; read(): Typed } };
  const reader = new Reader(bytes);
  while (reader.remaining() > 0) {
    const section = reader.read();
    const code = section.descriptor?.value;
    if (code === PROPERTIES_CODE || code === PROPERTIES_NAME) return Array.isArray(section.value) ? (section.value as Typed[]) : [];
  }
  return undefined;
}

// rhea decodes every incoming message in full before handing it over, which is
// most of a broker's work for messages it never looks inside. We replace rhea's
// decode with one that keeps the encoded bytes and decodes only when a field is
// read, so code that reads fields (management, our own clients) still works.
import rhea from 'rhea';
import { checkMessage } from './engine/message-sections.js';

const raw = Symbol('tandem.raw');
const decoded = Symbol('tandem.decoded');

const fields = [
  'durable', 'priority', 'ttl', 'first_acquirer', 'delivery_count',
  'delivery_annotations', 'message_annotations',
  'message_id', 'user_id', 'to', 'subject', 'reply_to', 'correlation_id', 'content_type',
  'content_encoding', 'absolute_expiry_time', 'creation_time', 'group_id', 'group_sequence',
  'reply_to_group_id', 'application_properties', 'body', 'footer',
] as const;

interface Lazy {
  [raw]: Buffer;
  [decoded]?: Record<string, unknown>;
}

const originalDecode = rhea.message.decode as (buffer: Buffer) => Record<string, unknown>;

class LazyMessage {
  [raw]: Buffer;
  [decoded]?: Record<string, unknown>;

  constructor(bytes: Buffer) {
    this[raw] = bytes;
  }

  toJSON(): Record<string, unknown> {
    const full = decode(this);
    const o: Record<string, unknown> = {};
    for (const k of Object.keys(full)) if (typeof full[k] !== 'function') o[k] = full[k];
    return o;
  }

  toString(): string {
    return JSON.stringify(this.toJSON());
  }
}

function decode(m: Lazy): Record<string, unknown> {
  return (m[decoded] ??= checkedDecode(m[raw]));
}

/**
 * rhea's decoder is not safe on hostile bytes (an array32 of 2^32-1 nulls in a
 * message annotation loops 2^32 times) and prints the descriptor of a section it
 * does not know: the engine checks the sections first, and throws its AmqpError
 * (amqp:decode-error) for what it refuses.
 */
function checkedDecode(bytes: Buffer): Record<string, unknown> {
  checkMessage(bytes);
  return originalDecode(bytes);
}

for (const field of fields) {
  Object.defineProperty(LazyMessage.prototype, field, {
    enumerable: true,
    get(this: Lazy) {
      return decode(this)[field];
    },
    set(this: Lazy, value: unknown) {
      decode(this)[field] = value;
    },
  });
}

let installed = false;

/** Make rhea hand out lazy messages (idempotent). */
export function installLazyDecode(): void {
  if (installed) return;
  installed = true;
  (rhea.message as unknown as { decode: (b: Buffer) => unknown }).decode = (buffer: Buffer) => new LazyMessage(buffer);
}

/** The encoded bytes of a message rhea handed us, if it is one of ours. */
export function encodedBytes(message: unknown): Buffer | undefined {
  return message instanceof LazyMessage ? message[raw] : undefined;
}

/** Decode fully (for code that needs every field, e.g. management requests). */
export function decodeMessage(bytes: Buffer): Record<string, unknown> {
  return checkedDecode(bytes);
}

// Reads the delivery time a message's sender asked for (JMS 2.0 delivery delay; see
// src/broker/scheduled.ts) from its message-annotations: x-opt-delivery-time, an absolute
// time in ms since the epoch (what qpid-jms sends, as a long; a timestamp is taken too),
// or x-opt-delivery-delay, ms from now (the broker's now where it reads it). With both,
// the time: the broker that takes a delayed message from its sender writes the time
// in beside the delay (heldMessage), so it is read alike wherever the message goes.
// Only the annotations' bytes are looked at; malformed bytes are no time, a value that
// is no integer or lies past MAX_DELIVERY_AHEAD_MS is an `invalid` answer, never a
// throw (checkedDeliveryTime turns that into the sender's refusal).
import { TandemError } from '../broker/errors.js';
import { MAX_DELIVERY_AHEAD_MS, type DeliveryTime, type DeliveryTimeReader } from '../broker/scheduled.js';
import { MapEntries } from './map-entries.js';
import { parseIncoming, sectionValueAt, withMessageAnnotation, type ParsedMessage } from './message-codec.js';

const MESSAGE_ANNOTATIONS = 0x72;
export const DELIVERY_TIME = 'x-opt-delivery-time';
export const DELIVERY_DELAY = 'x-opt-delivery-delay';
const NONE: DeliveryTime = { status: 'none' };
const YEARS = Math.round(MAX_DELIVERY_AHEAD_MS / (365.25 * 24 * 3600 * 1000));

export const readDeliveryTime: DeliveryTimeReader = (bytes, now) => {
  let time: number | string | undefined;
  let delay: number | string | undefined;
  try {
    const at = sectionValueAt(bytes, MESSAGE_ANNOTATIONS);
    // A section that is no well-formed map (a list, a count beyond its bytes) is malformed: no time.
    if (at < 0 || !annotations.start(bytes, at, 'message-annotations')) return NONE;
    while (annotations.next()) {
      const keyAt = annotations.keyAt;
      const size = annotations.valueAt - keyAt;
      if (isSymbol(bytes, keyAt, size, DELIVERY_TIME_BYTES)) time ??= integerAt(bytes, annotations.valueAt);
      else if (isSymbol(bytes, keyAt, size, DELIVERY_DELAY_BYTES)) delay ??= integerAt(bytes, annotations.valueAt);
    }
    // An entry past the map's end, or bytes after its last: malformed, whatever came before.
    if (annotations.problem !== undefined) return NONE;
  } catch {
    return NONE;
  }
  if (time !== undefined) return judged(DELIVERY_TIME, time, typeof time === 'number' ? time - now : 0, now);
  if (delay !== undefined) return judged(DELIVERY_DELAY, delay, typeof delay === 'number' ? delay : 0, now);
  return NONE;
};

/**
 * A held message as the broker keeps it, journals and replicates it: one whose sender
 * asked a delay (x-opt-delivery-delay) gets the time that delay ends at, `heldUntil`, as
 * x-opt-delivery-time in its message-annotations (where the broker may add, AMQP 1.0
 * 3.2.3; the bare message stays the sender's, so its message-id is the same key to a
 * duplicate-detection window). Every later read then finds that time: a restart from the
 * journal, a backup catching up, a DR copy, a commit. Counted again from each, a delay
 * held a message once more for as long as it had waited. A time the sender named (qpid-jms
 * sends its JMSDeliveryTime so) leaves the message as it is. `time`: what
 * checkedDeliveryTime read of it.
 */
export function heldMessage(msg: ParsedMessage, time: DeliveryTime, heldUntil: number): ParsedMessage {
  if (time.status !== 'at' || time.fixed) return msg;
  const bytes = withMessageAnnotation(msg.bytes, DELIVERY_TIME, { type: 'timestamp', value: BigInt(heldUntil) });
  return bytes === msg.bytes ? msg : parseIncoming(bytes);
}

/** The walker of message-annotations maps (one: a walk makes nothing per message). */
const annotations = new MapEntries();

/** A time `ahead` ms from now (a negative one has passed: at once), or why it is refused. */
function judged(name: string, value: number | string, ahead: number, now: number): DeliveryTime {
  if (typeof value === 'string') return { status: 'invalid', reason: `message annotation ${name} is ${value}, not an integer (milliseconds)` };
  if (ahead > MAX_DELIVERY_AHEAD_MS) return { status: 'invalid', reason: `message annotation ${name} (${value}) is more than ${YEARS} years ahead` };
  return { status: 'at', at: now + Math.max(0, ahead), fixed: name === DELIVERY_TIME };
}

/**
 * The delivery time a message a sender just sent asks for, read once for its publish
 * (heldUntilOf gives the time every queue it reaches holds it until; heldMessage keeps
 * a delay as that time); a time that cannot be honoured throws the sender's refusal
 * (amqp:invalid-field).
 */
export function checkedDeliveryTime(bytes: Buffer, now: number): DeliveryTime {
  const time = readDeliveryTime(bytes, now);
  if (time.status === 'invalid') throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `message refused: ${time.reason}`);
  return time;
}

const DELIVERY_TIME_BYTES = Buffer.from(DELIVERY_TIME, 'latin1');
const DELIVERY_DELAY_BYTES = Buffer.from(DELIVERY_DELAY, 'latin1');

/**
 * Whether the key at `at` (`size` bytes: a sym8 or sym32) is the symbol `name`. Compared
 * in place: qpid-jms annotates every message, and a string made of each key cost more
 * than the rest of this read.
 */
function isSymbol(bytes: Buffer, at: number, size: number, name: Buffer): boolean {
  const code = bytes[at];
  const from = code === 0xa3 ? at + 2 : code === 0xb3 ? at + 5 : -1;
  if (from < 0 || at + size - from !== name.length) return false;
  for (let i = 0; i < name.length; i++) if (bytes[from + i] !== name[i]) return false;
  return true;
}

/** The integer value at `at` (any AMQP integer type, or a timestamp), or what else it is, for the refusal; null is undefined (no value). */
function integerAt(bytes: Buffer, at: number): number | string | undefined {
  const code = bytes[at]!;
  switch (code) {
    case 0x40: return undefined;
    case 0x43: case 0x44: return 0;
    case 0x50: case 0x52: case 0x53: return bytes[at + 1]!;
    case 0x51: case 0x54: case 0x55: return bytes.readInt8(at + 1);
    case 0x60: return bytes.readUInt16BE(at + 1);
    case 0x61: return bytes.readInt16BE(at + 1);
    case 0x70: return bytes.readUInt32BE(at + 1);
    case 0x71: return bytes.readInt32BE(at + 1);
    // Past 2^53 a number is not exact, but such a time is far past any bound either way.
    case 0x80: return Number(bytes.readBigUInt64BE(at + 1));
    case 0x81: case 0x83: return Number(bytes.readBigInt64BE(at + 1));
    default: return `of AMQP type 0x${code.toString(16).padStart(2, '0')}`;
  }
}

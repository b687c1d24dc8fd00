// The AMQP 1.0 transaction types (spec part 4) that rhea does not know:
// the coordinator target, declare/discharge bodies, and the declared and
// transactional-state delivery states. rhea hands them to us as raw described
// values; these helpers read and build them.
import rhea from 'rhea';
import { checkValues } from './engine/decoder.js';
import { AmqpError } from './engine/errors.js';
import { encodedValueSize } from './message-codec.js';

export const Descriptor = {
  coordinator: 0x30,
  declare: 0x31,
  discharge: 0x32,
  declared: 0x33,
  transactionalState: 0x34,
  accepted: 0x24,
  rejected: 0x25,
  released: 0x26,
  modified: 0x27,
} as const;

const symbolic: Record<string, number> = {
  'amqp:coordinator:list': Descriptor.coordinator,
  'amqp:declare:list': Descriptor.declare,
  'amqp:discharge:list': Descriptor.discharge,
  'amqp:declared:list': Descriptor.declared,
  'amqp:transactional-state:list': Descriptor.transactionalState,
  'amqp:accepted:list': Descriptor.accepted,
  'amqp:rejected:list': Descriptor.rejected,
  'amqp:released:list': Descriptor.released,
  'amqp:modified:list': Descriptor.modified,
};

interface TypedLike {
  type?: unknown;
  value?: unknown;
  descriptor?: TypedLike;
}

const types = rhea.types as unknown as {
  wrap_ulong(n: number): unknown;
  wrap_binary(b: Buffer): unknown;
  wrap_list(l: unknown[]): unknown;
  wrap_boolean(b: boolean): unknown;
  described(descriptor: unknown, value: unknown): unknown;
};

function plain(v: unknown): unknown {
  return v && typeof v === 'object' && 'type' in (v as object) && 'value' in (v as object) ? (v as TypedLike).value : v;
}

/** The numeric descriptor of a described value, or undefined. */
export function descriptorOf(v: unknown): number | undefined {
  const d = (v as TypedLike | undefined)?.descriptor;
  if (!d) return undefined;
  const raw = plain(d);
  if (typeof raw === 'number') return raw;
  if (typeof raw === 'string') return symbolic[raw];
  if (typeof raw === 'bigint') return Number(raw);
  if (raw && typeof (raw as { toNumber?: () => number }).toNumber === 'function') return (raw as { toNumber(): number }).toNumber();
  return undefined;
}

/** Fields of a described list, unwrapped one level. */
export function fieldsOf(v: unknown): unknown[] {
  const list = plain(v);
  return Array.isArray(list) ? list : [];
}

export function asBuffer(v: unknown): Buffer | undefined {
  const x = plain(v);
  return Buffer.isBuffer(x) ? x : undefined;
}

/** txn-id and inner outcome of a transactional-state, if `state` is one. */
export function readTransactionalState(state: unknown): { txnId: Buffer; outcome: number | undefined } | undefined {
  // On a transfer, rhea has already unwrapped the state to its bare field list,
  // dropping the descriptor. Among delivery states only transactional-state (and
  // declared, which clients never send) starts with a binary: that identifies it.
  if (Array.isArray(state)) {
    return Buffer.isBuffer(state[0]) ? { txnId: state[0], outcome: undefined } : undefined;
  }
  if (descriptorOf(state) !== Descriptor.transactionalState) return undefined;
  const [txn, outcome] = fieldsOf(state);
  const txnId = asBuffer(txn);
  if (!txnId) return undefined;
  return { txnId, outcome: outcome ? descriptorOf(outcome) : undefined };
}

/**
 * The described body of a declare/discharge message. rhea's decoder loses a
 * descriptor nested inside the amqp-value section, so we read it ourselves.
 */
export function readControlBody(bytes: Buffer): { descriptor: number | undefined; fields: unknown[] } {
  let offset = 0;
  while (offset < bytes.length) {
    const isValue = bytes[offset] === 0x00 && bytes[offset + 1] === 0x53 && bytes[offset + 2] === 0x77;
    if (!isValue) {
      offset += encodedValueSize(bytes, offset);
      continue;
    }
    let p = offset + 3;
    if (bytes[p] !== 0x00) return { descriptor: undefined, fields: [] };
    p++;
    let descriptor: number | undefined;
    const dsize = encodedValueSize(bytes, p);
    if (bytes[p] === 0x53) descriptor = bytes[p + 1];
    else if (bytes[p] === 0x80) descriptor = Number(bytes.readBigUInt64BE(p + 1));
    else if (bytes[p] === 0xa3) descriptor = symbolic[bytes.toString('ascii', p + 2, p + 2 + bytes[p + 1])];
    else if (bytes[p] === 0xb3) descriptor = symbolic[bytes.toString('ascii', p + 5, p + 5 + bytes.readUInt32BE(p + 1))];
    p += dsize;
    // rhea's reader is not safe on hostile bytes: the engine's decoder checks them first.
    try {
      checkValues(bytes, p);
    } catch (err) {
      if (err instanceof AmqpError) return { descriptor: undefined, fields: [] };
      throw err;
    }
    const reader = new (rhea.types as unknown as { Reader: new (b: Buffer) => { read(): unknown } }).Reader(bytes.subarray(p));
    return { descriptor, fields: fieldsOf(reader.read()) };
  }
  return { descriptor: undefined, fields: [] };
}

const described = (code: number, fields: unknown[]): unknown => types.described(types.wrap_ulong(code), types.wrap_list(fields));

export function declaredState(txnId: Buffer): unknown {
  return described(Descriptor.declared, [types.wrap_binary(txnId)]);
}

export function transactionalAccepted(txnId: Buffer): unknown {
  return described(Descriptor.transactionalState, [types.wrap_binary(txnId), described(Descriptor.accepted, [])]);
}

/** The coordinator target we attach with, echoing the client's capabilities. */
export function coordinatorTarget(capabilities: unknown): unknown {
  return described(Descriptor.coordinator, capabilities === undefined ? [] : [capabilities]);
}

/** What rhea's outcome dispatch calls this state (see rhea-patches.ts). */
export class TransactionalState {
  static readonly composite_type = 'transactional_state';
  constructor(
    readonly txnId: Buffer,
    readonly outcome: number | undefined,
  ) {}
}

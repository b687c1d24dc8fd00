// The spec's composite types, declared once as tables: the performatives (2.7),
// error (2.8.14), delivery states (3.4), source and target (3.5), transactions
// (4.5) and SASL (5.3). Each field has its type, whether it is mandatory or
// multiple, its default and, for restricted types with a closed set of values,
// those values. composite.ts decodes and checks any of them from these tables.
import type { PrimitiveType } from './types.js';

/**
 * A field's type: a primitive (restricted types are named by what they restrict:
 * handle and sequence-no are `uint`, role is `boolean`...), `fields` (a map keyed
 * by symbols, 2.8.12 and friends), a composite type by name, `requires:X` (any
 * composite that provides archetype X), or `*` (any value).
 */
export type FieldType = PrimitiveType | 'fields' | 'error' | `requires:${Archetype}` | '*';

export type Archetype = 'frame' | 'sasl-frame' | 'delivery-state' | 'outcome' | 'source' | 'target' | 'address' | 'txn-id' | 'global-tx-id';

export interface FieldDef {
  readonly name: string;
  readonly type: FieldType;
  readonly mandatory?: boolean;
  readonly multiple?: boolean;
  readonly default?: unknown;
  /** The values a restricted type allows (settle modes, durability, sasl codes...). */
  readonly choices?: readonly (number | string)[];
  /** Longest a binary may be (delivery-tag: 32 octets, 2.8.7). */
  readonly maxBytes?: number;
}

export interface CompositeDef {
  readonly name: string;
  /** The descriptor code's low word (domain 0x00000000, the spec's own types). */
  readonly code: number;
  /** The descriptor name, e.g. amqp:open:list. */
  readonly symbol: string;
  readonly provides: readonly Archetype[];
  readonly fields: readonly FieldDef[];
}

const capabilities = (name: string): FieldDef => ({ name, type: 'symbol', multiple: true });
const properties: FieldDef = { name: 'properties', type: 'fields' };
/** The fields source and target (3.5.3, 3.5.4) begin with. */
const terminus: readonly FieldDef[] = [
  { name: 'address', type: 'requires:address' },
  { name: 'durable', type: 'uint', default: 0, choices: [0, 1, 2] }, // none, configuration, unsettled-state
  { name: 'expiry-policy', type: 'symbol', default: 'session-end', choices: ['link-detach', 'session-end', 'connection-close', 'never'] },
  { name: 'timeout', type: 'uint', default: 0 },
  { name: 'dynamic', type: 'boolean', default: false },
  { name: 'dynamic-node-properties', type: 'fields' },
];
const SENDER_SETTLE_MODES = [0, 1, 2] as const; // unsettled, settled, mixed
const RECEIVER_SETTLE_MODES = [0, 1] as const; // first, second

export const COMPOSITES: readonly CompositeDef[] = [
  // 2.7 performatives
  {
    name: 'open', code: 0x10, symbol: 'amqp:open:list', provides: ['frame'],
    fields: [
      { name: 'container-id', type: 'string', mandatory: true },
      { name: 'hostname', type: 'string' },
      { name: 'max-frame-size', type: 'uint', default: 4294967295 },
      { name: 'channel-max', type: 'ushort', default: 65535 },
      { name: 'idle-time-out', type: 'uint' },
      { name: 'outgoing-locales', type: 'symbol', multiple: true },
      { name: 'incoming-locales', type: 'symbol', multiple: true },
      capabilities('offered-capabilities'),
      capabilities('desired-capabilities'),
      properties,
    ],
  },
  {
    name: 'begin', code: 0x11, symbol: 'amqp:begin:list', provides: ['frame'],
    fields: [
      { name: 'remote-channel', type: 'ushort' },
      { name: 'next-outgoing-id', type: 'uint', mandatory: true },
      { name: 'incoming-window', type: 'uint', mandatory: true },
      { name: 'outgoing-window', type: 'uint', mandatory: true },
      { name: 'handle-max', type: 'uint', default: 4294967295 },
      capabilities('offered-capabilities'),
      capabilities('desired-capabilities'),
      properties,
    ],
  },
  {
    name: 'attach', code: 0x12, symbol: 'amqp:attach:list', provides: ['frame'],
    fields: [
      { name: 'name', type: 'string', mandatory: true },
      { name: 'handle', type: 'uint', mandatory: true },
      { name: 'role', type: 'boolean', mandatory: true },
      { name: 'snd-settle-mode', type: 'ubyte', default: 2, choices: SENDER_SETTLE_MODES },
      { name: 'rcv-settle-mode', type: 'ubyte', default: 0, choices: RECEIVER_SETTLE_MODES },
      { name: 'source', type: 'requires:source' },
      { name: 'target', type: 'requires:target' },
      { name: 'unsettled', type: 'map' },
      { name: 'incomplete-unsettled', type: 'boolean', default: false },
      { name: 'initial-delivery-count', type: 'uint' },
      { name: 'max-message-size', type: 'ulong' },
      capabilities('offered-capabilities'),
      capabilities('desired-capabilities'),
      properties,
    ],
  },
  {
    name: 'flow', code: 0x13, symbol: 'amqp:flow:list', provides: ['frame'],
    fields: [
      { name: 'next-incoming-id', type: 'uint' },
      { name: 'incoming-window', type: 'uint', mandatory: true },
      { name: 'next-outgoing-id', type: 'uint', mandatory: true },
      { name: 'outgoing-window', type: 'uint', mandatory: true },
      { name: 'handle', type: 'uint' },
      { name: 'delivery-count', type: 'uint' },
      { name: 'link-credit', type: 'uint' },
      { name: 'available', type: 'uint' },
      { name: 'drain', type: 'boolean', default: false },
      { name: 'echo', type: 'boolean', default: false },
      properties,
    ],
  },
  {
    name: 'transfer', code: 0x14, symbol: 'amqp:transfer:list', provides: ['frame'],
    fields: [
      { name: 'handle', type: 'uint', mandatory: true },
      { name: 'delivery-id', type: 'uint' },
      { name: 'delivery-tag', type: 'binary', maxBytes: 32 },
      { name: 'message-format', type: 'uint' },
      { name: 'settled', type: 'boolean' },
      { name: 'more', type: 'boolean', default: false },
      { name: 'rcv-settle-mode', type: 'ubyte', choices: RECEIVER_SETTLE_MODES },
      { name: 'state', type: 'requires:delivery-state' },
      { name: 'resume', type: 'boolean', default: false },
      { name: 'aborted', type: 'boolean', default: false },
      { name: 'batchable', type: 'boolean', default: false },
    ],
  },
  {
    name: 'disposition', code: 0x15, symbol: 'amqp:disposition:list', provides: ['frame'],
    fields: [
      { name: 'role', type: 'boolean', mandatory: true },
      { name: 'first', type: 'uint', mandatory: true },
      { name: 'last', type: 'uint' },
      { name: 'settled', type: 'boolean', default: false },
      { name: 'state', type: 'requires:delivery-state' },
      { name: 'batchable', type: 'boolean', default: false },
    ],
  },
  {
    name: 'detach', code: 0x16, symbol: 'amqp:detach:list', provides: ['frame'],
    fields: [
      { name: 'handle', type: 'uint', mandatory: true },
      { name: 'closed', type: 'boolean', default: false },
      { name: 'error', type: 'error' },
    ],
  },
  { name: 'end', code: 0x17, symbol: 'amqp:end:list', provides: ['frame'], fields: [{ name: 'error', type: 'error' }] },
  { name: 'close', code: 0x18, symbol: 'amqp:close:list', provides: ['frame'], fields: [{ name: 'error', type: 'error' }] },
  // 2.8.14
  {
    name: 'error', code: 0x1d, symbol: 'amqp:error:list', provides: [],
    fields: [
      { name: 'condition', type: 'symbol', mandatory: true },
      { name: 'description', type: 'string' },
      { name: 'info', type: 'fields' },
    ],
  },
  // 3.4 delivery states
  {
    name: 'received', code: 0x23, symbol: 'amqp:received:list', provides: ['delivery-state'],
    fields: [
      { name: 'section-number', type: 'uint', mandatory: true },
      { name: 'section-offset', type: 'ulong', mandatory: true },
    ],
  },
  { name: 'accepted', code: 0x24, symbol: 'amqp:accepted:list', provides: ['delivery-state', 'outcome'], fields: [] },
  { name: 'rejected', code: 0x25, symbol: 'amqp:rejected:list', provides: ['delivery-state', 'outcome'], fields: [{ name: 'error', type: 'error' }] },
  { name: 'released', code: 0x26, symbol: 'amqp:released:list', provides: ['delivery-state', 'outcome'], fields: [] },
  {
    name: 'modified', code: 0x27, symbol: 'amqp:modified:list', provides: ['delivery-state', 'outcome'],
    fields: [
      { name: 'delivery-failed', type: 'boolean' },
      { name: 'undeliverable-here', type: 'boolean' },
      { name: 'message-annotations', type: 'fields' },
    ],
  },
  // 3.5 terminus
  {
    name: 'source', code: 0x28, symbol: 'amqp:source:list', provides: ['source'],
    fields: [
      ...terminus,
      { name: 'distribution-mode', type: 'symbol' },
      { name: 'filter', type: 'fields' },
      { name: 'default-outcome', type: 'requires:outcome' },
      { name: 'outcomes', type: 'symbol', multiple: true },
      capabilities('capabilities'),
    ],
  },
  {
    name: 'target', code: 0x29, symbol: 'amqp:target:list', provides: ['target'],
    fields: [
      ...terminus,
      capabilities('capabilities'),
    ],
  },
  // 4.5 transactions
  { name: 'coordinator', code: 0x30, symbol: 'amqp:coordinator:list', provides: ['target'], fields: [capabilities('capabilities')] },
  { name: 'declare', code: 0x31, symbol: 'amqp:declare:list', provides: [], fields: [{ name: 'global-id', type: 'requires:global-tx-id' }] },
  {
    name: 'discharge', code: 0x32, symbol: 'amqp:discharge:list', provides: [],
    fields: [
      { name: 'txn-id', type: 'requires:txn-id', mandatory: true },
      { name: 'fail', type: 'boolean' },
    ],
  },
  { name: 'declared', code: 0x33, symbol: 'amqp:declared:list', provides: ['delivery-state', 'outcome'], fields: [{ name: 'txn-id', type: 'requires:txn-id', mandatory: true }] },
  {
    name: 'transactional-state', code: 0x34, symbol: 'amqp:transactional-state:list', provides: ['delivery-state'],
    fields: [
      { name: 'txn-id', type: 'requires:txn-id', mandatory: true },
      { name: 'outcome', type: 'requires:outcome' },
    ],
  },
  // 5.3 SASL
  { name: 'sasl-mechanisms', code: 0x40, symbol: 'amqp:sasl-mechanisms:list', provides: ['sasl-frame'], fields: [{ name: 'sasl-server-mechanisms', type: 'symbol', multiple: true, mandatory: true }] },
  {
    name: 'sasl-init', code: 0x41, symbol: 'amqp:sasl-init:list', provides: ['sasl-frame'],
    fields: [
      { name: 'mechanism', type: 'symbol', mandatory: true },
      { name: 'initial-response', type: 'binary' },
      { name: 'hostname', type: 'string' },
    ],
  },
  { name: 'sasl-challenge', code: 0x42, symbol: 'amqp:sasl-challenge:list', provides: ['sasl-frame'], fields: [{ name: 'challenge', type: 'binary', mandatory: true }] },
  { name: 'sasl-response', code: 0x43, symbol: 'amqp:sasl-response:list', provides: ['sasl-frame'], fields: [{ name: 'response', type: 'binary', mandatory: true }] },
  {
    name: 'sasl-outcome', code: 0x44, symbol: 'amqp:sasl-outcome:list', provides: ['sasl-frame'],
    fields: [
      { name: 'code', type: 'ubyte', mandatory: true, choices: [0, 1, 2, 3, 4] },
      { name: 'additional-data', type: 'binary' },
    ],
  },
];

/**
 * Archetypes some primitive provides (spec: address-string provides address,
 * binary provides txn-id); global-tx-id has no provider in the spec, so any value.
 */
export const PRIMITIVE_PROVIDERS: Readonly<Partial<Record<Archetype, readonly PrimitiveType[] | '*'>>> = {
  address: ['string'],
  'txn-id': ['binary'],
  'global-tx-id': '*',
};

/** By descriptor code: all the spec's codes are below 0x100, so an array indexed by the code. */
const byCode: (CompositeDef | undefined)[] = new Array(256);
for (const c of COMPOSITES) byCode[c.code] = c;
const bySymbol = new Map(COMPOSITES.map((c) => [c.symbol, c]));
const byName = new Map(COMPOSITES.map((c) => [c.name, c]));

export function compositeByCode(code: bigint): CompositeDef | undefined {
  return code < 256n ? byCode[Number(code)] : undefined;
}

/** By a descriptor code that came as a smallulong (one byte). */
export function compositeBySmallCode(code: number): CompositeDef | undefined {
  return byCode[code];
}

export function compositeBySymbol(symbol: string): CompositeDef | undefined {
  return bySymbol.get(symbol);
}

export function composite(name: string): CompositeDef {
  const c = byName.get(name);
  if (!c) throw new Error(`no AMQP composite type named ${name}`);
  return c;
}

// A selector's identifiers read from an encoded AMQP message (selector-fields.ts): the
// JMS header names where qpid-jms keeps them, ids as qpid-jms shows them, application
// properties by type, and bytes that do not read.
import { describe, expect, it } from 'vitest';
import { encode } from '../../../src/amqp/engine/encoder.js';
import { amqp, type AmqpValue } from '../../../src/amqp/engine/types.js';
import { selectorFieldReader } from '../../../src/amqp/selector-fields.js';
import { sourceSelector } from '../../../src/amqp/selector-filter.js';
import type { MessageRecord } from '../../../src/broker/changes.js';
import { TandemError } from '../../../src/broker/errors.js';

const section = (code: number, value: AmqpValue): Buffer => encode({ type: 'described', descriptor: amqp.ulong(code), value });

/** A message of these properties (by field index) and application properties. */
function message(properties: Record<number, AmqpValue>, app: Array<[string, AmqpValue]> = [], record: Partial<MessageRecord> = {}): MessageRecord {
  const fields: AmqpValue[] = [];
  const last = Math.max(-1, ...Object.keys(properties).map(Number));
  for (let i = 0; i <= last; i++) fields.push(properties[i] ?? amqp.null());
  // The header as the record says (a test of a record kept otherwise than sent gives its own bytes).
  const parts = [section(0x70, amqp.list([amqp.boolean(record.durable ?? true)]))];
  if (last >= 0) parts.push(section(0x73, amqp.list(fields)));
  if (app.length > 0) parts.push(section(0x74, amqp.map(app.map(([k, v]) => [amqp.string(k), v]))));
  parts.push(section(0x77, amqp.string('body')));
  return { id: 1, bytes: Buffer.concat(parts), headerLength: parts[0]!.length, durable: true, priority: 4, expiresAt: 0, deliveryCount: 0, subject: undefined, ...record };
}

/** A source's filter holding this selector, as qpid-jms sends it. */
const filter = (value: AmqpValue): Array<[AmqpValue, AmqpValue]> => [[amqp.symbol('jms-selector'), { type: 'described', descriptor: amqp.symbol('apache.org:selector-filter:string'), value }]];

function read(names: string[], msg: MessageRecord): unknown[] {
  return selectorFieldReader(names)(msg);
}

describe('selector fields', () => {
  it('reads application properties by their AMQP type', () => {
    const msg = message({}, [
      ['s', amqp.string('blue')],
      ['i', amqp.int(-3)],
      ['l', amqp.long(1n << 40n)],
      ['u', amqp.ubyte(200)],
      ['d', amqp.double(2.5)],
      ['f', amqp.float(0.5)],
      ['b', amqp.boolean(false)],
      ['bin', amqp.binary(Buffer.from('x'))],
      ['n', amqp.null()],
      ['été', amqp.symbol('sym')],
    ]);
    expect(read(['s', 'i', 'l', 'u', 'd', 'f', 'b', 'bin', 'n', 'missing', 'été'], msg)).toEqual(['blue', -3n, 1n << 40n, 200n, 2.5, 0.5, false, null, null, null, 'sym']);
  });

  it('the first of a repeated key counts', () => {
    expect(read(['k'], message({}, [['k', amqp.int(1)], ['k', amqp.int(2)]]))).toEqual([1n]);
  });

  it('reads the JMS header fields where qpid-jms keeps them', () => {
    const msg = message({ 0: amqp.string('ID:abc:1:1:1-1'), 1: amqp.binary(Buffer.from('alice')), 3: amqp.string('order'), 5: amqp.string('req-7'), 9: amqp.timestamp(1_700_000_000_000n), 10: amqp.string('g1'), 11: amqp.uint(3) }, [], { durable: false, priority: 7 });
    const names = ['JMSMessageID', 'JMSXUserID', 'JMSType', 'JMSCorrelationID', 'JMSTimestamp', 'JMSXGroupID', 'JMSXGroupSeq', 'JMSDeliveryMode', 'JMSPriority'];
    expect(read(names, msg)).toEqual(['ID:abc:1:1:1-1', 'alice', 'order', 'req-7', 1_700_000_000_000n, 'g1', 3n, 'NON_PERSISTENT', 7n]);
    expect(read(['JMSDeliveryMode'], message({}, [], { durable: true }))).toEqual(['PERSISTENT']);
  });

  it("JMSDeliveryMode is the header's durable, as the consumer gets it, not the record's: a DR copy or a moved message is kept durable whatever its sender sent", () => {
    const sent = message({}, [], { durable: false });
    // As the DR bridge (keptCopy) and Broker.moveMessages keep it: durable, the sender's bytes.
    const kept = { ...sent, durable: true };
    expect(read(['JMSDeliveryMode'], kept)).toEqual(['NON_PERSISTENT']);
    expect(sourceSelector(filter(amqp.string("JMSDeliveryMode = 'NON_PERSISTENT'")))!.selects(kept)).toBe(true);
    // No header, or one without durable: the default, not durable.
    const body = section(0x77, amqp.string('body'));
    expect(read(['JMSDeliveryMode'], { ...kept, bytes: body, headerLength: 0 })).toEqual(['NON_PERSISTENT']);
    const nullDurable = Buffer.concat([section(0x70, amqp.list([amqp.null(), amqp.ubyte(4)])), body]);
    expect(read(['JMSDeliveryMode'], { ...kept, bytes: nullDurable, headerLength: nullDurable.length - body.length })).toEqual(['NON_PERSISTENT']);
  });

  it('makes JMS ids of AMQP ids as qpid-jms does', () => {
    const uuid = Buffer.from('0123456789abcdef0123456789abcdef', 'hex');
    const ids: Array<[AmqpValue, string, string]> = [
      [amqp.string('ID:x'), 'ID:x', 'ID:x'],
      [amqp.string('plain'), 'ID:AMQP_NO_PREFIX:plain', 'plain'],
      [amqp.string('ID:AMQP_UUID:y'), 'ID:AMQP_STRING:ID:AMQP_UUID:y', 'ID:AMQP_STRING:ID:AMQP_UUID:y'],
      [amqp.uuid(uuid), 'ID:AMQP_UUID:01234567-89ab-cdef-0123-456789abcdef', 'ID:AMQP_UUID:01234567-89ab-cdef-0123-456789abcdef'],
      [amqp.ulong(42n), 'ID:AMQP_ULONG:42', 'ID:AMQP_ULONG:42'],
      [amqp.binary(Buffer.from([0xca, 0xfe])), 'ID:AMQP_BINARY:CAFE', 'ID:AMQP_BINARY:CAFE'],
    ];
    for (const [id, messageId, correlationId] of ids) {
      expect(read(['JMSMessageID', 'JMSCorrelationID'], message({ 0: id, 5: id }))).toEqual([messageId, correlationId]);
    }
  });

  it('JMSPriority is the header priority as qpid-jms shows it: above 9 is 9', () => {
    for (const [priority, want] of [[0, 0n], [9, 9n], [10, 9n], [200, 9n], [255, 9n]] as const) {
      expect(read(['JMSPriority'], message({}, [], { priority }))).toEqual([want]);
    }
    expect(sourceSelector(filter(amqp.string('JMSPriority = 9')))!.selects(message({}, [], { priority: 200 }))).toBe(true);
  });

  it('reads a property of every AMQP type: integers exact, float and double approximate, char a string, the rest unknown', () => {
    const uuid = Buffer.alloc(16, 7);
    const cases: Array<[AmqpValue, unknown]> = [
      [amqp.byte(-128), -128n],
      [amqp.short(-32768), -32768n],
      [amqp.int(-2147483648), -2147483648n],
      [amqp.long(-(1n << 63n)), -(1n << 63n)],
      [amqp.ubyte(255), 255n],
      [amqp.ushort(65535), 65535n],
      [amqp.uint(4294967295), 4294967295n],
      [amqp.ulong((1n << 64n) - 1n), (1n << 64n) - 1n],
      [amqp.float(1.5), 1.5],
      [amqp.double(-0.25), -0.25],
      [amqp.char(0x1f600), '😀'],
      [amqp.boolean(true), true],
      [amqp.string(''), ''],
      [amqp.symbol('s'), 's'],
      [amqp.timestamp(1_700_000_000_123n), 1_700_000_000_123n],
      [amqp.uuid(uuid), null],
      [amqp.binary(Buffer.from('b')), null],
      [{ type: 'decimal32', value: Buffer.alloc(4) }, null],
      [{ type: 'decimal64', value: Buffer.alloc(8) }, null],
      [{ type: 'decimal128', value: Buffer.alloc(16) }, null],
      [amqp.list([amqp.int(1)]), null],
      [amqp.map([[amqp.string('k'), amqp.int(1)]]), null],
      [amqp.described(amqp.symbol('d'), amqp.string('x')), null],
      [amqp.array('int', [amqp.int(1)]), null],
      [amqp.null(), null],
    ];
    for (const [value, want] of cases) expect(read(['p', 'after'], message({}, [['p', value], ['after', amqp.int(1)]])), JSON.stringify(value, (_, v: unknown) => (typeof v === 'bigint' ? `${v}` : v))).toEqual([want, 1n]);
  });

  it('a hostile property map reads as far as it goes: deep values, non-string keys, many and repeated entries', () => {
    // A list nested 20,000 deep (deeper than the decoder takes) as the value of a named property: unknown, not a throw.
    let deep = Buffer.from([0x45]);
    for (let i = 0; i < 20_000; i++) {
      const head = Buffer.alloc(9);
      head[0] = 0xd0;
      head.writeUInt32BE(deep.length + 4, 1);
      head.writeUInt32BE(1, 5);
      deep = Buffer.concat([head, deep]);
    }
    const key = encode(amqp.string('deep'));
    const others = encode(amqp.string('s'));
    const entries = Buffer.concat([key, deep, others, encode(amqp.string('x'))]);
    const mapHead = Buffer.alloc(9);
    mapHead[0] = 0xd1;
    mapHead.writeUInt32BE(entries.length + 4, 1);
    mapHead.writeUInt32BE(4, 5);
    const appProperties = Buffer.concat([encode({ type: 'described', descriptor: amqp.ulong(0x74), value: amqp.null() }).subarray(0, 3), mapHead, entries]);
    const bytes = Buffer.concat([section(0x70, amqp.list([amqp.boolean(true)])), appProperties, section(0x77, amqp.string('body'))]);
    const msg: MessageRecord = { ...message({}), bytes };
    expect(read(['deep', 's'], msg)).toEqual([null, 'x']);
    expect(sourceSelector(filter(amqp.string("deep IS NULL AND s = 'x'")))!.selects(msg)).toBe(true);

    // Keys of other types than string are passed over; the first of a repeated key counts; 50,000 entries are walked.
    const many: Array<[AmqpValue, AmqpValue]> = [
      [amqp.int(1), amqp.string('int key')],
      [amqp.binary(Buffer.from('k')), amqp.string('binary key')],
      [amqp.list([]), amqp.string('list key')],
      [amqp.null(), amqp.string('null key')],
    ];
    for (let i = 0; i < 50_000; i++) many.push([amqp.string(`k${i % 100}`), amqp.int(i)]);
    many.push([amqp.string('k'), amqp.string('last')]);
    const wide: MessageRecord = { ...message({}), bytes: Buffer.concat([section(0x70, amqp.list([amqp.boolean(true)])), section(0x74, amqp.map(many)), section(0x77, amqp.string('body'))]) };
    expect(read(['k', 'k7', 'missing'], wide)).toEqual(['last', 7n, null]);
  });

  it('a message without properties has null fields', () => {
    expect(read(['JMSMessageID', 'JMSType', 'colour'], message({}))).toEqual([null, null, null]);
  });

  it('bytes that do not read throw (the queue then does not select the message), never loop', () => {
    const good = message({ 3: amqp.string('t') }, [['colour', amqp.string('blue')]]);
    const reader = selectorFieldReader(['JMSType', 'colour']);
    for (let cut = 1; cut < good.bytes.length; cut++) {
      const msg = { ...good, bytes: good.bytes.subarray(0, cut) };
      try {
        const values = reader(msg);
        expect(values).toHaveLength(2);
      } catch (err) {
        expect(err).toBeInstanceOf(Error);
      }
    }
  });
});

describe('the selector filter of a source', () => {

  it('compiles a selector into a predicate over messages', () => {
    const s = sourceSelector(filter(amqp.string("colour = 'blue' AND JMSPriority > 4")))!;
    expect(s.selects(message({}, [['colour', amqp.string('blue')]], { priority: 9 }))).toBe(true);
    expect(s.selects(message({}, [['colour', amqp.string('blue')]], { priority: 4 }))).toBe(false);
    expect(s.selects(message({}, [['colour', amqp.string('red')]], { priority: 9 }))).toBe(false);
  });

  it('takes the descriptor as a code too, and an empty selector as none', () => {
    const byCode: Array<[AmqpValue, AmqpValue]> = [[amqp.symbol('s'), { type: 'described', descriptor: amqp.ulong(0x0000468c00000004n), value: amqp.string('a = 1') }]];
    expect(sourceSelector(byCode)?.selector.text).toBe('a = 1');
    expect(sourceSelector(filter(amqp.string('  ')))).toBeUndefined();
    expect(sourceSelector([])).toBeUndefined();
  });

  it('refuses a bad selector with invalid-field, naming the problem and place', () => {
    for (const [value, text] of [
      [amqp.string("colour = 'blue"), /invalid message selector: a string literal is not closed .*\(at character 10\)/],
      [amqp.int(1), /holds a int; a selector is a string/],
    ] as const) {
      try {
        sourceSelector(filter(value));
        expect.unreachable();
      } catch (err) {
        expect(err).toBeInstanceOf(TandemError);
        expect((err as TandemError).condition).toBe('amqp:invalid-field');
        expect((err as Error).message).toMatch(text);
      }
    }
  });

  it('JMSXDeliveryCount and JMSRedelivered are the delivery count as qpid-jms shows it: the queue entry\'s when given', () => {
    const names = ['JMSXDeliveryCount', 'JMSRedelivered'];
    expect(read(names, message({}))).toEqual([1n, false]);
    expect(read(names, message({}, [], { deliveryCount: 2 }))).toEqual([3n, true]);
    // A queue entry raised since the message arrived: its count, not the record's.
    expect(selectorFieldReader(names)(message({}), 1)).toEqual([2n, true]);
    const again = sourceSelector(filter(amqp.string('JMSXDeliveryCount > 1 AND JMSRedelivered')))!;
    expect(again.selects(message({}))).toBe(false);
    expect(again.selects(message({}), 1)).toBe(true);
    expect(again.selects(message({}, [], { deliveryCount: 1 }))).toBe(true);
    // Not the application properties of those names.
    expect(read(names, message({}, [['JMSXDeliveryCount', amqp.int(7)], ['JMSRedelivered', amqp.boolean(true)]]))).toEqual([1n, false]);
  });

  it('JMSExpiration is properties.absolute-expiry-time, else the expiry the ttl gives, else 0', () => {
    const at = 1_800_000_000_000;
    expect(read(['JMSExpiration'], message({ 8: amqp.timestamp(BigInt(at)) }, [], { expiresAt: at - 5 }))).toEqual([BigInt(at)]);
    expect(read(['JMSExpiration'], message({ 0: amqp.string('id') }, [], { expiresAt: at - 5 }))).toEqual([BigInt(at - 5)]);
    expect(read(['JMSExpiration', 'JMSType'], message({ 3: amqp.string('t') }))).toEqual([0n, 't']);
    const live = sourceSelector(filter(amqp.string(`JMSExpiration = 0 OR JMSExpiration > ${at - 10}`)))!;
    expect(live.selects(message({}, [], { expiresAt: at }))).toBe(true);
    expect(live.selects(message({}, [], { expiresAt: at - 20 }))).toBe(false);
    expect(live.selects(message({}))).toBe(true);
  });
});


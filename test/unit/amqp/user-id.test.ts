// A logged-in sender's messages may carry only its own user-id (spec 3.2.4), read in
// place from each properties section (message-head.ts userIdClaim, incoming-link.ts
// userIdRefusal): every encoding a peer could choose, a second properties section a
// decoder would let win (refused whole by parseIncoming), and the link refusing with
// amqp:unauthorized-access.
import { describe, expect, it } from 'vitest';
import type { Delivery } from '../../../src/amqp/engine/delivery.js';
import type { Link } from '../../../src/amqp/engine/link.js';
import { IncomingLink, userIdRefusal } from '../../../src/amqp/incoming-link.js';
import { describedValueAt, parseIncoming } from '../../../src/amqp/message-codec.js';
import { userIdClaim } from '../../../src/amqp/message-head.js';
import type { SettlementGate } from '../../../src/broker/settlement.js';
import type { Logger } from '../../../src/ops/log.js';
import { CODE, composite, v, type Field } from '../../helpers/amqp-frames.js';
import { newBroker, qs } from '../broker/helpers.js';

const ALICE = Buffer.from('alice');
const body = v.described(CODE.amqpValue, v.string('hello'));
const properties = (messageId: Field, userId: Field, more: Field[] = []): Buffer => composite(CODE.properties, [messageId, userId, ...more]);

/** The claim of the (first) properties section of `bytes`, as the quick read sees it. */
function claim(section: Buffer, user = ALICE): string {
  return userIdClaim(section, describedValueAt(section, 0), section.length, user);
}

function refusal(bytes: Buffer, user = 'alice'): string | undefined {
  return userIdRefusal(bytes, parseIncoming(bytes).propertiesAt, user, Buffer.from(user, 'utf8'));
}

describe('user-id - the quick read of one properties section', () => {
  it('absent: an empty list, a list that ends before it, a null', () => {
    expect(claim(composite(CODE.properties, []))).toBe('absent');
    expect(claim(properties(v.string('id-1'), undefined))).toBe('absent'); // trailing null dropped: a one-field list
    expect(claim(properties(v.string('id-1'), v.null(), [v.string('q')]))).toBe('absent');
    expect(claim(properties(undefined, v.null(), [v.string('q')]))).toBe('absent');
  });

  it('the same bytes, as a binary (or a string or symbol), short or long, after any message-id', () => {
    for (const id of [undefined, v.ulong(7), v.ulong(2 ** 40), v.uuid(Buffer.alloc(16, 1)), v.binary(Buffer.alloc(300)), v.string('x'.repeat(300))]) {
      expect(claim(properties(id, v.binary(ALICE)))).toBe('same');
    }
    expect(claim(properties(undefined, v.string('alice')))).toBe('same');
    expect(claim(properties(undefined, v.symbol('alice')))).toBe('same');
    const long = 'u'.repeat(300);
    expect(claim(properties(undefined, v.binary(Buffer.from(long))), Buffer.from(long))).toBe('same');
    expect(claim(properties(undefined, v.binary(Buffer.from('José'))), Buffer.from('José'))).toBe('same');
  });

  it('another: other bytes, a prefix, a longer name, another type', () => {
    expect(claim(properties(undefined, v.binary(Buffer.from('bob'))))).toBe('other');
    expect(claim(properties(undefined, v.binary(Buffer.from('alic'))))).toBe('other');
    expect(claim(properties(undefined, v.binary(Buffer.from('alice2'))))).toBe('other');
    expect(claim(properties(undefined, v.binary(Buffer.from('Alice'))))).toBe('other');
    expect(claim(properties(undefined, v.binary(Buffer.alloc(0))))).toBe('other');
    expect(claim(properties(undefined, v.uuid(Buffer.alloc(16))))).toBe('other');
    expect(claim(properties(undefined, v.described(v.symbol('x'), v.binary(ALICE))))).toBe('other');
    expect(claim(properties(undefined, v.list([v.binary(ALICE)])))).toBe('other');
  });

  it('irregular (left to the generic decode): not a list, a message-id it does not step over, sizes that do not fit', () => {
    expect(claim(v.described(CODE.properties, v.map([v.string('user-id'), v.binary(ALICE)])))).toBe('irregular');
    expect(claim(properties(v.described(v.symbol('x'), v.string('id')), v.binary(ALICE)))).toBe('irregular');
    expect(claim(properties(v.list([v.uint(1)]), v.binary(ALICE)))).toBe('irregular');
    // A user-id whose size runs past its list.
    const lying = properties(undefined, v.binary(ALICE));
    const cut = Buffer.concat([lying.subarray(0, lying.length - 2)]);
    cut[4] = cut.length - 5; // the list8's size fits what is left, the binary's does not
    expect(claim(cut)).toBe('irregular');
  });
});

describe('user-id - a message held to its sender', () => {
  it('absent, or the sender\'s own: no refusal', () => {
    expect(refusal(body)).toBeUndefined();
    expect(refusal(Buffer.concat([properties(v.string('id'), undefined, [v.string('q')]), body]))).toBeUndefined();
    expect(refusal(Buffer.concat([composite(CODE.header, [v.bool(true)]), properties(v.string('id'), v.binary(ALICE)), body]))).toBeUndefined();
    const jose = Buffer.concat([properties(undefined, v.binary(Buffer.from('José'))), body]);
    expect(refusal(jose, 'José')).toBeUndefined();
  });

  it('another user\'s: refused, naming both, unless the sender may name anyone', () => {
    const r = refusal(Buffer.concat([composite(CODE.header, [v.bool(true)]), properties(v.string('id'), v.binary(Buffer.from('bob'))), body]));
    expect(r).toMatch(/user-id "bob" is not the user this connection logged in as \('alice'\)/);
    const bob = Buffer.concat([properties(undefined, v.binary(Buffer.from('bob'))), body]);
    expect(userIdRefusal(bob, parseIncoming(bob).propertiesAt, 'alice', ALICE, () => true)).toBeUndefined();
    expect(refusal(Buffer.concat([properties(undefined, v.binary(ALICE)), body]), 'José')).toMatch(/"alice" is not .*'José'/);
    expect(refusal(Buffer.concat([properties(undefined, v.uuid(Buffer.alloc(16))), body]))).toMatch(/user-id is a uuid, not a binary/);
    // A long claim is shown cut short.
    expect(refusal(Buffer.concat([properties(undefined, v.binary(Buffer.alloc(1000, 0x62))), body]))!.length).toBeLessThan(300);
  });

  it('a second properties section a decoder would let win is refused before any user-id is looked at, wherever it is', () => {
    const bob = properties(undefined, v.binary(Buffer.from('bob')));
    const own = properties(undefined, v.binary(ALICE));
    const outOfPlace = /malformed message: a properties section out of place/;
    expect(() => refusal(Buffer.concat([own, body, bob]))).toThrow(outOfPlace);
    expect(() => refusal(Buffer.concat([body, bob]))).toThrow(outOfPlace);
    // After an unknown section, and after a value that is no section (rhea warns and reads on).
    expect(() => refusal(Buffer.concat([own, v.described(v.symbol('x:unknown'), v.null()), bob]))).toThrow(outOfPlace);
    expect(() => refusal(Buffer.concat([own, v.string('junk'), bob]))).toThrow(/malformed message: expected a described section/);
    // Described by its symbol, or by the long form of its code.
    const bySymbol = v.described(v.symbol('amqp:properties:list'), v.list([v.null(), v.binary(Buffer.from('bob'))]));
    expect(() => refusal(Buffer.concat([own, body, bySymbol]))).toThrow(outOfPlace);
    const byLongCode = Buffer.concat([Buffer.from([0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, CODE.properties]), v.list([v.null(), v.binary(Buffer.from('bob'))])]);
    expect(() => refusal(Buffer.concat([own, body, byLongCode]))).toThrow(outOfPlace);
    // Even several of one's own, or a later one not a list (which names no user-id to a decoder).
    expect(() => refusal(Buffer.concat([own, body, own]))).toThrow(outOfPlace);
    expect(() => refusal(Buffer.concat([body, v.described(CODE.properties, v.map([v.string('user-id'), v.binary(Buffer.from('bob'))]))]))).toThrow(outOfPlace);
  });

  it('sections the quick read gives up on are decoded: their user-id is held all the same', () => {
    const oddId = v.described(v.symbol('x'), v.string('id'));
    expect(refusal(Buffer.concat([properties(oddId, v.binary(ALICE)), body]))).toBeUndefined();
    expect(refusal(Buffer.concat([properties(oddId, v.binary(Buffer.from('bob'))), body]))).toMatch(/"bob"/);
  });
});

const log = { warn() {}, info() {}, debug() {}, error() {} } as unknown as Logger;
const gate: SettlementGate = { whenSafe: (_lsn, _durable, cb) => cb() };

function sendingLink(identity: string | undefined, admin = () => false) {
  const { broker } = newBroker();
  broker.declareQueue('q', qs());
  const failed: string[] = [];
  const warned: string[] = [];
  const link = new IncomingLink({ flow() {}, credit: 100, session: { connection: { identity } } } as unknown as Link, broker, gate, {
    address: 'q',
    creditWindow: 100,
    maxMessageSize: 1 << 20,
    mayNameAnyone: admin,
    ensureAddress() {},
    onTransactional: () => {},
    onTransactionalRefused: (_txnId, why) => failed.push(why),
  }, { ...log, warn: (_f: unknown, msg: string) => warned.push(msg) } as unknown as Logger);
  return { broker, link, failed, warned };
}

interface Told {
  accepted: number;
  rejected: Array<{ condition: string; description: string }>;
}

function delivery(o: { remoteSettled?: boolean; remoteState?: unknown } = {}): Delivery & Told {
  return {
    remoteSettled: o.remoteSettled ?? false,
    remoteState: o.remoteState,
    accepted: 0,
    rejected: [],
    accept() { this.accepted++; },
    reject(e: { condition: string; description: string }) { this.rejected.push(e); },
  } as unknown as Delivery & Told;
}

const withUserId = (id: string | undefined) => Buffer.concat([properties(v.string('m1'), id === undefined ? undefined : v.binary(Buffer.from(id))), body]);

describe('user-id - the sending link', () => {
  it('a logged-in sender: its own or none accepted, another user\'s rejected with amqp:unauthorized-access (logged), the link stays', () => {
    const { broker, link, warned } = sendingLink('alice');
    const own = delivery();
    link.onMessage(own, withUserId('alice'));
    const none = delivery();
    link.onMessage(none, withUserId(undefined));
    const other = delivery();
    link.onMessage(other, withUserId('bob'));
    expect([own.accepted, none.accepted, other.accepted]).toEqual([1, 1, 0]);
    expect(other.rejected).toEqual([{ condition: 'amqp:unauthorized-access', description: expect.stringMatching(/user-id "bob" is not the user this connection logged in as \('alice'\)/) }]);
    expect(warned).toEqual([expect.stringMatching(/^message refused: its user-id "bob"/)]);
    expect(broker.queue('q').depth).toBe(2);
    const after = delivery();
    link.onMessage(after, withUserId('alice'));
    expect(after.accepted).toBe(1);
  });

  it('a presettled impostor is dropped, and a transactional one fails its transaction', () => {
    const { broker, link, failed } = sendingLink('alice');
    const settled = delivery({ remoteSettled: true });
    link.onMessage(settled, withUserId('bob'));
    expect(settled.rejected).toEqual([]);
    const txn = delivery({ remoteState: { def: { name: 'transactional-state' }, fields: { 'txn-id': Buffer.from('t1') } } });
    link.onMessage(txn, withUserId('bob'));
    expect(txn.rejected.map((r) => r.condition)).toEqual(['amqp:unauthorized-access']);
    expect(failed).toEqual([expect.stringMatching(/"bob"/)]);
    expect(broker.queue('q').depth).toBe(0);
  });

  it('an admin may send in any user\'s name (with auth=no every connection is one); asked at each message', () => {
    let admin = true;
    const { broker, link } = sendingLink('alice', () => admin);
    const d = delivery();
    link.onMessage(d, withUserId('bob'));
    expect(d.accepted).toBe(1);
    admin = false; // the users file no longer makes alice an admin
    const after = delivery();
    link.onMessage(after, withUserId('bob'));
    expect(after.rejected.map((r) => r.condition)).toEqual(['amqp:unauthorized-access']);
    expect(broker.queue('q').depth).toBe(1);
  });

  it('a client that skipped SASL (auth=no only) has no name to be held to; a user named anonymous is held to it', () => {
    const skipped = sendingLink(undefined);
    const d = delivery();
    skipped.link.onMessage(d, withUserId('bob'));
    expect(d.accepted).toBe(1);
    const named = sendingLink('anonymous');
    const e = delivery();
    named.link.onMessage(e, withUserId('bob'));
    expect(e.rejected.map((r) => r.condition)).toEqual(['amqp:unauthorized-access']);
  });
});

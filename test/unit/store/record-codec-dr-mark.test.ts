// An exchange a DR bridge made on its secondary is declared with record code 27 (code
// 3's fields, then the source that made it); every other exchange keeps code 3, so a
// broker of the version before reads all but those declares, and a journal it wrote
// (code 3 only) reads back with every exchange unmarked: the secondary's own.
import { describe, expect, it } from 'vitest';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import type { Change } from '../../../src/broker/changes.js';
import { exchangeSettings } from './helpers.js';

const declare = (madeByDr?: string): Change => ({ kind: 'exchange-declare', name: 'orders.x', type: 'topic', settings: exchangeSettings(madeByDr === undefined ? {} : { madeByDr }) });

describe('record codec - the DR mark of an exchange', () => {
  it('record codec - a marked exchange is code 27 and reads back marked; an unmarked one is code 3, byte for byte as before', () => {
    const marked = encodeChange({ lsn: 5, change: declare('127.0.0.1:5672,127.0.0.1:5673'), durable: true });
    expect(marked[0]).toBe(27);
    expect(decodeChange(marked)).toMatchObject({ status: 'ok', entry: { change: { kind: 'exchange-declare', name: 'orders.x', settings: { madeByDr: '127.0.0.1:5672,127.0.0.1:5673' } } } });
    const plain = encodeChange({ lsn: 6, change: declare(), durable: true });
    expect(plain[0]).toBe(3);
    // Code 3 as the version before wrote it: header (code, LSN 6, durable), name, type
    // (topic), durable, alternate exchange (''), replicate (all: its index + 1; 0 is none given).
    const name = Buffer.from('orders.x');
    const before = Buffer.concat([Buffer.from([3, 6, 0, 0, 0, 0, 0, 0, 0, 1]), u32(name.length), name, Buffer.from([1, 1]), u32(0), Buffer.from([3])]);
    expect(plain).toEqual(before);
    const read = decodeChange(before);
    expect(read.status === 'ok' && read.entry.change.kind === 'exchange-declare' && 'madeByDr' in read.entry.change.settings).toBe(false);
  });

  it('record codec - the mark\'s bytes cut short or lying about their length are incomplete or invalid, never a crash', () => {
    const marked = encodeChange({ lsn: 7, change: declare('site-a'), durable: true });
    const markAt = marked.length - 'site-a'.length - 4 - 1;
    expect(marked[markAt]).toBe(1);
    for (let n = markAt; n < marked.length; n++) expect(decodeChange(Buffer.from(marked.subarray(0, n)))).toEqual({ status: 'incomplete' });
    // A length of 4 GiB - 1 over six bytes: waits for bytes no record has, reads none past the buffer.
    const lying = Buffer.from(marked);
    lying.writeUInt32LE(0xffff_ffff, markAt + 1);
    expect(decodeChange(lying)).toEqual({ status: 'incomplete' });
    // An empty mark names no source: it reads, and no bridge's source is '' (bridge.ts compares).
    const empty = decodeChange(encodeChange({ lsn: 8, change: declare(''), durable: true }));
    expect(empty.status === 'ok' && empty.entry.change.kind === 'exchange-declare' && empty.entry.change.settings.madeByDr).toBe('');
  });
});

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

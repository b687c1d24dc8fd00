// A queue with message groups is declared with record code 24 (code 19's fields, then
// messageGroups); every other queue keeps code 13 or 19, so a broker of the version
// before reads all but the declares that use groups.
import { describe, expect, it } from 'vitest';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { defaultQueueSettings } from '../../../src/broker/settings.js';

describe('record codec - message groups', () => {
  it('record codec - a queue with message groups is code 24 and reads back with them; without, codes 13 and 19 as before', () => {
    const settings = { ...defaultQueueSettings, durable: true };
    const grouped = encodeChange({ lsn: 5, change: { kind: 'queue-declare', name: 'orders', settings: { ...settings, messageGroups: true } }, durable: true });
    expect(grouped[0]).toBe(24);
    expect(decodeChange(grouped)).toMatchObject({ status: 'ok', entry: { change: { kind: 'queue-declare', name: 'orders', settings: { messageGroups: true } } } });
    const both = encodeChange({ lsn: 6, change: { kind: 'queue-declare', name: 'sub:a:s', settings: { ...settings, subscription: 'shared', messageGroups: true } }, durable: true });
    expect(both[0]).toBe(24);
    expect(decodeChange(both)).toMatchObject({ status: 'ok', entry: { change: { settings: { subscription: 'shared', messageGroups: true } } } });
    expect(encodeChange({ lsn: 7, change: { kind: 'queue-declare', name: 'plain', settings }, durable: true })[0]).toBe(13);
    expect(encodeChange({ lsn: 8, change: { kind: 'queue-declare', name: 'plain', settings: { ...settings, subscription: 'unshared' } }, durable: true })[0]).toBe(19);
    const plain = decodeChange(encodeChange({ lsn: 9, change: { kind: 'queue-declare', name: 'plain', settings }, durable: true }));
    expect(plain.status === 'ok' && plain.entry.change.kind === 'queue-declare' && plain.entry.change.settings.messageGroups).toBeUndefined();
  });
});

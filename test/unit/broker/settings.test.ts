// Queue arguments as a management request or the console gives them: every value
// accepted is one the journal can hold, and a name is only ever one of the table's.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AutoDeleteTimers } from '../../../src/broker/auto-delete.js';
import { MAX_DURATION_MS, parseQueueSettings } from '../../../src/broker/settings.js';
import { encodeChange } from '../../../src/store/record-codec.js';
import { newBroker } from './helpers.js';

const DAY_MS = 86_400_000;

describe('queue arguments', () => {
  it('an argument named like an Object method or __proto__ is an unknown argument, not an internal error', () => {
    for (const args of [{ constructor: 1 }, { toString: 'x' }, { hasOwnProperty: true }, JSON.parse('{"__proto__": 5}') as Record<string, unknown>]) {
      expect(() => parseQueueSettings(args)).toThrow(/unknown queue argument/);
    }
  });

  it('counts and durations beyond what a record holds are refused, saying the bound; the largest accepted are journaled', () => {
    expect(() => parseQueueSettings({ 'max-count': 1e20 })).toThrow(/max-count must be a whole number from 0 to 9007199254740991/);
    expect(() => parseQueueSettings({ 'qpid.max_size': '1e300' })).toThrow(/from 0 to/);
    expect(() => parseQueueSettings({ 'auto-delete-delay': '99999999999999999999s' })).toThrow(/at most 100 years/);
    expect(() => parseQueueSettings({ 'default-ttl': 1e306 })).toThrow(/at most 100 years/);
    expect(() => parseQueueSettings({ 'qpid.default_ttl': Number.POSITIVE_INFINITY })).toThrow(/duration/);
    const largest = parseQueueSettings({ 'max-count': Number.MAX_SAFE_INTEGER, 'max-size': String(Number.MAX_SAFE_INTEGER), 'auto-delete-delay': `${MAX_DURATION_MS}ms`, 'default-ttl': MAX_DURATION_MS });
    expect(largest).toMatchObject({ maxCount: Number.MAX_SAFE_INTEGER, autoDeleteDelayMs: MAX_DURATION_MS, defaultTtlMs: MAX_DURATION_MS });
    expect(() => encodeChange({ lsn: 1, durable: true, change: { kind: 'queue-declare', name: 'q', settings: largest } })).not.toThrow();
  });

  it('a size takes a binary unit as tandemd.conf does (16MiB, 64k, 1G); counts do not; a unit past what a record holds is refused', () => {
    expect(parseQueueSettings({ 'max-size': '16MiB' }).maxSize).toBe(16 * 1024 ** 2);
    expect(parseQueueSettings({ 'qpid.max_size': '64k' }).maxSize).toBe(64 * 1024);
    expect(parseQueueSettings({ 'max-size': '1G' }).maxSize).toBe(1024 ** 3);
    expect(parseQueueSettings({ 'max-size': 4096 }).maxSize).toBe(4096);
    expect(() => parseQueueSettings({ 'max-size': '16 TiB' })).toThrow(/max-size must be a size from 0 to 9007199254740991 bytes \(digits, or with a unit: 64KiB, 16MiB, 1GiB\), not "16 TiB"/);
    expect(() => parseQueueSettings({ 'max-size': '0x10k' })).toThrow(/max-size must be a size/);
    expect(() => parseQueueSettings({ 'max-size': '9999999999999999999G' })).toThrow(/max-size must be a size/);
    expect(() => parseQueueSettings({ 'max-count': '16k' })).toThrow(/max-count must be a whole number/);
  });
});

describe('auto-delete delay', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a delay longer than a timer can take (30 days) is waited out, not cut to a millisecond', () => {
    vi.useFakeTimers();
    const { broker } = newBroker();
    const { queue } = broker.declareQueue('idle', parseQueueSettings({ 'auto-delete': true, 'qpid.auto_delete_timeout': 30 * 86_400 }));
    const timers = new AutoDeleteTimers(broker, { debug: () => {}, warn: () => {} });
    timers.schedule(queue);
    vi.advanceTimersByTime(1000);
    expect(broker.queues.has('idle')).toBe(true);
    vi.advanceTimersByTime(29 * DAY_MS - 1000 - 1);
    expect(broker.queues.has('idle')).toBe(true);
    vi.advanceTimersByTime(DAY_MS + 1);
    expect(broker.queues.has('idle')).toBe(false);
  });
});

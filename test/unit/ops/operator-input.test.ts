// Numbers, password files and TLS files from an operator (src/broker/settings.ts,
// src/cli/broker-address.ts, src/ops/password-file.ts, src/ops/tls-file-read.ts): a number
// is digits (a unit where one is documented), never another radix or an exponent; every
// password file is read by one rule; a TLS path that is no TLS file is refused naming its
// key and path, never read until the heap is full.
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseCount, parseQueueSettings } from '../../../src/broker/settings.js';
import { timeoutMsOf } from '../../../src/cli/broker-address.js';
import { readSecretFile } from '../../../src/ops/secret-files.js';
import { passwordOfText } from '../../../src/ops/password-file.js';
import { readLinkTls } from '../../../src/admin/link-tls.js';
import { readCrlFile } from '../../../src/admin/crl.js';
import { listenerContext } from '../../../src/amqp/tls-listener.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-operator-input-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string | Buffer): string {
  const path = join(dir, name);
  writeFileSync(path, content, { mode: 0o600 });
  return path;
}

/** Values Number() reads as a number that no user means as one. */
const NOT_DIGITS = ['0x10', '1e3', ' 5', '5 ', '-0', '', '+5', '0b1', '0o7', '5.0', 'Infinity', '1_000'];

describe('operator input', () => {
  it('operator input - queue counts are digits only: hex, exponent, spaces, signs are refused naming the argument', () => {
    for (const key of ['max-count', 'qpid.max_count', 'max-size', 'qpid.max_size', 'priorities', 'qpid.priorities', 'dedup-window', 'qpid.dedup-window']) {
      // A size also takes a unit (16MiB), and says so.
      const must = key.includes('size') ? 'must be a size .*digits, or with a unit' : 'must be a whole number .*digits only';
      for (const value of NOT_DIGITS) {
        expect(() => parseQueueSettings({ [key]: value }), `${key}=${JSON.stringify(value)}`).toThrow(new RegExp(`${key.replace('.', '\\.')} ${must}.*not ${JSON.stringify(JSON.stringify(value)).slice(1, -1).replace(/[+.]/g, '\\$&')}`));
      }
    }
    expect(parseQueueSettings({ 'max-count': '16', 'max-size': '0010', priorities: '5', 'dedup-window': '100' })).toMatchObject({ maxCount: 16, maxSize: 10, priorities: 5, dedupWindow: 100 });
    // Typed numbers from an AMQP client are numbers already; a double -0 is 0.
    expect(parseQueueSettings({ 'max-count': 16, 'max-size': 10n }).maxCount).toBe(16);
    expect(Object.is(parseCount('count', -0), 0)).toBe(true);
    expect(() => parseCount('count', '0x10')).toThrow(/count must be a whole number/);
  });

  it('operator input - queue durations are digits with a unit: hex, exponent, spaces, signs are refused', () => {
    for (const key of ['auto-delete-delay', 'default-ttl', 'qpid.default_ttl', 'qpid.auto_delete_timeout']) {
      for (const value of [...NOT_DIGITS.filter((v) => v !== '5.0'), ' 5s', '5s ', '0x10s', '1e3ms', '-1s']) {
        expect(() => parseQueueSettings({ [key]: value }), `${key}=${JSON.stringify(value)}`).toThrow(new RegExp(`${key.replace('.', '\\.')} must be a duration`));
      }
    }
    expect(() => parseQueueSettings({ 'dedup-window': '10', 'dedup-ttl': '0x10' })).toThrow(/dedup-ttl must be a duration/);
    expect(parseQueueSettings({ 'auto-delete-delay': '30s', 'default-ttl': '1.5s' })).toMatchObject({ autoDeleteDelayMs: 30_000, defaultTtlMs: 1500 });
    expect(parseQueueSettings({ 'default-ttl': '250', 'qpid.auto_delete_timeout': '2' })).toMatchObject({ defaultTtlMs: 250, autoDeleteDelayMs: 2000 });
  });

  it('operator input - a refusal shows a long value cut short, and a bigint or an object without an internal error', () => {
    expect(() => parseQueueSettings({ 'max-count': 'x'.repeat(100_000) })).toThrow(/not "x{98}"\.\.\.$/);
    expect(() => parseQueueSettings({ durable: 2n })).toThrow(/durable must be true or false, not 2$/);
    expect(() => parseQueueSettings({ policy: 7n })).toThrow(/policy must be 'reject' or 'ring'/);
  });

  it('operator input - --timeout is digits (a decimal point allowed): hex, exponent and spaces are refused', () => {
    for (const value of NOT_DIGITS.filter((v) => v !== '5.0')) {
      expect(() => timeoutMsOf(value, 10), JSON.stringify(value)).toThrow(/--timeout must be a number of seconds/);
    }
    expect(timeoutMsOf('16', 10)).toBe(16_000);
    expect(timeoutMsOf('2.5', 10)).toBe(2500);
    expect(timeoutMsOf(undefined, 10)).toBe(10_000);
  });

  it('operator input - a password file is its first line; more than blank lines after it is refused, as ambiguous', () => {
    expect(passwordOfText('pw 1\n', 'x', 'f')).toBe('pw 1');
    expect(passwordOfText('pw\r\n\n  \n', 'x', 'f')).toBe('pw');
    expect(passwordOfText('pw', 'x', 'f')).toBe('pw');
    expect(() => passwordOfText('\npw\n', '--password-file', 'f')).toThrow('--password-file f is empty: put the password on its first line');
    expect(() => passwordOfText('pw\nsecond\n', '--password-file', 'f')).toThrow(/--password-file f holds more than one line/);
    // ha-password-file and [dr] source-password-file read by the same rule (the broker's refusal is a ConfigError).
    expect(() => readSecretFile(file('two-lines', 'first\nsecond\n'), 'ha-password-file')).toThrow(/ha-password-file .*two-lines holds more than one line/);
    expect(readSecretFile(file('one-line', 'first\n'), 'ha-password-file')).toBe('first');
  });

  it('operator input - TLS files that are a directory, /dev/zero or too large are refused naming the key and the path', () => {
    const sub = join(dir, 'a-dir');
    mkdirSync(sub);
    const big = file('big.pem', '');
    truncateSync(big, 5 * 1024 * 1024);
    const fail = (m: string) => new Error(m);
    const names = { ca: 'ha-tls-ca', cert: 'ha-tls-cert', key: 'ha-tls-key', crl: 'ha-tls-crl' };
    expect(() => readLinkTls({ ca: sub }, names, fail)).toThrow(`ha-tls-ca ${sub} is a directory, not a file`);
    expect(() => readLinkTls({ ca: '/dev/zero' }, names, fail)).toThrow('ha-tls-ca /dev/zero is larger than 4 MiB: is it the right file?');
    expect(() => readLinkTls({ cert: big, key: big }, names, fail)).toThrow(`ha-tls-cert ${big} is larger than 4 MiB`);
    expect(() => readLinkTls({ ca: join(dir, 'missing') }, names, fail)).toThrow(`cannot read ha-tls-ca ${join(dir, 'missing')}: ENOENT`);
    expect(() => readCrlFile('/dev/zero', 'tls-crl', fail)).toThrow('tls-crl /dev/zero is larger than 16 MiB: is it the right file?');
    expect(() => readCrlFile(sub, 'dr-tls-crl', fail)).toThrow(`dr-tls-crl ${sub} is a directory, not a file`);
    expect(() => listenerContext({ cert: '/dev/zero', key: big })).toThrow('tls-cert /dev/zero is larger than 4 MiB');
    expect(() => listenerContext({ cert: sub, key: sub })).toThrow(`tls-cert ${sub} is a directory, not a file`);
    expect(() => listenerContext({ cert: sub, key: sub, ca: '/dev/zero' })).toThrow('tls-ca /dev/zero is larger than 4 MiB');
  });
});

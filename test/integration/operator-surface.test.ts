// The operator's surface on real processes: numbers on the tandem command line, password
// files, what SIGHUP says it did, the "listening on" line of an IPv6 broker, the plaintext
// PLAIN warning's port, and TLS files that are no TLS files.
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { manage, tandem } from '../helpers/tandem-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-operator-surface-'));
let certs: TestCerts;

beforeAll(() => {
  certs = makeCerts();
});

afterAll(async () => {
  await killAllBrokers();
  certs.remove();
  rmSync(dir, { recursive: true, force: true });
});

describe('operator surface', () => {
  it('operator surface - numbers on the tandem command line are digits: 0x10, 1e3, " 5", -0 are refused, exit 2, nothing made', async () => {
    const broker = await TestBroker.start();
    const b = ['-b', broker.url];
    for (const [option, value] of [['--max-count', '0x10'], ['--max-count', '1e3'], ['--max-size', ' 5'], ['--max-count', '-0'], ['--priorities', '0x5'], ['--dedup-window', '1e3'], ['--default-ttl', '0x10'], ['--auto-delete-delay', ' 5s']]) {
      const r = await tandem(['queue', 'add', 'numbers.q', option, value, ...b]);
      expect(r.code, `${option} ${value}`).toBe(2);
      expect(r.stderr, `${option} ${value}`).toMatch(new RegExp(`tandem: (qpid\\.)?${option.slice(2)} must be (a whole number|a size|between|a duration)`));
    }
    await expect(manage(broker.port, 'READ', 'queue', 'numbers.q')).rejects.toThrow(/numbers\.q/);
    const added = await tandem(['queue', 'add', 'numbers.q', '--max-count', '16', '--default-ttl', '10s', ...b]);
    expect(added.code, added.stderr).toBe(0);
    expect(await manage(broker.port, 'READ', 'queue', 'numbers.q')).toMatchObject({ 'max-count': 16 });
    const purge = await tandem(['queue', 'purge', 'numbers.q', '--count', '0x1', ...b]);
    expect(purge.code).toBe(2);
    expect(purge.stderr).toMatch(/count must be a whole number/);
    const set = await tandem(['queue', 'set', 'numbers.q', '--dedup-window', '0x10', ...b]);
    expect(set.code).toBe(2);
    for (const value of ['0x10', '1e3', ' 5']) {
      const list = await tandem(['queue', 'list', ...b, '--timeout', value]);
      expect(list.code, value).toBe(2);
      expect(list.stderr, value).toMatch(/--timeout must be a number of seconds/);
      const sw = await tandem(['dr', 'switchover', '--all', ...b, '--timeout', value]);
      expect(sw.code, value).toBe(2);
      expect(sw.stderr, value).toMatch(/--timeout must be a number of seconds/);
    }
  }, 120_000);

  it('operator surface - a password file is read by its first line everywhere; one with more lines after it is refused (exit 2)', async () => {
    const usersFile = join(dir, 'users');
    const twoLines = join(dir, 'two-lines');
    writeFileSync(twoLines, 'first-line\nsecond-line\n', { mode: 0o600 });
    const added = await tandem(['user', 'add', 'bob', '--password-file', twoLines, '-f', usersFile]);
    expect(added.code).toBe(2);
    expect(added.stderr).toContain(`--password-file ${twoLines} holds more than one line`);
    const piped = await tandem(['user', 'add', 'bob', '--password-file', '-', '-f', usersFile], { input: 'first-line\nsecond-line\n' });
    expect(piped.code).toBe(2);
    expect(piped.stderr).toContain('--password-file standard input holds more than one line');
    const dr = await tandem(['dr', 'add', 'q', '--source', '127.0.0.1:1', '--source-password-file', twoLines, '-b', '127.0.0.1:1']);
    expect(dr.code).toBe(2);
    expect(dr.stderr).toContain(`--source-password-file ${twoLines} holds more than one line`);
    // The broker's own password files, by the same rule.
    await expect(TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile, '--ha-username', 'ha', '--ha-password-file', twoLines] })).rejects.toThrow(
      new RegExp(`exited \\(2\\)[\\s\\S]*ha-password-file ${twoLines} holds more than one line`),
    );
    // A password and its line end (CRLF too) is the password.
    expect((await tandem(['user', 'add', 'bob', '--password-file', '-', '-f', usersFile], { input: 'bob-pw\r\n' })).code).toBe(0);
  }, 120_000);

  it('operator surface - SIGHUP says which TLS files it read, and that there were none without TLS', async () => {
    const plain = await TestBroker.start();
    plain.signal('SIGHUP');
    await waitFor(() => /SIGHUP:/.test(plain.stderr), { name: 'the SIGHUP line' });
    expect(plain.stderr).toMatch(/SIGHUP: no TLS files are configured, nothing to reload/);
    expect(plain.stderr).not.toMatch(/TLS files reloaded/);

    const crl = certs.crl();
    const tls = await TestBroker.start({ args: ['--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca, '--tls-crl', crl, '--tls-require-client-cert', 'yes'] });
    tls.signal('SIGHUP');
    await waitFor(() => /SIGHUP:/.test(tls.stderr), { name: 'the SIGHUP line' });
    // dr-tls-crl is tls-crl while dr-tls-ca is tls-ca (both defaults); ha-tls-crl is in no use without HA.
    expect(tls.stderr).toMatch(/SIGHUP: reloaded tls-cert, tls-key, tls-ca, tls-crl, dr-tls-crl; new TLS handshakes use them/);
  }, 120_000);

  it('operator surface - an IPv6 broker prints [::1]:PORT, which tandem -b takes as it is', async () => {
    const broker = await TestBroker.start({ args: ['--host', '::1', '--metrics-port', '0', '--metrics-host', '::1'] });
    const listening = /listening on (\S+)\n/.exec(broker.stdout)![1];
    expect(listening).toBe(`[::1]:${broker.port}`);
    expect(broker.stdout).toContain(`metrics on http://[::1]:${broker.metricsPort}/metrics`);
    const list = await tandem(['queue', 'list', '-b', listening]);
    expect(list.code, list.stderr).toBe(0);
    // An address the CLI could not reach is named as it was given, brackets kept.
    const refused = await tandem(['queue', 'list', '-b', '[::1]:1']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/cannot connect to \[::1\]:1: /);
  }, 60_000);

  it('operator surface - the plaintext PLAIN warning names the port listened on, not port=0', async () => {
    const usersFile = join(dir, 'users-plain');
    expect((await tandem(['user', 'add', 'admin', '--admin', '--password-file', '-', '-f', usersFile], { input: 'admin-pw\n' })).code).toBe(0);
    const broker = await TestBroker.start({ args: ['--host', '0.0.0.0', '--auth', 'yes', '--users-file', usersFile] });
    await waitFor(() => /broker ready/.test(broker.stderr), { name: 'broker ready' });
    expect(broker.stderr).toContain(`SASL PLAIN is offered on the plaintext port 0.0.0.0:${broker.port}: passwords travel in clear`);
    expect(broker.stderr).not.toMatch(/plaintext port 0\.0\.0\.0:0\b/);
  }, 60_000);

  it('operator surface - a listener tls-cert that is a directory or too large is refused naming the key and the path', async () => {
    const sub = join(dir, 'cert-dir');
    mkdirSync(sub);
    const big = join(dir, 'big.pem');
    writeFileSync(big, '');
    truncateSync(big, 5 * 1024 * 1024);
    for (const [cert, why] of [[sub, 'is a directory, not a file'], [big, 'is larger than 4 MiB']]) {
      await expect(TestBroker.start({ args: ['--tls-port', '0', '--tls-cert', cert, '--tls-key', certs.brokerKey] })).rejects.toThrow(new RegExp(`exited \\(1\\)[\\s\\S]*tandemd: tls-cert ${cert} ${why}`));
    }
  }, 60_000);
});

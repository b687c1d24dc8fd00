// What an operator's file or command line can hold (src/ops/config.ts, secret-files.ts,
// bounded-read.ts): each odd value is refused with the file, the key and what is
// accepted, never taken as something else, and no read runs away with the heap.
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadSettings, readConfigFile } from '../../../src/ops/config.js';
import { readSecretFile } from '../../../src/ops/secret-files.js';
import { readUsers } from '../../../src/admin/users.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-operator-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string | Buffer, mode = 0o600): string {
  const path = join(dir, name);
  writeFileSync(path, content, { mode });
  return path;
}

/** The settings of a config file (auth off and a data dir of its own, so nothing else is checked). */
function settingsOf(text: string): ReturnType<typeof loadSettings> {
  const path = file('tandemd.conf', `auth=no\ndata-dir=${join(dir, 'data')}\n${text}`);
  return loadSettings({}, path);
}

describe('operator files', () => {
  it('operator files - a port is digits only: empty, -0, hex or exponent is refused, not a random or another port', () => {
    for (const value of ['', '-0', '0x10', '1e3', '+5', '0b1', '5.0']) {
      expect(() => settingsOf(`port=${value}\n`), value).toThrow(ConfigError);
      expect(() => settingsOf(`port=${value}\n`), value).toThrow(/tandemd\.conf: port = .* is invalid; expected a port number 0-65535/);
      expect(() => loadSettings({ port: value, dataDir: join(dir, 'data') }), value).toThrow(/command line: port/);
    }
    expect(settingsOf('port=0\n').port).toBe(0);
    expect(settingsOf('port = 05672 \n').port).toBe(5672);
    expect(settingsOf('metrics-port=65535\n').metricsPort).toBe(65535);
    expect(() => settingsOf('metrics-port=65536\n')).toThrow(/metrics-port = "65536" is invalid/);
  });

  it('operator files - ha-min-ready-backups past what ha-brokers-url can hold is refused with the bounds', () => {
    for (const value of ['99999999999999999999999', '64', '1e3', '-1']) {
      expect(() => settingsOf(`ha-min-ready-backups=${value}\n`), value).toThrow(/ha-min-ready-backups = .* is invalid; expected majority or a whole number of backups from 0 \(settle alone\) to 63/);
    }
    expect(settingsOf('ha-min-ready-backups=63\n').haMinReadyBackups).toBe(63);
    expect(settingsOf('ha-min-ready-backups=majority\n').haMinReadyBackups).toBe('majority');
  });

  it('operator files - a listen address that is no address is refused naming the key, not met at listen() as ENOTFOUND', () => {
    for (const [key, value] of [['host', 'not a host'], ['metrics-host', '1.2.3.4.5'], ['console-host', '-bad'], ['host', 'a..b'], ['host', 'x'.repeat(254)]]) {
      expect(() => settingsOf(`${key}=${value}\n`), value).toThrow(new RegExp(`tandemd\\.conf: ${key} = .* is invalid; expected an IP address or a host name`));
    }
    for (const value of ['127.0.0.1', '::1', '::', '0.0.0.0', 'localhost', 'node-1.example.com']) expect(settingsOf(`host=${value}\n`).host, value).toBe(value);
  });

  it('operator files - a __proto__ key or section, which the INI parser drops silently, is refused as unknown', () => {
    expect(() => settingsOf('__proto__=1\n')).toThrow(/unknown key '__proto__'/);
    expect(() => settingsOf('[__proto__]\nport=1\n')).toThrow(/unknown section \[__proto__\]/);
  });

  it('operator files - a config path that is a directory, too large, or not UTF-8 is refused naming the file', () => {
    expect(() => readConfigFile(dir)).toThrow(new ConfigError(`config file ${dir} is a directory, not a file`));
    const big = file('big.conf', '');
    truncateSync(big, 4 * 1024 * 1024 + 1); // sparse: no disk used
    expect(() => readConfigFile(big)).toThrow(/config file .*big\.conf is larger than 4 MiB/);
    const latin1 = file('latin1.conf', Buffer.concat([Buffer.from('port=5672\nha-password=caf'), Buffer.from([0xe9]), Buffer.from('\n')]));
    let message = '';
    try {
      readConfigFile(latin1);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/latin1\.conf is not UTF-8 text \(line 2 holds a byte that is not\)/);
    expect(message).not.toMatch(/caf/); // the line may be a password: it is named, never shown
    expect(() => readConfigFile(join(dir, 'absent.conf'))).toThrow(/config file .*absent\.conf does not exist/);
  });

  it('operator files - a password file too large, a directory or not UTF-8 is refused instead of read whole or mangled', () => {
    const huge = file('huge-password', 'x'.repeat(64 * 1024 + 1));
    expect(() => readSecretFile(huge, 'ha-password-file')).toThrow(/ha-password-file .*huge-password is larger than 64 KiB/);
    const sub = join(dir, 'a-directory');
    mkdirSync(sub);
    expect(() => readSecretFile(sub, 'ha-password-file')).toThrow(/ha-password-file .*a-directory is a directory, not a file/);
    const latin1 = file('latin1-password', Buffer.from([0x70, 0x61, 0xe9, 0x0a]));
    expect(() => readSecretFile(latin1, 'ha-password-file')).toThrow(/is not UTF-8 text \(line 1/);
    expect(readSecretFile(file('good-password', 'pässwörd\r\n\n'), 'ha-password-file')).toBe('pässwörd');
  });


  it('operator files - the users file as tandem user reads it (-f): /dev/zero, a directory or a Latin-1 byte is refused naming it, as the broker refuses them', () => {
    expect(() => readUsers('/dev/zero')).toThrow(/the users file \/dev\/zero is larger than 64 MiB/);
    expect(() => readUsers(dir)).toThrow(/is a directory, not a file/);
    expect(() => readUsers(file('users-latin1', Buffer.from('caf\xe9:user:x\n', 'latin1')))).toThrow(/not UTF-8 text \(line 1/);
  });
});

// readConfigFile (src/ops/config.ts): a key set twice is refused however the INI
// parser lets it be spelled, since the parser silently keeps the last value.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, readConfigFile } from '../../../src/ops/config.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-config-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function read(text: string): Record<string, unknown> {
  const path = join(dir, 'tandemd.conf');
  writeFileSync(path, text);
  return readConfigFile(path);
}

describe('config file', () => {
  it('config file - a key set twice is refused when one of them is quoted, or after a lone carriage return', () => {
    for (const text of ['port=5672\n"port"=5999\n', "port=5672\n'port' = 5999\n", 'port=5672\n[tandemd]\n"port"=5999\n', '[ "tandemd" ]\nport=1\nport = 2\n', 'port=5672\rport=5999\n', '[dr]\nq1=source=a:1\n"q1"=source=b:1\n']) {
      expect(() => read(text), JSON.stringify(text)).toThrow(ConfigError);
      expect(() => read(text), JSON.stringify(text)).toThrow(/is set twice/);
    }
  });

  it('config file - the same key in [dr] and at the top are different keys; one of each is taken', () => {
    expect(read('port=5672\n"host"=127.0.0.1\n')).toEqual({ port: '5672', host: '127.0.0.1' });
    expect(Object.keys(read('port=1\n[dr]\nport=source=a:1\n'))).toEqual(['port', '[dr]']);
  });
});

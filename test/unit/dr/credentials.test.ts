// DR source passwords kept in the data directory (src/dr/credentials.ts). An HA
// backup is handed its primary's whole map at once; kept one source at a time, each
// rewrote and synced the file and rebuilt the redaction pattern, so a thousand
// sources held the backup's event loop for seconds. Kept at once: one write.
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DR_CREDENTIALS_FILE, DrCredentials } from '../../../src/dr/credentials.js';
import { redact } from '../../../src/ops/secrets.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const fresh = () => {
  const d = mkdtempSync(join(tmpdir(), 'tandem-drc-'));
  dirs.push(d);
  return d;
};

describe('DR credentials', () => {
  it('DR credentials - a map of 1,000 sources is kept with one write (one change heard), read back whole, and its passwords redacted', () => {
    const dir = fresh();
    const store = new DrCredentials(dir);
    let changes = 0;
    store.onChange(() => changes++);
    const map = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`dr@site-${i}.example:5672`, `secret-${i}-xyzzy`]));
    store.setAll(map);
    expect(changes).toBe(1);
    expect(statSync(join(dir, DR_CREDENTIALS_FILE)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(join(dir, DR_CREDENTIALS_FILE), 'utf8'))).toEqual(map);
    expect(new DrCredentials(dir).all()).toEqual(map);
    expect(redact('logged secret-999-xyzzy and secret-0-xyzzy')).toBe('logged *** and ***');
    // The same map again changes nothing, so nothing is written or heard.
    store.setAll(map);
    expect(changes).toBe(1);
    // One password changed: written, heard once.
    store.setAll({ ...map, 'dr@site-7.example:5672': 'another-password' });
    expect(changes).toBe(2);
    expect(new DrCredentials(dir).get('dr@site-7.example:5672')).toBe('another-password');
  });
});

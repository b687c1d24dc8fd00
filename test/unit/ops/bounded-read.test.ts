// readBoundedText (src/ops/bounded-read.ts): an operator's file read as UTF-8 text, whole or refused.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readBoundedText } from '../../../src/ops/bounded-read.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-bounded-read-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string | Buffer): string {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
}

describe('bounded read', () => {
  it('bounded read - takes exactly the limit, and a byte order mark is not part of the text', () => {
    expect(readBoundedText(file('exact', 'y'.repeat(100)), 100, 'file')).toHaveLength(100);
    expect(() => readBoundedText(file('over', 'y'.repeat(101)), 100, 'file')).toThrow(/larger than 100 bytes/);
    expect(readBoundedText(file('bom', Buffer.from([0xef, 0xbb, 0xbf, 0x61])), 100, 'file')).toBe('a');
  });

  it('bounded read - the first line that is not UTF-8 is named, whatever its length', () => {
    const bytes = Buffer.concat([Buffer.from('a\n'.repeat(70_000)), Buffer.from([0xc3]), Buffer.from('\nlast\n')]);
    expect(() => readBoundedText(file('late-bad', bytes), 1024 * 1024, 'file')).toThrow(/line 70001 holds a byte/);
  });
});

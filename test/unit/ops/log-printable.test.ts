// Log lines (src/ops/log.ts) with a client's string in them: JSON lines escape it by
// nature; the human-readable form (tandemd on a terminal) prints the message as it is,
// so a newline or an ESC sequence in it must be escaped, not forge a line.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../helpers/broker.js';

const LOG = join(repoRoot, 'dist', 'ops', 'log.js');
const FORGED = "authentication failed: 'x\n[12:00:00.000] INFO: forged entry\u001b[2J\u009b1m' asked";

function logged(pretty: boolean): string {
  const code = `
    import { createRootLogger } from ${JSON.stringify(LOG)};
    const log = createRootLogger('info', ${pretty});
    log.warn({ user: 'a\\nb' }, ${JSON.stringify(FORGED)});
    setTimeout(() => process.exit(0), 300);`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { timeout: 20_000, encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  return r.stderr;
}

describe.skipIf(!existsSync(LOG))('log lines', () => {
  it('log lines - on a terminal a message holding a newline or an ESC sequence stays one entry, escaped', () => {
    const out = logged(true);
    expect(out).not.toMatch(/[\u001b\u009b]/);
    const entries = out.split('\n').filter((l) => /^\[\d\d:\d\d:\d\d\.\d{3}\] [A-Z]+:/.test(l));
    expect(entries).toHaveLength(1);
    expect(entries[0]).toContain("WARN: authentication failed: 'x\\x0a[12:00:00.000] INFO: forged entry\\x1b[2J\\x9b1m' asked");
  });

  it('log lines - JSON lines keep the message exactly, one line', () => {
    const lines = logged(false).trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect((JSON.parse(lines[0]) as { msg: string }).msg).toBe(FORGED);
  });
});

// The tandem CLI with hostile input: a password file that is no password file, and
// what a client chose (its container id) shown in a table. Each gets a clear message and
// the README's exit status; nothing a client sends can forge output on the operator's terminal.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { ErrorCatalogue } from '../../src/broker/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-cli-hostile-'));
afterAll(async () => {
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('cli hostile input', () => {
  it('cli hostile input - --password-file naming a directory or a huge file is a usage error naming the option (exit 2)', async () => {
    const usersFile = join(dir, 'users');
    const huge = join(dir, 'huge');
    // One line of 1 MiB: read whole, it became the password (/dev/zero read gigabytes the same way).
    writeFileSync(huge, 'x'.repeat(1024 * 1024));
    for (const [path, why] of [
      [dir, /--password-file .* is a directory, not a file/],
      [huge, /--password-file .*huge is larger than 64 KiB/],
    ] as const) {
      const r = await tandem(['user', 'add', 'bob', '--password-file', path, '-f', usersFile]);
      expect(r.code, path).toBe(2);
      expect(r.stderr, path).toMatch(why);
    }
    const dr = await tandem(['dr', 'add', 'q', '--source', '127.0.0.1:1', '--source-password-file', huge, '-b', '127.0.0.1:1']);
    expect(dr.code).toBe(2);
    expect(dr.stderr).toMatch(/--source-password-file .*huge is larger than 64 KiB/);
    // An ordinary one still works, from a file and from stdin.
    writeFileSync(join(dir, 'pw'), 's3cret-pw\n');
    expect((await tandem(['user', 'add', 'bob', '--password-file', join(dir, 'pw'), '-f', usersFile])).code).toBe(0);
    expect((await tandem(['user', 'add', 'eve', '--password-file', '-', '-f', usersFile], { input: 'another-pw\n' })).code).toBe(0);
  }, 60_000);

  it('cli hostile input - a container id with a newline and an ESC sequence cannot forge a row of tandem connection list', async () => {
    const broker = await TestBroker.start();
    const client = await TestClient.connect({ port: broker.port, container_id: 'evil\u001b[31mRED\nc99  10.0.0.1:1  root  true  0  forged\u009b' });
    try {
      const r = await waitFor(
        async () => {
          const out = await tandem(['connection', 'list', '-b', `127.0.0.1:${broker.port}`]);
          return out.stdout.includes('evil') ? out : undefined;
        },
        { timeout: 20_000, name: 'the connection in the list' },
      );
      expect(r.code).toBe(0);
      expect(r.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/); // no control but the line ends
      const rows = r.stdout.trimEnd().split('\n');
      expect(rows.filter((l) => l.includes('forged'))).toHaveLength(1);
      expect(rows.find((l) => l.includes('forged'))).toMatch(/^c\d+ .*evil\\x1b\[31mRED\\x0ac99 .* forged\\x9b$/);
      expect(rows.some((l) => l.startsWith('c99'))).toBe(false);
      // --json is for scripts: the id exactly as the client sent it.
      const json = JSON.parse((await tandem(['connection', 'list', '--json', '-b', `127.0.0.1:${broker.port}`])).stdout) as Array<{ container: string }>;
      expect(json.some((c) => c.container === 'evil\u001b[31mRED\nc99  10.0.0.1:1  root  true  0  forged\u009b')).toBe(true);
    } finally {
      client.close();
      await broker.stop();
    }
  }, 60_000);

  it('cli help - tandem --help explains every exit code the README table gives the CLI', async () => {
    const help = (await tandem(['--help'])).stdout.replace(/\s+/g, ' ');
    const listed = /Exit codes: (.*?)\./.exec(help)?.[1] ?? '';
    const codes = new Set(listed.split(', ').map((c) => Number(c.split(' ')[0])));
    for (const [name, entry] of Object.entries(ErrorCatalogue)) expect(codes.has(entry.exitCode), `${name} (exit ${entry.exitCode}) in: ${listed}`).toBe(true);
    expect(codes.has(69)).toBe(true);
  }, 30_000);

  it('cli hostile input - an argument with control characters is shown escaped in the error', async () => {
    const r = await tandem(['user', 'add', 'b\u001b[2Job\nx', '--password', 'pw-1234', '-f', join(dir, 'users2')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("user name 'b\\x1b[2Job\\x0ax'");
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  }, 30_000);
});

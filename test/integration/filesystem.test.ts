// Filesystem trouble under a real tandemd. A full disk: every durable message past the
// point of no space is refused with a clear AMQP error, nothing accepted is lost, and the
// log gets one line per interval, not one per refused message. A read-only data
// directory: the start fails saying so. Needs root for the tmpfs mounts; skipped (saying
// so) elsewhere.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';

let mountDir = '';
let skipReason = '';

beforeAll(() => {
  mountDir = mkdtempSync(join(tmpdir(), 'tandem-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=6m', 'tmpfs', mountDir], { stdio: 'pipe' });
  } catch (err) {
    skipReason = `cannot mount a tmpfs (${(err as Error).message.split('\n')[0]}); run as root to test disk full`;
  }
});

afterAll(async () => {
  await killAllBrokers();
  if (!skipReason) execFileSync('umount', [mountDir]);
  rmdirSync(mountDir);
});

describe('read-only data directory', () => {
  it('read-only - a data directory on a read-only filesystem stops the start with that reason', async (ctx) => {
    if (skipReason) {
      console.warn(`read-only - SKIPPED: ${skipReason}`);
      ctx.skip();
    }
    const ro = mkdtempSync(join(tmpdir(), 'tandem-ro-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', ro]);
    try {
      mkdirSync(join(ro, 'data'));
      execFileSync('mount', ['-o', 'remount,ro', ro]);
      for (const [dir, expected] of [
        [join(ro, 'data'), /the data directory .*\/data cannot be written: .* is on a read-only filesystem/],
        [join(ro, 'new', 'data'), /cannot create the data directory .*\/new\/data: .* is on a read-only filesystem/],
      ] as const) {
        const err = await TestBroker.start({ dataDir: dir }).then(() => undefined, (e: Error) => e);
        expect(err?.message).toMatch(/exited \(1\)/);
        expect(err?.message).toMatch(expected);
        expect(err?.message).not.toMatch(/ENOENT/);
      }
    } finally {
      execFileSync('umount', [ro]);
      rmdirSync(ro);
    }
  });
});

describe('disk full', () => {
  it('disk full - refusals are clear, accepted messages stay, and the log says so once per interval', async (ctx) => {
    if (skipReason) {
      console.warn(`disk full - SKIPPED: ${skipReason}`);
      ctx.skip();
    }
    const broker = await TestBroker.start({ dataDir: join(mountDir, 'data'), args: ['--checkpoint-bytes', '0'] });
    await manage(broker.port, 'CREATE', 'queue', 'full.q', { durable: true });
    const client = await TestClient.connect({ port: broker.port });
    const body = 'x'.repeat(32 * 1024);
    const accepted: string[] = [];
    let refusedCount = 0;
    let condition: string | undefined;
    // Fill the disk, then keep sending: each further message must be refused, not lost or hung.
    for (let batch = 0; batch < 60 && refusedCount < 300; batch++) {
      const msgs = Array.from({ length: 20 }, (_, i) => ({ body, durable: true, message_id: `m-${batch}-${i}` }));
      const outcomes = await client.send('full.q', msgs, { timeoutMs: 30_000 });
      outcomes.forEach((o, i) => {
        if (o.state === 'accepted') accepted.push(msgs[i].message_id);
        else {
          refusedCount++;
          condition = o.error?.condition;
          expect(o.error?.description).toMatch(/no space left for the journal/);
        }
      });
    }
    expect(accepted.length).toBeGreaterThan(0);
    expect(refusedCount).toBeGreaterThanOrEqual(300);
    expect(condition).toBe('amqp:resource-limit-exceeded');
    const lines = broker.stderr.split('\n').filter((l) => l.includes('message refused'));
    // The refusals took a few seconds at most: one line (two if an interval ended meanwhile).
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThanOrEqual(3);
    for (const l of lines) {
      expect(l).toMatch(/"level":40/);
      expect(l).not.toMatch(/"stack"/);
    }
    // Every accepted message is there, once, in order.
    const got = await client.receiveAndAccept('full.q', accepted.length, 30_000);
    expect(got.map((m) => m.message_id)).toEqual(accepted);
    expect(bodyOf(got[0])).toBe(body);
    await client.close();
  });
});

// Filesystem trouble under a real tandemd. A full disk: every durable message past the
// point of no space is refused with a clear AMQP error, nothing accepted is lost, and the
// log gets one line per interval, not one per refused message; a transaction whose commit
// cannot reach the disk is rolled back whole, its acceptances too; on an HA primary, a
// message refused so leaves no duplicate-detection key on the backups, so a resend after
// failover is kept, not answered as a duplicate of nothing. A read-only data
// directory: the start fails saying so. Needs root for the tmpfs mounts; skipped (saying
// so) elsewhere.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { runPython } from '../helpers/python.js';
import { manage, queueDepth } from '../helpers/tandem-cli.js';
import { fillFilesystem, mountTmpfs } from '../helpers/tmpfs.js';

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


describe('disk full under a transaction', () => {
  it('disk full - a commit of acceptances and a send that cannot reach the disk is rolled back whole: the accepted messages are back at once, in order; the send is not; after kill -9 each is there once', async (ctx) => {
    if (skipReason) {
      console.warn(`disk full - SKIPPED: ${skipReason}`);
      ctx.skip();
    }
    // A filesystem of its own: the test above leaves its mount full.
    const fs = mountTmpfs('tandem-txfull-', '6m');
    if ('refused' in fs) throw new Error(fs.refused);
    const { dir } = fs;
    try {
      const dataDir = join(dir, 'data');
      let broker = await TestBroker.start({ dataDir, args: ['--checkpoint-bytes', '0'] });
      const url = () => `amqp://${broker.url}`;
      await manage(broker.port, 'CREATE', 'queue', 'tx.full', { durable: true });
      await runPython('send.py', [url(), 'tx.full', 'm', '3']);
      const ballast = join(dir, 'ballast');
      fillFilesystem(ballast);
      // The commit's record holds a 256 KiB message: it cannot fit in what is left.
      const r = await runPython<{ got: string[]; commit_failed?: boolean }>('tx_receive.py', [url(), 'tx.full', '3', `commit+send=${256 * 1024}`]);
      expect(r).toEqual({ got: ['m-0', 'm-1', 'm-2'], commit_failed: true });
      // Told rollback, so the three are on the queue again, as a rollback leaves them.
      expect(await queueDepth(broker.port, 'tx.full')).toBe(3);
      expect(broker.stderr).toMatch(/transaction commit could not be made durable; rolled back/);
      rmSync(ballast);
      // The journal never got the commit; it may or may not have got the records that
      // gave the messages back (the disk was full): either way each is there once.
      await broker.kill();
      broker = await TestBroker.start({ dataDir, args: ['--checkpoint-bytes', '0'] });
      expect(await runPython<string[]>('drain.py', [url(), 'tx.full'])).toEqual(['m-0', 'm-1', 'm-2']);
      await broker.kill();
    } finally {
      await killAllBrokers();
      fs.unmount();
    }
  });
});

describe('disk full on an HA primary', () => {
  it('disk full - a message with a dedup key refused by a primary whose disk is full leaves no key on its backup: after failover the resend is kept, not taken for a duplicate', async (ctx) => {
    if (skipReason) {
      console.warn(`disk full - SKIPPED: ${skipReason}`);
      ctx.skip();
    }
    const fs = mountTmpfs('tandem-hafull-', '6m');
    if ('refused' in fs) throw new Error(fs.refused);
    const { dir } = fs;
    try {
      // The primary's journal on the small filesystem, the backup's on the ordinary one. With
      // two brokers the promoted one has no backup left: it settles alone (min-ready-backups 0).
      const c = await TestCluster.ready(2, ['--checkpoint-bytes', '0', '--ha-min-ready-backups', '0'], { dataDirs: [join(dir, 'data')] });
      const add = await tandem(['queue', 'add', 'orders', '--durable', '--replicate', 'all', '--dedup-window', '1000', ...c.cliTarget(0)]);
      expect(add.code, add.stderr).toBe(0);
      const client = await TestClient.connect({ port: c.ports[0]! });
      expect((await client.send('orders', [{ body: 'kept', durable: true, message_id: 'kept' }]))[0]!.state).toBe('accepted');
      fillFilesystem(join(dir, 'ballast'));
      // Too big for what is left of the journal's last page: refused, after its record went to the backup.
      const [refused] = await client.send('orders', [{ body: 'x'.repeat(64 * 1024), durable: true, message_id: 'refused' }], { timeoutMs: 30_000 });
      expect(refused!.state).toBe('rejected');
      expect(refused!.error?.description).toMatch(/no space left for the journal/);
      await client.close();
      // The backup has all the primary logged (the refusal's take-back too); then the primary dies.
      await c.backupsCaughtUp(0);
      await c.kill(0);
      expect((await c.promote(1)).code).toBe(0);
      const resender = await TestClient.connect({ port: c.ports[1]! });
      const [resent] = await resender.send('orders', [{ body: 'refused, sent again', durable: true, message_id: 'refused' }], { timeoutMs: 30_000 });
      expect(resent!.state).toBe('accepted');
      const got = await resender.receiveAndAccept('orders', 2, 30_000);
      expect(got.map((m) => m.message_id)).toEqual(['kept', 'refused']);
      expect(bodyOf(got[1])).toBe('refused, sent again');
      await resender.close();
    } finally {
      await killAllBrokers();
      fs.unmount();
    }
  });
});

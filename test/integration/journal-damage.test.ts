// Journal damage that a checkpoint proves, on a real tandemd: a segment cut behind
// the checkpoint's position lost accepted messages, so the broker refuses to start
// (saying what is missing and how to repair) instead of reading it as a torn tail;
// `tandemd --repair` then keeps every record before the cut and says what was lost.
// A flipped byte in one record in the middle: --repair removes that record only.
// The same byte behind a checkpoint (the broker starts: the record is read only when a
// consumer reaches it): that one message is set aside, every other one is delivered.
// A message body holding a journal frame a client forged (CRC-32C is public): a write
// of it torn by a crash is a torn tail, and the forged record is never applied, because
// frames are checked from their segment's secret salt.
import { cpSync, readFileSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';
import { encodeChange } from '../../src/store/record-codec.js';
import { encodeFrame, scanSegment } from '../../src/store/segment.js';

const COUNT = 1000;
const body = (i: number): string => `m${i}:`.padEnd(200, 'x');

/** The newest segment file of a data dir's journal that holds anything. */
function lastSegmentOf(dataDir: string): string {
  const journalDir = path.join(dataDir, 'journal');
  return path.join(journalDir, readdirSync(journalDir).filter((f) => f.endsWith('.seg') && statSync(path.join(journalDir, f)).size > 0).sort().at(-1)!);
}

/** Receive until nothing more comes; bodies in arrival order. */
async function drain(port: number, queue: string): Promise<string[]> {
  const client = await TestClient.connect({ port });
  const r = await client.openReceiver(queue);
  r.receiver.add_credit(COUNT + 10);
  const got: string[] = [];
  for (;;) {
    const batch = await r.drainFor(500);
    if (batch.length === 0) break;
    for (const m of batch) m.delivery.accept();
    got.push(...batch.map((m) => String(bodyOf(m.message))));
  }
  await client.close();
  return got;
}

describe('journal damage behind a checkpoint', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('journal damage - a segment cut at half behind the checkpoint refuses the start; --repair keeps every record before the cut and reports the loss', async () => {
    const first = await TestBroker.start();
    const client = await TestClient.connect({ port: first.port });
    const outcomes = await client.send('cut.q', Array.from({ length: COUNT }, (_, i) => ({ body: body(i), durable: true })), { timeoutMs: 60_000 });
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    await client.close();
    expect(await first.stop()).toBe(0); // a clean stop writes a checkpoint covering every record
    expect(readdirSync(path.join(first.dataDir, 'journal'))).toContain('checkpoint');
    const file = lastSegmentOf(first.dataDir);
    const size = statSync(file).size;
    truncateSync(file, Math.floor(size / 2));

    const refused = await TestBroker.start({ dataDir: first.dataDir }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(refused?.message).toMatch(/exited \(\d+\) before listening/);
    expect(refused?.message).toContain(file);
    expect(refused?.message).toMatch(/the checkpoint proves synced records reached byte \d+: \d+ bytes of accepted records are missing/);
    expect(refused?.message).toContain('tandemd --repair');

    const repaired = await TestBroker.start({ dataDir: first.dataDir, args: ['--repair'] });
    expect(repaired.stderr + repaired.stdout).toMatch(new RegExp(`REPAIR: \\d+ bytes of segment ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} were cut off.*the checkpoint held ${COUNT} live messages at its position, the repaired journal holds \\d+`));
    const got = await drain(repaired.port, 'cut.q');
    // Every message before the cut, in order; the cut ones are gone (and were reported).
    expect(got.length).toBeGreaterThan(COUNT / 4);
    expect(got.length).toBeLessThan(COUNT);
    expect(got).toEqual(Array.from({ length: got.length }, (_, i) => body(i)));
    await repaired.stop();
    repaired.cleanup();
  });

  it('journal damage - --repair on a journal with one bad record in the middle keeps every record after it and reports the one removed', async () => {
    const first = await TestBroker.start({ args: ['--checkpoint-bytes', '0'] });
    const client = await TestClient.connect({ port: first.port });
    const outcomes = await client.send('flip.q', Array.from({ length: 500 }, (_, i) => ({ body: body(i), durable: true })), { timeoutMs: 60_000 });
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    await client.close();
    await first.kill();
    const file = lastSegmentOf(first.dataDir);
    const buf = readFileSync(file);
    const records = scanSegment(buf).records.filter((r) => r.entry.change.kind === 'enqueue');
    expect(records).toHaveLength(500); // one record per message
    const victim = records[Math.floor(records.length / 2)]!;
    buf[victim.offset + victim.size - 2]! ^= 0x40;
    writeFileSync(file, buf);

    const refused = await TestBroker.start({ dataDir: first.dataDir }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(refused?.message).toContain(`journal record at byte offset ${victim.offset} of ${file} is corrupt`);

    const repaired = await TestBroker.start({ dataDir: first.dataDir, args: ['--repair'] });
    const log = repaired.stderr + repaired.stdout;
    expect(log).toMatch(/REPAIR: 1 unreadable range\(s\), \d+ bytes, removed from/);
    expect(log).toContain(`${file}.corrupt`);
    const got = await drain(repaired.port, 'flip.q');
    // 499 messages: all but the damaged one (m250), in order.
    expect(got).toEqual(Array.from({ length: 500 }, (_, i) => body(i)).filter((_, i) => i !== 250));
    await repaired.stop();
    repaired.cleanup();
  });

  it('journal damage - one flipped byte behind a checkpoint sets that message aside; the 499 others are delivered, the consumer stays attached', async () => {
    const first = await TestBroker.start();
    const client = await TestClient.connect({ port: first.port });
    const outcomes = await client.send('aside.q', Array.from({ length: 500 }, (_, i) => ({ body: body(i), durable: true })), { timeoutMs: 60_000 });
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    await client.close();
    expect(await first.stop()).toBe(0); // the checkpoint covers every record: recovery reads none of them
    const file = lastSegmentOf(first.dataDir);
    const buf = readFileSync(file);
    const records = scanSegment(buf).records.filter((r) => r.entry.change.kind === 'enqueue');
    expect(records).toHaveLength(500);
    const victim = records[250]!;
    buf[victim.offset + victim.size - 2]! ^= 0x40;
    writeFileSync(file, buf);

    const broker = await TestBroker.start({ dataDir: first.dataDir });
    const c = await TestClient.connect({ port: broker.port });
    const r = await c.openReceiver('aside.q');
    r.receiver.add_credit(600);
    const got: string[] = [];
    for (let i = 0; i < 40 && got.length < 499; i++) {
      for (const m of await r.drainFor(250)) {
        m.delivery.accept();
        got.push(String(bodyOf(m.message)));
      }
    }
    expect(got).toEqual(Array.from({ length: 500 }, (_, i) => body(i)).filter((_, i) => i !== 250));
    expect(r.closedByPeer).toBe(false);
    const info = (await manage(broker.port, 'READ', 'queue', 'aside.q')) as Record<string, unknown>;
    expect(info).toMatchObject({ depth: 1, unreadable: 1, acquired: 0 });
    expect(broker.stdout + broker.stderr).toMatch(/a message body in the journal is damaged: that message is set aside/);
    // A consumer that comes later is not handed it either, and is not detached.
    const late = await c.openReceiver('aside.q');
    late.receiver.add_credit(10);
    expect(await late.drainFor(500)).toHaveLength(0);
    expect(late.closedByPeer).toBe(false);
    // Purge removes it like any message.
    await manage(broker.port, 'PURGE', 'queue', 'aside.q');
    expect(await manage(broker.port, 'READ', 'queue', 'aside.q')).toMatchObject({ depth: 0, unreadable: 0 });
    await c.close();
    await broker.stop();
    broker.cleanup();
  });

  it('journal damage - deleting a queue with an alternate exchange skips the one message whose body is damaged (logged, counted); the 199 others go on and the delete completes', async () => {
    const first = await TestBroker.start();
    await manage(first.port, 'CREATE', 'exchange', 'dead.fanout', { 'exchange-type': 'fanout', durable: true });
    await manage(first.port, 'CREATE', 'queue', 'dead.q', { durable: true });
    await manage(first.port, 'CREATE', 'binding', undefined, { exchange: 'dead.fanout', queue: 'dead.q' });
    await manage(first.port, 'CREATE', 'queue', 'doomed.q', { durable: true, 'alternate-exchange': 'dead.fanout' });
    const client = await TestClient.connect({ port: first.port });
    const outcomes = await client.send('doomed.q', Array.from({ length: 200 }, (_, i) => ({ body: body(i), durable: true })), { timeoutMs: 60_000 });
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    await client.close();
    expect(await first.stop()).toBe(0); // the checkpoint covers every record: the restart leaves the bodies on disk
    const file = lastSegmentOf(first.dataDir);
    const buf = readFileSync(file);
    const records = scanSegment(buf).records.filter((r) => r.entry.change.kind === 'enqueue');
    expect(records).toHaveLength(200);
    const victim = records[100]!;
    buf[victim.offset + victim.size - 2]! ^= 0x40;
    writeFileSync(file, buf);

    const broker = await TestBroker.start({ dataDir: first.dataDir });
    await manage(broker.port, 'DELETE', 'queue', 'doomed.q');
    await expect(manage(broker.port, 'READ', 'queue', 'doomed.q')).rejects.toThrow(/does not exist/);
    expect(await drain(broker.port, 'dead.q')).toEqual(Array.from({ length: 200 }, (_, i) => body(i)).filter((_, i) => i !== 100));
    const log = broker.stdout + broker.stderr;
    expect(log).toMatch(/a message could not go on to the alternate exchange and was dropped/);
    expect(log).toMatch(/"queue":"doomed.q".*"reason":"its body cannot be read back/);
    expect(log).toMatch(/"total":1\b/);
    // The broker goes on: the queue can be made again under its name.
    await manage(broker.port, 'CREATE', 'queue', 'doomed.q', { durable: true });
    await broker.stop();
    broker.cleanup();
  });

  it('journal damage - a message body holding a forged journal frame, its write torn by a crash: the tail is cut and the broker starts; the forged queue-delete is never applied, --repair or not', async () => {
    const first = await TestBroker.start({ args: ['--checkpoint-bytes', '0'] });
    const client = await TestClient.connect({ port: first.port });
    const kept = await client.send('victim.q', Array.from({ length: 20 }, (_, i) => ({ body: body(i), durable: true })), { timeoutMs: 60_000 });
    expect(kept.every((o) => o.state === 'accepted')).toBe(true);
    // What any client can compute: a whole journal frame of a record it chose, its
    // CRC from 0 as frames had before salts, with an LSN far ahead so it would win.
    const forged = encodeFrame(encodeChange({ lsn: 2 ** 40, change: { kind: 'queue-delete', name: 'victim.q' }, durable: true }), 0);
    const evil = Buffer.concat([forged, Buffer.alloc(512, 0x20)]);
    const sent = await client.send('evil.q', [{ body: evil, durable: true }], { timeoutMs: 60_000 });
    expect(sent[0]!.state).toBe('accepted');
    await client.close();
    await first.kill();

    // A crash tore the write of the evil message's record behind the forged frame it holds.
    const file = lastSegmentOf(first.dataDir);
    const buf = readFileSync(file);
    const at = buf.indexOf(forged);
    expect(at).toBeGreaterThan(0);
    truncateSync(file, at + forged.length + 100);
    const repairDir = `${first.dataDir}-repair`;
    cpSync(first.dataDir, repairDir, { recursive: true });

    const repaired = await TestBroker.start({ dataDir: repairDir, args: ['--repair'] });
    expect(await drain(repaired.port, 'victim.q')).toEqual(Array.from({ length: 20 }, (_, i) => body(i)));
    await repaired.stop();
    repaired.cleanup();
    rmSync(repairDir, { recursive: true, force: true });

    const restarted = await TestBroker.start({ dataDir: first.dataDir });
    expect(restarted.stdout + restarted.stderr).toMatch(/journal ends in a torn record/);
    expect(await drain(restarted.port, 'victim.q')).toEqual(Array.from({ length: 20 }, (_, i) => body(i)));
    await restarted.stop();
    restarted.cleanup();
  });
});

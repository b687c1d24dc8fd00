// A DR source that restarts (clean stop or kill -9) continues its log above its LSN
// reservation, so its log has a gap. A copy that had applied everything the source
// journaled before the restart must resume across the gap from the log, not get a
// snapshot: an LSN gap is not a lost change. The non-durable messages the source
// lost in the restart leave a mirror too (it mirrors the source), an enqueue-only
// copy keeps them. And where changes the copy needs are gone (the copy was behind
// what the source journaled, or behind the retained window since the restart), a
// snapshot is still what it gets.
import { cpSync } from 'node:fs';
import rhea, { type EventContext } from 'rhea';
import { afterAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, mgmt, range, receive, send } from './helpers.js';

const SOURCE_SNAPSHOT = 'DR: sending a snapshot of queues before the log';
const BRIDGE_SNAPSHOT = 'DR: the source is sending a snapshot of queues';
const count = (log: string, line: string): number => log.split('\n').filter((l) => l.includes(line)).length;

/** A durable send to a queue of its own, accepted: the journal writes in order, so everything before it is on disk. */
const journalBarrier = (port: number) => send(port, 'barrier', ['b']);

async function restart(source: TestBroker, how: 'stop' | 'kill', args: string[] = []): Promise<TestBroker> {
  if (how === 'stop') expect(await source.stop()).toBe(0);
  else await source.kill();
  return TestBroker.start({ dataDir: source.dataDir, port: source.port, args });
}

/**
 * Publish `bodies` in order (durable, 200 unsettled) until the connection goes; `accepted`
 * collects what the broker acknowledged, in order. Resolves once all are accepted or the link is gone.
 */
function publishUntilCut(port: number, address: string, bodies: string[], accepted: string[]): Promise<void> {
  return new Promise((resolve) => {
    const conn = rhea.create_container().connect({ host: '127.0.0.1', port, reconnect: false } as never);
    conn.on('error', () => undefined);
    conn.on('disconnected', () => resolve());
    const sender = conn.open_sender({ target: { address } });
    let next = 0;
    const pump = () => {
      while (next < bodies.length && sender.sendable() && next - accepted.length < 200) {
        const body = bodies[next++]!;
        const d = sender.send({ body, durable: true });
        (d as unknown as { body: string }).body = body;
      }
    };
    sender.on('sendable', pump);
    sender.on('accepted', (ctx: EventContext) => {
      accepted.push((ctx.delivery as unknown as { body: string }).body);
      if (accepted.length === bodies.length) {
        conn.close();
        resolve();
      } else pump();
    });
  });
}

/** Whether `list` keeps the order of `order` (a subsequence of it) and holds nothing twice. */
function inOrderOnce(list: unknown[], order: string[]): boolean {
  const at = new Map(order.map((b, i) => [b, i]));
  let last = -1;
  for (const b of list) {
    const i = at.get(b as string);
    if (i === undefined || i <= last) return false;
    last = i;
  }
  return true;
}

describe('DR across a restart of the source', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  for (const how of ['stop', 'kill'] as const) {
    it(`DR - a copy resumes across the source's LSN gap after a ${how === 'stop' ? 'clean stop' : 'kill -9'}, without a snapshot, message by message`, async () => {
      let source = await TestBroker.start();
      const secondary = await TestBroker.start();
      for (const q of ['mirror', 'log', 'other']) expect((await tandem(['queue', 'add', q, '--durable', '-b', source.url])).code).toBe(0);
      await mgmt(secondary.port, 'DR-ADD', { queue: 'mirror', source: source.url, mode: 'enqueue-and-dequeue' });
      await mgmt(secondary.port, 'DR-ADD', { queue: 'log', source: source.url, mode: 'enqueue-only' });
      await send(source.port, 'mirror', range('m', 0, 200));
      await send(source.port, 'log', range('l', 0, 200));
      // Non-durable messages on the durable queues: the restart loses them at the source.
      await send(source.port, 'mirror', range('v', 0, 20), { durable: false });
      await send(source.port, 'log', range('w', 0, 20), { durable: false });
      await send(source.port, 'other', range('o', 0, 300));
      expect(await receive(source.port, 'mirror', 50)).toEqual(range('m', 0, 50));
      expect(await receive(source.port, 'log', 30)).toEqual(range('l', 0, 30));
      await journalBarrier(source.port);
      await drFlush(source.port, secondary.port);
      expect(await contents(secondary.port, 'mirror')).toEqual([...range('m', 50, 200), ...range('v', 0, 20)]);
      const before = await drRowOf(secondary.port, 'mirror');
      const lsnBefore = before['applied-position'];
      const bridgeSnapshots = count(secondary.stderr, BRIDGE_SNAPSHOT);
      // A clean stop tells the copy it has everything first, so other queues busy until the stop
      // (changes journaled after the copy's last heartbeat) do not cost it a snapshot.
      if (how === 'stop') await send(source.port, 'other', range('o', 300, 2300));

      source = await restart(source, how);
      await send(source.port, 'mirror', range('m', 200, 300));
      await send(source.port, 'log', range('l', 200, 300));
      expect(await receive(source.port, 'mirror', 30)).toEqual(range('m', 50, 80));
      await journalBarrier(source.port);
      const rows = await drFlush(source.port, secondary.port);

      // The log jumped past the reservation, and the copy crossed the gap by the log.
      expect(rows.find((r) => r.queue === 'mirror')!['applied-position']).toBeGreaterThan(lsnBefore + 500_000);
      expect(count(source.stderr, SOURCE_SNAPSHOT), source.stderr).toBe(0);
      expect(count(secondary.stderr, BRIDGE_SNAPSHOT)).toBe(bridgeSnapshots);
      expect((await drRowOf(secondary.port, 'mirror'))['received-copies']).toBe(before['received-copies']);
      expect(source.stderr).toMatch(/DR: a copy resumes across this source's restart/);

      // Message by message: the mirror equals the source (the lost non-durable ones left it too),
      // the enqueue-only copy holds every message ever sent, each once, in order.
      const expectedMirror = range('m', 80, 300);
      expect(await contents(source.port, 'mirror')).toEqual(expectedMirror);
      expect(await contents(secondary.port, 'mirror')).toEqual(expectedMirror);
      expect(await contents(source.port, 'log')).toEqual(range('l', 30, 300));
      expect(await contents(secondary.port, 'log')).toEqual([...range('l', 0, 200), ...range('w', 0, 20), ...range('l', 200, 300)]);
      await killAllBrokers();
    });
  }

  it('DR - the source killed -9 three times while publishers send to both queues: by the log or by a snapshot, nothing acknowledged lost, nothing twice, in order', async () => {
    let source = await TestBroker.start();
    const secondary = await TestBroker.start();
    for (const q of ['mirror', 'log']) expect((await tandem(['queue', 'add', q, '--durable', '-b', source.url])).code).toBe(0);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'mirror', source: source.url, mode: 'enqueue-and-dequeue' });
    await mgmt(secondary.port, 'DR-ADD', { queue: 'log', source: source.url, mode: 'enqueue-only' });
    // The copies' first snapshots are done before the rounds: how many were logged depends
    // on whether the bridge's first attach (for 'mirror' alone) got its snapshot before the
    // second DR-ADD restarted it, so they are counted here, not assumed.
    await drFlush(source.port, secondary.port, 60_000);
    const snapshotsBefore = count(secondary.stderr, BRIDGE_SNAPSHOT);
    const order = { mirror: [] as string[], log: [] as string[] };
    const accepted = { mirror: [] as string[], log: [] as string[] };
    const consumed: unknown[] = [];
    for (let round = 0; round < 3; round++) {
      const bodies = { mirror: range(`m${round}-`, 0, 20_000), log: range(`l${round}-`, 0, 20_000) };
      order.mirror.push(...bodies.mirror);
      order.log.push(...bodies.log);
      const got = { mirror: [] as string[], log: [] as string[] };
      const publishing = Promise.all([publishUntilCut(source.port, 'mirror', bodies.mirror, got.mirror), publishUntilCut(source.port, 'log', bodies.log, got.log)]);
      // Killed while both publish (a random point past the first thousand acknowledgements).
      const at = 1000 + Math.floor(Math.random() * 4000);
      await waitFor(() => got.mirror.length >= at && got.log.length >= at, { timeout: 60_000, name: `${at} acknowledged` });
      source = await restart(source, 'kill');
      await publishing;
      accepted.mirror.push(...got.mirror);
      accepted.log.push(...got.log);
      consumed.push(...(await receive(source.port, 'mirror', 100)));
      // The copy is attached and current again before the next kill, so each kill meets an
      // attached bridge (one killed during the bridge's reconnect pause would merge with the
      // one before it into one reattach).
      await drFlush(source.port, secondary.port, 60_000);
    }
    await journalBarrier(source.port);
    await drFlush(source.port, secondary.port, 60_000);
    const sourceMirror = await contents(source.port, 'mirror');
    const copyMirror = await contents(secondary.port, 'mirror');
    const copyLog = await contents(secondary.port, 'log');
    // The mirror equals its source; the source lost nothing acknowledged (consumed ones aside).
    expect(copyMirror).toEqual(sourceMirror);
    const kept = new Set([...sourceMirror, ...consumed]);
    expect(accepted.mirror.filter((b) => !kept.has(b))).toEqual([]);
    expect(inOrderOnce(sourceMirror, order.mirror)).toBe(true);
    // The enqueue-only copy: every acknowledged message, once each, in publishing order.
    expect(inOrderOnce(copyLog, order.log)).toBe(true);
    const copied = new Set(copyLog);
    expect(accepted.log.filter((b) => !copied.has(b))).toEqual([]);
    const gaps = count(secondary.stderr, 'DR: the source restarted; following its log across the gap');
    const snapshots = count(secondary.stderr, BRIDGE_SNAPSHOT) - snapshotsBefore;
    const asked = count(secondary.stderr, 'asking for a copy');
    // Per attach, each queue goes one way or the other (the two may differ): printed, not asserted.
    console.log(`source killed 3 times under load: ${gaps} attaches crossed the gap, ${snapshots} sent a snapshot, ${asked} mirrors asked for a copy`);
    expect(gaps + snapshots).toBeGreaterThanOrEqual(3);
    await killAllBrokers();
  }, 180_000);

  it('DR - a copy that was behind what the source journaled before its restart still gets a snapshot', async () => {
    let source = await TestBroker.start();
    let secondary = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'mirror', '--durable', '-b', source.url])).code).toBe(0);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'mirror', source: source.url, mode: 'enqueue-and-dequeue' });
    await send(source.port, 'mirror', range('m', 0, 100));
    await drFlush(source.port, secondary.port);
    // The copy is away while the source journals changes it needs, then the source restarts: the window
    // that held those changes is gone with the process, so only a snapshot can bring them.
    const dataDir = secondary.dataDir;
    await secondary.kill();
    await send(source.port, 'mirror', range('m', 100, 150));
    expect(await receive(source.port, 'mirror', 20)).toEqual(range('m', 0, 20));
    await journalBarrier(source.port);
    source = await restart(source, 'kill');
    secondary = await TestBroker.start({ dataDir });
    await drFlush(source.port, secondary.port);
    const lines = source.stderr.split('\n').filter((l) => l.includes(SOURCE_SNAPSHOT));
    expect(lines.length, source.stderr).toBe(1);
    expect(lines[0]).toMatch(/older than the retained log/);
    expect(await contents(secondary.port, 'mirror')).toEqual(range('m', 20, 150));
    expect(await contents(source.port, 'mirror')).toEqual(range('m', 20, 150));
    await killAllBrokers();
  });

  it('DR - a source restored from an earlier copy of its data directory: the mirror lacks what it holds, so it asks for a copy', async () => {
    let source = await TestBroker.start();
    const secondary = await TestBroker.start();
    for (const q of ['mirror', 'log']) expect((await tandem(['queue', 'add', q, '--durable', '-b', source.url])).code).toBe(0);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'mirror', source: source.url, mode: 'enqueue-and-dequeue' });
    await mgmt(secondary.port, 'DR-ADD', { queue: 'log', source: source.url, mode: 'enqueue-only' });
    await send(source.port, 'mirror', range('m', 0, 100));
    await send(source.port, 'log', range('l', 0, 100));
    await drFlush(source.port, secondary.port);
    // A backup of the data directory while nothing is written (as a filesystem snapshot would take it).
    const saved = `${source.dir}/saved-data`;
    cpSync(source.dataDir, saved, { recursive: true });
    // A history the restored source will not have: 50 more each, 30 consumed from the mirror.
    await send(source.port, 'mirror', range('m', 100, 150));
    await send(source.port, 'log', range('l', 100, 150));
    expect(await receive(source.port, 'mirror', 30)).toEqual(range('m', 0, 30));
    await drFlush(source.port, secondary.port);
    expect(await contents(secondary.port, 'mirror')).toEqual(range('m', 30, 150));
    const port = source.port;
    await source.kill();
    // Restored: its reservation is the one the lost history used, so the copy is within its gap,
    // but the mirror lacks m0..m29, which the restored source holds: the log cannot mend that.
    source = await TestBroker.start({ dataDir: saved, port });
    await drFlush(source.port, secondary.port);
    expect(await contents(source.port, 'mirror')).toEqual(range('m', 0, 100));
    expect(await contents(secondary.port, 'mirror')).toEqual(range('m', 0, 100));
    expect(secondary.stderr).toMatch(/the restarted source holds messages these mirrors lack; asking for a copy/);
    expect(source.stderr).toMatch(/mirror: the secondary asks for a copy/);
    // enqueue-only keeps what it was sent, as a snapshot would have left it.
    expect(await contents(secondary.port, 'log')).toEqual(range('l', 0, 150));
    await send(source.port, 'mirror', range('n', 0, 10));
    await drFlush(source.port, secondary.port);
    expect(await contents(secondary.port, 'mirror')).toEqual([...range('m', 0, 100), ...range('n', 0, 10)]);
    await killAllBrokers();
  });

  it('DR - a copy behind the retained window since the source restarted still gets a snapshot', async () => {
    let source = await TestBroker.start({ args: ['--dr-retain-changes', '100'] });
    let secondary = await TestBroker.start();
    expect((await tandem(['queue', 'add', 'log', '--durable', '-b', source.url])).code).toBe(0);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'log', source: source.url, mode: 'enqueue-only' });
    await send(source.port, 'log', range('l', 0, 50));
    await drFlush(source.port, secondary.port);
    const dataDir = secondary.dataDir;
    await secondary.kill();
    // The copy was current when the source restarted, but 300 changes since are past the window of 100.
    source = await restart(source, 'stop', ['--dr-retain-changes', '100']);
    await send(source.port, 'log', range('l', 50, 350));
    expect(await receive(source.port, 'log', 10)).toEqual(range('l', 0, 10));
    secondary = await TestBroker.start({ dataDir });
    await drFlush(source.port, secondary.port);
    const lines = source.stderr.split('\n').filter((l) => l.includes(SOURCE_SNAPSHOT));
    expect(lines.length, source.stderr).toBe(1);
    expect(lines[0]).toMatch(/older than the retained log/);
    expect(await contents(secondary.port, 'log')).toEqual(range('l', 0, 350));
    await killAllBrokers();
  });
});

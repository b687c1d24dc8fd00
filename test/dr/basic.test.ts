// DR basics, after Apache Qpid's replication_test: several queues in both modes,
// messages sent and some consumed on the primary, a flush barrier, then the
// secondary holds exactly the expected messages in order, including queues whose
// mirror was added later (their existing contents copied first). Also the
// passive guard, activation, restart of the secondary, and bad input.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drStatus, mgmt, range, receive, send } from './helpers.js';

describe('DR basics', () => {
  let primary: TestBroker;
  let secondary: TestBroker;
  const brokers: TestBroker[] = [];

  beforeAll(async () => {
    primary = await TestBroker.start();
    secondary = await TestBroker.start();
    brokers.push(primary, secondary);
  });
  afterAll(async () => {
    await killAllBrokers();
  });

  const dr = (...args: string[]) => tandem(['dr', ...args, '-b', secondary.url]);

  it('DR - both modes, consumption on the primary, queues mirrored later get their contents first', async () => {
    for (const q of ['mirror', 'log', 'late-mirror', 'late-log']) {
      expect((await tandem(['queue', 'add', q, '--durable', '-b', primary.url])).code).toBe(0);
    }
    // Contents before any mirror exists: copied by snapshot.
    await send(primary.port, 'late-mirror', range('lm', 0, 50));
    await send(primary.port, 'late-log', range('ll', 0, 50));
    expect((await dr('add', 'mirror', '--source', primary.url, '--mode', 'enqueue-and-dequeue')).code).toBe(0);
    const add = await dr('add', 'log', '--source', primary.url, '--mode', 'enqueue-only');
    expect(add.code, add.stderr).toBe(0);
    await send(primary.port, 'mirror', range('m', 0, 100));
    await send(primary.port, 'log', range('l', 0, 100));
    expect(await receive(primary.port, 'mirror', 30)).toEqual(range('m', 0, 30));
    expect(await receive(primary.port, 'log', 40)).toEqual(range('l', 0, 40));
    await receive(primary.port, 'late-mirror', 10);
    await receive(primary.port, 'late-log', 10);
    // Mirrors added now, after consumption: a copy of what is there now, then the log.
    expect((await dr('add', 'late-mirror', '--source', primary.url)).code).toBe(0);
    expect((await dr('add', 'late-log', '--source', primary.url, '--mode', 'enqueue-only')).code).toBe(0);
    await send(primary.port, 'late-mirror', range('lm', 50, 60));
    await send(primary.port, 'late-log', range('ll', 50, 60));
    await receive(primary.port, 'late-mirror', 5);
    await receive(primary.port, 'late-log', 5);
    await send(primary.port, 'mirror', range('m', 100, 120));
    await receive(primary.port, 'mirror', 10);

    const rows = await drFlush(primary.port, secondary.port);
    expect(rows.map((r) => r.queue).sort()).toEqual(['late-log', 'late-mirror', 'log', 'mirror']);
    expect(rows.every((r) => r['lag-changes'] === 0 && r['last-error'] === null)).toBe(true);
    expect(await contents(secondary.port, 'mirror')).toEqual([...range('m', 40, 120)]);
    expect(await contents(secondary.port, 'log')).toEqual(range('l', 0, 100));
    expect(await contents(secondary.port, 'late-mirror')).toEqual([...range('lm', 15, 60)]);
    // enqueue-only keeps what the copy held and every enqueue after it.
    expect(await contents(secondary.port, 'late-log')).toEqual([...range('ll', 10, 60)]);
    // The primary still has the same in the mirrors.
    expect(await contents(primary.port, 'mirror')).toEqual(range('m', 40, 120));
  });

  it('DR - passive queues refuse clients until activated; admins may browse', async () => {
    await expect(receive(secondary.port, 'log', 1)).rejects.toThrow(/passive DR replica.*tandem dr activate log/);
    await expect(send(secondary.port, 'log', ['x'])).rejects.toThrow(/passive DR replica/);
    const status = await dr('status');
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/mirror\s+passive copy\s+1\s+connected/);
    const list = await dr('list', '--json');
    expect(JSON.parse(list.stdout)).toContainEqual({ queue: 'log', source: primary.url, mode: 'enqueue-only', state: 'passive', role: 'passive copy', epoch: 1, exchanges: '*' });
  });

  it('DR - a restarted secondary resumes where it was: no loss, no duplicates', async () => {
    const dataDir = secondary.dataDir;
    await secondary.kill();
    await send(primary.port, 'mirror', range('m', 120, 140));
    await send(primary.port, 'log', range('l', 100, 120));
    await receive(primary.port, 'mirror', 20);
    secondary = await TestBroker.start({ dataDir });
    brokers.push(secondary);
    await drFlush(primary.port, secondary.port);
    expect(await contents(secondary.port, 'mirror')).toEqual(range('m', 60, 140));
    expect(await contents(secondary.port, 'log')).toEqual(range('l', 0, 120));
  });

  it('DR - activation opens the queue to consumers and stops replicating to it', async () => {
    // A drill: the primary goes on serving 'log' (and is a source of it below); by default it would be told to stop.
    const r = await dr('activate', 'log', '--keep-source-serving');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('activated: log');
    expect(r.stdout).toContain('is NOT told');
    await send(primary.port, 'log', ['after']);
    await drFlush(primary.port, secondary.port);
    expect(await receive(secondary.port, 'log', 3)).toEqual(['l0', 'l1', 'l2']);
    const rows = await drStatus(secondary.port);
    expect(rows.find((x) => x.queue === 'log')).toMatchObject({ state: 'active', link: 'activated' });
    // Still active after a restart (the state is journaled). The three dequeues must be
    // on disk before the kill, or a redelivery of l0 would be right but fail this check:
    // a durable send settles after the sync that covers every record before it.
    await send(secondary.port, 'sync-barrier', ['barrier']);
    const dataDir = secondary.dataDir;
    await secondary.kill();
    secondary = await TestBroker.start({ dataDir });
    brokers.push(secondary);
    expect(await receive(secondary.port, 'log', 1)).toEqual(['l3']);
    expect((await dr('activate')).code).toBe(2);
  });

  it('DR - copies of non-durable messages stay consumed on an activated secondary across a kill -9', async () => {
    expect((await tandem(['queue', 'add', 'fleeting', '--durable', '-b', primary.url])).code).toBe(0);
    expect((await dr('add', 'fleeting', '--source', primary.url, '--mode', 'enqueue-only')).code).toBe(0);
    await send(primary.port, 'fleeting', range('f', 0, 10), { durable: false });
    await drFlush(primary.port, secondary.port);
    expect((await dr('activate', 'fleeting')).code).toBe(0);
    expect(await receive(secondary.port, 'fleeting', 4)).toEqual(range('f', 0, 4));
    // A durable send settles after the sync that covers every record before it.
    await send(secondary.port, 'sync-barrier', ['barrier']);
    const dataDir = secondary.dataDir;
    await secondary.kill();
    secondary = await TestBroker.start({ dataDir });
    brokers.push(secondary);
    expect(await contents(secondary.port, 'fleeting')).toEqual(range('f', 4, 10));
  });

  it('DR - bad input: queue missing with auto-create off is skipped, others go on; sources that are not tandem primaries are named', async () => {
    const strict = await TestBroker.start({ args: ['--auto-create', 'no'] });
    const notSource = await TestBroker.start({ args: ['--dr-retain-changes', '0'] });
    brokers.push(strict, notSource);
    await send(primary.port, 'mirror', ['x1']);
    await mgmt(strict.port, 'DR-ADD', { queue: 'mirror', source: primary.url, mode: 'enqueue-and-dequeue' });
    await tandem(['queue', 'add', 'log', '--durable', '-b', strict.url]);
    await mgmt(strict.port, 'DR-ADD', { queue: 'log', source: primary.url, mode: 'enqueue-only' });
    await waitFor(async () => (await drStatus(strict.port)).find((r) => r.queue === 'log')?.link === 'connected', { timeout: 15_000, name: 'log replicated' });
    const rows = await drStatus(strict.port);
    expect(rows.find((r) => r.queue === 'mirror')).toMatchObject({ link: 'skipped' });
    expect(rows.find((r) => r.queue === 'mirror')?.['last-error']).toMatch(/does not exist on this broker and auto-create is off/);
    await drFlush(primary.port, strict.port, 30_000, ['log']);
    expect(await contents(strict.port, 'log')).toEqual(await contents(primary.port, 'log'));
    // Created later: picked up without a restart.
    await tandem(['queue', 'add', 'mirror', '--durable', '-b', strict.url]);
    await waitFor(async () => (await drStatus(strict.port)).every((r) => r.link === 'connected'), { timeout: 15_000, name: 'mirror picked up' });

    await mgmt(secondary.port, 'DR-ADD', { queue: 'other', source: notSource.url, mode: 'enqueue-only' });
    await waitFor(async () => (await drStatus(secondary.port)).find((r) => r.queue === 'other')?.['last-error']?.includes('not a DR source'), { timeout: 15_000, name: 'not-a-source reported' });
    const bad = await dr('add', 'q', '--source', primary.url, '--mode', 'sideways');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/enqueue-and-dequeue or enqueue-only/);
  });
});

describe('DR behind the retained log', () => {
  afterAll(async () => {
    await killAllBrokers();
  });

  it('DR - a secondary behind the retained log gets a fresh snapshot, says so, and ends exact in both modes', async () => {
    // A window of 100 changes: the 700 made while the secondary is down are far past it.
    const primary = await TestBroker.start({ args: ['--dr-retain-changes', '100'] });
    let secondary = await TestBroker.start();
    for (const q of ['b-mirror', 'b-log']) expect((await tandem(['queue', 'add', q, '--durable', '-b', primary.url])).code).toBe(0);
    await mgmt(secondary.port, 'DR-ADD', { queue: 'b-mirror', source: primary.url, mode: 'enqueue-and-dequeue' });
    await mgmt(secondary.port, 'DR-ADD', { queue: 'b-log', source: primary.url, mode: 'enqueue-only' });
    await send(primary.port, 'b-mirror', range('m', 0, 50));
    await send(primary.port, 'b-log', range('l', 0, 50));
    await receive(primary.port, 'b-mirror', 10);
    await drFlush(primary.port, secondary.port);
    expect(await contents(secondary.port, 'b-mirror')).toEqual(range('m', 10, 50));

    const dataDir = secondary.dataDir;
    await secondary.kill();
    await send(primary.port, 'b-mirror', range('m', 50, 350));
    await send(primary.port, 'b-log', range('l', 50, 350));
    await receive(primary.port, 'b-mirror', 100);
    await receive(primary.port, 'b-log', 20);
    secondary = await TestBroker.start({ dataDir });
    await drFlush(primary.port, secondary.port);

    const snapshotLines = primary.stderr.split('\n').filter((l) => l.includes('DR: sending a snapshot of queues before the log'));
    expect(snapshotLines.some((l) => l.includes('older than the retained log')), snapshotLines.join('\n')).toBe(true);
    expect(secondary.stderr).toMatch(/DR: the source is sending a snapshot of queues/);
    // The mirror dropped what it held and the source had consumed meanwhile (m10..m109).
    expect(await contents(secondary.port, 'b-mirror')).toEqual(range('m', 110, 350));
    expect(await contents(primary.port, 'b-mirror')).toEqual(range('m', 110, 350));
    // Enqueue-only: what it had, plus the copy of what the source holds now (l20..l349).
    expect(await contents(secondary.port, 'b-log')).toEqual(range('l', 0, 350));
  });
});

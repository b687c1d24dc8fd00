// A passive DR copy whose journaled source does not read back (an older version wrote an
// IPv6 source as `::1:PORT`, which reads as a host `::1:PORT` on no port): the broker
// starts, says why that queue is not copied, and copies the others. It used to stop at
// start ("ha-brokers-url: cannot read '::1:...'"), taking every queue down with it.
import { join } from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { Broker, drRoleChange } from '../../src/broker/broker.js';
import { defaultQueueSettings } from '../../src/broker/settings.js';
import { FRESH_ROLE } from '../../src/dr/roles.js';
import { Journal } from '../../src/store/journal.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { contents, drRowOf, send } from './helpers.js';

const dirs: string[] = [];
afterAll(async () => {
  await killAllBrokers();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

/** A data directory whose journal holds the queues and their DR roles, as a broker left it. */
async function journalWith(copies: Array<{ queue: string; source: string }>): Promise<string> {
  const dataDir = await mkdtemp(join(tmpdir(), 'tandem-dr-unreadable-'));
  dirs.push(dataDir);
  const broker = new Broker();
  const { journal } = await Journal.open({ dataDir });
  broker.log.attach(journal);
  for (const { queue, source } of copies) {
    broker.declareQueue(queue, { ...defaultQueueSettings, durable: true });
    broker.recordDr(drRoleChange(queue, { ...FRESH_ROLE, source, mode: 'enqueue-and-dequeue', state: 'passive' }));
  }
  await new Promise<void>((resolve, reject) => journal.whenDurable(broker.log.lsn, (err) => (err ? reject(err) : resolve())));
  await journal.close();
  return dataDir;
}

describe('DR - a journaled source that cannot be read', () => {
  it('DR - the broker starts, names the unreadable source as that queue\'s last error, and copies the other queues', async () => {
    const source = await TestBroker.start();
    await send(source.port, 'good', ['g1', 'g2'], { durable: true });
    const dataDir = await journalWith([
      { queue: 'bad', source: '::1:44167' },
      { queue: 'good', source: `127.0.0.1:${source.port}` },
    ]);
    const copy = await TestBroker.start({ dataDir });
    await waitFor(async () => (await drRowOf(copy.port, 'bad'))['last-error'] !== null, { timeout: 15_000, name: 'the bad copy says why' });
    expect(String((await drRowOf(copy.port, 'bad'))['last-error'])).toMatch(/source "::1:44167" cannot be read/);
    // Logged once, at error level (JSON: the quotes escaped).
    expect(copy.errorLogLines.filter((l) => l.includes('::1:44167') && l.includes('cannot be read'))).toHaveLength(1);
    await waitFor(async () => (await contents(copy.port, 'good')).length === 2, { timeout: 30_000, name: 'the good copy caught up' });
    expect(await contents(copy.port, 'good')).toEqual(['g1', 'g2']);
  }, 90_000);
});

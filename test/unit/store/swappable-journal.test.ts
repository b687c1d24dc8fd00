// The journal swap an HA backup makes to load a snapshot, with a real Journal and the
// broker model: the old store is set aside while the new one fills, a restart before
// the snapshot is complete goes back to the old store, and once it is complete the
// old store goes (or is kept, when it holds diverged changes).
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import { Pager } from '../../../src/store/pager.js';
import { restoreBroker } from '../../../src/store/restore.js';
import { SwappableJournal } from '../../../src/store/swappable-journal.js';
import { pino } from 'pino';
import { listDiverged } from '../../../src/ha/diverged-store.js';
import { msg, qs } from '../broker/helpers.js';
import { removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
const open: SwappableJournal[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.current?.close().catch(() => undefined);
  for (const d of dirs.splice(0)) await removeDir(d);
});

/** A broker on a swappable journal in `dataDir`, recovered as tandemd does it. */
async function start(dataDir: string) {
  const broker = new Broker();
  const log = pino({ level: 'silent' });
  let store: SwappableJournal | undefined;
  const pager = new Pager({ broker, journal: () => store?.current, maxMemory: 64 * 2 ** 20, log });
  store = new SwappableJournal({ dataDir, checkpointBytes: 0, broker, pager, log, brokerLog: log });
  open.push(store);
  const recovered = await store.open();
  restoreBroker(broker, store.current!, recovered, pager);
  broker.log.resumeAfter(recovered.lastLsn);
  broker.log.attach(store.current!);
  return { broker, store };
}

async function synced(s: { broker: Broker; store: SwappableJournal }): Promise<void> {
  await new Promise<void>((resolve, reject) => s.store.current!.whenDurable(s.broker.log.lsn, (err) => (err ? reject(err) : resolve())));
}

async function stop(s: { store: SwappableJournal }): Promise<void> {
  await s.store.current!.close();
  open.splice(open.indexOf(s.store), 1);
}

/** A new data directory with a broker on it. */
async function fresh() {
  const dataDir = await tempDir();
  dirs.push(dataDir);
  return { dataDir, first: await start(dataDir) };
}

const setAside = (dataDir: string) => readdirSync(dataDir).filter((n) => n.startsWith('journal.replaced-'));

describe('swapping the journal for a snapshot', () => {
  it('store swap - a restart before the snapshot is complete goes back to the old store, whole', async () => {
    const { dataDir, first } = await fresh();
    first.broker.declareQueue('old', qs({ durable: true }));
    first.broker.publish('old', msg('kept', { durable: true }));
    await synced(first);

    await first.store.setAsideForSnapshot();
    // The new store is empty, and so is the broker: the snapshot fills both.
    expect(first.broker.queues.has('old')).toBe(false);
    expect(setAside(dataDir)).toHaveLength(1);
    first.broker.declareQueue('partial', qs({ durable: true }));
    await synced(first);
    await stop(first);

    const again = await start(dataDir);
    expect([...again.broker.queues.keys()]).toContain('old');
    expect(again.broker.queues.has('partial')).toBe(false);
    expect(again.broker.queues.get('old')!.depth).toBe(1);
    expect(setAside(dataDir)).toEqual([]);
  });

  it('store swap - once the snapshot is complete the old store goes and a restart keeps the new one', async () => {
    const { dataDir, first } = await fresh();
    first.broker.declareQueue('old', qs({ durable: true }));
    await synced(first);

    await first.store.setAsideForSnapshot();
    first.broker.declareQueue('from-snapshot', qs({ durable: true }));
    await synced(first);
    first.store.dropSetAside();
    expect(setAside(dataDir)).toEqual([]);
    expect(existsSync(join(dataDir, 'ha-snapshot-incomplete'))).toBe(false);
    await stop(first);

    const again = await start(dataDir);
    expect(again.broker.queues.has('from-snapshot')).toBe(true);
    expect(again.broker.queues.has('old')).toBe(false);
  });

  it('store swap - an old store with diverged changes is kept aside, not deleted', async () => {
    const { dataDir, first } = await fresh();
    first.broker.declareQueue('old', qs({ durable: true }));
    first.broker.publish('old', msg('diverged', { durable: true }));
    await synced(first);
    const through = first.broker.log.lsn;

    await first.store.setAsideForSnapshot({ epoch: first.broker.epoch, after: 1, through, primaryEpoch: first.broker.epoch + 1, reason: 'test', setAsideAt: new Date().toISOString(), snapshotPoint: 0, history: [] });
    first.store.dropSetAside();
    expect(setAside(dataDir)).toEqual([]);
    const kept = listDiverged(dataDir);
    expect(kept.map((k) => [k.after, k.through])).toEqual([[1, through]]);
    expect(existsSync(join(kept[0]!.path, 'journal'))).toBe(true);
  });
});

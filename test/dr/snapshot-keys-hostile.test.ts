// A DR copy of a queue's contents carries the source's duplicate-detection window
// (`dedup-keys` records after snapshot-begin). A source (hostile, or broken) sending
// rows no tandem source sends, or keys outside a copy, is refused: the secondary
// logs why, says it in `tandem dr status`'s last-error, takes none of them, dials
// again and serves on. Well-formed rows are taken (the control: the test can fail).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultQueueSettings } from '../../src/broker/settings.js';
import { DEDUP_ROW_BYTES } from '../../src/broker/dedup-window.js';
import { DR_DEDUP_ROWS, encodeDrMessage, type DrStreamMessage } from '../../src/dr/protocol.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { HostileSite } from './hostile-site.js';
import { drRowOf } from './helpers.js';

let site: HostileSite;
let copy: TestBroker;

beforeAll(async () => {
  site = await new HostileSite(() => ({ status: 501, description: 'not here' })).start();
  site.drSourceProperties = { 'tandem.dr.source': true };
  copy = await TestBroker.start();
}, 60_000);

afterAll(async () => {
  await site?.stop();
  await killAllBrokers();
});

/** `n` rows of distinct keys, each with time `at` (and source LSN 1). */
function rows(n: number, at: number): Buffer {
  const out = Buffer.alloc(n * DEDUP_ROW_BYTES);
  for (let i = 0; i < n; i++) {
    out.writeUInt32LE(i + 1, i * DEDUP_ROW_BYTES);
    out.writeDoubleLE(at, i * DEDUP_ROW_BYTES + 16);
    out.writeDoubleLE(1, i * DEDUP_ROW_BYTES + 24);
  }
  return out;
}

const settings = { ...defaultQueueSettings, durable: true, dedupWindow: 100_000 };

/** A copy of queue `q` that brings `keys` as its window's rows, and no message. */
function stream(q: string, keys: Buffer, options: { begin?: boolean } = {}): Buffer[] {
  const now = Date.now();
  const m = (x: Partial<DrStreamMessage> & Pick<DrStreamMessage, 'kind'>): Buffer => encodeDrMessage({ lsn: 0, time: now, head: 5, now, ...x });
  return [
    m({ kind: 'declares', entries: [{ lsn: 0, durable: true, change: { kind: 'queue-declare', name: q, settings } }] }),
    ...(options.begin === false ? [] : [m({ kind: 'snapshot-begin', queues: [q], reason: 'test' })]),
    m({ kind: 'snapshot', entries: [{ lsn: 0, durable: true, change: { kind: 'dedup-keys', queue: q, rows: keys } }] }),
    m({ kind: 'snapshot-end', lsn: 5, queues: [q] }),
  ];
}

const keysOf = async (q: string): Promise<number> => Number(((await manage(copy.port, 'READ', 'queue', q)) as Record<string, unknown>)['dedup-keys']);

describe("DR copy - the window rows its source sends with a copy", () => {
  const now = Date.now();
  const bad: Array<{ name: string; keys: Buffer; begin?: boolean; error: RegExp }> = [
    { name: 'not whole rows', keys: Buffer.alloc(DEDUP_ROW_BYTES + 1), error: /33 bytes are not whole rows of 32/ },
    { name: 'more rows than a record holds', keys: rows(DR_DEDUP_ROWS + 1, now), error: /8193 rows in one record, more than the 8192/ },
    { name: 'a time that is NaN', keys: rows(3, Number.NaN), error: /row 1 has time NaN/ },
    { name: 'a time before 1970', keys: rows(3, -1), error: /row 1 has time -1/ },
    { name: 'a time a day ahead of the source', keys: rows(3, now + 86_400_000), error: /row 1 has time \d+, not one from 0 to \d+/ },
    { name: 'keys outside a copy (no snapshot-begin)', keys: rows(3, now), begin: false, error: /came outside a copy of its contents/ },
  ];
  for (const [i, c] of bad.entries()) {
    it(`DR copy - ${c.name}: refused, saying why; no key taken, the link dialled again`, async () => {
      const q = `bad${i}`;
      site.drStream = stream(q, c.keys, { begin: c.begin });
      const links = site.drLinks;
      const add = await tandem(['dr', 'add', q, '--source', site.url, '-b', copy.url]);
      expect(add.code, add.stderr).toBe(0);
      await waitFor(async () => c.error.test((await drRowOf(copy.port, q))['last-error'] ?? '') && site.drLinks > links + 1, { timeout: 20_000, name: 'refused and dialled again' }).catch(async (e: Error) => {
        throw new Error(`${e.message}; row ${JSON.stringify(await drRowOf(copy.port, q))}; log ${copy.stdout.split('\n').slice(-6).join('\n')}`);
      });
      expect(await keysOf(q)).toBe(0);
      expect((await drRowOf(copy.port, q))['applied-position']).toBe(0);
      expect((await tandem(['dr', 'del', q, '-b', copy.url])).code).toBe(0);
      expect(copy.alive).toBe(true);
    }, 30_000);
  }

  it('DR copy - well-formed rows after snapshot-begin: taken into the window, the copy at the source position', async () => {
    site.drStream = stream('good', rows(500, Date.now()));
    const add = await tandem(['dr', 'add', 'good', '--source', site.url, '-b', copy.url]);
    expect(add.code, add.stderr).toBe(0);
    await waitFor(async () => (await drRowOf(copy.port, 'good'))['applied-position'] === 5, { timeout: 20_000, name: 'the copy applied' });
    expect(await keysOf('good')).toBe(500);
    expect((await drRowOf(copy.port, 'good'))['last-error']).toBeNull();
  }, 30_000);
});

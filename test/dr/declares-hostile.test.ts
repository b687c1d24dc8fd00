// What a DR secondary takes from its source's `declares` message (the first of each
// link: the asked-for queues' declares, the exchanges they need, their bindings). A
// source (hostile, or broken) that declares what no tandem source declares is refused:
// a queue the secondary did not ask for (a local one, a new name, an empty one),
// settings no tandem queue can have, a binding outside the queue's exchange filter or
// of a queue it does not declare, an exchange no declared queue uses, a record of
// another kind (an exchange delete, an unbind), an exchange marked as one a DR bridge
// made (here or in the log: only the secondary's own bridge marks), a queue declared
// twice, a second declares, or one after other messages. The secondary says why in `tandem dr status`,
// takes none of the message, dials again and serves on; its own queue `local`, its
// exchange `localx` and their binding and messages stay as they were. The log is held
// to the same settings (a queue made again, a window set), and its binds and unbinds
// to the copy's exchange filter (outside it, a binding is the secondary's own).
// Well-formed declares (thousands of bindings, settings at their bounds) are taken: the
// control.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LoggedChange, QueueSettings } from '../../src/broker/changes.js';
import { defaultQueueSettings, DEDUP_MAX_WINDOW, MAX_DURATION_MS } from '../../src/broker/settings.js';
import { rowsOf } from '../../src/admin/client.js';
import { encodeDrMessage, type DrStreamMessage } from '../../src/dr/protocol.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { manage, tandem } from '../helpers/tandem-cli.js';
import { HostileSite } from './hostile-site.js';
import { drRowOf, receive, send } from './helpers.js';

let site: HostileSite;
let copy: TestBroker;

const settings: QueueSettings = { ...defaultQueueSettings, durable: true };
const exchangeSettings = { durable: true, alternateExchange: '', replicate: undefined };

const queueDeclare = (name: string, s: Partial<QueueSettings> = {}): LoggedChange => ({ lsn: 0, durable: true, change: { kind: 'queue-declare', name, settings: { ...settings, ...s } } });
const exchangeDeclare = (name: string): LoggedChange => ({ lsn: 0, durable: true, change: { kind: 'exchange-declare', name, type: 'topic', settings: exchangeSettings } });
/** An exchange declare with the mark only a secondary's own bridge puts on what it makes, naming the site as its maker. */
const markedExchange = (name: string): LoggedChange => ({ lsn: 0, durable: true, change: { kind: 'exchange-declare', name, type: 'topic', settings: { ...exchangeSettings, madeByDr: site.url } } });
const bind = (exchange: string, queue: string, key: string): LoggedChange => ({ lsn: 0, durable: true, change: { kind: 'bind', exchange, queue, key } });

function message(x: Partial<DrStreamMessage> & Pick<DrStreamMessage, 'kind'>): Buffer {
  const now = Date.now();
  return encodeDrMessage({ lsn: 0, time: now, head: 5, now, ...x });
}
const declares = (...entries: LoggedChange[]): Buffer => message({ kind: 'declares', entries });

/** Bindings of `queue` on the copy, as exchange/key, sorted. */
async function bindingsOf(queue: string): Promise<string[]> {
  const rows = rowsOf(await manage(copy.port, 'QUERY', 'binding', undefined));
  return rows.filter((b) => b.queue === queue).map((b) => `${String(b.exchange)}/${String(b.key)}`).sort();
}

const namesOf = async (type: 'queue' | 'exchange'): Promise<string[]> => rowsOf(await manage(copy.port, 'QUERY', type, undefined)).map((r) => String(r.name));
const queueNames = (): Promise<string[]> => namesOf('queue');
const exchangeNames = (): Promise<string[]> => namesOf('exchange');
const readQueue = async (name: string): Promise<Record<string, unknown>> => (await manage(copy.port, 'READ', 'queue', name)) as Record<string, unknown>;

let localBefore: Record<string, unknown>;

beforeAll(async () => {
  site = await new HostileSite(() => ({ status: 501, description: 'not here' })).start();
  site.drSourceProperties = { 'tandem.dr.source': true };
  copy = await TestBroker.start();
  // The secondary's own queue, exchange and binding, none of them a DR copy.
  await manage(copy.port, 'CREATE', 'exchange', 'localx', { 'exchange-type': 'topic', durable: true });
  await manage(copy.port, 'CREATE', 'queue', 'local', { durable: true, 'dedup-window': 10 });
  await manage(copy.port, 'CREATE', 'binding', undefined, { exchange: 'localx', queue: 'local', key: 'k' });
  await manage(copy.port, 'CREATE', 'queue', 'other', { durable: true });
  await send(copy.port, 'local', ['l1', 'l2']);
  localBefore = await readQueue('local');
}, 60_000);

afterAll(async () => {
  await site?.stop();
  await killAllBrokers();
});

/** The secondary serves on, and what is its own is as it was. */
async function localUntouched(): Promise<void> {
  expect(copy.alive).toBe(true);
  const local = await readQueue('local');
  for (const k of ['depth', 'durable', 'priorities', 'default-ttl', 'qpid.dedup-window', 'alternate-exchange']) expect(local[k], k).toEqual(localBefore[k]);
  expect(await bindingsOf('local')).toEqual(['localx/k']);
  expect(await exchangeNames()).toContain('localx');
  await send(copy.port, 'other', ['ping']);
  expect(await receive(copy.port, 'other', 1, { timeoutMs: 10_000 })).toEqual(['ping']);
}

/** `dr add` queue `q` (with `exchanges` as its filter) from the hostile site sending `stream` on each link. */
async function addCopy(q: string, stream: Buffer[], exchanges?: string): Promise<number> {
  site.drStream = stream;
  const links = site.drLinks;
  const add = await tandem(['dr', 'add', q, '--source', site.url, '-b', copy.url, ...(exchanges === undefined ? [] : ['--exchanges', exchanges])]);
  expect(add.code, add.stderr).toBe(0);
  return links;
}

async function dropCopy(q: string): Promise<void> {
  expect((await tandem(['dr', 'del', q, '-b', copy.url])).code).toBe(0);
}

interface Refusal {
  name: string;
  stream: (q: string) => Buffer[];
  /** The queue's exchange filter (dr add --exchanges). */
  exchanges?: string;
  error: RegExp;
  /** Queues and exchanges that must not exist after. */
  absent?: string[];
  /** The copy was made (by a declares before the refused message). */
  made?: boolean;
}

const big = 2 ** 53 - 1;
const refusals: Refusal[] = [
  { name: 'a queue it did not ask for', stream: (q) => [declares(queueDeclare(q), queueDeclare('ghost'))], error: /declares queue "ghost", which this secondary did not ask for/, absent: ['ghost'] },
  { name: "the secondary's own queue, with other settings", stream: (q) => [declares(queueDeclare(q), queueDeclare('local', { dedupWindow: 500, priorities: 5 }))], error: /declares queue "local", which this secondary did not ask for/ },
  { name: 'a queue named __proto__', stream: (q) => [declares(queueDeclare(q), queueDeclare('__proto__'))], error: /declares queue "__proto__", which this secondary did not ask for/, absent: ['__proto__'] },
  { name: 'an empty queue name', stream: (q) => [declares(queueDeclare(q), queueDeclare(''))], error: /declares queue "", which this secondary did not ask for/ },
  { name: 'a queue name of 100000 characters', stream: (q) => [declares(queueDeclare(q), queueDeclare('n'.repeat(100_000)))], error: /declares queue "n+\.\.\. \(100002 characters\), which this secondary did not ask for/ },
  { name: 'a queue declared twice', stream: (q) => [declares(queueDeclare(q), queueDeclare(q, { maxCount: 7 }))], error: /declares queue "dq\d+" twice/ },
  { name: '0 priorities', stream: (q) => [declares(queueDeclare(q, { priorities: 0 }))], error: /declares queue "dq\d+" with settings no tandem queue has: priorities 0 is not from 1 to 10/ },
  { name: '255 priorities', stream: (q) => [declares(queueDeclare(q, { priorities: 255 }))], error: /priorities 255 is not from 1 to 10/ },
  { name: 'a default ttl of 2^53 - 1 ms', stream: (q) => [declares(queueDeclare(q, { defaultTtlMs: big }))], error: /defaultTtlMs 9007199254740991 is more than/ },
  { name: 'an auto-delete delay past 100 years', stream: (q) => [declares(queueDeclare(q, { autoDeleteDelayMs: MAX_DURATION_MS + 1 }))], error: /autoDeleteDelayMs \d+ is more than/ },
  { name: 'a window of 2^53 - 1 keys', stream: (q) => [declares(queueDeclare(q, { dedupWindow: big }))], error: /dedupWindow 9007199254740991 is more than 50000000/ },
  { name: 'a dedup ttl without a window', stream: (q) => [declares(queueDeclare(q, { dedupTtlMs: 1000 }))], error: /a dedup ttl or key without a window/ },
  { name: 'a dedup key with a control character', stream: (q) => [declares(queueDeclare(q, { dedupWindow: 10, dedupKey: 'a\nb' }))], error: /dedupKey is not an application property name/ },
  { name: 'a selector of 10000 characters', stream: (q) => [declares(queueDeclare(q, { selector: `a = '${'x'.repeat(10_000)}'` }))], error: /selector of 10006 characters/ },
  { name: 'a binding to a local exchange outside the filter', exchanges: 'dr.*', stream: (q) => [declares(queueDeclare(q), bind('localx', q, 'k'))], error: /binds queue "dq\d+" to exchange "localx", which its filter 'dr\.\*' does not pass/ },
  { name: 'a binding of a queue it does not declare (a local one)', stream: (q) => [declares(queueDeclare(q), bind('localx', 'local', 'stolen'))], error: /binds queue "local", which it does not declare/ },
  { name: 'a binding to an exchange it does not declare', stream: (q) => [declares(queueDeclare(q), bind('localx', q, 'k'))], error: /binds queue "dq\d+" to exchange "localx", which it does not declare/ },
  { name: 'an exchange no declared queue uses', stream: (q) => [declares(exchangeDeclare('junk'), queueDeclare(q))], error: /declares exchange "junk", which no queue it declares uses/, absent: ['junk'] },
  {
    name: "an exchange marked as one a DR bridge made, for this secondary's source (its later delete would take it)",
    stream: (q) => [declares(markedExchange('dr.marked'), queueDeclare(q, { alternateExchange: 'dr.marked' }))],
    error: /declares exchange "dr\.marked" with a DR mark \(made by a bridge for "127\.0\.0\.1:\d+"\); a source sends its exchanges without one/,
    absent: ['dr.marked'],
  },
  { name: 'an exchange delete (of a local exchange)', stream: (q) => [declares(queueDeclare(q), { lsn: 0, durable: true, change: { kind: 'exchange-delete', name: 'localx' } })], error: /declares carries a record of kind exchange-delete/ },
  { name: 'an unbind (of a local binding)', stream: (q) => [declares(queueDeclare(q), { lsn: 0, durable: true, change: { kind: 'unbind', exchange: 'localx', queue: 'local', key: 'k' } })], error: /declares carries a record of kind unbind/ },
  { name: 'a second declares on one link', stream: (q) => [declares(queueDeclare(q)), declares(queueDeclare(q, { dedupWindow: 99 }))], error: /a second declares on one link/, made: true },
  { name: 'a declares after other messages', stream: (q) => [message({ kind: 'heartbeat' }), declares(queueDeclare(q))], error: /declares after other messages on this link/ },
];

describe("DR secondary - a source's declares it refuses", () => {
  for (const [i, c] of refusals.entries()) {
    it(`${c.name}: refused, saying why; the secondary's own queues untouched, the link dialled again`, async () => {
      const q = `dq${i}`;
      const links = await addCopy(q, c.stream(q), c.exchanges);
      await waitFor(async () => c.error.test((await drRowOf(copy.port, q))['last-error'] ?? '') && site.drLinks > links + 1, { timeout: 15_000, name: 'refused and dialled again' }).catch(async (e: Error) => {
        throw new Error(`${e.message}; row ${JSON.stringify(await drRowOf(copy.port, q))}; log ${copy.stdout.split('\n').slice(-4).join('\n')}`);
      });
      const names = [...(await queueNames()), ...(await exchangeNames())];
      for (const name of c.absent ?? []) expect(names).not.toContain(name);
      // None of the message was taken: not even the asked-for queue was made.
      if (!c.made) expect(names).not.toContain(q);
      await localUntouched();
      await dropCopy(q);
    }, 30_000);
  }
});

const change = (lsn: number, c: LoggedChange['change']): Buffer => message({ kind: 'changes', lsn, entries: [{ lsn, durable: true, change: c }] });

describe("DR secondary - the settings and bindings a source's log gives a copy", () => {
  it('a window of 2^53 - 1 keys (queue-dedup): refused, the copy keeps its window', async () => {
    const q = 'log-window';
    const links = await addCopy(q, [declares(queueDeclare(q)), change(3, { kind: 'queue-dedup', name: q, dedupWindow: big, dedupTtlMs: 0, dedupKey: '' })]);
    const error = /the source's log gives queue "log-window" settings no tandem queue has: dedupWindow 9007199254740991 is more than/;
    await waitFor(async () => error.test((await drRowOf(copy.port, q))['last-error'] ?? '') && site.drLinks > links + 1, { timeout: 15_000, name: 'refused and dialled again' });
    expect((await readQueue(q))['qpid.dedup-window']).toBe(0);
    await localUntouched();
    await dropCopy(q);
  }, 30_000);

  it('a copy made again with a default ttl of 2^53 - 1 ms (queue-declare): refused, the copy keeps its settings', async () => {
    const q = 'log-ttl';
    const stream = [declares(queueDeclare(q)), message({ kind: 'snapshot-begin', queues: [q], reason: 'test' }), message({ kind: 'snapshot-end', lsn: 2, queues: [q] }), change(3, { kind: 'queue-declare', name: q, settings: { ...settings, defaultTtlMs: big } })];
    const links = await addCopy(q, stream);
    const error = /the source's log gives queue "log-ttl" settings no tandem queue has: defaultTtlMs 9007199254740991 is more than/;
    await waitFor(async () => error.test((await drRowOf(copy.port, q))['last-error'] ?? '') && site.drLinks > links + 1, { timeout: 15_000, name: 'refused and dialled again' });
    expect((await readQueue(q))['default-ttl']).toBe(0);
    expect((await drRowOf(copy.port, q))['applied-position']).toBe(2);
    await localUntouched();
    await dropCopy(q);
  }, 30_000);

  it("an exchange declare marked as one a DR bridge made, for this secondary's source: refused, no exchange made", async () => {
    const q = 'log-mark';
    const links = await addCopy(q, [declares(queueDeclare(q)), change(3, markedExchange('dr.logmark').change)]);
    const error = /DR stream: declares exchange "dr\.logmark" with a DR mark/;
    await waitFor(async () => error.test((await drRowOf(copy.port, q))['last-error'] ?? '') && site.drLinks > links + 1, { timeout: 15_000, name: 'refused and dialled again' });
    expect(await exchangeNames()).not.toContain('dr.logmark');
    await localUntouched();
    await dropCopy(q);
  }, 30_000);

  it("bindings to an exchange outside the copy's filter: neither a bind nor an unbind of the site's own binding is taken", async () => {
    const q = 'log-binds';
    await manage(copy.port, 'CREATE', 'queue', q, { durable: true });
    await manage(copy.port, 'CREATE', 'binding', undefined, { exchange: 'localx', queue: q, key: 'own' });
    const stream = [
      declares(queueDeclare(q)),
      change(3, { kind: 'bind', exchange: 'localx', queue: q, key: 'k' }),
      change(4, { kind: 'unbind', exchange: 'localx', queue: q, key: 'own' }),
      // Applied after them: when the copy has its window, the stream has been read past them.
      change(5, { kind: 'queue-dedup', name: q, dedupWindow: 7, dedupTtlMs: 0, dedupKey: '' }),
    ];
    await addCopy(q, stream, 'dr.*');
    await waitFor(async () => (await readQueue(q))['qpid.dedup-window'] === 7, { timeout: 15_000, name: 'the log applied' });
    expect(await bindingsOf(q)).toEqual(['localx/own']);
    expect((await drRowOf(copy.port, q))['last-error']).toBeNull();
    await localUntouched();
    await dropCopy(q);
  }, 30_000);
});

describe("DR secondary - a source's declares it takes (controls)", () => {
  it('3000 bindings of the queue to a declared exchange, settings at their bounds: taken', async () => {
    const q = 'good';
    const keys = Array.from({ length: 3000 }, (_, i) => `k${i}`);
    const bounds = { priorities: 10, dedupWindow: DEDUP_MAX_WINDOW, dedupTtlMs: 1000, dedupKey: 'id', defaultTtlMs: MAX_DURATION_MS, alternateExchange: 'dr.fan' };
    await addCopy(q, [declares(exchangeDeclare('dr.fan'), queueDeclare(q, bounds), ...keys.map((k) => bind('dr.fan', q, k)))], 'dr.*');
    await waitFor(async () => (await queueNames()).includes(q) && (await bindingsOf(q)).length === 3000, { timeout: 15_000, name: 'the declares taken' });
    const row = await drRowOf(copy.port, q);
    expect(row['last-error']).toBeNull();
    expect(await readQueue(q)).toMatchObject({ priorities: 10, 'qpid.dedup-window': DEDUP_MAX_WINDOW, 'default-ttl': MAX_DURATION_MS, 'alternate-exchange': 'dr.fan' });
    await localUntouched();
    await dropCopy(q);
  }, 30_000);
});

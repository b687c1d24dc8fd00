// Recovery reads records in file order, and compaction makes that differ from LSN
// order: a live record is copied forward (an older LSN in a newer segment) and the
// segment it came from is deleted, so a record can be read before an older one that
// gives it its context (its queue's declare), and a stale copy can be read after a
// newer record of the same kind. For every kind the live index keeps, the cases
// below lay a log out as compaction can leave it and check that a restart gives what
// the same log read in LSN order gives: configuration, message rows, duplicate-
// detection windows, the journal's position.
//
// A layout only holds what compaction can leave: every record whose segment is still
// there; a copy only of a record live when it was copied, later in file order than
// the original and earlier than what kills it (journal.ts, pendingKills); a segment
// gone only when nothing in it was live and what its tombstones killed was gone too.
import { afterEach, describe, expect, it } from 'vitest';
import type { Change, LoggedChange } from '../../../src/broker/changes.js';
import { dedupDigestAt, dedupDigestBytes } from '../../../src/broker/dedup-key.js';
import { DEDUP_ROW_BYTES } from '../../../src/broker/dedup-window.js';
import { Journal } from '../../../src/store/journal.js';
import { exchangeSettings, journalDirOf, message, queueSettings, removeDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

const key = (n: number) => dedupDigestAt(Buffer.alloc(16, n));
type Op = Extract<Change, { kind: 'enqueue' | 'dequeue' }>;
const enq = (id: number, k?: number): Op => ({ kind: 'enqueue', queue: 'q', message: message(id), ...(k !== undefined ? { dedup: { key: key(k), at: 1000 + k } } : {}) });
const deq = (id: number): Op => ({ kind: 'dequeue', queue: 'q', id });

/** The records of the cases, by what they are. */
const C = {
  declare: (window = 0): Change => ({ kind: 'queue-declare', name: 'q', settings: queueSettings({ dedupWindow: window, autoDelete: true }) }),
  dedup: (window: number): Change => ({ kind: 'queue-dedup', name: 'q', dedupWindow: window, dedupTtlMs: 0, dedupKey: '' }),
  consumed: (): Change => ({ kind: 'queue-consumed', name: 'q' }),
  del: (): Change => ({ kind: 'queue-delete', name: 'q' }),
  exchange: (type: 'direct' | 'fanout' = 'direct'): Change => ({ kind: 'exchange-declare', name: 'e', type, settings: exchangeSettings() }),
  exchangeDel: (): Change => ({ kind: 'exchange-delete', name: 'e' }),
  bind: (): Change => ({ kind: 'bind', exchange: 'e', queue: 'q', key: 'k' }),
  unbind: (): Change => ({ kind: 'unbind', exchange: 'e', queue: 'q', key: 'k' }),
  enqueue: (id: number, k?: number): Change => enq(id, k),
  dequeue: (id: number): Change => deq(id),
  tx: (...changes: Op[]): Change => ({ kind: 'transaction', changes }),
  drTx: (source: number, ...changes: Op[]): Change => ({ kind: 'dr-transaction', queues: ['q'], lsn: source, time: 1_700_000_000_000 + source, changes }),
  drQueue: (state: 'passive' | 'active'): Change => ({ kind: 'dr-queue', queue: 'q', source: 'a', mode: 'enqueue-and-dequeue', state }),
  drRole: (epoch: number): Change => ({ kind: 'dr-role', queue: 'q', source: 'a', mode: 'enqueue-and-dequeue', state: 'passive', epoch, divergence: 0, since: 0, idFloor: 0, fill: false, exchanges: '*', tell: false }),
  epoch: (e: number): Change => ({ kind: 'epoch', epoch: e }),
  forget: (...ks: number[]): Change => ({ kind: 'dedup-forget', queue: 'q', keys: Buffer.concat(ks.map((k) => dedupDigestBytes(key(k)))) }),
  keys: (...rows: Array<[k: number, lsn: number]>): Change => {
    const buf = Buffer.alloc(rows.length * DEDUP_ROW_BYTES);
    rows.forEach(([k, lsn], i) => {
      dedupDigestBytes(key(k)).copy(buf, i * DEDUP_ROW_BYTES);
      buf.writeDoubleLE(1000 + k, i * DEDUP_ROW_BYTES + 16);
      buf.writeDoubleLE(lsn, i * DEDUP_ROW_BYTES + 24);
    });
    return { kind: 'dedup-keys', queue: 'q', rows: buf };
  },
};

interface Case {
  name: string;
  /** The log, LSN 1 first. */
  log: Change[];
  /** Segments in file order, each the LSNs of its frames in file order (a later one of an LSN is a compaction copy). */
  layout: number[][];
  /** Reservation records to add (LSN slot, upTo) per segment index, file order. */
  reservations?: Array<{ seg: number; lsn: number; upTo: number }>;
}

const cases: Case[] = [
  // ---- a record read before its queue's declare (the declare copied forward, its segment gone)
  { name: 'queue-dedup (window on) before its declare', log: [C.declare(0), C.dedup(100)], layout: [[2], [1]] },
  { name: 'queue-dedup (window off) before its declare', log: [C.declare(100), C.dedup(0)], layout: [[2], [1]] },
  { name: 'queue-dedup before its declare, then the queue deleted', log: [C.declare(0), C.dedup(100), C.del()], layout: [[2], [1], [3]] },
  { name: 'queue-dedup before a declare that replaced its queue', log: [C.declare(0), C.dedup(100), C.declare(5)], layout: [[2], [3]] },
  { name: 'queue-dedup before a newer incarnation after a delete', log: [C.declare(0), C.dedup(100), C.del(), C.declare(7)], layout: [[2], [3, 4]] },
  { name: 'queue-dedup, then a newer one, before their declare', log: [C.declare(0), C.dedup(100), C.dedup(50)], layout: [[2, 3], [1]] },
  { name: 'queue-consumed before its declare', log: [C.declare(), C.consumed()], layout: [[2], [1]] },
  { name: 'bind before its queue\'s declare', log: [C.exchange(), C.declare(), C.bind()], layout: [[1, 3], [2]] },
  { name: 'bind before its exchange\'s declare', log: [C.declare(), C.exchange(), C.bind()], layout: [[1, 3], [2]] },
  { name: 'bind before both declares', log: [C.declare(), C.exchange(), C.bind()], layout: [[3], [1, 2]] },
  { name: 'enqueue before its queue\'s declare', log: [C.declare(), C.enqueue(1)], layout: [[2], [1]] },
  { name: 'transaction before its queue\'s declare', log: [C.declare(), C.tx(enq(1), enq(2))], layout: [[2], [1]] },
  { name: 'dr-transaction before its queue\'s declare', log: [C.declare(), C.drTx(40, enq(1))], layout: [[2], [1]] },
  { name: 'enqueue with a key before its queue\'s declare', log: [C.declare(10), C.enqueue(1, 1)], layout: [[2], [1]] },
  { name: 'dedup-keys before its queue\'s declare', log: [C.declare(10), C.keys([1, 1]), C.epoch(1)], layout: [[2, 3], [1]] },
  // ---- a stale copy read after a newer record of the same kind (copied while that one was not synced)
  { name: 'queue-dedup copied after a newer queue-dedup', log: [C.declare(0), C.dedup(100), C.dedup(50)], layout: [[1, 2], [3, 2]] },
  { name: 'dr-queue copied after a newer dr-queue', log: [C.drQueue('passive'), C.drQueue('active')], layout: [[1], [2, 1]] },
  { name: 'dr-role copied after a newer dr-role', log: [C.drRole(1), C.drRole(2)], layout: [[1], [2, 1]] },
  { name: 'dr-transaction position copied after a newer one', log: [C.declare(), C.drTx(40, enq(1)), C.drTx(50)], layout: [[1, 2], [3, 2]] },
  { name: 'epoch copied after a newer epoch', log: [C.epoch(1), C.epoch(2)], layout: [[1], [2, 1]] },
  {
    name: 'lsn-reservation copied after a newer one',
    log: [C.epoch(1), C.epoch(2)],
    layout: [[1], [2]],
    reservations: [
      { seg: 0, lsn: 1, upTo: 100 },
      { seg: 1, lsn: 2, upTo: 200 },
      { seg: 1, lsn: 1, upTo: 100 },
    ],
  },
  // ---- the newest change (kept though dead) copied forward after newer records
  { name: 'queue-delete kept as the newest change, copied after a new declare and a queue-dedup', log: [C.declare(0), C.del(), C.declare(0), C.dedup(100)], layout: [[1, 2], [3, 4, 2]] },
  { name: 'unbind kept as the newest change, copied after a new bind', log: [C.exchange(), C.declare(), C.bind(), C.unbind(), C.bind()], layout: [[1, 2, 3, 4], [5, 4]] },
  { name: 'exchange-delete kept as the newest change, copied after a new declare and bind', log: [C.declare(), C.exchange(), C.exchangeDel(), C.exchange(), C.bind()], layout: [[1, 2, 3], [4, 5, 3]] },
  // ---- dedup keys: a copy of a keyed enqueue after a forget of its key, after newer keys
  { name: 'keyed enqueue copied after a dedup-forget of its key', log: [C.declare(10), C.enqueue(1, 1), C.forget(1)], layout: [[1, 2], [3, 2]] },
  { name: 'keyed enqueue copied after newer keys', log: [C.declare(10), C.enqueue(1, 1), C.enqueue(2, 2), C.dequeue(2)], layout: [[1, 2], [3, 4, 2]] },
  { name: 'declare copied after the keys of its queue', log: [C.declare(10), C.enqueue(1, 1), C.dequeue(1), C.enqueue(2, 2)], layout: [[2, 3, 4], [1]] },
];

/** journalDirOf, removed after the test. */
async function journalOf(segments: LoggedChange[][]): Promise<string> {
  const dataDir = await journalDirOf(segments);
  dirs.push(dataDir);
  return dataDir;
}

/** What a restart of this journal gives, comparable with toEqual. */
async function restart(segments: LoggedChange[][]) {
  const { journal, recovered } = await Journal.open({ dataDir: await journalOf(segments), autoCompact: false, checkpoint: false });
  const messages: Array<[string, number, number]> = [];
  for (const q of journal.recoveredQueues()) journal.forEachRecovered(q, (f, lsn) => messages.push([q, f.id, lsn]));
  await journal.close({ checkpoint: false });
  const windows = [...recovered.dedupWindows].map(([q, w]) => [q, w.checkpointRows.toString('hex'), w.rows.toString('hex')]);
  return { config: recovered.config, messages, windows, lastLsn: recovered.lastLsn, lastChangeLsn: recovered.lastChangeLsn };
}

describe('file order - what compaction leaves reads as the log in LSN order', () => {
  for (const c of cases) {
    it(`file order - ${c.name}`, async () => {
      const entries = c.log.map((change, i): LoggedChange => ({ lsn: i + 1, change, durable: true }));
      const reservation = (r: { lsn: number; upTo: number }): LoggedChange => ({ lsn: r.lsn, change: { kind: 'lsn-reservation', upTo: r.upTo } as unknown as Change, durable: true });
      // In LSN order: each record once, the reservations (each once) as the journal wrote them, in upTo order.
      const once = [...new Map((c.reservations ?? []).map((r) => [r.upTo, r])).values()].sort((a, b) => a.upTo - b.upTo);
      const inLsnOrder = [...entries, ...once.map(reservation)];
      const laidOut = c.layout.map((lsns, seg) => [...lsns.map((lsn) => entries[lsn - 1]!), ...(c.reservations ?? []).filter((r) => r.seg === seg).map(reservation)]);
      expect(await restart(laidOut)).toEqual(await restart([inLsnOrder]));
    });
  }
});

// What a change costs in memory once it is on disk: nothing in the journal. Its queue of
// unsynced changes was trimmed only every 1,024 synced ones, and until then each
// synced change held its message, body and all: a broker whose consumers took every
// 1 MiB message at once still held the last thousand of them (374 MB after 350), in
// no figure max-memory looks at (found by the leak hunt). And a message body decoded
// from a record (a DR copy's, a paged body read back) holds its own bytes only: copied
// with Buffer.from, a small one held an 8 KiB slab of Node's buffer pool, so a DR copy
// of 150 queued 10-byte messages held 1.2 MB.
import { afterEach, describe, expect, it } from 'vitest';
import { collected } from '../../helpers/collected.js';
import { decodeRecordBatch, encodeRecordBatch } from '../../../src/replication/protocol.js';
import { decodeChange, encodeChange } from '../../../src/store/record-codec.js';
import { Journal } from '../../../src/store/journal.js';
import { durable, message, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
const journals: Journal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) await j.close();
  for (const d of dirs.splice(0)) await removeDir(d);
});

/** Append a message's enqueue at `lsn` and its dequeue after it; only a weak reference to its body stays here. */
function appendConsumed(journal: Journal, lsn: number, id: number): WeakRef<Buffer> {
  const m = message(id, 'x'.repeat(64 * 1024));
  journal.append({ lsn, change: { kind: 'enqueue', queue: 'q', message: m }, durable: true });
  journal.append({ lsn: lsn + 1, change: { kind: 'dequeue', queue: 'q', id }, durable: true });
  return new WeakRef(m.bytes);
}

describe('journal - memory', () => {
  it('journal memory - a message enqueued, consumed and synced is not held by the journal', async () => {
    const dataDir = await tempDir();
    dirs.push(dataDir);
    const { journal } = await Journal.open({ dataDir, autoCompact: false });
    journals.push(journal);
    journal.append({ lsn: 1, change: { kind: 'queue-declare', name: 'q', settings: queueSettings() }, durable: true });
    const bodies: WeakRef<Buffer>[] = [];
    let lsn = 1;
    // A few, far below the 1,024 synced changes after which the old queue was trimmed.
    for (let id = 1; id <= 10; id++, lsn += 2) bodies.push(appendConsumed(journal, lsn + 1, id));
    await durable(journal, lsn);
    for (const body of bodies) expect(await collected(body)).toBe(true);
  });
});

describe('record codec - memory', () => {
  it('record codec memory - a small message body decoded from a record (a DR batch, a journal read) is a buffer of its own size', () => {
    const entry = { lsn: 7, change: { kind: 'enqueue' as const, queue: 'q', message: message(1, 'ten bytes!') }, durable: true };
    const [fromBatch] = decodeRecordBatch(encodeRecordBatch([entry]), 'test');
    const decoded = decodeChange(encodeChange(entry));
    if (fromBatch?.change.kind !== 'enqueue' || decoded.status !== 'ok' || decoded.entry.change.kind !== 'enqueue') throw new Error('not decoded as an enqueue');
    for (const body of [fromBatch.change.message.bytes, decoded.entry.change.message.bytes]) {
      expect(body.toString()).toBe('ten bytes!');
      expect(body.buffer.byteLength).toBe(body.length);
    }
  });
});

// New message ids after a restart stay above every id the log ever carried, even
// when those messages are no longer in the journal: non-durable (never written),
// or consumed and compacted away, or far above the LSNs (a DR secondary applies
// its source's ids). A reused id would name a new message like one a DR
// secondary still holds (an enqueue-only copy keeps what the source consumed),
// which then takes it for a repeat and drops it (for a DR secondary in enqueue-only mode).
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../../src/broker/broker.js';
import type { Change } from '../../../src/broker/changes.js';
import type { BodyLoader } from '../../../src/broker/paged-message.js';
import { Journal } from '../../../src/store/journal.js';
import { restoreBroker } from '../../../src/store/restore.js';
import { durable, message, queueSettings, removeDir, tempDir } from './helpers.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await removeDir(d);
});

const noBodies: BodyLoader = {
  load: () => Buffer.alloc(0),
  loadSubject: () => undefined,
};

describe('journal: message ids across restarts', () => {
  for (const checkpoint of [true, false]) {
    it(`message ids - a restart hands out ids above every id the log carried${checkpoint ? '' : ', checkpoints off'}`, async () => {
      const dataDir = await tempDir();
      dirs.push(dataDir);
      const opts = { dataDir, autoCompact: false, segmentBytes: 1024, reserveLsnBlock: 100, checkpoint };
      const { journal } = await Journal.open(opts);
      let lsn = 0;
      const append = (change: Change, isDurable = true) => journal.append({ lsn: ++lsn, change, durable: isDurable });
      append({ kind: 'queue-declare', name: 'q', settings: queueSettings() });
      // Non-durable: never written.
      for (let id = 1; id <= 30; id++) append({ kind: 'enqueue', queue: 'q', message: message(id, 'n', { durable: false }) }, false);
      // Durable, consumed, compacted away.
      for (let id = 31; id <= 60; id++) append({ kind: 'enqueue', queue: 'q', message: message(id, 'd'.repeat(60)) });
      for (let id = 31; id <= 60; id++) append({ kind: 'dequeue', queue: 'q', id });
      await durable(journal, lsn);
      await journal.compact();
      journal.destroy(); // kill -9: no checkpoint at close
      await journal.close();
      const first = await Journal.open(opts);
      const broker = new Broker();
      restoreBroker(broker, first.journal, first.recovered, noBodies);
      expect(broker.peekNextMessageId()).toBeGreaterThan(60);
      // Ids far above the LSNs (a DR secondary applies its source's), in a transaction, not durable.
      lsn = first.recovered.lastLsn;
      first.journal.append({ lsn: ++lsn, durable: false, change: { kind: 'transaction', changes: [{ kind: 'enqueue', queue: 'q', message: message(5_000_000, 'far', { durable: false }) }] } });
      first.journal.append({ lsn: ++lsn, durable: true, change: { kind: 'epoch', epoch: 1 } });
      await durable(first.journal, lsn);
      first.journal.destroy();
      await first.journal.close();
      const second = await Journal.open(opts);
      const again = new Broker();
      restoreBroker(again, second.journal, second.recovered, noBodies);
      await second.journal.close();
      expect(again.peekNextMessageId()).toBeGreaterThan(5_000_000);
    });
  }
});

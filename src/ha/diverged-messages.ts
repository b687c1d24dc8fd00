// The messages of a diverged set (diverged-store.ts): what its journal still
// held when it was set aside and that is not in the primary's log, i.e. enqueued
// after the divergence point and not consumed before the set-aside. Read with
// the journal's own recovery, so a set is read exactly as a restart would.
import type { MessageRecord } from '../broker/changes.js';
import { decodeMessage, type ReadMessage } from '../amqp/engine/message.js';
import { Journal } from '../store/journal.js';
import type { DivergedSet } from './diverged-store.js';

export interface DivergedMessage {
  queue: string;
  /** The LSN of its enqueue in the diverged journal. */
  lsn: number;
  record: MessageRecord;
  /**
   * It came in a snapshot loaded after the divergence point: the snapshot numbers
   * its records 1..N, so whether the primary also has this message is not known.
   */
  uncertain: boolean;
}

/** Bodies read from the journal at a time: memory stays bounded whatever the set holds. */
const READ_BATCH = 256;

/** A diverged set opened for reading: its messages beyond the divergence point, queue by queue (by name), each queue in id order. */
export interface OpenDivergedSet {
  /** How many messages `messages()` yields. */
  count: number;
  messages(): Iterable<DivergedMessage>;
  close(): Promise<void>;
}

export async function openDivergedSet(set: DivergedSet): Promise<OpenDivergedSet> {
  // The set is its own data dir (journal/ inside): no compaction, no checkpoint written into it.
  const { journal } = await Journal.open({ dataDir: set.path, checkpoint: false, autoCompact: false });
  // Only the numbers of each chosen message are kept (16 bytes each); bodies are read a batch at a time.
  const chosen = new Map<string, Array<{ id: number; lsn: number; uncertain: boolean }>>();
  let count = 0;
  for (const queue of journal.recoveredQueues().sort()) {
    const rows: Array<{ id: number; lsn: number; uncertain: boolean }> = [];
    journal.forEachRecovered(queue, (f, lsn) => {
      const fromSnapshot = lsn < set.snapshotPoint;
      // A snapshot record stands for the state at the snapshot point.
      if ((fromSnapshot ? set.snapshotPoint : lsn) > set.after) rows.push({ id: f.id, lsn, uncertain: fromSnapshot });
    });
    if (rows.length > 0) chosen.set(queue, rows);
    count += rows.length;
  }
  return {
    count,
    *messages() {
      for (const [queue, rows] of chosen) {
        for (let i = 0; i < rows.length; i += READ_BATCH) {
          const batch = rows.slice(i, i + READ_BATCH);
          const records = journal.readRecords(batch.map((r) => ({ queue, id: r.id })));
          for (let k = 0; k < batch.length; k++) yield { queue, lsn: batch[k]!.lsn, record: records[k]!, uncertain: batch[k]!.uncertain };
        }
      }
    },
    close: () => journal.close({ checkpoint: false }),
  };
}

/** One exported message as a JSON line: where it was, its AMQP properties, and the exact bytes (base64). */
export function exportLine(m: DivergedMessage): string {
  let decoded: ReadMessage | undefined;
  try {
    decoded = decodeMessage(m.record.bytes);
  } catch {
    // Exported as bytes only: the broker stored what the sender encoded, decodable or not.
  }
  const p = decoded?.properties ?? {};
  // The export's field names (message_id...) are those of the AMQP clients people script with.
  const properties = {
    message_id: p['message-id'],
    correlation_id: p['correlation-id'],
    to: p['to'],
    subject: p['subject'],
    reply_to: p['reply-to'],
    content_type: p['content-type'],
    user_id: p['user-id'],
    group_id: p['group-id'],
    creation_time: p['creation-time'],
  };
  return JSON.stringify(
    {
      queue: m.queue,
      lsn: m.lsn,
      id: m.record.id,
      durable: m.record.durable,
      priority: m.record.priority,
      uncertain: m.uncertain,
      properties,
      application_properties: decoded?.applicationProperties,
      encoded: m.record.bytes.toString('base64'),
    },
    // Buffers (binary message ids) reach the replacer as their toJSON form.
    (_k, v: unknown) => (isBufferJson(v) ? Buffer.from(v.data).toString('base64') : typeof v === 'bigint' ? String(v) : v),
  );
}

function isBufferJson(v: unknown): v is { type: 'Buffer'; data: number[] } {
  return typeof v === 'object' && v !== null && (v as { type?: unknown }).type === 'Buffer' && Array.isArray((v as { data?: unknown }).data);
}

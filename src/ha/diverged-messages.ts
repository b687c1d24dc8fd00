// The messages of a diverged set (diverged-store.ts): what its journal still
// held when it was set aside and that is not in the primary's log, i.e. enqueued
// after the divergence point and not consumed before the set-aside. Read with
// the journal's own recovery, so a set is read exactly as a restart would.
import rhea from 'rhea';
import type { MessageRecord } from '../broker/changes.js';
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

/** The set's messages beyond its divergence point, in LSN order. */
export async function readDivergedMessages(set: DivergedSet): Promise<DivergedMessage[]> {
  // The set is its own data dir (journal/ inside): no compaction, no checkpoint written into it.
  const { journal, recovered } = await Journal.open({ dataDir: set.path, checkpoint: false, autoCompact: false });
  try {
    const out: DivergedMessage[] = [];
    for (const entry of recovered.changes) {
      if (entry.change.kind !== 'enqueue') continue;
      const fromSnapshot = entry.lsn < set.snapshotPoint;
      // A snapshot record stands for the state at the snapshot point.
      const at = fromSnapshot ? set.snapshotPoint : entry.lsn;
      if (at <= set.after) continue;
      out.push({ queue: entry.change.queue, lsn: entry.lsn, record: entry.change.message, uncertain: fromSnapshot });
    }
    return out;
  } finally {
    await journal.close({ checkpoint: false });
  }
}

/** One exported message as a JSON line: where it was, its AMQP properties, and the exact bytes (base64). */
export function exportLine(m: DivergedMessage): string {
  let decoded: { properties?: unknown; application_properties?: unknown; message_id?: unknown; subject?: unknown } = {};
  try {
    decoded = rhea.message.decode(m.record.bytes) as typeof decoded;
  } catch {
    // Exported as bytes only: the broker stored what the sender encoded, decodable or not.
  }
  const { message_id, correlation_id, to, subject, reply_to, content_type, user_id, group_id, creation_time } = decoded as Record<string, unknown>;
  return JSON.stringify(
    {
      queue: m.queue,
      lsn: m.lsn,
      id: m.record.id,
      durable: m.record.durable,
      priority: m.record.priority,
      uncertain: m.uncertain,
      properties: { message_id, correlation_id, to, subject, reply_to, content_type, user_id, group_id, creation_time },
      application_properties: decoded.application_properties,
      encoded: m.record.bytes.toString('base64'),
    },
    // Buffers (binary message ids) reach the replacer as their toJSON form.
    (_k, v: unknown) => (isBufferJson(v) ? Buffer.from(v.data).toString('base64') : typeof v === 'bigint' ? String(v) : v),
  );
}

function isBufferJson(v: unknown): v is { type: 'Buffer'; data: number[] } {
  return typeof v === 'object' && v !== null && (v as { type?: unknown }).type === 'Buffer' && Array.isArray((v as { data?: unknown }).data);
}

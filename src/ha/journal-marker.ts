// Whether a restarted backup may resume the primary's log from the newest change
// in its journal (and be sent only the changes after it) instead of asking for a
// full snapshot.
//
// A backup journals what a primary journals: durable changes. That is enough to
// resume from while the backup holds nothing non-durable (no non-durable message,
// queue or exchange): the primary's log after the journal's newest record holds
// every change it skipped. So the marker is written when a backup holds nothing
// non-durable after a snapshot load (ha-manager checks again every few seconds),
// and removed, durably, before the journal skips a non-durable change, when a
// snapshot load begins, and before a promotion hands out its first LSN (a
// primary's journal is never resumed from). A missing marker only costs a
// snapshot; a marker that lies would lose messages, so removal comes first and is
// synced.
import { closeSync, existsSync, fsyncSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const MARKER = 'ha-journal-complete';

export function isJournalComplete(dataDir: string): boolean {
  return existsSync(join(dataDir, MARKER));
}

export function markJournalComplete(dataDir: string): void {
  writeFileSync(join(dataDir, MARKER), 'the journal, and the primary\'s log after its newest change, are everything this backup holds\n');
  syncDir(dataDir);
}

export function clearJournalComplete(dataDir: string): void {
  if (!isJournalComplete(dataDir)) return;
  rmSync(join(dataDir, MARKER), { force: true });
  syncDir(dataDir);
}

/** fsync a directory, so a rename or removal in it is durable. */
export function syncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

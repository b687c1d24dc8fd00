// Whether this data dir's journal holds every change the broker applied, so a
// restarted backup can resume the primary's log from its newest change instead
// of asking for a full snapshot.
//
// A backup journals everything it applies (durable or not), in LSN order; the
// journal is a prefix of the primary's log. A primary journals durable changes
// only, so once a broker has been primary its journal is no longer such a
// prefix. Hence: the marker is written when a backup has loaded a snapshot
// (its journal is then a complete prefix), and removed, durably, before a
// promotion hands out its first LSN. A missing marker only costs a snapshot; a
// marker that lies would lose messages, so removal comes first and is synced.
import { closeSync, existsSync, fsyncSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const MARKER = 'ha-journal-complete';

export function isJournalComplete(dataDir: string): boolean {
  return existsSync(join(dataDir, MARKER));
}

export function markJournalComplete(dataDir: string): void {
  writeFileSync(join(dataDir, MARKER), 'every change this broker applied as a backup is in the journal\n');
  syncDir(dataDir);
}

export function clearJournalComplete(dataDir: string): void {
  if (!isJournalComplete(dataDir)) return;
  rmSync(join(dataDir, MARKER), { force: true });
  syncDir(dataDir);
}

function syncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

// Where each cluster epoch began in the log, kept in <data-dir>/ha-epochs.json.
// A backup that followed an older epoch shares this primary's history only up
// to where the next epoch began: beyond that its changes are not in this
// primary's log (they may still have been confirmed to clients by the old
// primary), so it needs a snapshot rather than a diff, and keeps them aside.
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface EpochStart {
  epoch: number;
  startLsn: number;
}

export class EpochHistory {
  private entries: EpochStart[] = [];
  private readonly file: string;
  /** Inside batch(): records are kept in memory, the file written once at its end. */
  private batching = false;
  private dirty = false;

  constructor(dataDir: string) {
    this.file = join(dataDir, 'ha-epochs.json');
    if (existsSync(this.file)) {
      try {
        const parsed = JSON.parse(readFileSync(this.file, 'utf8')) as EpochStart[];
        if (Array.isArray(parsed)) this.entries = parsed.filter((e) => Number.isInteger(e.epoch) && Number.isInteger(e.startLsn));
      } catch {
        // An unreadable history only costs a snapshot at the next join.
        this.entries = [];
      }
    }
  }

  get latest(): EpochStart | undefined {
    return this.entries[this.entries.length - 1];
  }

  get all(): readonly EpochStart[] {
    return this.entries;
  }

  record(epoch: number, startLsn: number): void {
    if (this.entries.some((e) => e.epoch === epoch)) return;
    const last = this.entries[this.entries.length - 1];
    this.entries.push({ epoch, startLsn });
    if (last && last.epoch > epoch) this.entries.sort((a, b) => a.epoch - b.epoch);
    if (this.batching) this.dirty = true;
    else this.write();
  }

  /**
   * Run `fn`, whose records are written to the file once, at its end: a batch of
   * replicated changes may hold many epoch records (a primary's, or a bad one's),
   * and writing the whole history once per record was quadratic (5,000 in one
   * batch held a backup's event loop 4 s).
   */
  batch<T>(fn: () => T): T {
    if (this.batching) return fn();
    this.batching = true;
    try {
      return fn();
    } finally {
      this.batching = false;
      if (this.dirty) this.write();
    }
  }

  private write(): void {
    this.dirty = false;
    const tmp = `${this.file}.tmp`;
    writeFileSync(tmp, JSON.stringify(this.entries));
    renameSync(tmp, this.file);
  }

  /** Forget everything (the store was replaced by a snapshot). */
  replace(entries: EpochStart[]): void {
    this.entries = [];
    for (const e of entries) this.record(e.epoch, e.startLsn);
    if (entries.length === 0) writeFileSync(this.file, '[]');
  }

  /** Does a log that reached `lsn` in `epoch` agree with ours up to there? */
  sharesPrefix(epoch: number, lsn: number): boolean {
    const current = this.latest?.epoch ?? 0;
    if (epoch === current) return true;
    if (epoch > current) return false;
    if (epoch !== 0 && !this.entries.some((e) => e.epoch === epoch)) return false;
    const next = this.entries.find((e) => e.epoch > epoch);
    return next === undefined || lsn < next.startLsn;
  }
}

/**
 * How far a log that reached `lsn` in `epoch` agrees with a history whose log is
 * at `head`: every change up to the returned LSN is the same in both, the ones
 * after it (up to `lsn`) only the other log has. An epoch the history does not
 * know, or a newer one, agrees on nothing that can be proved: 0.
 */
export function sharedThrough(history: EpochHistory, epoch: number, lsn: number, head: number): number {
  const current = history.latest?.epoch ?? 0;
  if (epoch > current) return 0;
  if (epoch === current) return Math.min(lsn, head);
  if (epoch !== 0 && !history.all.some((e) => e.epoch === epoch)) return 0;
  const next = history.all.find((e) => e.epoch > epoch);
  return Math.min(lsn, head, next === undefined ? head : next.startLsn - 1);
}

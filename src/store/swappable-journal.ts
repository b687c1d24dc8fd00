// The broker's journal, and its swap for an empty one while an HA backup loads its
// primary's snapshot. Until the snapshot is complete the old store is kept aside and
// a marker file names it, so a crash in between restarts from the old, complete store
// instead of the new, partial one.
import { existsSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Broker } from '../broker/broker.js';
import { dropDivergenceNote, keepIfDiverged, noteDivergence, type DivergedInfo } from '../ha/diverged-store.js';
import type { Logger } from '../ops/log.js';
import type { CheckpointWindow } from './checkpoint.js';
import { JOURNAL_DIR_NAME, Journal, type Recovered } from './journal.js';
import type { Pager } from './pager.js';

const SNAPSHOT_MARKER = 'ha-snapshot-incomplete';
const SET_ASIDE = /^journal\.replaced-\d+$/;

export interface SwappableJournalOptions {
  dataDir: string;
  /** Checkpoint past this many bytes of segments; 0: never. */
  checkpointBytes: number;
  /** Its state goes with the old store and comes back from the snapshot. */
  broker: Broker;
  pager: Pager;
  /** The store's own lines. */
  log: Logger;
  /** Where kept divergence is announced: the broker's log, as operators know it. */
  brokerLog: Logger;
}

export class SwappableJournal {
  private journal: Journal | undefined;

  constructor(private readonly o: SwappableJournalOptions) {}

  /** The journal in use now (undefined before open); readers must not keep it. */
  get current(): Journal | undefined {
    return this.journal;
  }

  /** Open the store, first going back to the old one if a snapshot load was cut short. */
  async open(repair?: boolean): Promise<Recovered> {
    this.restoreInterruptedSnapshot();
    const { journal, recovered } = await Journal.open({ ...this.journalOptions(), repair, logger: this.o.log });
    this.use(journal);
    return recovered;
  }

  /**
   * A backup about to load a snapshot: set the old store aside, start an empty one.
   * `diverged`: the old store holds changes the primary lacks; it is kept (see
   * src/ha/diverged-store.ts) instead of deleted once the snapshot is in.
   */
  async setAsideForSnapshot(diverged?: DivergedInfo): Promise<void> {
    const dir = this.o.dataDir;
    const old = this.journal!;
    this.o.broker.log.detach(old);
    // It is about to be set aside: a checkpoint of it would be wasted work.
    await old.close({ checkpoint: false });
    const current = join(dir, JOURNAL_DIR_NAME);
    const aside = join(dir, `journal.replaced-${Date.now()}`);
    if (existsSync(current)) renameSync(current, aside);
    if (diverged && existsSync(aside)) noteDivergence(aside, diverged);
    // Until the snapshot is complete, a restart must go back to the old store.
    writeFileSync(join(dir, SNAPSHOT_MARKER), aside);
    this.o.broker.resetState();
    this.o.pager.reset();
    const { journal } = await Journal.open({ ...this.journalOptions(), logger: this.o.log });
    this.use(journal);
    // First again, as at start: other readers may ask it about the change they are handed.
    this.o.broker.log.attach(journal, { first: true });
  }

  /** The snapshot is in: the stores set aside go, except one that holds diverged changes. */
  dropSetAside(): void {
    const dir = this.o.dataDir;
    // Before the marker goes: a crash in between must not leave a kept store to be deleted.
    for (const name of readdirSync(dir)) {
      if (!SET_ASIDE.test(name)) continue;
      const kept = keepIfDiverged(dir, join(dir, name));
      if (kept) {
        this.o.brokerLog.warn(
          { path: kept.path, epoch: kept.epoch, from: kept.after + 1, through: kept.through },
          `kept the changes the primary lacks (epoch ${kept.epoch}, LSN ${kept.after + 1} to ${kept.through}) in ${kept.path}: list, export or re-publish them with tandem ha diverged`,
        );
      }
    }
    rmSync(join(dir, SNAPSHOT_MARKER), { force: true });
    for (const name of readdirSync(dir)) {
      if (name.startsWith('journal.replaced-')) rmSync(join(dir, name), { recursive: true, force: true });
    }
  }

  private use(journal: Journal): void {
    this.journal = journal;
    journal.windowSource = this.dedupWindows;
  }

  /** A crash while loading a snapshot: the new store is partial, the old one complete. */
  private restoreInterruptedSnapshot(): void {
    const dir = this.o.dataDir;
    const marker = join(dir, SNAPSHOT_MARKER);
    if (!existsSync(marker)) return;
    const aside = readFileSync(marker, 'utf8').trim();
    rmSync(join(dir, JOURNAL_DIR_NAME), { recursive: true, force: true });
    if (aside && existsSync(aside)) renameSync(aside, join(dir, JOURNAL_DIR_NAME));
    // The snapshot starts again, and with it the set-aside of a diverged store.
    if (aside) dropDivergenceNote(aside);
    rmSync(marker, { force: true });
    this.o.log.warn({ restored: aside }, 'a snapshot load was interrupted: restored the store it was replacing');
  }

  /** What a journal checkpoint keeps of the duplicate-detection windows: durable queues' journaled keys. */
  private readonly dedupWindows = (upToLsn: number): CheckpointWindow[] => {
    const out: CheckpointWindow[] = [];
    for (const q of this.o.broker.queues.values()) if (q.dedup && q.settings.durable) out.push({ queue: q.name, rows: q.dedup.rows({ upToLsn }) });
    return out;
  };

  private journalOptions(): { dataDir: string; checkpoint: boolean; checkpointBytes: number } {
    return { dataDir: this.o.dataDir, checkpoint: this.o.checkpointBytes > 0, checkpointBytes: this.o.checkpointBytes };
  }
}

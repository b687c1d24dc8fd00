// Whether the DR source's window of recent changes is fed by the broker's change log.
// An HA backup loading a snapshot takes it off the log: copying the snapshot's records
// into it only cost time (a tenth of a backup's catch-up), and the window is reset
// once the snapshot is in anyway.
import type { ChangeLog } from '../broker/change-log.js';
import type { DrSource } from './source.js';

export class DrWindowFeed {
  private paused = false;

  /** `source` undefined: this broker is no DR source (dr-retain-changes 0), nothing to feed. */
  constructor(
    private readonly log: ChangeLog,
    private readonly source: DrSource | undefined,
  ) {}

  /** Off the log until resume(): the backup is about to load a snapshot. */
  pause(): void {
    if (this.source) this.log.detach(this.source);
    this.paused = true;
  }

  /** Back on the log (once, after the other sinks), serving from the log's position on. */
  resume(): void {
    this.paused = false;
    if (!this.source) return;
    this.source.resetWindow(this.log.lsn);
    this.log.detach(this.source);
    this.log.attach(this.source);
  }

  /** A promotion that cut a snapshot load short: the window must be fed again. */
  resumeIfPaused(): void {
    if (this.paused) this.resume();
  }
}

// Typed errors of the journal. Each has a stable `code` (callers and the CLI map
// codes, not messages) and a message that tells the operator what to do next.
// The brand (Symbol.for) keeps `isStoreError` true across two copies of the module.

const kStoreError = Symbol.for('tandem.store.error');

export const StoreErrorCode = {
  journalCorrupt: 'TANDEM_ERR_JOURNAL_CORRUPT',
  dataDirLocked: 'TANDEM_ERR_DATA_DIR_LOCKED',
  diskFull: 'TANDEM_ERR_DISK_FULL',
  journalIo: 'TANDEM_ERR_JOURNAL_IO',
  journalRead: 'TANDEM_ERR_JOURNAL_READ',
} as const;
export type StoreErrorCode = (typeof StoreErrorCode)[keyof typeof StoreErrorCode];

export abstract class StoreError extends Error {
  abstract readonly code: StoreErrorCode;
  readonly [kStoreError] = true;
}

export function isStoreError(value: unknown): value is StoreError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[kStoreError] === true;
}

/**
 * A record that fails its CRC (or does not decode) and is not a crash-torn tail:
 * valid records follow it, or may (`reason` says which).
 */
export class JournalCorruptError extends StoreError {
  readonly code = StoreErrorCode.journalCorrupt;
  override readonly name = 'JournalCorruptError';
  constructor(
    readonly file: string,
    readonly offset: number,
    readonly reason: string,
    options?: ErrorOptions,
  ) {
    super(
      `journal record at byte offset ${offset} of ${file} is corrupt (${reason}). ` +
        `This is damage, not a crash-torn write, so the broker will not start on its own. ` +
        `Restore the data directory from a backup or an HA peer, or run \`tandemd --repair\` to remove ` +
        `the unreadable records and keep every valid one (each changed segment is kept as it was as *.corrupt; what was removed is logged).`,
      options,
    );
  }
}

/**
 * A segment shorter than the checkpoint proves it was: records that were synced (and
 * so accepted) are gone. Not a torn tail, which only ever loses an unconfirmed write.
 */
export class JournalTruncatedError extends StoreError {
  readonly code = StoreErrorCode.journalCorrupt;
  override readonly name = 'JournalTruncatedError';
  constructor(
    readonly file: string,
    readonly size: number,
    readonly provenEnd: number,
    options?: ErrorOptions,
  ) {
    super(
      `journal segment ${file} has ${size} bytes, but the checkpoint proves synced records reached byte ${provenEnd}: ` +
        `${provenEnd - size} bytes of accepted records are missing (the file was cut, not torn by a crash). ` +
        `The broker will not start on its own. Restore the data directory from a backup or an HA peer, ` +
        `or run \`tandemd --repair\` to keep every record before the cut (it reports what was lost).`,
      options,
    );
  }
}

export class DataDirLockedError extends StoreError {
  readonly code = StoreErrorCode.dataDirLocked;
  override readonly name = 'DataDirLockedError';
  constructor(
    readonly lockFile: string,
    readonly pid: number,
    options?: ErrorOptions,
  ) {
    super(
      `data directory is in use by process ${pid} (lock file ${lockFile}). ` +
        `Stop that broker first, or give this one another data directory. ` +
        `Remove the lock file only if PID ${pid} is not a tandem broker.`,
      options,
    );
  }
}

export class DiskFullError extends StoreError {
  readonly code = StoreErrorCode.diskFull;
  override readonly name = 'DiskFullError';
  constructor(
    readonly dir: string,
    options?: ErrorOptions,
  ) {
    super(
      `no space left for the journal in ${dir}: the record was not stored. ` +
        `Free space in ${dir} (or raise the quota); the broker retries later writes by itself.`,
      options,
    );
  }
}

export class JournalIoError extends StoreError {
  readonly code = StoreErrorCode.journalIo;
  override readonly name = 'JournalIoError';
  constructor(
    message: string,
    options?: ErrorOptions,
  ) {
    super(`${message}. Check the disk and the system log (dmesg), then restart the broker; the journal is not written after an I/O error.`, options);
  }
}

export const storeErrors = { JournalCorruptError, DataDirLockedError, DiskFullError, JournalIoError } as const;

/** A paged-out message body could not be read back from the journal. */
export class JournalReadError extends StoreError {
  readonly code = StoreErrorCode.journalRead;
  override readonly name: string = 'JournalReadError';
  constructor(message: string, options?: ErrorOptions) {
    super(
      `${message}. The message stays queued (nothing was dequeued); check the disk and the system log (dmesg). ` +
        `If the journal is damaged, restart the broker: recovery checks every record and says what to do.`,
      options,
    );
  }
}

/**
 * The journal record that holds a message is damaged (its checksum or encoding fails,
 * or its segment is shorter than the index says): reading it again will not help,
 * unlike an I/O error. The broker sets that one message aside (Queue.setAside).
 */
export class JournalRecordDamagedError extends JournalReadError {
  override readonly name = 'JournalRecordDamagedError';
}

// DR source passwords, kept out of the journal. The journal (and every HA backup
// it is replicated to) holds a DR source as `user@host:port,...`; the password
// lives in `dr-credentials` in the data directory, mode 0600, keyed by that source.
// An HA primary hands them to its backups on the replication link (a message of its
// own, never journaled), so after a failover of the secondary cluster the new primary
// still logs in to the DR source.
import { chmodSync, closeSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { registerSecret, registerSecrets } from '../ops/secrets.js';

export const DR_CREDENTIALS_FILE = 'dr-credentials';

/**
 * The broker's store (one data directory per process), for the places that meet a
 * source URL without a handle on it: the round trip's requests to the other site.
 * Until one exists (tools, unit tests), passwords are held in memory only.
 */
let active: DrCredentials | undefined;
const unsaved = new Map<string, string>();

/** Keep the password of a source (`user@host:port,...`) that came with one. */
export function rememberPassword(source: string, password: string): void {
  registerSecret(password);
  if (active) active.set(source, password);
  else unsaved.set(source, password);
}

/** The password kept for a source, if any. */
export function knownPassword(source: string): string | undefined {
  return active?.get(source) ?? unsaved.get(source);
}

export class DrCredentials {
  private readonly path: string;
  private readonly passwords = new Map<string, string>();
  private readonly listeners: Array<() => void> = [];

  constructor(dataDir: string) {
    this.path = join(dataDir, DR_CREDENTIALS_FILE);
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch {
      return;
    }
    const parsed = JSON.parse(text) as Record<string, unknown>;
    for (const [source, password] of Object.entries(parsed)) {
      if (typeof password !== 'string') continue;
      this.passwords.set(source, password);
    }
    registerSecrets(this.passwords.values());
  }

  /** This store is the broker's: rememberPassword() and knownPassword() use it from now on. */
  activate(): this {
    active = this;
    this.setAll(Object.fromEntries(unsaved));
    unsaved.clear();
    return this;
  }

  get(source: string): string | undefined {
    return this.passwords.get(source);
  }

  /** Every source and its password (for the HA backups of this broker). */
  all(): Record<string, string> {
    return Object.fromEntries(this.passwords);
  }

  /** Call `listener` after each change of a password. */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** Keep a source's password (synced before this returns: the journal will name the source). */
  set(source: string, password: string): void {
    this.setAll({ [source]: password });
  }

  /**
   * Keep several sources' passwords with one write and sync of the file (what an HA
   * backup is handed by its primary). One per source, a map of a thousand held the
   * backup's event loop 2.5 s.
   */
  setAll(passwords: Readonly<Record<string, string>>): void {
    const entries = Object.entries(passwords);
    registerSecrets(entries.map(([, password]) => password));
    let changed = false;
    for (const [source, password] of entries) {
      if (this.passwords.get(source) === password) continue;
      this.passwords.set(source, password);
      changed = true;
    }
    if (!changed) return;
    this.save();
    for (const l of this.listeners) l();
  }

  private save(): void {
    const tmp = `${this.path}.tmp`;
    const fd = openSync(tmp, 'w', 0o600);
    try {
      writeSync(fd, `${JSON.stringify(Object.fromEntries(this.passwords), null, 1)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    chmodSync(tmp, 0o600);
    renameSync(tmp, this.path);
  }
}

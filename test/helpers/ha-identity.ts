// The admin identity brokers of a test cluster use with each other when they listen
// off loopback (where ha-cluster=yes needs auth=yes): a users file with one admin,
// its password in a 0600 file, and the environment the CLI and clients take it from.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hashPassword } from '../../src/admin/users.js';

export const HA_USER = 'ha';
export const HA_PASSWORD = 'tandem-test-ha-password';

export interface HaIdentity {
  usersFile: string;
  passwordFile: string;
  /** tandemd.conf lines: auth on, the users file, the HA identity. */
  config: string;
}

/** Write the files under `dir`; point `tandem -b ha@...` and failover-client.mjs at the password. */
export async function haIdentity(dir: string): Promise<HaIdentity> {
  const usersFile = join(dir, 'users');
  const passwordFile = join(dir, 'ha-password');
  writeFileSync(usersFile, `${HA_USER}:admin:${await hashPassword(HA_PASSWORD)}\n`, { mode: 0o600 });
  writeFileSync(passwordFile, `${HA_PASSWORD}\n`, { mode: 0o600 });
  process.env.TANDEM_PASSWORD = HA_PASSWORD;
  process.env.TANDEM_CLIENT_USER = HA_USER;
  process.env.TANDEM_CLIENT_PASSWORD = HA_PASSWORD;
  return { usersFile, passwordFile, config: ['auth=yes', `users-file=${usersFile}`, `ha-username=${HA_USER}`, `ha-password-file=${passwordFile}`, ''].join('\n') };
}

// The users file: one user a line, "name:role:scrypt$N$r$p$salt$hash", or
// "name:role:!" for a user who has no password and logs in by certificate only
// (SASL EXTERNAL, src/amqp/sasl-external.ts).
// Passwords are never stored, only salted scrypt hashes; roles are "admin" or
// "user". The broker re-reads the file when it changes, so `tandem user add`
// takes effect without a restart; a file that no longer parses is not taken (the
// last good one stays, and the error is logged).
import { randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { invalidArgument, TandemError } from '../broker/errors.js';
import type { Logger } from '../ops/log.js';
import { readBoundedText } from '../ops/bounded-read.js';
import { MAX_WATCHED_FILE_BYTES, WatchedFile } from '../ops/watched-file.js';
import type { ScryptFn } from './password-hasher.js';

export type Role = 'admin' | 'user';

export interface UserRecord {
  name: string;
  role: Role;
  hash: string;
}

const scryptParams = { N: 16384, r: 8, p: 1 };
/** The most memory a users-file line's scrypt parameters may ask for (128 * N * r bytes). */
const MAX_SCRYPT_BYTES = 256 * 1024 * 1024;

/** The hash of a user who has no password: no password matches it. */
export const NO_PASSWORD = '!';

/** Node's scrypt, on libuv's pool: right for the CLI; the broker hashes on its own thread (password-hasher.ts). */
const poolScrypt: ScryptFn = (password, salt, keylen, { N, r, p }) =>
  new Promise((resolve, reject) =>
    scryptCb(password, salt, keylen, { N, r, p, maxmem: 256 * N * r + 1024 * 1024 }, (err, key) => (err ? reject(err) : resolve(key))),
  );

export async function hashPassword(password: string, scrypt: ScryptFn = poolScrypt, signal?: AbortSignal): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, 32, scryptParams, signal);
  return `scrypt$${scryptParams.N}$${scryptParams.r}$${scryptParams.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export async function verifyPassword(password: string, hash: string, scrypt: ScryptFn = poolScrypt, signal?: AbortSignal): Promise<boolean> {
  const parts = hash.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number);
  // Parameters come from the file: bounded, so a hand-edited line cannot ask for
  // gigabytes (scrypt takes 128 * N * r bytes: N = 2^20 and r = 32, each in range
  // alone, were 4 GiB per login). 'tandem user add' writes N = 16384, r = 8: 16 MiB.
  if (![N, r, p].every(Number.isInteger) || N < 2 || N > 2 ** 20 || r < 1 || r > 32 || p < 1 || p > 16 || 128 * N * r > MAX_SCRYPT_BYTES) return false;
  const salt = Buffer.from(parts[4], 'base64');
  const expected = Buffer.from(parts[5], 'base64');
  if (expected.length < 16 || expected.length > 128) return false;
  const key = await scrypt(password, salt, expected.length, { N, r, p }, signal);
  return key.length === expected.length && timingSafeEqual(key, expected);
}

/**
 * The identity SASL ANONYMOUS gives (engine/sasl.ts): a user of that name would share
 * it, so the broker could not tell a password login from no login at all (its role
 * was never granted, and ACL rules for it applied to every anonymous client).
 */
export const ANONYMOUS_IDENTITY = 'anonymous';

export function validateUserName(name: string): void {
  if (!/^[A-Za-z0-9_.@-]{1,64}$/.test(name)) {
    throw invalidArgument(`user name '${name}' must be 1-64 letters, digits, '_', '.', '@' or '-'`);
  }
  if (name === ANONYMOUS_IDENTITY) throw invalidArgument(`user name '${name}' is reserved: it is the identity of clients that log in with SASL ANONYMOUS`);
}

export function parseUsers(text: string, path: string): Map<string, UserRecord> {
  const users = new Map<string, UserRecord>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const [name, role, hash] = line.split(':');
    if (!name || (role !== 'admin' && role !== 'user') || !(hash?.startsWith('scrypt$') || hash === NO_PASSWORD)) {
      throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `${path}:${i + 1}: expected name:admin|user:scrypt$... (or ! for no password), fix or re-add the user with 'tandem user add'`);
    }
    users.set(name, { name, role, hash });
  });
  return users;
}

/** parseUsers for the broker, which refuses a file naming the reserved user (the CLI reads it, so `tandem user del` can mend it). */
export function parseServedUsers(text: string, path: string): Map<string, UserRecord> {
  const users = parseUsers(text, path);
  if (users.has(ANONYMOUS_IDENTITY)) {
    throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `${path}: the user name '${ANONYMOUS_IDENTITY}' is reserved for clients that log in with SASL ANONYMOUS: rename the user (tandem user del ${ANONYMOUS_IDENTITY}, tandem user add)`);
  }
  return users;
}

/** The users file as `tandem user` reads it: bounded and strict UTF-8, as the broker reads it (WatchedFile). */
export function readUsers(path: string): Map<string, UserRecord> {
  if (!existsSync(path)) return new Map();
  return parseUsers(readBoundedText(path, MAX_WATCHED_FILE_BYTES, 'the users file'), path);
}

/**
 * Write the users file so the broker (user tandem, group tandem) can still read it:
 * an existing file keeps its group and mode (less what others could read); a new one
 * is 0640 with the group of its directory (/etc/tandem is root:tandem in the packages).
 */
export function writeUsers(path: string, users: Map<string, UserRecord>): void {
  mkdirSync(dirname(path), { recursive: true });
  const lines = ['# tandem users: name:role:hash (managed by `tandem user add|del`)'];
  for (const u of users.values()) lines.push(`${u.name}:${u.role}:${u.hash}`);
  let mode = 0o640;
  let gid = statSync(dirname(path)).gid;
  if (existsSync(path)) {
    const st = statSync(path);
    mode = st.mode & 0o770;
    gid = st.gid;
  }
  // Write then rename, so a broker re-reading the file never sees half of it.
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, lines.join('\n') + '\n', { mode: 0o600 });
  try {
    chownSync(tmp, -1, gid);
  } catch {
    // Not ours to give away (run as a user outside that group): the file stays in our group.
  }
  chmodSync(tmp, mode);
  renameSync(tmp, path);
}

export interface UserDirectoryOptions {
  /** Where scrypt runs (the broker: its own thread). */
  scrypt?: ScryptFn;
  /** Told when the file changed into something that does not parse. */
  log?: Logger;
}

/**
 * The users file as the broker sees it, re-read when it changes. At start a bad file
 * is an error (the broker refuses to start); later, the last good copy stays in use.
 */
export class UserDirectory {
  private readonly file: WatchedFile<Map<string, UserRecord>>;

  constructor(
    readonly path: string,
    private readonly options: UserDirectoryOptions = {},
  ) {
    this.file = new WatchedFile(path, parseServedUsers, () => new Map(), 'users file', options.log);
  }

  private get users(): Map<string, UserRecord> {
    return this.file.value;
  }

  get size(): number {
    return this.users.size;
  }

  /** The user's role if name and password match, else undefined; rejects if `signal` aborts first (the asker is gone). */
  async authenticate(name: string, password: string, signal?: AbortSignal): Promise<Role | undefined> {
    const user = this.users.get(name);
    // A certificate-only user has no password: it fails as slowly as an unknown one.
    if (!user || user.hash === NO_PASSWORD) {
      // Spend the same time as a real check so names cannot be probed by timing.
      await hashPassword(password, this.options.scrypt, signal);
      return undefined;
    }
    return (await verifyPassword(password, user.hash, this.options.scrypt, signal)) ? user.role : undefined;
  }

  role(name: string): Role | undefined {
    return this.users.get(name)?.role;
  }
}

/**
 * Why this broker would turn `user`/`password` away as an admin (the identity another
 * DR site's bridge and requests log in with), or undefined if it would let it in; always
 * undefined when the broker does not require credentials (`auth=no`).
 */
export async function refusesAdminLogin(auth: boolean, users: UserDirectory, user: string | undefined, password: string | undefined): Promise<string | undefined> {
  if (!auth) return undefined;
  if (!user) return 'names no user';
  if (password === undefined || password === '') return `names the user '${user}' but no password`;
  const role = await users.authenticate(user, password);
  if (role === undefined) return `is refused by this site (unknown user '${user}' or a wrong password)`;
  if (role !== 'admin') return `names '${user}', who is not an admin here`;
  return undefined;
}

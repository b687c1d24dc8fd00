// The users file: one user a line, "name:role:scrypt$N$r$p$salt$hash".
// Passwords are never stored, only salted scrypt hashes; roles are "admin" or
// "user". The broker re-reads the file when it changes, so `tandem user add`
// takes effect without a restart.
import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { invalidArgument, TandemError } from '../broker/errors.js';

export type Role = 'admin' | 'user';

export interface UserRecord {
  name: string;
  role: Role;
  hash: string;
}

const scryptParams = { N: 16384, r: 8, p: 1 };

function scrypt(password: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scryptCb(password, salt, keylen, options, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, 32, scryptParams);
  return `scrypt$${scryptParams.N}$${scryptParams.r}$${scryptParams.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export async function verifyPassword(password: string, hash: string): Promise<boolean> {
  const parts = hash.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number);
  const salt = Buffer.from(parts[4], 'base64');
  const expected = Buffer.from(parts[5], 'base64');
  const key = await scrypt(password, salt, expected.length, { N, r, p, maxmem: 256 * N * r });
  return key.length === expected.length && timingSafeEqual(key, expected);
}

export function validateUserName(name: string): void {
  if (!/^[A-Za-z0-9_.@-]{1,64}$/.test(name)) {
    throw invalidArgument(`user name '${name}' must be 1-64 letters, digits, '_', '.', '@' or '-'`);
  }
}

export function parseUsers(text: string, path: string): Map<string, UserRecord> {
  const users = new Map<string, UserRecord>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const [name, role, hash] = line.split(':');
    if (!name || (role !== 'admin' && role !== 'user') || !hash?.startsWith('scrypt$')) {
      throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `${path}:${i + 1}: expected name:admin|user:scrypt$..., fix or re-add the user with 'tandem user add'`);
    }
    users.set(name, { name, role, hash });
  });
  return users;
}

export function readUsers(path: string): Map<string, UserRecord> {
  if (!existsSync(path)) return new Map();
  return parseUsers(readFileSync(path, 'utf8'), path);
}

export function writeUsers(path: string, users: Map<string, UserRecord>): void {
  mkdirSync(dirname(path), { recursive: true });
  const lines = ['# tandem users: name:role:hash (managed by `tandem user add|del`)'];
  for (const u of users.values()) lines.push(`${u.name}:${u.role}:${u.hash}`);
  // Write then rename, so a broker re-reading the file never sees half of it.
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, lines.join('\n') + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

/** The users file as the broker sees it, re-read when its mtime changes. */
export class UserDirectory {
  private users = new Map<string, UserRecord>();
  private mtimeMs = -1;

  constructor(readonly path: string) {
    this.refresh();
  }

  get size(): number {
    this.refresh();
    return this.users.size;
  }

  refresh(): void {
    let mtimeMs = 0;
    try {
      mtimeMs = statSync(this.path).mtimeMs;
    } catch {
      mtimeMs = 0;
    }
    if (mtimeMs === this.mtimeMs) return;
    this.users = readUsers(this.path);
    this.mtimeMs = mtimeMs;
  }

  /** The user's role if name and password match, else undefined. */
  async authenticate(name: string, password: string): Promise<Role | undefined> {
    this.refresh();
    const user = this.users.get(name);
    if (!user) {
      // Spend the same time as a real check so names cannot be probed by timing.
      await hashPassword(password);
      return undefined;
    }
    return (await verifyPassword(password, user.hash)) ? user.role : undefined;
  }

  role(name: string): Role | undefined {
    this.refresh();
    return this.users.get(name)?.role;
  }
}

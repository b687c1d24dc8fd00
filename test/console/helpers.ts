// Helpers for the web console tests: a users file, and an HTTP client of the
// console's JSON API that keeps its session cookie and CSRF token as a page does.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hashPassword } from '../../src/admin/users.js';

export interface TestUser {
  name: string;
  role: 'admin' | 'user';
  password: string;
}

export const ADMIN: TestUser = { name: 'alice', role: 'admin', password: 'alice-console-pw' };
export const READER: TestUser = { name: 'bob', role: 'user', password: 'bob-console-pw' };

export async function writeUsers(dir: string, users: TestUser[] = [ADMIN, READER]): Promise<string> {
  const path = join(dir, 'users');
  const lines = await Promise.all(users.map(async (u) => `${u.name}:${u.role}:${await hashPassword(u.password)}`));
  writeFileSync(path, `${lines.join('\n')}\n`, { mode: 0o600 });
  return path;
}

export interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

export class ConsoleClient {
  cookie = '';
  csrf = '';

  constructor(readonly base: string) {}

  async request(method: string, path: string, body?: unknown, options: { csrf?: boolean; headers?: Record<string, string>; raw?: string } = {}): Promise<Answer> {
    const headers: Record<string, string> = { ...options.headers };
    if (this.cookie) headers.cookie = this.cookie;
    if (options.csrf !== false && this.csrf && method !== 'GET') headers['x-csrf-token'] = this.csrf;
    if (body !== undefined || options.raw !== undefined) headers['content-type'] ??= 'application/json';
    const res = await fetch(`${this.base}${path}`, { method, headers, body: options.raw ?? (body === undefined ? undefined : JSON.stringify(body)) });
    const set = res.headers.get('set-cookie');
    if (set) this.cookie = set.split(';')[0]!;
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Left as text.
    }
    return { status: res.status, headers: res.headers, body: parsed };
  }

  /** GET /api/session (auth=no: opens the anonymous session) and keep its token. */
  async session(): Promise<Answer> {
    const a = await this.request('GET', '/api/session');
    if (a.body?.csrf) this.csrf = a.body.csrf;
    return a;
  }

  async login(user: TestUser | { name: string; password: string }): Promise<Answer> {
    const a = await this.request('POST', '/api/login', { user: user.name, password: user.password });
    if (a.body?.csrf) this.csrf = a.body.csrf;
    return a;
  }
}

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

/**
 * A TCP proxy whose answers (upstream to client) can be slowed to `rate` bytes a
 * second: a DR link through it falls behind its source by as much as the test wants,
 * for as long as it wants, whatever the machine's speed.
 */
export class ThrottledProxy {
  /** Bytes a second from upstream to the client; undefined: as fast as they come. */
  rate: number | undefined;
  private readonly sockets = new Set<import('node:net').Socket>();

  private constructor(
    private readonly server: import('node:net').Server,
    readonly port: number,
  ) {}

  static async start(targetPort: number): Promise<ThrottledProxy> {
    const net = await import('node:net');
    let proxy: ThrottledProxy | undefined;
    const server = net.createServer((client) => proxy!.relay(client, net.connect(targetPort, '127.0.0.1')));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    proxy = new ThrottledProxy(server, (server.address() as import('node:net').AddressInfo).port);
    return proxy;
  }

  private relay(client: import('node:net').Socket, upstream: import('node:net').Socket): void {
    this.sockets.add(client).add(upstream);
    client.pipe(upstream);
    const queue: Buffer[] = [];
    let queued = 0;
    const tick = setInterval(() => {
      let budget = this.rate === undefined ? Infinity : Math.max(1, Math.floor(this.rate / 20));
      while (queue.length > 0 && budget >= 1) {
        let chunk = queue.shift()!;
        if (chunk.length > budget) {
          queue.unshift(chunk.subarray(budget));
          chunk = chunk.subarray(0, budget);
        }
        budget -= chunk.length;
        queued -= chunk.length;
        client.write(chunk);
      }
      if (queued < 256 * 1024) upstream.resume();
    }, 50);
    upstream.on('data', (chunk: Buffer) => {
      queue.push(chunk);
      queued += chunk.length;
      // Held here, not in memory: the source's sends wait in TCP.
      if (queued > 1024 * 1024) upstream.pause();
    });
    const end = () => {
      clearInterval(tick);
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

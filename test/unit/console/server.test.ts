// src/console/server.ts with fake users and operations, on a real HTTP listener: what
// a login costs when its client is gone, and which Host a console without a login
// answers to (DNS rebinding). The whole broker is in test/console/api.test.ts.
import { connect } from 'node:net';
import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import type { AdminOperations } from '../../../src/admin/dispatcher.js';
import type { Role, UserDirectory } from '../../../src/admin/users.js';
import { LoginThrottle, delayFor } from '../../../src/amqp/login-throttle.js';
import type { ClusterView } from '../../../src/console/cluster-view.js';
import { ConsoleServer } from '../../../src/console/server.js';
import type { Logger } from '../../../src/ops/log.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {}, child: () => quiet } as unknown as Logger;

const ops = {
  perform: async (op: string, type: string | undefined) => (op === 'QUERY' ? [] : op === 'DR-STATUS' ? { queues: [] } : type === 'queue' ? { name: 'q' } : {}),
} as unknown as AdminOperations;

const view = (hosts: string[] = []): ClusterView => ({ ha: hosts.length > 0, brokers: hosts.map((h) => ({ address: `${h}:5672`, self: false })) as ClusterView['brokers'], primary: null, warnings: [], at: 0 });

/** Users whose every check takes `ms` (unless aborted): records what it was asked and with which signal. */
class FakeUsers {
  checks: Array<{ user: string; signal: AbortSignal | undefined }> = [];
  constructor(private readonly ms = 300) {}
  async authenticate(user: string, _password: string, signal?: AbortSignal): Promise<Role | undefined> {
    this.checks.push({ user, signal });
    await new Promise((r) => setTimeout(r, this.ms));
    return undefined;
  }
  role(): Role | undefined {
    return undefined;
  }
}

const servers: ConsoleServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

async function consoleOf(options: { auth: boolean; users?: FakeUsers; throttle?: LoginThrottle; hosts?: string[]; host?: string }): Promise<number> {
  const server = new ConsoleServer({
    host: options.host ?? '127.0.0.1',
    port: 0,
    auth: options.auth,
    users: (options.users ?? new FakeUsers()) as unknown as UserDirectory,
    throttle: options.throttle ?? new LoginThrottle(),
    ops,
    cluster: () => view(options.hosts),
    log: quiet,
    uiDir: '/nonexistent-console-ui',
  });
  servers.push(server);
  return server.listen();
}

/** A login sent whole, its socket destroyed after `leaveAfterMs`. */
function loginAndLeave(port: number, user: string, leaveAfterMs: number): void {
  const body = JSON.stringify({ user, password: 'guess' });
  const s = connect(port, '127.0.0.1', () => {
    s.write(`POST /api/login HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    setTimeout(() => s.destroy(), leaveAfterMs);
  });
  s.on('error', () => undefined);
}

function get(port: number, path: string, host: string): Promise<{ status: number; body: string; cookie: string | undefined }> {
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, body, cookie: res.headers['set-cookie']?.[0] }));
    });
    r.on('error', reject);
    r.end();
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('console login - a client that leaves', () => {
  it('console login - one that leaves during the throttle wait is never hashed, and counts as no attempt', async () => {
    const users = new FakeUsers();
    const throttle = new LoginThrottle();
    // Five failures: the next attempt waits delayFor(5) (800 ms) before its check.
    for (let i = 0; i < 5; i++) {
      throttle.begin('127.0.0.1', 'mallory');
      throttle.failed('127.0.0.1', 'mallory');
    }
    const port = await consoleOf({ auth: true, users, throttle });
    // Three at once: each waits longer than the one before (attempts in flight count).
    for (let i = 0; i < 3; i++) loginAndLeave(port, 'mallory', 50);
    await sleep(delayFor(5 + 2) + 500);
    // Hashed anyway, each of these held the one hashing thread every login waits for.
    expect(users.checks).toEqual([]);
    // Neither failures nor attempts in flight: the next one waits as after five failures.
    expect(throttle.begin('127.0.0.1', 'mallory')).toBe(delayFor(5));
  });

  it('console login - one that leaves during its hash aborts it', async () => {
    const users = new FakeUsers(2_000);
    const port = await consoleOf({ auth: true, users });
    loginAndLeave(port, 'mallory', 200);
    await sleep(600);
    expect(users.checks).toHaveLength(1);
    expect(users.checks[0]!.signal?.aborted).toBe(true);
  });
});

describe('console without a login - DNS rebinding', () => {
  it('console auth=no - a page that reached the port by a name of its own gets 421 and no session', async () => {
    const port = await consoleOf({ auth: false, hosts: ['broker-b.example'] });
    for (const host of [`evil.example:${port}`, `EVIL.example`, `localhost.evil.example:${port}`, `evil.example@127.0.0.1:${port}`, `127.0.0.1.evil.example`, '[::1', 'a b']) {
      const a = await get(port, '/api/session', host);
      expect(a.status, host).toBe(421);
      expect(JSON.parse(a.body).error.code, host).toBe('TANDEM_ERR_MISDIRECTED');
      expect(a.cookie, host).toBeUndefined();
      expect((await get(port, '/api/queues', host)).status, host).toBe(421);
    }
    // What this machine is reached by on loopback, and the cluster's own names.
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`, `[::1]:${port}`, '127.0.0.2', `broker-b.example:${port}`]) {
      const a = await get(port, '/api/session', host);
      expect(a.status, host).toBe(200);
      expect(JSON.parse(a.body).admin, host).toBe(true);
    }
  });

  it('console auth=no - console-host given as a name is answered to', async () => {
    const port = await consoleOf({ auth: false, host: 'localhost' });
    expect((await get(port, '/api/session', `localhost:${port}`)).status).toBe(200);
    expect((await get(port, '/api/session', `evil.example:${port}`)).status).toBe(421);
  });

  it('console auth=yes - any Host is answered (a rebound page has no session there)', async () => {
    const port = await consoleOf({ auth: true });
    const a = await get(port, '/api/session', `broker.example.com:${port}`);
    expect(a.status).toBe(200);
    expect(JSON.parse(a.body)).toEqual({ authenticated: false, auth: true });
  });
});

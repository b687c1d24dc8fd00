// The web console's JSON API against real tandemd processes: who may do what,
// CSRF, hostile bodies, the login throttle, TLS cookies, and the refusal to serve
// an unauthenticated console off loopback. The API's operations are the ones AMQP
// management runs: what one side does the other sees at once.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIRST_DELAY_MS, FREE_FAILURES } from '../../src/amqp/login-throttle.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestClient } from '../helpers/rhea-client.js';
import { manage } from '../helpers/tandem-cli.js';
import { ADMIN, ConsoleClient, READER, writeUsers } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-console-api-'));
const adminAuth = { user: ADMIN.name, password: ADMIN.password };

afterAll(async () => {
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('console API', () => {
  let broker: TestBroker;
  let admin: ConsoleClient;
  let reader: ConsoleClient;

  beforeAll(async () => {
    const users = await writeUsers(dir);
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--console-port', '0'] });
    admin = new ConsoleClient(broker.consoleUrl!);
    reader = new ConsoleClient(broker.consoleUrl!);
    expect((await admin.login(ADMIN)).status).toBe(200);
    expect((await reader.login(READER)).status).toBe(200);
  });

  it('console - nothing without a login; the cookie is HttpOnly and SameSite=Strict', async () => {
    const anon = new ConsoleClient(broker.consoleUrl!);
    const a = await anon.request('GET', '/api/queues');
    expect(a.status).toBe(401);
    expect(a.body.error.code).toBe('TANDEM_ERR_UNAUTHENTICATED');
    expect((await anon.session()).body).toEqual({ authenticated: false, auth: true });
    const wrong = await anon.login({ name: ADMIN.name, password: 'not-it' });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error.message).toBe('wrong user name or password');
    const res = await fetch(`${broker.consoleUrl}/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ user: READER.name, password: READER.password }) });
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(new RegExp(`^tandem_console_${broker.consolePort}=[A-Za-z0-9_-]{40,};`));
    expect(cookie).toMatch(/; HttpOnly/);
    expect(cookie).toMatch(/; SameSite=Strict/);
    expect(cookie).not.toMatch(/Secure/);
    // The password is never logged.
    expect(broker.stderr).not.toContain(ADMIN.password);
  });

  it('console - the API runs the same operations as AMQP management: each sees what the other did', async () => {
    const created = await admin.request('POST', '/api/queues', { name: 'made-in-console', durable: true, 'max-count': 10 });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const seen = (await manage(broker.port, 'READ', 'queue', 'made-in-console', {}, adminAuth)) as Record<string, unknown>;
    expect(seen).toMatchObject({ name: 'made-in-console', durable: true, 'max-count': 10 });
    await manage(broker.port, 'CREATE', 'queue', 'made-over-amqp', {}, adminAuth);
    const list = await reader.request('GET', '/api/queues');
    expect(list.body.map((q: { name: string }) => q.name)).toEqual(expect.arrayContaining(['made-in-console', 'made-over-amqp']));
    // Same validation too: the message is the one the CLI prints.
    const bad = await admin.request('POST', '/api/queues', { name: 'bad-args', 'no-such-argument': 1 });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/unknown queue argument 'no-such-argument'/);
    const dup = await admin.request('POST', '/api/queues', { name: 'made-over-amqp' });
    expect(dup.status).toBe(409);
  });

  it('console - a change without the CSRF token, or from another origin, is refused and changes nothing', async () => {
    const noToken = await admin.request('POST', '/api/queues', { name: 'csrf-victim' }, { csrf: false });
    expect(noToken.status).toBe(403);
    expect(noToken.body.error.code).toBe('TANDEM_ERR_CSRF');
    const wrongToken = await admin.request('DELETE', '/api/queues/made-in-console', { confirm: 'made-in-console' }, { headers: { 'x-csrf-token': 'x'.repeat(43) }, csrf: false });
    expect(wrongToken.status).toBe(403);
    const otherOrigin = await admin.request('POST', '/api/queues', { name: 'csrf-victim' }, { headers: { origin: 'http://evil.example' } });
    expect(otherOrigin.status).toBe(403);
    expect(otherOrigin.body.error.code).toBe('TANDEM_ERR_CSRF');
    expect((await admin.request('GET', '/api/queues/csrf-victim')).status).toBe(404);
    expect((await admin.request('GET', '/api/queues/made-in-console')).status).toBe(200);
  });

  it('console - a user who is not an admin may look, and every change gets 403 JSON', async () => {
    expect((await reader.request('GET', '/api/overview')).status).toBe(200);
    expect((await reader.request('GET', '/api/dr')).status).toBe(200);
    expect((await reader.session()).body).toMatchObject({ authenticated: true, user: READER.name, admin: false });
    for (const [method, path, body] of [
      ['POST', '/api/queues', { name: 'by-bob' }],
      ['POST', '/api/queues/made-in-console/purge', { confirm: 'made-in-console' }],
      ['POST', '/api/queues/made-in-console/move', { confirm: 'made-in-console', to: 'by-bob' }],
      ['DELETE', '/api/queues/made-in-console', { confirm: 'made-in-console' }],
      ['DELETE', '/api/connections/1', {}],
      ['POST', '/api/dr/made-in-console/activate', { confirm: 'made-in-console' }],
    ] as const) {
      const a = await reader.request(method, path, body);
      expect(a.status, `${method} ${path}`).toBe(403);
      expect(a.headers.get('content-type')).toMatch(/^application\/json/);
      expect(a.body.error.code).toBe('TANDEM_ERR_UNAUTHORIZED');
    }
    expect((await admin.request('GET', '/api/queues/by-bob')).status).toBe(404);
  });

  it('console - a request target that is no URL is a 400 for anyone, without an error in the log', async () => {
    // Before: a 500, and an error with its stack in the log for each such request, before any login.
    for (const target of ['//[', '//x:99999']) {
      const head = await new Promise<string>((resolve, reject) => {
        const s = connect(broker.consolePort!, '127.0.0.1', () => s.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`));
        let data = '';
        s.on('data', (d) => (data += d));
        s.on('close', () => resolve(data));
        s.on('error', reject);
      });
      expect(head.split('\r\n')[0], target).toBe('HTTP/1.1 400 Bad Request');
      expect(head).toMatch(/the request target is not a URL path/);
    }
    expect(broker.stderr).not.toMatch(/console request failed/);
  });

  it('console - bad input gets a clear JSON error and the broker carries on', async () => {
    const cases: Array<[string, string, { body?: unknown; raw?: string; headers?: Record<string, string> }, number, RegExp]> = [
      ['GET', '/api/queues/no-such-queue', {}, 404, /queue 'no-such-queue' does not exist/],
      ['POST', '/api/queues/no-such-queue/purge', { body: { confirm: 'no-such-queue' } }, 404, /does not exist/],
      ['DELETE', '/api/queues/no-such-queue', { body: { confirm: 'no-such-queue' } }, 404, /does not exist/],
      ['GET', '/api/dr/no-such-queue/history', {}, 404, /does not exist/],
      ['POST', '/api/queues', { raw: '{"name": "half' }, 400, /malformed JSON/],
      ['POST', '/api/queues', { raw: '[1,2,3]' }, 400, /must be a JSON object/],
      ['POST', '/api/queues', { raw: JSON.stringify({ name: 'x'.repeat(70_000) }) }, 413, /over 65536 bytes/],
      ['POST', '/api/queues', { raw: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }, 415, /must be JSON/],
      ['POST', '/api/queues', { body: { name: 42 } }, 400, /needs a "name"/],
      ['DELETE', '/api/queues/made-in-console', { body: {} }, 400, /type the name to confirm/],
      ['GET', '/api/queues/%E0%A4%A', {}, 400, /bad %-escape/],
      ['GET', '/api/nothing-here', {}, 404, /no API at/],
      ['PUT', '/api/queues', {}, 405, /not allowed/],
    ];
    for (const [method, path, o, status, message] of cases) {
      const a = await admin.request(method, path, o.body, { raw: o.raw, headers: o.headers });
      expect(a.status, `${method} ${path}`).toBe(status);
      expect(a.body?.error?.message, `${method} ${path}`).toMatch(message);
    }
    // A body far over the limit is cut off, not read into memory.
    const huge = await fetch(`${broker.consoleUrl}/api/queues`, { method: 'POST', headers: { cookie: admin.cookie, 'x-csrf-token': admin.csrf, 'content-type': 'application/json' }, body: Buffer.alloc(50 * 1024 * 1024, 0x20) }).then(
      (r) => r.status,
      () => 'cut',
    );
    expect([413, 'cut']).toContain(huge);
    // The broker is unaffected: the console answers, and messages still flow.
    expect((await admin.request('GET', '/api/queues/made-in-console')).body.name).toBe('made-in-console');
    const c = await TestClient.connect({ port: broker.port, username: ADMIN.name, password: ADMIN.password });
    try {
      await c.send('made-in-console', ['still here']);
      const r = await c.receiveAndAccept('made-in-console', 1);
      expect(r.map((m) => m.body)).toEqual(['still here']);
    } finally {
      c.close();
    }
  });

  it('console - move, purge and delete need the typed name, and leave an audit line saying who', async () => {
    await admin.request('POST', '/api/queues', { name: 'audited' });
    await admin.request('POST', '/api/queues', { name: 'audited.dlq' });
    const c = await TestClient.connect({ port: broker.port, username: ADMIN.name, password: ADMIN.password });
    try {
      await c.send('audited.dlq', ['m0', 'm1', 'm2']);
    } finally {
      c.close();
    }
    // The name typed is the queue's the messages leave.
    expect((await admin.request('POST', '/api/queues/audited.dlq/move', { confirm: 'audited', to: 'audited' })).status).toBe(400);
    const moved = await admin.request('POST', '/api/queues/audited.dlq/move', { confirm: 'audited.dlq', to: 'audited' });
    expect(moved.body).toEqual({ name: 'audited.dlq', to: 'audited', moved: 3 });
    const purged = await admin.request('POST', '/api/queues/audited/purge', { confirm: 'audited' });
    expect(purged.body).toEqual({ name: 'audited', purged: 3 });
    expect((await admin.request('DELETE', '/api/queues/audited', { confirm: 'audited' })).status).toBe(200);
    await waitFor(() => broker.stderr.includes("audit: DELETE queue 'audited'"), { name: 'audit line' });
    const lines = broker.stderr.split('\n').filter((l) => l.includes('"audit":true') && l.includes('audited'));
    expect(lines).toHaveLength(3);
    expect(lines[0]).toContain("audit: MOVE queue 'audited.dlq' to 'audited' by alice via console");
    for (const l of lines) {
      expect(l).toMatch(/"user":"alice"/);
      expect(l).toMatch(/"via":"console"/);
      expect(l).toMatch(/"remote":"127\.0\.0\.1"/);
    }
  });
});

describe('console login throttle', () => {
  it('console - wrong passwords slow the next login down, as for AMQP PLAIN', async () => {
    const users = await writeUsers(mkdtempSync(join(dir, 'throttle-')));
    const broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--console-port', '0'] });
    const client = new ConsoleClient(broker.consoleUrl!);
    const wrong = FREE_FAILURES + 2;
    for (let i = 0; i < wrong; i++) expect((await client.login({ name: READER.name, password: `guess-${i}` })).status).toBe(401);
    const expected = FIRST_DELAY_MS * 2 ** (wrong - FREE_FAILURES);
    const started = Date.now();
    expect((await client.login(READER)).status).toBe(200);
    // The wait comes before the password is checked: it cannot be shorter (half, for the clock's sake).
    expect(Date.now() - started).toBeGreaterThanOrEqual(expected / 2);
    const failures = broker.stderr.split('\n').filter((l) => l.includes('console: authentication failed'));
    expect(failures.length).toBe(wrong);
    expect(broker.stderr).not.toMatch(/guess-/);
  }, 60_000);
});

describe('console configuration', () => {
  it('console - refuses to start on a non-loopback console-host with auth=no', async () => {
    const err = await TestBroker.start({ config: 'auth=no\nconsole-port=0\nconsole-host=0.0.0.0\n' }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/exited \(2\)/);
    expect(err?.message).toMatch(/console-host 0\.0\.0\.0 with auth=no/);
    // Off by default: no console line, nothing listening for it.
    const plain = await TestBroker.start();
    expect(plain.consolePort).toBeUndefined();
  });

  it('console - without a login (the embedded default), a page that reached it by a name of its own rebound to 127.0.0.1 can do nothing', async () => {
    const broker = await TestBroker.start({ args: ['--console-port', '0'] });
    // What a browser sends for a page of http://evil.example:PORT once that name points here.
    const asPage = async (host: string, method: string, path: string, headers: Record<string, string> = {}, body?: string) => {
      const head = [`${method} ${path} HTTP/1.1`, `Host: ${host}`, `Origin: http://${host}`, 'Connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), ...(body ? ['Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`] : [])];
      const answer = await new Promise<string>((resolve, reject) => {
        let text = '';
        const s = connect(broker.consolePort!, '127.0.0.1', () => s.write(`${head.join('\r\n')}\r\n\r\n${body ?? ''}`));
        s.on('data', (d) => (text += d));
        s.on('end', () => resolve(text));
        s.on('error', reject);
      });
      const [top, rest] = answer.split('\r\n\r\n', 2) as [string, string];
      return { status: Number(top.split(' ')[1]), cookie: /^set-cookie: ([^;]*)/im.exec(top)?.[1], body: rest };
    };
    const evil = `evil.example:${broker.consolePort}`;
    const session = await asPage(evil, 'GET', '/api/session');
    expect(session.status).toBe(421);
    expect(session.cookie).toBeUndefined();
    expect(session.body).not.toMatch(/csrf/);
    // Even with the session and token of a real page, nothing is made.
    const real = await asPage(`127.0.0.1:${broker.consolePort}`, 'GET', '/api/session');
    expect(real.status).toBe(200);
    const csrf = JSON.parse(real.body).csrf as string;
    const made = await asPage(evil, 'POST', '/api/queues', { cookie: real.cookie!, 'x-csrf-token': csrf }, JSON.stringify({ name: 'made-by-evil' }));
    expect(made.status).toBe(421);
    await expect(manage(broker.port, 'READ', 'queue', 'made-by-evil')).rejects.toThrow(/does not exist/);
    // Pages of this machine's own names work.
    expect((await asPage(`localhost:${broker.consolePort}`, 'GET', '/api/session')).status).toBe(200);
  });

  it('console - with tls-cert and tls-key it is HTTPS and its cookie is Secure', async () => {
    const tlsDir = mkdtempSync(join(dir, 'tls-'));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem', '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { cwd: tlsDir, stdio: 'pipe' });
    const users = await writeUsers(tlsDir);
    const broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--console-port', '0', '--tls-port', '0', '--tls-cert', join(tlsDir, 'cert.pem'), '--tls-key', join(tlsDir, 'key.pem')] });
    expect(broker.consoleUrl).toMatch(/^https:\/\//);
    const ca = execFileSync('cat', [join(tlsDir, 'cert.pem')]);
    const cookie = await new Promise<string>((resolve, reject) => {
      const body = JSON.stringify({ user: ADMIN.name, password: ADMIN.password });
      const req = httpsRequest(`${broker.consoleUrl}/api/login`, { method: 'POST', ca, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        res.resume();
        resolve(String(res.headers['set-cookie']?.[0] ?? ''));
      });
      req.on('error', reject);
      req.end(body);
    });
    expect(cookie).toMatch(/; HttpOnly/);
    expect(cookie).toMatch(/; SameSite=Strict/);
    expect(cookie).toMatch(/; Secure/);
    writeFileSync(join(tlsDir, 'done'), '');
  });
});

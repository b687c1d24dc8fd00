// max-handshakes-per-address against a real tandemd: sockets from one address that
// connect and never send their AMQP open (on the plain port, or the TLS port before a
// TLS byte) no longer hold every socket slot of the listener, so a client and an admin
// from other addresses (127.0.0.2, 127.0.0.3: Linux routes all of 127/8 on lo) still
// get in; the sockets past the share are closed at accept, counted and logged. A storm
// of quick connections from one address is not refused. On the TLS port the TLS
// handshake itself is held to handshake-timeout (it was Node's 120 s).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { scrape } from '../helpers/scrape.js';
import { TestClient, type ConnectOptions } from '../helpers/rhea-client.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-handshake-share-'));
const opened: TestClient[] = [];
const idle: Socket[] = [];
let certs: TestCerts;
let usersFile: string;

/** max-connections of these brokers: sockets 50 + 64, the last 5 connections kept for admins. */
const LIMIT = 50;
const SOCKETS = LIMIT + 64;
/** The default share for LIMIT: a quarter of it. */
const SHARE = 12;

beforeAll(async () => {
  certs = makeCerts();
  usersFile = join(dir, 'users');
  writeFileSync(usersFile, `root:admin:${await hashPassword('root-pw')}\napp:user:${await hashPassword('app-pw')}\n`, { mode: 0o600 });
});

afterAll(async () => {
  for (const s of idle) s.destroy();
  await Promise.all(opened.map((c) => c.close().catch(() => undefined)));
  await killAllBrokers();
  certs?.remove();
  rmSync(dir, { recursive: true, force: true });
});

/** `count` TCP sockets from `from` that connect and send nothing; resolves once each has connected (or been refused). */
async function idleSockets(port: number, count: number, from = '127.0.0.1'): Promise<Socket[]> {
  const sockets = Array.from({ length: count }, () => tcpConnect({ host: '127.0.0.1', port, localAddress: from }));
  for (const s of sockets) {
    s.on('error', () => undefined);
    idle.push(s);
  }
  await Promise.all(sockets.map((s) => new Promise((r) => (s.once('connect', r), s.once('close', r)))));
  return sockets;
}

/** A client logged in as `user` from the loopback address `from`, plain or TLS. */
async function login(port: number, from: string, user: string, tls = false): Promise<TestClient> {
  const options = {
    port,
    username: user,
    password: `${user}-pw`,
    timeoutMs: 8_000,
    connect: tls
      ? (p: number, h: string, _o: unknown, cb: () => void) => tlsConnect({ socket: tcpConnect({ port: p, host: h, localAddress: from }), host: h, ca: readFileSync(certs.ca) }, cb)
      : (p: number, h: string, _o: unknown, cb: () => void) => tcpConnect({ port: p, host: h, localAddress: from }, cb),
  } as ConnectOptions;
  const c = await TestClient.connect(options);
  opened.push(c);
  return c;
}

function start(extra: string[] = []): Promise<TestBroker> {
  return TestBroker.start({
    args: ['--auth', 'yes', '--users-file', usersFile, '--max-connections', String(LIMIT), '--metrics-port', '0', '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, ...extra],
  });
}

describe('handshakes per address', () => {
  it('handshake share - one address holding every socket slot with silent sockets keeps out neither a client nor an admin from elsewhere; the rest are closed at accept, counted and logged', async () => {
    const broker = await start();
    const sockets = await idleSockets(broker.port, SOCKETS);
    const user = await login(broker.port, '127.0.0.2', 'app');
    expect((await user.send('share.q', ['hello']))[0]!.state).toBe('accepted');
    const root = await login(broker.port, '127.0.0.3', 'root');
    expect((await root.send('share.q', ['from an admin']))[0]!.state).toBe('accepted');
    // The broker kept SHARE of them and closed the rest at once.
    await waitFor(() => sockets.filter((s) => !s.destroyed).length === SHARE, { timeout: 5_000, name: 'the sockets past the share closed' });
    // The address that holds its share gets no more until one of them goes.
    await expect(login(broker.port, '127.0.0.1', 'app')).rejects.toThrow();
    const kept = sockets.find((s) => !s.destroyed)!;
    kept.destroy();
    await waitFor(async () => {
      try {
        await login(broker.port, '127.0.0.1', 'app');
        return true;
      } catch {
        return false;
      }
    }, { timeout: 5_000, name: 'a login from the first address once it holds less than its share' });
    const refused = (await scrape(broker.metricsPort!)).samples.get('tandem_connections_refused_handshakes_total')!;
    expect(refused).toBeGreaterThanOrEqual(SOCKETS - SHARE);
    // One line for the flood, not one a socket (written by the logger a moment later).
    const refusedLines = () => broker.stderr.split('\n').filter((l) => l.includes('connection refused at accept'));
    const lines = (await waitFor(() => (refusedLines().length > 0 ? refusedLines() : undefined), { timeout: 5_000, name: 'the refusal logged' }))!;
    expect(lines.length).toBeLessThan(5);
    expect(lines[0]).toContain('"remote":"127.0.0.1"');
    expect(broker.alive).toBe(true);
  }, 60_000);

  it('handshake share - on the TLS port, silent TCP sockets from one address keep out no TLS client from elsewhere', async () => {
    const broker = await start();
    const sockets = await idleSockets(broker.tlsPort!, SOCKETS);
    const user = await login(broker.tlsPort!, '127.0.0.2', 'app', true);
    expect((await user.send('share.tls', ['hello']))[0]!.state).toBe('accepted');
    const root = await login(broker.tlsPort!, '127.0.0.3', 'root', true);
    expect((await root.send('share.tls', ['from an admin']))[0]!.state).toBe('accepted');
    await waitFor(() => sockets.filter((s) => !s.destroyed).length === SHARE, { timeout: 5_000, name: 'the sockets past the share closed' });
    expect((await scrape(broker.metricsPort!)).samples.get('tandem_connections_refused_handshakes_total')).toBeGreaterThanOrEqual(SOCKETS - SHARE);
  }, 60_000);

  it('handshake share - with the users holding all but the admin reserve, one address with a large share still leaves the last slots to an admin', async () => {
    // 20: sockets 20 + 64, the last 2 connections kept for admins.
    const broker = await start(['--max-connections', '20', '--max-handshakes-per-address', '100']);
    const users: TestClient[] = [];
    for (let i = 0; i < 18; i++) users.push(await login(broker.port, '127.0.0.4', 'app'));
    // 100 would take every slot left; half of those still free is its share.
    const sockets = await idleSockets(broker.port, 84);
    const root = await login(broker.port, '127.0.0.3', 'root');
    expect((await root.send('share.reserved', ['hello']))[0]!.state).toBe('accepted');
    await waitFor(() => sockets.filter((s) => !s.destroyed).length <= (84 - 18) / 2, { timeout: 5_000, name: 'the sockets past half the free slots closed' });
    // The reserve is the admins': a user is opened and closed, told why.
    const user = await login(broker.port, '127.0.0.2', 'app');
    await waitFor(() => user.closed, { timeout: 5_000, name: 'the user closed' });
    expect((user.connection as unknown as { error?: { description?: string } }).error?.description).toMatch(/kept for admins/);
  }, 60_000);

  it('handshake share - a TCP socket on the TLS port that never starts TLS is closed at handshake-timeout', async () => {
    const broker = await start(['--handshake-timeout', '1s']);
    const [socket] = await idleSockets(broker.tlsPort!, 1);
    // Well past the deadline; before, only its client could end it.
    const closed = await Promise.race([new Promise((r) => socket!.once('close', () => r('closed'))), new Promise((r) => setTimeout(() => r('still open after 15 s'), 15_000))]);
    expect(closed).toBe('closed');
  }, 30_000);

  it('handshake share - 200 connections at once from one address all open', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    const clients = await Promise.all(Array.from({ length: 200 }, () => TestClient.connect({ port: broker.port, timeoutMs: 30_000 })));
    opened.push(...clients);
    expect(clients.length).toBe(200);
    expect((await scrape(broker.metricsPort!)).samples.get('tandem_connections_refused_handshakes_total')).toBe(0);
    await Promise.all(clients.map((c) => c.close()));
  }, 60_000);

  it('handshake share - 0 keeps no share; a value that is not a count stops the start naming the key', async () => {
    const broker = await TestBroker.start({ args: ['--max-connections', String(LIMIT), '--max-handshakes-per-address', '0'] });
    const sockets = await idleSockets(broker.port, 2 * SHARE);
    await new Promise((r) => setTimeout(r, 500));
    expect(sockets.filter((s) => s.destroyed).length).toBe(0);
    for (const s of sockets) s.destroy();
    for (const bad of ['-1', 'many', '2000000']) {
      await expect(TestBroker.start({ args: ['--max-handshakes-per-address', bad] })).rejects.toThrow(/max-handshakes-per-address/);
    }
  }, 30_000);
});

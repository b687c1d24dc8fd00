// The console against clients that mean harm, on real tandemd processes: event
// streams that are never read (the broker's memory stays its own), a user who is not
// an admin opening streams until none are left, a console whose logins would cross
// the network in clear, and the DR drill's flag, which must be said in so many words.
import { execFileSync } from 'node:child_process';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_READER_WATCHERS, MAX_WATCHERS_PER_READER } from '../../src/console/live.js';
import { READER_REQUESTS_BURST } from '../../src/console/request-budget.js';
import { MAX_UNANSWERED_PER_CONNECTION } from '../../src/util/http-bounds.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { ADMIN, ConsoleClient, READER, writeUsers } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-console-hostile-'));

afterAll(async () => {
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

/** An event stream opened on a raw socket: `read` false never takes a byte of it. */
function openStream(port: number, cookie: string, read: boolean): Promise<{ socket: Socket; status: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let head = '';
    const onData = (d: Buffer) => {
      head += d.toString('latin1');
      const m = /^HTTP\/1\.1 (\d+)/.exec(head);
      if (!m) return;
      socket.off('data', onData);
      if (!read) socket.pause();
      else socket.resume();
      resolve({ socket, status: Number(m[1]) });
    };
    socket.on('data', onData);
    socket.on('error', reject);
    // Closed by the server before an answer (a bound of the listener): a failure saying so, not a wait for ever.
    socket.on('close', () => reject(new Error(`the event stream's connection closed before an answer (read: ${JSON.stringify(head.slice(0, 200))})`)));
    socket.write(`GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nCookie: ${cookie}\r\n\r\n`);
  });
}

const rssBytes = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

describe('console hostile - event streams', () => {
  let broker: TestBroker;
  let admin: ConsoleClient;
  let reader: ConsoleClient;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', await writeUsers(mkdtempSync(join(dir, 'streams-'))), '--console-port', '0'] });
    admin = new ConsoleClient(broker.consoleUrl!);
    reader = new ConsoleClient(broker.consoleUrl!);
    expect((await admin.login(ADMIN)).status).toBe(200);
    expect((await reader.login(READER)).status).toBe(200);
  });

  /** Wait until the broker has made `n` more overviews (one a second). */
  async function ticks(n: number): Promise<void> {
    const at = async () => (await admin.request('GET', '/api/overview')).body.at as number;
    const seen = new Set([await at()]);
    await waitFor(async () => (seen.add(await at()), seen.size > n), { timeout: 60_000, interval: 250, name: `${n} overviews` });
  }

  it('console hostile - a user who is not an admin cannot take every event stream: the admins still get theirs', async () => {
    try {
      let refused: number | undefined;
      for (let i = 0; i < 64 && refused === undefined; i++) {
        const s = await openStream(broker.consolePort!, reader.cookie, true);
        sockets.push(s.socket);
        if (s.status !== 200) refused = i;
      }
      expect(refused).toBe(Math.min(MAX_WATCHERS_PER_READER, MAX_READER_WATCHERS));
      const mine = await openStream(broker.consolePort!, admin.cookie, true);
      sockets.push(mine.socket);
      expect(mine.status).toBe(200);
    } finally {
      for (const s of sockets.splice(0)) s.destroy();
    }
  }, 60_000);

  it('console hostile - pages that never read their event stream cost the broker at most an overview each, not a buffer of them', async () => {
    // Overviews of ~0.5 MB: 1000 queues with long names.
    const names = Array.from({ length: 1000 }, (_, i) => `hostile-${String(i).padStart(4, '0')}-${'x'.repeat(230)}`);
    for (let i = 0; i < names.length; i += 50) {
      const answers = await Promise.all(names.slice(i, i + 50).map((name) => admin.request('POST', '/api/queues', { name, durable: false })));
      for (const a of answers) expect(a.status).toBe(201);
    }
    await ticks(2);
    const size = (await admin.request('GET', '/api/overview')).body.queues.length;
    expect(size).toBe(1000);
    const before = rssBytes(broker.pid);
    try {
      // Admins' streams: no per-user limit applies to them, only the total.
      for (let i = 0; i < 32; i++) {
        const s = await openStream(broker.consolePort!, admin.cookie, false);
        sockets.push(s.socket);
        expect(s.status).toBe(200);
      }
      // Enough overviews for each silent page to have been sent 4 MiB and more, had they been kept for it
      // (the old limit: 32 pages held 178 MiB more here; now a few MiB).
      await ticks(12);
      const grown = rssBytes(broker.pid) - before;
      expect(grown, `the broker grew by ${Math.round(grown / 2 ** 20)} MiB`).toBeLessThan(64 * 2 ** 20);
    } finally {
      for (const s of sockets.splice(0)) s.destroy();
    }
  }, 120_000);
});

describe('console hostile - requests', () => {
  let broker: TestBroker;

  beforeAll(async () => {
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', await writeUsers(mkdtempSync(join(dir, 'requests-'))), '--console-port', '0'] });
  });

  it('console hostile - a user who is not an admin asking in a loop is told to slow down (429); admins are not', async () => {
    const reader = new ConsoleClient(broker.consoleUrl!);
    const admin = new ConsoleClient(broker.consoleUrl!);
    expect((await reader.login(READER)).status).toBe(200);
    expect((await admin.login(ADMIN)).status).toBe(200);
    let slowed: Awaited<ReturnType<ConsoleClient['request']>> | undefined;
    let ok = 0;
    // Batches of 20 at once; at most 600 requests.
    for (let batch = 0; batch < 30 && !slowed; batch++) {
      const answers = await Promise.all(Array.from({ length: 20 }, () => reader.request('GET', '/api/queues')));
      ok += answers.filter((a) => a.status === 200).length;
      slowed = answers.find((a) => a.status !== 200);
    }
    expect(slowed?.status).toBe(429);
    expect(slowed?.body.error.code).toBe('TANDEM_ERR_BUSY');
    expect(slowed?.headers.get('retry-after')).toBe('1');
    expect(ok).toBeGreaterThanOrEqual(READER_REQUESTS_BURST);
    // The admin is not counted, and not slowed by the reader.
    const answers = await Promise.all(Array.from({ length: 80 }, () => admin.request('GET', '/api/queues')));
    expect(answers.map((a) => a.status).filter((s) => s !== 200)).toEqual([]);
    // The reader's budget comes back.
    await waitFor(async () => (await reader.request('GET', '/api/queues')).status === 200, { timeout: 10_000, interval: 200, name: 'reader served again' });
  }, 60_000);

  it('console hostile - a body that is not JSON is not quoted back (a password typed there stays unechoed)', async () => {
    const anon = new ConsoleClient(broker.consoleUrl!);
    for (const raw of ['Secret-Guess-1', 'user=alice&password=Secret-Guess-2', '{"user":"alice","password":"Secret-Guess-3"']) {
      const a = await anon.request('POST', '/api/login', undefined, { raw });
      expect(a.status, raw).toBe(400);
      expect(a.body.error.message).toMatch(/^malformed JSON in the request body/);
      expect(JSON.stringify(a.body), raw).not.toMatch(/Secret|alice/);
    }
    expect(broker.stderr).not.toContain('Secret-Guess');
  });

  it('console hostile - logins pipelined on one connection: it is closed, no password is hashed for them, and the next login is served at once', async () => {
    // 2000 logins in one write: each was held until answered and hashed in turn (one
    // connection's 50,000 held 600 MB), and every login, AMQP's too, waited behind them.
    const body = JSON.stringify({ user: 'pipeliner', password: 'not-the-password' });
    const login = `POST /api/login HTTP/1.1\r\nHost: 127.0.0.1:${broker.consolePort}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const socket = connect(broker.consolePort!, '127.0.0.1');
    let closed = false;
    socket.on('error', () => undefined);
    socket.on('close', () => (closed = true));
    socket.write(login.repeat(2000));
    try {
      await waitFor(() => closed, { timeout: 20_000, interval: 200, name: 'the pipelining connection closed by the console' });
    } finally {
      socket.destroy();
    }
    // The ones taken before it was closed were abandoned with it, as a login whose client left.
    const admin = new ConsoleClient(broker.consoleUrl!);
    expect((await admin.login(ADMIN)).status).toBe(200);
    const failures = broker.stderr.split('\n').filter((l) => l.includes("authentication failed for user 'pipeliner'"));
    expect(failures.length).toBeLessThanOrEqual(MAX_UNANSWERED_PER_CONNECTION);
  }, 60_000);

  it('console hostile - over TLS, a client that connects and never starts the handshake is let go as soon as one that sends no headers', async () => {
    const tlsDir = mkdtempSync(join(dir, 'tls-'));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem', '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { cwd: tlsDir, stdio: 'pipe' });
    const tls = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', await writeUsers(tlsDir), '--console-port', '0', '--tls-port', '0', '--tls-cert', join(tlsDir, 'cert.pem'), '--tls-key', join(tlsDir, 'key.pem')] });
    const silent = connect(tls.consolePort!, '127.0.0.1');
    silent.on('error', () => undefined);
    let closed = false;
    silent.on('close', () => (closed = true));
    // Node's default held it 120 s; the console's limit is 10 s. Half a minute is ample margin.
    await waitFor(() => closed, { timeout: 40_000, interval: 500, name: 'silent TLS client closed' });
  }, 60_000);
});

describe('console hostile - slow headers', () => {
  it('console hostile - a client that dribbles its headers is let go once its 10 s are up, not at the next of Node 30 s rounds', async () => {
    const broker = await TestBroker.start({ args: ['--console-port', '0'] });
    // Right after the start: Node's first round of checks (by default) comes 30 s after it.
    const socket = connect(broker.consolePort!, '127.0.0.1', () => socket.write(`GET / HTTP/1.1\r\nHost: 127.0.0.1:${broker.consolePort}\r\n`));
    const timer = setInterval(() => socket.writable && socket.write('X-Slow: 1\r\n'), 1000);
    let closed = false;
    socket.on('close', () => (closed = true));
    socket.on('error', () => undefined);
    try {
      // 10 s and a check a second; twice that is ample margin, and short of Node's 30 s.
      await waitFor(() => closed, { timeout: 20_000, interval: 250, name: 'the dribbling client let go' });
    } finally {
      clearInterval(timer);
      socket.destroy();
    }
  }, 60_000);
});

describe('console hostile - start and DR', () => {
  it('console hostile - a console with logins on an address off loopback, without TLS, refuses to start: passwords would cross the network in clear', async () => {
    const users = await writeUsers(mkdtempSync(join(dir, 'plain-')));
    const err = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', users, '--console-port', '0', '--console-host', '0.0.0.0'] }).then(
      (b) => (b.stop(), undefined),
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/console-host 0\.0\.0\.0 without TLS would send the console's passwords in clear/);
  });

  it('console hostile - DR activate tells the old source unless keep-source-serving is true, and takes nothing else for it', async () => {
    const source = await TestBroker.start();
    const copy = await TestBroker.start({ args: ['--console-port', '0'] });
    for (const q of ['told', 'drill']) {
      expect((await tandem(['queue', 'add', q, '--durable', '-b', source.url])).code).toBe(0);
      const add = await tandem(['dr', 'add', q, '--source', source.url, '-b', copy.url]);
      expect(add.code, add.stderr).toBe(0);
    }
    const page = new ConsoleClient(copy.consoleUrl!);
    await page.session();
    for (const bad of ['yes', 1, null, {}]) {
      const a = await page.request('POST', '/api/dr/drill/activate', { confirm: 'drill', 'keep-source-serving': bad });
      expect(a.status, JSON.stringify(bad)).toBe(400);
      expect(a.body.error.code).toBe('TANDEM_ERR_INVALID_ARGUMENT');
    }
    const told = await page.request('POST', '/api/dr/told/activate', { confirm: 'told', 'keep-source-serving': false });
    expect(told.status).toBe(200);
    expect(told.body).toMatchObject({ activated: ['told'], 'source-told': true });
    const drill = await page.request('POST', '/api/dr/drill/activate', { confirm: 'drill', 'keep-source-serving': true });
    expect(drill.status).toBe(200);
    expect(drill.body).toMatchObject({ activated: ['drill'], 'source-told': false });
    await waitFor(() => copy.stderr.includes('NOT told (keep-source-serving'), { name: 'drill logged' });
  }, 60_000);
});

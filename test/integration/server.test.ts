// tandemd as a server process: SASL, TLS (with and without client certificates),
// metrics, clean shutdown with durable messages kept, and config errors.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { ClientError, TestClient, bodyOf } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';
import { runPython } from '../helpers/python.js';
import { freePort } from '../helpers/ports.mjs';

const dir = mkdtempSync(join(tmpdir(), 'tandem-server-test-'));
const usersFile = join(dir, 'users');
const opened: TestClient[] = [];

async function connect(options: Parameters<typeof TestClient.connect>[0]): Promise<TestClient> {
  const c = await TestClient.connect(options);
  opened.push(c);
  return c;
}

function refused(p: Promise<unknown>): Promise<ClientError | Error | undefined> {
  return p.then(
    () => undefined,
    (e: Error) => e,
  );
}

function openssl(...args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

/** A CA, a server cert for 127.0.0.1/localhost signed by it, and a client cert signed by it. */
function makeCertificates(): void {
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=Tandem Test CA');
  const ext = join(dir, 'san.ext');
  writeFileSync(ext, 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  for (const who of ['server', 'client']) {
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${who}.key`, '-out', `${who}.csr`, '-subj', `/CN=${who === 'server' ? 'localhost' : 'tandem-client'}`);
    openssl('x509', '-req', '-in', `${who}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${who}.pem`, '-days', '2', '-extfile', ext);
  }
  // A self-signed server certificate, as the simplest deployment would have.
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'self.key', '-out', 'self.pem', '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1');
}

const pem = (name: string) => join(dir, name);

beforeAll(async () => {
  const add = async (name: string, admin: boolean) => {
    const r = await tandem(['user', 'add', name, ...(admin ? ['--admin'] : []), '--password-file', '-', '-f', usersFile], { input: `${name}-secret\n` });
    expect(r.code, r.stderr).toBe(0);
  };
  await add('alice', true);
  await add('bob', false);
  makeCertificates();
});

afterAll(async () => {
  await Promise.all(opened.map((c) => c.close()));
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

describe('sasl', () => {
  let broker: TestBroker;
  beforeAll(async () => {
    broker = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
  });
  afterAll(async () => {
    await broker.stop();
    broker.cleanup();
  });

  it('sasl - PLAIN with the right password is accepted and can send and receive', async () => {
    const c = await connect({ port: broker.port, username: 'bob', password: 'bob-secret' });
    expect((await c.send('sasl.q', 1))[0].state).toBe('accepted');
    expect((await c.receiveAndAccept('sasl.q', 1)).map(bodyOf)).toEqual(['m0']);
  });

  it('sasl - a wrong password is refused with a SASL failure', async () => {
    const err = await refused(connect({ port: broker.port, username: 'bob', password: 'wrong' }));
    expect(err).toBeDefined();
    expect(String((err as ClientError).condition ?? err?.message)).toMatch(/unauthorized|auth|sasl/i);
  });

  it('sasl - an unknown user is refused', async () => {
    const err = await refused(connect({ port: broker.port, username: 'mallory', password: 'x' }));
    expect(err).toBeDefined();
  });

  it('sasl - ANONYMOUS is refused when auth is on', async () => {
    // A username without a password makes rhea offer ANONYMOUS only.
    const err = await refused(connect({ port: broker.port, username: 'anonymous' }));
    expect(err).toBeDefined();
    expect(err?.message).toMatch(/mechanism|ANONYMOUS|unauthorized|auth/i);
  });

  it('sasl - a client skipping SASL (bare AMQP header) is refused when auth is on', async () => {
    const err = await refused(connect({ port: broker.port, timeoutMs: 5000 }));
    expect(err).toBeDefined();
  });

  it('sasl - management needs an admin: a non-admin user gets exit code 7, an admin succeeds', async () => {
    const asBob = await tandem(['queue', 'add', 'mq', '-b', `bob/bob-secret@${broker.url}`]);
    expect(asBob.code).toBe(7);
    expect(asBob.stderr).toMatch(/admin/);
    const asAlice = await tandem(['queue', 'add', 'mq', '-b', `alice/alice-secret@${broker.url}`]);
    expect(asAlice.code, asAlice.stderr).toBe(0);
    const wrong = await tandem(['queue', 'list', '-b', `alice/nope@${broker.url}`, '--timeout', '5']);
    expect(wrong.code).not.toBe(0);
  });
});

describe('sasl off', () => {
  it('sasl - with auth off a bare AMQP header and ANONYMOUS are both accepted', async () => {
    const broker = await TestBroker.start();
    const bare = await connect({ port: broker.port });
    expect((await bare.send('a.q', 1))[0].state).toBe('accepted');
    const anon = await connect({ port: broker.port, username: 'anonymous' });
    expect((await anon.receiveAndAccept('a.q', 1)).map(bodyOf)).toEqual(['m0']);
    await bare.close();
    await anon.close();
    await broker.stop();
    broker.cleanup();
  });
});

describe('tls', () => {
  it('tls - a self-signed certificate serves AMQPS next to the plain port', async () => {
    const broker = await TestBroker.start({ args: ['--tls-cert', pem('self.pem'), '--tls-key', pem('self.key'), '--tls-port', '0'] });
    expect(broker.tlsPort).toBeGreaterThan(0);
    expect(broker.stdout).toMatch(/listening \(tls\) on 127\.0\.0\.1:\d+/);
    const c = await connect({ port: broker.tlsPort!, transport: 'tls', ca: [readPem('self.pem')], servername: 'localhost' } as never);
    expect((await c.send('tls.q', 2)).map((o) => o.state)).toEqual(['accepted', 'accepted']);
    const plain = await connect({ port: broker.port });
    expect((await plain.receiveAndAccept('tls.q', 2)).map(bodyOf)).toEqual(['m0', 'm1']);
    // A client that does not trust the certificate gives up.
    const untrusted = await refused(connect({ port: broker.tlsPort!, transport: 'tls', ca: [readPem('ca.pem')], servername: 'localhost', timeoutMs: 5000 } as never));
    expect(untrusted).toBeDefined();
    await broker.stop();
    broker.cleanup();
  });

  it('tls - with --tls-require-client-cert a client without a certificate is refused, one with a CA-signed one is accepted', async () => {
    const broker = await TestBroker.start({
      args: ['--tls-cert', pem('server.pem'), '--tls-key', pem('server.key'), '--tls-port', '0', '--tls-ca', pem('ca.pem'), '--tls-require-client-cert', 'yes'],
    });
    const base = { port: broker.tlsPort!, transport: 'tls', ca: [readPem('ca.pem')], servername: 'localhost' };
    const noCert = await refused(connect({ ...base, timeoutMs: 5000 } as never));
    expect(noCert).toBeDefined();
    const wrongCert = await refused(connect({ ...base, cert: readPem('self.pem'), key: readPem('self.key'), timeoutMs: 5000 } as never));
    expect(wrongCert).toBeDefined();
    const c = await connect({ ...base, cert: readPem('client.pem'), key: readPem('client.key') } as never);
    expect((await c.send('mtls.q', 1))[0].state).toBe('accepted');
    // The broker survived the refused handshakes.
    expect(broker.alive).toBe(true);
    await broker.stop();
    broker.cleanup();
  });
});

describe('tls cli', () => {
  it('tls - the CLI honours amqps:// with --tls-ca, refuses an unverified certificate, and says why plaintext fails on the TLS port', async () => {
    const broker = await TestBroker.start({ args: ['--tls-cert', pem('server.pem'), '--tls-key', pem('server.key'), '--tls-port', '0'] });
    const tlsUrl = `amqps://127.0.0.1:${broker.tlsPort}`;
    const ok = await tandem(['queue', 'add', 'tls.cli.q', '-b', tlsUrl, '--tls-ca', pem('ca.pem')]);
    expect(ok.code, ok.stderr).toBe(0);
    const list = await tandem(['queue', 'list', '-b', tlsUrl, '--tls-ca', pem('ca.pem')]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/tls\.cli\.q/);
    // Without the CA the certificate does not verify: a refusal, never plaintext instead.
    const unverified = await tandem(['queue', 'list', '-b', tlsUrl, '--timeout', '5']);
    expect(unverified.code).toBe(69);
    expect(unverified.stderr).toMatch(/certificate.*--tls-ca/);
    // A CA that did not sign it is refused too.
    const wrongCa = await tandem(['queue', 'list', '-b', tlsUrl, '--tls-ca', pem('self.pem'), '--timeout', '5']);
    expect(wrongCa.code).toBe(69);
    expect(wrongCa.stderr).toMatch(/certificate/);
    const plainOnTls = await tandem(['queue', 'list', '-b', `127.0.0.1:${broker.tlsPort}`, '--timeout', '5']);
    expect(plainOnTls.code).toBe(69);
    expect(plainOnTls.stderr).toMatch(/amqps:\/\//);
    // --tls-ca with a plaintext address would promise a protection that is not there.
    const caOnPlain = await tandem(['queue', 'list', '-b', `127.0.0.1:${broker.port}`, '--tls-ca', pem('ca.pem')]);
    expect(caOnPlain.code).toBe(2);
    expect(caOnPlain.stderr).toMatch(/--tls-ca needs an amqps:\/\//);
    await broker.stop();
    broker.cleanup();
  });

  it('tls - the CLI shows --tls-cert/--tls-key to a broker that requires a client certificate', async () => {
    const broker = await TestBroker.start({
      args: ['--tls-cert', pem('server.pem'), '--tls-key', pem('server.key'), '--tls-port', '0', '--tls-ca', pem('ca.pem'), '--tls-require-client-cert', 'yes'],
    });
    const target = ['-b', `amqps://127.0.0.1:${broker.tlsPort}`, '--tls-ca', pem('ca.pem')];
    const withCert = await tandem(['queue', 'list', ...target, '--tls-cert', pem('client.pem'), '--tls-key', pem('client.key')]);
    expect(withCert.code, withCert.stderr).toBe(0);
    const without = await tandem(['queue', 'list', ...target, '--timeout', '5']);
    expect(without.code).toBe(69);
    const halfPair = await tandem(['queue', 'list', ...target, '--tls-cert', pem('client.pem')]);
    expect(halfPair.code).toBe(2);
    expect(halfPair.stderr).toMatch(/--tls-cert and --tls-key must be given together/);
    const onPlain = await tandem(['queue', 'list', '-b', `127.0.0.1:${broker.port}`, '--tls-cert', pem('client.pem'), '--tls-key', pem('client.key')]);
    expect(onPlain.code).toBe(2);
    expect(onPlain.stderr).toMatch(/--tls-cert and --tls-key need an amqps:\/\//);
    await broker.stop();
    broker.cleanup();
  });
});

function tcpRefused(port: number): Promise<boolean> {
  return new Promise((resolveRefused) => {
    const socket = netConnect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolveRefused(false);
    });
    socket.once('error', (e: NodeJS.ErrnoException) => resolveRefused(e.code === 'ECONNREFUSED'));
  });
}

describe('tls only', () => {
  it('tls - listen-plain=no closes the plaintext port and TLS still serves', async () => {
    const plainPort = await freePort();
    const broker = await TestBroker.start({
      args: ['--port', String(plainPort), '--listen-plain', 'no', '--tls-cert', pem('server.pem'), '--tls-key', pem('server.key'), '--tls-port', '0'],
    });
    expect(broker.stdout).not.toMatch(/listening on /);
    expect(await tcpRefused(plainPort)).toBe(true);
    const c = await connect({ port: broker.tlsPort!, transport: 'tls', ca: [readPem('ca.pem')], servername: 'localhost' } as never);
    expect((await c.send('tlsonly.q', 1))[0].state).toBe('accepted');
    const list = await tandem(['queue', 'list', '-b', `amqps://127.0.0.1:${broker.tlsPort}`, '--tls-ca', pem('ca.pem')]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/tlsonly\.q/);
    await broker.stop();
    broker.cleanup();
  });

  it('tls - listen-plain=no without a TLS listener is refused at start', async () => {
    const err = await refused(TestBroker.start({ args: ['--listen-plain', 'no'] }));
    expect(err?.message).toMatch(/exited \(2\)/);
    expect(err?.message).toMatch(/listen-plain=no leaves no listener/);
  });
});

describe('plain text warning', () => {
  const clearWarning = /SASL PLAIN is offered on the plaintext port 0\.0\.0\.0:\d+: passwords travel in clear/;

  it('tls - PLAIN offered on a non-loopback plaintext port is warned about at start; TLS only, or loopback, is not', async () => {
    const exposed = await TestBroker.start({ args: ['--host', '0.0.0.0', '--auth', 'yes', '--users-file', usersFile] });
    await waitFor(() => clearWarning.test(exposed.stderr), { name: 'the plaintext PLAIN warning' });
    expect(exposed.stderr).toMatch(/"level":40/);
    await exposed.stop();
    exposed.cleanup();
    const tlsOnly = await TestBroker.start({
      args: ['--host', '0.0.0.0', '--auth', 'yes', '--users-file', usersFile, '--listen-plain', 'no', '--tls-cert', pem('server.pem'), '--tls-key', pem('server.key'), '--tls-port', '0'],
    });
    const loopback = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
    // "broker ready" is logged after the start-up warnings.
    await waitFor(() => /broker ready/.test(tlsOnly.stderr) && /broker ready/.test(loopback.stderr), { name: 'broker ready' });
    expect(tlsOnly.stderr + loopback.stderr).not.toMatch(/passwords travel in clear/);
    await Promise.all([tlsOnly.stop(), loopback.stop()]);
    tlsOnly.cleanup();
    loopback.cleanup();
  });
});

describe('operations', () => {
  it('metrics - GET /metrics shows queue depth, connections and the LSN', async () => {
    const broker = await TestBroker.start({ args: ['--metrics-port', '0'] });
    expect(broker.metricsPort).toBeGreaterThan(0);
    const c = await connect({ port: broker.port });
    await c.send('metrics.q', 3);
    const text = await httpGet(`http://127.0.0.1:${broker.metricsPort}/metrics`);
    expect(text).toMatch(/tandem_queue_depth\{queue="metrics.q"\} 3/);
    expect(text).toMatch(/tandem_connections [1-9]/);
    expect(text).toMatch(/tandem_log_lsn \d+/);
    expect(text).toMatch(/tandem_queue_enqueued_total\{queue="metrics.q"\} 3/);
    // Settlement latency: one observation per message its sender was told accepted.
    expect(text).toMatch(/tandem_settlement_latency_seconds_count 3\b/);
    expect(text).toMatch(/tandem_messages_accepted_total 3\b/);
    expect(await httpGet(`http://127.0.0.1:${broker.metricsPort}/other`, 404)).toMatch(/metrics are at \/metrics/);
    await c.close();
    await broker.stop();
    broker.cleanup();
  });

  it('shutdown - SIGTERM exits 0 and a durable message is there after a restart on the same data dir', async () => {
    const dataDir = join(dir, 'restart-data');
    const first = await TestBroker.start({ dataDir });
    const c = await connect({ port: first.port });
    const outcomes = await c.send('durable.q', [{ body: 'keep me', durable: true }, { body: 'transient', durable: false }]);
    expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'accepted']);
    expect(await first.stop()).toBe(0);
    expect(first.stdout + first.stderr).toMatch(/broker stopped/);
    const second = await TestBroker.start({ dataDir });
    const c2 = await connect({ port: second.port });
    const got = await c2.receiveAndAccept('durable.q', 1);
    expect(got.map(bodyOf)).toEqual(['keep me']);
    expect(got[0].durable).toBe(true);
    const r = await c2.openReceiver('durable.q');
    r.receiver.add_credit(1);
    expect(await r.drainFor(300)).toHaveLength(0);
    await r.close();
    await c2.close();
    expect(await second.stop()).toBe(0);
  });

  it('limits - a connection past max-connections is closed with amqp:resource-limit-exceeded (rhea and proton), and a freed slot admits again', async () => {
    const broker = await TestBroker.start({ args: ['--max-connections', '2'] });
    const held = [await connect({ port: broker.port }), await connect({ port: broker.port })];
    // rhea reports our open, then the close with its error.
    const over = await connect({ port: broker.port });
    const deadline = Date.now() + 10_000;
    while (!over.closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect((over.connection as unknown as { error?: unknown }).error).toMatchObject({ condition: 'amqp:resource-limit-exceeded', description: 'too many connections: max-connections is 2' });
    expect(await runPython('connection_error.py', [broker.url, '10'])).toEqual({ opened: true, condition: 'amqp:resource-limit-exceeded', description: 'too many connections: max-connections is 2' });
    expect(broker.stdout + broker.stderr).toMatch(/connection refused: max-connections reached/);
    await held[0]!.close();
    // The freed slot admits a new client (the broker hears of the close asynchronously).
    let admitted: TestClient | undefined;
    while (!admitted && Date.now() < deadline + 10_000) {
      const c = await connect({ port: broker.port });
      await new Promise((r) => setTimeout(r, 200));
      if (!c.closed) admitted = c;
    }
    expect(admitted).toBeDefined();
    expect((await admitted!.send('limits.q', 1))[0]!.state).toBe('accepted');
    await admitted!.close();
    await held[1]!.close();
    await broker.stop();
    broker.cleanup();
  });

  it('limits - the last connections of max-connections are kept for admins: users holding every other one lock out neither an admin nor the CLI', async () => {
    // 20: the last 2 are kept (a tenth of a limit under 160).
    const broker = await TestBroker.start({ args: ['--max-connections', '20', '--auth', 'yes', '--users-file', usersFile] });
    const closedWith = async (c: TestClient) => {
      const deadline = Date.now() + 10_000;
      while (!c.closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      return (c.connection as unknown as { error?: { description?: string } }).error?.description;
    };
    const bobs: TestClient[] = [];
    for (let i = 0; i < 18; i++) bobs.push(await connect({ port: broker.port, username: 'bob', password: 'bob-secret' }));
    expect(await closedWith(await connect({ port: broker.port, username: 'bob', password: 'bob-secret' }))).toBe('too many connections: max-connections is 20, and the last 2 are kept for admins');
    // An admin still gets in, over AMQP and with the CLI.
    const alice = await connect({ port: broker.port, username: 'alice', password: 'alice-secret' });
    expect((await alice.send('reserved.q', 1))[0]!.state).toBe('accepted');
    const cli = await tandem(['queue', 'show', 'reserved.q', '--json', '-b', `alice/alice-secret@127.0.0.1:${broker.port}`]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(JSON.parse(cli.stdout)).toMatchObject({ depth: 1 });
    // Past the whole limit, an admin too is refused.
    const second = await connect({ port: broker.port, username: 'alice', password: 'alice-secret' });
    expect(second.closed).toBe(false);
    expect(await closedWith(await connect({ port: broker.port, username: 'alice', password: 'alice-secret' }))).toBe('too many connections: max-connections is 20');
    for (const c of [...bobs, alice, second]) await c.close();
    await broker.stop();
    broker.cleanup();
  });

  it('shutdown - SIGTERM with a connected consumer still exits 0', async () => {
    const broker = await TestBroker.start({ args: ['--shutdown-timeout', '1s'] });
    const c = await connect({ port: broker.port });
    await c.send('busy.q', 2);
    const r = await c.openReceiver('busy.q');
    r.receiver.add_credit(2);
    await r.next(2); // held unsettled
    expect(await broker.stop()).toBe(0);
    broker.cleanup();
  });

  it('config - an unknown key stops the start with exit code 2 naming the file and key', async () => {
    const err = await refused(TestBroker.start({ config: 'port = 0\nbogus-key = 1\n' }));
    expect(err?.message).toMatch(/exited \(2\)/);
    expect(err?.message).toMatch(/tandemd\.conf: unknown key 'bogus-key'/);
  });

  it('config - a bad value stops the start with exit code 2 naming the file, key and what is accepted', async () => {
    const err = await refused(TestBroker.start({ config: 'max-frame-size = lots\n' }));
    expect(err?.message).toMatch(/exited \(2\)/);
    expect(err?.message).toMatch(/tandemd\.conf: max-frame-size = "lots" is invalid; expected a size/);
    const sect = await refused(TestBroker.start({ config: '[broker]\nport = 1\n' }));
    expect(sect?.message).toMatch(/exited \(2\)/);
    expect(sect?.message).toMatch(/unknown section \[broker\]/);
    const tiny = await refused(TestBroker.start({ args: ['--ha-retain-changes', '100'] }));
    expect(tiny?.message).toMatch(/exited \(2\)/);
    expect(tiny?.message).toMatch(/ha-retain-changes must be at least 10000/);
    const badCli = await refused(TestBroker.start({ args: ['--idle-timeout', 'soon'] }));
    expect(badCli?.message).toMatch(/exited \(2\)/);
    expect(badCli?.message).toMatch(/idle-timeout/);
  });

  it('config - a key set twice, and values outside their bounds, stop the start saying which and why', async () => {
    const twice = await refused(TestBroker.start({ config: 'port = 0\nmax-memory = 64MiB\n; later\n[tandemd]\nmax-memory = 1GiB\n' }));
    expect(twice?.message).toMatch(/exited \(2\)/);
    expect(twice?.message).toMatch(/tandemd\.conf: key 'max-memory' is set twice \(lines 2 and 5\); keep one/);
    const cases: Array<[string[], RegExp]> = [
      [['--max-frame-size', '5GiB'], /max-frame-size must be at most 16777216/],
      [['--max-frame-size', '100'], /max-frame-size must be at least 512/],
      [['--max-connections', '0'], /max-connections must be at least 1 \(0 would refuse every client\)/],
      [['--ha-heartbeat-interval', '0'], /ha-heartbeat-interval must be at least 100ms/],
      [['--idle-timeout', '30d'], /idle-timeout/],
      [['--idle-timeout', '9999999999'], /idle-timeout must be at most 2147483647ms/],
      [['--max-message-size', '99999999999999999999G'], /max-message-size is too large/],
    ];
    for (const [args, expected] of cases) {
      const err = await refused(TestBroker.start({ args }));
      expect(err?.message, args.join(' ')).toMatch(/exited \(2\)/);
      expect(err?.message, args.join(' ')).toMatch(expected);
    }
  });
});

function readPem(name: string): Buffer {
  return execFileSync('cat', [pem(name)]);
}

function httpGet(url: string, status = 200): Promise<string> {
  return new Promise((resolve, reject) => {
    get(url, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => (res.statusCode === status ? resolve(body) : reject(new Error(`${url}: status ${res.statusCode}`))));
    }).on('error', reject);
  });
}

// Log floods, against real tandemd processes: a client that repeats what makes the broker
// log a line (a refused SASL mechanism, a link its own frame size cannot carry, a
// reconnect to an HA backup, a socket silent past the handshake deadline, TLS bytes from
// address after address, a refused EXTERNAL login) gets one line per interval with the count held back, not one line per try; and
// a client's container id is cut in a line, not echoed at frame size. Each loop is a few
// hundred tries: before the throttles each wrote one line per try.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { AMQP_HEADER, SASL_HEADER, perf } from '../helpers/amqp-frames.js';
import { TestBroker, killAllBrokers } from '../helpers/broker.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { freePorts } from '../helpers/ports.mjs';

const dir = mkdtempSync(join(tmpdir(), 'tandem-log-flood-'));
let certs: TestCerts;
/** Tries per loop: each wrote a line before. */
const TRIES = 200;
/** Lines a loop may write now: the first, and perhaps one more if an interval ends during it. */
const BOUND = 4;

beforeAll(() => {
  certs = makeCerts();
});

afterAll(async () => {
  await killAllBrokers();
  certs?.remove();
  rmSync(dir, { recursive: true, force: true });
});

/** The broker's JSON log lines whose message starts with `message`. */
function linesOf(b: TestBroker, message: string): string[] {
  return b.stderr.split('\n').filter((l) => l.startsWith('{') && (JSON.parse(l) as { msg?: string }).msg?.startsWith(message));
}

/** Write `bytes` on a new socket and wait (bounded) until the broker closes it. */
function once(socket: Socket, bytes: Buffer[]): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => socket.destroy(), 2_000);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.write(Buffer.concat(bytes));
    socket.resume();
  });
}

function plain(port: number, bytes: Buffer[], localAddress?: string): Promise<void> {
  return new Promise((resolve) => {
    const s = tcpConnect({ host: '127.0.0.1', port, localAddress });
    s.once('connect', () => void once(s, bytes).then(resolve));
    s.once('error', () => resolve());
  });
}

/** `TRIES` calls of `fn`, 8 at a time. */
async function loop(fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < TRIES) await fn(next++);
    }),
  );
  // The broker's log stream is asynchronous: give its last lines time to arrive.
  await new Promise((r) => setTimeout(r, 300));
}

describe('log floods', () => {
  let open: TestBroker;
  beforeAll(async () => {
    open = await TestBroker.start({ args: ['--auth', 'no'] });
  });

  it('log flood - a refused SASL mechanism, tried again and again, is one line with the count held back', async () => {
    await loop(() => plain(open.port, [SASL_HEADER, perf.saslInit('NO-SUCH-MECHANISM')]));
    const lines = linesOf(open, 'connection failed');
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThanOrEqual(BOUND);
    expect(lines[0]).toMatch(/NO-SUCH-MECHANISM/);
  });

  it("log flood - links the client's own max-frame-size cannot carry: one line per interval, not one per attach", async () => {
    // A name too long for any attach within 512 bytes ends the session; a short name with a long address only refuses the link.
    await loop((i) =>
      plain(open.port, [AMQP_HEADER, perf.open({ containerId: `c${i}`, maxFrameSize: 512 }), perf.begin(), perf.attach({ name: 'n'.repeat(490), handle: 0, role: 'receiver', address: 'q' }), perf.close()]),
    );
    // Many refused attaches on one connection.
    const attaches = Array.from({ length: TRIES }, (_, i) => perf.attach({ name: `n${i}-${'n'.repeat(200)}`, handle: i, role: 'sender', address: 'q'.repeat(250) }));
    await plain(open.port, [AMQP_HEADER, perf.open({ containerId: 'one', maxFrameSize: 512 }), perf.begin(), ...attaches, perf.close()]);
    await new Promise((r) => setTimeout(r, 300));
    const ended = linesOf(open, "session ended: a link's name is too long");
    const refused = linesOf(open, "link refused: its attach would be over the peer's max-frame-size");
    expect(ended.length).toBeGreaterThanOrEqual(1);
    expect(ended.length).toBeLessThanOrEqual(BOUND);
    expect(refused.length).toBeGreaterThanOrEqual(1);
    expect(refused.length).toBeLessThanOrEqual(BOUND);
  });

  it("log flood - a client's container id of 60,000 characters is cut in the lines about it", async () => {
    const big = 'C'.repeat(60_000);
    // A violation after the open: two begins on one channel.
    await plain(open.port, [AMQP_HEADER, perf.open({ containerId: big }), perf.begin(), perf.begin()]);
    await new Promise((r) => setTimeout(r, 300));
    const lines = open.stderr.split('\n').filter((l) => l.includes('CCCCCCCCCC'));
    expect(lines.length).toBeGreaterThanOrEqual(1);
    for (const l of lines) {
      expect(l.length).toBeLessThan(2_000);
      expect(l).toContain('(60000 characters)');
    }
  });

  it('log flood - clients reconnecting to an HA backup: one "connection refused" line per interval, their container ids cut', async () => {
    const [port] = await freePorts(1);
    const backup = await TestBroker.start({ port, args: ['--auth', 'no', '--ha-cluster', 'yes', '--ha-brokers-url', `127.0.0.1:${port}`] });
    await loop((i) => plain(port!, [AMQP_HEADER, perf.open({ containerId: `client-${i}-${'x'.repeat(20_000)}` })]));
    const lines = linesOf(backup, 'connection refused');
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThanOrEqual(BOUND);
    for (const l of lines) expect(l.length).toBeLessThan(2_000);
  });
});

describe('log floods before the open', () => {
  it('log flood - sockets that say nothing until the handshake deadline: one line per interval', async () => {
    const b = await TestBroker.start({ args: ['--auth', 'no', '--handshake-timeout', '200ms'] });
    // Each from another address, as many hosts would (one address's share of silent sockets is bounded anyway).
    await loop((i) => plain(b.port, [], `127.4.${i >> 8}.${(i & 255) + 1}`));
    const lines = linesOf(b, 'connection closed at the handshake deadline');
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThanOrEqual(BOUND);
  });
});

describe('log floods on the TLS port', () => {
  let b: TestBroker;
  beforeAll(async () => {
    const users = join(dir, 'users');
    writeFileSync(users, `alice:admin:${await hashPassword('alice-pw')}\n`, { mode: 0o600 });
    b = await TestBroker.start({
      args: ['--auth', 'yes', '--users-file', users, '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca, '--tls-external-user', 'cn'],
    });
  });

  it('log flood - bytes that are not TLS, each try from another address: at most one line a second', async () => {
    const started = Date.now();
    await loop((i) => plain(b.tlsPort!, [Buffer.from('GET / HTTP/1.0\r\n\r\n')], `127.3.${i >> 8}.${(i & 255) + 1}`));
    const seconds = Math.ceil((Date.now() - started) / 1000);
    const lines = b.stderr.split('\n').filter((l) => l.includes('TLS client') || l.includes('TLS handshake'));
    expect(lines.length).toBeGreaterThanOrEqual(1);
    // Not a timing: whatever the loop took, a second of it holds one line.
    expect(lines.length).toBeLessThanOrEqual(seconds + 2);
    expect(lines.length).toBeLessThan(TRIES / 4);
  });

  it('log flood - an EXTERNAL login by a certificate of no user, again and again: one line per interval', async () => {
    const files = certs.client('mallory');
    const [ca, cert, key] = [certs.ca, files.cert, files.key].map((f) => readFileSync(f));
    await loop(
      () =>
        new Promise<void>((resolve) => {
          const s = tlsConnect({ host: '127.0.0.1', port: b.tlsPort!, ca, cert, key, servername: 'localhost' });
          s.once('secureConnect', () => void once(s, [SASL_HEADER, perf.saslInit('EXTERNAL')]).then(resolve));
          s.once('error', () => resolve());
        }),
    );
    const lines = linesOf(b, "authentication failed: the client certificate names 'mallory'");
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThanOrEqual(BOUND);
  });
});

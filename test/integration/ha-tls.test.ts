// TLS on every link where a password travels between hosts: a TLS-only HA cluster
// (listen-plain=no, amqps: ha-brokers-url) replicating and failing over on kill -9,
// the bytes of an HA link read off the wire by a relay, a backup given the wrong CA,
// plaintext against TLS-only brokers, and a DR copy over amqps with credentials.
// Certificates are real, made by openssl for 127.0.0.1 (test/helpers/certs.ts).
import { readFileSync } from 'node:fs';
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster, freePorts, tandem } from '../helpers/cluster.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { HA_PASSWORD, HA_USER, haIdentity, type HaIdentity } from '../helpers/ha-identity.js';
import { runPython } from '../helpers/python.js';
import { TestClient, bodyOf } from '../helpers/rhea-client.js';

let certs: TestCerts;
let identity: HaIdentity;
let cluster: TestCluster | undefined;

/** Auth on, the HA admin as the brokers' identity (what a real cluster runs with). */
const authArgs = () => ['--auth', 'yes', '--users-file', identity.usersFile, '--ha-username', HA_USER, '--ha-password-file', identity.passwordFile];

beforeAll(async () => {
  certs = makeCerts();
  identity = await haIdentity(certs.dir);
});

afterEach(async () => {
  await cluster?.stopAll();
  cluster = undefined;
  await killAllBrokers();
});

afterAll(() => certs.remove());

async function tlsCluster(n: number, args: string[] = []): Promise<TestCluster> {
  const c = await TestCluster.start(n, [...authArgs(), ...args], { ca: certs.ca, cert: certs.brokerCert, key: certs.brokerKey, cliUser: HA_USER });
  const promoted = await c.promote(0);
  expect(promoted.code, promoted.stderr).toBe(0);
  for (let i = 1; i < n; i++) await c.waitState(i, 'ready');
  return c;
}

/** The python scripts' TLS and identity (test/interop/py/tls_options.py). */
function pythonOverTls(): void {
  process.env.TANDEM_PY_CA = certs.ca;
  process.env.TANDEM_PY_USER = HA_USER;
  process.env.TANDEM_PY_PASSWORD = HA_PASSWORD;
}

async function depth(c: TestCluster, i: number, queue: string): Promise<number> {
  const r = await tandem(['queue', 'list', '--json', ...c.cliTarget(i)]);
  if (r.code !== 0) return 0;
  return (JSON.parse(r.stdout) as Array<{ name: string; depth: number }>).find((q) => q.name === queue)?.depth ?? 0;
}

describe('ha over tls', () => {
  it('ha tls - a TLS-only cluster replicates and fails over on kill -9 of the primary with nothing accepted lost', async () => {
    cluster = await tlsCluster(3);
    const c = cluster;
    for (const b of c.brokers) {
      // TLS only: the plain port is closed, so nothing a broker says crosses in clear.
      expect(b!.stdout).not.toMatch(/listening on /);
      expect(b!.stdout).toMatch(/listening \(tls\) on 127\.0\.0\.1:\d+/);
    }
    pythonOverTls();
    const urls = c.ports.map((p) => `localhost:${p}`).join(',');
    const sending = runPython<{ accepted: number[]; resent: number }>('failover_send.py', [urls, 'tq', '5000', '90'], 120_000);
    await waitFor(async () => (await depth(c, 1, 'tq')) > 300, { timeout: 60_000, interval: 200, name: 'traffic replicated to a backup' });
    await c.kill(0);
    const promoted = await c.promote(1);
    expect(promoted.code, promoted.stderr).toBe(0);
    const result = await sending;
    expect(result.accepted.length).toBe(5000);
    await c.waitState(2, 'ready');
    const drained = await runPython<string[]>('drain.py', [`localhost:${c.ports[1]}`, 'tq'], 120_000);
    const seen = new Set(drained);
    expect(result.accepted.filter((n) => !seen.has(`seq-${n}`))).toEqual([]);
    expect(drained.length - seen.size).toBeLessThanOrEqual(result.resent);
    // Every broker's view of the others goes over TLS too.
    const all = await tandem(['ha', 'status', '--all', '--json', ...c.cliTarget(1)]);
    expect(all.code, all.stderr).toBe(0);
    const states = (JSON.parse(all.stdout) as Array<{ state: string }>).map((s) => s.state).sort();
    expect(states).toEqual(['active', 'ready', 'unreachable']);
  }, 180_000);
});

/** A TCP relay that keeps every byte it passes, both ways (what a wiretap on the HA link sees). */
async function startRelay(targetPort: number): Promise<{ port: number; captured: () => Buffer; close: () => Promise<void> }> {
  const chunks: Buffer[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((inbound) => {
    const outbound = netConnect({ host: '127.0.0.1', port: targetPort });
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    inbound.on('data', (d: Buffer) => {
      chunks.push(Buffer.from(d));
      outbound.write(d);
    });
    outbound.on('data', (d: Buffer) => {
      chunks.push(Buffer.from(d));
      inbound.write(d);
    });
    inbound.on('close', () => outbound.destroy());
    outbound.on('close', () => inbound.destroy());
  });
  const [port] = await freePorts(1);
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return {
    port: port!,
    captured: () => Buffer.concat(chunks),
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

/**
 * Two brokers, primary A and backup B, where B reaches A only through a relay; with
 * `tls` both are TLS-only with amqps: URLs. Sends `messages` durable messages to A and
 * waits until B holds them. Returns what crossed the relay.
 */
async function relayedPair(tls: boolean, messages: number): Promise<Buffer> {
  const [a, b] = await freePorts(2);
  const relay = await startRelay(a!);
  const scheme = tls ? 'amqps:' : '';
  const broker = (port: number, url: string) =>
    TestBroker.start({
      port: tls ? 0 : port,
      args: [
        '--ha-cluster', 'yes', '--ha-brokers-url', url, '--ha-heartbeat-interval', '1s', ...authArgs(),
        ...(tls ? ['--listen-plain', 'no', '--tls-port', String(port), '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--ha-tls-ca', certs.ca] : []),
      ],
    });
  try {
    await broker(a!, `${scheme}127.0.0.1:${a},127.0.0.1:${b}`);
    await broker(b!, `${scheme}127.0.0.1:${relay.port},127.0.0.1:${b}`);
    const target = (port: number) => (tls ? ['-b', `amqps://${HA_USER}@127.0.0.1:${port}`, '--tls-ca', certs.ca] : ['-b', `${HA_USER}@127.0.0.1:${port}`]);
    const promoted = await tandem(['ha', 'promote', ...target(a!), '--cluster-manager']);
    expect(promoted.code, promoted.stderr).toBe(0);
    await waitFor(async () => JSON.parse((await tandem(['ha', 'status', ...target(b!), '--json'])).stdout || '{}').state === 'ready', { timeout: 30_000, interval: 200, name: 'backup ready' });
    const client = await TestClient.connect({
      port: a!,
      username: HA_USER,
      password: HA_PASSWORD,
      ...(tls ? { transport: 'tls', ca: [readFileSync(certs.ca)], servername: 'localhost' } : {}),
    } as never);
    const outcomes = await client.send('wiretap.q', Array.from({ length: messages }, (_, i) => ({ body: `wiretap-secret-body-${i}`, durable: true })));
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    client.connection.close();
    await waitFor(
      async () => {
        const r = await tandem(['queue', 'list', '--json', ...target(b!)]);
        return r.code === 0 && (JSON.parse(r.stdout) as Array<{ name: string; depth: number }>).some((q) => q.name === 'wiretap.q' && q.depth === messages);
      },
      { timeout: 30_000, interval: 200, name: 'backup holds every message' },
    );
    return relay.captured();
  } finally {
    await relay.close();
    await killAllBrokers();
  }
}

describe('ha link on the wire', () => {
  it('ha tls - what crosses a TLS HA link holds neither the ha-password nor a message body; over plain AMQP the same relay sees both', async () => {
    const overTls = await relayedPair(true, 50);
    expect(overTls.length).toBeGreaterThan(5_000);
    // A TLS handshake record opens the stream, and nothing readable follows.
    expect(overTls[0]).toBe(0x16);
    expect(overTls.includes(Buffer.from(HA_PASSWORD))).toBe(false);
    expect(overTls.includes(Buffer.from('wiretap-secret-body'))).toBe(false);
    expect(overTls.includes(Buffer.from('AMQP'))).toBe(false);
    // The control: the relay does see what a plaintext link carries.
    const overPlain = await relayedPair(false, 50);
    expect(overPlain.includes(Buffer.from(HA_PASSWORD))).toBe(true);
    expect(overPlain.includes(Buffer.from('wiretap-secret-body'))).toBe(true);
  }, 120_000);
});

describe('refusals', () => {
  it('ha tls - a backup refuses to follow a broker whose certificate the CA did not sign or that names another host, and says why; plaintext against a TLS-only broker fails clearly', async () => {
    cluster = await tlsCluster(2);
    const c = cluster;
    const [extra] = await freePorts(1);
    const stranger = await TestBroker.start({
      port: 0,
      args: [
        '--ha-cluster', 'yes', '--ha-brokers-url', `amqps:127.0.0.1:${c.ports[0]},127.0.0.1:${c.ports[1]},127.0.0.1:${extra}`, '--ha-heartbeat-interval', '1s', ...authArgs(),
        '--listen-plain', 'no', '--tls-port', String(extra), '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--ha-tls-ca', certs.wrongCa,
      ],
    });
    await waitFor(() => /not following 127\.0\.0\.1:\d+: the peer's TLS certificate does not verify \(\w+\) against ha-tls-ca/.test(stranger.stderr), { timeout: 20_000, name: 'wrong-CA warning' });
    const status = await tandem(['ha', 'status', '--json', '-b', `amqps://${HA_USER}@127.0.0.1:${extra}`, '--tls-ca', certs.ca]);
    expect(JSON.parse(status.stdout).state).toBe('joining');
    expect(stranger.stderr).not.toContain(HA_PASSWORD);

    // The CLI in plaintext at a TLS port: refused, with the hint.
    const plain = await tandem(['ha', 'status', '-b', `${HA_USER}@127.0.0.1:${c.ports[0]}`, '--timeout', '5']);
    expect(plain.code).toBe(7);
    expect(plain.stderr).toMatch(/if this is its TLS port, use amqps:\/\//);
    // A TLS-only cluster member with plain addresses could reach no one: refused at start.
    await expect(
      TestBroker.start({ args: ['--ha-cluster', 'yes', '--ha-brokers-url', c.ports.map((p) => `127.0.0.1:${p}`).join(','), ...authArgs(), '--listen-plain', 'no', '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey] }),
    ).rejects.toThrow(/listen-plain=no with ha-cluster=yes needs an amqps: ha-brokers-url/);
    // A broker whose certificate the right CA signed but for another name: never followed either.
    await killAllBrokers();
    cluster = undefined;
    const [p, q] = await freePorts(2);
    const url = `amqps:127.0.0.1:${p},127.0.0.1:${q}`;
    const start = (port: number, cert: string, key: string) =>
      TestBroker.start({
        port: 0,
        args: ['--ha-cluster', 'yes', '--ha-brokers-url', url, '--ha-heartbeat-interval', '1s', ...authArgs(), '--listen-plain', 'no', '--tls-port', String(port), '--tls-cert', cert, '--tls-key', key, '--ha-tls-ca', certs.ca],
      });
    await start(p!, certs.misnamed.cert, certs.misnamed.key);
    const follower = await start(q!, certs.brokerCert, certs.brokerKey);
    // The backup looks for the primary at every address: the misnamed one it refuses by name.
    await waitFor(() => /not following 127\.0\.0\.1:\d+: the peer's TLS certificate does not name the address dialled/.test(follower.stderr), { timeout: 20_000, name: 'misnamed-certificate warning' });
    // A broker that requires client certificates, and one that has none to show: says which option to set.
    await killAllBrokers();
    const [r, t] = await freePorts(2);
    const pairUrl = `amqps:127.0.0.1:${r},127.0.0.1:${t}`;
    const tlsOnly = (port: number, extra: string[]) =>
      TestBroker.start({
        port: 0,
        args: ['--ha-cluster', 'yes', '--ha-brokers-url', pairUrl, '--ha-heartbeat-interval', '1s', ...authArgs(), '--listen-plain', 'no', '--tls-port', String(port), '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--ha-tls-ca', certs.ca, ...extra],
      });
    await tlsOnly(r!, ['--tls-ca', certs.ca, '--tls-require-client-cert', 'yes']);
    const certless = await tlsOnly(t!, []);
    await waitFor(() => new RegExp(`not following 127\\.0\\.0\\.1:${r}: the peer refused this broker's TLS client certificate, or wants one \\(\\w+\\): set ha-tls-cert/ha-tls-key`).test(certless.stderr), { timeout: 20_000, name: 'missing client certificate warning' });
    // An amqps: URL on a broker without a TLS listener: refused at start.
    await expect(TestBroker.start({ args: ['--ha-cluster', 'yes', '--ha-brokers-url', c.url, ...authArgs()] })).rejects.toThrow(/ha-brokers-url is amqps: .* but this broker has no TLS listener/);
  }, 90_000);
});

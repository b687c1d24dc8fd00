// DR over TLS: a secondary copies a queue from a TLS-only source (amqps:, with
// credentials), verifies the source's certificate against dr-tls-ca, keeps the copy
// over TLS across a kill -9 (the scheme is part of the journaled source), and a
// secondary given the wrong CA copies nothing and says why. Real openssl certificates.
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { HA_PASSWORD, HA_USER, haIdentity, type HaIdentity } from '../helpers/ha-identity.js';
import { TestClient } from '../helpers/rhea-client.js';
import { TestCluster } from '../helpers/cluster.js';

let certs: TestCerts;
let identity: HaIdentity;

beforeAll(async () => {
  certs = makeCerts();
  identity = await haIdentity(certs.dir);
});

afterAll(async () => {
  await killAllBrokers();
  certs.remove();
});

/** A TLS-only broker with auth on (the HA admin is its one user). */
function tlsOnlyBroker(args: string[] = [], dataDir?: string): Promise<TestBroker> {
  return TestBroker.start({
    dataDir,
    args: ['--auth', 'yes', '--users-file', identity.usersFile, '--listen-plain', 'no', '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, ...args],
  });
}

const cli = (b: TestBroker) => ['-b', `amqps://${HA_USER}@127.0.0.1:${b.tlsPort}`, '--tls-ca', certs.ca];

async function sendOverTls(b: TestBroker, queue: string, bodies: string[]): Promise<void> {
  const client = await TestClient.connect({ port: b.tlsPort!, username: HA_USER, password: HA_PASSWORD, transport: 'tls', ca: [readFileSync(certs.ca)], servername: 'localhost' } as never);
  try {
    const outcomes = await client.send(queue, bodies.map((body) => ({ body, durable: true })));
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
  } finally {
    client.connection.close();
  }
}

async function drRow(b: TestBroker, queue: string): Promise<Record<string, unknown> | undefined> {
  const r = await tandem(['dr', 'status', '--json', ...cli(b)]);
  if (r.code !== 0) return undefined;
  return (JSON.parse(r.stdout) as Array<Record<string, unknown>>).find((row) => row.queue === queue);
}

async function depth(b: TestBroker | string[], queue: string): Promise<number> {
  const r = await tandem(['queue', 'list', '--json', ...(Array.isArray(b) ? b : cli(b))]);
  if (r.code !== 0) return -1;
  return (JSON.parse(r.stdout) as Array<{ name: string; depth: number }>).find((q) => q.name === queue)?.depth ?? 0;
}

describe('DR over TLS', () => {
  it('DR tls - a copy from a TLS-only source over amqps with credentials, kept over TLS across a kill -9 of the secondary', async () => {
    const source = await tlsOnlyBroker();
    let secondary = await tlsOnlyBroker(['--dr-tls-ca', certs.ca]);
    expect((await tandem(['queue', 'add', 'orders', '--durable', ...cli(source)])).code).toBe(0);
    await sendOverTls(source, 'orders', Array.from({ length: 100 }, (_, i) => `o-${i}`));
    const add = await tandem(['dr', 'add', 'orders', '--source', `amqps://${HA_USER}@127.0.0.1:${source.tlsPort}`, '--source-password-file', identity.passwordFile, ...cli(secondary)]);
    expect(add.code, add.stderr).toBe(0);
    expect(add.stdout + add.stderr).not.toContain(HA_PASSWORD);
    await waitFor(async () => (await depth(secondary, 'orders')) === 100, { timeout: 30_000, interval: 200, name: 'copy of 100' });
    const row = await drRow(secondary, 'orders');
    expect(row?.link).toBe('connected');
    expect(String(row?.source)).toMatch(/^amqps:127\.0\.0\.1:\d+$/);
    expect(JSON.stringify(row)).not.toContain(HA_PASSWORD);

    // The journal keeps the source as amqps: (and its password apart): after kill -9 the copy resumes over TLS.
    const dataDir = secondary.dataDir;
    await secondary.kill();
    secondary = await tlsOnlyBroker(['--dr-tls-ca', certs.ca], dataDir);
    await sendOverTls(source, 'orders', Array.from({ length: 50 }, (_, i) => `p-${i}`));
    await waitFor(async () => (await depth(secondary, 'orders')) === 150, { timeout: 30_000, interval: 200, name: 'copy of 150 after the restart' });
    expect(readFileSync(`${dataDir}/dr-credentials`, 'utf8')).toContain(HA_PASSWORD);
    expect(secondary.stderr + secondary.stdout).not.toContain(HA_PASSWORD);
  }, 90_000);

  it('DR tls - a source URL without a user and a dr-tls-cert: the bridge logs in with its certificate (SASL EXTERNAL)', async () => {
    // The HA admin's certificate names 'ha', an admin of the source's users file.
    const ha = certs.client(HA_USER);
    const source = await tlsOnlyBroker(['--tls-ca', certs.ca, '--tls-external-user', 'cn']);
    const secondary = await tlsOnlyBroker(['--dr-tls-ca', certs.ca, '--dr-tls-cert', ha.cert, '--dr-tls-key', ha.key]);
    expect((await tandem(['queue', 'add', 'bycert', '--durable', ...cli(source)])).code).toBe(0);
    await sendOverTls(source, 'bycert', ['c-0', 'c-1']);
    const add = await tandem(['dr', 'add', 'bycert', '--source', `amqps://127.0.0.1:${source.tlsPort}`, ...cli(secondary)]);
    expect(add.code, add.stderr).toBe(0);
    await waitFor(async () => (await depth(secondary, 'bycert')) === 2, { timeout: 30_000, interval: 200, name: 'copy of 2 by certificate' });
  }, 60_000);

  it('DR tls - a secondary whose dr-tls-ca did not sign the source copies nothing and says why', async () => {
    const source = await tlsOnlyBroker();
    const secondary = await tlsOnlyBroker(['--dr-tls-ca', certs.wrongCa]);
    expect((await tandem(['queue', 'add', 'audit', '--durable', ...cli(source)])).code).toBe(0);
    await sendOverTls(source, 'audit', ['a-0']);
    const add = await tandem(['dr', 'add', 'audit', '--source', `amqps://${HA_USER}@127.0.0.1:${source.tlsPort}`, '--source-password-file', identity.passwordFile, ...cli(secondary)]);
    expect(add.code, add.stderr).toBe(0);
    const row = await waitFor(async () => {
      const r = await drRow(secondary, 'audit');
      return r && /TLS certificate does not verify \(\w+\) against dr-tls-ca/.test(String(r['last-error'])) ? r : undefined;
    }, { timeout: 20_000, interval: 200, name: 'DR last-error names the CA' });
    expect(row.link).not.toBe('connected');
    expect(await depth(secondary, 'audit')).toBe(0);
  }, 60_000);

  it('DR tls - a TLS-only secondary cluster: its backup is handed the DR password and copies on after a kill -9 failover', async () => {
    const source = await tlsOnlyBroker();
    // A 2-broker secondary whose new primary serves alone after the failover (explicitly).
    const sec = await TestCluster.start(
      2,
      ['--auth', 'yes', '--users-file', identity.usersFile, '--ha-username', HA_USER, '--ha-password-file', identity.passwordFile, '--dr-tls-ca', certs.ca, '--ha-min-ready-backups', '0'],
      { ca: certs.ca, cert: certs.brokerCert, key: certs.brokerKey, cliUser: HA_USER },
    );
    try {
      expect((await sec.promote(0)).code).toBe(0);
      await sec.waitState(1, 'ready');
      expect((await tandem(['queue', 'add', 'failover.q', '--durable', ...cli(source)])).code).toBe(0);
      const add = await tandem(['dr', 'add', 'failover.q', '--source', `amqps://${HA_USER}@127.0.0.1:${source.tlsPort}`, '--source-password-file', identity.passwordFile, ...sec.cliTarget(0)]);
      expect(add.code, add.stderr).toBe(0);
      await sendOverTls(source, 'failover.q', Array.from({ length: 20 }, (_, i) => `f-${i}`));
      await waitFor(async () => (await depth(sec.cliTarget(1), 'failover.q')) === 20, { timeout: 30_000, interval: 200, name: 'the backup holds the copy' });
      // The password reached the backup's own store (0600), not its journal.
      const kept = join(sec.dataDirs[1]!, 'dr-credentials');
      await waitFor(() => { try { return readFileSync(kept, 'utf8').includes(HA_PASSWORD); } catch { return false; } }, { name: 'dr-credentials on the backup' });
      expect(statSync(kept).mode & 0o777).toBe(0o600);

      await sec.kill(0);
      const promoted = await sec.promote(1);
      expect(promoted.code, promoted.stderr).toBe(0);
      await sendOverTls(source, 'failover.q', Array.from({ length: 20 }, (_, i) => `g-${i}`));
      await waitFor(async () => (await depth(sec.cliTarget(1), 'failover.q')) === 40, { timeout: 30_000, interval: 200, name: 'the new primary copies on' });
      expect(sec.brokers[1]!.stderr).not.toContain(HA_PASSWORD);
    } finally {
      await sec.stopAll();
    }
  }, 120_000);
});

// SASL EXTERNAL: a client certificate verified against tls-ca logs in as the user it
// names (tls-external-user=cn or san-email), who must be in the users file (admin or
// not from there); offered only on TLS with a verified certificate. python-proton
// (SSLDomain with a client certificate, allowed_mechs EXTERNAL) and the tandem CLI,
// real openssl certificates; then an HA pair whose brokers log in with EXTERNAL.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { TestCluster, tandem } from '../helpers/cluster.js';
import { tandem as tandemWithInput } from '../helpers/tandem-cli.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { debianPython } from '../helpers/python.js';
import { repoRoot } from '../helpers/broker.js';

let certs: TestCerts;
let usersFile: string;

interface PyResult {
  ok: boolean;
  error?: string;
  outcomes?: Array<{ state: string }>;
  messages?: Array<{ body: string }>;
}

/** test/interop/py/client.py; a refusal is a result ({ok: false}), not a failure. */
function py(args: string[]): Promise<PyResult> {
  return new Promise((resolve, reject) => {
    execFile(debianPython, [join(repoRoot, 'test', 'interop', 'py', 'client.py'), ...args], { timeout: 30_000 }, (_err, stdout, stderr) => {
      const line = String(stdout).trim().split('\n').pop() ?? '';
      try {
        resolve(JSON.parse(line) as PyResult);
      } catch {
        reject(new Error(`client.py printed no JSON: ${stdout}\n${stderr}`));
      }
    });
  });
}

async function addUser(args: string[], input?: string): Promise<void> {
  const r = await tandemWithInput(['user', 'add', ...args, '-f', usersFile], { input });
  expect(r.code, r.stderr).toBe(0);
}

beforeAll(async () => {
  certs = makeCerts();
  usersFile = join(certs.dir, 'users');
  await addUser(['alice', '--admin', '--certificate-only']);
  await addUser(['bob', '--password-file', '-'], 'bob-secret\n');
  await addUser(['carol@example.test', '--certificate-only']);
});

afterEach(async () => {
  await killAllBrokers();
});

afterAll(() => certs.remove());

function externalBroker(mapping: string, extra: string[] = []): Promise<TestBroker> {
  return TestBroker.start({
    args: ['--auth', 'yes', '--users-file', usersFile, '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca, '--tls-external-user', mapping, ...extra],
  });
}

const asCert = (cn: string) => ['--ca', certs.ca, '--cert', certs.client(cn).cert, '--key', certs.client(cn).key];

describe('sasl external', () => {
  it('external - a certificate naming a user logs in as that user, admin or not as the users file says; nobody else does', async () => {
    const b = await externalBroker('cn');
    const tls = `amqps://localhost:${b.tlsPort}`;
    const sent = await py(['send', tls, 'ext.q', '--count', '3', '--mechs', 'EXTERNAL', ...asCert('alice')]);
    expect(sent.ok, sent.error).toBe(true);
    expect(sent.outcomes?.map((o) => o.state)).toEqual(['accepted', 'accepted', 'accepted']);
    const got = await py(['receive', tls, 'ext.q', '--count', '3', '--mechs', 'EXTERNAL', ...asCert('bob')]);
    expect(got.ok, got.error).toBe(true);
    expect(got.messages?.map((m) => m.body)).toEqual(['py0', 'py1', 'py2']);

    // The CLI: a certificate and no user in -b is EXTERNAL. alice is an admin, bob is not.
    const target = ['-b', `amqps://127.0.0.1:${b.tlsPort}`, '--tls-ca', certs.ca];
    const alice = await tandem(['queue', 'list', ...target, '--tls-cert', certs.client('alice').cert, '--tls-key', certs.client('alice').key]);
    expect(alice.code, alice.stderr).toBe(0);
    expect(alice.stdout).toMatch(/ext\.q/);
    const bob = await tandem(['queue', 'list', ...target, '--tls-cert', certs.client('bob').cert, '--tls-key', certs.client('bob').key]);
    expect(bob.code, bob.stderr).toBe(7);
    const connections = await tandem(['connection', 'list', '--json', ...target, '--tls-cert', certs.client('alice').cert, '--tls-key', certs.client('alice').key]);
    expect(connections.code, connections.stderr).toBe(0);
    expect((JSON.parse(connections.stdout) as Array<{ user: string; admin: boolean }>).some((c) => c.user === 'alice' && c.admin)).toBe(true);

    // A certificate naming no one in the users file: refused, and the log says whom it named.
    const mallory = await py(['send', tls, 'ext.q', '--mechs', 'EXTERNAL', ...asCert('mallory')]);
    expect(mallory.ok).toBe(false);
    await waitFor(() => /names 'mallory', who is not in users-file/.test(b.stderr), { name: 'mallory refusal logged' });
    // A certificate tls-ca did not sign: EXTERNAL is not offered at all (PLAIN still is).
    const stranger = await py(['send', tls, 'ext.q', '--mechs', 'EXTERNAL', '--ca', certs.ca, '--cert', certs.wrongCa, '--key', certs.wrongCa.replace(/\.pem$/, '.key')]);
    expect(stranger.ok).toBe(false);
    // No certificate, or the plain port: nothing external to trust, so no EXTERNAL.
    expect((await py(['send', tls, 'ext.q', '--mechs', 'EXTERNAL', '--ca', certs.ca])).ok).toBe(false);
    expect((await py(['send', `amqp://127.0.0.1:${b.port}`, 'ext.q', '--mechs', 'EXTERNAL'])).ok).toBe(false);
    // PLAIN goes on as before on TLS; a certificate-only user has no password to give.
    expect((await py(['send', tls, 'ext.q', '--user', 'bob', '--password', 'bob-secret', '--mechs', 'PLAIN', '--ca', certs.ca])).ok).toBe(true);
    expect((await py(['send', tls, 'ext.q', '--user', 'alice', '--password', '', '--mechs', 'PLAIN', '--ca', certs.ca])).ok).toBe(false);
    expect((await py(['send', tls, 'ext.q', '--user', 'alice', '--password', '!', '--mechs', 'PLAIN', '--ca', certs.ca])).ok).toBe(false);
    expect(b.alive).toBe(true);
  }, 90_000);

  it('external - tls-external-user=san-email maps the e-mail subject-alternative-name; off by default', async () => {
    const b = await externalBroker('san-email');
    const tls = `amqps://localhost:${b.tlsPort}`;
    const carol = await py(['send', tls, 'san.q', '--mechs', 'EXTERNAL', ...asCert('carol')]);
    expect(carol.ok, carol.error).toBe(true);
    // alice's certificate carries alice@example.test, who is not a user (alice is).
    expect((await py(['send', tls, 'san.q', '--mechs', 'EXTERNAL', ...asCert('alice')])).ok).toBe(false);
    await waitFor(() => /names 'alice@example\.test', who is not in users-file/.test(b.stderr), { name: 'san refusal logged' });

    const off = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile, '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca] });
    expect((await py(['send', `amqps://localhost:${off.tlsPort}`, 'san.q', '--mechs', 'EXTERNAL', ...asCert('alice')])).ok).toBe(false);
    const cliOff = await tandem(['queue', 'list', '-b', `amqps://127.0.0.1:${off.tlsPort}`, '--tls-ca', certs.ca, '--tls-cert', certs.client('alice').cert, '--tls-key', certs.client('alice').key, '--timeout', '5']);
    expect(cliOff.code).toBe(69);
    expect(cliOff.stderr).toMatch(/does not take client certificates as identities: set tls-external-user/);
    const ha = certs.client('ha');
    await expect(
      TestBroker.start({ args: ['--ha-cluster', 'yes', '--ha-brokers-url', 'amqps:127.0.0.1:1', '--ha-mechanism', 'EXTERNAL', '--ha-tls-cert', ha.cert, '--ha-tls-key', ha.key, '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey] }),
    ).rejects.toThrow(/ha-mechanism EXTERNAL needs tls-external-user/);
    await expect(TestBroker.start({ args: ['--tls-external-user', 'cn'] })).rejects.toThrow(/tls-external-user needs a TLS listener/);
    await expect(TestBroker.start({ args: ['--tls-external-user', 'dn', '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca] })).rejects.toThrow(/tls-external-user must be no, cn or san-email/);
  }, 60_000);
});

describe('ha with external', () => {
  let cluster: TestCluster | undefined;
  afterEach(async () => {
    await cluster?.stopAll();
    cluster = undefined;
  });

  it('external - an HA pair whose brokers log in with their certificates (ha-mechanism=EXTERNAL, client certificates required) replicates', async () => {
    await addUser(['ha', '--admin', '--certificate-only']);
    const ha = certs.client('ha');
    cluster = await TestCluster.start(
      2,
      ['--auth', 'yes', '--users-file', usersFile, '--tls-ca', certs.ca, '--tls-require-client-cert', 'yes', '--tls-external-user', 'cn', '--ha-mechanism', 'EXTERNAL', '--ha-tls-cert', ha.cert, '--ha-tls-key', ha.key, '--ha-min-ready-backups', '1'],
      { ca: certs.ca, cert: certs.brokerCert, key: certs.brokerKey, cliCert: ha },
    );
    const c = cluster;
    const promoted = await c.promote(0);
    expect(promoted.code, promoted.stderr).toBe(0);
    await c.waitState(1, 'ready');
    const add = await tandem(['queue', 'add', 'ext.ha.q', '--durable', ...c.cliTarget(0)]);
    expect(add.code, add.stderr).toBe(0);
    const sent = await py(['send', `amqps://localhost:${c.ports[0]}`, 'ext.ha.q', '--count', '5', '--durable', '--mechs', 'EXTERNAL', ...asCert('alice')]);
    expect(sent.ok, sent.error).toBe(true);
    await waitFor(
      async () => {
        const r = await tandem(['queue', 'list', '--json', ...c.cliTarget(1)]);
        return r.code === 0 && (JSON.parse(r.stdout) as Array<{ name: string; depth: number }>).some((q) => q.name === 'ext.ha.q' && q.depth === 5);
      },
      { timeout: 20_000, interval: 200, name: 'backup holds the 5' },
    );
    // Without its certificate the CLI is turned away by the TLS handshake itself.
    const bare = await tandem(['ha', 'status', '-b', `amqps://127.0.0.1:${c.ports[1]}`, '--tls-ca', certs.ca, '--timeout', '5']);
    expect(bare.code).toBe(7);
  }, 90_000);
});

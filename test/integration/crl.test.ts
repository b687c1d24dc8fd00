// Certificate revocation (tls-crl, ha-tls-crl, the CLI's --tls-crl): real tandemd,
// certificates revoked with `openssl ca -revoke` and lists made with `openssl ca
// -gencrl` (test/helpers/certs.ts), clients rhea and python-proton. What is claimed in
// docs/security.md is shown here: the listener refuses a revoked client certificate
// (and logs why), EXTERNAL is not offered for one, the whole chain is checked (a CA
// without a CRL refuses everyone under it), an expired CRL refuses everyone and is
// warned about, SIGHUP reloads the lists without dropping connections, and brokers
// and the CLI refuse a peer whose server certificate is revoked.
import { execFile } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import rhea, { type Connection } from 'rhea';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TestBroker, killAllBrokers, repoRoot, waitFor } from '../helpers/broker.js';
import { freePorts, tandem } from '../helpers/cluster.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { HA_USER, haIdentity, type HaIdentity } from '../helpers/ha-identity.js';
import { debianPython } from '../helpers/python.js';
import { tandem as tandemWithInput } from '../helpers/tandem-cli.js';

let certs: TestCerts;
/** The CA's CRL with mallory's certificate and the revoked broker certificate on it. */
let crl: string;
/** The same CA's CRL from before those revocations. */
let crlBefore: string;
let mallory: { cert: string; key: string };
let revokedBroker: { cert: string; key: string };

beforeAll(() => {
  certs = makeCerts();
  mallory = certs.client('mallory');
  revokedBroker = certs.server('revoked-broker');
  crlBefore = certs.crl();
  certs.revoke(mallory.cert);
  certs.revoke(revokedBroker.cert);
  crl = certs.crl();
});

afterEach(async () => {
  await killAllBrokers();
});

afterAll(() => certs.remove());

/** A broker that verifies client certificates against the CA and `crlFile`. */
function verifyingBroker(crlFile: string, extra: string[] = []): Promise<TestBroker> {
  return TestBroker.start({
    args: ['--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca, '--tls-crl', crlFile, '--tls-require-client-cert', 'yes', ...extra],
  });
}

/** rhea over TLS with a client certificate: 'open' once the broker opened AMQP, else why not. */
function rheaOpen(port: number, client: { cert: string; key: string }): Promise<{ result: 'open' | 'refused'; connection?: Connection; error?: string }> {
  return new Promise((resolve) => {
    const container = rhea.create_container({ id: `crl-test-${Math.random()}` });
    const conn = container.connect({
      transport: 'tls',
      host: '127.0.0.1',
      port,
      ca: readFileSync(certs.ca),
      cert: readFileSync(client.cert),
      key: readFileSync(client.key),
      servername: '',
      reconnect: false,
      idle_time_out: 0,
    } as never);
    conn.on('connection_open', () => resolve({ result: 'open', connection: conn }));
    conn.on('disconnected', (ctx) => resolve({ result: 'refused', error: String((ctx as { error?: Error }).error?.message ?? 'closed') }));
    conn.on('error', () => undefined);
  });
}

interface PyResult {
  ok: boolean;
  stage?: string;
  error?: string;
  outcomes?: Array<{ state: string }>;
}

/** test/interop/py/client.py; a refusal is a result ({ok: false}), not a failure. */
function py(args: string[]): Promise<PyResult> {
  return new Promise((resolve, reject) => {
    execFile(debianPython, [join(repoRoot, 'test', 'interop', 'py', 'client.py'), ...args], { timeout: 30_000 }, (_err, stdout, stderr) => {
      try {
        resolve(JSON.parse(String(stdout).trim().split('\n').pop() ?? '') as PyResult);
      } catch {
        reject(new Error(`client.py printed no JSON: ${stdout}\n${stderr}`));
      }
    });
  });
}

const asCert = (c: { cert: string; key: string }) => ['--ca', certs.ca, '--cert', c.cert, '--key', c.key, '--timeout', '5'];

/** The broker's JSON log lines (stderr is not a terminal) that have `field` = `value`. */
function logLines(b: TestBroker, field: string, value: unknown): Array<Record<string, unknown>> {
  return b.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l[field] === value);
}

describe('tls-crl on the listener', () => {
  it('crl listener - a revoked client certificate is refused and logged, a good one of the same CA accepted', async () => {
    const b = await verifyingBroker(crl);
    const url = `amqps://localhost:${b.tlsPort}`;
    const good = await py(['send', url, 'crl.q', ...asCert(certs.client('alice'))]);
    expect(good.ok, good.error).toBe(true);
    expect(good.outcomes?.map((o) => o.state)).toEqual(['accepted']);
    const revoked = await py(['send', url, 'crl.q', ...asCert(mallory)]);
    expect(revoked.ok).toBe(false);
    expect(revoked.stage).toBe('connect');
    // rhea as well: the TLS handshake completes on the client's side (TLS 1.3), then
    // Node closes the socket without a byte of AMQP, so the connection never opens.
    expect((await rheaOpen(b.tlsPort!, certs.client('alice'))).result).toBe('open');
    expect((await rheaOpen(b.tlsPort!, mallory)).result).toBe('refused');
    const line = (await waitFor(() => logLines(b, 'reason', 'CERT_REVOKED')[0], { name: 'refusal logged' }))!;
    expect(line.remote).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(line.msg).toMatch(/^TLS client 127\.0\.0\.1:\d+ refused: its TLS certificate \(or a CA certificate of its chain\) is revoked by tls-crl \(CERT_REVOKED\)/);
    expect(line.level).toBe(40);
    expect(b.alive).toBe(true);
  }, 60_000);

  it('crl external - a revoked certificate is not offered SASL EXTERNAL; a good one logs in by it', async () => {
    const usersFile = join(certs.dir, 'users-external');
    for (const name of ['alice', 'mallory']) {
      const r = await tandemWithInput(['user', 'add', name, '--certificate-only', '-f', usersFile]);
      expect(r.code, r.stderr).toBe(0);
    }
    // Without tls-require-client-cert: a client whose certificate fails may still log in with a password, never by it.
    const b = await TestBroker.start({
      args: ['--auth', 'yes', '--users-file', usersFile, '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca, '--tls-crl', crl, '--tls-external-user', 'cn'],
    });
    const url = `amqps://localhost:${b.tlsPort}`;
    const alice = await py(['send', url, 'ext.q', '--mechs', 'EXTERNAL', ...asCert(certs.client('alice'))]);
    expect(alice.ok, alice.error).toBe(true);
    const refused = await py(['send', url, 'ext.q', '--mechs', 'EXTERNAL', ...asCert(mallory)]);
    expect(refused.ok).toBe(false);
    expect(refused.error).toMatch(/SASL|mech/i);
    const line = await waitFor(() => logLines(b, 'reason', 'CERT_REVOKED')[0], { name: 'untrusted certificate logged' });
    expect(line.subject).toBe('CN=mallory');
    expect(line.msg).toMatch(/cannot log in by it \(no SASL EXTERNAL\): its TLS certificate .* is revoked by tls-crl/);
    // The CLI with mallory's certificate as its identity: refused too.
    const cli = await tandem(['queue', 'list', '-b', `amqps://127.0.0.1:${b.tlsPort}`, '--tls-ca', certs.ca, '--tls-cert', mallory.cert, '--tls-key', mallory.key, '--timeout', '5']);
    expect(cli.code).not.toBe(0);
  }, 60_000);

  it('crl chain - every certificate of the chain is checked: the root CRL revokes an intermediate, a CA without a CRL refuses all under it', async () => {
    const inter = certs.intermediate;
    const ivy = inter.client('ivy');
    const eve = inter.client('eve');
    inter.revoke(eve.cert);
    // One file holding both lists (the root's, then the intermediate's), as the docs say to give them.
    const both = join(certs.dir, 'chain-crls.pem');
    writeFileSync(both, readFileSync(certs.crl(), 'utf8') + readFileSync(inter.crl(), 'utf8'));
    const b = await verifyingBroker(both);
    expect((await rheaOpen(b.tlsPort!, ivy)).result).toBe('open');
    expect((await rheaOpen(b.tlsPort!, eve)).result).toBe('refused');
    expect((await rheaOpen(b.tlsPort!, certs.client('alice'))).result).toBe('open');
    await waitFor(() => logLines(b, 'reason', 'CERT_REVOKED').length === 1, { name: 'eve refused' });
    // (Logged after the start's warnings, so these would be in stderr by now.)
    expect(b.stderr).not.toMatch(/holds no CRL|expired/);
    await b.stop();

    // Only the intermediate's list: the root has none, so nobody is trusted (UNABLE_TO_GET_CRL), and the start says so.
    const onlyInter = await verifyingBroker(inter.crl());
    await waitFor(() => /tls-crl \S+ holds no CRL of CN=Tandem Test CA \(in tls-ca\): revocation is checked along the whole chain/.test(onlyInter.stderr), { name: 'missing-CRL warning' });
    expect((await rheaOpen(onlyInter.tlsPort!, ivy)).result).toBe('refused');
    expect((await rheaOpen(onlyInter.tlsPort!, certs.client('alice'))).result).toBe('refused');
    await waitFor(() => logLines(onlyInter, 'reason', 'UNABLE_TO_GET_CRL').length > 0, { name: 'missing CRL logged' });
    await onlyInter.stop();

    // The root revokes the intermediate: ivy's own certificate is fine, its chain is not.
    certs.revoke(inter.cert);
    const chain = join(certs.dir, 'chain-crls-2.pem');
    writeFileSync(chain, readFileSync(certs.crl(), 'utf8') + readFileSync(inter.crl(), 'utf8'));
    const revokedChain = await verifyingBroker(chain);
    expect((await rheaOpen(revokedChain.tlsPort!, ivy)).result).toBe('refused');
    expect((await rheaOpen(revokedChain.tlsPort!, certs.client('alice'))).result).toBe('open');
    await waitFor(() => logLines(revokedChain, 'reason', 'CERT_REVOKED').length === 1, { name: 'revoked intermediate logged' });
  }, 90_000);

  it('crl expired - an expired CRL is warned about at start and refuses every client of its CA (CRL_HAS_EXPIRED) until a current one and SIGHUP', async () => {
    const file = join(certs.dir, 'expiring.pem');
    copyFileSync(certs.crl({ expired: true }), file);
    const b = await verifyingBroker(file);
    await waitFor(() => /tls-crl \S+: the CRL of CN=Tandem Test CA expired at \d{4}-\d\d-\d\dT[\d:.]+Z \(its nextUpdate\): every certificate that CA issued is refused \(CRL_HAS_EXPIRED\)/.test(b.stderr), { name: 'expired-CRL warning' });
    expect((await rheaOpen(b.tlsPort!, certs.client('alice'))).result).toBe('refused');
    await waitFor(() => logLines(b, 'reason', 'CRL_HAS_EXPIRED').length > 0, { name: 'expired CRL refusal logged' });
    copyFileSync(certs.crl(), file);
    b.signal('SIGHUP');
    await waitFor(() => /TLS listener reloaded/.test(b.stderr), { name: 'reload' });
    expect((await rheaOpen(b.tlsPort!, certs.client('alice'))).result).toBe('open');
  }, 60_000);

  it('crl reload - SIGHUP: a certificate revoked after start is refused, its open connection stays; a broken new file keeps the old lists', async () => {
    const file = join(certs.dir, 'reloaded.pem');
    copyFileSync(crl, file);
    const b = await verifyingBroker(file);
    const dave = certs.client('dave');
    const opened = await rheaOpen(b.tlsPort!, dave);
    expect(opened.result).toBe('open');
    const conn = opened.connection!;
    let disconnected = false;
    conn.on('disconnected', () => (disconnected = true));

    certs.revoke(dave.cert);
    copyFileSync(certs.crl(), file);
    b.signal('SIGHUP');
    await waitFor(() => /TLS listener reloaded/.test(b.stderr), { name: 'reload' });
    expect((await rheaOpen(b.tlsPort!, dave)).result).toBe('refused');
    expect((await rheaOpen(b.tlsPort!, certs.client('alice'))).result).toBe('open');
    await waitFor(() => logLines(b, 'reason', 'CERT_REVOKED').length === 1, { name: 'dave refused' });

    // dave's connection from before the reload still carries messages both ways.
    const got = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no message over the old connection')), 10_000);
      const receiver = conn.open_receiver('reload.q');
      receiver.on('message', (ctx) => {
        clearTimeout(timer);
        resolve(String(ctx.message?.body));
      });
      receiver.on('receiver_open', () => conn.open_sender('reload.q').send({ body: 'still here' }));
    });
    expect(got).toBe('still here');
    expect(disconnected).toBe(false);

    // A half-written download: refused, logged, and the lists in force stay (dave still out, alice in).
    writeFileSync(file, '-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n');
    b.signal('SIGHUP');
    await waitFor(() => /TLS listener not reloaded, still using the files read before: tls-crl \S+ the CRL does not parse/.test(b.stderr), { name: 'bad reload logged' });
    expect(b.alive).toBe(true);
    expect((await rheaOpen(b.tlsPort!, dave)).result).toBe('refused');
    expect((await rheaOpen(b.tlsPort!, certs.client('alice'))).result).toBe('open');
    conn.close();
  }, 60_000);
});

describe('SIGHUP and the listener certificate', () => {
  it('crl reload cert - SIGHUP also picks up a renewed tls-cert/tls-key for new handshakes', async () => {
    const cert = join(certs.dir, 'live-cert.pem');
    const key = join(certs.dir, 'live-key.pem');
    copyFileSync(certs.brokerCert, cert);
    copyFileSync(certs.brokerKey, key);
    const b = await TestBroker.start({ args: ['--tls-port', '0', '--tls-cert', cert, '--tls-key', key] });
    const servedCn = () =>
      new Promise<string>((resolve, reject) => {
        const socket = tlsConnect({ host: '127.0.0.1', port: b.tlsPort!, ca: readFileSync(certs.ca), servername: 'localhost' }, () => {
          resolve(String(socket.getPeerCertificate().subject.CN));
          socket.destroy();
        });
        socket.on('error', reject);
      });
    expect(await servedCn()).toBe('tandem-broker');
    const renewed = certs.server('tandem-broker-renewed');
    copyFileSync(renewed.cert, cert);
    copyFileSync(renewed.key, key);
    b.signal('SIGHUP');
    await waitFor(() => /TLS listener reloaded/.test(b.stderr), { name: 'reload' });
    expect(await servedCn()).toBe('tandem-broker-renewed');
  }, 30_000);
});

describe('tls-crl configuration', () => {
  it('crl config - an unreadable, unparsable or misplaced CRL stops the start with exit 2 naming the key and file', async () => {
    const tlsArgs = ['--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca];
    const missing = join(certs.dir, 'no-such-crl.pem');
    await expect(TestBroker.start({ args: [...tlsArgs, '--tls-crl', missing] })).rejects.toThrow(new RegExp(`exited \\(2\\)[\\s\\S]*tandemd: cannot read tls-crl ${missing}: ENOENT`));
    const text = join(certs.dir, 'not-a-crl.pem');
    writeFileSync(text, 'this is an HTML error page, not a CRL\n');
    await expect(TestBroker.start({ args: [...tlsArgs, '--tls-crl', text] })).rejects.toThrow(new RegExp(`exited \\(2\\)[\\s\\S]*tls-crl ${text} holds no CRL`));
    const corrupt = join(certs.dir, 'corrupt-crl.pem');
    writeFileSync(corrupt, readFileSync(crl, 'utf8') + '-----BEGIN X509 CRL-----\nMIIBAAAA\n-----END X509 CRL-----\n');
    await expect(TestBroker.start({ args: [...tlsArgs, '--tls-crl', corrupt] })).rejects.toThrow(new RegExp(`exited \\(2\\)[\\s\\S]*tls-crl ${corrupt} CRL 2 of 2 does not parse`));
    // A certificate is not a CRL.
    await expect(TestBroker.start({ args: [...tlsArgs, '--tls-crl', certs.ca] })).rejects.toThrow(/exited \(2\)[\s\S]*holds no CRL/);
    await expect(TestBroker.start({ args: ['--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-crl', crl] })).rejects.toThrow(/exited \(2\)[\s\S]*tls-crl needs tls-ca/);
    await expect(TestBroker.start({ args: [...tlsArgs, '--ha-tls-crl', text] })).rejects.toThrow(new RegExp(`exited \\(2\\)[\\s\\S]*ha-tls-crl ${text} holds no CRL`));
    await expect(TestBroker.start({ args: [...tlsArgs, '--dr-tls-crl', missing] })).rejects.toThrow(new RegExp(`exited \\(2\\)[\\s\\S]*cannot read dr-tls-crl ${missing}: ENOENT`));
    // A config file too: the same refusal.
    await expect(TestBroker.start({ config: `auth = no\ntls-port = 0\ntls-cert = ${certs.brokerCert}\ntls-key = ${certs.brokerKey}\ntls-ca = ${certs.ca}\ntls-crl = ${text}\n` })).rejects.toThrow(/exited \(2\)[\s\S]*tls-crl \S+ holds no CRL/);
    // A DER CRL (as distribution points publish them) is taken as it is.
    const der = join(certs.dir, 'crl.der');
    const pem = readFileSync(crl, 'utf8');
    writeFileSync(der, Buffer.from(pem.replace(/-----[A-Z0-9 ]+-----|\s/g, ''), 'base64'));
    const b = await verifyingBroker(der);
    expect((await rheaOpen(b.tlsPort!, mallory)).result).toBe('refused');
    expect((await rheaOpen(b.tlsPort!, certs.client('alice'))).result).toBe('open');
    // A listener that asks for no client certificate has no use for the lists: said at start.
    const unused = await TestBroker.start({ args: [...tlsArgs, '--tls-crl', crl] });
    await waitFor(() => /tls-crl: the TLS listener asks for no client certificate/.test(unused.stderr), { name: 'unused-CRL warning' });
  }, 60_000);
});

describe('revoked server certificates', () => {
  it('crl cli - tandem --tls-crl refuses a broker whose certificate is revoked (exit 69), and talks to a good one', async () => {
    const revoked = await TestBroker.start({ args: ['--tls-port', '0', '--tls-cert', revokedBroker.cert, '--tls-key', revokedBroker.key] });
    const good = await TestBroker.start({ args: ['--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey] });
    const list = (b: TestBroker, extra: string[]) => tandem(['queue', 'list', '-b', `amqps://127.0.0.1:${b.tlsPort}`, '--tls-ca', certs.ca, '--timeout', '5', ...extra]);
    const refused = await list(revoked, ['--tls-crl', crl]);
    expect(refused.code).toBe(69);
    expect(refused.stderr).toMatch(/cannot connect to 127\.0\.0\.1:\d+: .*\(the broker's TLS certificate \(or a CA certificate of its chain\) is revoked by --tls-crl \(CERT_REVOKED\)\)/);
    expect((await list(good, ['--tls-crl', crl])).code).toBe(0);
    // Without the CRL the revoked broker is trusted: the refusal above is the CRL's.
    expect((await list(revoked, [])).code).toBe(0);
    const bad = await list(good, ['--tls-crl', certs.ca]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--tls-crl \S+ holds no CRL/);
    const plain = await tandem(['queue', 'list', '-b', `127.0.0.1:${good.port}`, '--tls-crl', crl]);
    expect(plain.stderr).toMatch(/--tls-crl needs an amqps:\/\/ broker address/);
  }, 60_000);

  it('crl ha - a backup with ha-tls-crl does not follow a primary whose certificate is revoked; after SIGHUP with a list that does not revoke it, it does', async () => {
    const identity: HaIdentity = await haIdentity(certs.dir);
    const [p, q] = await freePorts(2);
    const url = `amqps:127.0.0.1:${p},127.0.0.1:${q}`;
    const auth = ['--auth', 'yes', '--users-file', identity.usersFile, '--ha-username', HA_USER, '--ha-password-file', identity.passwordFile];
    const start = (port: number, tls: { cert: string; key: string }, extra: string[] = []) =>
      TestBroker.start({
        port: 0,
        args: ['--ha-cluster', 'yes', '--ha-brokers-url', url, '--ha-heartbeat-interval', '1s', ...auth, '--listen-plain', 'no', '--tls-port', String(port), '--tls-cert', tls.cert, '--tls-key', tls.key, '--tls-ca', certs.ca, ...extra],
      });
    const cli = (port: number) => ['-b', `amqps://${HA_USER}@127.0.0.1:${port}`, '--tls-ca', certs.ca];
    await start(p!, revokedBroker);
    // ha-tls-crl defaults to tls-crl (ha-tls-ca is tls-ca).
    const lists = join(certs.dir, 'ha-crl.pem');
    copyFileSync(crl, lists);
    const backup = await start(q!, { cert: certs.brokerCert, key: certs.brokerKey }, ['--tls-crl', lists]);
    // The CLI has no CRL: it promotes the primary (asking the backup where it is, a majority of two).
    const promoted = await tandem(['ha', 'promote', ...cli(p!), '--cluster-manager']);
    expect(promoted.code, promoted.stderr).toBe(0);
    await waitFor(() => /not following 127\.0\.0\.1:\d+: the peer's TLS certificate \(or a CA certificate of its chain\) is revoked by ha-tls-crl \(CERT_REVOKED\)/.test(backup.stderr), { timeout: 20_000, name: 'revoked primary refused' });
    const status = await tandem(['ha', 'status', '--json', ...cli(q!)]);
    expect(JSON.parse(status.stdout).state).toBe('joining');

    // The lists from before the revocation, and SIGHUP: the backup reads them again and follows.
    copyFileSync(crlBefore, lists);
    backup.signal('SIGHUP');
    await waitFor(async () => {
      const s = await tandem(['ha', 'status', '--json', '--timeout', '3', ...cli(q!)]);
      return s.code === 0 && JSON.parse(s.stdout).state === 'ready';
    }, { timeout: 30_000, interval: 200, name: 'backup ready' });
  }, 120_000);

  it('crl dr - a DR secondary with dr-tls-crl copies nothing from a source whose certificate is revoked, and says why', async () => {
    const identity: HaIdentity = await haIdentity(certs.dir);
    const tlsOnly = (tls: { cert: string; key: string }, extra: string[] = []) =>
      TestBroker.start({ args: ['--auth', 'yes', '--users-file', identity.usersFile, '--listen-plain', 'no', '--tls-port', '0', '--tls-cert', tls.cert, '--tls-key', tls.key, ...extra] });
    const source = await tlsOnly(revokedBroker);
    const secondary = await tlsOnly({ cert: certs.brokerCert, key: certs.brokerKey }, ['--dr-tls-ca', certs.ca, '--dr-tls-crl', crl]);
    const cli = (b: TestBroker) => ['-b', `amqps://${HA_USER}@127.0.0.1:${b.tlsPort}`, '--tls-ca', certs.ca];
    expect((await tandem(['queue', 'add', 'audit', '--durable', ...cli(source)])).code).toBe(0);
    const add = await tandem(['dr', 'add', 'audit', '--source', `amqps://${HA_USER}@127.0.0.1:${source.tlsPort}`, '--source-password-file', identity.passwordFile, ...cli(secondary)]);
    expect(add.code, add.stderr).toBe(0);
    const row = await waitFor(async () => {
      const r = await tandem(['dr', 'status', '--json', ...cli(secondary)]);
      if (r.code !== 0) return undefined;
      const found = (JSON.parse(r.stdout) as Array<Record<string, unknown>>).find((x) => x.queue === 'audit');
      return found && /revoked by dr-tls-crl \(CERT_REVOKED\)/.test(String(found['last-error'])) ? found : undefined;
    }, { timeout: 20_000, interval: 200, name: 'DR last-error names the CRL' });
    expect(row!.link).not.toBe('connected');
  }, 60_000);
});

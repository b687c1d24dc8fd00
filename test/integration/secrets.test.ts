// Secrets stay secret: an HA pair whose brokers know each other's password three ways
// (in ha-brokers-url, in TANDEM_HA_PASSWORD, in ha-password-file), and a DR copy whose
// source first cannot be reached, then refuses a wrong password, then replicates with the
// right one. Afterwards every output of the run (logs, ha status, DR status, metrics,
// every file in every data directory but the 0600 credentials file) is searched for
// both passwords. Plus the misconfigurations refused at start, each with its reason.
import { get } from 'node:http';
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { TestBroker, killAllBrokers, tandemdBin, launcherNodeOptions, waitFor } from '../helpers/broker.js';
import { freePorts } from '../helpers/cluster.js';
import { tandem } from '../helpers/tandem-cli.js';
import { spawnSync } from 'node:child_process';

const PASSWORD = 'Tandem-S3cret-pw-71';
const WRONG = 'Wrong-Guess-pw-42';
const dir = mkdtempSync(join(tmpdir(), 'tandem-secrets-test-'));
const usersFile = join(dir, 'users');
const passwordFile = join(dir, 'ha-password');

beforeAll(async () => {
  writeFileSync(usersFile, `ha:admin:${await hashPassword(PASSWORD)}\ndr:admin:${await hashPassword(PASSWORD)}\n`, { mode: 0o600 });
  writeFileSync(passwordFile, `${PASSWORD}\n`, { mode: 0o600 });
});

afterAll(async () => {
  await killAllBrokers();
  rmSync(dir, { recursive: true, force: true });
});

function scrape(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve(text));
    }).on('error', reject);
  });
}

/** Every file under a directory, as text (journal segments included). */
function filesUnder(root: string): Array<{ path: string; text: string }> {
  const out: Array<{ path: string; text: string }> = [];
  for (const name of readdirSync(root, { recursive: true }) as string[]) {
    const path = join(root, name);
    if (statSync(path).isFile()) out.push({ path, text: readFileSync(path).toString('latin1') });
  }
  return out;
}

describe('secrets', () => {
  it('secrets - no password in any log, status, metrics or journal file, through an unreachable source and a wrong password', async () => {
    const [p1, p2, dead] = await freePorts(3);
    const peers = `127.0.0.1:${p1},127.0.0.1:${p2}`;
    const common = ['--auth', 'yes', '--users-file', usersFile, '--ha-cluster', 'yes', '--ha-heartbeat-interval', '1s', '--ha-backup-timeout', '3s', '--metrics-port', '0'];
    // b: the password from the environment, the user in the URL.
    const b = await TestBroker.start({ port: p2, args: [...common, '--ha-brokers-url', `ha@${peers}`], env: { TANDEM_HA_PASSWORD: PASSWORD } });
    // a: the documented form, credentials in ha-brokers-url and no ha-username; it must join (not go ANONYMOUS).
    const a = await TestBroker.start({ port: p1, config: `ha-brokers-url=ha/${PASSWORD}@${peers}\n`, args: common });
    const cli = { env: { TANDEM_PASSWORD: PASSWORD } };
    const promoted = await tandem(['ha', 'promote', '-b', `ha@127.0.0.1:${p2}`, '--cluster-manager'], cli);
    expect(promoted.code, promoted.stderr).toBe(0);
    await waitFor(async () => JSON.parse((await tandem(['ha', 'status', '-b', `ha@127.0.0.1:${p1}`, '--json'], cli)).stdout || '{}').state === 'ready', { timeout: 30_000, name: 'a ready' });
    // A third way (ha-password-file) on a third broker; it only has to start and ask.
    const outputs: string[] = [];
    for (const port of [p1, p2]) {
      const r = await tandem(['ha', 'status', '-b', `ha@127.0.0.1:${port}`, '--json'], cli);
      expect(r.code, r.stderr).toBe(0);
      outputs.push(r.stdout, r.stderr);
    }
    expect(outputs[0]).toMatch(/"brokers-url":"ha\/\*\*\*@127\.0\.0\.1/);

    // The DR copy, standalone on loopback.
    const s = await TestBroker.start({ args: ['--metrics-port', '0'] });
    const drPasswordFile = join(dir, 'dr-password');
    writeFileSync(drPasswordFile, `${PASSWORD}\n`, { mode: 0o600 });
    // 1. a source nobody listens on
    let r = await tandem(['dr', 'add', 'far', '--source', `dr@127.0.0.1:${dead}`, '--source-password-file', drPasswordFile, '-b', s.url]);
    expect(r.code, r.stderr).toBe(0);
    outputs.push(r.stdout, r.stderr);
    // 2. the right source with a wrong password, given in the URL
    r = await tandem(['dr', 'add', 'orders', '--source', `dr/${WRONG}@${peers}`, '-b', s.url]);
    expect(r.code, r.stderr).toBe(0);
    outputs.push(r.stdout, r.stderr);
    const status = async () => {
      const st = await tandem(['dr', 'status', '-b', s.url, '--json']);
      outputs.push(st.stdout, st.stderr);
      return JSON.parse(st.stdout) as Array<{ queue: string; link: string; 'last-error': string | null; depth: number }>;
    };
    await waitFor(async () => (await status()).every((q) => q['last-error'] !== null), { timeout: 30_000, name: 'both DR queues report an error' });
    // 3. the right password, from a file
    r = await tandem(['dr', 'add', 'orders', '--source', `dr@${peers}`, '--source-password-file', drPasswordFile, '-b', s.url]);
    expect(r.code, r.stderr).toBe(0);
    const sent = await tandem(['queue', 'add', 'orders', '--durable', '-b', `ha@127.0.0.1:${p2}`], cli);
    expect(sent.code, sent.stderr).toBe(0);
    const { TestClient } = await import('../helpers/rhea-client.js');
    const producer = await TestClient.connect({ port: p2, username: 'ha', password: PASSWORD });
    const outcomes = await producer.send('orders', Array.from({ length: 20 }, (_, i) => ({ body: `m${i}`, durable: true })));
    expect(outcomes.every((o) => o.state === 'accepted')).toBe(true);
    await producer.close();
    await waitFor(async () => (await status()).find((q) => q.queue === 'orders')?.depth === 20, { timeout: 30_000, name: 'DR copy has the messages' });
    const final = await status();
    expect(final.find((q) => q.queue === 'far')?.['last-error']).toMatch(/no tandem primary found|refused|ECONNREFUSED/);

    for (const broker of [a, b, s]) outputs.push(await scrape(broker.metricsPort!));
    for (const broker of [a, b, s]) await broker.stop();
    // The password lives apart from the journal, readable by the broker's user only.
    const credentials = join(s.dataDir, 'dr-credentials');
    expect(statSync(credentials).mode & 0o777).toBe(0o600);
    expect(readFileSync(credentials, 'utf8')).toContain(PASSWORD);
    const searched = [...outputs.map((text, i) => ({ path: `output ${i}`, text })), ...[a, b, s].flatMap((x) => [{ path: `${x.port} stdout`, text: x.stdout }, { path: `${x.port} stderr`, text: x.stderr }])];
    for (const x of [a, b, s]) searched.push(...filesUnder(x.dataDir).filter((f) => f.path !== credentials));
    expect(searched.length).toBeGreaterThan(10);
    for (const { path, text } of searched) {
      expect(text.includes(PASSWORD), `${path} holds the password`).toBe(false);
      expect(text.includes(WRONG), `${path} holds the wrong password`).toBe(false);
    }
    // The failures were logged (with the credential cut out).
    expect(s.stderr).toMatch(/DR: no source primary found/);
  }, 180_000);

  it('secrets - ha-password-file gives the HA password, and --ha-password on the command line is warned about', async () => {
    const [port] = await freePorts(1);
    const withFile = await TestBroker.start({ port, args: ['--auth', 'yes', '--users-file', usersFile, '--ha-cluster', 'yes', '--ha-brokers-url', `127.0.0.1:${port}`, '--ha-username', 'ha', '--ha-password-file', passwordFile] });
    expect((await tandem(['ha', 'promote', '-b', `ha@127.0.0.1:${port}`, '--cluster-manager'], { env: { TANDEM_PASSWORD: PASSWORD } })).code).toBe(0);
    await withFile.stop();
    const inArgs = await TestBroker.start({ args: ['--ha-password', PASSWORD] });
    await waitFor(() => /ha-password was given on the command line/.test(inArgs.stderr), { name: 'warning' });
    await inArgs.stop();
    expect(inArgs.stderr).not.toContain(PASSWORD);
  }, 60_000);
});

/** Start tandemd expecting it to refuse: its exit code and what it said. */
function refusedStart(args: string[], config?: { text: string; mode: number }): { code: number | null; stderr: string } {
  const d = mkdtempSync(join(dir, 'refused-'));
  const argv = [...launcherNodeOptions, tandemdBin, '--data-dir', join(d, 'data'), '--port', '0', ...args];
  if (config) {
    const path = join(d, 'tandemd.conf');
    writeFileSync(path, config.text);
    chmodSync(path, config.mode);
    argv.push('--config', path);
  }
  const r = spawnSync(process.execPath, argv, { encoding: 'utf8', timeout: 20_000 });
  return { code: r.status, stderr: r.stderr };
}

describe('misconfiguration refused at start', () => {
  it('config - credentials in ha-brokers-url with ha-mechanism ANONYMOUS are refused, naming both', () => {
    const r = refusedStart(['--ha-cluster', 'yes', '--ha-brokers-url', `ha/${PASSWORD}@127.0.0.1:5`, '--ha-mechanism', 'ANONYMOUS']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/carries credentials.*ANONYMOUS/);
    expect(r.stderr).not.toContain(PASSWORD);
  });

  it('config - a user in ha-brokers-url without any password is refused', () => {
    const r = refusedStart(['--ha-cluster', 'yes', '--ha-brokers-url', 'ha@127.0.0.1:5']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/needs ha-username and a password/);
  });

  it('config - ha-cluster=yes with auth=no on a non-loopback address is refused', () => {
    const r = refusedStart([], { text: 'host=0.0.0.0\nauth=no\nha-cluster=yes\nha-brokers-url=127.0.0.1:5\n', mode: 0o600 });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/ha-cluster=yes with auth=no on 0\.0\.0\.0/);
  });

  it('config - a world-readable config file holding a password is refused with auth=yes from a config file', () => {
    const r = refusedStart([], { text: `host=127.0.0.1\nauth=yes\nusers-file=${usersFile}\nha-cluster=yes\nha-brokers-url=ha/${PASSWORD}@127.0.0.1:5\n`, mode: 0o644 });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/config file .* is readable by every user/);
    expect(r.stderr).not.toContain(PASSWORD);
  });

  it('config - a world-readable tls-key is refused with auth=yes from a config file', () => {
    // Any readable PEM will do: the mode is checked before the listener loads it.
    const key = join(dir, 'listener-open.key');
    writeFileSync(key, '-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n');
    chmodSync(key, 0o644);
    const r = refusedStart([], { text: `host=127.0.0.1\nauth=yes\nusers-file=${usersFile}\ntls-port=0\ntls-cert=${key}\ntls-key=${key}\n`, mode: 0o600 });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/tls-key \(a private key\) .* is readable by every user/);
  });

  it('config - a world-readable users file is refused with auth=yes from a config file, warned about without one', async () => {
    const open = join(dir, 'users-open');
    writeFileSync(open, readFileSync(usersFile));
    chmodSync(open, 0o644);
    const r = refusedStart([], { text: `host=127.0.0.1\nauth=yes\nusers-file=${open}\n`, mode: 0o600 });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/users-file .* is readable by every user/);
    const dev = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', open] });
    await waitFor(() => /users-file .* is readable by every user/.test(dev.stderr), { name: 'warning' });
    await dev.stop();
  }, 30_000);
});

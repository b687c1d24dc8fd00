// The DR round trip between sites whose brokers require credentials (auth=yes, a
// users file per site, each site's bridge logging in to the other as a DR user of
// that site): a planned switchover and back, then a disaster, reattach and a
// switchover home, with every step's peer requests (fence, follow, the fenced side's
// questions, the activated side telling the old source) made with the passwords the
// operator gave once. No password is in a journal, a log or the CLI's output, and the
// dr-credentials files are 0600. A switchover whose reverse source the old source could
// not log in with (no password, or a wrong one) is refused before anything changes.
import { readdirSync, readFileSync, statSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { hashPassword } from '../../src/admin/users.js';
import { TestBroker, waitFor } from '../helpers/broker.js';
import { tandem } from '../helpers/tandem-cli.js';
import { contents, drFlush, drRowOf, loginAs, range, receive, send, twoSites } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'tandem-dr-credentials-'));
// Each site: its operators' admin, and the admin identity the other site's broker uses.
const OPS = { user: 'ops', password: 'ops-Secret-4711' };
const TO_A = { user: 'dr-to-a', password: 'a-Bridge-Secret-8845' }; // site B's brokers at site A
const TO_B = { user: 'dr-to-b', password: 'b-Bridge-Secret-9921' }; // site A's brokers at site B
const SECRETS = [OPS.password, TO_A.password, TO_B.password];

async function usersFile(name: string, users: Array<{ user: string; password: string }>): Promise<string> {
  const path = join(dir, name);
  const lines = await Promise.all(users.map(async (u) => `${u.user}:admin:${await hashPassword(u.password)}`));
  writeFileSync(path, `${lines.join('\n')}\n`, { mode: 0o600 });
  return path;
}

function passwordFile(name: string, password: string): string {
  const path = join(dir, name);
  writeFileSync(path, `${password}\n`, { mode: 0o600 });
  return path;
}

/** The CLI as an operator of a site runs it: -b ops@host, the password in TANDEM_PASSWORD. */
const cli = (args: string[]) => tandem(args, { env: { TANDEM_PASSWORD: OPS.password } });
const ok = async (args: string[]) => {
  const r = await cli(args);
  expect(r.code, `tandem ${args.join(' ')}: ${r.stderr}`).toBe(0);
  for (const s of SECRETS) expect(r.stdout + r.stderr).not.toContain(s);
  return r;
};

/** Every file under a data dir but dr-credentials (journal, checkpoints, state), none may hold a password. */
function filesHoldingSecrets(dataDir: string): string[] {
  const found: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name !== 'dr-credentials' && SECRETS.some((s) => readFileSync(p).includes(s))) found.push(p);
    }
  };
  walk(dataDir);
  return found;
}

describe('DR round trip between sites that require credentials', () => {
  let a: TestBroker;
  let b: TestBroker;
  let args: { a: string[]; b: string[] };
  const at = (x: TestBroker) => `${OPS.user}@${x.url}`;

  twoSites(
    (x, y) => {
      [a, b] = [x, y];
      loginAs(a.port, OPS.user, OPS.password);
      loginAs(b.port, OPS.user, OPS.password);
    },
    async () => {
      args = {
        a: ['--auth', 'yes', '--users-file', await usersFile('users-a', [OPS, TO_A])],
        b: ['--auth', 'yes', '--users-file', await usersFile('users-b', [OPS, TO_B])],
      };
      return { a: { args: args.a }, b: { args: args.b } };
    },
  );
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** The queue served by `source`, passive and connected at `copy`, both at `epoch`. */
  async function pair(source: TestBroker, copy: TestBroker, queue: string, epoch: number): Promise<void> {
    let seen = '';
    await waitFor(
      async () => {
        const [s, c] = await Promise.all([drRowOf(source.port, queue).catch(() => undefined), drRowOf(copy.port, queue).catch(() => undefined)]);
        seen = JSON.stringify({ source: s, copy: c });
        return s?.role === 'source' && c?.role === 'passive copy' && c.link === 'connected' && s.epoch === epoch && c.epoch === epoch;
      },
      { timeout: 30_000, interval: 200, name: `${queue}: served at ${source.port}, copied at ${copy.port}, epoch ${epoch}` },
    ).catch((err: Error) => {
      throw new Error(`${err.message}; last: ${seen}`);
    });
  }

  it('DR credentials - switchover and back, disaster, reattach, switchover home: every step authenticated, every message once, no password anywhere it should not be', async () => {
    await ok(['queue', 'add', 'orders', '--durable', '-b', at(a)]);
    await ok(['dr', 'add', 'orders', '--source', `${TO_A.user}@${a.url}`, '--source-password-file', passwordFile('to-a', TO_A.password), '-b', at(b)]);
    await send(a.port, 'orders', range('a', 0, 500));
    await drFlush(a.port, b.port);
    await pair(a, b, 'orders', 1);

    // Planned switchover to B; A follows B with B's identity for it, given once as a file.
    await ok(['dr', 'switchover', 'orders', '-b', at(b), '--reverse-source', `${TO_B.user}@${b.url}`, '--reverse-source-password-file', passwordFile('to-b', TO_B.password), '--timeout', '20']);
    await pair(b, a, 'orders', 2);
    await send(b.port, 'orders', range('b', 0, 300));
    expect(await receive(b.port, 'orders', 100)).toEqual(range('a', 0, 100));
    await drFlush(b.port, a.port);
    expect(await contents(a.port, 'orders')).toEqual([...range('a', 100, 500), ...range('b', 0, 300)]);

    // And back to A: B's bridge to A logs in with the password it was given at dr add.
    await ok(['dr', 'switchover', 'orders', '-b', at(a), '--reverse-source', `${TO_A.user}@${a.url}`, '--timeout', '20']);
    await pair(a, b, 'orders', 3);
    await send(a.port, 'orders', range('c', 0, 200));
    await drFlush(a.port, b.port);
    const beforeDisaster = [...range('a', 100, 500), ...range('b', 0, 300), ...range('c', 0, 200)];
    expect(await contents(b.port, 'orders')).toEqual(beforeDisaster);

    // Disaster at A: B is activated, used, and tells A (logging in with A's DR identity) once A is back.
    await a.kill();
    await waitFor(async () => (await drRowOf(b.port, 'orders')).link !== 'connected', { timeout: 30_000, name: 'B sees A gone' });
    await ok(['dr', 'activate', 'orders', '-b', at(b)]);
    await send(b.port, 'orders', range('d', 0, 100));
    expect(await receive(b.port, 'orders', 50)).toEqual(beforeDisaster.slice(0, 50));
    a = await TestBroker.start({ port: a.port, dataDir: a.dataDir, args: args.a });
    await waitFor(async () => (await drRowOf(a.port, 'orders')).role === 'diverged', { timeout: 30_000, name: 'A demoted by B' });

    // Reattach A to B (A still holds B's DR identity from the first switchover), then move home.
    await ok(['dr', 'reattach', 'orders', '--source', `${TO_B.user}@${b.url}`, '-b', at(a)]);
    await waitFor(async () => (await drRowOf(a.port, 'orders')).link === 'connected', { timeout: 30_000, name: 'A follows B' });
    await drFlush(b.port, a.port);
    const atB = await contents(b.port, 'orders');
    expect(atB).toEqual([...beforeDisaster.slice(50), ...range('d', 0, 100)]);
    expect(await contents(a.port, 'orders')).toEqual(atB);
    await ok(['dr', 'switchover', 'orders', '-b', at(a), '--reverse-source', `${TO_A.user}@${a.url}`, '--timeout', '20']);
    const epoch = (await drRowOf(a.port, 'orders')).epoch;
    await pair(a, b, 'orders', epoch);
    expect(await receive(a.port, 'orders', atB.length)).toEqual(atB);

    // Passwords: only in each site's dr-credentials (0600), never in journals, state or logs.
    for (const x of [a, b]) {
      expect(filesHoldingSecrets(x.dataDir)).toEqual([]);
      expect(statSync(join(x.dataDir, 'dr-credentials')).mode & 0o777).toBe(0o600);
      for (const s of SECRETS) expect(x.stdout + x.stderr).not.toContain(s);
    }
    expect(readFileSync(join(a.dataDir, 'dr-credentials'), 'utf8')).toContain(TO_B.password);
    expect(readFileSync(join(b.dataDir, 'dr-credentials'), 'utf8')).toContain(TO_A.password);
  }, 240_000);

  it('DR credentials - a switchover whose reverse source this site would turn away is refused before anything changes', async () => {
    await ok(['queue', 'add', 'audit', '--durable', '-b', at(a)]);
    await ok(['dr', 'add', 'audit', '--source', `${TO_A.user}@${a.url}`, '--source-password-file', passwordFile('to-a-2', TO_A.password), '-b', at(b)]);
    await send(a.port, 'audit', range('x', 0, 50));
    await drFlush(a.port, b.port, 30_000, ['audit']);
    // The operator's -b ops@B with TANDEM_PASSWORD: the default reverse source names a user but carries no password.
    const noPassword = await cli(['dr', 'switchover', 'audit', '-b', at(b), '--timeout', '10']);
    expect(noPassword.code, noPassword.stderr).toBe(8);
    // The old source tries to log in as it would have to, and cannot: it fences nothing.
    expect(noPassword.stderr).toMatch(/old source cannot log in to the reverse source .* as ops .*nothing was fenced/);
    const wrong = await cli(['dr', 'switchover', 'audit', '-b', at(b), '--reverse-source', `${TO_B.user}/not-the-password@${b.url}`, '--timeout', '10']);
    expect(wrong.code, wrong.stderr).toBe(8);
    expect(wrong.stderr).toMatch(/reverse source .*refused by this site/);
    expect(wrong.stderr).not.toContain('not-the-password');
    // Nothing changed: A serves, B copies, at the same epoch; A's clients are served.
    await pair(a, b, 'audit', 1);
    await send(a.port, 'audit', ['x-after']);
    await drFlush(a.port, b.port, 30_000, ['audit']);
    expect(await contents(b.port, 'audit')).toEqual([...range('x', 0, 50), 'x-after']);
  }, 120_000);
});

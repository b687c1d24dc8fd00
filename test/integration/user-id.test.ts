// Identities against real tandemd processes: a message's user-id (spec 3.2.4) must be
// the user its sender logged in as, with PLAIN or EXTERNAL, or absent (rhea senders,
// user_id as a Buffer); a SASL PLAIN authzid other than the authcid fails the login
// (RFC 4616 section 2: tandem has no proxy authorisation), written as raw SASL frames
// since rhea sends none.
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FREE_FAILURES } from '../../src/amqp/login-throttle.js';
import { SASL_HEADER, perf } from '../helpers/amqp-frames.js';
import { TestBroker, killAllBrokers, waitFor } from '../helpers/broker.js';
import { makeCerts, type TestCerts } from '../helpers/certs.js';
import { RawPeer } from '../helpers/raw-amqp.js';
import { TestClient } from '../helpers/rhea-client.js';
import { tandem } from '../helpers/tandem-cli.js';

let certs: TestCerts;
let usersFile: string;
const opened: TestClient[] = [];

async function addUser(args: string[], input?: string): Promise<void> {
  const r = await tandem(['user', 'add', ...args, '-f', usersFile], { input });
  expect(r.code, r.stderr).toBe(0);
}

async function as(port: number, user: string): Promise<TestClient> {
  const c = await TestClient.connect({ port, username: user, password: `${user}-pw` });
  opened.push(c);
  return c;
}

const withUserId = (body: string, userId?: string) => (userId === undefined ? { body } : { body, user_id: Buffer.from(userId) });

/** A SASL PLAIN login written by hand ("authzid NUL authcid NUL password"): the sasl-outcome code. */
async function plainLogin(port: number, authzid: string, user: string, password: string): Promise<number> {
  const peer = await RawPeer.connect(port);
  try {
    peer.write(SASL_HEADER, perf.saslInit('PLAIN', Buffer.from(`${authzid}\0${user}\0${password}`, 'utf8')));
    const outcome = await waitFor(() => peer.frames().find((f) => f.body?.def.name === 'sasl-outcome'), { timeout: 15_000, name: 'sasl-outcome' });
    return outcome.body!.fields.code as number;
  } finally {
    peer.destroy();
  }
}

/** The broker's log lines (pino JSON, on stderr) whose msg starts with `prefix`. */
function logged(broker: TestBroker, prefix: string): Array<Record<string, unknown>> {
  return broker.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => typeof l.msg === 'string' && l.msg.startsWith(prefix));
}

beforeAll(async () => {
  certs = makeCerts();
  usersFile = `${certs.dir}/users`;
  for (const name of ['alice', 'bob', 'carol']) await addUser([name, '--password-file', '-'], `${name}-pw\n`);
  await addUser(['root', '--admin', '--password-file', '-'], 'root-pw\n');
});

afterEach(async () => {
  await Promise.all(opened.splice(0).map((c) => c.close()));
  await killAllBrokers();
});

afterAll(() => certs.remove());

describe('user-id', () => {
  it('auth=yes - a sender\'s own user-id or none is accepted; another user\'s is rejected (amqp:unauthorized-access), and the link goes on', async () => {
    const b = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
    const alice = await as(b.port, 'alice');
    const sender = await alice.openSender('uid.q');
    const outcomes = await alice.send(sender, [withUserId('own', 'alice'), withUserId('forged', 'bob'), withUserId('none'), withUserId('prefix', 'alic'), withUserId('after', 'alice')]);
    expect(outcomes.map((o) => o.state)).toEqual(['accepted', 'rejected', 'accepted', 'rejected', 'accepted']);
    expect(outcomes[1]!.error?.condition).toBe('amqp:unauthorized-access');
    expect(outcomes[1]!.error?.description).toMatch(/user-id "bob" is not the user this connection logged in as \('alice'\)/);
    expect(outcomes[3]!.error?.condition).toBe('amqp:unauthorized-access');
    expect(alice.closed).toBe(false);

    // Through the anonymous relay as well (each message's `to`).
    const relay = await alice.send(undefined, [{ to: 'uid.q', body: 'relayed', user_id: Buffer.from('carol') }]);
    expect(relay.map((o) => [o.state, o.error?.condition])).toEqual([['rejected', 'amqp:unauthorized-access']]);

    // What a consumer takes carries only the sender's name.
    const bob = await as(b.port, 'bob');
    const got = await bob.receiveAndAccept('uid.q', 3);
    expect(got.map((m) => [m.body, m.user_id === undefined ? undefined : Buffer.from(m.user_id as Buffer).toString()])).toEqual([
      ['own', 'alice'],
      ['none', undefined],
      ['after', 'alice'],
    ]);
    // An admin may send in anyone's name (tandem ha diverged republish sends other users' messages again).
    const root = await as(b.port, 'root');
    expect((await root.send('uid.q', [withUserId('republished', 'bob')])).map((o) => o.state)).toEqual(['accepted']);
    // Logged, with the user.
    const refused = await waitFor(() => logged(b, 'message refused: its user-id "bob"')[0], { name: 'refusal logged' });
    expect(refused).toMatchObject({ user: 'alice', level: 40 });
  });

  it('auth=no - user-ids are not checked (every connection counts as an admin), but a PLAIN login asking to act as another user still fails', async () => {
    const b = await TestBroker.start({ args: ['--auth', 'no', '--users-file', usersFile] });
    const anonymous = await TestClient.connect({ port: b.port });
    opened.push(anonymous);
    expect((await anonymous.send('uid.q', [withUserId('a', 'bob')])).map((o) => o.state)).toEqual(['accepted']);
    const alice = await as(b.port, 'alice');
    expect((await alice.send('uid.q', [withUserId('b', 'alice'), withUserId('c', 'bob')])).map((o) => o.state)).toEqual(['accepted', 'accepted']);
    expect(await plainLogin(b.port, 'bob', 'alice', 'alice-pw')).toBe(1);
  });

  it('EXTERNAL - the user the client certificate names (as the ACL knows it) is the one its messages may carry', async () => {
    const b = await TestBroker.start({
      args: ['--auth', 'yes', '--users-file', usersFile, '--tls-port', '0', '--tls-cert', certs.brokerCert, '--tls-key', certs.brokerKey, '--tls-ca', certs.ca, '--tls-external-user', 'cn'],
    });
    const { cert, key } = certs.client('carol');
    const carol = await TestClient.connect({ port: b.tlsPort!, transport: 'tls', ca: readFileSync(certs.ca), cert: readFileSync(cert), key: readFileSync(key), enable_sasl_external: true } as never);
    opened.push(carol);
    const outcomes = await carol.send('uid.q', [withUserId('own', 'carol'), withUserId('forged', 'alice'), withUserId('email', 'carol@example.test')]);
    expect(outcomes.map((o) => [o.state, o.error?.condition])).toEqual([
      ['accepted', undefined],
      ['rejected', 'amqp:unauthorized-access'],
      ['rejected', 'amqp:unauthorized-access'],
    ]);
  });
});

describe('sasl plain authzid', () => {
  it('another user: sasl-outcome auth and a WARN naming both, as a failed login; the authcid itself: logged in', async () => {
    const b = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
    expect(await plainLogin(b.port, 'bob', 'alice', 'alice-pw')).toBe(1);
    expect(await plainLogin(b.port, 'alice', 'alice', 'alice-pw')).toBe(0);
    expect(await plainLogin(b.port, '', 'alice', 'alice-pw')).toBe(0);
    const failed = await waitFor(() => logged(b, 'authentication failed').length > 0 && logged(b, 'authentication failed'), { name: 'failure logged' });
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ level: 40, remote: '127.0.0.1', user: 'alice', asked: 'bob' });
    expect(`${b.stdout}${b.stderr}`).not.toContain('alice-pw');
  });

  it('another user: counted by the login throttle like a wrong password', async () => {
    const b = await TestBroker.start({ args: ['--auth', 'yes', '--users-file', usersFile] });
    for (let i = 0; i <= FREE_FAILURES; i++) expect(await plainLogin(b.port, 'bob', 'carol', 'carol-pw')).toBe(1);
    // The throttle's free failures are used up: the next attempt waited (the delay it chose is logged).
    const lines = await waitFor(() => logged(b, 'authentication failed').length > FREE_FAILURES && logged(b, 'authentication failed'), { name: 'failures logged' });
    const delays = lines.map((l) => l.delayMs);
    expect(delays.slice(0, FREE_FAILURES)).toEqual(Array(FREE_FAILURES).fill(0));
    expect(delays[FREE_FAILURES]).toBeGreaterThan(0);
  });
});
